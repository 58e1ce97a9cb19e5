#!/bin/bash
# kvmstats record and replay on our tiny VMM: the log holds what the
# kernel returned, survives kill -9, truncation and a full disk, rotates,
# reopens on SIGHUP; record --log prints a vmstat-like text log.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm
source "$(dirname "$0")/../lib.sh"
require_kvm "record"

# samples FILE: number of samples `replay --json` prints.
samples() { "$KVMSTATS" replay --json "$1" 2>/dev/null | wc -l; }
has_samples() { [ "$(samples "$1")" -ge "$2" ]; }
# wait_samples FILE N: wait (bounded, scaled) until FILE replays N samples.
wait_samples() { wait_until "$(slow 50)" has_samples "$@"; }

# ---- a halted guest: every sample equals what dump reads --------------
start_vmm --vms 2 --vcpus 2 --hold-stats --workload halt || { fail "tinyvmm (halt) started"; exit 1; }
HALT=$VMM_PID
sleep 0.3
"$KVMSTATS" dump --json --pid "$HALT" >"$TMP/halt.before"
"$KVMSTATS" record --pid "$HALT" --interval 0.1 --count 50 --output "$TMP/halt.log" \
	2>"$TMP/halt.err"
check "record --interval 0.1 --count 50 exits 0" test $? = 0
"$KVMSTATS" dump --json --pid "$HALT" >"$TMP/halt.after"
"$KVMSTATS" replay --json "$TMP/halt.log" >"$TMP/halt.json" 2>"$TMP/halt.rerr"
check "replay --json exits 0" test $? = 0
check "replay gives 50 samples" test "$(wc -l <"$TMP/halt.json")" = 50
check "replay says nothing on stderr for a clean log" test ! -s "$TMP/halt.rerr"
if cmp -s "$TMP/halt.before" "$TMP/halt.after"; then
	# Every sample, without its time, is the dump byte for byte.
	jq -c -S 'del(.time)' "$TMP/halt.json" | sort -u >"$TMP/halt.samples"
	# (a log keeps the VMM's source, not the source of each level)
	jq -c -S 'del(.vms[] | .vm_source, .vcpu_source, .vm_unavailable)' \
		"$TMP/halt.before" >"$TMP/halt.dump"
	if cmp -s "$TMP/halt.samples" "$TMP/halt.dump"; then
		pass "every sample of a halted VM equals dump --json ($(jq '[.vms[] | 1 + (.vcpus | length)] | add' "$TMP/halt.before") targets)"
	else
		diff <(jq -S . "$TMP/halt.dump") <(head -1 "$TMP/halt.samples" | jq -S .) | head -20
		fail "every sample of a halted VM equals dump --json"
	fi
else
	fail "the halted VM stayed still" "dump changed between two readings"
fi
# In order, 0.1 s apart on average: one sample may come late on a loaded
# machine and the next one early, back on the recorder's clock.
check "samples are 0.1 s apart on average, in order" jq -s -e \
	'[.[].time] as $t | (($t[-1] - $t[0]) / (($t | length) - 1)) as $m |
	 $m > 0.09 and $m < 0.2 and all(range(1; $t | length); ($t[.] - $t[. - 1]) > 0 and ($t[.] - $t[. - 1]) < 1)' \
	"$TMP/halt.json"
check "time is wall clock (seconds since the epoch)" jq -s -e --argjson now "$(date +%s)" \
	'all(.[]; (.time - $now | fabs) < 120)' "$TMP/halt.json"

