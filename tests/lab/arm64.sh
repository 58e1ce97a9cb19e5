# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Debian arm64 packages for an x86_64 host, without touching its apt
# configuration or dpkg database (sourced by tests/integration/cross_arm64.sh,
# lab_arm64.sh and tests/lab/kvmlab-arm64):
#
#   arm64_sysroot        a sysroot of Debian's arm64 -dev packages (and the
#                        runtime libraries they pull in), for
#                        gcc-aarch64-linux-gnu; sets ARM64_SYSROOT.
#   arm64_fetch DIR PKG...  download PKG (no dependencies; linux-image-arm64:
#                        the kernel it names) and unpack them
#                        into DIR (made aside, renamed when complete).
#
# apt-get runs with a private state directory (APT::Architecture=arm64),
# from the sources this system's apt already uses. Everything is cached
# outside the tree: KVMSTATS_CROSS_CACHE, default ~/.cache/kvmstats.
# Each step is bounded in time; on failure, the last lines of apt's log
# are in $ARM64_LOG. Two runs never make one cache at once (flock).

ARM64_PKGS="libc6-dev linux-libc-dev libjson-c-dev libncurses-dev libmicrohttpd-dev
libcap-ng-dev zlib1g-dev libzstd-dev libyaml-dev libcrypt-dev libcmocka-dev"
ARM64_CACHE=${KVMSTATS_CROSS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvmstats}
# A new package list is a new sysroot.
ARM64_SYSROOT=$ARM64_CACHE/sysroot-arm64-$(echo "$ARM64_PKGS" | md5sum | cut -c1-8)
ARM64_LOG=$ARM64_CACHE/apt-arm64.log

# _arm64_apt ARGS...: apt-get with the private arm64 state ($ARM64_CACHE/apt-arm64).
_arm64_apt() {
	local A=$ARM64_CACHE/apt-arm64
	timeout 600 apt-get -q -o APT::Architecture=arm64 -o APT::Architectures::=arm64 \
		-o Dir::State="$A/state" -o Dir::State::status="$A/state/status" \
		-o Dir::Cache="$A/cache" -o Debug::NoLocking=1 \
		-o APT::Sandbox::User="$(id -un)" "$@" >>"$ARM64_LOG" 2>&1
}

# _arm64_update: a fresh private state with up-to-date lists.
_arm64_update() {
	local A=$ARM64_CACHE/apt-arm64
	rm -rf "$A"
	mkdir -p "$A/state/lists/partial" "$A/cache/archives/partial" || return 1
	: >"$A/state/status"
	_arm64_apt update
}

# _arm64_unpack DIR: unpack the downloaded .debs into DIR.new, make its
# absolute symlinks relative (a linker or a 9p share would follow them
# out of DIR), rename it DIR.
_arm64_unpack() {
	local dest=$1 new=$1.new deb l
	rm -rf "$new" && mkdir -p "$new" || return 1
	for deb in "$ARM64_CACHE"/apt-arm64/cache/archives/*.deb; do
		dpkg-deb -x "$deb" "$new" || return 1
	done
	find "$new" -type l -lname '/*' | while read -r l; do
		ln -sfn "$(realpath -ms --relative-to="$(dirname "$l")" \
			"$new$(readlink "$l")")" "$l"
	done
	rm -rf "$ARM64_CACHE/apt-arm64" "$dest" && mv "$new" "$dest"
}

# _arm64_locked CMD...: CMD under the cache's lock.
_arm64_locked() {
	local rc
	mkdir -p "$ARM64_CACHE" || return 1
	exec 8>"$ARM64_CACHE/.lock-arm64"
	flock 8
	"$@"
	rc=$?
	exec 8>&-
	return $rc
}

_arm64_make_sysroot() {
	[ -d "$ARM64_SYSROOT" ] && return 0
	: >"$ARM64_LOG"
	_arm64_update &&
		_arm64_apt install -y --download-only --no-install-recommends $ARM64_PKGS &&
		_arm64_unpack "$ARM64_SYSROOT"
}
arm64_sysroot() { _arm64_locked _arm64_make_sysroot; }

# _arm64_depends PKG: the package a metapackage depends on first
# (linux-image-arm64: the suite's current arm64 kernel).
_arm64_depends() {
	local A=$ARM64_CACHE/apt-arm64
	timeout 60 apt-cache -o APT::Architecture=arm64 -o APT::Architectures::=arm64 \
		-o Dir::State="$A/state" -o Dir::State::status="$A/state/status" \
		-o Dir::Cache="$A/cache" depends "$1" 2>>"$ARM64_LOG" |
		awk '/ Depends: / { print $2; exit }'
}

_arm64_fetch() {
	local dest=$1 p pkgs=""
	shift
	: >"$ARM64_LOG"
	_arm64_update || return 1
	for p in "$@"; do
		case $p in
		linux-image-arm64) p=$(_arm64_depends "$p") && [ -n "$p" ] || return 1 ;;
		esac
		pkgs="$pkgs $p"
	done
	(cd "$ARM64_CACHE/apt-arm64/cache/archives" && _arm64_apt download $pkgs) &&
		_arm64_unpack "$dest"
}
# arm64_fetch DIR PKG...: linux-image-arm64 stands for the kernel it names.
arm64_fetch() { _arm64_locked _arm64_fetch "$@"; }

# arm64_make OUT MAKE-ARGS...: make (this tree) for arm64 into OUT with
# gcc-aarch64-linux-gnu against the sysroot (made first, see above).
arm64_make() {
	local out=$1 tree
	shift
	tree=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	PKG_CONFIG_SYSROOT_DIR=$ARM64_SYSROOT \
		PKG_CONFIG_LIBDIR=$ARM64_SYSROOT/usr/lib/aarch64-linux-gnu/pkgconfig:$ARM64_SYSROOT/usr/share/pkgconfig \
		PKG_CONFIG_PATH='' timeout 900 make -C "$tree" -j2 \
		CC="aarch64-linux-gnu-gcc --sysroot=$ARM64_SYSROOT" AR=aarch64-linux-gnu-ar \
		O="$out" WITH_LIBVIRT=no "$@"
}
