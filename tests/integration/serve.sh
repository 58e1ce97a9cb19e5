#!/bin/bash
# kvmstats serve against real VMs: tinyvmm demo guests, a halted tinyvmm VM
# whose counters no longer move, and a QEMU VM (auto source: QEMU 7.2 holds
# no stats fds, so QMP). A scrape passes `promtool check metrics`; every
# counter and gauge of the halted VM equals the kernel's value as `kvmstats
# dump --json` reads it (units converted); histograms are cumulative, end
# in +Inf, and their _count and _sum are the kernel's; gzip and OpenMetrics
# are negotiated; basic auth and TLS work from a web config; hostile
# clients (huge headers, garbage, slowloris, too many connections) neither
# crash it nor make it grow; it keeps only the capabilities it needs.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu
source "$(dirname "$0")/../lib.sh"
require_kvm serve
for t in curl promtool jq openssl socat; do
	command -v $t >/dev/null || { skip serve "$t is not installed"; exit 0; }
done

# start_serve NAME ARGS...: kvmstats serve on a free loopback port, in the
# background; sets SERVE_PID and ADDR (host:port).
start_serve() {
	local name=$1
	shift
	rm -f "$TMP/$name.ready"
	${SERVE_PREFIX:-} "$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/$name.ready" "$@" \
		2>>"$TMP/$name.err" &
	SERVE_PID=$!
	track "$SERVE_PID"
	wait_file "$TMP/$name.ready" 20 || { echo "# serve $name did not start:"; \
		sed 's/^/# /' "$TMP/$name.err"; return 1; }
	ADDR=$(cat "$TMP/$name.ready")
}

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# The VMs: demo guests (counters moving), a halted VM (counters fixed, its
# halt histograms filled by --irqchip), and QEMU.
start_vmm --workload demo --irqchip --vms 2 --vcpus 2 --hold-stats || { fail serve "tinyvmm demo"; exit 0; }
DEMO=$VMM_PID
start_vmm --workload halt --exits 1000 --halts 100 --halt-us 50 --irqchip --vcpus 2 --hold-stats ||
	{ fail serve "tinyvmm halt"; exit 0; }
HALTED=$VMM_PID
QEMU_OK=1
start_qemu serve-q 'exits=100' || QEMU_OK=0
# Other VMs may run on this host: export ours only.
PIDS="--pid $DEMO --pid $HALTED"
[ $QEMU_OK = 1 ] && PIDS="$PIDS --pid $QEMU_PID"
start_serve main $PIDS --timeout 3 --max-connections-per-ip 16 --refresh 1 ||
	{ fail serve "kvmstats serve did not start"; exit 0; }
MAIN=$SERVE_PID
URL=http://$ADDR/metrics

# The first scrapes: QEMU's QMP readings arrive in the background.
for i in $(seq 50); do
	curl -sS --max-time 20 "$URL" >"$TMP/m.txt" 2>"$TMP/curl.err"
	[ $QEMU_OK = 0 ] && break
	grep -q "^kvm_vcpu_exits_total{pid=\"$QEMU_PID\"" "$TMP/m.txt" && break
	sleep 0.2
done

check "promtool check metrics passes on a scrape" promtool check metrics <"$TMP/m.txt"
for p in $DEMO $HALTED; do
	check "tinyvmm $p is exported (fd source)" \
		grep -q "^kvmstats_vm_info{pid=\"$p\",.*source=\"fd\"} 1$" "$TMP/m.txt"
done
if [ $QEMU_OK = 1 ]; then
	qsrc=$(sed -n "s/^kvmstats_vm_info{pid=\"$QEMU_PID\",name=\"serve-q\",.*source=\"\([a-z]*\)\"} 1$/\1/p" "$TMP/m.txt" | head -n 1)
	check "QEMU is exported (auto source: ${qsrc:-none})" [ -n "$qsrc" ]
	# Every source auto picks for a QEMU has its vCPUs: QMP's, or the
	# vCPU stats fds QEMU 8.1 and later hold.
	check "QEMU's vCPU exit counter is there (source ${qsrc:-none})" \
		grep -q "^kvm_vcpu_exits_total{pid=\"$QEMU_PID\",name=\"serve-q\",vm=\"0\",vcpu=\"0\"} [1-9]" "$TMP/m.txt"
	[ -n "$qsrc" ] || sed 's/^/# serve: /' "$TMP/main.err"