# ---- a running guest: counters between the dumps around the record ----
start_vmm --vms 2 --vcpus 2 --hold-stats --workload demo || { fail "tinyvmm (demo) started"; exit 1; }
RUN=$VMM_PID
"$KVMSTATS" dump --json --pid "$RUN" >"$TMP/run.before"
"$KVMSTATS" record --pid "$RUN" --interval 0.1 --count 50 --output "$TMP/run.log"
check "record of a running VM exits 0" test $? = 0
"$KVMSTATS" dump --json --pid "$RUN" >"$TMP/run.after"
"$KVMSTATS" replay --json "$TMP/run.log" >"$TMP/run.json"
check "50 samples of a running VM" test "$(wc -l <"$TMP/run.json")" = 50
# Flatten: "vmI/vcpuJ/stat" -> value, cumulative counters only (the ones
# this KVM maintains move; all must be monotonic).
flat='[.vms | to_entries[] | .key as $i | (.value.stats | to_entries[] |
	select(.value | type == "number") | {key: "vm\($i)/\(.key)", value}),
	(.value.vcpus[] | .index as $c | .stats | to_entries[] |
	select(.value | type == "number") | {key: "vm\($i)/vcpu\($c)/\(.key)", value})] | from_entries'
jq -c "$flat" "$TMP/run.before" >"$TMP/run.flat"
jq -c "$flat" "$TMP/run.json" >>"$TMP/run.flat"
jq -c "$flat" "$TMP/run.after" >>"$TMP/run.flat"
# Counters: exits, halt_exits, fpu_reload, insn_emulation are kept by
# this KVM; the check is on every one that is cumulative by name.
check "exits move during the record" jq -s -e \
	'.[1]["vm0/vcpu0/exits"] < .[50]["vm0/vcpu0/exits"]' "$TMP/run.flat"
check "every counter is monotonic, each sample between its neighbours" jq -s -e \
	'. as $s | [$s[0] | keys[] | select(test("exits$|fpu_reload$|insn_emulation$|tlb_flush$"))] as $k |
	 all($k[]; . as $n | all(range(1; $s | length); $s[.][$n] >= $s[. - 1][$n]))' \
	"$TMP/run.flat"
check "the first dump's counters never exceed a sample's, the last dump's never trail" jq -s -e \
	'. as $s | all($s[0] | keys[] | select(test("exits$")); . as $n |
	 $s[0][$n] <= $s[1][$n] and $s[50][$n] <= $s[51][$n])' "$TMP/run.flat"
"$KVMSTATS" replay --json --rates "$TMP/run.log" >"$TMP/rates.json"
# Each rate is its counter's change over the interval between the two
# samples (not "positive": a guest under emulation on a loaded machine
# need not run in every 0.1 s, and the test does not control that).
check "replay --rates: each exit rate is the counter's change over its interval" jq -s -e \
	'. as $s | all(range(1; $s | length); . as $i | $s[$i].interval > 0 and
	 ($s[$i].vms[0].vcpus[0] | .rates.exits >= 0 and
	  (.rates.exits * $s[$i].interval - (.stats.exits - $s[$i - 1].vms[0].vcpus[0].stats.exits) | fabs) < 0.01))' \
	"$TMP/rates.json"
"$KVMSTATS" replay "$TMP/run.log" >"$TMP/run.table"
check "replay table: a header and 50 lines" test "$(grep -c '^[0-9]' "$TMP/run.table")" = 50
"$KVMSTATS" replay --csv "$TMP/run.log" >"$TMP/run.csv"
check "replay --csv: a row per value of each sample" test \
	"$(($(wc -l <"$TMP/run.csv") - 1))" = "$(jq -s '[.[] | .vms[] | (.stats, .vcpus[].stats) | [.[] | if type == "array" then length else 1 end] | add] | add' "$TMP/run.json")"
t0=$(jq -s '.[0].time' "$TMP/run.json")
inwin=$(jq -s --argjson t0 "$t0" '[.[] | select(.time >= $t0 + 1.05 and .time <= $t0 + 2.05)] | length' "$TMP/run.json")
check "replay --from/--to choose a time window ($inwin samples, about 10)" test \
	"$("$KVMSTATS" replay --json --from "$(jq -n "$t0 + 1.05")" --to "+2.05" "$TMP/run.log" | wc -l)" = "$inwin" -a "$inwin" -ge 8
