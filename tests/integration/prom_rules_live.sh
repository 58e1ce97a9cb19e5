#!/bin/bash
# kvmstats-test: needs=kvm qemu
# dist/prometheus/kvmstats.rules.yml loaded by a real Prometheus that
# scrapes `kvmstats serve` (with its planner) while tinyvmm guests (exits
# and halts that fill the histograms) and a QEMU VM (which the planner
# can plan) run:
# every rule evaluates without error, every recorded series and every
# query of dist/grafana/kvmstats.json returns data from the real exporter.
. "$(dirname "$0")/../lib.sh"
require_kvm

DASH=$ROOT/dist/grafana/kvmstats.json
RULES=$ROOT/dist/prometheus/kvmstats.rules.yml

start_vmm --name web --workload demo --irqchip --vms 2 --vcpus 2 --hold-stats ||
	{ fail "tinyvmm demo guests"; exit 0; }
DEMO=$VMM_PID
start_qemu plan "nonzero=4M stride=4K" || { fail "a QEMU VM"; exit 0; }
"$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/serve.ready" --pid "$DEMO" \
	--pid "$QEMU_PID" \
	--plan-interval 2 2>"$TMP/serve.err" &
track $!
wait_file "$TMP/serve.ready" 20 || { fail "kvmstats serve did not start"; exit 0; }

PROM_PORT=$(free_port) || { fail "no free port"; exit 0; }
# (Under emulation a scrape takes longer: the periods scale.)
cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: $(slow 1)s
  scrape_timeout: $(slow 1)s
  evaluation_interval: $(slow 1)s
rule_files: ['$RULES']
scrape_configs:
  - job_name: kvmstats
    static_configs:
      - targets: ['$(cat "$TMP/serve.ready")']
EOF
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
	--web.listen-address=127.0.0.1:$PROM_PORT --log.level=warn >"$TMP/prometheus.log" 2>&1 &
track $!
PROM=$!
API=http://127.0.0.1:$PROM_PORT/api/v1
for _ in $(seq $(slow 100)); do
	curl -sf --max-time 2 "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null && break
	kill -0 $PROM 2>/dev/null || break
	sleep 0.2
done
query() {
	curl -sS --max-time 10 --data-urlencode "query=$1" "$API/query" | jq -c '.data.result'
}

# Up to 40 s (times the slowdown): rates need two scrapes, the plan one
# planner round.
rates() { query 'count(vm:kvm_vcpu_exits:rate5m{name="web"} > 0)' | jq -r '.[0].value[1] // 0'; }
ranked() { query 'count(kvmstats_plan_rank{name="plan"})' | jq -r '.[0].value[1] // 0'; }
deadline=$((SECONDS + $(slow 40)))
while [ $SECONDS -lt $deadline ]; do
	[ "$(rates)" = 2 ] && [ "$(ranked)" = 1 ] && break
	sleep 0.5
done
check "Prometheus records the tinyvmm VMs' exit rates" test "$(rates)" = 2
check "the planner ranks the QEMU VM" test "$(ranked)" = 1
sleep "$(slow_s 2)"	# every group evaluated at least once more

rules=$(curl -sS --max-time 10 "$API/rules")
check "Prometheus loaded every rule ($(jq '[.data.groups[].rules[]] | length' <<<"$rules") rules)" \
	test "$(jq '[.data.groups[].rules[]] | length' <<<"$rules")" = \
	"$(grep -cE '^ *- (record|alert):' "$RULES")"
bad=$(jq -r '.data.groups[].rules[] | select(.health != "ok") | "\(.name): \(.lastError)"' <<<"$rules")
check "every rule evaluates on the real exporter's metrics${bad:+ ($bad)}" test -z "$bad"

empty=""
for r in $(grep -oP '^ *- record: \K\S+' "$RULES"); do
	[ "$(query "$r" | jq length)" -gt 0 ] || empty="$empty $r"
done
check "every recorded series has data${empty:+ (empty:$empty)}" test -z "$empty"

# The dashboard's queries, as Grafana sends them with every VM chosen.
empty=""
n=0
while IFS= read -r q; do
	n=$((n + 1))
	q=${q//\$job/kvmstats}
	q=${q//\$instance/.*}
	q=${q//\$vm/.*}
	[ "$(query "$q" | jq length)" -gt 0 ] || empty="$empty [$q]"
done < <(jq -r '.. | objects | select(has("expr")) | .expr' "$DASH")
check "each of the dashboard's $n queries returns data${empty:+ (empty:$empty)}" \
	test "$n" -ge 6 -a -z "$empty"
check "the halt-wait heatmap has the exporter's buckets" \
	test "$(query 'count(sum by (le) (vm:kvm_vcpu_halt_wait_hist_seconds_bucket:rate5m))' |
		jq -r '.[0].value[1] // 0')" -ge 32
