#!/bin/bash
# The debugfs source on this kernel: readable stats with the kernel's
# values, refused ones (lockdown) unavailable and never 0, the vCPU sum
# marked as such, a clear error when debugfs is not mounted, and the
# untyped fallback when /dev/kvm cannot be used.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm stock
source "$(dirname "$0")/../lib.sh"
require_kvm debugfs

for c in jq unshare; do
	if ! command -v "$c" >/dev/null; then
		skip debugfs "$c is not installed"
		exit 0
	fi
done

need_debugfs debugfs || exit 0

# Two VMMs with 2 VMs x 3 vCPUs each, every vCPU halted in the kernel
# (in-kernel irqchip, 4 s LAPIC timer per halt) for ~40 s, times the
# slowdown (so that they still halt at the end under emulation):
# "blocking" is then 1 per vCPU, an instant stat the kernel lets debugfs
# show. A holds no stats fds (what debugfs is for); B holds them, to
# compare with.
VMM_ARGS=(--vms 2 --vcpus 3 --irqchip --halts "$(slow 10)" --halt-us 4000000 --timeout "$(slow 120)")
"$TINYVMM" "${VMM_ARGS[@]}" &
A=$!
track "$A"
"$TINYVMM" "${VMM_ARGS[@]}" --hold-stats &
B=$!
track "$B"

# Wait (bounded) until the kernel says, through B's own stats fds, that
# all of B's vCPUs block.
for i in $(seq "$(slow 100)"); do
	n=$("$KVMSTATS" dump --pid "$B" --source fd --json 2>/dev/null |
		jq '[.vms[].vcpus[].stats.blocking | select(. == true)] | length' 2>/dev/null)
	[ "${n:-0}" = 6 ] && break
	sleep 0.1
done
if [ "${n:-0}" != 6 ]; then
	fail "tinyvmm's vCPUs halt in the kernel" "blocking vCPUs: ${n:-none}"
	exit 0
fi
pass "tinyvmm's vCPUs halt in the kernel (6 blocking, read through fds)"

"$KVMSTATS" dump --pid "$A" --source debugfs --json >"$TMP/a.json" 2>"$TMP/a.err"
rc=$?
[ "$rc" = 0 ] && pass "dump --source debugfs on a VMM without stats fds" ||
	fail "dump --source debugfs on a VMM without stats fds" "rc $rc: $(cat "$TMP/a.err")"
check "two VMs, both from debugfs" \
	jq -e '.vms | length == 2 and all(.source == "debugfs")' "$TMP/a.json"
check "the vCPU stats are one pseudo-vCPU: index -1, id kvm-PID/vcpu-sum" \
	jq -e --arg id "kvm-$A/vcpu-sum" \
	'[.vms[].vcpus] | all(length == 1 and .[0].index == -1 and .[0].id == $id)' "$TMP/a.json"
# "blocking" is an instant stat: how many of the 3 vCPUs block at the
# moment debugfs is read, which under emulation need not be all of them.
check "the sum counts the blocking vCPUs (0 to 3 per VM), a count not a boolean" \
	jq -e '[.vms[].vcpus[0].stats.blocking | type == "number" and . >= 0 and . <= 3 and
	 floor == .] == [true, true]' "$TMP/a.json"

# Is this kernel locked down? Then the files of cumulative, peak and
# histogram stats refuse to be read (EPERM); instant ones (0444) read.
# Found out from a cumulative counter's file, not assumed.
dir=$(ls -d "$DBG/kvm/$A"-* | sort -t- -k2 -n | head -1)
if cat "$dir/exits" >/dev/null 2>&1; then locked=0; else locked=1; fi
echo "# debugfs: $([ $locked = 1 ] && echo "locked down" || echo "every file readable")"

# snapshot NAME: every file of A's first VM, "name value" per line.
snapshot() {
	local f
	for f in "$dir"/*; do
		[ -f "$f" ] && echo "${f##*/} $(cat "$f" 2>/dev/null || echo null)"
	done >"$TMP/$1.files"
}

