#!/bin/bash
# kvmstats follow against real migrations: two QEMU VMs run our multiboot
# guest (different amounts of non-zero memory), each with max-bandwidth
# 32 MiB/s and downtime-limit 300 ms set over QMP. They are planned
# (`kvmstats plan --json`, the file follow reads), `kvmstats follow --plan
# FILE --json` is started, and then each VM is migrated for real, one
# after the other, over loopback TCP to a destination QEMU started with
# `-incoming defer`. At each completion the test reads QEMU's own
# query-migrate (total-time, ram.transferred) and computes the error of
# the plan's predictions, (real - predicted) / real; follow's "end" event
# for that VM must say the same figures and the same errors (within 1%).
# Also: a start event before each end, follow's exit status 0 once every
# migration ended; a VM whose plan does not converge (null predicted time
# and transfer), then migrated with raised limits, ends with QEMU's
# figures and null errors (text: "-"); a follow started on a VMM whose
# last migration is over waits for a new one instead of reporting the old
# (--count), and one that failed between two polls is seen to end.
# In the lab (slow > 1) the guests are smaller.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu labqemu
# shellcheck disable=SC2154 # eval sets PID_<name>
source "$(dirname "$0")/../lib.sh"

require_kvm follow
need_tools follow "$QEMU" socat jq || exit 0
if [ ! -x "$KVMSTATS" ] || [ ! -f "$MBGUEST" ]; then
	fail follow "build/kvmstats or build/mbguest.elf missing: run make build"
	exit 0
fi

BW=$((32 << 20))
MEM=256
SIZES="96M 48M"
if [ "$SLOW" -gt 1 ]; then
	MEM=128
	SIZES="24M 12M"
fi

# The sources, booted together (booting is the slow part).
i=0
for size in $SIZES; do
	QEMU_MEM=$MEM launch_qemu "vm$i" "nonzero=$size stride=4K"
	eval "PID_vm$i=$QEMU_PID"
	i=$((i + 1))
done
N=$i
for i in $(seq 0 $((N - 1))); do
	eval "pid=\$PID_vm$i"
	if ! wait_ready "vm$i" "$pid" "$(slow 60)"; then
		fail "follow: vm$i did not boot"
		exit 0
	fi
	r=$(q "vm$i" "{\"execute\":\"migrate-set-parameters\",\"arguments\":{\"max-bandwidth\":$BW,\"downtime-limit\":300}}")
	case $r in *'"return"'*) ;; *) fail "follow: vm$i refused the parameters: $r"; exit 0 ;; esac
	# shellcheck disable=SC2086 # the destinations, started now
	QEMU_MEM=$MEM launch_qemu "dst$i" "nonzero=1M stride=4K" -incoming defer
	eval "DPID_dst$i=$QEMU_PID"
done

PIDS=$(for i in $(seq 0 $((N - 1))); do eval "echo --pid \$PID_vm$i"; done)
# shellcheck disable=SC2086 # word splitting wanted
"$KVMSTATS" plan $PIDS --method scan --interval 0 --json >"$TMP/plan.json" 2>"$TMP/plan.err"
check "the plan predicts every VM" \
	jq -e --argjson n "$N" '[.vms[] | select(.predicted_seconds > 0 and
	.predicted_transfer_bytes > 0)] | length == $n' "$TMP/plan.json"

"$KVMSTATS" follow --plan "$TMP/plan.json" --json --interval 0.2 \
	--timeout "$(slow 150)" >"$TMP/follow.jsonl" 2>"$TMP/follow.err" &
FOLLOW=$!
track "$FOLLOW"
# Its first polls see no migration yet (else the test proves nothing).
sleep "$(slow_s 1)"

for i in $(seq 0 $((N - 1))); do
	if ! wait_until "$(slow 300)" test -S "$TMP/dst$i.qmp" ||
		! migrate_tcp "vm$i" "dst$i"; then
		fail "follow: vm$i's migration did not complete"
		exit 0
	fi
done

st=1
for _ in $(seq "$(slow 300)"); do
	if ! kill -0 "$FOLLOW" 2>/dev/null; then
		wait "$FOLLOW"
		st=$?
		break
	fi
	sleep 0.1
done
check "follow exits 0 once every migration ended" test "$st" = 0
sed 's/^/# follow: /' "$TMP/follow.err"
echo "# follow: $(grep -c '"event":"unreadable"' "$TMP/follow.jsonl") unreadable event(s), $(grep -c '"event":"progress"' "$TMP/follow.jsonl") progress event(s)"

