#!/bin/bash
# kvmstats-test: needs=kvm qemu stock
# Every source tells the kernel's truth. The oracle is the kernel's own
# stats fd, never a peer's output: for one QEMU VM with an in-kernel
# irqchip (halted vCPUs whose halt histograms are filled by kicks) and
# one libvirt domain, every source that can serve them (fd or attach,
# qmp, libvirt, debugfs, auto) is read between two readings of the
# kernel's stats fds (`--source attach`: fds the VMM is made to open, or
# holds), and each of its values must lie between those two readings
# (bucket by bucket for histograms; a debugfs sum between the sums). A
# value a source cannot know (libvirt's histograms, debugfs' histograms
# and refused files) must be null, never a number that looks real. The
# same for `serve`: the `le` buckets of kvm_vcpu_halt_wait_hist_seconds
# of a VM read over QMP are the kernel's.
source "$(dirname "$0")/../lib.sh"
require_kvm agree
for t in jq curl unshare nsenter; do
	command -v $t >/dev/null || { skip agree "$t is not installed"; exit 0; }
done
have_qemu || { skip agree "$QEMU is not installed"; exit 0; }
[ -f "$MBGUEST" ] || { skip agree "$MBGUEST is not built"; exit 0; }
echo "# QEMU $(qemu_version) ($QEMU)"
QT=$(qmp_timeout)

# ORACLE: the kernel's stats fds. attach holds each thread for a
# fraction of a millisecond; --force for libvirt's seccomp'd QEMU.
oracle() { "$KVMSTATS" dump --pid "$1" --source attach --force --json 2>>"$TMP/oracle.err"; }

# norm: a dump's first VM as {vm: {stat: v}, vcpus: {"N": {stat: v}},
# types: {stat: type}} with booleans as 0/1 (nulls kept).
NORM='def unbool: with_entries(.value |= (if type == "boolean" then (if . then 1 else 0 end) else . end));
	.vms[0] | {vm: (.stats | unbool), vcpus: (.vcpus | map({key: (.index | tostring), value: (.stats | unbool)}) | from_entries),
		   source, vm_source, vcpu_source}'
norm() { jq -c "$NORM"; }