# Every stat against its file: a value where the kernel lets us read the
# file, null where it refuses (EPERM under lockdown) or where there is no
# such file (a histogram: its bucket 0 is a stat of its own). The vCPUs
# wake every 4 s, so counters may move while we read: each value lies
# between the file's value read just before and just after the dump.
# Checked for A's first VM; the kernel decides, not the test.
snapshot f0
"$KVMSTATS" dump --pid "$A" --source debugfs --json >"$TMP/a.json" 2>>"$TMP/a.err"
snapshot f1
readable=0 refused=0 wrong=""
while read -r sect name val; do
	file=$name
	case $name in *_bucket0) file=${name%_bucket0} ;; esac
	lo=$(awk -v n="$file" '$1 == n { print $2 }' "$TMP/f0.files")
	hi=$(awk -v n="$file" '$1 == n { print $2 }' "$TMP/f1.files")
	if [ "$sect" = vcpu ] && [ "$file" = "$name" ] &&
		jq -e --arg n "${name}_bucket0" '.vms[0].vcpus[0].stats | has($n)' "$TMP/a.json" >/dev/null; then
		lo=null hi=null	# a histogram: debugfs has only its bucket 0
	elif [ -z "$lo" ] || [ "$lo" = null ]; then
		lo=null hi=null
		refused=$((refused + 1))
	else
		readable=$((readable + 1))
	fi
	[ "$val" = array ] && val=null
	if [ "$lo" = null ]; then
		[ "$val" = null ] || wrong="$wrong $name=$val(want null)"
	elif [ "$name" = blocking ] || [ "$name" = guest_mode ]; then
		# A vCPU state summed over the 3 vCPUs: it may go down and up
		# again between the file's two readings; any count of them.
		case $val in [0-3]) ;; *) wrong="$wrong $name=$val(want 0..3)" ;; esac
	else
		# (an instant stat may also go down: between the two, either way)
		[ "$lo" -le "$hi" ] || { t=$lo; lo=$hi; hi=$t; }
		if [ "$val" = null ] || [ "$val" -lt "$lo" ] || [ "$val" -gt "$hi" ]; then
			wrong="$wrong $name=$val(want $lo..$hi)"
		fi
	fi
done < <(jq -r '.vms[0] | (.stats | to_entries[] | "vm \(.key) \(.value)"),
	(.vcpus[0].stats | to_entries[] | "vcpu \(.key) \(.value)")' "$TMP/a.json" |
	sed 's/ true$/ 1/; s/ false$/ 0/')
echo "# $readable stats readable, $refused refused by the kernel"
[ -z "$wrong" ] && pass "every stat is its file's value, or null where the kernel refuses it" ||
	fail "every stat is its file's value, or null where the kernel refuses it" "$wrong"
if [ $locked = 1 ]; then
	check "refused stats are null, not 0 (exits, a cumulative counter)" \
		jq -e '.vms[0].vcpus[0].stats | has("exits") and .exits == null' "$TMP/a.json"
else
	check "cumulative stats are read where the kernel allows it (exits)" \
		jq -e '.vms[0].vcpus[0].stats.exits | type == "number" and . > 0' "$TMP/a.json"
fi
check "pages_4k, an instant stat (0444), is read" \
	jq -e '.vms | all(.stats.pages_4k | type == "number")' "$TMP/a.json"

# The same VMs through debugfs and through their stats fds (B), read
# before and after: the VM section is the kernel's own schema; the sum is
# the sum of the vCPUs, between the two fd readings.
"$KVMSTATS" dump --pid "$B" --source fd --json >"$TMP/bf0.json" 2>/dev/null
"$KVMSTATS" dump --pid "$B" --source debugfs --json >"$TMP/bd.json" 2>/dev/null
"$KVMSTATS" dump --pid "$B" --source fd --json >"$TMP/bf.json" 2>/dev/null
jq -n --slurpfile d "$TMP/bd.json" --slurpfile f0 "$TMP/bf0.json" --slurpfile f "$TMP/bf.json" '
	def num: if . == true then 1 elif . == false then 0 else . end;
	def sum($v; $k): [$v.vcpus[].stats[$k] | num] | add;
	[range(0; 2) as $i | ($d[0].vms[$i]) as $dv | ($f0[0].vms[$i]) as $a |
	 ($f[0].vms[$i]) as $b |
	 ($dv.stats | to_entries[] | select(.value != null) |
	  {name: .key, debugfs: (.value | num), lo: ($a.stats[.key] | num), hi: ($b.stats[.key] | num)}),
	 ($dv.vcpus[0].stats | to_entries[] | select(.value != null and (.key | endswith("_bucket0") | not)) |
	  {name: .key, debugfs: .value, lo: sum($a; .key), hi: sum($b; .key)})]
	' >"$TMP/cmp.json"