echo "# VM   predicted s  QEMU s   pred bytes   QEMU bytes   time error  bytes error (follow's)"
for i in $(seq 0 $((N - 1))); do
	eval "pid=\$PID_vm$i"
	ms=$(jq '.["total-time"]' "$TMP/vm$i.final")
	xfer=$(jq '.ram.transferred' "$TMP/vm$i.final")
	psec=$(jq --argjson p "$pid" '.vms[] | select(.pid == $p) | .predicted_seconds' "$TMP/plan.json")
	pbytes=$(jq --argjson p "$pid" '.vms[] | select(.pid == $p) | .predicted_transfer_bytes' "$TMP/plan.json")
	sec=$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')
	te=$(rel_error "$sec" "$psec")
	be=$(rel_error "$xfer" "$pbytes")
	end=$(jq -c --argjson p "$pid" 'select(.event == "end" and .pid == $p)' "$TMP/follow.jsonl")
	fte=$(jq -r '.time_error // "null"' <<<"$end")
	fbe=$(jq -r '.bytes_error // "null"' <<<"$end")
	printf '# vm%d %11.2f %7.2f %12s %12s %11s %11s (%s %s)\n' "$i" "$psec" "$sec" \
		"$pbytes" "$xfer" "$te" "$be" "$fte" "$fbe"
	check "vm$i: follow saw its migration start before it ended" \
		jq -se --argjson p "$pid" 'map(select(.pid == $p) | .event) |
		index("start") < index("end")' "$TMP/follow.jsonl"
	check "vm$i: follow's end is QEMU's completed figures (no libvirt job time)" \
		jq -e --argjson ms "$ms" --argjson x "$xfer" '.status == "completed" and
		.outcome == "completed" and .transferred_bytes == $x and
		(.seconds * 1000 | round) == $ms and .source == "qmp" and
		has("job_seconds") and .job_seconds == null' <<<"${end:-null}"
	check "vm$i: time error $fte is the test's $te (QEMU's total-time)" same "$fte" "$te"
	check "vm$i: bytes error $fbe is the test's $be (QEMU's ram.transferred)" same "$fbe" "$be"
done

# A VM whose plan does not converge: it rewrites 32 MiB (some 32 MiB/s,
# where KVM runs it), far over its max-bandwidth of 2 MiB/s x 300 ms.
# The plan has no predicted time or transfer (null: the model's figures
# are where it gave up); then the operator raises the limits
# (max-bandwidth 1 TiB/s, downtime-limit 60 s) and QEMU completes.
# follow's end is QEMU's figures, with no prediction and so no error:
# not one computed against a give-up point, nor 0.
QEMU_MEM=$MEM launch_qemu busy "nonzero=1M stride=4K dirty=32M dirtyloop=1"
BUSY=$QEMU_PID
if wait_ready busy "$BUSY" "$(slow 60)"; then
	q busy "{\"execute\":\"migrate-set-parameters\",\"arguments\":{\"max-bandwidth\":$((2 << 20)),\"downtime-limit\":300}}" >/dev/null
	"$KVMSTATS" plan --pid "$BUSY" --method pagemap --interval 1 --json >"$TMP/busy.plan" 2>"$TMP/busy.plan.err"
	jq -c '.vms[0] | {verdict: .prediction.verdict, predicted_seconds, predicted_transfer_bytes,
		passes: .prediction.passes, note: .prediction.note}' "$TMP/busy.plan" | sed 's/^/# busy: plan: /'
	check "busy: the plan does not converge, its predicted time, transfer and passes null" \
		jq -e '.vms[0] | .prediction.verdict == "does-not-converge" and
		.predicted_seconds == null and .predicted_transfer_bytes == null and
		.prediction.passes == null' "$TMP/busy.plan"
	"$KVMSTATS" follow --plan "$TMP/busy.plan" --json --interval 0.2 \
		--timeout "$(slow 60)" >"$TMP/busy.jsonl" 2>"$TMP/busy.err" &
	BF=$!
	track "$BF"
	"$KVMSTATS" follow --plan "$TMP/busy.plan" --interval 0.2 \
		--timeout "$(slow 60)" >"$TMP/busy.txt" 2>&1 &
	BT=$!
	track "$BT"
	sleep "$(slow_s 1)"
	q busy '{"execute":"migrate-set-parameters","arguments":{"max-bandwidth":1099511627776,"downtime-limit":60000}}' >/dev/null
	r=$(q busy '{"execute":"migrate","arguments":{"uri":"exec:cat > /dev/null"}}')
	wait_until "$(slow 300)" sh -c "! kill -0 $BF 2>/dev/null || ! kill -0 $BT 2>/dev/null" &&
		wait_until "$(slow 50)" sh -c "! kill -0 $BF 2>/dev/null && ! kill -0 $BT 2>/dev/null"
	st=$(q busy '{"execute":"query-migrate"}' | jq -r '.return.status // empty' 2>/dev/null)
	end=$(jq -c 'select(.event == "end")' "$TMP/busy.jsonl")
	echo "# busy: follow: ${end:-no end event (QEMU: ${st:-?}; migrate: ${r//$'\n'/ })}"
	grep 'busy' "$TMP/busy.txt" | sed 's/^/# busy: follow (text): /'
	check "busy: follow's end is QEMU's completed figures, and no prediction, no error" \
		jq -e '.status == "completed" and .transferred_bytes > 0 and .seconds > 0 and
		has("predicted_seconds") and .predicted_seconds == null and
		.predicted_transfer_bytes == null and .predicted_passes == null and
		has("time_error") and .time_error == null and .bytes_error == null' <<<"${end:-null}"
	check "busy: follow's text says \"predicted -\" and \"error -\" for its time and bytes" \
		grep -Eq 'completed: took [0-9.]+ s \(predicted -, error -\), sent [0-9.]+ [MG]iB \(predicted -, error -\)' "$TMP/busy.txt"
