#!/bin/sh
# Install the Debian packages a build or a test run needs, when missing.
# Usage: scripts/deps.sh build|test|lab
#        scripts/deps.sh list build|test|lab   (print the set, install nothing)
# lab: what a lab stack's root (tests/lab/mkroot) needs to build the
# project and run its stock pass: test's set without packaging and cross
# tools.
# As root it runs apt-get; otherwise it prints the exact command to run.
# SPDX-License-Identifier: GPL-2.0-or-later
set -eu

build="gcc make pkg-config libjson-c-dev libncurses-dev libmicrohttpd-dev
libcap-ng-dev zlib1g-dev libzstd-dev libyaml-dev libcrypt-dev"
test="$build libvirt-dev libcmocka-dev clang libclang-rt-dev llvm
qemu-system-x86 qemu-system-arm jq tmux prometheus wrk binutils socat procps psmisc
libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
curl openssl xz-utils python3 python3-yaml debootstrap libfuse3-dev btrfs-progs
debhelper dpkg-dev lintian gcc-aarch64-linux-gnu qemu-user"
lab="$build libvirt-dev libcmocka-dev
qemu-system-x86 jq tmux prometheus wrk binutils socat procps psmisc
libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients iproute2
curl openssl xz-utils python3 python3-yaml"

list=0
[ "${1:-}" = list ] && { list=1; shift; }
case "${1:-build}" in
build) want=$build ;;
test) want=$test ;;
lab) want=$lab ;;
*) echo "usage: $0 [list] build|test|lab" >&2; exit 2 ;;
esac
[ "$list" = 1 ] && { echo $want; exit 0; }

missing=""
for p in $want; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0

cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" != 0 ]; then
	echo "missing packages:$missing" >&2
	echo "run as root: apt-get update && $cmd" >&2
	exit 1
fi
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 || true
$cmd >&2
