#!/bin/bash
# kvmstats drain against a real drain: five mbguest VMs of different
# sizes, zero shares and dirty rates (one rewrites more than its
# bandwidth x downtime-limit can carry: it will not converge), each with
# max-bandwidth 32 MiB/s and downtime-limit 300 ms, migrated over TCP to
# destination QEMUs through one link of 48 MiB/s that the test makes
# (tests/tools/linkrelay.c: a relay on loopback whose one token bucket
# all migrations share), so that two migrations at once exceed it. Per
# case (1 and 2 migrations at a time; the plan's order and largest-first):
#  - `kvmstats drain --json` plans the drain on the running VMs;
#  - an orchestration loop (Python, one QMP connection per VM) starts the
#    migrations in the drain's order, the next one when a slot frees, and
#    cancels one still running at its abort time (150 s per GiB,
#    KubeVirt's);
#  - the VMs that moved are the next case's sources.
# Asserts, per case: the real drain time within 15% of the predicted
# total; each migration that completed within 20% of its scheduled time
# (QEMU's own total-time); the VM the drain names as not converging did
# not complete, and every VM it names as converging did; and, per
# parallel limit, the plan's order drained no slower than largest-first
# (within 3%; 10% where both orders predict the same total, as one at a
# time through an unshared link: then only noise tells them apart). The
# timing checks are skipped, saying why, on a host too loaded to time
# migrations (see loaded()); a case whose orchestrator stalled (see
# STALL_S) is measured once more. Prints the schedule predicted against
# real. `kvmstats follow`, started on each case's drain plan, must end
# each migration with QEMU's own figures and the errors the test computes
# from them and the plan (within 1%). In the lab (slow > 1): four smaller
# VMs, a link of 6 MiB/s and 4 MiB/s per VM. Each QEMU migrates over a
# connection the orchestrator made, its send buffer fixed at 20 ms of the
# link (see migrate_through), as the relay's receive buffer is: bytes a
# sender counts as sent wait there, not on the link. The guests write one word per page
# (stride=4K): every page they fill is non-zero, and they boot in
# milliseconds where KVM emulates their writes.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu
source "$(dirname "$0")/../lib.sh"

require_kvm drain
need_tools drain "$QEMU" socat jq python3 || exit 0
RELAY=${LINKRELAY:-$(dirname "$KVMSTATS")/linkrelay}
[ -x "$RELAY" ] || RELAY=$ROOT/build/linkrelay
if [ ! -x "$KVMSTATS" ] || [ ! -f "$MBGUEST" ] || [ ! -x "$RELAY" ]; then
	fail drain "build/kvmstats, build/mbguest.elf or build/linkrelay missing: run make build build/linkrelay"
	exit 0
fi

MIB=1048576
QT=$(qmp_timeout)
# A case whose orchestrator did not look for longer than this (s) is
# measured once more: it aborted late and saw late, so its fates and
# times are the host's, not the drain's. In the lab (TCG under nested
# KVM) one query-migrate was seen to take 15 s: the VM it polled went
# on past its abort time, and the next VM's abort came 15 s late. Every
# abort and timing bound is wider than this.
STALL_S=1
# Seconds per GiB before a migration is aborted: KubeVirt's 150 (the
# stuck VM holds its slot 9.4 s).
ABORT=150
# NAME MEM_MIB KEYS: the VMs.
if [ "$SLOW" -gt 1 ]; then
	LINK=$((6 * MIB)) OWN=$((4 * MIB))
	VMS="a 128 nonzero=24M zero=16M stride=4K
b 64 nonzero=12M stride=4K
c 96 nonzero=6M zero=24M stride=4K
d 64 nonzero=8M dirty=16M dirtyloop=1"
else
	LINK=$((48 * MIB)) OWN=$((32 * MIB))
	VMS="a 256 nonzero=96M zero=64M stride=4K
b 128 nonzero=64M zero=32M stride=4K
c 192 nonzero=32M zero=96M stride=4K dirty=4M dirtyloop=1
d 64 nonzero=16M stride=4K dirty=48M dirtyloop=1
e 160 nonzero=48M zero=16M stride=4K"
fi
NAMES=$(awk '{print $1}' <<<"$VMS")

# exited PID: that process is gone.
exited() { ! kill -0 "$1" 2>/dev/null; }