n=$(jq length "$TMP/cmp.json")
# (blocking and guest_mode, vCPU states summed, may go down and up again
# between the fd readings: for them, any count of the 3 vCPUs)
bad=$(jq -c '[.[] | select(if .name == "blocking" or .name == "guest_mode"
	then .debugfs < 0 or .debugfs > 3
	else .debugfs < ([.lo, .hi] | min) or .debugfs > ([.lo, .hi] | max) end)]' "$TMP/cmp.json")
[ "$n" -ge 10 ] && [ "$bad" = "[]" ] &&
	pass "debugfs values lie between two readings of the stats fds ($n values, VM stats and vCPU sums)" ||
	fail "debugfs values lie between two readings of the stats fds" "$n compared, outside: $bad"
check "the VM section has the stats fd's names, in its order" \
	jq -e -n --slurpfile d "$TMP/bd.json" --slurpfile f "$TMP/bf.json" \
	'($d[0].vms[0].stats | keys_unsorted) == ($f[0].vms[0].stats | keys_unsorted)'
check "the sum has every vCPU stat, and NAME_bucket0 per histogram" \
	jq -e -n --slurpfile d "$TMP/bd.json" --slurpfile f "$TMP/bf.json" '
	($f[0].vms[0].vcpus[0].stats) as $c | ($d[0].vms[0].vcpus[0].stats | keys) as $s |
	($c | keys | all(. as $k | $s | index($k))) and
	([$c | to_entries[] | select(.value | type == "array") | .key + "_bucket0"] | all(. as $k | $s | index($k)))'

"$KVMSTATS" dump --pid "$A" --source debugfs >"$TMP/a.txt" 2>&1
check "the table shows the sum as vcpu-sum" grep -q 'vcpu-sum' "$TMP/a.txt"
if [ $locked = 1 ]; then
	check "the table shows n/a for refused stats" grep -Eq '^  exits +n/a' "$TMP/a.txt"
else
	check "the table shows readable counters as numbers" grep -Eq '^  exits +[0-9]' "$TMP/a.txt"
fi
# A histogram debugfs cannot know is unavailable, never "n=0".
check "the table shows a histogram as n/a, never a made-up n=0" \
	bash -c "grep -Eq '^  halt_wait_hist +vcpu-sum +n/a' '$TMP/a.txt' && ! grep -q 'n=0' '$TMP/a.txt'"

"$KVMSTATS" dump --pid "$A" --json >"$TMP/auto.json" 2>/dev/null
check "auto picks debugfs for a VMM without stats fds or QMP" \
	jq -e '.vms | length == 2 and all(.source == "debugfs")' "$TMP/auto.json"
"$KVMSTATS" list --json >"$TMP/list.json" 2>/dev/null
check "list offers debugfs for it" \
	jq -e --argjson p "$A" '.[] | select(.pid == $p) | .sources | index("debugfs")' "$TMP/list.json"

# Not mounted (a private mount namespace where it is unmounted): a clear
# reason, exit 1, and the library never mounts it.
out=$(unshare -m --propagation private sh -c \
	"umount -l $DBG && '$KVMSTATS' dump --pid $A --source debugfs; echo rc=\$?" 2>&1)
echo "$out" | sed 's/^/# /'
echo "$out" | grep -q "debugfs is not mounted" && echo "$out" | grep -q "rc=1" &&
	pass "without debugfs mounted: a clear error" ||
	fail "without debugfs mounted: a clear error" "$out"

# /dev/kvm unusable (bound over by /dev/null): no kernel descriptors to
# learn types from, so every file of the VM's directory, untyped.
out=$(unshare -m --propagation private sh -c \
	"mount --bind /dev/null /dev/kvm && '$KVMSTATS' dump --pid $A --source debugfs --json" 2>"$TMP/fb.err")
echo "$out" >"$TMP/fb.json"
# (refused files are null; readable ones, numbers: the kernel decides)
check "without /dev/kvm: the files, untyped, in the VM (no vCPU sum)" \
	jq -e --argjson locked $locked '.vms | length == 2 and all(.vcpus == [] and
		(.stats.blocking | type == "number" and . >= 0 and . <= 3) and (.stats.pages_4k | type == "number") and
		(.stats | has("exits")) and
		(if $locked == 1 then .stats.exits == null else (.stats.exits | type == "number") end))' "$TMP/fb.json"
check "without /dev/kvm: no warning per file" test ! -s "$TMP/fb.err"
