#!/bin/bash
# plan never waits on a file system a process serves: a VMM whose guest
# RAM is a MAP_SHARED mapping of a file on its own FUSE mount (allow_other)
# whose daemon answers the VMM's open and never another
# (tests/tools/stallfs.c). Before, plan opened that file through
# /proc/PID/map_files and slept in the kernel (fuse_send_open), in D
# state after a signal, as long as the daemon liked. Now it ends within
# LIMIT_S seconds (default 10), the region refused ("not read: its file
# is on fuse.stallfs") and its pages not mapped counted unknown.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm
source "$(dirname "$0")/../lib.sh"

require_kvm plan_fuse
for t in jq python3 cc pkg-config; do
	command -v $t >/dev/null || { skip plan_fuse "$t is not installed"; exit 0; }
done
if ! pkg-config --exists fuse3 || [ ! -c /dev/fuse ]; then
	skip plan_fuse "no libfuse3-dev or /dev/fuse"
	exit 0
fi
if [ ! -x "$KVMSTATS" ]; then
	fail plan_fuse "build/kvmstats missing: run make build"
	exit 0
fi
LIMIT_S=${LIMIT_S:-10}
MNT=$TMP/mnt
FS_PID=""

# Killing the daemon ends every request it left unanswered (a plan in D
# state too); then nothing is left mounted, even on failure.
fuse_cleanup() {
	[ -n "$FS_PID" ] && kill -KILL "$FS_PID" 2>/dev/null && wait "$FS_PID" 2>/dev/null
	grep -q " $MNT fuse" /proc/mounts && umount -l "$MNT"
	cleanup
}
trap fuse_cleanup EXIT

# shellcheck disable=SC2046
if ! cc -O2 -Wall -o "$TMP/stallfs" "$ROOT/tests/tools/stallfs.c" \
	$(pkg-config --cflags --libs fuse3) 2>"$TMP/cc.err"; then
	fail plan_fuse "stallfs does not build: $(head -c 200 "$TMP/cc.err")"
	exit 0
fi
mkdir "$MNT"
"$TMP/stallfs" -f -o allow_other "$MNT" 2>"$TMP/fs.err" &
FS_PID=$!
if ! wait_until 50 grep -q " $MNT fuse.stallfs" /proc/mounts; then
	fail plan_fuse "stallfs did not mount: $(head -c 200 "$TMP/fs.err")"
	exit 0
fi

# The VMM: a KVM VM fd and 16 MiB of RAM mapped shared from the file.
cat >"$TMP/vmm.py" <<'PY'
import fcntl, mmap, os, sys, time
kvm = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
vm = fcntl.ioctl(kvm, 0xAE01, 0)  # KVM_CREATE_VM
fd = os.open(sys.argv[1], os.O_RDWR)
ram = mmap.mmap(fd, 16 << 20, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
for off in range(0, 16 << 20, 1 << 20):
    ram[off] = 1
open(sys.argv[2], "w").close()
time.sleep(300)
PY
python3 "$TMP/vmm.py" "$MNT/mem" "$TMP/ready" &
VMM=$!
track "$VMM"
if ! wait_file "$TMP/ready" 10; then
	fail plan_fuse "the VMM did not map its file"
	exit 0
fi
range=$(awk -v f="$MNT/mem" '$6 == f { print $1; exit }' "/proc/$VMM/maps")

t0=$(date +%s%N)
"$KVMSTATS" plan --pid "$VMM" --region "$range" --interval 0 --json \
	>"$TMP/plan.json" 2>"$TMP/plan.err" &
PLAN=$!
track "$PLAN"
wait_until $((LIMIT_S * 10)) sh -c "! kill -0 $PLAN 2>/dev/null"
if kill -0 "$PLAN" 2>/dev/null; then
	fail plan_fuse "plan still running after $LIMIT_S s ($(awk '/^State/ { print $2, $3 }' "/proc/$PLAN/status"); $(head -1 "/proc/$PLAN/stack" 2>/dev/null))"
	exit 0
fi
wait "$PLAN"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
check "plan beside a FUSE file whose daemon never answers an open ends: rc $rc in $ms ms" \
	test "$rc" = 0
why=$(jq -r '.. | .why? // empty' "$TMP/plan.json" 2>/dev/null)
check "the region is refused: ${why:-no why}" \
	grep -q "not read: its file is on fuse.stallfs" <<<"$why"
unknown=$(jq -r '.vms[0].unknown_pages' "$TMP/plan.json" 2>/dev/null)
check "the pages the VMM does not map are unknown: ${unknown:-none} of 4096" \
	test "${unknown:-0}" -ge 4000
