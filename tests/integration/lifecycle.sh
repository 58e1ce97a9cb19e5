#!/bin/bash
# Life cycle: the library's sampling loop (refresh + sweep every 20 ms, by
# build/tests/lifecycle_driver) runs while VMMs are killed (one in the
# middle of a sweep), started, replaced by a new VMM under the same pid,
# a QEMU monitor hangs, and vCPUs are hot-added to a VMM holding stats fds
# and to a QEMU read over QMP. Asserts that no reading of a surviving VMM
# is lost, that a dead VMM is dropped at once with every fd of ours on it
# closed, that new VMMs and vCPUs show up, that a hung monitor never makes
# a sweep wait, and that the driver ends with the fds it started with.
# SPDX-License-Identifier: GPL-2.0-or-later

# debugfs shows whether the kernel freed a VM. When the host has not
# mounted it, run in a mount namespace of our own that has it, so the
# host's mounts stay as they are.
if [ ! -d /sys/kernel/debug/kvm ] && [ -z "${KS_PRIVATE_DEBUGFS:-}" ] &&
	unshare -m --propagation private true 2>/dev/null; then
	exec env KS_PRIVATE_DEBUGFS=1 unshare -m --propagation private bash -c \
		'mount -t debugfs none /sys/kernel/debug 2>/dev/null; exec bash "$0"' "$0"
fi
# kvmstats-test: needs=kvm qemu
source "$(dirname "$0")/../lib.sh"
require_kvm lifecycle

DRIVER=${DRIVER:-$ROOT/build/tests/lifecycle_driver}
if [ ! -x "$DRIVER" ]; then
	make -s -C "$ROOT" build/tests/lifecycle_driver >/dev/null 2>&1 ||
		{ fail "lifecycle: build the driver" "make build/tests/lifecycle_driver failed"; exit 0; }