else
	fail "follow: the busy VM did not boot"
fi
kill "$BUSY" 2>/dev/null

# A VM that came in by migration moves on: QEMU answers its incoming
# migration's "completed" while the new one runs, which follow must not
# take for the new one's end.
QEMU_MEM=$MEM launch_qemu hop0 "nonzero=1M stride=4K" -incoming defer
"$KVMSTATS" follow --pid "$DPID_dst0" --json --interval 0.2 \
	--timeout "$(slow 150)" >"$TMP/hop.jsonl" 2>"$TMP/hop.err" &
HOP=$!
track "$HOP"
sleep "$(slow_s 1)"
if wait_until "$(slow 300)" test -S "$TMP/hop0.qmp" && migrate_tcp dst0 hop0; then
	wait_until "$(slow 300)" sh -c "! kill -0 $HOP 2>/dev/null"
	ms=$(jq '.["total-time"]' "$TMP/dst0.final")
	xfer=$(jq '.ram.transferred' "$TMP/dst0.final")
	end=$(jq -c 'select(.event == "end")' "$TMP/hop.jsonl")
	check "a VM that came in by migration: follow's end is its own migration's figures (QEMU: $ms ms, $xfer bytes)" \
		jq -e --argjson ms "$ms" --argjson x "$xfer" '.outcome == "completed" and
		.transferred_bytes == $x and (.seconds * 1000 | round) == $ms' <<<"${end:-null}"
else
	fail "follow: dst0's second migration did not complete"
fi

# A migration that fails between two polls of a VM that came in by
# migration: before and after, QEMU shows an ended migration and no
# figures (the incoming one's "completed", then "failed"), so only the
# status tells them apart. (With a plan given, follow's first look is at
# once; without, after the plan it runs.)
"$KVMSTATS" plan --pid "$DPID_dst1" --method scan --interval 0 --json >"$TMP/dst1.plan" 2>/dev/null
"$KVMSTATS" follow --plan "$TMP/dst1.plan" --json --interval "$(slow_s 4)" \
	--timeout "$(slow_s 12)" >"$TMP/fail.jsonl" 2>"$TMP/fail.err" &
FAIL=$!
track "$FAIL"
sleep "$(slow_s 1)"
r=$(q dst1 "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"tcp:127.0.0.1:$(free_port)\"}}")
wait_until "$(slow 200)" sh -c "! kill -0 $FAIL 2>/dev/null"
st=$(q dst1 '{"execute":"query-migrate"}' | jq -r '.return.status // empty' 2>/dev/null)
check "a migration that failed between two polls is seen to end (QEMU: ${st:-?}; migrate: ${r//$'\n'/ })" \
	jq -se 'map(select(.event == "end")) | length == 1 and .[0].outcome == "failed"' "$TMP/fail.jsonl"

# The sources' migrations are over: a follow now sees only old ones.
eval "pid=\$PID_vm0"
"$KVMSTATS" follow --pid "$pid" --plan "$TMP/plan.json" --json --interval 0.1 \
	--count 3 >"$TMP/old.jsonl" 2>/dev/null
st=$?
check "a migration over before follow started is not taken for a new one" \
	test "$st" = 1 -a ! -s "$TMP/old.jsonl"