# orch_mon NAME: a second monitor, the orchestrator's, which it holds for
# the whole case; the first, which kvmstats finds first on the command
# line, stays free for `kvmstats drain` and `kvmstats follow`.
orch_mon() { echo "-qmp unix:$TMP/$1.orch,server=on,wait=off"; }

# The current instance of each VM: CUR_<name> (its QMP name), PID_<name>.
GEN=0
for v in $NAMES; do
	read -r _ mem keys < <(grep "^$v " <<<"$VMS")
	# shellcheck disable=SC2046 # two words
	QEMU_MEM=$mem launch_qemu "$v.0" "$keys" $(orch_mon "$v.0")
	printf -v "CUR_$v" '%s' "$v.0"
	printf -v "PID_$v" '%s' "$QEMU_PID"
done
for v in $NAMES; do
	cur=CUR_$v pid=PID_$v
	if ! wait_ready "${!cur}" "${!pid}" "$(slow 60)"; then
		fail "drain: VM $v did not boot"
		exit 0
	fi
done

# The orchestrator: reads the drain's JSON and a map "pid src.qmp
# dst.qmp lport dport" per line; migrates; prints one JSON object.
cat >"$TMP/orchestrate.py" <<'EOF'
import array, glob, json, socket, sys, threading, time

plan = json.load(open(sys.argv[1]))
par = int(sys.argv[3])
budget = float(sys.argv[4])
sndbuf = max(int(sys.argv[5]) // 50, 65536)
vms = {}
for line in open(sys.argv[2]):
    pid, src, dst, lport, dport = line.split()
    vms[int(pid)] = dict(src=src, dst=dst, lport=int(lport), dport=int(dport))

# Where a VMM's threads are while it does not answer: printed by drain.sh.
# In the lab one took 15-21 s to answer its first query-migrate (not
# traced); the next time it does, this says where its threads were.
def where(pid, name, waited):
    out = ['stall: %s (pid %d) has not answered query-migrate for %.0f s; its threads:'
           % (name, pid, waited)]
    for task in sorted(glob.glob('/proc/%d/task/*' % pid))[:16]:
        def rd(f):
            try:
                with open(task + '/' + f) as fh:
                    return fh.read().strip()
            except OSError:
                return '?'
        stat = rd('stat')
        frames = [l.split()[-1] for l in rd('stack').splitlines()[:6] if l]
        out.append('stall:   %s %s %s wchan %s: %s' % (
            task.rsplit('/', 1)[1], rd('comm'), stat.rsplit(') ', 1)[-1][:1],
            rd('wchan'), ' < '.join(frames)))
    sys.stderr.write('\n'.join(out) + '\n')
    sys.stderr.flush()

class Qmp:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(30)
        self.s.connect(path)
        self.f = self.s.makefile('rw')
        json.loads(self.f.readline())
        self.cmd('qmp_capabilities')
    def cmd(self, name, **args):
        self.f.write(json.dumps({'execute': name, 'arguments': args}) + '\n')
        self.f.flush()
        while True:
            r = json.loads(self.f.readline())
            if 'event' not in r:
                return r
    def close(self):
        self.s.close()
    # Migrate over a connection to the relay made here and handed to
    # QEMU (getfd, then the fd: URI): its send buffer is fixed at 20 ms
    # of the link, where Linux lets a loopback connection's grow to 2 MiB
    # (a third of a second of the lab's link): bytes QEMU counts as sent
    # that wait before the link, and a small VM beside another went at
    # its own max-bandwidth, not its share, for its whole migration.
    def migrate_through(self, port, sndbuf):
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        c.connect(('127.0.0.1', port))
        msg = json.dumps({'execute': 'getfd', 'arguments': {'fdname': 'link'}}) + '\n'
        self.f.flush()
        self.s.sendmsg([msg.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                         array.array('i', [c.fileno()]))])
        c.close()
        while True:
            r = json.loads(self.f.readline())
            if 'event' not in r:
                break
        if 'return' not in r:
            return r
        return self.cmd('migrate', uri='fd:link')

order = [v['pid'] for v in sorted(plan['vms'], key=lambda v: v['position'])]
sched = {v['pid']: v for v in plan['vms']}
for pid in order:
    d = Qmp(vms[pid]['dst'])
    r = d.cmd('migrate-incoming', uri='tcp:127.0.0.1:%d' % vms[pid]['dport'])
    assert 'return' in r, r
    d.close()