check "replay --pid of another process prints empty samples" jq -s -e \
	'length == 50 and all(.[]; .vms == [])' <("$KVMSTATS" replay --json --pid 1 "$TMP/run.log")

# ---- kill -9 mid-run, then truncation anywhere -------------------------
# At most 200 samples: each replay below reads the log, and a log that
# grew while a loaded lab looked (3000 samples in one ASan run) made
# them outlast their timeout; in another, this part had not ended
# after 15 minutes. Killed once it has written 20 samples at least
# (1.5 s should do, but a loaded machine or the lab may take seconds to
# start it); each look reads the first 20 only. The interval scales, so
# that the kill comes mid-run in the lab too; a recorder that reached
# its count first left a whole log, which the checks below hold for as
# well (the check's name says which).
"$KVMSTATS" record --pid "$RUN" --interval "$(slow_s 0.01)" --count 200 --output "$TMP/kill.log" &
rec=$!
track $rec
sleep 1.5
wait_until "$(slow 300)" sh -c "[ \$('$KVMSTATS' replay --json '$TMP/kill.log' 2>/dev/null | head -n 20 | wc -l) -ge 20 ]"
kill -KILL $rec 2>/dev/null
wait $rec 2>/dev/null
timeout "$(slow 60)" "$KVMSTATS" replay --json "$TMP/kill.log" >"$TMP/kill.json" 2>"$TMP/kill.err"
rc=$?
n=$(wc -l <"$TMP/kill.json")
how="killed with SIGKILL"
[ "$n" -lt 200 ] || how="that reached its count before the kill"
check "replay of a log $how exits 0" test $rc = 0
check "it holds the samples written before the kill, 20 or more ($n)" test "$n" -ge 20
check "every sample is whole: 2 VMs, 2 vCPUs each, stats filled" jq -s -e \
	'all(.[]; (.vms | length) == 2 and all(.vms[]; (.vcpus | length) == 2 and
	 (.stats | length) > 5 and all(.vcpus[]; (.stats | length) > 20)))' "$TMP/kill.json"

# 50 cuts; 20 under emulation, where each replay of the ASan CLI takes
# over a second (the log parser is fuzzed as well: fuzz/).
size=$(stat -c %s "$TMP/kill.log")
bad=0 torn=0 cuts=50
[ "$SLOW" -gt 1 ] && cuts=20
for _ in $(seq "$cuts"); do
	cut=$((32 + (RANDOM * 32768 + RANDOM) % (size - 32)))
	[ "$cut" -ge "$size" ] && cut=$((size - 1))
	head -c "$cut" "$TMP/kill.log" >"$TMP/cut.log"
	timeout "$(slow 20)" "$KVMSTATS" replay --json "$TMP/cut.log" >"$TMP/cut.json" 2>"$TMP/cut.err"
	rc=$?
	k=$(wc -l <"$TMP/cut.json")
	# What is printed is exactly the first k samples of the whole log.
	if [ $rc != 0 ] || ! cmp -s "$TMP/cut.json" <(head -n "$k" "$TMP/kill.json"); then
		bad=$((bad + 1))
		echo "# cut at $cut: rc $rc, $k samples"
	fi
	grep -q "torn record at offset" "$TMP/cut.err" && torn=$((torn + 1))
done
check "$cuts random truncations: never a crash, only whole samples, in order" test $bad = 0
# A cut that falls exactly between two records is a clean end: rare.
check "the torn tail is reported ($torn of $cuts cuts)" test $torn -ge $((cuts * 4 / 5))
head -c $((size - 3)) "$TMP/kill.log" >"$TMP/cut.log"
"$KVMSTATS" replay --json "$TMP/cut.log" >"$TMP/cut.json" 2>"$TMP/cut.err"
check "a torn last record: exit 0, every sample before it" test $? = 0 -a \
	"$(wc -l <"$TMP/cut.json")" = "$((n - 1))"