else
	fail "QEMU VM" "QEMU did not start"
fi
check "HELP and TYPE precede the exit counter" \
	grep -Pzq '# HELP kvm_vcpu_exits_total [^\n]+\n# TYPE kvm_vcpu_exits_total counter\n' "$TMP/m.txt"

# ---- the halted VM: every value equals the kernel's ------------------------
"$KVMSTATS" dump --json --pid "$HALTED" >"$TMP/dump.json"
curl -sS --max-time 20 "$URL" >"$TMP/m2.txt"
# One line per stat: scope, vm, vcpu, stat, value (arrays comma-joined).
jq -r '.vms | to_entries[] | .key as $vm |
	(.value.stats | to_entries[] | ["vm", $vm, "-", .key, .value]),
	(.value.vcpus[] | .index as $c | .stats | to_entries[] | ["vcpu", $vm, $c, .key, .value])
	| map(if type == "array" then map(tostring) | join(",")
	      elif type == "boolean" then (if . then "1" else "0" end) else tostring end)
	| join(" ")' "$TMP/dump.json" >"$TMP/expect.txt"
awk -v pid="$HALTED" '
	FNR == NR {
		if ($0 ~ /^#/ || index($0, "pid=\"" pid "\"") == 0)
			next
		i = index($0, "{"); j = index($0, "} ")
		name = substr($0, 1, i - 1); lab = substr($0, i + 1, j - i - 1)
		val = substr($0, j + 2)
		p = index(lab, ",le=\"")
		if (p) {	# a bucket: keep them in order per series
			k = name "{" substr(lab, 1, p - 1) "}"
			n = ++nb[k]; bv[k, n] = val
			bl[k, n] = substr(lab, p + 5, length(lab) - p - 5)
		} else {
			m[name "{" lab "}"] = val
		}
		next
	}
	function seconds(v, ns) { return int(v * 1e9 + 0.5) == ns + 0 }
	{
		pre = ($1 == "vm") ? "kvm_vm_" : "kvm_vcpu_"
		lab = "pid=\"" pid "\",name=\"tinyvmm\",vm=\"" $2 "\""
		if ($1 == "vcpu")
			lab = lab ",vcpu=\"" $3 "\""
		stat = $4; v = $5; checked++
		if (index(v, ",")) {	# a log2 histogram in seconds
			k = pre stat "_seconds_bucket{" lab "}"
			nv = split(v, a, ","); cum = 0
			if (nb[k] != nv) { print "# " k ": " nb[k] " buckets, kernel has " nv; bad++; next }
			for (b = 1; b <= nv; b++) {
				cum += a[b]
				if (bv[k, b] != cum) { print "# " k " bucket " b ": " bv[k, b] " != " cum; bad++ }
				le = bl[k, b]
				if (b == nv) {
					if (le != "+Inf") { print "# " k ": last le is " le; bad++ }
				} else if (!seconds(le, 2 ^ (b - 1) - 1)) {
					print "# " k ": bucket " b " has le=" le; bad++
				}
			}
			c = pre stat "_seconds_count{" lab "}"
			if (m[c] != cum) { print "# " c " = " m[c] ", kernel " cum; bad++ }
			sums[pre stat "_seconds_sum{" lab "}"] = 1
			next
		}
		base = stat; sub(/_ns$/, "", base)
		n = 0
		if ((pre stat "_total{" lab "}") in m) { n++; got = m[pre stat "_total{" lab "}"]; ns = 0 }
		if ((pre stat "{" lab "}") in m) { n++; got = m[pre stat "{" lab "}"]; ns = 0 }
		if (base != stat && (pre base "_seconds_total{" lab "}") in m) { n++; got = m[pre base "_seconds_total{" lab "}"]; ns = 1 }
		if (base != stat && (pre base "_seconds{" lab "}") in m) { n++; got = m[pre base "_seconds{" lab "}"]; ns = 1 }
		if (n != 1) { print "# " pre stat "{" lab "}: " n " metrics"; bad++; next }
		if (ns ? !seconds(got, v) : got != v) { print "# " pre stat "{" lab "}: " got " != " v; bad++ }
		if (stat ~ /_ns$/) nsval[pre base "_hist_seconds_sum{" lab "}"] = v
	}
	END {
		for (s in sums) {
			if (!(s in m)) { print "# " s " is missing"; bad++ }
			else if (!seconds(m[s], nsval[s])) { print "# " s " = " m[s] ", kernel " nsval[s] " ns"; bad++ }
		}
		print "# compared " checked " stats of the halted VM"
		exit (bad > 0 || checked < 100)
	}' "$TMP/m2.txt" "$TMP/expect.txt" >"$TMP/cmp.txt"
rc=$?
cat "$TMP/cmp.txt"
if [ $rc = 0 ]; then pass "every counter, gauge and histogram of the halted VM equals the kernel's"
else fail "halted VM values" "see above"; fi
check "the halted VM's halt_wait histogram is not empty (the check above meant something)" \
	grep -q "^kvm_vcpu_halt_wait_hist_seconds_count{pid=\"$HALTED\",.*} [1-9]" "$TMP/m2.txt"

# ---- histograms everywhere: cumulative, ending in +Inf, _count = +Inf -------
hist_check() {
	awk '
		/^#/ { next }
		{
			i = index($0, "{"); j = index($0, "} ")
			name = substr($0, 1, i - 1); lab = substr($0, i + 1, j - i - 1); val = substr($0, j + 2) + 0
		}
		name ~ /_bucket$/ {
			p = index(lab, ",le=\""); key = substr(name, 1, length(name) - 7) "{" substr(lab, 1, p - 1) "}"
			le = substr(lab, p + 5, length(lab) - p - 5)
			if (key != cur) {
				if (cur != "" && last != "+Inf") { print "# " cur " does not end in +Inf"; bad++ }
				cur = key; prev = -1; n++
			}
			if (val < prev) { print "# " key " is not cumulative at le=" le; bad++ }
			prev = val; last = le; inf[key] = val
			next
		}
		name ~ /_count$/ {
			key = substr(name, 1, length(name) - 6) "{" lab "}"
			if ((key in inf) && inf[key] != val) { print "# " key "_count " val " != +Inf bucket " inf[key]; bad++ }
		}
		END {
			if (cur != "" && last != "+Inf") { print "# " cur " does not end in +Inf"; bad++ }
			print "# " n " histograms"
			exit (bad > 0 || n == 0)
		}' "$1"
}
check "every histogram is cumulative, ends in +Inf, and _count equals it" hist_check "$TMP/m2.txt"

# ---- content negotiation ---------------------------------------------------
curl -sS --max-time 20 -H 'Accept-Encoding: gzip' -D "$TMP/gz.h" "$URL" >"$TMP/m.gz"
check "gzip when the scraper accepts it" grep -qi '^Content-Encoding: gzip' "$TMP/gz.h"
if gzip -dc <"$TMP/m.gz" >"$TMP/gunzip.txt" 2>/dev/null && promtool check metrics <"$TMP/gunzip.txt"; then
	pass "the gzip body is one valid gzip stream that passes promtool"
else
	fail "gzip body" "not valid gzip, or promtool failed"
fi
curl -sS --max-time 20 -D "$TMP/plain.h" "$URL" -o /dev/null
check "no gzip when not accepted" bash -c "! grep -qi '^Content-Encoding' '$TMP/plain.h'"
check "text format 0.0.4 by default" grep -qi '^Content-Type: text/plain; version=0.0.4' "$TMP/plain.h"
curl -sS --max-time 20 -D "$TMP/om.h" -H 'Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5' \
	"$URL" >"$TMP/om.txt"
check "OpenMetrics when the Accept header asks" grep -qi '^Content-Type: application/openmetrics-text; version=1.0.0' "$TMP/om.h"
curl -sS --max-time 20 -D "$TMP/om2.h" -o /dev/null \
	-H 'Accept: text/plain;version=0.0.4, application/openmetrics-text;version=1.0.0;q=0.5' "$URL"
check "the text format when the scraper prefers it by q-value" grep -qi '^Content-Type: text/plain' "$TMP/om2.h"
curl -sS --max-time 20 -D "$TMP/gz0.h" -o /dev/null -H 'Accept-Encoding: gzip;q=0, identity' "$URL"
check "no gzip when refused with q=0" bash -c "! grep -qi '^Content-Encoding' '$TMP/gz0.h'"
check "OpenMetrics ends with # EOF" bash -c "[ \"\$(tail -n 1 '$TMP/om.txt')\" = '# EOF' ]"
check "OpenMetrics counters: TYPE without _total, UNIT, samples with _total" \
	grep -Pzq '# TYPE kvm_vcpu_halt_wait_seconds counter\n# UNIT kvm_vcpu_halt_wait_seconds seconds\n# HELP kvm_vcpu_halt_wait_seconds [^\n]*\nkvm_vcpu_halt_wait_seconds_total\{' "$TMP/om.txt"
check "OpenMetrics le values are canonical floats" grep -q 'le="0.0"} ' "$TMP/om.txt"
check "OpenMetrics histograms pass the same checks" hist_check "$TMP/om.txt"
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -I "$URL")
check "HEAD /metrics is 200" [ "$code" = 200 ]
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -X POST -d x=1 "$URL")
check "POST is refused (405)" [ "$code" = 405 ]
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "http://$ADDR/nope")
check "an unknown path is 404" [ "$code" = 404 ]
check "the landing page links to /metrics" bash -c "curl -sS --max-time 10 http://$ADDR/ | grep -q 'href=\"/metrics\"'"

