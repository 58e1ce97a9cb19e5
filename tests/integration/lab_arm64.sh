#!/bin/bash
# kvmstats-test: needs=none nosan
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats on an arm64 KVM, on any x86_64 host (KVM or not): the CLI and
# tests/vmm/armvmm cross-built for arm64 (tests/lab/arm64.sh: the sysroot
# of cross_arm64.sh), then tests/lab/kvmlab --arch arm64 boots Debian's
# arm64 kernel at EL2 under QEMU's emulation and runs tests/lab/arm64-pass
# there: check against the kernel, dump, record and replay, serve and a
# scrape, top --once, with armvmm's two vCPUs looping HVC, WFI and an MMIO
# write. The parts it prints are checked here. Only what holds on every
# KVM is asserted: counters that never go back, exits after the loops ran.
# KVMSTATS_ARM64_TIMEOUT: the lab's deadline in seconds (default 600).
# KVMSTATS_ARM64_MODE: KVM's mode, vhe (the default), nvhe or protected.
source "$(dirname "$0")/../lib.sh"
# shellcheck source=tests/lab/arm64.sh
source "$ROOT/tests/lab/arm64.sh"

for c in aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu qemu-system-aarch64:qemu-system-arm \
	qemu-aarch64:qemu-user jq:jq; do
	command -v "${c%%:*}" >/dev/null && continue
	fail "lab_arm64" "${c%%:*} is missing (package ${c#*:}; make test-deps)"
	exit 0
done
if ! arm64_sysroot; then
	tail -20 "$ARM64_LOG" | sed 's/^/# /'
	fail "lab_arm64: the arm64 sysroot" "apt-get download failed (see above)"
	exit 0
fi

T0=$SECONDS
# The tree's build-arm64/, as cross_arm64.sh's (which runs first in the
# suite: what it built is not built again).
OUT=$ROOT/build-arm64
arm64_make "$OUT" "$OUT/kvmstats" "$OUT/armvmm" >"$TMP/make.log" 2>&1
rc=$?
if [ $rc != 0 ]; then
	echo "# lab: none, the arm64 build failed"
	tail -30 "$TMP/make.log" | sed 's/^/# /'
	fail "kvmstats and armvmm build for arm64" "make failed (see above)"
	exit 0
fi
BUILD_S=$((SECONDS - T0))

# The lab; once more when it says the guest stopped as a whole (75).
T1=$SECONDS
# The lab runs tracked, so that however this script ends (the runner's
# SIGTERM too) cleanup stops it, and it its QEMU.
trap 'exit 143' TERM INT
for _ in 1 2; do
	"$ROOT/tests/lab/kvmlab" --arch arm64 --timeout "${KVMSTATS_ARM64_TIMEOUT:-600}" \
		${KVMSTATS_ARM64_MODE:+--kvm-mode "$KVMSTATS_ARM64_MODE"} \
		--share "$OUT" --cwd "$ROOT" -- sh tests/lab/arm64-pass "$OUT" \
		>"$TMP/pass.raw" 2>"$TMP/lab.err" &
	track $!
	wait $!
	rc=$?
	# A virtio console may end its lines with CR LF.
	tr -d '\r' <"$TMP/pass.raw" >"$TMP/pass.out"
	[ $rc = 75 ] || break
	sed 's/^/# /' "$TMP/lab.err"
done
# The guest's first line: "# lab: <kernel version> arm64, kvm: <mode>".
grep -m1 '^# lab:' "$TMP/pass.out" || echo "# lab: none, the arm64 lab said nothing"
echo "# arm64 build: $BUILD_S s, lab: $((SECONDS - T1)) s"
pass "kvmstats and armvmm build for arm64"
[ $rc = 0 ] || sed 's/^/# /' "$TMP/lab.err"
check "the arm64 lab ran the pass (status 0)" test $rc = 0
check "the lab's kernel is arm64's, its KVM initialized" \
	grep -Eq '^# lab: .* arm64, kvm: (VHE|Hyp|Protected nVHE)$' "$TMP/pass.out"

# Split the parts: $TMP/p/NAME (output) and $TMP/p/NAME.rc.
mkdir -p "$TMP/p"
awk -v d="$TMP/p" '
	/^=== end$/ { f = ""; next }
	/^=== [a-z0-9-]+ rc=[0-9]+$/ {
		f = d "/" $2; sub(/^rc=/, "", $3); print $3 >(f ".rc"); printf "" >f; next
	}
	f != "" { print >>f }' "$TMP/pass.out"
P=$TMP/p
# ok NAME: the part ran and ended with status 0.
ok() { [ "$(cat "$P/$1.rc" 2>/dev/null)" = 0 ]; }

check "check: the conformance check against the kernel's fds passes" bash -c \
	"[ \"\$(cat '$P/check.rc')\" = 0 ] && grep -Eqx '[1-9][0-9]* passed, 0 failed' '$P/check'"
sed -n 's/^/# check: /p' "$P/check" 2>/dev/null | head -3
check "check --json: every target passed, VMs and vCPUs among them" bash -c \
	"jq -e '[.targets[] | .failed == 0] | all' '$P/check-json' &&
	 jq -e '[.targets[].target] | any(test(\"vcpu\"))' '$P/check-json'"

