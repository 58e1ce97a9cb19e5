#!/bin/bash
# kvmstats dump on a VMM that holds its stats fds (our tiny VMM): every
# stat of every VM and vCPU equals what the kernel returned through those
# fds (the VMM saves its own plain pread of each fd for comparison).
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm
source "$(dirname "$0")/../lib.sh"
require_kvm "core dump"

K=1000
start_vmm --vms 2 --vcpus 3 --exits $K --pages 16 --hold-stats \
	--save "$TMP/kernel" || { fail "tinyvmm started"; exit 1; }
P=$VMM_PID

"$KVMSTATS" dump --pid "$P" --json >"$TMP/dump.json"
check "dump --pid --json exits 0" test $? = 0
check "dump --json is one JSON value" jq -e . "$TMP/dump.json" >/dev/null

# The shape the issue fixes.
check "two VMs, three vCPUs each" jq -e \
	'(.vms | length) == 2 and all(.vms[]; (.vcpus | length) == 3)' "$TMP/dump.json"
check "fixed keys present" jq -e --argjson p "$P" \
	'all(.vms[]; .pid == $p and .name == "tinyvmm" and .source == "fd" and
	 .id == "kvm-\($p)" and (.stats | type) == "object") and
	 all(.vms[].vcpus[]; . as $c | ($c.index | type) == "number" and
	 ($c.id | startswith("kvm-")) and ($c.id | endswith("/vcpu-\($c.index)")))
	 and .files == []' "$TMP/dump.json"
check "histograms are arrays, booleans are booleans" jq -e \
	'all(.vms[].vcpus[].stats; (.halt_wait_hist | type) == "array" and
	 (.halt_wait_hist | length) == 32 and (.guest_mode | type) == "boolean")' \
	"$TMP/dump.json"

# Every value equals the VMM's own reading of the same fds: read the
# saved images through `dump --file`, which the kernel produced.
files=()
for f in "$TMP"/kernel/*.bin; do files+=(--file "$f"); done
"$KVMSTATS" dump --json "${files[@]}" >"$TMP/files.json"
check "dump --file of the kernel's images" test $? = 0
# Key both by the VMM's names: vmI and vmI-vcpuJ.
jq -S '[.vms | to_entries[] | .key as $i | {key: "vm\($i)", value: .value.stats},
	(.value.vcpus[] | {key: "vm\($i)-vcpu\(.index)", value: .stats})] |
	from_entries' "$TMP/dump.json" >"$TMP/a"
jq -S '[.files[] | {key: (.path | split("/") | last | rtrimstr(".bin")),
	value: .stats}] | from_entries' "$TMP/files.json" >"$TMP/b"
if cmp -s "$TMP/a" "$TMP/b"; then
	pass "every stat equals the kernel's value ($(jq '[.[] | length] | add' "$TMP/a") stats of $(jq length "$TMP/a") targets)"
else
	diff "$TMP/a" "$TMP/b" | head -20
	fail "every stat equals the kernel's value"
fi

# Counters this KVM maintains move as the guest program says.
check "each vCPU made at least $K exits" jq -e --argjson k $K \
	'all(.vms[].vcpus[].stats; .exits >= $k)' "$TMP/dump.json"

# --save writes images that check and dump read back identically.
"$KVMSTATS" dump --pid "$P" --save "$TMP/saved" >/dev/null
check "--save wrote 8 images" test "$(ls "$TMP/saved" | wc -l)" = 8
check "saved images pass check" "$KVMSTATS" check --file "$TMP/saved/$P-vm0.bin" \
	--file "$TMP/saved/$P-vm0-vcpu0.bin"

# Table and CSV carry the same data.
"$KVMSTATS" dump --pid "$P" >"$TMP/table" 2>&1
check "table shows units and histograms" grep -q 'halt_wait_hist.*p50=' "$TMP/table"
"$KVMSTATS" dump --pid "$P" --csv >"$TMP/csv"
check "csv header" test "$(head -1 "$TMP/csv")" = "pid,name,path,id,vcpu,stat,index,value"$'\r'
# (as many values as the kernel's schemas have: counted from the JSON,
# not assumed, since kernels add stats)
vals=$(jq '[.vms[] | (.stats, .vcpus[].stats) | .[] | if type == "array" then length else 1 end] | add' \
	"$TMP/dump.json")
check "csv has one row per value ($vals)" test "$(wc -l <"$TMP/csv")" -eq $((1 + vals))

# Errors: a clear line and status 1; usage errors status 2.
"$KVMSTATS" dump --pid 999999999 >/dev/null 2>"$TMP/err"
check "missing pid: status 1" test $? = 1
check "missing pid: one line naming it" grep -q '999999999' "$TMP/err"
"$KVMSTATS" dump --pid $$ >/dev/null 2>"$TMP/err"
check "pid without stats fds: status 1" test $? = 1
"$KVMSTATS" dump --bogus >/dev/null 2>&1
check "unknown option: status 2" test $? = 2
"$KVMSTATS" dump --pid abc >/dev/null 2>&1
check "bad pid: status 2" test $? = 2
"$KVMSTATS" frobnicate >/dev/null 2>&1
check "unknown command: status 2" test $? = 2

# The VMM keeps running and its fd table is untouched by our reading.
check "tinyvmm still running" kill -0 "$P"
