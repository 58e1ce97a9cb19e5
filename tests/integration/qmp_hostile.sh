#!/bin/bash
# kvmstats-test: needs=kvm
# A VMM a guest owns says what it likes (DESIGN.md's threat model):
#  - a process of uid 65534 naming a root-only QMP socket on its command
#    line: kvmstats never connects to it (the victim, a listener there,
#    sees no connection), not for dump, list or plan, and says why; nor
#    when it swaps its own socket's path with a link to that socket
#    while plan checks and connects;
#  - a hostile monitor naming 500 new vCPUs at every poll, with made-up
#    ids: `record` stays bounded in vCPUs (no more than the VMM's vCPU
#    fds), memory and log size, and no id is made up;
#  - a monitor slow to close a finished client's connection: the reads
#    keep their last values meanwhile, none fails "busy"; one that keeps
#    50 such connections is busy, said at once.
# The "VMMs" are tests/tools/hostile_qmp.py holding a real KVM VM.
source "$(dirname "$0")/../lib.sh"
require_kvm qmp_hostile
need_tools qmp_hostile python3 socat jq || exit 0

# hostile MODE NVCPUS ARGS...: start it, argv[0] as QEMU's; sets HPID.
hostile() {
	local mode=$1 n=$2 ready=$TMP/$1.ready
	shift 2
	(exec -a qemu-system-x86_64 "$PY" "$HOSTILE" "$mode" "$n" "$ready" "$@") 2>"$TMP/$mode.log" &
	HPID=$!
	track "$HPID"
	wait_file "$ready" 10 || { echo "# hostile_qmp.py $mode did not start"; sed 's/^/# /' "$TMP/$mode.log"; return 1; }
}

# ---- the confused deputy ------------------------------------------------------
mkdir -m 0700 "$TMP/rootonly"
VICTIM=$TMP/rootonly/victim.sock
# The victim logs the program of every client (SO_PEERCRED): other
# programs on a shared host may scan the fake VMM too, so only our own
# kvmstats' connections count.
"$PY" -c '
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(16)
while True:
    c, _ = s.accept()
    pid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
    try: exe = os.readlink("/proc/%d/exe" % pid)
    except OSError: exe = "?"
    with open(sys.argv[2], "a") as f: f.write("%d %s\n" % (pid, exe))
    c.close()
' "$VICTIM" "$TMP/victim.log" 2>/dev/null &
track $!
KVMSTATS_EXE=$(readlink -f "$KVMSTATS")
ours() { cat "$TMP/victim.log" 2>/dev/null | grep -c " $KVMSTATS_EXE\$"; }
wait_file "$VICTIM" 5 || { fail "qmp_hostile: the victim listens"; exit 0; }
hostile deputy 1 -qmp "unix:$VICTIM,server=on,wait=off" || { fail "qmp_hostile: deputy starts"; exit 0; }
DEP=$HPID
[ "$(awk '/^Uid:/ {print $2}' /proc/$DEP/status)" = 65534 ] &&
	pass "qmp_hostile: the fake VMM runs as uid 65534 and holds a VM ($(ls -l /proc/$DEP/fd | grep -c 'anon_inode:kvm-vm$') VM fd)" ||
	fail "qmp_hostile: the fake VMM runs as uid 65534"

"$KVMSTATS" dump --pid "$DEP" --source qmp --json >"$TMP/dep.json" 2>"$TMP/dep.err"
rc=$?
[ $rc = 1 ] && grep -q "refused" "$TMP/dep.err" && grep -q "65534" "$TMP/dep.err" &&
	pass "qmp_hostile: dump --source qmp refuses the socket and says why ($(head -c 300 "$TMP/dep.err"))" ||
	fail "qmp_hostile: dump --source qmp refuses the socket and says why" "rc $rc: $(cat "$TMP/dep.err")"
"$KVMSTATS" dump --pid "$DEP" --json >"$TMP/dep2.json" 2>"$TMP/dep2.err"
"$KVMSTATS" list --pid "$DEP" --json >"$TMP/depl.json" 2>"$TMP/depl.err"
jq -e '.[0].sources | index("qmp") == null' "$TMP/depl.json" >/dev/null &&
	pass "qmp_hostile: list does not offer qmp for it" ||
	fail "qmp_hostile: list does not offer qmp for it" "$(cat "$TMP/depl.json" "$TMP/depl.err")"
