#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# make-demo-recording.sh [OUTPUT] [SECONDS]: remake dist/demo/recording.kvmlog,
# the log that `kvmstats demo` (and `make demo`) plays where /dev/kvm is
# missing. Needs a KVM host, root (or the kvm group and ptrace rights) and
# a built tree (`make build`).
#
# What it records, with `kvmstats record --interval 1`, for SECONDS (180):
#   - the demo's own guests (`kvmstats demo --no-top`: the VMMs demo,
#     demo-irqchip, demo-dirty, run by the project's tinyvmm);
#   - one QEMU VM (`qemu-demo`, read through QMP) booting the project's
#     multiboot guest, which fills 32 MiB, then rewrites 16 MiB over and
#     over (mbguest's dirtyloop).
#
# dist/demo/README.md says where and how the shipped file was made.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/dist/demo/recording.kvmlog}
SECONDS_REC=${2:-180}
KVMSTATS=${KVMSTATS:-$ROOT/build/kvmstats}

# tests/lib.sh: launch_qemu, wait_ready, track and the clean-up on exit.
# shellcheck source=../tests/lib.sh
. "$ROOT/tests/lib.sh"

die() {
	echo "make-demo-recording: $*" >&2
	exit 1
}

[ -x "$KVMSTATS" ] || die "$KVMSTATS is missing: run 'make build' first"
[ -r "$MBGUEST" ] || die "$MBGUEST is missing: run 'make build' first"
have_kvm || die "/dev/kvm is not usable here: a recording needs real VMs"

"$KVMSTATS" demo --no-top >"$TMP/demo.out" 2>&1 &
track $!
launch_qemu qemu-demo "nonzero=32M stride=4K dirty=16M dirtyloop=1" -smp 2
wait_ready qemu-demo "$QEMU_PID" 120 || die "QEMU did not boot"
for _ in $(seq 200); do
	[ "$(grep -c '^pid ' "$TMP/demo.out")" -ge 3 ] && break
	sleep 0.1
done
sed 's/^/# /' "$TMP/demo.out"
grep -q '^pid ' "$TMP/demo.out" || die "the demo's guests did not start"

rm -f "$OUT.tmp"
"$KVMSTATS" record --interval 1 --duration "$SECONDS_REC" --refresh 1 \
	--output "$OUT.tmp" || die "record failed"
mv "$OUT.tmp" "$OUT"
"$KVMSTATS" replay "$OUT" | tail -n 2
ls -l "$OUT"
