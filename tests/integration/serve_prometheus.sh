#!/bin/bash
# A real Prometheus server (Debian's) scrapes `kvmstats serve` every second
# on loopback while tinyvmm demo guests run, and answers PromQL about them
# through its HTTP API: the target is up, scraped in OpenMetrics (what
# Prometheus asks for first), and rate() of the vCPU exit counter is
# positive for every demo VM; the halt-wait histogram gives a quantile.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm
source "$(dirname "$0")/../lib.sh"
require_kvm serve_prometheus
for t in curl jq prometheus; do
	command -v $t >/dev/null || { skip serve_prometheus "$t is not installed"; exit 0; }
done
VMS=3

# query EXPR: Prometheus' instant query result (the JSON "result" array).
query() {
	curl -sS --max-time 10 --data-urlencode "query=$1" \
		"http://127.0.0.1:$PROM_PORT/api/v1/query" | jq -c '.data.result'
}

start_vmm --workload demo --irqchip --vms $VMS --vcpus 2 --hold-stats ||
	{ fail serve_prometheus "tinyvmm demo"; exit 0; }
DEMO=$VMM_PID

"$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/serve.ready" --pid $DEMO \
	2>"$TMP/serve.err" &
track $!
wait_file "$TMP/serve.ready" 20 || { fail serve_prometheus "kvmstats serve did not start"; exit 0; }
TARGET=$(cat "$TMP/serve.ready")

PROM_PORT=$(free_port) || { fail serve_prometheus "no free port"; exit 0; }
cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kvmstats
    static_configs:
      - targets: ['$TARGET']
EOF
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
	--web.listen-address=127.0.0.1:$PROM_PORT --storage.tsdb.retention.time=1h \
	--log.level=warn >"$TMP/prometheus.log" 2>&1 &
track $!
PROM=$!
ready=0
for i in $(seq 100); do
	curl -sf --max-time 2 "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null && { ready=1; break; }
	kill -0 $PROM 2>/dev/null || break
	sleep 0.2
done
if [ $ready = 0 ]; then
	fail serve_prometheus "prometheus did not get ready"
	sed 's/^/# /' "$TMP/prometheus.log" | tail -20
	exit 0
fi
pass "a real Prometheus server runs on 127.0.0.1:$PROM_PORT"

# Up to 30 s: the target up, and every demo VM's exit rate above 0 (a VM
# may sit in a quiet phase for a few seconds).
up="" vms=""
for i in $(seq 60); do
	up=$(query "up{job=\"kvmstats\"}" | jq -r '.[0].value[1] // empty')
	vms=$(query "sum by (vm) (rate(kvm_vcpu_exits_total{pid=\"$DEMO\"}[5s])) > 0" | jq -r 'length')
	[ "$up" = 1 ] && [ "${vms:-0}" = $VMS ] && break
	sleep 0.5
done
check "the target is up (up = ${up:-none})" [ "$up" = 1 ]
health=$(curl -sS --max-time 10 "http://127.0.0.1:$PROM_PORT/api/v1/targets" |
	jq -r '.data.activeTargets[0] | "\(.health) \(.lastError)"')
check "Prometheus parsed every scrape (health and last error: '$health')" [ "$health" = "up " ]
check "rate(kvm_vcpu_exits_total[5s]) > 0 for every demo VM ($vms of $VMS)" [ "${vms:-0}" = $VMS ]
query "rate(kvm_vcpu_exits_total{pid=\"$DEMO\"}[5s])" |
	jq -r '.[] | "# vm \(.metric.vm) vcpu \(.metric.vcpu): \(.value[1]) exits/s"'
om=$(query 'kvmstats_scrapes_total{format="openmetrics"}' | jq -r '.[0].value[1] // 0')
check "Prometheus negotiated OpenMetrics and parsed it ($om scrapes)" [ "${om%.*}" -gt 0 ]
n=$(query "kvmstats_vm_info{pid=\"$DEMO\"}" | jq -r 'length')
check "kvmstats_vm_info lists the $VMS VMs ($n)" [ "$n" = $VMS ]
samples=$(query 'scrape_samples_scraped{job="kvmstats"}' | jq -r '.[0].value[1] // 0')
check "Prometheus takes every sample of a scrape ($samples)" [ "${samples%.*}" -gt $((VMS * 2 * 100)) ]
q=""
for i in $(seq 20); do
	q=$(query "histogram_quantile(0.9, sum by (le) (rate(kvm_vcpu_halt_wait_hist_seconds_bucket{pid=\"$DEMO\"}[10s])))" |
		jq -r '.[0].value[1] // empty')
	[ -n "$q" ] && [ "$q" != NaN ] && break
	sleep 0.5
done
check "histogram_quantile over the halt-wait buckets gives a duration ($q s)" \
	awk -v q="$q" 'BEGIN { exit !(q > 0 && q < 10) }'
