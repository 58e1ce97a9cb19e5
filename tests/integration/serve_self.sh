#!/bin/bash
# kvmstats-test: needs=none
# What `kvmstats serve` says about itself: the process_* metrics of the
# Prometheus client libraries, against what /proc, ps and prlimit say of
# the same process, and kvmstats_build_info against `version --json`.
. "$(dirname "$0")/../lib.sh"

"$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/ready" 2>"$TMP/serve.err" &
SERVE=$!
track $SERVE
wait_file "$TMP/ready" 20 || { fail "kvmstats serve did not start" "$(cat "$TMP/serve.err")"; exit 0; }
URL=http://$(cat "$TMP/ready")/metrics
sleep 1.2	# a start time in whole seconds away from the one ps rounds
curl -sS --max-time 20 "$URL" >"$TMP/m"
fds=$(ls /proc/$SERVE/fd | wc -l)
rss_kb=$(awk '/^VmRSS:/ { print $2 }' /proc/$SERVE/status)
vsz_kb=$(awk '/^VmSize:/ { print $2 }' /proc/$SERVE/status)
started=$(($(date +%s) - $(ps -o etimes= -p $SERVE)))
soft=$(prlimit --pid $SERVE --nofile -o SOFT --noheadings)
val() { awk -v n="$1" '$1 == n { print $2 }' "$TMP/m"; }

check "the scrape passes promtool check metrics" promtool check metrics <"$TMP/m"
for m in process_cpu_seconds_total process_resident_memory_bytes process_virtual_memory_bytes \
	process_start_time_seconds process_open_fds process_max_fds; do
	check "$m is exported once" test "$(grep -c "^$m " "$TMP/m")" = 1
done
check "process_cpu_seconds_total is a counter of seconds" \
	grep -qx '# TYPE process_cpu_seconds_total counter' "$TMP/m"
check "process_start_time_seconds is when ps says it started ($(val process_start_time_seconds) vs $started)" \
	awk -v a="$(val process_start_time_seconds)" -v b="$started" 'BEGIN { d = a - b; exit !(d > -2 && d < 2) }'
# Counted during the scrape: its connection, the thread serving it and
# the directory being read are open then, and closed after.
check "process_open_fds is /proc's count, and the scrape's own few ($(val process_open_fds) vs $fds)" \
	awk -v a="$(val process_open_fds)" -v b="$fds" 'BEGIN { d = a - b; exit !(b > 3 && d >= 0 && d <= 6) }'
check "process_max_fds is the soft RLIMIT_NOFILE ($soft)" test "$(val process_max_fds)" = "$soft"
check "process_resident_memory_bytes is VmRSS within 10% ($(val process_resident_memory_bytes) vs ${rss_kb} KiB)" \
	awk -v a="$(val process_resident_memory_bytes)" -v b="$((rss_kb * 1024))" 'BEGIN { exit !(a > 0.9 * b && a < 1.1 * b) }'
check "process_virtual_memory_bytes is VmSize within 10% ($(val process_virtual_memory_bytes) vs ${vsz_kb} KiB)" \
	awk -v a="$(val process_virtual_memory_bytes)" -v b="$((vsz_kb * 1024))" 'BEGIN { exit !(a > 0.9 * b && a < 1.1 * b) }'
c1=$(val process_cpu_seconds_total)
curl -sS --max-time 20 "$URL" >"$TMP/m"
c2=$(val process_cpu_seconds_total)
cpu=$(ps -o times= -p $SERVE)
check "process_cpu_seconds_total grows and agrees with ps ($c1, $c2, ps $cpu s)" \
	awk -v a="$c1" -v b="$c2" -v p="$cpu" 'BEGIN { exit !(a >= 0 && b >= a && b <= p + 1) }'

"$KVMSTATS" version --json >"$TMP/v.json"
want=$(jq -r '"version=\"\(.version)\",commit=\"\(.commit // "")\",compiler=\"\(.compiler)\",libvirt=\"\(if .libvirt then "yes" else "no" end)\",arch=\"\(.arch)\""' "$TMP/v.json")
check "kvmstats_build_info says what version --json says" \
	grep -qxF "kvmstats_build_info{$want} 1" "$TMP/m"