mon = {pid: Qmp(vms[pid]['src']) for pid in order}
res = {}
queue, running = list(order), []
# The longest the loop went without looking, and the slowest query: an
# abort is only on time if the loop looked then (see STALL_S in drain.sh).
stall = {'gap_s': 0.0, 'at_s': 0.0, 'query_s': 0.0, 'query_vm': None,
         'query_setup_ms': None}
t0 = time.monotonic()
last = t0
while (queue or running) and time.monotonic() - t0 < budget:
    gap = time.monotonic() - last
    if gap > stall['gap_s']:
        stall.update(gap_s=round(gap, 3), at_s=round(last - t0, 3))
    last = time.monotonic()
    while queue and len(running) < par:
        pid = queue.pop(0)
        res[pid] = {'start': time.monotonic() - t0}
        r = mon[pid].migrate_through(vms[pid]['lport'], sndbuf)
        assert 'return' in r, r
        running.append(pid)
    time.sleep(0.02)
    for pid in list(running):
        now = time.monotonic() - t0
        late = threading.Timer(2.0, where, [pid, sched[pid]['name'], 2.0])
        late.start()
        q = mon[pid].cmd('query-migrate')['return']
        late.cancel()
        took = time.monotonic() - t0 - now
        if took > stall['query_s']:
            # (QEMU's own setup-time: whether the wait was its setup)
            stall.update(query_s=round(took, 3), query_vm=sched[pid]['name'],
                         query_setup_ms=q.get('setup-time'))
        st = q.get('status')
        res[pid].setdefault('trace', []).append(
            [round(now - res[pid]['start'], 3), q.get('ram', {}).get('transferred', 0)])
        abort = sched[pid].get('abort_after_s')
        # A VM that came in by migration answers "completed" (its
        # incoming one's status) while its own runs: only a migration
        # of its own that completed has a downtime. QEMU 7.2 says
        # "completed" before its total-time is worked out (0 until
        # then): as lib/migrate_follow.c, wait for the figures.
        if st == 'completed' and ('downtime' not in q or not q.get('total-time')):
            st = 'active'
        if st == 'completed':
            res[pid].update(status='completed', seconds=q['total-time'] / 1000.0,
                            transferred=q['ram']['transferred'], polled=now - res[pid]['start'])
            # (QEMU's own words, for a completion that took no time)
            if res[pid]['seconds'] < 0.5:
                res[pid]['query'] = q
        elif st in ('failed', 'cancelled'):
            res[pid].update(status=st, seconds=now - res[pid]['start'])
        elif abort is not None and now - res[pid]['start'] >= abort:
            mon[pid].cmd('migrate_cancel')
            res[pid].update(status='aborted', seconds=now - res[pid]['start'])
        else:
            continue
        res[pid]['end'] = res[pid]['start'] + res[pid]['seconds']
        running.remove(pid)
for pid in running + queue:
    res.setdefault(pid, {'start': None})['status'] = 'unfinished'
ends = [r['end'] for r in res.values() if 'end' in r]
print(json.dumps({'drain_seconds': max(ends) if ends else None, 'stall': stall,
                  'vms': {str(k): v for k, v in res.items()}}))
EOF

# dst_running NAME: the destination QEMU NAME runs its guest.
dst_running() {
	qmp "$TMP/$1.qmp" '{"execute":"query-status"}' | grep -q '"status": *"running"'
}