check "stderr says where the torn record starts" grep -q \
	"log ends with a torn record at offset [0-9]*: skipped" "$TMP/cut.err"

# ---- a full disk: a 64 KiB tmpfs in a private mount namespace --------
if unshare -m true 2>/dev/null; then
	mkdir -p "$TMP/small"
	N=60	# samples; the disk is full for a while in between
	unshare -m bash -c '
		set -u
		mount -t tmpfs -o size=64k none "$1" || exit 3
		"$4" record --pid "$2" --interval "$5" --count "$7" \
			--output "$1/log" 2>"$3/full.err" &
		rec=$!
		# Fill the disk once the recorder writes (its first samples in
		# the log), then free it.
		for _ in $(seq 600); do [ -s "$1/log" ] && break; sleep 0.05; done
		sleep "$5"; sleep "$5"
		dd if=/dev/zero of="$1/filler" bs=4k 2>/dev/null
		sleep "$6"
		rm -f "$1/filler"
		wait $rec
		echo $? >"$3/full.rc"
		cp "$1/log" "$3/full.log"
	' _ "$TMP/small" "$RUN" "$TMP" "$KVMSTATS" "$(slow_s 0.05)" "$(slow_s 1)" "$N"
	check "record survives a full disk (it ran to --count)" grep -q "of $N samples" "$TMP/full.err"
	check "exit status 1: samples were dropped" test "$(cat "$TMP/full.rc")" = 1
	check "ENOSPC reported once" test \
		"$(grep -c 'No space left on device' "$TMP/full.err")" = 1
	check "it says when it writes again" grep -q "writing again after [0-9]* dropped" \
		"$TMP/full.err"
	"$KVMSTATS" replay --json "$TMP/full.log" >"$TMP/full.json" 2>"$TMP/full.rerr"
	check "the log of a full disk replays, exit 0" test $? = 0
	check "no damage in it (partial writes were cut back)" test ! -s "$TMP/full.rerr"
	dropped=$(grep -o "[0-9]* of $N samples could not be written" "$TMP/full.err" | cut -d' ' -f1)
	check "it holds every sample not dropped ($(wc -l <"$TMP/full.json") + ${dropped:-?} = $N)" \
		test "$(($(wc -l <"$TMP/full.json") + ${dropped:-999}))" = "$N"
	check "samples from before and after the disk was full" jq -s -e \
		'(.[-1].time - .[0].time) > 2' "$TMP/full.json"
else
	skip "full disk" "unshare -m is not permitted here"
fi

# ---- rotation -----------------------------------------------------------
"$KVMSTATS" record --pid "$RUN" --interval 0.01 --count 300 --rotate-size 32K \
	--rotate-keep 2 --output "$TMP/rot.log"
check "record --rotate-size exits 0" test $? = 0
check "two old files kept, no third" test -f "$TMP/rot.log.1" -a -f "$TMP/rot.log.2" \
	-a ! -e "$TMP/rot.log.3"
ok=1
for f in "$TMP/rot.log" "$TMP/rot.log.1" "$TMP/rot.log.2"; do
	[ "$(stat -c %s "$f")" -le $((32768 + 12288)) ] || ok=0
	"$KVMSTATS" replay --json "$f" >"$TMP/rot.json" 2>"$TMP/rot.err" || ok=0
	[ -s "$TMP/rot.err" ] && ok=0
	# Each file stands alone: whole samples from its first one.
	jq -s -e 'length > 1 and all(.[]; (.vms | length) == 2 and
		all(.vms[].vcpus[]; .stats.exits > 0))' "$TMP/rot.json" >/dev/null || ok=0
done
check "each rotated file is small, whole, and replays alone" test $ok = 1