timeout 20 "$KVMSTATS" plan --pid "$DEP" --json >"$TMP/depp.json" 2>"$TMP/depp.err"
sleep 0.3
n=$(ours)
[ "$n" = 0 ] && pass "qmp_hostile: the victim saw no connection of kvmstats (dump, dump auto, list, plan)" ||
	fail "qmp_hostile: the victim saw no connection of kvmstats" "$n connections: $(head -3 "$TMP/victim.log")"
# The same socket named by root itself (--qmp) is the user's word: used.
"$KVMSTATS" dump --pid "$DEP" --source qmp --qmp "$VICTIM" >/dev/null 2>&1
sleep 0.3
[ "$(ours)" -ge 1 ] &&
	pass "qmp_hostile: the same socket given with --qmp is connected to (the test sees connections)" ||
	fail "qmp_hostile: the same socket given with --qmp is connected to"
kill "$DEP"

# ---- a VMM swapping its socket for a link to the victim -----------------------
# The socket checked must be the socket used. plan walks the path the VMM
# names as the VMM would (its credentials, links followed in its root)
# and connects through the fd the walk ended on, never by name again. This
# VMM listens on its own socket and, as fast as it can, swaps that path
# with a link to the victim (renameat2 RENAME_EXCHANGE): each plan run
# either refuses (its walk met the link: the VMM cannot reach the victim)
# or talks to the VMM's own socket (its walk met the socket); the victim
# sees no connection. Connecting by name after the check (plan until
# now) reached the victim in 3 of 24 runs.
chmod 0711 "$TMP"	# the VMM's way to its own directory; rootonly stays 0700
mkdir -m 0755 "$TMP/swap"
chown 65534:65534 "$TMP/swap"
SWAP=$TMP/swap/qmp.sock
hostile swap 1 -qmp "unix:$SWAP,server=on" "$VICTIM" || { fail "qmp_hostile: swap starts"; exit 0; }
SW=$HPID
before=$(ours)
: >"$TMP/sw.pids"
for i in $(seq 24); do
	# Not under timeout(1): the VMM logs its clients' pids, kvmstats' own.
	"$KVMSTATS" plan --pid "$SW" --method pagemap --interval 0 --json \
		>"$TMP/sw$i.json" 2>"$TMP/sw$i.err" &
	p=$!
	echo $p >>"$TMP/sw.pids"
	for _ in $(seq 400); do kill -0 $p 2>/dev/null || break; sleep 0.05; done
	kill -KILL $p 2>/dev/null
	wait $p
done
sleep 0.3
victim=$(($(ours) - before))
own=$(grep -cxFf "$TMP/sw.pids" "$SWAP.log" 2>/dev/null)
refused=0 answered=0 unexplained=0
for i in $(seq 24); do
	if cat "$TMP/sw$i.json" "$TMP/sw$i.err" | grep -q "refused: pid $SW (uid 65534)"; then
		refused=$((refused + 1))
	elif cat "$TMP/sw$i.json" "$TMP/sw$i.err" | grep -q "no RAM blocks in its answer"; then
		answered=$((answered + 1))
	else
		unexplained=$((unexplained + 1))
		echo "# run $i: $(head -c 300 "$TMP/sw$i.err")"
	fi
done
echo "# swap: 24 plan runs: $refused refused the link, $answered talked to the VMM's own socket ($own connections there), $victim reached the victim"
[ "$victim" = 0 ] &&
	pass "qmp_hostile: a VMM swapping its socket for a link to a root-only one: plan never reaches the victim (24 runs)" ||
	fail "qmp_hostile: plan never reaches the victim through a swapped socket" "$victim connections: $(tail -3 "$TMP/victim.log")"
[ "$refused" -ge 1 ] && [ "$answered" -ge 1 ] && [ "$own" -ge 1 ] &&
	pass "qmp_hostile: the race was run: $refused runs saw the link and refused it, $answered talked to the VMM's own socket" ||
	fail "qmp_hostile: the race was run both ways" "$refused refused, $answered answered, $own connections to the VMM's socket"
[ "$unexplained" = 0 ] &&
	pass "qmp_hostile: every plan run says what it did with the socket (refused, and why, or what the monitor answered)" ||
	fail "qmp_hostile: every plan run says what it did with the socket" "$unexplained runs did not"
kill "$SW"

