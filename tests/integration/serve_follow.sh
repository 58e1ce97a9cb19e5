#!/bin/bash
# kvmstats serve scores its planner: two QEMU VMs run our multiboot guest
# (different amounts of non-zero memory), each with max-bandwidth 32 MiB/s
# and downtime-limit 300 ms set over QMP. serve plans them every 3 s and
# follows their migrations (--follow-interval's default with the planner: 1 s). The
# first VM is migrated for real over loopback TCP to a destination QEMU
# started with `-incoming defer`; at its completion the test reads QEMU's
# own query-migrate (total-time, ram.transferred). Then serve's scrape
# must say, for that VM: the same seconds and bytes (within 1%), the
# prediction of the plan gauges scraped before the migration (the guests
# are idle, their dirty rate is not measured and the model's bandwidth and
# downtime are given, not read from a monitor that may be busy: every
# round predicts the same), the error
# the test computes from that prediction and QEMU's figures, (real -
# predicted) / real (within 1%), status "completed", a followed counter
# of 1; for the other VM no last-migration series at all (unknown is
# left out, never 0); and `promtool check metrics` passes on the text
# and the OpenMetrics scrapes. Also: --follow-interval 0 turns it off,
# and a bad value is a usage error. With --drain-link 32M and
# --parallel-migrations 2 the plan's scrape holds the drain's schedule:
# each VM's scheduled end, the predicted total equal to the last of them,
# and promtool passes on it.
# In the lab (slow > 1) the guests are smaller.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu
# shellcheck disable=SC2154 # eval sets PID_<name>
source "$(dirname "$0")/../lib.sh"

require_kvm serve_follow
need_tools serve_follow "$QEMU" socat jq curl promtool || exit 0
if [ ! -x "$KVMSTATS" ] || [ ! -f "$MBGUEST" ]; then
	fail serve_follow "build/kvmstats or build/mbguest.elf missing: run make build"
	exit 0
fi

BW=$((32 << 20))
MEM=256
SIZES="96M 16M"
if [ "$SLOW" -gt 1 ]; then
	MEM=128
	SIZES="24M 8M"
fi

"$KVMSTATS" serve --follow-interval soon >/dev/null 2>&1
check "a --follow-interval that is not a number is a usage error (exit 2)" [ $? = 2 ]
"$KVMSTATS" serve --plan-interval 1 --parallel-migrations 2 >/dev/null 2>&1
check "--parallel-migrations without --drain-link is a usage error (exit 2)" [ $? = 2 ]

# gauge FILE NAME LABELS: the value of NAME{LABELS...} in a scrape.
gauge() {
	awk -v k="$2{$3" 'index($0, k) == 1 { print $2; exit }' "$1"
}

i=0
for size in $SIZES; do
	QEMU_MEM=$MEM launch_qemu "vm$i" "nonzero=$size stride=4K"
	eval "PID_vm$i=$QEMU_PID"
	i=$((i + 1))
done
for i in 0 1; do
	eval "pid=\$PID_vm$i"
	if ! wait_ready "vm$i" "$pid" "$(slow 60)"; then
		fail "serve_follow: vm$i did not boot"
		exit 0
	fi
	migration_settings "vm$i" '[]' "{\"max-bandwidth\":$BW,\"downtime-limit\":300}" ||
		{ fail "serve_follow: vm$i refused the migration settings"; exit 0; }
done
QEMU_MEM=$MEM launch_qemu dst0 "nonzero=1M stride=4K" -incoming defer
A=$PID_vm0
B=$PID_vm1

start_serve off --pid "$A" --plan-interval 600 --plan-method scan \
	--plan-dirty-interval 0 --follow-interval 0 ||
	{ fail "serve_follow: serve --follow-interval 0 did not start"; exit 0; }
curl -sS --max-time 10 "$URL" >"$TMP/off.txt"
check "--follow-interval 0: no follower series" bash -c "! grep -q '^kvmstats_migration' '$TMP/off.txt'"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID"