# drain_case PAR ORDER: plan, then really drain; REAL_<par>_<order> is
# the real drain time.
SUMMARY=""
drain_case() {
	local par=$1 order=$2 name="p$1-$2" pids="" v cur pid dst dport lport
	local relay map=$TMP/$1-$2.map out real follow seen
	GEN=$((GEN + 1))
	for v in $NAMES; do
		cur=CUR_$v pid=PID_$v
		# qmp, not q: q's coproc is gone when QEMU's monitor closes at
		# once (seen once after a migration), and its array with it.
		qmp "$TMP/${!cur}.qmp" "{\"execute\":\"migrate-set-parameters\",\"arguments\":{\"max-bandwidth\":$OWN,\"downtime-limit\":300}}" >/dev/null
		pids="$pids${pids:+,}${!pid}"
	done
	if ! "$KVMSTATS" drain --pid "$pids" --link "$LINK" --parallel-migrations "$par" \
		--order "$order" --abort-after "$ABORT" --interval 1 --seed 1 --json \
		>"$TMP/$name.json" 2>"$TMP/$name.err"; then
		fail "$name: kvmstats drain failed" "$(head -3 "$TMP/$name.err" | tr '\n' ' ')"
		return 1
	fi
	[ "$name" != p2-plan ] || "$KVMSTATS" drain --pid "$pids" --link "$LINK" \
		--parallel-migrations 2 --abort-after "$ABORT" --seed 1 -v >"$TMP/$name.txt" 2>&1
	: >"$map"
	local relay_args=()
	for v in $NAMES; do
		cur=CUR_$v pid=PID_$v
		read -r _ mem keys < <(grep "^$v " <<<"$VMS")
		dst=$v.$GEN
		# shellcheck disable=SC2046 # two words
		QEMU_MEM=$mem launch_qemu "$dst" "$keys" -incoming defer $(orch_mon "$dst")
		printf -v "NEXT_$v" '%s %s' "$dst" "$QEMU_PID"
		dport=$(free_port) && lport=$(free_port) || return 1
		relay_args+=("$lport:$dport")
		echo "${!pid} $TMP/${!cur}.orch $TMP/$dst.orch $lport $dport" >>"$map"
	done
	for v in $NAMES; do
		read -r dst _ <<<"$(eval echo "\$NEXT_$v")"
		wait_until 300 test -S "$TMP/$dst.orch" || { fail "$name: destination $dst did not start"; return 1; }
	done
	"$RELAY" "$LINK" "${relay_args[@]}" >"$TMP/$name.relay" 2>&1 &
	relay=$!
	track "$relay"
	wait_until 50 grep -q ready "$TMP/$name.relay"
	# follow scores every migration of the case against the drain plan.
	"$KVMSTATS" follow --plan "$TMP/$name.json" --json --interval 0.5 \
		--qmp-timeout "$QT" --timeout "$(slow 150)" \
		>"$TMP/$name.follow" 2>"$TMP/$name.follow.err" &
	follow=$!
	track "$follow"
	out=$(python3 "$TMP/orchestrate.py" "$TMP/$name.json" "$map" "$par" "$(slow 150)" "$LINK" 2>"$TMP/$name.orch.err")
	# "completed" is the source's word once it has written everything:
	# the relay may still hold the link's backlog. The relay goes only
	# once every destination that is to run has loaded it all.
	for v in $NAMES; do
		pid=PID_$v
		read -r dst _ <<<"$(eval echo "\$NEXT_$v")"
		[ "$(jq -r --arg p "${!pid}" '.vms[$p].status' <<<"$out" 2>/dev/null)" = completed ] || continue
		wait_until "$(slow 300)" dst_running "$dst" ||
			fail "$name: $v's destination did not run after its migration completed" \
				"$(qmp "$TMP/$dst.qmp" '{"execute":"query-status"}' | tr '\n' ' ')"
	done
	kill "$relay" 2>/dev/null
	# Every migration ended: follow ends too.
	wait_until "$(slow 100)" exited "$follow" ||
		echo "# $name: follow still ran after every migration ended"
	kill "$follow" 2>/dev/null
	wait "$follow" 2>/dev/null
	echo "$out" >"$TMP/$name.real"
	if [ -z "$out" ]; then
		fail "$name: the orchestration failed" "$(tail -2 "$TMP/$name.orch.err" | tr '\n' ' ')"
		return 1
	fi
	# One read of .stall: the line to print, then the stall (or nothing).
	# shellcheck disable=SC2016 # jq's variables
	{ read -r seen; read -r STALL; } < <(jq -r --arg n "$name" --argjson s "$STALL_S" '.stall |
		"# \($n): the orchestrator looked at least every \(.gap_s) s; slowest query-migrate \(.query_s) s",
		(select(.gap_s > $s) | "its orchestrator did not look for \(.gap_s) s from \(.at_s) s (slowest query-migrate \(.query_s) s, \(.query_vm); QEMU setup-time \(.query_setup_ms // "-") ms)")' <<<"$out")
	grep -m 20 '^stall:' "$TMP/$name.orch.err" | sed "s/^/# $name: /"
	printf -v "STALLED_${name//-/_}" '%s' "${STALL:-}"
	echo "$seen"
	# The VMs that moved run on at their destination; the others stay.
	for v in $NAMES; do
		pid=PID_$v
		read -r dst dpid <<<"$(eval echo "\$NEXT_$v")"
		if [ "$(jq -r --arg p "${!pid}" '.vms[$p].status' <<<"$out")" = completed ]; then
			kill "${!pid}" 2>/dev/null
			printf -v "CUR_$v" '%s' "$dst"
			printf -v "PID_$v" '%s' "$dpid"
		else
			kill "$dpid" 2>/dev/null
		fi
	done
	score "$name" "$TMP/$name.json" "$out"
	follow_checks "$name"
}

# checked NAME CMD...: check NAME, but where the case stalled (STALL)
# on a try before the last, which the loop below then measures once
# more, a failure is said and left to the next try.
checked() {
	local name=$1
	shift
	if [ -n "$STALL" ] && [ "$TRY" -lt 3 ] && ! "$@" >/dev/null; then
		echo "# $name: not so, but $STALL: left to the next try"
		return
	fi
	check "$name" "$@"
}

# follow_checks NAME: follow's end of each migration of the case is
# QEMU's own figures (status, total-time, ram.transferred, as the
# orchestrator read them), and its errors are the test's own, (real -
# scheduled) / real, from those figures and the drain plan (within 1%).
# A migration aborted ends "cancelled".
follow_checks() {
	local name=$1 bad
	# shellcheck disable=SC2016 # jq's variables
	bad=$(jq -rn --slurpfile plan "$TMP/$name.json" --slurpfile real "$TMP/$name.real" \
		--slurpfile ev "$TMP/$name.follow" '
		def off(a; b): ((a - b) | fabs) > ((b | fabs) / 100 + 1e-9);
		$plan[0].vms[] as $p | ($real[0].vms[$p.pid | tostring] // {}) as $r |
		([$ev[] | select(.event == "end" and .pid == $p.pid)] | last) as $e |
		if $e == null then "\($p.name):no-end"
		elif $r.status == "completed" then
			(($r.seconds - $p.predicted_seconds) / $r.seconds) as $te |
			(($r.transferred - $p.predicted_transfer_bytes) / $r.transferred) as $be |
			if $e.status != "completed" or $e.transferred_bytes != $r.transferred or
			   (($e.seconds * 1000) | round) != (($r.seconds * 1000) | round)
			then "\($p.name):figures(\($e.status),\($e.seconds)s,\($e.transferred_bytes))"
			elif $e.time_error == null or off($e.time_error; $te) or
			     $e.bytes_error == null or off($e.bytes_error; $be)
			then "\($p.name):errors(\($e.time_error)/\($te),\($e.bytes_error)/\($be))"
			else empty end
		elif $r.status == "aborted" then
			if $e.status == "cancelled" then empty
			else "\($p.name):\($e.status)" end
		else empty end' 2>&1)
	checked "$name: follow's end of each migration is QEMU's, its errors the test's${bad:+ (off: ${bad//$'\n'/ })}" \
		test -z "$bad"
	jq -r 'select(.event == "end") | "# \(.name) follow: \(.status) \(.seconds) s, time error \(.time_error), bytes error \(.bytes_error)"' \
		"$TMP/$name.follow" 2>/dev/null | sed "s/^# /# $name /"
}

# score NAME PLAN REAL: the case's checks and its table. The times are
# kept in TIMES_<name> ("" when within bounds) for timing_checks.
score() {
	local name=$1 plan=$2 real=$3 pd rd var=${1//-/_}
	pd=$(jq '.drain_seconds' "$plan")
	rd=$(jq '.drain_seconds' <<<"$real")
	printf -v "REAL_$var" '%s' "$rd"
	printf -v "PRED_$var" '%s' "$pd"
	# shellcheck disable=SC2016 # jq's variables
	jq -r --argjson r "$real" '.vms[] | [.pid, .name, .scheduled_start_s, .scheduled_end_s,
		.predicted_seconds, .verdict, ($r.vms[.pid|tostring] // {}) as $x |
		$x.start, $x.end, $x.seconds, $x.status] | @tsv' "$plan" >"$TMP/$name.rows"
	local bad_time="" bad_fate="" pid vname ps pe psec verdict rs re rsec st
	while IFS=$'\t' read -r pid vname ps pe psec verdict rs re rsec st; do
		# (unknown, or never ending: "-", never 0)
		SUMMARY="$SUMMARY$(printf '# %-22s %-6s %7s %7s %7s  %-9s | %7s %7s %7s  %s' \
			"$name" "${vname#guest=}" "$(num_or_dash %.2f "$ps")" "$(num_or_dash %.2f "$pe")" \
			"$(num_or_dash %.2f "$psec")" "$verdict" "$(num_or_dash %.2f "$rs")" \
			"$(num_or_dash %.2f "$re")" "$(num_or_dash %.2f "$rsec")" "$st")
"
		case $verdict in
		converges)
			# Past its abort time on a host too loaded to time
			# migrations (see loaded()): the CPU, not the verdict.
			if [ "$st" = aborted ] && [ -n "$LOADED" ]; then
				echo "# $name: $vname aborted at its abort time, on a host too loaded to tell"
			elif [ "$st" != completed ]; then
				bad_fate="$bad_fate $vname:$st"
			fi
			within "$rsec" "$psec" 20 || bad_time="$bad_time $vname:${rsec}s/${psec}s" ;;
		aborted)
			[ "$st" = aborted ] || bad_fate="$bad_fate $vname:$st" ;;
		*)
			bad_fate="$bad_fate $vname:$verdict" ;;
		esac
	done <"$TMP/$name.rows"
	jq -r '.vms | to_entries[] | select(.value.query) |
		"# \(.key): completed in \(.value.seconds) s by QEMU, \(.value.polled) s after start; query-migrate: \(.value.query | tojson)"' \
		<<<"$real"
	printf -v "VMT_$var" '%s' "$bad_time"
	within "$rd" "$pd" 15 || bad_time="$bad_time drain:${rd}s/${pd}s"
	printf -v "TIMES_$var" '%s' "$bad_time"
	checked "$name: the VM named as not converging did not, every one named converging did${bad_fate:+ (wrong:$bad_fate)}" \
		test -z "$bad_fate"
	check "$name: the drain named exactly one VM that will not converge (d)" \
		jq -e '[.vms[] | select(.verdict != "converges")] | length == 1 and (.[0].name | test("^(guest=)?d\\."))' "$plan"
	# d's time under the schedule is its abort's, which the schedule
	# predicts; alone (no abort) it does not converge: the model's
	# figures there are where it gave up, null.
	jq -c '.vms[] | select(.name | test("^(guest=)?d\\.")) | {aborted, abort_after_s,
		predicted_seconds, predicted_transfer_bytes, alone}' "$plan" | sed "s/^/# $name: d: /"
	check "$name: d's predicted time is its abort's, its transfer until then; alone, both null" \
		jq -e '.vms[] | select(.name | test("^(guest=)?d\\.")) | .aborted and
		((.predicted_seconds - .abort_after_s) | fabs) < 1e-6 and .predicted_transfer_bytes > 0 and
		.alone.converges == false and .alone.predicted_seconds == null and
		.alone.predicted_transfer_bytes == null' "$plan"
}