fi
command -v socat >/dev/null || { skip lifecycle "socat is not installed"; exit 0; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# A QEMU read over QMP: QEMU serves one client per socket, so it has one
# for the driver, one for `kvmstats record` and a last one ($TMP/NAME.ctl)
# for the test's own commands. Sets QEMU_PID and CTL.
qemu_vm() {
	local name=$1
	CTL=$TMP/$name.ctl
	local extra=(-qmp "unix:$TMP/$name.rec,server=on,wait=off"
		-qmp "unix:$CTL,server=on,wait=off")
	if [ -f "$MBGUEST" ]; then
		QEMU_MEM=64 QEMU_SMP=1,maxcpus=4 start_qemu "$name" 'exits=1000' "${extra[@]}"
		return
	fi
	# No multiboot guest built: QEMU runs its firmware, which is enough
	# for a VM with vCPUs and stats.
	QMP_SOCK=$TMP/$name.qmp
	"$QEMU" -enable-kvm -m 64 -smp 1,maxcpus=4 -display none \
		-nodefaults -no-user-config -name "guest=$name" \
		-qmp "unix:$QMP_SOCK,server=on,wait=off" "${extra[@]}" &
	QEMU_PID=$!
	track "$QEMU_PID"
	wait_file "$CTL" 20
}

# hot_add CTL N: plug vCPU N into the QEMU behind control socket CTL.
hot_add() {
	local type
	type=$(qmp "$1" '{"execute":"query-hotpluggable-cpus"}' |
		jq -r '.return[0].type' 2>/dev/null | head -1)
	qmp "$1" "{\"execute\":\"device_add\",\"arguments\":{\"driver\":\"$type\",\"id\":\"cpu$2\",\"socket-id\":0,\"core-id\":$2,\"thread-id\":0}}" |
		grep -q '"return"'
}

# spawn_at_pid PID CMD...: start CMD in the background as process PID
# (through ns_last_pid, as CRIU restores pids); sets SPAWNED.
spawn_at_pid() {
	local want=$1 i
	shift
	for i in $(seq 50); do
		echo $((want - 1)) >/proc/sys/kernel/ns_last_pid 2>/dev/null || return 1
		"$@" &
		SPAWNED=$!
		track "$SPAWNED"
		[ "$SPAWNED" = "$want" ] && return 0
		kill -KILL "$SPAWNED" 2>/dev/null
		wait "$SPAWNED" 2>/dev/null
	done
	return 1
}

# Wait until the driver's log has sweep N.
wait_sweep() {
	local i
	for i in $(seq 300); do
		grep -q "^S n=$1 " "$LOG" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# ---- the VMMs ---------------------------------------------------------
start_vmm --hold-stats --workload demo --vcpus 2 || exit 0
A=$VMM_PID
start_vmm --hold-stats --workload demo || exit 0
B=$VMM_PID
start_vmm --hold-stats --workload demo || exit 0
G=$VMM_PID
"$DRIVER" vmm --vcpus 1 --ready "$TMP/c.ready" &
C=$!
track "$C"
wait_file "$TMP/c.ready" 10 || { fail "lifecycle: minimal VMM" "not ready"; exit 0; }
"$DRIVER" vmm --vcpus 2 --ready "$TMP/h.ready" &
H=$!
track "$H"
wait_file "$TMP/h.ready" 10 || { fail "lifecycle: minimal VMM" "not ready"; exit 0; }
qemu_vm lcd || { fail "lifecycle: QEMU D" "did not start"; exit 0; }
D=$QEMU_PID D_CTL=$CTL
qemu_vm lce || { fail "lifecycle: QEMU E" "did not start"; exit 0; }
E=$QEMU_PID E_CTL=$CTL

# ---- the run ------------------------------------------------------------
LOG=$TMP/driver.log
KILL_SWEEP=40
"$DRIVER" run --seconds $(slow 60) --interval-ms 20 --timeout-ms $(slow 1000) \
	--kill-at "$KILL_SWEEP:$B" --stop-file "$TMP/stop" >"$LOG" 2>"$TMP/driver.err" &
DRV=$!
track "$DRV"
# And the same through `kvmstats record` (the CLI's own sampling loop),
# once the driver holds the first QMP sockets.
REC=
wait_sweep 5
if "$KVMSTATS" record --help >/dev/null 2>&1; then
	"$KVMSTATS" record --output "$TMP/rec.kvl" --interval 0.1 --refresh 0.1 \
		>/dev/null 2>"$TMP/rec.err" &
	REC=$!
	track "$REC"
fi
wait_sweep $((KILL_SWEEP + 10)) || { fail "lifecycle: driver runs" "no sweeps logged"; exit 0; }

kill -USR1 "$C"
for _ in $(seq $(slow 50)); do [ "$(cat "$TMP/c.ready")" = 2 ] && break; sleep 0.05; done
T_C=$(now_ms)

hot_add "$D_CTL" 1 && T_D1=$(now_ms) || T_D1=

start_vmm --hold-stats --workload demo --vcpus 3 || exit 0
F=$VMM_PID T_F=$(now_ms)

T_A=$(now_ms)
kill -KILL "$A"

sleep 0.5
# A new VMM under a dead VMM's pid, between two sweeps.
kill -KILL "$G"
wait "$G" 2>/dev/null
T_G=$(now_ms)
REUSED=
if spawn_at_pid "$G" "$TINYVMM" --hold-stats --workload demo --timeout 300; then
	REUSED=$SPAWNED
fi

# A VMM that destroys its VM and lives on: our copies of its stats fds
# must go, or the VM stays allocated in the kernel. debugfs (when
# mounted) shows the kernel's VMs as PID-FD directories.
VMDIR=/sys/kernel/debug/kvm
vm_gone() { ! ls -d "$VMDIR/$1"-* >/dev/null 2>&1; }
# gone_within PID MS: the kernel released PID's VMs within MS.
gone_within() {
	local i
	for i in $(seq $(($2 / 50))); do vm_gone "$1" && return 0; sleep 0.05; done
	return 1
}
ls -d "$VMDIR/$H"-* >/dev/null 2>&1 && HAVE_VMDIR=1 || HAVE_VMDIR=
# (the time is taken before the signal: the VM goes at once after it)
T_H=$(now_ms)
kill -USR2 "$H"
for _ in $(seq $(slow 50)); do [ "$(cat "$TMP/h.ready")" = 0 ] && break; sleep 0.05; done
if [ -n "$HAVE_VMDIR" ]; then
	gone_within "$H" $(slow 1500) && H_FREED=yes || H_FREED=no
	gone_within "$A" $(slow 1500) && A_FREED=yes || A_FREED=no
fi

sleep 0.5
# A hung monitor (the QEMU is stopped: its monitor accepts nothing).
kill -STOP "$E"
T_STOP=$(now_ms)
sleep "$(slow_s 3.5)"
kill -CONT "$E"
T_CONT=$(now_ms)

hot_add "$D_CTL" 2 && T_D2=$(now_ms) || T_D2=
sleep "$(slow_s 2)"
T_E=$(now_ms)
kill -KILL "$E"
sleep "$(slow_s 1.5)"
touch "$TMP/stop"
wait "$DRV"
T_END=$(now_ms)
REC_RC=
if [ -n "$REC" ]; then
	kill -TERM "$REC"
	for _ in $(seq $(slow 60)); do kill -0 "$REC" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$REC" 2>/dev/null && REC_RC=hung
	wait "$REC"
	REC_RC=${REC_RC:-$?}
fi

# ---- what the log says ------------------------------------------------
if ! grep -q '^END ' "$LOG"; then
	fail "lifecycle: driver finished" "$(tail -3 "$TMP/driver.err")"
	exit 0
fi
NSWEEPS=$(grep -c '^S ' "$LOG")
LAST=$(grep '^S ' "$LOG" | tail -1 | sed 's/^S n=\([0-9]*\) .*/\1/')
echo "# $NSWEEPS sweeps; pids A=$A B=$B C=$C D=$D E=$E F=$F G=$G reused=${REUSED:-none}"

# field LINE KEY: the value of KEY=... in a log line.
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# vlines PID: the V lines of PID.
vlines() { grep "^V .* pid=$1 " "$LOG"; }

# first_t PID COND_AWK: wall time of the first V line of PID matching.
first_t() { vlines "$1" | awk "$2"' { sub(/.* t=/, ""); sub(/ .*/, ""); print; exit }'; }

# check_survivor NAME PID [AFTER_MS]: present from its first sweep (after
# AFTER_MS) to the last, every reading good, counters and vCPU count never
# going down.
check_survivor() {
	local name=$1 pid=$2 out
	out=$(vlines "$pid" | awk -v last="$LAST" -v after="${3:-0}" '
		{ for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] } }
		f["t"] + 0 <= after + 0 { next }
		!k++ { uid = f["uid"] }
		f["uid"] != uid { print "uid changed " uid " -> " f["uid"] }
		k > 1 && f["n"] != prev + 1 { print "gap after sweep " prev }
		f["errs"] != 0 { print "read error at sweep " f["n"] }
		k > 1 && f["exits"] + 0 < exits + 0 { print "exits went down at " f["n"] }
		k > 1 && f["vcpus"] + 0 < vcpus + 0 { print "vcpus went down at " f["n"] }
		{ prev = f["n"]; exits = f["exits"]; vcpus = f["vcpus"] }
		END {
			if (!k) print "never seen"
			else if (prev != last) print "last seen at sweep " prev " of " last
		}' | head -3)
	if [ -z "$out" ]; then pass "lifecycle: $name read at every sweep, none lost"
	else
		fail "lifecycle: $name read at every sweep, none lost" "$(echo $out)"
		# Which error, and what the test was doing then (its marks).
		vlines "$pid" | awk '/ errs=[1-9]/' | head -3 | sed 's/^/#   /'
		echo "#   marks (ms): C=$T_C D1=${T_D1:-} F=$T_F A=$T_A G=$T_G H=$T_H stop=$T_STOP cont=$T_CONT D2=${T_D2:-} E=$T_E end=$T_END"
	fi
}

check_survivor "tinyvmm C (minimal VMM, fd)" "$C"
check_survivor "QEMU D (qmp)" "$D"
check_survivor "tinyvmm F (started during the run)" "$F"
[ -n "$REUSED" ] && check_survivor "tinyvmm under a reused pid" "$REUSED" "$T_G"

# Sources as expected.
src=$(vlines "$C" | tail -1)
[ "$(field "$src" src)" = fd ] && pass "lifecycle: minimal VMM read through fd" ||
	fail "lifecycle: minimal VMM read through fd" "$src"
# QEMU 8.1+ holds its vCPUs' stats fds (its VM stats come over QMP).
src=$(vlines "$D" | tail -1)
want=qmp
qemu_holds_stats && want=fd
[ "$(field "$src" src)" = $want ] && pass "lifecycle: QEMU $(qemu_version) read through $want" ||
	fail "lifecycle: QEMU $(qemu_version) read through $want" "$src"

# The QMP schema is the kernel's: shared with the fd readers.
fd_schema=$(field "$(vlines "$F" | tail -1)" schema)
qmp_schema=$(field "$(vlines "$D" | tail -1)" schema)
[ -n "$fd_schema" ] && [ "$fd_schema" = "$qmp_schema" ] &&
	pass "lifecycle: QMP readers share the kernel's schemas with fd readers" ||
	fail "lifecycle: QMP readers share the kernel's schemas with fd readers" "fd $fd_schema qmp $qmp_schema"

# Hot-added vCPUs show up.
t=$(first_t "$C" '/ vcpus=2 /')
[ -n "$t" ] && [ $((t - T_C)) -le $(slow 1000) ] &&
	pass "lifecycle: vCPU hot-added to a VMM holding stats fds seen within 1 s" ||
	fail "lifecycle: vCPU hot-added to a VMM holding stats fds seen within 1 s" "at ${t:-never} vs $T_C"
if [ -n "$T_D1" ] && [ -n "$T_D2" ]; then
	t1=$(first_t "$D" '/ vcpus=2 /')
	t2=$(first_t "$D" '/ vcpus=3 /')
	[ -n "$t1" ] && [ -n "$t2" ] && [ $((t1 - T_D1)) -le $(slow 2000) ] && [ $((t2 - T_D2)) -le $(slow 2000) ] &&
		pass "lifecycle: vCPUs hot-added to QEMU (device_add) seen over QMP within 2 s" ||
		fail "lifecycle: vCPUs hot-added to QEMU (device_add) seen over QMP within 2 s" \
			"at ${t1:-never}/${t2:-never} vs $T_D1/$T_D2"
else
	fail "lifecycle: vCPU hot-plug in QEMU" "device_add failed"
fi

# A new VMM shows up at once.
t=$(first_t "$F" '/ vcpus=3 /')
[ -n "$t" ] && [ $((t - T_F)) -le $(slow 1000) ] &&
	pass "lifecycle: a VMM started during the run is read within 1 s" ||
	fail "lifecycle: a VMM started during the run is read within 1 s" "at ${t:-never} vs $T_F"

# Killed VMMs are dropped at once.
kl=$(grep "^K n=$KILL_SWEEP .* pid=$B" "$LOG")
last_b=$(vlines "$B" | tail -1)
if [ -n "$kl" ] && [ -n "$last_b" ] &&
	[ "$(field "$last_b" n)" -le $((KILL_SWEEP + 1)) ] && [ "$(field "$last_b" errs)" = 0 ]; then
	pass "lifecycle: VMM killed in the middle of a sweep: that sweep read, dropped by the next"
else
	fail "lifecycle: VMM killed in the middle of a sweep: that sweep read, dropped by the next" \
		"kill: ${kl:-none}; last: $last_b"
fi
for v in "A:$A:$T_A" "E:$E:$T_E"; do
	IFS=: read -r name pid tk <<<"$v"
	t=$(field "$(vlines "$pid" | tail -1)" t)
	[ -n "$t" ] && [ $((t - tk)) -le $(slow 500) ] &&
		pass "lifecycle: killed VMM $name ($(field "$(vlines "$pid" | tail -1)" src)) dropped within 0.5 s" ||
		fail "lifecycle: killed VMM $name dropped within 0.5 s" "last seen ${t:-never}, killed $tk"
done

# A VM destroyed inside a live VMM: its readers go at the next refresh.
t=$(first_t "$H" '/ vms=0 /')
before_h=$(vlines "$H" | awk -v t="$T_H" '{ split($3, a, "="); if (a[2] < t - 200) l = $0 } END { print l }')
[ -n "$t" ] && [ $((t - T_H)) -le $(slow 1000) ] && [ "$(field "$before_h" vcpus)" = 2 ] &&
	pass "lifecycle: a VM destroyed by its live VMM is dropped within 1 s" ||
	fail "lifecycle: a VM destroyed by its live VMM is dropped within 1 s" "at ${t:-never} vs $T_H; before: $before_h"
if [ -n "$HAVE_VMDIR" ]; then
	[ "$H_FREED" = yes ] && [ "$A_FREED" = yes ] &&
		pass "lifecycle: the kernel freed the VMs of a killed VMM and of a destroyed VM (debugfs)" ||
		fail "lifecycle: the kernel freed the VMs of a killed VMM and of a destroyed VM" "killed: $A_FREED destroyed: $H_FREED"
else
	skip "lifecycle: the kernel freed the VMs (debugfs)" "debugfs is not mounted"
fi

# Our stats fds are exactly those of live readers at every sweep: a dead
# VMM's VM is released (a stats fd keeps its VM alive in the kernel).
bad=$(grep '^S ' "$LOG" | awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	if (f["statsfds"] != f["fdreaders"]) { print f["n"] ": " f["statsfds"] " fds, " f["fdreaders"] " readers"; exit } }')
[ -z "$bad" ] && pass "lifecycle: no stats fd kept beyond the live readers" ||
	fail "lifecycle: no stats fd kept beyond the live readers" "sweep $bad"
end=$(grep '^END ' "$LOG")
[ "$(field "$end" fds_before)" = "$(field "$end" fds_after)" ] &&
	pass "lifecycle: the driver ends with the fds it started with ($(field "$end" fds_after))" ||
	fail "lifecycle: the driver ends with the fds it started with" "$end"

# Pid reuse: two VMMs, never mixed.
if [ -n "$REUSED" ]; then
	out=$(vlines "$G" | awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] } }
		f["uid"] != uid { n++; uid = f["uid"]; if (n > 1 && seen[n - 1] == f["n"]) print "both in sweep " f["n"] }
		{ seen[n] = f["n"] }
		END { print n " uids" }')
	[ "$out" = "2 uids" ] &&
		pass "lifecycle: a new VMM under a reused pid is a new VMM (new uid, never mixed)" ||
		fail "lifecycle: a new VMM under a reused pid is a new VMM" "$out"