start_serve main --pid "$A" --pid "$B" --plan-interval 3 --plan-method scan \
	--plan-dirty-interval 0 --plan-bandwidth 32M --plan-downtime 300 \
	--drain-link 32M --parallel-migrations 2 ||
	{ fail "serve_follow: serve did not start"; exit 0; }

# The plan's round and the follower's first polls, before any migration.
got=0
for _ in $(seq "$(slow 60)"); do
	curl -sS --max-time 10 "$URL" >"$TMP/before.txt" 2>/dev/null
	[ -n "$(gauge "$TMP/before.txt" kvmstats_plan_predicted_seconds "pid=\"$A\",")" ] &&
		[ -n "$(gauge "$TMP/before.txt" kvmstats_migration_running "pid=\"$B\",")" ] &&
		[ -n "$(gauge "$TMP/before.txt" kvmstats_migration_running "pid=\"$A\",")" ] &&
		{ got=1; break; }
	sleep 0.5
done
check "the plan and the follower (on by default with the planner) see both VMs" [ $got = 1 ]
[ $got = 1 ] || sed 's/^/# serve: /' "$TMP/main.err"
psec=$(gauge "$TMP/before.txt" kvmstats_plan_predicted_seconds "pid=\"$A\",")
pbytes=$(gauge "$TMP/before.txt" kvmstats_plan_predicted_transfer_bytes "pid=\"$A\",")
# The drain's gauges: its total is its last VM's scheduled end.
total=$(awk '/^kvmstats_drain_predicted_seconds / { print $2 }' "$TMP/before.txt")
last=$(awk '/^kvmstats_drain_scheduled_end_seconds\{/ { if ($2 > m) m = $2 } END { print m }' "$TMP/before.txt")
ends=$(grep -c '^kvmstats_drain_scheduled_end_seconds{' "$TMP/before.txt")
echo "# drain: total ${total:-none} s, last end ${last:-none} s, $ends VMs scheduled"
check "--drain-link: each VM's scheduled end ($ends), the total (${total:-none} s) is the last one (${last:-none} s)" \
	bash -c "[ '$ends' = 2 ] && awk -v t='$total' -v l='$last' 'BEGIN { d = t - l; exit !(t > 0 && (d < 0 ? -d : d) <= t / 100) }'"
check "promtool check metrics passes with the plan's and the drain's gauges" promtool check metrics <"$TMP/before.txt"
check "--plan-dirty-interval 0: no dirty rate is exported (not measured), the prediction is" bash -c "
	! grep -q '^kvmstats_plan_dirty_pages_per_second{' '$TMP/before.txt' &&
	grep -q '^kvmstats_plan_predicted_transfer_bytes{pid=\"$A\",' '$TMP/before.txt'"
check "no migration yet: running 0, followed 0, no last-migration series" bash -c "
	grep -q '^kvmstats_migration_running{pid=\"$A\",name=\"vm0\"} 0$' '$TMP/before.txt' &&
	grep -q '^kvmstats_migrations_followed_total 0$' '$TMP/before.txt' &&
	! grep -q '^kvmstats_migration_last' '$TMP/before.txt'"

if ! wait_until "$(slow 300)" test -S "$TMP/dst0.qmp" || ! migrate_tcp vm0 dst0; then
	fail "serve_follow: vm0's migration did not complete"
	exit 0
fi

# The follower polls every second: its next round publishes the end.
got=0
for _ in $(seq "$(slow 40)"); do
	curl -sS --max-time 10 "$URL" >"$TMP/after.txt" 2>/dev/null
	grep -q '^kvmstats_migrations_followed_total 1$' "$TMP/after.txt" && { got=1; break; }
	sleep 0.25
