#!/bin/bash
# A stat the source could not read is unknown in every sink, never 0:
# `-1` shows n/a and marks the VM whose every counter is unknown (with
# the reason), its JSON has null, record --log a "-" and an empty CSV
# field, serve leaves the series out and counts the failed reads in
# kvmstats_source_read_errors_total. The unknown comes from a real
# kernel: debugfs on a locked-down kernel refuses its counter files
# (EPERM): the lab boots its kernel locked down for this test alone
# (tests/run.sh, tag lockdown). Where the kernel lets debugfs be read
# (a host's KVM), the same commands give numbers instead, and the test
# says so.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm lockdown
source "$(dirname "$0")/../lib.sh"
require_kvm unknown

for c in jq curl; do
	if ! command -v "$c" >/dev/null; then
		skip unknown "$c is not installed"
		exit 0
	fi
done

need_debugfs unknown || exit 0

# A VMM that holds no stats fds and keeps exiting (debugfs is its way in).
start_vmm --workload dirty --pages 1 --exits 10 --pass-hz 200 --name unk ||
	{ fail "tinyvmm started"; exit 0; }
P=$VMM_PID
dir=$(ls -d "$DBG/kvm/$P"-* 2>/dev/null | head -1)
if [ -z "$dir" ]; then
	fail "debugfs has a directory for the VM" "none under $DBG/kvm for $P"
	exit 0
fi
if cat "$dir/exits" >/dev/null 2>&1; then
	skip unknown "this kernel lets debugfs be read (not locked down): nothing is unknown"
	exit 0
fi
echo "# debugfs is locked down: $dir/exits: $(cat "$dir/exits" 2>&1 >/dev/null)"

F='^(exits|blocking)$'
"$KVMSTATS" -1 --pid "$P" --source debugfs --interval 0.3 -f "$F" >"$TMP/once.txt" 2>"$TMP/once.err"
sed 's/^/# /' "$TMP/once.txt"
check "-1: a refused counter is n/a, total and rate" \
	grep -Eq '^  exits +n/a +n/a' "$TMP/once.txt"
check "-1: the VM list's rates are n/a, not 0" \
	awk -v p="$P" '$1 == p && /n\/a/ && !/ 0 /' "$TMP/once.txt"
check "-1: the VM is marked, with the reason" \
	grep -q 'no counter readable: debugfs refuses its counter files (kernel lockdown)' "$TMP/once.txt"
check "-1: an instant stat debugfs lets us read still is (blocking)" \
	grep -Eq '^  blocking +[0-9]' "$TMP/once.txt"

"$KVMSTATS" -1 --pid "$P" --source debugfs --interval 0.3 --json -f "$F" >"$TMP/once.json" 2>>"$TMP/once.err"
check "-1 --json: null value, total and rate for a refused counter" \
	jq -e '.vms[0].vcpu_sum.exits | .value == null and .total == null and .rate == null' "$TMP/once.json"
check "-1 --json: the VM says why nothing is known" \
	jq -e '.vms[0].unknown | test("lockdown")' "$TMP/once.json"

"$KVMSTATS" record --log --count 2 --interval 0.3 --pid "$P" --source debugfs -f "$F" >"$TMP/log.txt" 2>"$TMP/log.err"
check "record --log: a refused counter is '-'" \
	awk 'NR == 2 && $3 == "-"' "$TMP/log.txt"
check "record --log: warns that the VM has no counter readable, and why" \
	grep -q "pid $P (unk), VM 0: no counter readable: debugfs refuses" "$TMP/log.err"
"$KVMSTATS" record --log --csv --count 2 --interval 0.3 --pid "$P" --source debugfs -f "$F" >"$TMP/log.csv" 2>/dev/null
check "record --log --csv: a refused counter is an empty field" \
	awk -F, 'NR == 2 && $3 == "" && $2 != ""' "$TMP/log.csv"
"$KVMSTATS" record --log --json --count 2 --interval 0.3 --pid "$P" --source debugfs -f "$F" >"$TMP/log.json" 2>/dev/null
check "record --log --json: a refused counter is null" \
	jq -e '.rates.exits == null' "$TMP/log.json"

"$KVMSTATS" dump --pid "$P" --source debugfs >"$TMP/dump.txt" 2>&1
check "dump: the VM is marked, with the reason" \
	grep -q 'no counter readable: debugfs refuses its counter files (kernel lockdown)' "$TMP/dump.txt"
"$KVMSTATS" dump --pid "$P" --source debugfs --json >"$TMP/dump.json" 2>&1
check "dump --json: null for a refused counter, and the VM's unknown says why" \
	jq -e '.vms[0] | (.vcpus[0].stats.exits == null) and (.unknown | test("lockdown"))' "$TMP/dump.json"

# serve: no series for what was refused; the reads count as failed.
"$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/addr" --pid "$P" --source debugfs 2>"$TMP/serve.err" &
S=$!
track "$S"
if ! wait_file "$TMP/addr" "$(slow 10)"; then
	fail "serve started" "$(head -c 300 "$TMP/serve.err")"
	exit 0
fi
URL="http://$(cat "$TMP/addr")/metrics"
curl -sS --max-time 20 "$URL" >/dev/null
curl -sS --max-time 20 "$URL" >"$TMP/m.txt"
check "serve: no series for a refused counter (kvm_vcpu_exits)" \
	bash -c "! grep -Eq '^kvm_(vcpu|vm)_exits\\{[^}]*pid=\"$P\"' '$TMP/m.txt'"
check "serve: the failed reads are counted (kvmstats_source_read_errors_total{source=\"debugfs\"} > 0)" \
	awk '/^kvmstats_source_read_errors_total\{source="debugfs"\}/ && $2 > 0 { ok = 1 } END { exit !ok }' "$TMP/m.txt"

# list -v: why each source cannot read the counters, and what would.
"$KVMSTATS" list -v --pid "$P" >"$TMP/list.txt" 2>&1
sed -n '/sources tried/,$p' "$TMP/list.txt" | sed 's/^/# /'
check "list -v: debugfs is refused by the kernel (lockdown)" \
	grep -q 'debugfs: the kernel refuses its counter files (lockdown)' "$TMP/list.txt"
check "list -v: fd: the VMM holds no stats fd" \
	grep -q 'fd: it holds no stats fd' "$TMP/list.txt"
check "list -v: says --attach would read the counters" \
	grep -q 'counters: none of the sources tried reads them; --attach would' "$TMP/list.txt"