check "armvmm got ready (each vCPU went round its loop 20 times)" ok vmm-ready
VMM=$(cat "$P/vmm-ready" 2>/dev/null)
# stat FILE NAME: a vCPU stat of the VM, summed over its vCPUs ("" if absent).
vsum() {
	jq -r --arg s "$2" '.vms[0] | [.vcpus[].stats[$s]] |
		if length > 0 and all(type == "number") then add else "" end' "$1" 2>/dev/null
}
check "dump --pid: armvmm's VM, source fd, its two vCPUs" bash -c \
	"jq -e '.vms | length == 1 and .[0].pid == $VMM and .[0].source == \"fd\" and
		(.[0].vcpus | length) == 2' '$P/dump1'"
for s in hvc_exit_stat wfi_exit_stat mmio_exit_user exits; do
	check "dump --pid: every vCPU's $s > 0 after the loops" bash -c \
		"jq -e '.vms[0].vcpus | all(.stats.$s > 0)' '$P/dump1'"
done
check "dump --pid: the arm64 stats are there (wfe_exit_stat, mmio_exit_kernel, signal_exits)" \
	bash -c "jq -e '.vms[0].vcpus[0].stats | has(\"wfe_exit_stat\") and
		has(\"mmio_exit_kernel\") and has(\"signal_exits\")' '$P/dump1'"
for s in hvc_exit_stat wfi_exit_stat mmio_exit_user exits; do
	a=$(vsum "$P/dump1" $s) b=$(vsum "$P/dump2" $s)
	check "dump --pid: $s never goes back ($a, then $b)" \
		test -n "$a" -a -n "$b" -a "${b:-0}" -ge "${a:-1}"
done
check "dump (text): the vCPUs' hvc_exit_stat and the histograms" bash -c \
	"grep -q '^ *hvc_exit_stat ' '$P/dump-text' && grep -q 'halt_wait_hist' '$P/dump-text'"

check "record --pid -n 5 exits 0" ok record
check "replay --json: 5 samples of armvmm's VM" bash -c \
	"[ \$(jq -s 'length' '$P/replay') = 5 ] && jq -se 'all(.vms[0].pid == $VMM)' '$P/replay'"
check "replay: hvc_exit_stat > 0 and never going back from sample to sample" \
	jq -se '[.[] | [.vms[0].vcpus[].stats.hvc_exit_stat] | add] |
		.[0] > 0 and ([range(1; length) as $i | .[$i] >= .[$i - 1]] | all)' "$P/replay"

check "serve: a scrape over 127.0.0.1 answers 200" bash -c \
	"[ \"\$(cat '$P/scrape.rc')\" = 0 ] && head -1 '$P/scrape' | grep -q ' 200 '"
# The samples of a vCPU stat, with the VMM's pid among the labels.
check "serve: hvc_exit_stat of armvmm's vCPUs, positive" bash -c \
	"grep -E '^[a-z_]*hvc_exit_stat[a-z_]*\\{.*pid=\"$VMM\"' '$P/scrape' |
		awk '{ if (\$NF + 0 <= 0) bad = 1; n++ } END { exit bad || n < 2 }'"
check "serve: wfi_exit_stat and mmio_exit_user are exported too" bash -c \
	"grep -q '^[a-z_]*wfi_exit_stat' '$P/scrape' && grep -q '^[a-z_]*mmio_exit_user' '$P/scrape'"
check "serve: arm64's stats say what they count (HELP of wfi_exit_stat)" \
	grep -q '^# HELP [a-z_]*wfi_exit_stat[a-z_]* exits on a guest WFI' "$P/scrape"
check "serve ends on SIGTERM with status 0" ok serve

hdr=$(grep -m1 '^ *PID ' "$P/top" 2>/dev/null)
row=$(awk -v p="$VMM" '$1 == p { print; exit }' "$P/top" 2>/dev/null)
sed -n '1,4p' "$P/top" | sed 's/^/# top: /'
check "top --once exits 0" ok top
check "top --once: arm64's columns (EXITS HVC WFI WFE MMIOU MMIOK)" bash -c \
	"echo '$hdr' | grep -Eq 'EXITS/s +HVC/s +WFI/s +WFE/s +MMIOU/s +MMIOK/s' &&
	 ! echo '$hdr' | grep -q 'HALT/s'"
check "top --once: no cell of armvmm's row is '-'" awk -v r="$row" -v h="$hdr" \
	'BEGIN { n = split(r, f, " "); if (n < 5 || n != split(h, g, " ")) exit 1
		for (i = 1; i <= n; i++) if (f[i] == "-") exit 1 }'

check "armvmm ends on SIGTERM with status 0" ok vmm
sed 's/^/# /' "$P/vmm" 2>/dev/null
no_qemu() { ! pgrep -f "qemu-system-aarch64 .*path=$OUT," >/dev/null; }
check "no QEMU of the lab is left" no_qemu
echo "# lab_arm64: $((SECONDS - T0)) s in all"