# between B S A: every number of S lies between B's and A's (bucket by
# bucket); "sum" as 4th argument: S's vCPU "-1" (debugfs' sum) is
# compared with the sums over B's and A's vCPUs (NAME_bucket0: of bucket
# 0 of NAME). Prints the first disagreements and a count, as JSON.
between() {
	jq -n -c --argjson b "$1" --argjson s "$2" --argjson a "$3" --arg mode "${4:-}" '
		def lo($x; $y): [$x, $y] | min;
		def hi($x; $y): [$x, $y] | max;
		def sumof($r; $name):
			if ($name | endswith("_bucket0")) then
				[$r.vcpus[] | .[$name | rtrimstr("_bucket0")][0]] | add
			else [$r.vcpus[] | .[$name]] | add end;
		# A vCPU'"'"'s state (blocking in a halt, in guest mode) is changed by
		# whoever looks: the kernel readings themselves kick the vCPU out
		# of its halt, and QEMU up to 8.0 reads on the vCPU'"'"'s thread. Such
		# a value must be a state the vCPUs can be in, no more.
		def state($path): $path | test("\\.(blocking|guest_mode)$");
		def check($path; $sv; $bv; $av):
			if $sv == null then {null: [$path]}
			elif state($path) and ($sv | type) == "number" then
				(if $path | startswith("sum.") then ($b.vcpus | length) else 1 end) as $max
				| if $sv >= 0 and $sv <= $max then {ok: 1, nums: 1}
				  else {bad: ["\($path)=\($sv) not a state of \($max) vCPU(s)"], nums: 1} end
			elif ($bv == null) or ($av == null) then {bad: ["\($path)=\($sv) unknown to the kernel"]}
			elif ($sv | type) == "array" then
				if ($sv | length) != ($bv | length) then {bad: ["\($path): \($sv | length) buckets, kernel \($bv | length)"]}
				else [range(0; $sv | length) as $i
					| select($sv[$i] < lo($bv[$i]; $av[$i]) or $sv[$i] > hi($bv[$i]; $av[$i]))
					| "\($path)[\($i)]=\($sv[$i]) not in [\($bv[$i]), \($av[$i])]"]
					| if length > 0 then {bad: ., nums: 1} else {ok: 1, nums: 1} end end
			elif $sv < lo($bv; $av) or $sv > hi($bv; $av) then {bad: ["\($path)=\($sv) not in [\($bv), \($av)]"], nums: 1}
			else {ok: 1, nums: 1} end;
		[($s.vm | to_entries[] | check("vm.\(.key)"; .value; $b.vm[.key]; $a.vm[.key])),
		 ($s.vcpus | to_entries[] | .key as $c | .value | to_entries[]
			| if $c == "-1" and $mode == "sum" then
				check("sum.\(.key)"; .value; sumof($b; .key); sumof($a; .key))
			  else check("vcpu\($c).\(.key)"; .value; $b.vcpus[$c][.key]; $a.vcpus[$c][.key]) end)]
		| {values: (map(.nums // 0) | add), ok: (map(.ok // 0) | add),
		   bad: (map(.bad // []) | add | .[:4]), nulls: (map(.null // []) | add)}'
}

# agree NAME PID CMD...: read PID with CMD between two oracle readings;
# the result (between's) goes to $TMP/NAME.cmp, the reading to
# $TMP/NAME.json. Fails when a value disagrees.
agree() {
	local name=$1 pid=$2 b a s
	shift 2
	b=$(oracle "$pid" | norm)
	"$@" >"$TMP/$name.json" 2>"$TMP/$name.err"
	a=$(oracle "$pid" | norm)
	s=$(norm <"$TMP/$name.json")
	if [ -z "$b" ] || [ -z "$a" ] || [ -z "$s" ]; then
		fail "agree: $name" "no reading: $(head -c 300 "$TMP/$name.err" "$TMP/oracle.err")"
		return 1
	fi
	between "$b" "$s" "$a" "${SUM:-}" >"$TMP/$name.cmp"
	if jq -e '(.bad | length == 0) and .values > 0' "$TMP/$name.cmp" >/dev/null 2>&1; then
		pass "agree: $name: $(jq -r '"\(.ok) of \(.values) values between the kernel readings, \(.nulls | length) null"' "$TMP/$name.cmp")"
	else
		fail "agree: $name" "$(jq -c '.bad' "$TMP/$name.cmp" 2>&1 | head -c 400)"
		return 1
	fi
}

# nulls NAME JQ-FILTER DESC: the stats the source left null satisfy
# FILTER (an expression over the list .nulls of "vm.x"/"vcpuN.x" paths).
nulls_are() {
	jq -e "$2" "$TMP/$1.cmp" >/dev/null && pass "agree: $1: $3" ||
		fail "agree: $1: $3" "null: $(jq -c '.nulls[:8]' "$TMP/$1.cmp")"
}

# Kicks: every attach reading interrupts each vCPU, which ends its halt
# and records it in the halt histograms; a few of them fill those.
kick() { local i; for i in 1 2 3; do oracle "$1" >/dev/null; sleep 0.2; done; }

# debugfs, in a mount namespace of our own if the host has not mounted it.
in_debugfs() {
	unshare -m sh -c 'mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug; exec "$@"' sh "$@"
}

# ---- a QEMU VM ------------------------------------------------------------------
QEMU_MEM=64 QEMU_SMP=2 start_qemu agree 'exits=100' -machine pc,kernel-irqchip=on ||
	{ fail "agree: QEMU starts" "no READY"; exit 0; }
Q=$QEMU_PID
kick "$Q"
hist=$(oracle "$Q" | jq '[.vms[0].vcpus[].stats.halt_wait_hist | add] | add')
[ "${hist:-0}" -ge 2 ] && pass "agree: the halted vCPUs' halt_wait_hist holds $hist halts (kernel's fds)" ||
	fail "agree: the halted vCPUs' halt_wait_hist is filled" "$hist halts: $(head -2 "$TMP/oracle.err")"

agree qemu-qmp "$Q" "$KVMSTATS" dump --pid "$Q" --source qmp --qmp-timeout "$QT" --json
nulls_are qemu-qmp '.nulls | length == 0' "qmp knows every stat (no null)"
# The order of QEMU's lists is learnt from the kernel: through the fds
# QEMU 8.1+ holds, or through attach when allowed; else from the release.
order() { "$KVMSTATS" list --pid "$Q" --source qmp --qmp-timeout "$QT" "$@" --json 2>/dev/null | jq -r '.[0].qmp | "\(.hist_order)/\(.hist_order_from)"'; }
if qemu_holds_stats; then o=$(order); else o="$(order)+$(order --attach)"; fi
case $o in reversed/kernel | reversed/version+reversed/kernel)
	pass "agree: QEMU $(qemu_version)'s histogram order checked against the kernel ($o)" ;;
*) fail "agree: QEMU $(qemu_version)'s histogram order checked against the kernel" "$o" ;;
esac
agree qemu-auto "$Q" "$KVMSTATS" dump --pid "$Q" --qmp-timeout "$QT" --json
nulls_are qemu-auto '.nulls | length == 0' "auto shows every VM and vCPU stat (no null)"
if qemu_holds_stats; then
	check "agree: auto reads QEMU $(qemu_version)'s vCPUs from the fds it holds, its VM stats over QMP" \
		jq -e '.vms[0] | .vcpu_source == "fd" and .vm_source == "qmp" and (.stats | length) > 0' "$TMP/qemu-auto.json"
	agree qemu-fd "$Q" "$KVMSTATS" dump --pid "$Q" --source fd --json
	check "agree: --source fd of QEMU $(qemu_version): its VM stats are none, and it says why" \
		jq -e '.vms[0] | .vm_source == null and (.stats | length) == 0 and (.vm_unavailable | length) > 0' "$TMP/qemu-fd.json"
fi
agree qemu-attach "$Q" "$KVMSTATS" dump --pid "$Q" --attach --json
nulls_are qemu-attach '.nulls | length == 0' "attach has every stat"
if qemu_holds_stats; then
	# The VM's stats through attach: its ioctl runs in a helper thread
	# (QEMU's main thread) and no vCPU is interrupted.
	sig() { "$KVMSTATS" dump --pid "$Q" --source fd --json | jq -c '[.vms[0].vcpus[].stats.signal_exits]'; }
	s0=$(sig)
	"$KVMSTATS" dump --pid "$Q" --attach --json >"$TMP/att2.json" 2>/dev/null
	s1=$(sig)
	[ "$s0" = "$s1" ] && jq -e '.vms[0] | .vm_source == "attach" and .vcpu_source == "fd"' "$TMP/att2.json" >/dev/null &&
		pass "agree: --attach on QEMU $(qemu_version) takes the VM stats alone and kicks no vCPU (signal_exits $s0 = $s1)" ||
		fail "agree: --attach on QEMU $(qemu_version) takes the VM stats alone and kicks no vCPU" \
			"signal_exits $s0 -> $s1; $(jq -c '.vms[0] | {vm_source, vcpu_source}' "$TMP/att2.json")"
fi
SUM=sum agree qemu-debugfs "$Q" in_debugfs "$KVMSTATS" dump --pid "$Q" --source debugfs --json
# debugfs: histograms are never known (null); a file the kernel refuses
# (lockdown: every writable one) is null; instant stats always read.
nulls_are qemu-debugfs '[.nulls[] | select(test("^sum\\.halt_.*_hist$") | not)] as $n
	| ($n | map(select(test("pages_|nx_lpage_splits|blocking|guest_mode"))) | length) == 0' \
	"debugfs: null only for histograms and refused files, never for an instant stat"
check "agree: debugfs: every histogram is null, its bucket 0 apart" \
	jq -e '.vms[0].vcpus[0].stats | (.halt_wait_hist == null) and has("halt_wait_hist_bucket0")' "$TMP/qemu-debugfs.json"

# serve: the le buckets of a QMP-read VM are the kernel's (cumulative).
rm -f "$TMP/serve.ready"
"$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/serve.ready" --pid "$Q" --source qmp \
	--qmp-timeout "$QT" 2>"$TMP/serve.err" &
track $!
if wait_file "$TMP/serve.ready" "$(slow 20)"; then
	# A scrape serves the last poll and asks for a new one: the second
	# scrape serves a poll taken after the first kernel reading.
	b=$(oracle "$Q" | norm)
	curl -s "http://$(cat "$TMP/serve.ready")/metrics" >/dev/null
	sleep 0.5
	curl -s "http://$(cat "$TMP/serve.ready")/metrics" >"$TMP/m.txt"
	a=$(oracle "$Q" | norm)
	# {"vcpu": [cumulative count per le, in le order]} from the exporter.
	prom=$(grep "^kvm_vcpu_halt_wait_hist_seconds_bucket{pid=\"$Q\"" "$TMP/m.txt" |
		sed -E 's/.*vcpu="([0-9]+)".*le="([^"]+)"\} ([0-9]+).*/\1 \2 \3/' |
		jq -R -s -c 'split("\n") | map(select(length > 0) | split(" ")) | group_by(.[0])
			| map({key: .[0][0], value: map(.[2] | tonumber)}) | from_entries')
	out=$(jq -n -r --argjson b "$b" --argjson a "$a" --argjson p "${prom:-null}" '
		def cum: reduce .[] as $x ([]; . + [(.[-1] // 0) + $x]);
		if $p == null or ($p | length) == 0 then "no kvm_vcpu_halt_wait_hist_seconds_bucket"
		else [$p | to_entries[] | .key as $c | .value as $s
			| ($b.vcpus[$c].halt_wait_hist | cum) as $B | ($a.vcpus[$c].halt_wait_hist | cum) as $A
			| if ($s | length) != ($B | length) then "vcpu\($c): \($s | length) buckets, kernel \($B | length)"
			  else range(0; $s | length) as $i | select($s[$i] < $B[$i] or $s[$i] > $A[$i])
				| "vcpu\($c) bucket \($i): \($s[$i]) not in [\($B[$i]), \($A[$i])]" end]
		  | .[:4] | join("; ") end')
	nb=$(jq -n --argjson p "${prom:-null}" '[$p[]? | length] | add // 0')
	[ -z "$out" ] && [ "$nb" -gt 0 ] &&
		pass "agree: serve's le buckets of kvm_vcpu_halt_wait_hist_seconds (QMP) are the kernel's ($nb buckets)" ||
		fail "agree: serve's le buckets of kvm_vcpu_halt_wait_hist_seconds (QMP) are the kernel's" "${out:-no bucket} $(head -2 "$TMP/serve.err")"
	qemu_holds_stats &&
		check "agree: serve exports kvm_vm_pages_4k of QEMU $(qemu_version) (VM stats over QMP)" \
			grep -q "^kvm_vm_pages_4k{pid=\"$Q\"" "$TMP/m.txt"
else
	fail "agree: serve starts" "$(head -3 "$TMP/serve.err")"
fi

# ---- a libvirt domain --------------------------------------------------------
LV_OK=1
for c in libvirtd virtlogd virsh; do command -v $c >/dev/null || LV_OK=0; done
pkg-config --exists libvirt || LV_OK=0
if [ $LV_OK = 0 ]; then
	skip "agree: libvirt domain" "libvirt or libvirt-dev is not installed (scripts/deps.sh test)"
elif ! libvirt_start; then
	fail "agree: libvirtd starts" "$(tail -2 "$LV/libvirtd.log")"
elif ! libvirt_domain agree-lv 2 'exits=100'; then
	fail "agree: a libvirt domain starts" "$(tail -2 "$LV/create.log"; tail -5 "$LV/libvirtd.log")"
else
	D=$DOM_PID
	kick "$D"
	agree lv-libvirt "$D" "${LV_NS[@]}" "$KVMSTATS" dump --pid "$D" --source libvirt --qmp-timeout "$QT" --json
	check "agree: lv-libvirt: no histogram is given a number (libvirt relays none)" \
		jq -e '[.vms[0].vcpus[].stats | to_entries[] | select((.key | endswith("_hist")) and .value != null)] | length == 0' \
		"$TMP/lv-libvirt.json"
	agree lv-auto "$D" "${LV_NS[@]}" "$KVMSTATS" dump --pid "$D" --qmp-timeout "$QT" --json
	check "agree: auto shows the domain's VM stats ($(jq -r '.vms[0] | "\(.vm_source)/\(.vcpu_source)"' "$TMP/lv-auto.json" 2>/dev/null))" \
		jq -e '.vms[0] | .vm_source != null and (.stats | length) > 0' "$TMP/lv-auto.json"
	SUM=sum agree lv-debugfs "$D" in_debugfs "$KVMSTATS" dump --pid "$D" --source debugfs --json
	"${LV_NS[@]}" "$KVMSTATS" dump --pid "$D" --source qmp --json >"$TMP/lv-qmp.json" 2>"$TMP/lv-qmp.err"
	[ $? = 1 ] && [ "$(jq '.vms | length' "$TMP/lv-qmp.json")" = 0 ] &&
		pass "agree: qmp cannot serve the domain (libvirt holds its monitor) and says so: $(head -c 200 "$TMP/lv-qmp.err")" ||
		fail "agree: qmp cannot serve the domain and says so" "$(head -c 300 "$TMP/lv-qmp.err")"
fi
