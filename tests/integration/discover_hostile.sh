#!/bin/bash
# kvmstats-test: needs=kvm
# No VMM holds back another (docs/threat-model.md): beside 5 VMMs whose
# QMP monitor greets and never answers and 20 whose monitor answers
# every command with an error 90 ms late (tests/tools/hostile_qmp.py,
# each holding a real KVM VM), with --source qmp and with the default:
#  - serve answers its first scrape within 1 s of starting, and no scrape
#    over the window takes 1 s (the VMMs are opened on worker threads,
#    outside the scrape lock);
#  - record -s 0.1 of a good VM (our tiny VMM; with --source qmp a
#    well-behaved monitor) keeps every interval within 20 ms of 100 ms,
#    none missing. Nothing on the sampling thread waits for discovery
#    (opens and the scan of /proc run on threads of their own, outside a
#    real-time class); what the code cannot control is when the kernel runs the
#    thread on a machine other processes load: where the test may (root),
#    record runs under SCHED_FIFO (chrt -f), as a loaded host runs it.
# And dump of a mute monitor waits its --qmp-timeout, no more, no less.
# WINDOW=SECONDS sets the windows (default 8, record's at least 20: the
# good monitor is opened behind the hostile ones; 60 for the report).
source "$(dirname "$0")/../lib.sh"
require_kvm discover_hostile
need_tools discover_hostile python3 curl jq || exit 0
WINDOW=${WINDOW:-8}
# Bounds: the figures asked for, on a release build. Under ASan and UBSan
# (and in the emulated lab) the process runs 2-3 times slower: the first
# scrape gets 3 s there, a scrape 1.5 s (a record interval 20 ms still).
FIRST=1 SCRAPE=1 JITTER=0.020
if ldd "$KVMSTATS" 2>/dev/null | grep -q libasan; then
	FIRST=3 SCRAPE=1.5
fi
FIRST=$(slow_s $FIRST) SCRAPE=$(slow_s $SCRAPE) JITTER=$(slow_s $JITTER)
# Under emulation the lab's own vCPUs miss a few of a guest's 100 ms now
# and then (0.3 s once, with nothing hostile to blame): there a record
# interval gets 0.5 s, which a stall behind a monitor (its 1 s timeout)
# still exceeds.
[ "$SLOW" -gt 1 ] && JITTER=0.5

# hostile MODE I: start fake VMM I in MODE (argv[0] QEMU's).
hostile() {
	local mode=$1 i=$2
	(exec -a qemu-system-x86_64 "$PY" "$HOSTILE" "$mode" 1 "$TMP/$mode$i.ready" \
		-qmp "unix:$TMP/$mode$i.sock,server=on") 2>"$TMP/$mode$i.log" &
	track $!
	echo $! >>"$TMP/fakes"
}
for i in $(seq 5); do hostile mute "$i"; done
for i in $(seq 20); do hostile error "$i"; done
for f in "$TMP"/mute{1..5}.ready "$TMP"/error{1..20}.ready; do
	wait_file "$f" 20 || { fail "discover_hostile: fake VMM $f started" "$(cat "${f%.ready}.log")"; exit 0; }
done
pass "discover_hostile: 5 mute and 20 erring monitors hold real VMs ($(wc -l <"$TMP/fakes") processes)"
start_vmm --vms 1 --vcpus 2 --hold-stats --workload halt || { fail "discover_hostile: tinyvmm started"; exit 0; }
GOOD=$VMM_PID
# The good VM that --source qmp reads: a well-behaved monitor.
(HQ_SOCK=$TMP/goodq.sock exec -a qemu-system-x86_64 "$PY" "$HOSTILE" plain 2 "$TMP/goodq.ready" \
	-qmp "unix:$TMP/goodq.sock,server=on") 2>"$TMP/goodq.log" &
GOODQ=$!
track $GOODQ
wait_file "$TMP/goodq.ready" 20 || { fail "discover_hostile: good monitor started" "$(cat "$TMP/goodq.log")"; exit 0; }

now() { date +%s.%N; }

# --qmp-timeout bounds each exchange with a monitor: dump of a mute one
# waits that long, no less (3 s), and gives up sooner when asked (0.1 s).
MUTE=$(head -1 "$TMP/fakes")
dump_secs() {
	local t0
	t0=$(now)
	"$KVMSTATS" dump --source qmp --pid "$MUTE" --qmp-timeout "$1" --json >"$TMP/mute$1.json" 2>"$TMP/mute$1.err"
	awk -v t="$(now)" -v t0="$t0" 'BEGIN { printf "%.2f", t - t0 }'
}
LONG=$(dump_secs 3000) SHORT=$(dump_secs 100)
echo "# dump of a mute monitor: ${LONG} s with --qmp-timeout 3000, ${SHORT} s with 100"
check "discover_hostile: dump waits a mute monitor its --qmp-timeout 3000 (${LONG} s)" \
	awk -v t="$LONG" 'BEGIN { exit !(t >= 3) }'
check "discover_hostile: ... and gives up 2.9 s sooner with --qmp-timeout 100 (${SHORT} s)" \
	awk -v l="$LONG" -v s="$SHORT" 'BEGIN { exit !(l - s > 2) }'
check "discover_hostile: ... saying it timed out" grep -qi "time" "$TMP/mute100.err" "$TMP/mute100.json"