# ---- capabilities ----------------------------------------------------------
# CAP_DAC_READ_SEARCH (2) and CAP_SYS_PTRACE (19), nothing else, bounding
# set included, and no_new_privs.
want=0000000000080004
eff=$(awk '/^CapEff/ {print $2}' /proc/$MAIN/status)
bnd=$(awk '/^CapBnd/ {print $2}' /proc/$MAIN/status)
prm=$(awk '/^CapPrm/ {print $2}' /proc/$MAIN/status)
if [ "$(id -u)" = 0 ]; then
	check "only CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH are kept ($eff)" [ "$eff" = $want -a "$prm" = $want ]
	check "the bounding set is dropped too ($bnd)" [ "$bnd" = $want ]
else
	skip "capabilities" "not running as root"
fi
check "no_new_privs is set" grep -q '^NoNewPrivs:[[:space:]]*1' /proc/$MAIN/status
code=$(curl -s --max-time 20 -o /dev/null -w '%{http_code}' "$URL")
check "it still reads every VM without the other capabilities" [ "$code" = 200 ]

# A VMM of another user (its /proc/PID/fd is 0500, its own): read with the
# two capabilities kept, and not without either of them.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps=+dac_override \
		--ambient-caps=+dac_override "$TINYVMM" --hold-stats --ready "$TMP/nobody.ready" \
		--timeout 300 2>/dev/null &
	NOBODY=$!
	track $NOBODY
	if wait_file "$TMP/nobody.ready" 20; then
		for drop in none dac_read_search sys_ptrace; do
			SERVE_PREFIX=""
			[ $drop != none ] && SERVE_PREFIX="setpriv --bounding-set=-$drop --inh-caps=-$drop"
			start_serve "nobody-$drop" --pid $NOBODY || { fail "serve without $drop" "did not start"; continue; }
			curl -sS --max-time 20 "http://$ADDR/metrics" >"$TMP/nb.txt"
			kill $SERVE_PID
			wait $SERVE_PID 2>/dev/null
			if [ $drop = none ]; then
				check "a VMM of another user is read with only the two capabilities" \
					grep -q "^kvm_vcpu_exits_total{pid=\"$NOBODY\"" "$TMP/nb.txt"
			else
				check "... and not without CAP_${drop^^} (both are needed)" \
					bash -c "! grep -q 'pid=\"$NOBODY\"' '$TMP/nb.txt'"
			fi
		done
		SERVE_PREFIX=""
	else
		skip "a VMM of another user" "tinyvmm did not start as nobody"
	fi
	kill $NOBODY 2>/dev/null
