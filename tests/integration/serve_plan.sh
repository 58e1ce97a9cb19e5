#!/bin/bash
# kvmstats serve --plan-interval: the migration planner inside the exporter.
# Two QEMU VMs run our multiboot guest (32 MiB written non-zero, 16 MiB
# written with zeros, the rest untouched), one on anonymous RAM, one on a
# memfd memory backend; serve plans them every second in a thread of its
# own, after dropping its capabilities. Checked: the plan gauges appear
# (bounded wait) with HELP and TYPE; promtool passes; OpenMetrics too, and
# a real Prometheus (when installed) parses it and answers a query on them;
# each VM's zero and non-zero pages agree with `kvmstats plan --method
# pagemap --interval 0 --json` run with every capability, and the memfd VM
# shows why CAP_CHECKPOINT_RESTORE is kept; a slow scan does not slow the
# scrapes and SIGTERM stops serve promptly in the middle of it; a busy VM
# whose verdict stays uncertain is measured on, by serve as by plan; the
# same VM at 1 MiB/s does not converge, and has no predicted time or
# transfer (null in plan's JSON, "-" in its table, no sample in serve's);
# a VM that exits is dropped from the gauges without a word while the
# other stays.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu
source "$(dirname "$0")/../lib.sh"
require_kvm serve_plan
for t in curl promtool jq "$QEMU"; do
	command -v $t >/dev/null || { skip serve_plan "$t is not installed"; exit 0; }
done
[ -e "$MBGUEST" ] || { skip serve_plan "$MBGUEST is not built"; exit 0; }
QEMU_MEM=256
GUEST='nonzero=32M zero=16M stride=4K'

# gauge FILE NAME PID: the value of NAME{pid="PID",...} in a scrape.
gauge() {
	awk -v k="$2{pid=\"$3\"," 'index($0, k) == 1 { print $2; exit }' "$1"
}

# near A B TOL: |A - B| <= TOL.
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; exit !(a != "" && b != "" && (d < 0 ? -d : d) <= t) }'; }

# stop_timed PID: SIGTERM it and wait; sets MS (how long it took) and RC
# (its exit status).
stop_timed() {
	local t0
	t0=$(date +%s%N)
	kill -TERM $1
	wait $1
	RC=$?
	MS=$((($(date +%s%N) - t0) / 1000000))
}

"$KVMSTATS" serve --plan-method scan >/dev/null 2>&1
check "--plan-method without --plan-interval is a usage error (exit 2)" [ $? = 2 ]
"$KVMSTATS" serve --plan-interval 1 --plan-method everything >/dev/null 2>&1
check "an unknown --plan-method is a usage error (exit 2)" [ $? = 2 ]

start_qemu plan-anon "$GUEST" || { fail serve_plan "QEMU (anonymous RAM) did not start"; exit 0; }
ANON=$QEMU_PID
start_qemu plan-memfd "$GUEST" -object memory-backend-memfd,id=ram,size=${QEMU_MEM}M \
	-machine memory-backend=ram || { fail serve_plan "QEMU (memfd RAM) did not start"; exit 0; }
MEMFD=$QEMU_PID

start_serve main --pid $ANON --pid $MEMFD --plan-interval 1 ||
	{ fail serve_plan "kvmstats serve --plan-interval 1 did not start"; exit 0; }
MAIN=$SERVE_PID
MAIN_URL=$URL

# ---- the gauges appear --------------------------------------------------------
got=0
for i in $(seq 60); do
	curl -sS --max-time 10 "$URL" >"$TMP/m.txt" 2>/dev/null
	[ -n "$(gauge "$TMP/m.txt" kvmstats_plan_zero_pages $ANON)" ] &&
		[ -n "$(gauge "$TMP/m.txt" kvmstats_plan_zero_pages $MEMFD)" ] && { got=1; break; }
	sleep 0.25
done
check "the plan gauges of both VMs appear (after $i scrapes)" [ $got = 1 ]
[ $got = 1 ] || { sed 's/^/# serve: /' "$TMP/main.err"; grep '^kvmstats_plan' "$TMP/m.txt" | sed 's/^/# /'; }
check "promtool check metrics passes with the plan gauges" promtool check metrics <"$TMP/m.txt"
check "HELP and TYPE precede each plan gauge" \
	grep -Pzq '# HELP kvmstats_plan_predicted_transfer_bytes [^\n]+\n# TYPE kvmstats_plan_predicted_transfer_bytes gauge\nkvmstats_plan_predicted_transfer_bytes\{' "$TMP/m.txt"
