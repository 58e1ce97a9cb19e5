#!/bin/bash
# The qmp source against real QEMU: the stats kvmstats reads over QMP are
# QEMU's own query-stats (same names, same values within the bounds of two
# queries taken right before and after), with the kernel's VM and vCPU
# ids; the monitor is found on QEMU's command line (-qmp, or -chardev +
# -mon) or given with --qmp; a hung monitor gives a clear error within the
# timeout without losing the other VMs; a monitor held by another client
# fails at once; kvmstats holds a monitor only for one exchange, so the
# operator's own QMP client gets in while `record` runs, and a monitor
# held by someone else makes the reads serve older values, then fail,
# then recover; and `kvmstats list --json` has its documented shape.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu labqemu
source "$(dirname "$0")/../lib.sh"
require_kvm qmp
command -v socat >/dev/null || { skip qmp "socat is not installed"; exit 0; }
command -v jq >/dev/null || { skip qmp "jq is not installed"; exit 0; }
[ -f "$MBGUEST" ] || { skip qmp "build/mbguest.elf is not built"; exit 0; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }
TIMEOUT_MS=1000		# the library's default per-exchange timeout

# connected SOCK: does a client hold QEMU's monitor at SOCK? (QEMU serves
# one at a time; the test's own queries and kvmstats take turns.)
connected() {
	awk -v p="$1" '$6 == "03" && $8 == p' /proc/net/unix | grep -q .
}
wait_free() {
	local i
	for i in $(seq 50); do connected "$1" || return 0; sleep 0.05; done
	return 1
}