else
	skip "lifecycle: pid reuse" "could not get the same pid again (ns_last_pid)"
fi

# A hung monitor: sweeps never wait, its own readings fail while it hangs
# and come back after.
max=$(grep '^S ' "$LOG" | sed 's/.* dur_us=\([0-9]*\) .*/\1/' | sort -n | tail -1)
[ "$max" -lt $(slow 200000) ] &&
	pass "lifecycle: no sweep waited on the hung monitor (longest sweep $((max / 1000)) ms)" ||
	fail "lifecycle: no sweep waited on the hung monitor" "a sweep took $((max / 1000)) ms"
stopped=$(vlines "$E" | awk -v a="$T_STOP" -v b="$T_CONT" '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] } }
	f["t"] > a && f["t"] < b && f["errs"] > 0 { n++ } END { print n + 0 }')
back=$(vlines "$E" | awk -v a="$((T_CONT + $(slow 1500)))" -v b="$T_E" '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] } }
	f["t"] > a && f["t"] < b { n++; if (f["errs"] > 0) e++ } END { print n + 0, e + 0 }')
[ "$stopped" -gt 0 ] && [ "${back% *}" -gt 0 ] && [ "${back#* }" = 0 ] &&
	pass "lifecycle: the hung QEMU's readings fail while it hangs and resume after" ||
	fail "lifecycle: the hung QEMU's readings fail while it hangs and resume after" \
		"errors while stopped: $stopped; after (sweeps errors): $back"
# ... and the others were read all along (checked above), at full pace.
during=$(grep '^S ' "$LOG" | awk -v a="$T_STOP" -v b="$T_CONT" '{ sub(/.* t=/, ""); sub(/ .*/, ""); if ($0 > a && $0 < b) n++ } END { print n + 0 }')
[ "$during" -ge 50 ] && pass "lifecycle: $during sweeps ran while the monitor hung 3.5 s" ||
	fail "lifecycle: sweeps ran while the monitor hung" "only $during sweeps in 3.5 s"

# ---- kvmstats record through the same run ---------------------------------
if [ -z "$REC" ]; then
	skip "lifecycle: kvmstats record" "this build has no record command"
elif [ "$REC_RC" != 0 ]; then
	fail "lifecycle: kvmstats record runs through it all and stops on SIGTERM" \
		"status $REC_RC: $(tail -2 "$TMP/rec.err")"
else
	pass "lifecycle: kvmstats record runs through it all and stops on SIGTERM"
	"$KVMSTATS" replay "$TMP/rec.kvl" --json >"$TMP/rec.json" 2>"$TMP/replay.err"
	# Per sample: the pids it has. Survivors are in every sample from the
	# first that has them; the killed ones are not in the last.
	out=$(jq -c '[.vms[].pid] | unique' "$TMP/rec.json" 2>/dev/null | awk \
		-v surv="$C $D $F" -v dead="$A $B $E" '
		{ n++; delete has; gsub(/[][]/, ""); k = split($0, p, ","); for (i = 1; i <= k; i++) has[p[i]] = 1
		  ns = split(surv, s, " "); for (i = 1; i <= ns; i++) { if (has[s[i]]) seen[s[i]] = 1; else if (seen[s[i]]) lost[s[i]]++ } }
		END {
			if (n < 20) print "only " n " samples"
			for (x in lost) print "pid " x " missing from " lost[x] " samples"
			nd = split(dead, d, " "); for (i = 1; i <= nd; i++) if (has[d[i]]) print "dead pid " d[i] " in the last sample"
			for (i = 1; i <= ns; i++) if (!has[s[i]]) print "pid " s[i] " not in the last sample"
		}')
	[ -z "$out" ] && pass "lifecycle: record kept every survivor in every sample and dropped the dead" ||
		fail "lifecycle: record kept every survivor in every sample and dropped the dead" \
			"$(echo $out | head -c 300) $(head -c 200 "$TMP/replay.err")"
fi