fi

# ---- hostile clients -------------------------------------------------------
for i in 1 2 3; do curl -s --max-time 20 "$URL" -o /dev/null; done
rss0=$(rss_kb $MAIN)
# A header of 64 KiB: refused (the limit is 16 KiB), nothing else happens.
big=$(head -c 65536 /dev/zero | tr '\0' a)
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -H "X-Big: $big" "$URL")
check "an oversized header is refused ($code)" [ "$code" = 431 -o "$code" = 413 -o "$code" = 400 -o "$code" = 000 ]
# Garbage: random bytes, and a request line of random text.
for i in 1 2 3; do
	head -c 200000 /dev/urandom | timeout 5 socat -u - TCP:$ADDR 2>/dev/null
done
printf 'GARBAGE \x01\x02\x03 HTTP/9.9\r\n\r\n' | timeout 5 socat - TCP:$ADDR >/dev/null 2>&1
printf 'GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n' |
	timeout 5 socat -u - TCP:$ADDR 2>/dev/null
check "garbage does not kill it" kill -0 $MAIN
# Slowloris: 40 connections that never finish their headers. Those past
# the per-address limit are closed at once: writing to them must not kill
# this script.
trap '' PIPE
slow=()
for i in $(seq 40); do
	exec {fd}<>/dev/tcp/${ADDR%:*}/${ADDR##*:} 2>/dev/null || break
	printf 'GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: ' >&$fd 2>/dev/null
	slow+=($fd)
done
sleep 0.5
# 127.0.0.1 holds its 16 connections; another client address is served.
code=$(curl -s --max-time 20 --interface 127.0.0.2 -o /dev/null -w '%{http_code}' "$URL")
check "with 40 slow connections open, another client is served ($code)" [ "$code" = 200 ]
threads=$(ls /proc/$MAIN/task | wc -l)
check "connections are bounded: $threads threads" [ "$threads" -le 40 ]
# The idle timeout (3 s here) closes them all.
sleep 4.5
code=$(curl -s --max-time 20 -o /dev/null -w '%{http_code}' "$URL")
check "after the timeout the slow connections are gone and 127.0.0.1 is served again" [ "$code" = 200 ]
for fd in "${slow[@]}"; do exec {fd}>&-; done
# Many clients at once, from many addresses.
pids=""
for i in $(seq 2 80); do
	curl -s --max-time 20 --interface 127.0.1.$i -o /dev/null "$URL" &
	pids="$pids $!"
done
for p in $pids; do wait $p; done
for i in 1 2 3; do curl -s --max-time 20 "$URL" -o /dev/null; done
rss1=$(rss_kb $MAIN)
echo "# VmRSS $rss0 kB before the hostile clients, $rss1 kB after"
check "memory stays bounded (+$(((rss1 - rss0) / 1024)) MiB)" [ $((rss1 - rss0)) -lt 32768 ]
code=$(curl -s --max-time 20 -o "$TMP/m3.txt" -w '%{http_code}' "$URL")
check "it still serves a valid scrape" bash -c "[ $code = 200 ] && promtool check metrics <'$TMP/m3.txt'"

rb() { curl -sS --max-time 20 "$URL" | awk '/^kvmstats_model_rebuilds_total/ {print $2}'; }
r1=$(rb); r2=$(rb); r3=$(rb)
check "labels and families are not rebuilt while no VM comes or goes ($r1 $r2 $r3)" \
	[ -n "$r1" -a "$r1" = "$r2" -a "$r2" = "$r3" ]

# ---- a VMM that exits is dropped --------------------------------------------
kill -TERM $HALTED
wait $HALTED 2>/dev/null
for i in $(seq 20); do
	curl -sS --max-time 20 "$URL" >"$TMP/m4.txt"
	grep -q "pid=\"$HALTED\"" "$TMP/m4.txt" || break
	sleep 0.2
done
check "an exited VMM's series are gone" bash -c "! grep -q 'pid=\"$HALTED\"' '$TMP/m4.txt'"
check "the other VMs are still exported" grep -q "^kvm_vcpu_exits_total{pid=\"$DEMO\"" "$TMP/m4.txt"
r4=$(awk '/^kvmstats_model_rebuilds_total/ {print $2}' "$TMP/m4.txt")
check "... and the model was rebuilt for it ($r3 -> $r4)" [ "${r4:-0}" -gt "${r3:-0}" ]

# ---- TLS and basic auth from a web config ------------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
	-keyout "$TMP/key.pem" -out "$TMP/cert.pem" -days 1 -subj /CN=localhost \
	-addext subjectAltName=IP:127.0.0.1 2>/dev/null
hash=$(echo 's3cret pass' | "$KVMSTATS" serve --hash-password)
check "--hash-password prints a bcrypt hash" bash -c "[[ '$hash' == \\\$2b\\\$10\\\$* ]]"
cat >"$TMP/web.yml" <<EOF
tls_server_config:
  cert_file: cert.pem
  key_file: key.pem
  min_version: TLS12
http_server_config:
  headers:
    X-Content-Type-Options: nosniff
basic_auth_users:
  prom: '$hash'
EOF
if start_serve tls $PIDS --web-config "$TMP/web.yml"; then
	TLS_URL=https://$ADDR/metrics
	C="curl -s --max-time 20 --cacert $TMP/cert.pem -o $TMP/t.txt -w %{http_code}"
	code=$($C "$TLS_URL")
	check "TLS without credentials: 401 ($code)" [ "$code" = 401 ]
	code=$($C -u 'prom:wrong' "$TLS_URL")
	check "TLS with a wrong password: 401 ($code)" [ "$code" = 401 ]
	code=$($C -u 'nobody:s3cret pass' "$TLS_URL")
	check "TLS with an unknown user: 401 ($code)" [ "$code" = 401 ]
	code=$($C -u 'prom:s3cret pass' -D "$TMP/t.h" "$TLS_URL")
	check "TLS with the right password: 200 ($code)" [ "$code" = 200 ]
	check "... and the scrape passes promtool" promtool check metrics <"$TMP/t.txt"
	check "the configured header is sent" grep -qi '^X-Content-Type-Options: nosniff' "$TMP/t.h"
	code=$($C -u 'prom:s3cret pass' "$TLS_URL")
	check "a second request (cached check) is 200 too" [ "$code" = 200 ]
	code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "http://$ADDR/metrics")
	check "plain HTTP to the TLS port is not served ($code)" [ "$code" != 200 ]
	code=$($C --tls-max 1.1 -u 'prom:s3cret pass' "$TLS_URL")
	check "TLS 1.1 is refused (min_version TLS12) ($code)" [ "$code" != 200 ]
	check "the TLS server says https on its landing page" \
		bash -c "curl -s --max-time 10 --cacert '$TMP/cert.pem' -u 'prom:s3cret pass' https://$ADDR/ | grep -q https://"
