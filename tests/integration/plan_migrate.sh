#!/bin/bash
# kvmstats plan against real migrations to a second QEMU, per migration
# setting: our multiboot guest (256 MiB, a known content) is booted once
# per content and migrated on from QEMU to QEMU (booting is what is slow
# here). Each case sets max-bandwidth 32 MiB/s, downtime-limit 300 ms and
# its capabilities and parameters on the running VM (as an operator or
# libvirt would), runs `plan --method scan --interval 0 --json` (which
# reads them over QMP), then migrates over loopback TCP to a destination
# QEMU started with `-incoming defer` and the same settings, on the other
# half of the CPUs (as on two hosts: see cpu_halves), and compares with
# what QEMU's query-migrate reports at completion:
#  - legacy pre-copy, a compressible guest;
#  - multifd, 4 channels;
#  - multifd + zstd, a compressible guest (one word per page);
#  - multifd + zstd, random (incompressible) data and compressible data;
#  - multifd + zlib, the same mixed data (zlib's deflate is several times
#    slower than zstd on what does not compress: its CPU time counts);
#  - multifd + zstd asked for by the option (--parallel 4 --compressed
#    zstd) on a VM set for legacy, and the settings' sources in the JSON.
# Asserts: predicted bytes within 10% (20% with compression) and time
# within 15% (25% with compression) of QEMU's transferred and total-time
# (below a second of real time, within 0.5 s: see within_time); in the
# lab a rate-limited time from below only, the others printed (see
# run_case).
# Prints the table of predicted against real.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu
# shellcheck disable=SC2154 # launch sets PID_<name> (eval)
source "$(dirname "$0")/../lib.sh"

require_kvm plan_migrate
need_tools plan_migrate "$QEMU" socat jq || exit 0
if [ ! -x "$KVMSTATS" ] || [ ! -f "$MBGUEST" ]; then
	fail plan_migrate "build/kvmstats or build/mbguest.elf missing: run make build"
	exit 0
fi
VER=$(qemu_version)

# migrate SRC DST: SRC to DST (started with -incoming defer) over loopback
# TCP; prints "transferred total-time-ms" once it completed.
migrate() {
	local r st port=$((20000 + RANDOM % 20000))
	r=$(q "$2" "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"tcp:127.0.0.1:$port\"}}")
	case $r in *'"return"'*) ;; *) echo "# $2: migrate-incoming: $r" >&2; return 1 ;; esac
	q "$1" "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"tcp:127.0.0.1:$port\"}}" >/dev/null
	for _ in $(seq $((600 * $(slow 1)))); do
		r=$(q "$1" '{"execute":"query-migrate"}')
		st=$(jq -r '.return.status // empty' <<<"$r" 2>/dev/null)
		if [ "$st" = completed ]; then
			jq -r '.return | "\(.ram.transferred) \(.["total-time"]) \(.ram.normal) \(.ram.duplicate)"' <<<"$r"
			return 0
		fi
		if [ "$st" = failed ]; then
			echo "# migration failed: $r" >&2
			break
		fi
		sleep 0.1
	done
	return 1
}

TABLE=""
BW=$((32 << 20))

# boot CHAIN GUEST [QEMU ARGS...]: start the first VM of a chain of
# migrations (booting is the slow part here: each case migrates the
# chain's running VM to a fresh destination, which runs it next).
boot() {
	local chain=$1
	QEMU_CPUS=$CPUS_A QEMU_MEM=256 launch_qemu "$chain.0" "$2" "${@:3}"
	eval "VM_$chain=$chain.0 PID_$chain=$QEMU_PID GUEST_$chain=\$2 CPUS_$chain=\$CPUS_A"
	eval "ARGS_$chain=\"\${*:3}\""
}

