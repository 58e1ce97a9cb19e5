#!/bin/bash
# The exporter's identity model: one kvmstats_vm_info per VM whatever the
# source, kvmstats_vms and kvmstats_vcpus exact, and a vCPU stat is
# kvm_vcpu_* whatever the source: debugfs's sum over a VM's vCPUs is
# labelled vcpu="sum" (never a VM, never kvm_vm_*). Checked by comparing
# the series of a VM read through fds with those of one read through
# debugfs; promtool check metrics passes on the scrape.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm
source "$(dirname "$0")/../lib.sh"
require_kvm prom_identity

for c in curl promtool; do
	if ! command -v "$c" >/dev/null; then
		skip prom_identity "$c is not installed"
		exit 0
	fi
done

need_debugfs prom_identity || exit 0

# Two VMMs of 2 vCPUs: F holds its stats fds, D holds none (debugfs).
start_vmm --vcpus 2 --workload halt --hold-stats --name idfd || { fail "tinyvmm (fd) started"; exit 0; }
F=$VMM_PID
start_vmm --vcpus 2 --workload halt --name iddbg || { fail "tinyvmm (debugfs) started"; exit 0; }
D=$VMM_PID

"$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/addr" --pid "$F" --pid "$D" 2>"$TMP/serve.err" &
track $!
if ! wait_file "$TMP/addr" "$(slow 10)"; then
	fail "serve started" "$(head -c 300 "$TMP/serve.err")"
	exit 0
fi
curl -sS --max-time 20 "http://$(cat "$TMP/addr")/metrics" >/dev/null
curl -sS --max-time 20 "http://$(cat "$TMP/addr")/metrics" >"$TMP/m.txt"
grep -E '^kvmstats_(vm_info|vms|vcpus) ' "$TMP/m.txt" | sed 's/^/# /'
grep -E '^kvmstats_(vm_info)\{' "$TMP/m.txt" | sed 's/^/# /'

check "promtool check metrics passes" promtool check metrics <"$TMP/m.txt"
check "the fd VM is read through fds, the other through debugfs" \
	bash -c "grep -q 'kvmstats_vm_info{pid=\"$F\".*source=\"fd\"' '$TMP/m.txt' &&
		grep -q 'kvmstats_vm_info{pid=\"$D\".*source=\"debugfs\"' '$TMP/m.txt'"
for p in "$F" "$D"; do
	n=$(grep -c "^kvmstats_vm_info{pid=\"$p\"" "$TMP/m.txt")
	[ "$n" = 1 ] && pass "one kvmstats_vm_info for VM of pid $p" ||
		fail "one kvmstats_vm_info for VM of pid $p" "$n"
done
check "kvmstats_vms is 2" grep -qx 'kvmstats_vms 2' "$TMP/m.txt"
check "kvmstats_vcpus is 4 (2 per VMM, the debugfs sum counted as its 2 vCPUs)" \
	grep -qx 'kvmstats_vcpus 4' "$TMP/m.txt"

# series NAMES PID: "family labels-without-pid/name/vm" of PID's series.
series() {
	grep -E "^kvm_(vm|vcpu)_[a-z0-9_]+\{pid=\"$1\"" "$TMP/m.txt" |
		sed -E 's/\{pid="[0-9]+",name="[^"]*",vm="[0-9]+"/{/; s/ [^ ]+$//; s/\{,/{/' | sort -u
}
series "$F" >"$TMP/fd.series"
series "$D" >"$TMP/dbg.series"
echo "# fd VM: $(wc -l <"$TMP/fd.series") series, debugfs VM: $(wc -l <"$TMP/dbg.series")"
check "the debugfs VM has series" test -s "$TMP/dbg.series"
check "no kvm_vm_ series carries a vcpu label, for either VM" \
	bash -c "! grep -h '^kvm_vm_.*vcpu=' '$TMP/fd.series' '$TMP/dbg.series'"
check "every kvm_vcpu_ series carries a vcpu label, for either VM" \
	bash -c "! grep -hE '^kvm_vcpu_[^{]*(\\{\\}|\\{le=[^,]*\\}|$)' '$TMP/fd.series' '$TMP/dbg.series'"
check "the debugfs vCPU series are labelled vcpu=\"sum\"" \
	bash -c "grep '^kvm_vcpu_' '$TMP/dbg.series' | grep -v 'vcpu=\"sum\"' | (! grep -q .)"
# Every family the debugfs VM has, the fd VM has too, at the same level
# (debugfs gives less: a histogram's bucket 0 only, refused counters).
sed -E 's/\{.*//; s/_(bucket|count|sum)$//' "$TMP/dbg.series" | sort -u >"$TMP/dbg.fams"
sed -E 's/\{.*//; s/_(bucket|count|sum)$//' "$TMP/fd.series" | sort -u >"$TMP/fd.fams"
extra=$(comm -23 "$TMP/dbg.fams" "$TMP/fd.fams" | grep -v '_bucket0' | tr '\n' ' ')
[ -z "$extra" ] && pass "the debugfs VM's families are the fd VM's (same names, same level)" ||
	fail "the debugfs VM's families are the fd VM's" "only through debugfs: $extra"