check "the default method is pagemap, named in the label" \
	grep -q "^kvmstats_plan_zero_pages{pid=\"$ANON\",name=\"plan-anon\",method=\"pagemap\"} " "$TMP/m.txt"
age=$(awk '/^kvmstats_plan_age_seconds / { print $2 }' "$TMP/m.txt")
check "the served plan's age is a gauge (${age:-none} s)" awk -v a="$age" 'BEGIN { exit !(a != "" && a >= 0 && a < 10) }'
xfer=$(gauge "$TMP/m.txt" kvmstats_plan_predicted_transfer_bytes $ANON)
check "the VM's predicted transfer is above 0 (${xfer:-none} bytes)" awk -v x="$xfer" 'BEGIN { exit !(x + 0 > 0) }'
verdicts=$(grep -c "^kvmstats_plan_verdict{pid=\"$ANON\",.*,verdict=\"\(converges\|uncertain\|does-not-converge\)\"} 1$" "$TMP/m.txt")
check "one verdict series per VM, value 1 (${verdicts} for the anonymous VM)" [ "$verdicts" = 1 ]
# The guest only writes at boot: both bounds converge, around the point.
lo=$(gauge "$TMP/m.txt" kvmstats_plan_predicted_low_seconds $ANON)
hi=$(gauge "$TMP/m.txt" kvmstats_plan_predicted_high_seconds $ANON)
pt=$(gauge "$TMP/m.txt" kvmstats_plan_predicted_seconds $ANON)
check "the interval gauges hold the point (${lo:-none} <= ${pt:-none} <= ${hi:-none} s)" \
	awk -v l="$lo" -v p="$pt" -v h="$hi" 'BEGIN { exit !(l != "" && h != "" && l <= p && p <= h) }'