# qemu_only NAME ARGS...: our guest under QEMU with only the monitor ARGS
# given (no -qmp of start_qemu). Sets QEMU_PID.
qemu_only() {
	local name=$1 i
	shift
	local serial=$TMP/$name.serial
	"$QEMU" -enable-kvm -m 64 -smp 1 -display none -nodefaults \
		-no-user-config -name "guest=$name" -serial "file:$serial" \
		-kernel "$MBGUEST" -append 'exits=100' "$@" 2>/dev/null &
	QEMU_PID=$!
	track "$QEMU_PID"
	for i in $(seq 300); do
		grep -q READY "$serial" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# stats_of JSON: QEMU's query-stats replies as {"vm": {name: v}, "vcpus":
# {cpu-index: {name: v}}} (booleans as 0/1), with query-cpus-fast's map.
QUERY=('{"execute":"query-stats","arguments":{"target":"vm","providers":[{"provider":"kvm"}]}}'
	'{"execute":"query-stats","arguments":{"target":"vcpu","providers":[{"provider":"kvm"}]}}'
	'{"execute":"query-cpus-fast"}')
# QEMU lists a histogram's buckets last first (it builds the list by
# prepending); kvmstats gives the kernel's order (agree.sh checks that
# against the kernel's own stats fds), so QEMU's lists are turned round.
JQ_NORM='def norm: map({key: .name, value: (.value | if type == "boolean" then (if . then 1 else 0 end) elif type == "array" then reverse else . end)}) | from_entries;'
qemu_stats() {
	wait_free "$1"
	qmp "$1" "${QUERY[@]}" | jq -s "$JQ_NORM"'
		(.[3].return | map({key: .["qom-path"], value: .["cpu-index"]}) | from_entries) as $idx
		| {vm: (.[1].return[0].stats | norm),
		   vcpus: (.[2].return | map({key: ($idx[.["qom-path"]] | tostring), value: (.stats | norm)}) | from_entries),
		   tids: (.[3].return | map({key: (.["cpu-index"] | tostring), value: .["thread-id"]}) | from_entries)}'
}
ours() {
	jq 'def norm: .;
		def unbool: with_entries(.value |= (if type == "boolean" then (if . then 1 else 0 end) else . end));
		.vms[0] | {vm: (.stats | unbool), vcpus: (.vcpus | map({key: (.index | tostring), value: (.stats | unbool)}) | from_entries)}'
}

# within BEFORE OURS AFTER: every value of ours lies between QEMU's two
# readings (element by element for histograms), for the same set of stats.
within() {
	jq -n --argjson b "$1" --argjson o "$2" --argjson a "$3" '
		def flat: [paths(scalars) as $p | {key: ($p | map(tostring) | join(".")), value: getpath($p)}] | from_entries;
		($b | flat) as $B | ($o | flat) as $O | ($a | flat) as $A
		| [($O | keys[]) as $k | select(($B[$k] == null) or ($O[$k] < ([$B[$k], $A[$k]] | min)) or ($O[$k] > ([$B[$k], $A[$k]] | max))) | "\($k)=\($O[$k]) not in [\($B[$k]), \($A[$k])]"]
		+ [($B | keys[]) as $k | select($O[$k] == null) | "\($k) missing"]
		| .[:3] | join("; ")' -r
}

QEMU_MEM=128 QEMU_SMP=2 start_qemu q1 'exits=1000' || { fail "qmp: QEMU starts" "no READY"; exit 0; }
Q1=$QEMU_PID S1=$QMP_SOCK

# ---- dump over QMP equals QEMU's own query-stats --------------------------
before=$(qemu_stats "$S1")
wait_free "$S1"
"$KVMSTATS" dump --pid "$Q1" --json >"$TMP/d1.json" 2>"$TMP/d1.err"
rc=$?
after=$(qemu_stats "$S1")
# QEMU 8.1+ holds its vCPUs' stats fds: kvmstats reads those, and only
# the VM stats over QMP; QEMU 7.2 has only its monitor.
if qemu_holds_stats; then
	WANT_LEVELS='{"source":"fd","vm_source":"qmp","vcpu_source":"fd"}'
	WANT_TITLE='source fd (VM stats: qmp, vCPU stats: fd)'
else
	WANT_LEVELS='{"source":"qmp","vm_source":"qmp","vcpu_source":"qmp"}'
	WANT_TITLE='source qmp'
fi
levels() { jq -c '.vms[0] | {source, vm_source, vcpu_source}' "$1" 2>/dev/null; }
if [ $rc = 0 ] && [ "$(levels "$TMP/d1.json")" = "$WANT_LEVELS" ]; then
	pass "qmp: dump --pid of a QEMU with only a QMP socket reads it through qmp"
else
	fail "qmp: dump --pid of a QEMU with only a QMP socket reads it through qmp" \
		"rc $rc: $(head -c 300 "$TMP/d1.err") $(levels "$TMP/d1.json") want $WANT_LEVELS"
fi
mine=$(ours <"$TMP/d1.json")
bad=$(within "$(jq -c 'del(.tids)' <<<"$before")" "$mine" "$(jq -c 'del(.tids)' <<<"$after")")
nvals=$(jq '[.vm, .vcpus[]] | map(length) | add' <<<"$mine")
[ -z "$bad" ] && [ "$nvals" -ge 60 ] &&
	pass "qmp: $nvals VM and vCPU stats equal QEMU's query-stats (between two queries)" ||
	fail "qmp: VM and vCPU stats equal QEMU's query-stats" "${bad:-only $nvals stats}"
exits=$(jq '[.vcpus[].exits] | add' <<<"$mine")
[ "$exits" -ge 1000 ] && pass "qmp: the guest's 1000 exits are counted ($exits)" ||
	fail "qmp: the guest's 1000 exits are counted" "exits $exits"
hist=$(jq -c '.vms[0].vcpus[0].stats.halt_wait_hist | length' "$TMP/d1.json")
[ "$hist" -gt 1 ] && pass "qmp: histograms kept as arrays ($hist buckets)" ||
	fail "qmp: histograms kept as arrays" "halt_wait_hist: $hist"

# The kernel's ids: kvm-PID for the VM, kvm-TID/vcpu-N for the vCPU
# created by thread TID.
want=$(jq -c --arg p "$Q1" '{vm: "kvm-\($p)", vcpus: (.tids | to_entries | map("kvm-\(.value)/vcpu-\(.key)") | sort)}' <<<"$before")
got=$(jq -c '{vm: .vms[0].id, vcpus: ([.vms[0].vcpus[].id] | sort)}' "$TMP/d1.json")
[ "$want" = "$got" ] && pass "qmp: VM and vCPU ids are the kernel's ($got)" ||
	fail "qmp: VM and vCPU ids are the kernel's" "want $want got $got"
# The kernel's own ids, read from real stats fds (attach), agree.
wait_free "$S1"
if "$KVMSTATS" dump --pid "$Q1" --attach --json >"$TMP/att.json" 2>"$TMP/att.err" &&
	[ "$(jq -r '.vms[0].source' "$TMP/att.json")" = fd ]; then
	kern=$(jq -c '{vm: .vms[0].id, vcpus: ([.vms[0].vcpus[].id] | sort)}' "$TMP/att.json")
	[ "$kern" = "$got" ] && pass "qmp: ids equal the kernel's stats fds' (attach)" ||
		fail "qmp: ids equal the kernel's stats fds' (attach)" "kernel $kern qmp $got"
else
	skip "qmp: ids equal the kernel's stats fds' (attach)" "attach failed: $(head -1 "$TMP/att.err")"
fi
idx=$(jq -c '[.vms[0].vcpus[].index]' "$TMP/d1.json")
[ "$idx" = "[0,1]" ] && pass "qmp: vCPUs in index order" || fail "qmp: vCPUs in index order" "$idx"

# The same stats through the table, and with the source named.
wait_free "$S1"
"$KVMSTATS" dump --pid "$Q1" --source qmp --json >"$TMP/d2.json" 2>"$TMP/d2.err"
rc=$?
[ $rc = 0 ] && [ "$(jq -r '.vms[0].source' "$TMP/d2.json")" = qmp ] &&
	[ "$(jq -c '[.vms[0].stats | keys[]]' "$TMP/d2.json")" = "$(jq -c '[.vms[0].stats | keys[]]' "$TMP/d1.json")" ] &&
	pass "qmp: --source qmp" || fail "qmp: --source qmp" "rc $rc $(head -c 200 "$TMP/d2.err")"
wait_free "$S1"
"$KVMSTATS" dump --pid "$Q1" >"$TMP/d.txt" 2>&1
grep -qF "$WANT_TITLE" "$TMP/d.txt" && grep -q "halt_wait_hist" "$TMP/d.txt" &&
	pass "qmp: dump table of a QMP VM" || fail "qmp: dump table of a QMP VM" "$(head -3 "$TMP/d.txt")"

# ---- finding the monitor ----------------------------------------------------
if qemu_only q2 -chardev "socket,id=mon0,path=$TMP/q2.sock,server=on,wait=off" \
	-mon chardev=mon0,mode=control; then
	Q2=$QEMU_PID
	"$KVMSTATS" dump --pid "$Q2" --source qmp --json >"$TMP/q2.json" 2>"$TMP/q2.err"
	[ "$(jq -r '.vms[0].source' "$TMP/q2.json" 2>/dev/null)" = qmp ] &&
		[ "$(jq '.vms[0].vcpus | length' "$TMP/q2.json")" = 1 ] &&
		pass "qmp: monitor found from -chardev socket + -mon mode=control" ||
		fail "qmp: monitor found from -chardev socket + -mon mode=control" "$(head -c 300 "$TMP/q2.err")"
	kill "$Q2"
else
	fail "qmp: QEMU with -chardev/-mon starts"
fi

# A monitor the command line does not tell (the socket was moved): --qmp.
if qemu_only q3 -qmp "unix:$TMP/q3.sock,server=on,wait=off"; then
	Q3=$QEMU_PID
	mv "$TMP/q3.sock" "$TMP/q3-moved.sock"
	"$KVMSTATS" dump --pid "$Q3" --source qmp --json >"$TMP/q3a.json" 2>"$TMP/q3a.err"
	rc=$?
	[ $rc = 1 ] && grep -q -- "--qmp\|QMP socket" "$TMP/q3a.err" &&
		pass "qmp: no reachable monitor: a clear error ($(head -1 "$TMP/q3a.err"))" ||
		fail "qmp: no reachable monitor: a clear error" "rc $rc: $(cat "$TMP/q3a.err")"
	"$KVMSTATS" dump --pid "$Q3" --qmp "$TMP/q3-moved.sock" --json >"$TMP/q3b.json" 2>"$TMP/q3b.err"
	rc=$?
	[ $rc = 0 ] && [ "$(jq -r '.vms[0].vm_source' "$TMP/q3b.json")" = qmp ] &&
		[ "$(jq -r '.vms[0].id' "$TMP/q3b.json")" = "kvm-$Q3" ] &&
		pass "qmp: --qmp PATH" || fail "qmp: --qmp PATH" "rc $rc: $(head -c 300 "$TMP/q3b.err")"
	"$KVMSTATS" dump --pid "$Q3" --qmp "$TMP/nothing.sock" --source qmp >/dev/null 2>"$TMP/q3c.err"
	rc=$?
	[ $rc = 1 ] && grep -q "nothing.sock" "$TMP/q3c.err" &&
		pass "qmp: --qmp of a missing socket: a clear error" ||
		fail "qmp: --qmp of a missing socket: a clear error" "rc $rc: $(cat "$TMP/q3c.err")"
	kill "$Q3"
else
	fail "qmp: QEMU with -qmp starts"
fi

# ---- a hung monitor ---------------------------------------------------------
# QEMU's own socket moved aside, and in its place a listener that accepts
# one client and never says a word (its input, a FIFO, never has data).
mkfifo "$TMP/mute"
exec 8<>"$TMP/mute"
if qemu_only q4 -qmp "unix:$TMP/q4.sock,server=on,wait=off"; then
	Q4=$QEMU_PID
	mv "$TMP/q4.sock" "$TMP/q4-real.sock"
	for order in "$Q4 $Q1" "$Q1 $Q4"; do
		set -- $order
		rm -f "$TMP/q4.sock"
		socat "UNIX-LISTEN:$TMP/q4.sock" STDIO <&8 >/dev/null 2>&1 &
		MUTE=$!
		track "$MUTE"
		wait_file "$TMP/q4.sock" 5
		wait_free "$S1"
		t0=$(now_ms)
		"$KVMSTATS" dump --pid "$1" --pid "$2" --source qmp --json >"$TMP/h.json" 2>"$TMP/h.err"
		rc=$?
		dt=$(($(now_ms) - t0))
		vms=$(jq -c '[.vms[] | {pid, source, n: (.vcpus | length)}]' "$TMP/h.json" 2>/dev/null)
		if [ $rc = 1 ] && [ $dt -le $((TIMEOUT_MS + $(slow 1500))) ] &&
			grep -q "pid $Q4: .*\(hung\|in time\)" "$TMP/h.err" &&
			[ "$vms" = "[{\"pid\":$Q1,\"source\":\"qmp\",\"n\":2}]" ]; then
			pass "qmp: hung monitor (pids $order): error in $dt ms, the other VM read ($(head -1 "$TMP/h.err"))"
		else
			fail "qmp: hung monitor (pids $order)" "rc $rc in $dt ms; vms $vms; $(cat "$TMP/h.err")"
		fi
		kill "$MUTE" 2>/dev/null	# socat may have left with its peer
		wait "$MUTE" 2>/dev/null
	done
	kill "$Q4"
else
	fail "qmp: QEMU for the hung-monitor test starts"
fi

# ---- a monitor held by another client -------------------------------------
wait_free "$S1"
# "At once" is against what a read of the free monitor costs here (the
# CLI's start and an exchange: some 50 ms on a host, near a second under
# the lab's emulation): a busy monitor must answer at least half a
# timeout sooner than a hung one, which costs that plus the timeout.
t0=$(now_ms)
"$KVMSTATS" dump --pid "$Q1" --source qmp --json >/dev/null 2>&1
base=$(($(now_ms) - t0))
wait_free "$S1"
# A client whose input never ends: socat holds the monitor until killed.
mkfifo "$TMP/hold"
exec 9<>"$TMP/hold"
socat - "UNIX-CONNECT:$S1" <&9 >/dev/null 2>&1 &
HOLDER=$!
track "$HOLDER"
for _ in $(seq 50); do connected "$S1" && break; sleep 0.05; done
t0=$(now_ms)
"$KVMSTATS" dump --pid "$Q1" --source qmp --json >"$TMP/b.json" 2>"$TMP/b.err"
rc=$?
dt=$(($(now_ms) - t0))
[ $rc = 1 ] && grep -q "busy" "$TMP/b.err" && [ $dt -lt $((base + TIMEOUT_MS / 2)) ] &&
	pass "qmp: a monitor held by another client fails at once ($dt ms, a free one $base ms: $(head -1 "$TMP/b.err"))" ||
	fail "qmp: a monitor held by another client fails at once" "rc $rc in $dt ms (a free one $base ms): $(cat "$TMP/b.err")"
kill "$HOLDER" 2>/dev/null
wait "$HOLDER" 2>/dev/null
exec 9>&-
wait_free "$S1"
"$KVMSTATS" dump --pid "$Q1" --source qmp --json >/dev/null 2>"$TMP/b2.err" &&
	pass "qmp: the monitor serves kvmstats again once free" ||
	fail "qmp: the monitor serves kvmstats again once free" "$(cat "$TMP/b2.err")"

# ---- the monitor stays the operator's ---------------------------------------
# kvmstats holds a monitor only for one exchange: while `record` reads Q1
# over QMP, the socket is free nearly all the time, the operator's own QMP
# client and a second kvmstats get in, and the samples keep moving. Every
# query-stats of a vCPU kicks it out of KVM_RUN (QEMU 7.2 opens the stats
# fd on the vCPU thread), so signal_exits counts our polls even in a
# halted guest.
wait_free "$S1"
# (Periods scale with the slowdown of the lab, where an exchange takes
# longer: the share of time the monitor is held stays what it measures.)
"$KVMSTATS" record --pid "$Q1" --source qmp --interval "$(slow_s 0.1)" --count 2000 \
	--output "$TMP/share.kvl" >/dev/null 2>"$TMP/share.err" &
REC=$!
track "$REC"
sleep "$(slow_s 0.5)"
held=0
for _ in $(seq 50); do
	connected "$S1" && held=$((held + 1))
	sleep "$(slow_s 0.02)"
done
[ $held -le 15 ] && pass "qmp: record holds the monitor only while it polls (held at $held of 50 looks)" ||
	fail "qmp: record holds the monitor only while it polls" "held at $held of 50 looks"
T_OPS=$(now_ms)
ops=0 dumps=0
for _ in $(seq 5); do
	qmp "$S1" '{"execute":"query-status"}' | grep -q '"status"' && ops=$((ops + 1))
	"$KVMSTATS" dump --pid "$Q1" --source qmp --json 2>>"$TMP/share2.err" |
		jq -e '.vms[0].source == "qmp"' >/dev/null && dumps=$((dumps + 1))
	sleep "$(slow_s 0.3)"
done
T_OPS_END=$(now_ms)
kill -0 "$REC" 2>/dev/null && rec_alive=yes || rec_alive=no
[ $ops = 5 ] && [ $rec_alive = yes ] &&
	pass "qmp: another QMP client uses the socket while record runs (5 of 5 query-status)" ||
	fail "qmp: another QMP client uses the socket while record runs" "$ops of 5 answered; record running: $rec_alive"
[ $dumps = 5 ] && pass "qmp: a second kvmstats reads the same QEMU while record runs (5 of 5 dumps)" ||
	fail "qmp: a second kvmstats reads the same QEMU while record runs" "$dumps of 5: $(head -2 "$TMP/share2.err")"
sleep "$(slow_s 0.5)"
kill -TERM "$REC"
wait "$REC"
rc=$?
"$KVMSTATS" replay --json "$TMP/share.kvl" >"$TMP/share.json" 2>>"$TMP/share.err"
# The poll count seen by the samples: rising, and rising also while the
# other clients were at work.
# QEMU up to 8.0 opens a vCPU's stats fd on its thread at every
# query-stats, kicking it out of KVM_RUN: signal_exits counts our polls.
# QEMU 8.1+ reads the fds it holds and leaves no trace in the guest:
# there the samples must be there, with values, during the others' use.
POLLS=.vms[0].vcpus[0].stats.signal_exits MIN_POLLS=25
qemu_holds_stats && POLLS='(.vms[0].vcpus | length)' MIN_POLLS=0
out=$(jq -s -r --argjson a "$T_OPS" --argjson b "$T_OPS_END" --argjson min "$MIN_POLLS" '
	[.[] | {t: (.time * 1000), s: '"$POLLS"'}] as $x
	| ($x | map(.s | numbers)) as $v
	| ($x | map(select(.t > $a and .t < $b) | .s | numbers) | unique | length) as $during
	| if ($x | length) < 40 then "only \($x | length) samples"
	  elif $v != ($v | sort) then "signal_exits went down"
	  elif ($v[-1] - $v[0]) < $min then "only \($v[-1] - $v[0]) polls"
	  elif $min > 0 and $during < 3 then "only \($during) values while the others used the socket"
	  elif ($x | map(select(.t > $a and .t < $b and (.s | numbers))) | length) < 3 then "no sample while the others used the socket"
	  else "" end' "$TMP/share.json" 2>&1)
[ $rc = 0 ] && [ -z "$out" ] &&
	pass "qmp: the record's samples kept updating ($(jq -s '.[-1].vms[0].vcpus[0].stats.signal_exits - .[0].vms[0].vcpus[0].stats.signal_exits' "$TMP/share.json") polls)" ||
	fail "qmp: the record's samples kept updating" "rc $rc: $out $(head -2 "$TMP/share.err")"

# A monitor held by another client while kvmstats reads it: the polls find
# it busy and are tried again at the next sweep; meanwhile the reads keep
# the last values, older and older, and then (busy for longer than the
# QMP timeout, 1 s of the 1.5 s hold) fail (EBUSY); once the other
# client leaves, fresh values again. Seen through the library's loop
# (build/tests/lifecycle_driver logs each sweep: errs, age_ms).
DRIVER=${DRIVER:-$ROOT/build/tests/lifecycle_driver}
[ -x "$DRIVER" ] || make -s -C "$ROOT" build/tests/lifecycle_driver >/dev/null 2>&1
if [ -x "$DRIVER" ]; then
	wait_free "$S1"
	"$DRIVER" run --seconds "$(slow 5)" --interval-ms "$(slow 100)" --timeout-ms "$(slow "$TIMEOUT_MS")" \
		>"$TMP/busy.log" 2>"$TMP/busy.err" &
	DRV=$!
	track "$DRV"
	sleep "$(slow_s 1.2)"
	exec 9<>"$TMP/hold"
	socat - "UNIX-CONNECT:$S1" <&9 >/dev/null 2>&1 &
	HOLDER=$!
	track "$HOLDER"
	T_HOLD=$(now_ms)
	sleep "$(slow_s 1.5)"
	kill "$HOLDER" 2>/dev/null
	wait "$HOLDER" 2>/dev/null
	exec 9>&-
	T_FREE=$(now_ms)
	wait "$DRV"
	# Per phase: sweeps, failed sweeps, largest age; and whether the age
	# grew while stale values were served.
	out=$(grep "^V .* pid=$Q1 " "$TMP/busy.log" | awk -v h="$T_HOLD" -v f="$T_FREE" -v k="$SLOW" '
		{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
		{ p = v["t"] < h ? "before" : v["t"] < f ? "held" : v["t"] > f + 700 * k ? "after" : "" }
		p == "" { next }
		{ n[p]++; if (v["errs"] > 0) e[p]++; else if (v["age_ms"] + 0 > a[p]) a[p] = v["age_ms"] + 0 }
		p == "held" && v["errs"] == 0 && last > 150 * k && v["age_ms"] + 0 < last { shrunk = 1 }
		p == "held" && v["errs"] == 0 { last = v["age_ms"] + 0 }
		END { printf "%d %d %d %d %d %d %d %d %d %d", n["before"], e["before"], a["before"],
			n["held"], e["held"], a["held"], n["after"], e["after"], a["after"], shrunk }')
	read -r nb eb ab nh eh ah na ea aa shrunk <<<"$out"
	[ "$nb" -ge 5 ] && [ "$eb" = 0 ] && [ "$ab" -lt $(slow 400) ] &&
		pass "qmp: before another client holds the monitor: fresh values ($nb sweeps, age up to $ab ms)" ||
		fail "qmp: before another client holds the monitor: fresh values" "sweeps errors age: $nb $eb $ab"
	[ "$nh" -ge 5 ] && [ "$ah" -ge $(slow 200) ] && [ "$shrunk" = 0 ] &&
		pass "qmp: monitor busy: the last values are served with their growing age (up to $ah ms)" ||
		fail "qmp: monitor busy: the last values are served with their growing age" "sweeps $nh, age up to $ah ms, shrunk $shrunk"
	[ "$eh" -ge 1 ] && [ "$eh" -lt "$nh" ] &&
		pass "qmp: monitor busy: after several busy polls, once busy for the QMP timeout, the reads fail ($eh of $nh sweeps)" ||
		fail "qmp: monitor busy: once busy for the QMP timeout, the reads fail" "$eh of $nh sweeps failed"
	[ "$na" -ge 5 ] && [ "$ea" = 0 ] && [ "$aa" -lt $(slow 400) ] &&
		pass "qmp: monitor free again: fresh values ($na sweeps, age up to $aa ms)" ||
		fail "qmp: monitor free again: fresh values" "sweeps errors age: $na $ea $aa; $(head -2 "$TMP/busy.err")"
else
	skip "qmp: a monitor held while kvmstats reads it" "build/tests/lifecycle_driver does not build"
fi

# ---- kvmstats list ------------------------------------------------------------
start_vmm --hold-stats --vcpus 3 || exit 0
V=$VMM_PID
wait_free "$S1"
"$KVMSTATS" list --json >"$TMP/l.json" 2>"$TMP/l.err"
rc=$?
shape=$(jq -r 'if type != "array" then "not an array" else
	(map(select((.pid | type) != "number" or (.name | type) != "string" or (.vcpus | type) != "number"
		or ((.memory_bytes | type) != "number" and .memory_bytes != null)
		or (.sources | type) != "array" or (.sources | map(type) | unique - ["string"] | length) != 0))
	| if length == 0 then "" else "bad element \(.[0])" end) end' "$TMP/l.json" 2>&1)
[ $rc = 0 ] && [ -z "$shape" ] && pass "qmp: list --json shape" ||
	fail "qmp: list --json shape" "rc $rc: $shape $(head -c 200 "$TMP/l.err")"
q=$(jq -c --argjson p "$Q1" '.[] | select(.pid == $p) | {name, vcpus, memory_bytes, qmp: (.sources | index("qmp") != null), source, vm_source, vcpu_source}' "$TMP/l.json")
want=$(jq -c '{name: "q1", vcpus: 2, memory_bytes: 134217728, qmp: true} + .' <<<"$WANT_LEVELS")
[ "$q" = "$want" ] &&
	pass "qmp: list shows the QEMU: name, vCPUs, memory, qmp" || fail "qmp: list shows the QEMU" "$q"
t=$(jq -c --argjson p "$V" '.[] | select(.pid == $p) | {vcpus, memory_bytes, fd: (.sources | index("fd") != null), source}' "$TMP/l.json")
[ "$t" = '{"vcpus":3,"memory_bytes":null,"fd":true,"source":"fd"}' ] &&
	pass "qmp: list shows tinyvmm: vCPUs, fd" || fail "qmp: list shows tinyvmm" "$t"
n=$("$KVMSTATS" list --pid "$Q1" --json | jq length)
[ "$n" = 1 ] && pass "qmp: list --pid" || fail "qmp: list --pid" "$n entries"
"$KVMSTATS" list --pid 1 >/dev/null 2>"$TMP/l1.err"
rc=$?
[ $rc = 1 ] && grep -q "not a VMM" "$TMP/l1.err" && pass "qmp: list --pid of a process that is no VMM fails" ||
	fail "qmp: list --pid of a process that is no VMM fails" "rc $rc $(cat "$TMP/l1.err")"
# dump and top say the same as list, not "Success".
for cmd in "dump" "top --once"; do
	"$KVMSTATS" $cmd --pid 1 >/dev/null 2>"$TMP/p1.err"
	rc=$?
	[ $rc = 1 ] && grep -q "pid 1: not a VMM (it holds no KVM VM fd)" "$TMP/p1.err" &&
		pass "qmp: $cmd --pid 1 says why it cannot be read" ||
		fail "qmp: $cmd --pid 1 says why it cannot be read" "rc $rc $(cat "$TMP/p1.err")"
done
"$KVMSTATS" list >"$TMP/l.txt" 2>&1
hdr=$(head -1 "$TMP/l.txt")
row=$(grep -E "^ *$Q1 " "$TMP/l.txt")
col_h=$(awk -v s="$hdr" 'BEGIN { print index(s, "NAME") }')
col_r=$(awk -v s="$row" 'BEGIN { print index(s, "q1 ") }')
[ -n "$row" ] && [ "$col_h" = "$col_r" ] && grep -q "128 MiB" <<<"$row" &&
	pass "qmp: list table aligned" || fail "qmp: list table aligned" "$hdr / $row"
"$KVMSTATS" list --bogus >/dev/null 2>&1
[ $? = 2 ] && pass "qmp: list usage error exits 2" || fail "qmp: list usage error exits 2"