done
check "the follower counted the migration (kvmstats_migrations_followed_total 1)" [ $got = 1 ]
[ $got = 1 ] || { sed 's/^/# serve: /' "$TMP/main.err"; grep '^kvmstats_migration' "$TMP/after.txt" | sed 's/^/# /'; }

ms=$(jq '.["total-time"]' "$TMP/vm0.final")
xfer=$(jq '.ram.transferred' "$TMP/vm0.final")
sec=$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')
te=$(rel_error "$sec" "$psec")
be=$(rel_error "$xfer" "$pbytes")
L="pid=\"$A\",name=\"vm0\""
esec=$(gauge "$TMP/after.txt" kvmstats_migration_last_seconds "$L")
ebytes=$(gauge "$TMP/after.txt" kvmstats_migration_last_transferred_bytes "$L")
epsec=$(gauge "$TMP/after.txt" kvmstats_migration_last_predicted_seconds "$L")
epbytes=$(gauge "$TMP/after.txt" kvmstats_migration_last_predicted_transfer_bytes "$L")
ete=$(gauge "$TMP/after.txt" kvmstats_migration_last_error_ratio "$L,what=\"seconds\"")
ebe=$(gauge "$TMP/after.txt" kvmstats_migration_last_error_ratio "$L,what=\"bytes\"")
echo "#      predicted s  QEMU s  pred bytes  QEMU bytes  time error  bytes error"
echo "# test $psec $sec $pbytes $xfer $te $be"
echo "# serve ${epsec:-none} ${esec:-none} ${epbytes:-none} ${ebytes:-none} ${ete:-none} ${ebe:-none}"
check "its seconds (${esec:-none}) are QEMU's total-time ($sec)" same "$esec" "$sec"
check "its bytes (${ebytes:-none}) are QEMU's ram.transferred ($xfer)" same "$ebytes" "$xfer"
check "its predicted seconds (${epsec:-none}) are the plan's before it started ($psec)" \
	same "$epsec" "$psec"
check "its predicted bytes (${epbytes:-none}) are the plan's before it started ($pbytes)" \
	same "$epbytes" "$pbytes"
check "time error ${ete:-none} is the test's $te" same "$ete" "$te"
check "bytes error ${ebe:-none} is the test's $be" same "$ebe" "$be"
check "its status is completed, it runs no more" bash -c "
	grep -q '^kvmstats_migration_last_status{$L,status=\"completed\"} 1$' '$TMP/after.txt' &&
	grep -q '^kvmstats_migration_running{$L} 0$' '$TMP/after.txt'"
check "the other VM has no last-migration series" bash -c \
	"! grep -q '^kvmstats_migration_last[a-z_]*{pid=\"$B\",' '$TMP/after.txt'"
check "promtool check metrics passes with the follower's series" promtool check metrics <"$TMP/after.txt"
check "HELP and TYPE precede them" \
	grep -Pzq '# HELP kvmstats_migration_last_error_ratio [^\n]+\n# TYPE kvmstats_migration_last_error_ratio gauge\nkvmstats_migration_last_error_ratio\{' "$TMP/after.txt"
curl -sS --max-time 10 -H 'Accept: application/openmetrics-text;version=1.0.0' "$URL" >"$TMP/om.txt"
check "OpenMetrics: UNIT of the seconds, the counter's TYPE without _total, # EOF last" bash -c "
	grep -Pzq '# TYPE kvmstats_migration_last_seconds gauge\n# UNIT kvmstats_migration_last_seconds seconds\n' '$TMP/om.txt' &&
	grep -q '^# TYPE kvmstats_migrations_followed counter$' '$TMP/om.txt' &&
	[ \"\$(tail -n 1 '$TMP/om.txt')\" = '# EOF' ]"

kill -TERM "$SERVE_PID"
wait "$SERVE_PID"
check "SIGTERM stops serve with its follower, exit 0" [ $? = 0 ]
grep 'follower:' "$TMP/main.err" | sed 's/^/# serve: /'
