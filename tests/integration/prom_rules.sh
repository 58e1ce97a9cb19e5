#!/bin/bash
# kvmstats-test: needs=none
# The Prometheus rules and the Grafana dashboard of dist/: promtool
# checks the rules and runs their unit tests; the unit tests bite (a
# changed threshold fails them); the dashboard has at least six panels on
# kvm_ metrics, and every query of every panel, as Grafana sends it with
# the variables at job=kvmstats and All, is evaluated by a unit test.
. "$(dirname "$0")/../lib.sh"

PY=/usr/bin/python3
PROM=$ROOT/dist/prometheus
DASH=$ROOT/dist/grafana/kvmstats.json

promtool check rules "$PROM/kvmstats.rules.yml" >"$TMP/check.out" 2>&1
check "promtool check rules: $(grep -o '[0-9]* rules found' "$TMP/check.out")" \
	grep -q SUCCESS "$TMP/check.out"
promtool test rules "$PROM"/tests/*.yml >"$TMP/test.out" 2>&1
rc=$?
check "promtool test rules: every unit test of dist/prometheus/tests passes" \
	test $rc = 0 -a "$(grep -c SUCCESS "$TMP/test.out")" = "$(ls "$PROM"/tests/*.yml | wc -l)"
[ $rc = 0 ] || sed 's/^/# /' "$TMP/test.out" | head -30

# The tests must notice a change of what they test.
cp -r "$PROM" "$TMP/mut"
sed -i 's/vm:kvm_vcpu_exits_per_vcpu:rate5m > 50000/vm:kvm_vcpu_exits_per_vcpu:rate5m > 500000/' \
	"$TMP/mut/kvmstats.rules.yml"
sed -i 's/(rate(kvm_vcpu_io_exits_total\[5m\]))/(rate(kvm_vcpu_mmio_exits_total[5m]))/' \
	"$TMP/mut/kvmstats.rules.yml"
promtool test rules "$TMP"/mut/tests/*.yml >"$TMP/mut.out" 2>&1
check "a changed alert threshold and a wrong recorded metric fail the unit tests" \
	test $? != 0 -a "$(grep -c 'alertname: KvmVcpuHighExitRate' "$TMP/mut.out")" -ge 1 -a \
	"$(grep -c 'vm:kvm_vcpu_io_exits:rate5m' "$TMP/mut.out")" -ge 1

# Every panel query, with Grafana's variables as the dashboard's "All"
# sends them, must be an expression some unit test evaluates.
out=$("$PY" - "$DASH" "$PROM"/tests/*.yml <<'EOF'
import json, re, sys, yaml

dash = json.load(open(sys.argv[1]))
norm = lambda e: re.sub(r'\s+', ' ', e).strip()
tested = set()
for path in sys.argv[2:]:
    for t in yaml.safe_load(open(path))['tests']:
        for e in t.get('promql_expr_test', []):
            tested.add(norm(e['expr']))

def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get('panels', []))

# The variables: a single job, and All (allValue .*) for the others.
vars = {v['name']: v for v in dash['templating']['list']}
subst = {'$job': 'kvmstats'}
for name in ('instance', 'vm'):
    assert vars[name].get('includeAll') and vars[name].get('allValue') == '.*', name
    subst['$' + name] = '.*'

bad, kvm_panels, queries, heatmaps = [], 0, 0, 0
for p in panels(dash['panels']):
    if p['type'] == 'row':
        continue
    exprs = [t['expr'] for t in p.get('targets', [])]
    if not exprs:
        bad.append('panel %r has no query' % p['title'])
    if p.get('datasource', {}).get('uid') != '${datasource}':
        bad.append('panel %r does not use the datasource variable' % p['title'])
    kvm_panels += any('kvm_' in e for e in exprs)
    heatmaps += p['type'] == 'heatmap'
    for e in exprs:
        queries += 1
        s = e
        for k, v in subst.items():
            s = s.replace(k, v)
        if '$' in s:
            bad.append('%r: unknown variable in %s' % (p['title'], e))
        elif norm(s) not in tested:
            bad.append('%r: untested query %s' % (p['title'], s))
if kvm_panels < 6:
    bad.append('only %d panels query kvm_ metrics' % kvm_panels)
if heatmaps < 1:
    bad.append('no histogram heatmap')
print('%d %d' % (kvm_panels, queries))
for b in bad:
    print(b)
EOF
)
counts=$(head -1 <<<"$out")
problems=$(tail -n +2 <<<"$out")
check "the dashboard: ${counts%% *} panels on kvm_ metrics, ${counts##* } queries, each one evaluated by a unit test" \
	test -n "$counts" -a -z "$problems"
[ -z "$problems" ] || sed 's/^/# /' <<<"$problems"

# Every metric the rules and the dashboard read is one the exporter
# exports, or one the rules record (or Prometheus' own `up`): names from
# the exporter's code and the kernel's stats in the shipped recording.
"$KVMSTATS" replay --json "$ROOT/dist/demo/recording.kvmlog" | head -1 >"$TMP/sample.json"
out=$("$PY" - "$PROM/kvmstats.rules.yml" "$DASH" "$TMP/sample.json" "$ROOT/cli" "$ROOT/lib" <<'EOF'
import glob, json, re, sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
dash = json.load(open(sys.argv[2]))
sample = json.load(open(sys.argv[3]))
# (serve's families are in cli/, the plan's gauges the library's)
src = ''.join(open(f).read() for d in sys.argv[4:6] for f in glob.glob(d + '/*.c'))

recorded = {r['record'] for g in rules['groups'] for r in g['rules'] if 'record' in r}
exprs = [r['expr'] for g in rules['groups'] for r in g['rules']]
def walk(ps):
    for p in ps:
        yield from (t['expr'] for t in p.get('targets', []))
        yield from walk(p.get('panels', []))
exprs += list(walk(dash['panels']))

# KVM stats: kvm_vm_<stat> / kvm_vcpu_<stat>, as kvmstats-serve(1) names them.
known = {'up'}
vm = sample['vms'][0]
for kind, stats in (('vm', vm['stats']), ('vcpu', vm['vcpus'][0]['stats'])):
    for s, v in stats.items():
        base = 'kvm_%s_%s' % (kind, s)
        known |= {base, base + '_total', re.sub(r'_ns$', '_seconds', base) + '_total'}
        if isinstance(v, list):
            known.add(base + '_seconds_bucket')
# The exporter's own families, as written in its code.
known |= set(re.findall(r'"((?:kvmstats|process)_[a-z0-9_]+)"', src))

words = set()
for e in exprs:
    e = re.sub(r'"[^"]*"', '""', e)              # label values
    e = re.sub(r'\{[^}]*\}', '', e)              # matchers
    e = re.sub(r'\b(by|without|on|ignoring)\s*\([^)]*\)', '', e)
    words |= set(re.findall(r'[a-zA-Z_:][a-zA-Z0-9_:]*', e))
funcs = {'sum', 'count', 'rate', 'histogram_quantile', 'and', 'or', 'unless'}
unknown = sorted(w for w in words - funcs if ('_' in w or ':' in w)
                 and w not in recorded and w not in known)
print(' '.join(unknown))
EOF
)
check "every metric the rules and dashboard read exists${out:+ (unknown: $out)}" test -z "$out"
