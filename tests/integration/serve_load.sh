#!/bin/bash
# kvmstats serve under load: wrk holds 8 connections scraping /metrics for
# 30 s (2 threads, loopback only) while demo guests run and 100 more VMs
# sit idle (400 stats fds: enough for the parallel sweep). Every response must be a 200 (wrk counts anything else, and socket
# errors, and a Lua script counts the statuses it saw), and the exporter's
# resident memory must not grow with the requests: sampled every 0.5 s
# through the run, it may step up once (a result buffer or a thread
# stack first used late, glibc's heap growing once), but not in each
# third of the run, as memory kept per request would.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm nosan
source "$(dirname "$0")/../lib.sh"
require_kvm serve_load
for t in curl wrk; do
	command -v $t >/dev/null || { skip serve_load "$t is not installed"; exit 0; }
done
DURATION=${SERVE_LOAD_SECONDS:-30}

start_vmm --workload demo --vms 4 --vcpus 2 --hold-stats || { fail serve_load "tinyvmm demo"; exit 0; }
DEMO=$VMM_PID
IDLE_VMS=100 IDLE_VCPUS=3
start_vmm --no-run --vms $IDLE_VMS --vcpus $IDLE_VCPUS --hold-stats || { fail serve_load "tinyvmm --no-run"; exit 0; }
IDLE=$VMM_PID

rm -f "$TMP/serve.ready"
"$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/serve.ready" --pid $DEMO --pid $IDLE \
	2>"$TMP/serve.err" &
SERVE=$!
track $SERVE
wait_file "$TMP/serve.ready" 20 || { fail serve_load "kvmstats serve did not start"; exit 0; }
ADDR=$(cat "$TMP/serve.ready")
URL=http://$ADDR/metrics

code=$(curl -s --max-time 20 --compressed -o "$TMP/first.txt" -w "%{http_code}" "$URL")
check "the first scrape is 200 ($code)" [ "$code" = 200 ]
n=$(grep -c "^kvm_vcpu_exits_total{pid=\"$IDLE\"" "$TMP/first.txt")
check "every one of the $((IDLE_VMS * IDLE_VCPUS)) idle vCPUs is read by the parallel sweep ($n)" \
	[ "$n" = $((IDLE_VMS * IDLE_VCPUS)) ]
n=$(grep -c "^kvm_vm_mmu_cache_miss_total{pid=\"$IDLE\"" "$TMP/first.txt")
check "... and every idle VM ($n)" [ "$n" = $IDLE_VMS ]
threads=$(awk '/^kvmstats_read_threads/ {print $2}' "$TMP/first.txt")
check "a thread per core reads ($threads, $(nproc) CPUs)" [ "$threads" = "$(nproc)" ]
if command -v promtool >/dev/null; then
	check "the scrape passes promtool" promtool check metrics <"$TMP/first.txt"
fi
rss() { awk '/^VmRSS/ {print $2}' /proc/$SERVE/status; }
rss0=$(rss)
series=$(grep -vc '^#' "$TMP/first.txt")
echo "# $series series, $(wc -c <"$TMP/first.txt") bytes per scrape; VmRSS $rss0 kB after the first scrape"

# Count every status wrk sees; anything but 200 is an error.
cat >"$TMP/status.lua" <<'EOF'
local counts = {}
local threads = {}
function setup(thread)
	table.insert(threads, thread)
end
function init(args)
	codes = {}
end
function response(status, headers, body)
	codes[status] = (codes[status] or 0) + 1
end
function done(summary, latency, requests)
	local total = {}
	for _, t in ipairs(threads) do
		local c = t:get("codes")
		for k, v in pairs(c) do total[k] = (total[k] or 0) + v end
	end
	for k, v in pairs(total) do
		io.write(string.format("status %d %d\n", k, v))
	end
end
EOF
timeout -k 5 60 wrk -t 2 -c 8 -d 5s --timeout 10s -H 'Accept-Encoding: gzip' \
	"$URL" >"$TMP/warm.txt" 2>&1