# ---- SIGHUP reopens (logrotate moves the file first) --------------------
"$KVMSTATS" record --pid "$RUN" --interval 0.05 --output "$TMP/hup.log" 2>"$TMP/hup.err" &
rec=$!
track $rec
# Each file gets its samples before the next step (the recorder is slow
# to start under emulation: 6 samples in 1 s were seen in the lab).
wait_samples "$TMP/hup.log" 10
mv "$TMP/hup.log" "$TMP/hup.log.old"
kill -HUP $rec
sleep 0.2
wait_samples "$TMP/hup.log" 10
kill -TERM $rec
wait $rec
check "record stops on SIGTERM with status 0" test $? = 0
check "SIGHUP made a new file" test -f "$TMP/hup.log"
a=$(samples "$TMP/hup.log.old") b=$(samples "$TMP/hup.log")
check "both files replay with samples ($a + $b)" test "$a" -ge 10 -a "$b" -ge 10
check "the reopened file is whole by itself" jq -s -e \
	'all(.[]; (.vms | length) == 2 and all(.vms[].vcpus[]; .stats.exits > 0))' \
	<("$KVMSTATS" replay --json "$TMP/hup.log")

# ---- VMMs that start and exit during a record ---------------------------
# A copy of the VMM under a name of its own: --name then matches only it,
# whatever else runs on this host.
uniq=kvst$$
cp "$TINYVMM" "$TMP/$uniq"
# The record runs until the VMM has come and gone (not for a fixed time:
# on a loaded machine the VMM may start late).
"$KVMSTATS" record --name "^$uniq\$" --refresh 0.2 --interval 0.05 \
	--output "$TMP/come.log" 2>/dev/null &
rec=$!
track $rec
wait_samples "$TMP/come.log" 3
TINYVMM=$TMP/$uniq start_vmm --vms 1 --vcpus 2 --hold-stats --workload demo --timeout 2 ||
	fail "tinyvmm copy started"
wait "$VMM_PID"
last_empty() { "$KVMSTATS" replay --json "$1" 2>/dev/null | tail -1 | jq -e '.vms == []' >/dev/null; }
wait_until "$(slow 50)" last_empty "$TMP/come.log"
kill -TERM $rec
wait $rec
check "record of VMMs coming and going exits 0" test $? = 0
"$KVMSTATS" replay --json "$TMP/come.log" >"$TMP/come.json"
check "a VMM that starts during the record is picked up, one that exits is dropped" jq -s -e \
	--arg n "$uniq" '(.[0].vms == []) and (.[-1].vms == []) and
	 any(.[]; .vms | length == 1 and .[0].name == $n and (.[0].vcpus | length) == 2)' \
	"$TMP/come.json"

# ---- record --log: vmstat-like text --------------------------------------
"$KVMSTATS" record --pid "$RUN" --log --interval 0.02 --count 46 -f 'exits' >"$TMP/text"
check "record --log exits 0" test $? = 0
check "45 lines of rates (the first reading has none)" test "$(grep -c '^[0-9]' "$TMP/text")" = 45
check "the header repeats every 20 lines" test "$(grep -n '^time' "$TMP/text" | cut -d: -f1 | tr '\n' ' ')" = "1 22 43 "
check "--fields chose the exit counters" test "$(head -1 "$TMP/text" | tr -s ' ' '\n' | grep -vc 'exits$\|^time$')" = 0
# (a rate over 20 ms of a guest the test does not pace may be 0: the
# rates are checked against the kernel's counters above, here their form)
check "every exit rate is a number, never negative" awk '
	NR == 1 { for (i = 1; i <= NF; i++) h[i] = $i; next }
	/^[0-9]/ { n++; for (i = 2; i <= NF; i++) if (h[i] ~ /exits$/ && $i !~ /^[0-9]+(\.[0-9]+)?[kMG]?$/) bad = 1 }
	END { exit bad || n != 45 }' "$TMP/text"