# loaded: LOADED says why the host cannot tell the drain's timing, when
# the migrations that ran one at a time (each alone at its own
# max-bandwidth: the per-VM model's own case, which `plan`'s tests hold
# within 15%) took, in the median, more than 15% longer than `plan`
# predicts them alone. Then the CPU, not the link, is what the times
# measure (QEMU's migration thread shares two CPUs with every other job:
# a 64 MiB migration predicted at 2.09 s took 2.37-2.72 s at a load of
# 16-25, direct or through the relay alike), and the timing checks are
# skipped, saying so, rather than failed or passed.
loaded() {
	local med
	med=$(awk -F'\t' '$6 == "converges" && $10 == "completed" && $5 > 0 { print $9 / $5 }' \
		"$TMP/p1-plan.rows" "$TMP/p1-largest-first.rows" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
	LOADED=""
	awk -v m="${med:-0}" 'BEGIN { exit !(m > 1.15) }' &&
		LOADED="one-at-a-time migrations took ${med}x their predicted time alone (load: $(cut -d' ' -f1-3 /proc/loadavg))"
	echo "# solo migrations, real / predicted alone, median: ${med:-none}"
}

# rates NAME: each migration's rate through the link, per half second
# of the case (from the orchestrator's polls of query-migrate): what
# tells a link that did not share from a VM that could not use its part.
rates() {
	python3 - "$TMP/$1.real" "$TMP/$1.json" "$1" <<'EOF'
import json, sys
real, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
names = {str(v['pid']): v['name'] for v in plan['vms']}
for pid, v in real['vms'].items():
    out, last_t, last_b, nxt = [], 0.0, 0, 0.5
    for t, b in v.get('trace') or []:
        if t >= nxt:
            out.append('%.1f:%.2f' % (v['start'] + t, (b - last_b) / (t - last_t) / 1048576))
            last_t, last_b, nxt = t, b, t + 0.5
    print('# %s %s, MiB/s from s: %s' % (sys.argv[3], names.get(pid), ' '.join(out)))
EOF
}

# timing_checks NAME: the real drain within 15% of the predicted total,
# each completed migration within 20% of its scheduled time.
timing_checks() {
	local var=${1//-/_} t p r s
	t=VMT_$var p=PRED_$var r=REAL_$var s=STALLED_$var
	if [ -n "$LOADED" ]; then
		skip "$1: drain and migration times (${!r:-}s real, ${!p:-}s predicted)" "host too loaded: $LOADED"
		return
	fi
	check "$1: real drain ${!r:-}s within 15% of the predicted ${!p:-}s${!s:+ ($1 ${!s})}" \
		within "${!r:-}" "${!p:-}" 15
	check "$1: each completed migration within 20% of its scheduled time${!t:+ (off:${!t:-})}" \
		test -z "${!t:-}"
	[ -z "${!t:-}" ] || rates "$1"
}

# Per parallel limit, the plan's order and largest-first in the same
# run. A pair out of bounds on a host that is not too loaded (a burst of
# load from other jobs), or one that stalled (STALL_S), is measured once
# more, and the second pair is the one checked; a second pair that
# stalled too is measured a third time (in the lab the stall came in 2
# of about 17 runs: with two tries a run fails when both stall).
LOADED=""
for par in 1 2; do
	for TRY in 1 2 3; do
		drain_case "$par" plan && drain_case "$par" largest-first || break
		[ "$par" != 1 ] || loaded
		tp=TIMES_p${par}_plan tl=TIMES_p${par}_largest_first
		sp=STALLED_p${par}_plan sl=STALLED_p${par}_largest_first
		if [ -n "${!sp}${!sl}" ] && [ "$TRY" -lt 3 ]; then
			echo "# $par at a time: stalled (${!sp:+p$par-plan: ${!sp}}${!sp:+${!sl:+; }}${!sl:+p$par-largest-first: ${!sl}}): once more"
		elif [ -n "${!tp}${!tl}" ] && [ -z "$LOADED" ] && [ "$TRY" = 1 ]; then
			echo "# $par at a time: out of bounds (${!tp}${!tl}): once more"
		else
			break
		fi
	done
	timing_checks "p$par-plan"
	timing_checks "p$par-largest-first"
	p=REAL_p${par}_plan l=REAL_p${par}_largest_first
	if [ -z "${!p}" ] || [ -z "${!l}" ]; then
		continue
	elif [ -n "$LOADED" ]; then
		skip "$par at a time: the plan's order (${!p}s) against largest-first (${!l}s)" \
			"host too loaded: $LOADED"
	else
		# Where the two orders predict the same total (one at a time,
		# the link unshared), their real drains differ by the run's noise
		# alone: 5% was seen; else 3%.
		pp=PRED_p${par}_plan pl=PRED_p${par}_largest_first tol=3
		within "${!pp}" "${!pl}" 1 && tol=10
		check "$par at a time: the plan's order drained in ${!p}s, largest-first in ${!l}s (no longer, within $tol%)" \
			awk -v p="${!p}" -v l="${!l}" -v t="$tol" 'BEGIN { exit !(p <= l * (1 + t / 100)) }'
	fi
done
sed 's/^/# /' "$TMP/p2-plan.txt"
echo "# link $((LINK / MIB)) MiB/s, max-bandwidth $((OWN / MIB)) MiB/s per VM, downtime-limit 300 ms, abort after $ABORT s/GiB"
echo "# case                   vm      start     end    time  verdict   |   start     end    time  real"
printf '%s' "$SUMMARY"