rssw=$(rss)
# VmRSS every 0.5 s while wrk runs, stamped with the seconds since it began.
(
	t0=$(date +%s%N)
	while kill -0 $SERVE 2>/dev/null && [ ! -e "$TMP/rss.stop" ]; do
		echo "$((($(date +%s%N) - t0) / 1000000)) $(rss)"
		sleep 0.5
	done
) >"$TMP/rss.txt" 2>/dev/null &
SAMPLER=$!
track $SAMPLER
timeout -k 5 $((DURATION + 30)) wrk -t 2 -c 8 -d "${DURATION}s" --timeout 10s \
	-H 'Accept-Encoding: gzip' -s "$TMP/status.lua" "$URL" >"$TMP/wrk.txt" 2>&1
rc=$?
touch "$TMP/rss.stop"
wait $SAMPLER 2>/dev/null
sed 's/^/# /' "$TMP/wrk.txt"
check "wrk ran to the end (exit $rc)" [ $rc = 0 ]
requests=$(awk '/requests in/ {print $1}' "$TMP/wrk.txt")
check "wrk made requests (${requests:-0})" [ "${requests:-0}" -gt 100 ]
check "no socket errors" bash -c "! grep -q 'Socket errors' '$TMP/wrk.txt'"
check "no non-2xx response" bash -c "! grep -q 'Non-2xx' '$TMP/wrk.txt'"
ok200=$(awk '$1 == "status" && $2 == 200 {print $3}' "$TMP/wrk.txt")
other=$(awk '$1 == "status" && $2 != 200 {n += $3} END {print n + 0}' "$TMP/wrk.txt")
check "every response was a 200 (${ok200:-0} of them, $other others)" \
	[ "${ok200:-0}" = "$requests" -a "$other" = 0 ]
code=$(curl -s --max-time 20 --compressed -o "$TMP/last.txt" -w "%{http_code}" "$URL")
check "it serves after the load ($code)" [ "$code" = 200 ]
rss1=$(rss)
echo "# VmRSS $rss0 kB after the first scrape, $rssw kB after the warm-up, $rss1 kB at the end"
# The highest VmRSS in each third of the run, and how much each third
# added to the highest before it (the warm-up's for the first).
read -r grow peaks < <(awk -v d=$((DURATION * 1000)) -v w="$rssw" '
	{ i = int($1 * 3 / d); if (i > 2) i = 2; if ($2 > m[i]) m[i] = $2 }
	END {
		prev = w; min = -1
		for (i = 0; i < 3; i++) {
			if (!(i in m)) m[i] = prev
			g = m[i] - prev; if (g < 0) g = 0
			if (min < 0 || g < min) min = g
			if (m[i] > prev) prev = m[i]
			p = p (i ? " " : "") m[i]
		}
		print min, p
	}' "$TMP/rss.txt")
echo "# VmRSS highest in each third of the run: $peaks kB ($(wc -l <"$TMP/rss.txt") samples)"
check "resident memory does not grow in every third of the run (least growth $grow kB, 2% of $rssw kB allowed)" \
	[ $((grow * 50)) -le "$rssw" ]
# What may still come late is bounded (MAX_RESULTS gzipped expositions,
# 8 connection threads' 512 KiB stacks): far below half of the footprint.
check "resident memory at the end is within 50% of after the warm-up ($rssw -> $rss1 kB)" \
	[ $((rss1 * 2)) -le $((rssw * 3)) ]
busy=$(awk '/^kvmstats_requests_refused_total\{reason="busy"\}/ {print $2}' "$TMP/last.txt")
scrapes=$(awk '/^kvmstats_scrapes_total/ {n += $2} END {print n}' "$TMP/last.txt")
stale=$(awk '/^kvmstats_stale_responses_total/ {print $2}' "$TMP/last.txt")
echo "# $requests requests took $scrapes scrapes; $stale got the previous exposition, ${busy:-?} were refused as busy"