# --skip-zero keeps the stats counted so far and drops those still at 0
# (which they are depends on the KVM: kvm_pvm never counts io_exits, a
# stock KVM does): the kernel's fds, read before and after, say which.
# Cumulative counters only: they never go down, so 0 before and after is
# 0 all along, and counted before is counted at record's first reading.
# totals FILE: "name total" per cumulative stat, summed over VMs and vCPUs.
totals() {
	jq -r '[.vms[] | .stats, .vcpus[].stats | to_entries[] |
		select(.value.type == "cumulative" and (.value.value | type) == "number") |
		{key, value: .value.value}] |
		group_by(.key)[] | "\(.[0].key) \([.[].value] | add)"' "$1"
}
"$KVMSTATS" dump --pid "$RUN" --json --verbose | totals /dev/stdin >"$TMP/z0"
"$KVMSTATS" record --pid "$RUN" --log --csv --interval 0.02 --count 30 -z >"$TMP/csv"
"$KVMSTATS" dump --pid "$RUN" --json --verbose | totals /dev/stdin >"$TMP/z1"
check "record --log --csv: one header, 29 rows" test "$(grep -c '^time,' "$TMP/csv")" = 1 -a \
	"$(wc -l <"$TMP/csv")" = 30
head -1 "$TMP/csv" | tr -d "\r" | tr , "\n" | sort >"$TMP/cols" # CRLF: RFC 4180
zero=$(join "$TMP/z0" "$TMP/z1" | awk '$2 == 0 && $3 == 0 { print $1 }' | sort)
counted=$(awk '$2 > 0 { print $1 }' "$TMP/z0" | sort)
echo "# never counted here: $(echo $zero)"
check "--skip-zero drops the stats this KVM left at 0 ($(echo "$zero" | wc -w))" \
	test -n "$zero" -a -z "$(comm -12 "$TMP/cols" <(echo "$zero"))"
check "--skip-zero keeps every stat counted so far ($(echo "$counted" | wc -w))" \
	test -n "$counted" -a -z "$(comm -13 "$TMP/cols" <(echo "$counted"))"
"$KVMSTATS" record --pid "$RUN" --log --include-past --interval 0.05 --count 3 -f '^exits$' >"$TMP/past"
check "--include-past prints totals from the first reading" test \
	"$(grep -c '^[0-9]' "$TMP/past")" = 3
check "--log-file appends text to a file" bash -c \
	"'$KVMSTATS' record --pid $RUN --log-file '$TMP/text.log' --interval 0.02 --count 3 &&
	 test \$(grep -c '^[0-9]' '$TMP/text.log') = 2"

# ---- bad input ----------------------------------------------------------
"$KVMSTATS" record --interval 0.001 --output "$TMP/x.log" 2>/dev/null
check "record --interval below 10 ms is a usage error" test $? = 2
"$KVMSTATS" record 2>/dev/null
check "record without --output or --log is a usage error" test $? = 2
echo "not a log" >"$TMP/notlog"
"$KVMSTATS" record --pid "$RUN" --count 1 --output "$TMP/notlog" 2>"$TMP/notlog.err"
check "record refuses to append to a file that is not a log" test $? = 1 -a \
	"$(cat "$TMP/notlog")" = "not a log"
"$KVMSTATS" replay "$TMP/notlog" 2>"$TMP/notlog.err"
check "replay of a file that is not a log fails with a clear line" test $? = 1 -a \
	"$(grep -c 'not a kvmstats log' "$TMP/notlog.err")" = 1
"$KVMSTATS" record --pid "$RUN" --interval 0.05 --output "$TMP/lock.log" &
rec=$!
track $rec
sleep 0.3
"$KVMSTATS" record --pid "$RUN" --count 1 --output "$TMP/lock.log" 2>"$TMP/lock.err"
check "a second recorder on the same log is refused" test $? = 1 -a \
	"$(grep -c 'another recorder' "$TMP/lock.err")" = 1
kill -TERM $rec
wait $rec