# ---- a monitor making up vCPUs ------------------------------------------------
NV=4
hostile monitor $NV -qmp "unix:$TMP/mon.sock,server=on" || { fail "qmp_hostile: monitor starts"; exit 0; }
MON=$HPID
"$KVMSTATS" record --pid "$MON" --source qmp --interval 0.1 --duration 10 --refresh 1 \
	--output "$TMP/h.kvl" >"$TMP/rec.out" 2>"$TMP/rec.err" &
REC=$!
track "$REC"
max_rss=0 rss2=0
for i in $(seq 110); do
	r=$(awk '/^VmRSS/ {print $2}' /proc/$REC/status 2>/dev/null) || break
	[ -n "$r" ] && [ "$r" -gt "$max_rss" ] && max_rss=$r
	[ $i = 20 ] && rss2=$max_rss
	sleep 0.1
done
wait "$REC"
rc=$?
size=$(stat -c %s "$TMP/h.kvl" 2>/dev/null || echo 0)
errsz=$(stat -c %s "$TMP/rec.err")
"$KVMSTATS" replay --json "$TMP/h.kvl" >"$TMP/h.json" 2>"$TMP/replay.err"
read -r samples maxv ids <<<"$(jq -s -r '[length, ([.[].vms[0].vcpus | length] | max),
	([.[].vms[0].vcpus[].id] | unique | length)] | @tsv' "$TMP/h.json")"
polls=$(jq -s '[.[].vms[0].stats.remote_tlb_flush | numbers] | max' "$TMP/h.json")
echo "# record: rc $rc, $samples samples, $polls polls, vCPUs at most $maxv ($ids ids), RSS $max_rss kB, log $size bytes, stderr $errsz bytes"
# Each poll names 500 more vCPUs (6 MB for json-c at 1000): an answer
# past what its 4 vCPU fds justify (qmp.c's budget: 8 MiB and what the
# schema allows per vCPU) is refused, from the third poll on.
[ "$rc" = 0 ] && [ "${samples:-0}" -ge 50 ] && [ "${polls:-0}" -ge 1 ] &&
	pass "qmp_hostile: record ran its 10 s against the hostile monitor ($samples samples; polls answered until the monitor's answers outgrew what its vCPU fds justify: $polls)" ||
	fail "qmp_hostile: record ran against the hostile monitor" "rc $rc, polls $polls: $(head -3 "$TMP/rec.err")"
[ "${maxv:-99}" -le $NV ] && [ "${ids:-99}" -le $NV ] &&
	pass "qmp_hostile: vCPUs stay within the VMM's $NV vCPU fds (at most $maxv, $ids ids)" ||
	fail "qmp_hostile: vCPUs stay within the VMM's vCPU fds" "$maxv vCPUs, $ids ids"
# Memory: a small footprint that stops growing after the first 2 s (but
# under ASan, whose allocator keeps up to 256 MiB of freed memory in
# quarantine: there only a bound).
limit=64000 growth=16000
ldd "$KVMSTATS" 2>/dev/null | grep -q libasan && limit=1000000 growth=$limit
[ "$max_rss" -gt 0 ] && [ "$max_rss" -lt "$limit" ] && [ $((max_rss - rss2)) -lt $growth ] &&
	[ "$size" -lt 2000000 ] && [ "$errsz" -lt 20000 ] &&
	pass "qmp_hostile: bounded: RSS $max_rss kB ($rss2 kB after 2 s), log $size bytes, stderr $errsz bytes" ||
	fail "qmp_hostile: bounded memory and log" "RSS $max_rss kB ($rss2 kB after 2 s), log $size bytes, stderr $errsz bytes"
bad=$(jq -s -r --argjson p "$MON" '[.[].vms[0].vcpus[] | .id as $id | .index as $i
	| select(($i < 0) or ($i >= 16384) or (($id | test("^kvm-[0-9]+/vcpu-[0-9]+$")) | not)
		 or ($id | capture("^kvm-(?<t>[0-9]+)/vcpu-(?<n>[0-9]+)$") | (.n | tonumber) != $i or .t != ($p | tostring)))
	| .id] | unique | .[:3] | join(" ")' "$TMP/h.json")
[ -z "$bad" ] && pass "qmp_hostile: no made-up id: indexes in KVM's range, threads of the VMM (else its pid)" ||
	fail "qmp_hostile: no made-up id" "$bad"
kill "$MON"