curl -sS --max-time 10 -H 'Accept: application/openmetrics-text;version=1.0.0' "$URL" >"$TMP/om.txt"
check "OpenMetrics: the plan gauges, a UNIT for bytes, # EOF last" bash -c "
	grep -q '^kvmstats_plan_zero_pages{pid=\"$ANON\",' '$TMP/om.txt' &&
	grep -Pzq '# TYPE kvmstats_plan_predicted_transfer_bytes gauge\n# UNIT kvmstats_plan_predicted_transfer_bytes bytes\n' '$TMP/om.txt' &&
	[ \"\$(tail -n 1 '$TMP/om.txt')\" = '# EOF' ]"
check "OpenMetrics: the rounds counter's TYPE has no _total, its sample has" bash -c "
	grep -q '^# TYPE kvmstats_plan_rounds counter$' '$TMP/om.txt' &&
	grep -q '^kvmstats_plan_rounds_total [1-9]' '$TMP/om.txt'"

# ---- capabilities: the plan works after the drop --------------------------------
# CAP_DAC_READ_SEARCH (2), CAP_SYS_PTRACE (19) and, with the planner,
# CAP_CHECKPOINT_RESTORE (40).
if [ "$(id -u)" = 0 ]; then
	eff=$(awk '/^CapEff/ {print $2}' /proc/$MAIN/status)
	bnd=$(awk '/^CapBnd/ {print $2}' /proc/$MAIN/status)
	check "with --plan-interval serve keeps CAP_CHECKPOINT_RESTORE too, nothing else ($eff, $bnd)" \
		[ "$eff" = 0000010000080004 -a "$bnd" = 0000010000080004 ]
else
	skip "capabilities" "not running as root"
fi
for vm in anon:$ANON memfd:$MEMFD; do
	name=${vm%%:*} pid=${vm#*:}
	"$KVMSTATS" plan --pid $pid --method pagemap --interval 0 --json >"$TMP/plan-$name.json" 2>"$TMP/plan-$name.err"
	curl -sS --max-time 10 "$URL" >"$TMP/m-$name.txt"
	pages=$(jq -r '.vms[0].pages // empty' "$TMP/plan-$name.json")
	tol=$(( ${pages:-0} / 200 > 64 ? ${pages:-0} / 200 : 64 ))
	for k in zero nonzero unknown; do
		want=$(jq -r ".vms[0].${k}_pages // empty" "$TMP/plan-$name.json")
		have=$(gauge "$TMP/m-$name.txt" kvmstats_plan_${k}_pages $pid)
		check "$name VM: serve's $k pages agree with kvmstats plan's ($have vs $want, +-$tol)" \
			near "$have" "$want" $tol
	done
done
have=$(gauge "$TMP/m-memfd.txt" kvmstats_plan_unknown_pages $MEMFD)
check "memfd VM: no page is unknown to serve after the drop (${have:-none})" [ "$have" = 0 ]
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	setpriv --inh-caps=-all --bounding-set=-all,+sys_ptrace,+dac_read_search \
		"$KVMSTATS" plan --pid $MEMFD --method pagemap --interval 0 --json >"$TMP/nocr.json" 2>/dev/null
	u=$(jq -r '.vms[0].unknown_pages // 0' "$TMP/nocr.json")
	check "... while without CAP_CHECKPOINT_RESTORE its unmapped pages would be unknown ($u): why it is kept" \
		[ "$u" -gt 1000 ]
fi

# ---- a real Prometheus scrapes the gauges (OpenMetrics) -------------------------
if command -v prometheus >/dev/null; then
	PROM_PORT=""
	for i in $(seq 50); do
		p=$((20000 + RANDOM % 20000))
		(exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { PROM_PORT=$p; break; }
	done
	cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: kvmstats
    static_configs:
      - targets: ['$ADDR']
EOF
	prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
		--web.listen-address=127.0.0.1:$PROM_PORT --log.level=warn >"$TMP/prometheus.log" 2>&1 &
	PROM=$!
	track $PROM
	q() {
		curl -sS --max-time 5 --data-urlencode "query=$1" \
			"http://127.0.0.1:$PROM_PORT/api/v1/query" 2>/dev/null | jq -r '.data.result[0].value[1] // empty'
	}
	v=""
	for i in $(seq 60); do
		v=$(q "kvmstats_plan_predicted_transfer_bytes{pid=\"$ANON\"}")
		[ -n "$v" ] && break
		kill -0 $PROM 2>/dev/null || break
		sleep 0.5
	done
	check "Prometheus answers a query on the predicted transfer (${v:-none} bytes)" \
		awk -v x="$v" 'BEGIN { exit !(x + 0 > 0) }'
	health=$(curl -sS --max-time 5 "http://127.0.0.1:$PROM_PORT/api/v1/targets" |
		jq -r '.data.activeTargets[0] | "\(.health) \(.lastError)"')
	om=$(q 'kvmstats_scrapes_total{format="openmetrics"}')
	check "... having parsed every OpenMetrics scrape ('$health', ${om:-0} scrapes)" \
		[ "$health" = "up " -a "${om%.*}" -gt 0 ]
	kill $PROM
	wait $PROM 2>/dev/null
else
	skip "a real Prometheus" "prometheus is not installed"
fi

# ---- a slow scan neither slows the scrapes nor delays a stop ----------------------
# About 54 MiB of present pages at 4 MiB/s: the first round scans for ~13 s.
if start_serve scan --pid $ANON --plan-interval 1 --plan-method scan --plan-rate 4 \
	--plan-dirty-interval 0; then
	SCAN=$SERVE_PID
	sleep 1
	worst=0 under=0
	for i in $(seq 10); do
		t=$(curl -sS --max-time 10 -o "$TMP/s.txt" -w '%{time_total}' "$URL")
		# (a round may have come before discovery found the VM: an
		# empty one, tried again a second later; so any round counts)
		grep -q '^kvmstats_plan_running 1$' "$TMP/s.txt" && under=$((under + 1))
		worst=$(awk -v a="$worst" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
		sleep 0.2
	done
	check "10 scrapes during the scan ($under saw it under way), the slowest in $worst s" \
		awk -v w="$worst" -v u=$under 'BEGIN { exit !(u == 10 && w < 0.5) }'
	stop_timed $SCAN
	check "SIGTERM mid-scan stops serve in $MS ms, exit $RC" [ $MS -lt 3000 -a $RC = 0 ]
else
	fail "serve --plan-method scan" "did not start"
fi

# ---- a VM that does not converge: no predicted time or transfer -----------------
# The busy VM below at 1 MiB/s and 100 ms (100 KiB may stay dirty; it
# rewrites 8 MiB as fast as it can) does not converge: the model's bytes
# and seconds are where it gave up, not a prediction. kvmstats plan has
# null in its JSON and "-" in its table for them, serve no sample (the
# verdict and kvmstats_plan_converges 0 stay); and once QEMU migrated it
# (the limits raised), serve's follower has no predicted figure nor error
# for that migration.
stuck_vm() {
	local i v c n got secs
	"$KVMSTATS" plan --pid $NEAR --method pagemap --interval 1 --bandwidth 1M --downtime 100 \
		--json >"$TMP/stuck.json" 2>"$TMP/stuck.err"
	"$KVMSTATS" plan --pid $NEAR --method pagemap --interval 1 --bandwidth 1M --downtime 100 \
		>"$TMP/stuck.txt" 2>&1
	jq -c '.vms[0] | {verdict: .prediction.verdict, converges, predicted_seconds,
		predicted_transfer_bytes, predicted_seconds_interval, note: .prediction.note}' \
		"$TMP/stuck.json" | sed 's/^/# stuck: /'
	sed -n '1,2s/^/# stuck: /p' "$TMP/stuck.txt"
	check "kvmstats plan --json: a VM that does not converge has null predicted time and transfer" \
		jq -e '.vms[0] | .prediction.verdict == "does-not-converge" and .converges == false and
		has("predicted_seconds") and .predicted_seconds == null and
		has("predicted_transfer_bytes") and .predicted_transfer_bytes == null and
		.predicted_seconds_interval == [null, null] and
		(.prediction.note | test("does not converge: after"))' "$TMP/stuck.json"
	check "kvmstats plan: its TRANSFER and TIME are \"-\", CONV NO" \
		grep -Eq "^1 +$NEAR .* +- +- +NO +[0-9]" "$TMP/stuck.txt"
	if ! start_serve stuck --pid $NEAR --plan-interval 1 --plan-bandwidth 1M --plan-downtime 100; then
		fail "serve --plan-bandwidth 1M" "did not start"
		return
	fi
	v=""
	for i in $(seq 60); do
		curl -sS --max-time 10 "$URL" >"$TMP/stuck.m" 2>/dev/null
		v=$(sed -n "s/^kvmstats_plan_verdict{pid=\"$NEAR\",.*,verdict=\"\([a-z-]*\)\"} 1$/\1/p" "$TMP/stuck.m")
		[ -n "$v" ] && break
		sleep 0.5
	done
	c=$(gauge "$TMP/stuck.m" kvmstats_plan_converges $NEAR)
	grep "pid=\"$NEAR\"" "$TMP/stuck.m" | grep -E '_(predicted|converges|verdict|rank)' | sed 's/^/# stuck: /'
	n=$(grep -cE "^kvmstats_plan_predicted_(seconds|transfer_bytes)\\{pid=\"$NEAR\"," "$TMP/stuck.m")
	check "serve: the VM's verdict ${v:-none}, kvmstats_plan_converges ${c:-none}, and $n predicted time or transfer samples" \
		[ "$v" = does-not-converge -a "$c" = 0 -a "$n" = 0 ]
	check "serve: promtool passes without those samples" promtool check metrics <"$TMP/stuck.m"
	# serve's follower, on a migration of it with the limits raised (QEMU
	# completes): QEMU's figures, and no predicted ones nor an error,
	# since the round before it had none.
	# (qmp, not q: q is Prometheus' above)
	qmp "$TMP/near.qmp" \
		'{"execute":"migrate-set-parameters","arguments":{"max-bandwidth":1099511627776,"downtime-limit":60000}}' \
		'{"execute":"migrate","arguments":{"uri":"exec:cat > /dev/null"}}' >/dev/null
	got=0
	for i in $(seq 60); do
		curl -sS --max-time 10 "$URL" >"$TMP/stuck.f" 2>/dev/null
		grep -q '^kvmstats_migrations_followed_total 1$' "$TMP/stuck.f" && { got=1; break; }
		sleep 0.5
	done
	grep '^kvmstats_migration' "$TMP/stuck.f" | sed 's/^/# stuck: /'
	secs=$(gauge "$TMP/stuck.f" kvmstats_migration_last_seconds $NEAR)
	n=$(grep -cE "^kvmstats_migration_last_(predicted_[a-z_]+|error_ratio)\\{pid=\"$NEAR\"," "$TMP/stuck.f")
	check "serve's follower: the migration's seconds (${secs:-none}), and $n predicted or error samples" \
		[ $got = 1 -a -n "$secs" -a "$n" = 0 ]
	check "serve's follower: promtool passes" promtool check metrics <"$TMP/stuck.f"
	stop_timed $SERVE_PID
}

# ---- a VM near the threshold is measured on, as kvmstats plan does ---------------
# It rewrites 8 MiB (2048 pages) as fast as it can: its dirty curve is
# flat from the first point on, so its 95% interval stays as wide however
# long it is measured, and at 32 MiB/s and 200 ms (1638 pages) the bounds
# disagree (uncertain, in the lab). A VM whose verdict is still uncertain
# has been measured on to the last interval: 3. The verdict itself is the
# sample's, so it is printed, not asserted.
# samples_ok VERDICT N: N intervals, 3 if the verdict is uncertain.
samples_ok() { awk -v v="$1" -v n="$2" 'BEGIN { exit !(n >= 1 && n <= 3 && (v != "uncertain" || n == 3)) }'; }
if QEMU_MEM=128 start_qemu near 'nonzero=4M dirty=8M dirtyloop=1'; then
	NEAR=$QEMU_PID
	"$KVMSTATS" plan --pid $NEAR --method pagemap --interval 1 --bandwidth 32M --downtime 200 \
		--json >"$TMP/near.json" 2>"$TMP/near.err"
	v=$(jq -r '.vms[0].prediction.verdict // empty' "$TMP/near.json")
	n=$(jq -r '.vms[0].prediction.dirty_samples // empty' "$TMP/near.json")
	check "kvmstats plan: the busy VM, ${v:-no verdict}, measured over $n intervals" samples_ok "$v" "$n"
	if start_serve near --pid $NEAR --plan-interval 1 --plan-bandwidth 32M --plan-downtime 200; then
		NEARS=$SERVE_PID
		n=""
		for i in $(seq 60); do
			curl -sS --max-time 10 "$URL" >"$TMP/n.txt" 2>/dev/null
			n=$(gauge "$TMP/n.txt" kvmstats_plan_dirty_samples $NEAR)
			[ -n "$n" ] && break
			sleep 0.5
		done
		v=$(sed -n "s/^kvmstats_plan_verdict{pid=\"$NEAR\",.*,verdict=\"\([a-z-]*\)\"} 1$/\1/p" "$TMP/n.txt")
		check "serve's planner: the busy VM, ${v:-no verdict}, measured over ${n:-no} intervals" \
			samples_ok "$v" "$n"
		# Rounds follow each other at once: the stop comes mid-round.
		stop_timed $NEARS
		check "SIGTERM while the planner measures stops serve in $MS ms, exit $RC" \
			[ $MS -lt 3000 -a $RC = 0 ]
	else
		fail "serve --plan-downtime 200" "did not start"
	fi
	stuck_vm
	kill -TERM $NEAR
	wait $NEAR 2>/dev/null
else
	fail serve_plan "QEMU (the busy guest) did not start"
fi

# ---- a VM that exits ---------------------------------------------------------------
r0=$(awk '/^kvmstats_plan_rounds_total / { print $2 }' "$TMP/m-memfd.txt")
kill -TERM $MEMFD
wait $MEMFD 2>/dev/null
gone=0
for i in $(seq 40); do
	curl -sS --max-time 10 "$MAIN_URL" >"$TMP/x.txt"
	grep -q '^kvmstats_plan_rounds_total ' "$TMP/x.txt" &&
		[ -z "$(gauge "$TMP/x.txt" kvmstats_plan_zero_pages $MEMFD)" ] && { gone=1; break; }
	sleep 0.25
done
check "the exited VM's plan gauges are gone" [ $gone = 1 ]
check "the other VM is still planned" [ -n "$(gauge "$TMP/x.txt" kvmstats_plan_zero_pages $ANON)" ]
sleep 1.5
curl -sS --max-time 10 "$MAIN_URL" >"$TMP/x2.txt"
r1=$(awk '/^kvmstats_plan_rounds_total / { print $2 }' "$TMP/x2.txt")
check "rounds go on ($r0 -> $r1)" [ "${r1:-0}" -gt "${r0:-0}" ]
check "no warning about the VM that exited" bash -c "! grep -q 'plan: .*$MEMFD' '$TMP/main.err'"
grep 'plan:' "$TMP/main.err" | sed 's/^/# serve: /'

stop_timed $MAIN
check "SIGTERM stops serve and its planner in $MS ms, exit $RC" [ $MS -lt 3000 -a $RC = 0 ]
kill -0 $ANON && pass "QEMU ran on, untouched" || fail "QEMU" "QEMU died"