# serve_window NAME ARGS...: start serve with ARGS, time its first
# scrape, then scrape back to back for WINDOW seconds.
serve_window() {
	local name=$1 port t0 first="" max=0 n=0 t end
	shift
	port=$(free_port)
	t0=$(now)
	"$KVMSTATS" serve --listen "127.0.0.1:$port" --refresh 1 "$@" 2>"$TMP/$name.err" &
	local S=$!
	track $S
	end=$(awk -v t="$t0" -v s="$(slow_s 10)" 'BEGIN { printf "%.3f", t + s }')
	while awk -v t="$(now)" -v e="$end" 'BEGIN { exit !(t < e) }'; do
		if curl -s --max-time 5 -o "$TMP/$name.first" "http://127.0.0.1:$port/metrics"; then
			first=$(awk -v t="$(now)" -v t0="$t0" 'BEGIN { printf "%.3f", t - t0 }')
			break
		fi
		sleep 0.02
	done
	end=$(awk -v t="$(now)" -v w="$WINDOW" 'BEGIN { printf "%.3f", t + w }')
	while [ -n "$first" ] && awk -v t="$(now)" -v e="$end" 'BEGIN { exit !(t < e) }'; do
		t=$(curl -s --max-time 10 -o "$TMP/$name.last" -w '%{time_total}' \
			"http://127.0.0.1:$port/metrics") || t=10
		n=$((n + 1))
		max=$(awk -v a="$max" -v b="$t" 'BEGIN { print (b > a) ? b : a }')
		sleep 0.05
	done
	kill $S
	wait $S 2>/dev/null
	echo "# serve $*: first scrape after ${first:-never} s; $n scrapes in ${WINDOW} s, the slowest $max s"
	[ -n "$first" ] && awk -v f="$first" -v b="$FIRST" 'BEGIN { exit !(f < b) }' &&
		pass "discover_hostile: serve $*: first scrape answered $first s after start (< $FIRST s)" ||
		fail "discover_hostile: serve $*: first scrape within $FIRST s of start" "${first:-never}; $(head -3 "$TMP/$name.err")"
	[ "$n" -ge 3 ] && awk -v m="$max" -v b="$SCRAPE" 'BEGIN { exit !(m < b) }' &&
		pass "discover_hostile: serve $*: $n scrapes over $WINDOW s, the slowest $max s (< $SCRAPE s)" ||
		fail "discover_hostile: serve $*: no scrape takes $SCRAPE s" "$n scrapes, the slowest $max s"
}
serve_window qmp --source qmp
serve_window auto
grep -q "pid=\"$GOOD\"" "$TMP/auto.last" &&
	pass "discover_hostile: serve (auto) exports the good VM beside them" ||
	fail "discover_hostile: serve (auto) exports the good VM" "$(grep -c . "$TMP/auto.last") lines"

# record_window NAME ARGS...: record -s 0.1 with ARGS for WINDOW seconds,
# host-wide discovery beside the fakes; every interval between two
# samples of the good VM (the log's times: when each sweep began) must
# be within JITTER of 100 ms, and none may be missing.
RWINDOW=$((WINDOW > 20 ? WINDOW : 20))
RT=()
chrt -f 1 true 2>/dev/null && RT=(chrt -f 1)
record_window() {
	local name=$1 good=$2 rc n worst first t0
	shift 2
	t0=$(now)
	# The window is RWINDOW s of samples wherever it runs, plus what
	# record takes to start (scaled): 200 intervals tell a missed tick.
	"${RT[@]}" "$KVMSTATS" record -s 0.1 --duration "$(awk -v w="$RWINDOW" -v s="$(slow_s 2)" \
		'BEGIN { print w + s }')" --refresh 1 "$@" \
		-o "$TMP/$name.kvl" 2>"$TMP/$name.err"
	rc=$?
	# (--pid: the log holds the fakes too, 8 MB for 60 s.)
	"$KVMSTATS" replay --json --pid "$good" "$TMP/$name.kvl" 2>/dev/null |
		jq -r --argjson p "$good" 'select(any(.vms[]; .pid == $p)) | .time' >"$TMP/$name.times"
	# A tick missed is an interval of 200 ms: every interval from the
	# good VM's first sample (a monitor is opened behind the hostile
	# ones, seconds later) to the end of the window is checked.
	read -r n worst first <<<"$(awk -v t0="$t0" 'NR == 1 { f = $1 - t0 }
		NR > 1 { d = $1 - p; e = d - 0.1; if (e < 0) e = -e; if (e > w) w = e; n++ }
		{ p = $1 } END { printf "%d %.4f %.2f\n", n, w, f }' "$TMP/$name.times")"
	echo "# record -s 0.1 $* ${RT[*]}: rc $rc, the good VM first sampled $first s after start, then $n intervals, the farthest from 100 ms by $worst s"
	[ "$rc" = 0 ] && [ "$n" -ge 10 ] &&
		awk -v w="$worst" -v b="$JITTER" 'BEGIN { exit !(w <= b) }' &&
		pass "discover_hostile: record -s 0.1 $* beside them: $n intervals, each within $worst s of 100 ms (<= $JITTER s)" ||
		fail "discover_hostile: record -s 0.1 $* keeps every interval within $JITTER s of 100 ms" \
			"rc $rc, $n intervals (10 wanted), worst $worst s: $(head -3 "$TMP/$name.err")"
}
record_window rec_qmp "$GOODQ" --source qmp
record_window rec_auto "$GOOD"