# The source QEMU runs on one half of the CPUs this test may use, its
# destination on the other, as on two hosts: the destination's work
# (decompression above all) takes nothing from the source's channels,
# and the plan reads the source's CPUs from its affinity. CPUS_A, CPUS_B:
# the halves as taskset -c lists (both empty on a single CPU).
cpu_halves() {
	local list c n lo hi all=()
	list=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
	for c in ${list//,/ }; do
		lo=${c%-*} hi=${c#*-}
		for n in $(seq "$lo" "$hi"); do all+=("$n"); done
	done
	CPUS_A="" CPUS_B=""
	[ ${#all[@]} -ge 2 ] || return 0
	lo=$((${#all[@]} / 2))
	CPUS_A=$(IFS=,; echo "${all[*]:0:$lo}")
	CPUS_B=$(IFS=,; echo "${all[*]:$lo}")
}
cpu_halves
echo "# sources on CPUs ${CPUS_A:-any}, destinations on ${CPUS_B:-any}"

# other_half LIST: the half a destination of a source on LIST runs on.
other_half() { if [ "$1" = "$CPUS_A" ]; then echo "$CPUS_B"; else echo "$CPUS_A"; fi; }

# within_time PRED REAL PCT: within PCT%, or within 0.5 s below a second
# of real time, where QEMU's own fixed costs (setup, an extra dirty
# bitmap sync, the switch-over) varied 53-530 ms between identical runs
# of a compressed migration on this host.
within_time() {
	within "$1" "$2" "$3" || awk -v a="$1" -v b="$2" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(b < 1 && d <= 0.5)}'
}

# migrate_case CHAIN NAME CAPS PARAMS [PLAN OPTIONS...]: set the case's
# capabilities and parameters on the chain's VM, plan it, migrate it to a
# new destination with the same settings; R_PRED, R_PSEC (predicted bytes,
# seconds), R_XFER, R_SEC (QEMU's).
migrate_case() {
	local chain=$1 name=$2 caps=$3 params=$4
	local out pred psec xfer ms normal dup sec src dst ps pd guest args cpus
	shift 4
	eval "src=\$VM_$chain ps=\$PID_$chain guest=\$GUEST_$chain args=\$ARGS_$chain cpus=\$CPUS_$chain"
	params=$(jq -c --argjson bw "$BW" '. + {"max-bandwidth": $bw, "downtime-limit": 300}' <<<"$params")
	dst=$name
	cpus=$(other_half "$cpus")
	# shellcheck disable=SC2086 # word splitting wanted
	QEMU_CPUS=$cpus QEMU_MEM=256 launch_qemu "$dst" "$guest" $args -incoming defer
	pd=$QEMU_PID
	if ! wait_qmp "$dst"; then
		fail "$name: the destination QEMU did not start"
		return 1
	fi
	# With plan options, the VM is planned as it stands (legacy, only
	# the bandwidth and downtime set) and the options say the rest.
	if [ $# -gt 0 ]; then
		migration_settings "$src" '[{"capability":"multifd","state":false}]' \
			"$(jq -c '{"max-bandwidth", "downtime-limit", "multifd-compression": "none"}' <<<"$params")" &&
			out=$("$KVMSTATS" plan --pid "$ps" --method scan --interval 0 --json "$@" 2>"$TMP/$name.err")
	fi
	if ! migration_settings "$src" "$caps" "$params" || ! migration_settings "$dst" "$caps" "$params"; then
		fail "$name: QEMU $VER refused the settings"
		return 1
	fi
	[ $# -gt 0 ] ||
		out=$("$KVMSTATS" plan --pid "$ps" --method scan --interval 0 --json 2>"$TMP/$name.err")
	echo "$out" >"$TMP/$name.json"
	pred=$(jq '.vms[0].predicted_transfer_bytes // 0' <<<"$out")
	psec=$(jq '.vms[0].predicted_seconds // 0' <<<"$out")
	read -r xfer ms normal dup < <(migrate "$src" "$dst")
	kill "$ps" 2>/dev/null
	eval "VM_$chain=$dst PID_$chain=$pd CPUS_$chain=\$cpus"
	if [ -z "$xfer" ]; then
		fail "$name: the migration did not complete"
		return 1
	fi
	sec=$(awk -v m="$ms" 'BEGIN{printf "%.3f", m / 1000}')
	echo "# $name: plan: $(jq -c '.vms[0].prediction | {mechanism, qemu_version,
		wire_bytes, effective_bandwidth_bytes_per_second, compression, zero_test, source_cpus,
		settings: (.settings | with_entries(select(.value.source != "default")))}' <<<"$out")"
	TABLE="$TABLE$(printf '# %-22s %12s %12s %8.2f %8.2f  normal=%s duplicate=%s' \
		"$name" "$pred" "$xfer" "$psec" "$sec" "$normal" "$dup")
"
	R_PRED=$pred R_PSEC=$psec R_XFER=$xfer R_SEC=$sec
	LAST_JSON=$TMP/$name.json
}

# not_shorter PRED REAL PCT: QEMU's time is not below the prediction by
# more than PCT% (or 0.5 s below a second, as within_time).
not_shorter() {
	awk -v a="$1" -v b="$2" -v p="$3" 'BEGIN{exit !(b >= a * (1 - p / 100) || (b < 1 && a - b <= 0.5))}'
}

# run_case CHAIN NAME CAPS PARAMS BYTES% TIME% [PLAN OPTIONS...]: one case
# and its checks. The time depends on the host's load (other jobs share
# its CPUs: QEMU's migration thread was seen to take 3.9 s where it
# usually takes 3.1-3.4): a time out of bounds is measured once more, on
# the next migration of the same VM with the same settings.
# In the lab (nested QEMU, one emulated CPU per half, beside other labs)
# the pace of QEMU's migration is not the test's. Every migration paced
# by max-bandwidth in the labs of the CI runs on record was slower than
# predicted: legacy by 6-45% (4.41 s for 3.05 on sid, twice), multifd by
# 9-55% (its channels share one CPU with the migration thread and send
# at the limit, not over it as on a host). Such a time is held from
# below only there: a plan that says longer than a rate-limited QEMU
# then took is the plan's error on any machine. TIME% "host:N": a time
# paced by the CPU (the zero test, compression) is held on a host's KVM
# only, and printed in the lab, where it went both ways: zstd's and
# zlib's up to 2.8x the prediction beside other labs, zstd's at half of
# it in a lab alone (QEMU 11.1's channels walked the zeros twice as fast
# as the plan's scan did there). The bytes are held alike everywhere.
run_case() {
	local chain=$1 name=$2 caps=$3 params=$4 pb=$5 pt=$6
	shift 6
	migrate_case "$chain" "$name" "$caps" "$params" "$@" || return
	check "$name: predicted bytes $R_PRED within $pb% of QEMU's $R_XFER" \
		within "$R_PRED" "$R_XFER" "$pb"
	if [ "$SLOW" -gt 1 ]; then
		echo "# $name: ${R_PSEC}s predicted, QEMU took ${R_SEC}s in the lab"
		[ "${pt#host:}" = "$pt" ] &&
			check "$name: QEMU's ${R_SEC}s not below the predicted ${R_PSEC}s by more than $pt%" \
				not_shorter "$R_PSEC" "$R_SEC" "$pt"
		return
	fi
	pt=${pt#host:}
	if ! within_time "$R_PSEC" "$R_SEC" "$pt"; then
		echo "# $name: ${R_PSEC}s predicted, QEMU took ${R_SEC}s: once more"
		migrate_case "$chain" "$name-again" "$caps" "$params" "$@" || return
	fi
	check "$name: predicted time ${R_PSEC}s within $pt% of QEMU's ${R_SEC}s" \
		within_time "$R_PSEC" "$R_SEC" "$pt"
}

# wait_qmp NAME: the destination's QMP socket answers.
wait_qmp() {
	wait_until 300 test -S "$TMP/$1.qmp" &&
		[ -n "$(q "$1" '{"execute":"query-status"}')" ]
}

# Compressible: one word per page (96 MiB). Mixed: 32 MiB of that, and
# 48 MiB of random bytes QEMU's generic loader puts at 64 MiB (the guest
# never touches them; filling them from the guest is slow where KVM
# emulates it). The two chains boot together.
head -c $((48 << 20)) /dev/urandom >"$TMP/random.bin"
boot comp 'nonzero=96M stride=4K'
boot mixed 'nonzero=32M stride=4K' -device "loader,file=$TMP/random.bin,addr=0x4000000,force-raw=on"
boot zero 'nonzero=8M zero=200M stride=4K'
if ! wait_ready comp.0 "$PID_comp" 120 || ! wait_ready mixed.0 "$PID_mixed" 120 ||
	! wait_ready zero.0 "$PID_zero" 120; then
	fail "plan_migrate: the VMs did not boot"
	exit 0
fi
MULTIFD='[{"capability":"multifd","state":true}]'
LEGACY='[{"capability":"multifd","state":false}]'
run_case comp legacy "$LEGACY" '{"multifd-compression":"none"}' 10 15
[ -n "$CPUS_A" ] && check "the plan gives the source's threads the CPUs it is pinned to ($CPUS_A)" \
	jq -e --argjson n "$(tr ',' '\n' <<<"$CPUS_A" | wc -l)" \
	'.vms[0].prediction.source_cpus | {count, source} == {"count": $n, "source": "affinity"}' "$LAST_JSON"
run_case comp multifd4 "$MULTIFD" '{"multifd-channels":4,"multifd-compression":"none"}' 10 15
run_case comp multifd4-zstd "$MULTIFD" '{"multifd-channels":4,"multifd-compression":"zstd"}' 20 host:25
run_case mixed multifd4-zstd-mixed "$MULTIFD" \
	'{"multifd-channels":4,"multifd-compression":"zstd"}' 20 host:25
run_case mixed multifd4-zlib-mixed "$MULTIFD" \
	'{"multifd-channels":4,"multifd-compression":"zlib"}' 20 host:25
# The options say how the migration will run, over QEMU's (legacy) settings.
run_case comp options-zstd "$MULTIFD" '{"multifd-channels":4,"multifd-compression":"zstd"}' \
	20 host:25 --parallel 4 --compressed zstd

check "options-zstd: the JSON says each setting's source (multifd from the option, bandwidth from QEMU)" \
	jq -e '.vms[0].prediction | .mechanism == "multifd+zstd" and
	.settings.multifd.source == "option" and .settings["multifd-channels"].value == "4" and
	.settings["multifd-compression"].source == "option" and
	.settings["max-bandwidth"].source == "qmp" and
	.settings["max-bandwidth"].value == "33554432" and
	.settings["downtime-limit"].value == "300" and .compression.ratio < 0.1' "$LAST_JSON"

# QEMU's zero test: 8 MiB of data and 200 MiB of zeros at 1 GiB/s are
# paced by QEMU's walk of the pages, not by the link. Where that walk
# (as the plan's scan timed it) is long enough to tell from QEMU's fixed
# costs, half a second (the lab), the plan's time must be nearer QEMU's
# than the bytes at the bandwidth are, as a ratio: both are paces, and
# the lab's went both ways (QEMU 0.95-1.21 s for 0.80-0.86 predicted
# beside other labs, 0.43 and 0.55 s for 0.88 and 1.22 in a lab alone,
# sid); on a KVM host it takes milliseconds and only its presence is
# checked. An ASan CLI's scan is
# slower than QEMU's walk: it does not model it, and says so.
BW_SET=$BW BW=$((1 << 30))
migrate_case zero zero-walk "$LEGACY" '{"multifd-compression":"none"}' && walked=1 || walked=0
BW=$BW_SET
if [ "$KVMSTATS" = "$ROOT/build-san/kvmstats" ]; then
	[ "$walked" = 1 ] && check "zero-walk: an ASan CLI does not model QEMU's zero test" \
		jq -e '.vms[0].prediction | has("zero_test") and .zero_test == null' "$TMP/zero-walk.json"
	walked=0
fi
[ "$walked" = 1 ] && check "zero-walk: the plan times QEMU's zero test (prediction.zero_test)" \
	jq -e '.vms[0].prediction.zero_test.bytes_per_second > 0 and
	.vms[0].prediction.zero_test.first_pass_seconds > 0' "$TMP/zero-walk.json"
walk=$(jq '.vms[0].prediction.zero_test.first_pass_seconds // 0' "$TMP/zero-walk.json")
naive=$(awk -v b="${R_PRED:-0}" 'BEGIN { printf "%.3f", b / 1073741824 + 0.07 }')
if [ "$walked" = 0 ]; then
	:	# migrate_case said why
elif awk -v w="$walk" 'BEGIN { exit !(w >= 0.5) }'; then
	check "zero-walk: predicted ${R_PSEC}s nearer QEMU's ${R_SEC}s than the bytes at the bandwidth (${naive}s), as a ratio" \
		awk -v p="$R_PSEC" -v r="$R_SEC" -v n="$naive" \
		'BEGIN { d = log(p / r); e = log(n / r); exit !(r > 0 && n > 0 && d * d < e * e) }'
else
	echo "# zero-walk: QEMU's walk takes ${walk}s here, within its fixed costs: the time is not checked"
fi

# Post-copy is modelled (a clean guest stops after the first pass, no
# switch needed); -v gives the verdict and lists every setting and its
# source.
"$KVMSTATS" plan --pid "$PID_comp" --method pagemap --interval 0 --auto-converge \
	--postcopy --postcopy-bandwidth 1G -v >"$TMP/table" 2>&1
check "postcopy asked for: -v gives the verdict, postcopy-ram is not said unmodelled" \
	eval 'grep -q "^  verdict: converges after 0 dirty-rate interval" "$TMP/table" &&
	grep -Eq "^ +postcopy-ram +true +\(option\)" "$TMP/table" &&
	! grep -q "not modelled: .*postcopy" "$TMP/table"'
"$KVMSTATS" plan --pid "$PID_comp" --method pagemap --interval 0 --postcopy --json \
	>"$TMP/pc.json" 2>&1
check "postcopy, a clean guest: converges without a switch, intervals ordered" \
	jq -e '.vms[0] | .converges == true and .prediction.verdict == "converges" and
	.prediction.postcopy == false and .prediction.dirty_samples == 0 and
	.predicted_seconds_interval[0] <= .predicted_seconds and
	.predicted_seconds <= .predicted_seconds_interval[1] and
	.predicted_transfer_bytes_interval[0] <= .predicted_transfer_bytes and
	.predicted_transfer_bytes <= .predicted_transfer_bytes_interval[1]' "$TMP/pc.json"
check "auto-converge asked for: -v says the throttle the guest would suffer" \
	grep -q "auto-converge: the guest's vCPUs throttled up to" "$TMP/table"
check "-v lists each setting with its source" \
	grep -Eq "^ +auto-converge +true +\(option\)" "$TMP/table"
check "-v: --postcopy-bandwidth over QEMU's unlimited" \
	grep -Eq "^ +max-postcopy-bandwidth +1073741824 +\(option\)" "$TMP/table"
check "-v: multifd-channels read from QEMU" \
	grep -Eq "^ +multifd-channels +4 +\(qmp\)" "$TMP/table"
check "a bad --compressed is a usage error" test "$("$KVMSTATS" plan --compressed lz4 \
	--pid "$PID_comp" >/dev/null 2>&1; echo $?)" = 2
check "a bad --postcopy-bandwidth is a usage error" test "$("$KVMSTATS" plan \
	--postcopy-bandwidth fast --pid "$PID_comp" >/dev/null 2>&1; echo $?)" = 2

echo "# QEMU $VER, max-bandwidth 32 MiB/s, downtime-limit 300 ms, 256 MiB guests"
echo "# case                    predicted B   QEMU sent B  pred s   QEMU s"
printf '%s' "$TABLE"