# ---- a monitor slow to let go of a client -------------------------------------
# QEMU reads a client's EOF in its main loop. While that loop runs a long
# command (a vCPU's device_add on another monitor), the connection of a
# poll that has just ended is still QEMU's, listed as connected with the
# socket's path, as another client's would be. The polls after it must
# wait for QEMU (slow, not held), within their timeout, and not call the
# monitor busy: three such polls in a row used to fail the reads (EBUSY;
# lifecycle.sh in CI, after a hot-add). The library's loop reads it (the
# lifecycle driver, a sweep every 20 ms): every read succeeds, the last
# values served with their age while QEMU lags.
DRIVER=$ROOT/build/tests/lifecycle_driver
[ -x "$DRIVER" ] || make -s -C "$ROOT" build/tests/lifecycle_driver >/dev/null 2>&1
LAG_S=1.5
HQ_LAG=$LAG_S hostile laggard 1 -qmp "unix:$TMP/lag.sock,server=on" ||
	{ fail "qmp_hostile: laggard starts"; exit 0; }
LAGGARD=$HPID
"$DRIVER" run --seconds "$(slow 60)" --interval-ms 20 --timeout-ms "$(slow 3000)" \
	--stop-file "$TMP/lag.stop" >"$TMP/lag.out" 2>"$TMP/lag.err" &
DRV=$!
track "$DRV"
# Three lags, and the third one over.
for _ in $(seq "$(slow 300)"); do grep -q '^lag 3$' "$TMP/laggard.log" && break; sleep 0.1; done
sleep "$(awk -v s="$LAG_S" 'BEGIN { print s + 0.5 }')"
touch "$TMP/lag.stop"
wait "$DRV"
lags=$(grep -c '^lag ' "$TMP/laggard.log")
read -r n errs src age err <<<"$(grep "^V .* pid=$LAGGARD " "$TMP/lag.out" | awk '
	{ for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] } }
	{ n++; src = f["src"]; if (f["age_ms"] + 0 > age) age = f["age_ms"] + 0 }
	f["errs"] != 0 { e++; if (!err) err = f["err"] }
	END { printf "%d %d %s %d %d", n, e, src, age, err }')"
echo "# laggard: $lags lags of $LAG_S s; $n sweeps read it ($src), $errs failed (first error $err), values up to $age ms old"
[ "$lags" -ge 3 ] && [ "$n" -ge 20 ] && [ "$src" = qmp ] && [ "$age" -ge 1000 ] &&
	pass "qmp_hostile: a monitor slow to let a poll go lagged $lags times, the last values served meanwhile (up to $age ms old)" ||
	fail "qmp_hostile: a monitor slow to let a poll go: lags seen through the reads" "$lags lags, $n sweeps, source $src, age up to $age ms: $(tail -2 "$TMP/lag.err")"
[ "$n" -ge 20 ] && [ "$errs" = 0 ] &&
	pass "qmp_hostile: ... and no read failed: QEMU slow to close a finished poll is not another client holding the monitor" ||
	fail "qmp_hostile: a monitor slow to let a poll go is not busy" "$errs of $n sweeps failed, first error $err"
kill "$LAGGARD"

# ---- a monitor hoarding finished connections ----------------------------------
# QEMU serves one client at a time: one finished connection left open is
# a QEMU slow to close it, 50 are a VMM making them. sock_diag is asked
# about 8 at most per look (QMP_MAX_LEFT); past them the monitor is busy,
# and said so at once, not after the timeout of a monitor that greets
# nobody.
hostile hoarder 1 -qmp "unix:$TMP/hoard.sock,server=on" ||
	{ fail "qmp_hostile: hoarder starts"; exit 0; }
HOARDER=$HPID
t0=$(($(date +%s%N) / 1000000))
"$KVMSTATS" dump --pid "$HOARDER" --source qmp --qmp-timeout "$(slow 5000)" \
	>/dev/null 2>"$TMP/hoard.err"
rc=$?
dt=$(($(date +%s%N) / 1000000 - t0))
[ $rc = 1 ] && grep -q "busy" "$TMP/hoard.err" && [ "$dt" -lt "$(slow 2000)" ] &&
	pass "qmp_hostile: a monitor keeping 50 finished connections is busy, said in $dt ms ($(head -1 "$TMP/hoard.err"))" ||
	fail "qmp_hostile: a monitor keeping 50 finished connections is busy, said at once" "rc $rc in $dt ms: $(head -2 "$TMP/hoard.err")"
kill "$HOARDER"