else
	fail "serve with TLS and basic auth" "did not start"
fi
printf 'tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  client_ca_file: ca.pem\n' >"$TMP/bad.yml"
"$KVMSTATS" serve --listen 127.0.0.1:0 --web-config "$TMP/bad.yml" 2>"$TMP/bad.err" </dev/null &
bp=$!
track $bp
for i in $(seq 50); do kill -0 $bp 2>/dev/null || break; sleep 0.1; done
wait $bp
rc=$?
check "an unsupported web config key is an error, exit 1 ($rc)" [ $rc = 1 ]
check "... with a clear message" grep -q 'client_ca_file is not supported' "$TMP/bad.err"
# IPv6 loopback.
if ip -6 addr show lo 2>/dev/null | grep -q '::1/128'; then
	rm -f "$TMP/v6.ready"
	"$KVMSTATS" serve --listen '[::1]:0' --ready "$TMP/v6.ready" --pid $DEMO 2>/dev/null &
	v6=$!
	track $v6
	if wait_file "$TMP/v6.ready" 20; then
		v6addr=$(cat "$TMP/v6.ready")
		code=$(curl -sg --max-time 20 -o /dev/null -w '%{http_code}' "http://$v6addr/metrics")
		check "--listen [::1]:PORT serves over IPv6 ($v6addr, $code)" [ "$code" = 200 ]
	else
		fail "--listen [::1]:0" "did not start"
	fi
	kill $v6
fi
"$KVMSTATS" serve --listen 999.1.2.3:1 >/dev/null 2>"$TMP/bad2.err"
rc=$?
check "a bad --listen address fails with exit 1 ($rc)" [ $rc = 1 ]
"$KVMSTATS" serve --threads many >/dev/null 2>&1
check "a bad option value is a usage error (exit 2)" [ $? = 2 ]

kill -0 $DEMO && pass "the demo VMs ran on, untouched" || fail "demo VMs" "tinyvmm died"
[ $QEMU_OK = 1 ] && { kill -0 $QEMU_PID && pass "QEMU ran on, untouched" || fail "QEMU" "QEMU died"; }
