#!/bin/bash
# kvmstats plan against real migrations of a real Linux guest (issue 20,
# point 4's last sentence): Debian's kernel (the lab's own, or the
# host's) with an initramfs of busybox and tests/guest/memload, whose
# /init fills a working set and rewrites it at a fixed page rate, page
# after page. Three guests boot together (booting is the slow part), each
# with its own rate:
#  - quiet: a 16 MiB working set written once, then left alone;
#  - below: 16 MiB rewritten at an eighth of max-bandwidth in pages/s;
#  - above: 64 MiB rewritten at twice max-bandwidth in pages/s: it never
#    fits bandwidth x downtime-limit, so legacy pre-copy must not
#    converge. Its working set is large so that it stays so through a
#    pause of the guest: QEMU completes only if the guest writes less
#    than bandwidth x downtime-limit in one round of pre-copy, which
#    sends the working set in (64 MiB - 2.4 MiB) / 8 MiB/s = 7.7 s in
#    the lab: a pause of 7.5 s. With 16 MiB a round took 1.7 s, and a
#    1.55 s pause would do; QEMU completed that case twice in seven lab
#    runs (not traced: memload now reports its longest pause, and the
#    test prints it).
# Each VM gets max-bandwidth (8 MiB/s in the lab, where a nested
# migration is bandwidth-limited at that rate; 32 MiB/s on a host's KVM)
# and downtime-limit 300 ms over QMP, legacy pre-copy, is planned as an
# operator would (`plan --pid P --method scan --interval 2 --json`, and
# once more with --interval 0: its time at no dirtying, T0), then
# migrated over loopback TCP to a destination QEMU with the same command
# line and settings, started with -incoming defer. A migration still
# running after twice max(T0, predicted) + 10 s (one called
# "does-not-converge": 3 x T0 + 10 s; twice that again under emulation)
# is cancelled. Asserts issue 20's "Done when":
#  - completed: predicted bytes within 10% of QEMU's ram.transferred,
#    time within 15% of its total-time (below a second, 0.5 s);
#  - "converges": QEMU completed within 2x the predicted time;
#  - "does-not-converge": QEMU did not complete within the bound.
# In the lab it needs nested paging (tests/lab/kvmlab --npt 1): on
# shadow paging the nested Linux is reset as it boots.
# The kernel is $KVMSTATS_LINUX_KERNEL, else the lab's ($KVMLAB_KERNEL,
# set by tests/lab/kvmlab), else this host's /boot/vmlinuz-$(uname -r);
# busybox is $KVMSTATS_BUSYBOX, else the lab's, else busybox-static's.
# SPDX-License-Identifier: GPL-2.0-or-later
# acceptance: its bounds are QEMU's migration times, which hold on a
# machine to itself: alone, the lab's runs hold every bound (times within
# 2.2%, the latest 7 of 7); beside another lab, below took 25% longer
# than predicted (docs/plan.md).
# kvmstats-test: needs=kvm qemu acceptance
source "$(dirname "$0")/../lib.sh"

require_kvm plan_linux
need_tools plan_linux "$QEMU" socat jq gzip || exit 0
MEMLOAD=$ROOT/build/memload
if [ ! -x "$KVMSTATS" ] || [ ! -x "$MEMLOAD" ]; then
	fail plan_linux "build/kvmstats or build/memload missing: run make test-build"
	exit 0
fi
KERNEL=${KVMSTATS_LINUX_KERNEL:-${KVMLAB_KERNEL:-/boot/vmlinuz-$(uname -r)}}
BUSYBOX=${KVMSTATS_BUSYBOX:-${KVMLAB_BUSYBOX:-/bin/busybox}}
if [ ! -r "$KERNEL" ]; then
	skip plan_linux "no Linux kernel to boot ($KERNEL): set KVMSTATS_LINUX_KERNEL"
	exit 0
fi
# A dynamic busybox would not run in an initramfs without its libraries.
if [ ! -x "$BUSYBOX" ] || LC_ALL=C readelf -l "$BUSYBOX" 2>/dev/null | grep -q 'interpreter'; then
	skip plan_linux "no static busybox ($BUSYBOX): install busybox-static or set KVMSTATS_BUSYBOX"
	exit 0
fi
VER=$(qemu_version)

MEM=256 WS=16 WS_ABOVE=64 DOWNTIME=300 INTERVAL=2
if [ "$SLOW" -gt 1 ]; then
	BW=$((8 << 20))
else
	BW=$((32 << 20))
fi
R_BELOW=$((BW / 8 / 4096))
R_ABOVE=$((BW * 2 / 4096))

# The initramfs: busybox and memload; /init puts devtmpfs on /dev (an
# external initramfs gets no /dev/console) and runs the workload with
# the rate the kernel hands it (an unknown name=value on its command line
# is an environment variable of init).
mkdir -p "$TMP/initramfs/bin" "$TMP/initramfs/dev"
cp "$BUSYBOX" "$TMP/initramfs/bin/busybox"
cp "$MEMLOAD" "$TMP/initramfs/bin/memload"
cat >"$TMP/initramfs/init" <<-'INIT'
	#!/bin/busybox sh
	/bin/busybox mount -t devtmpfs devtmpfs /dev
	exec /bin/memload "$memload_ws" "$memload_rate" >/dev/ttyS0 2>&1
INIT
chmod 755 "$TMP/initramfs/init"
if ! (cd "$TMP/initramfs" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1) \
	>"$TMP/initrd.gz"; then
	fail plan_linux "cannot make the guest's initramfs"
	exit 0
fi

# launch_linux NAME RATE WS [QEMU ARGS...]: a Linux guest running memload
# at RATE pages/s over WS MiB (launch_qemu's files: $TMP/NAME.qmp,
# .serial, .log).
launch_linux() {
	local name=$1 rate=$2 ws=$3
	shift 3
	"$QEMU" -enable-kvm -m "$MEM" -smp 1 -display none -nodefaults \
		-no-user-config -no-reboot -name "guest=$name" \
		-serial "file:$TMP/$name.serial" -qmp "unix:$TMP/$name.qmp,server=on,wait=off" \
		-kernel "$KERNEL" -initrd "$TMP/initrd.gz" \
		-append "console=ttyS0 quiet panic=-1 memload_ws=$ws memload_rate=$rate" \
		"$@" 2>>"$TMP/$name.log" &
	QEMU_PID=$!
	track "$QEMU_PID"
}

# wait_memload NAME PID SECONDS: memload's ready line on the guest's
# serial port while its QEMU lives.
wait_memload() {
	for _ in $(seq $(($3 * 10))); do
		grep -q "^memload: ready" "$TMP/$1.serial" 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || break
		sleep 0.1
	done
	echo "# $1: no ready line from memload in $3 s; its console ends:"
	tail -5 "$TMP/$1.serial" 2>/dev/null | sed 's/^/#   /'
	sed 's/^/#   qemu: /' "$TMP/$1.log" 2>/dev/null | tail -5
	# Seen in the lab: on kvm_amd's shadow paging the guest is reset (a
	# triple fault; -no-reboot ends QEMU, silent) as its kernel leaves
	# real mode, right after "Probing EDD"; on nested paging it boots.
	if ! kill -0 "$2" 2>/dev/null &&
		[ "$(cat /sys/module/kvm_amd/parameters/npt 2>/dev/null)" = N ]; then
		echo "# QEMU ended: Linux does not boot nested on kvm_amd npt=0 here (the lab: --npt 1)"
	fi
	return 1
}

# wait_dirtying NAME PID: a new progress line of memload (it prints one
# every second), while its QEMU lives. Once in the lab a guest's memload
# printed its ready line and then none (the guest dirtied nothing: its
# sleep never ended, as timers have been seen to stop under emulation),
# which would have made the case a quiet one.
wait_dirtying() {
	local n
	n=$(grep -c "^memload: dirtied" "$TMP/$1.serial")
	for _ in $(seq 120); do
		[ "$(grep -c "^memload: dirtied" "$TMP/$1.serial")" -gt "$n" ] && return 0
		kill -0 "$2" 2>/dev/null || break
		sleep 0.1
	done
	echo "# $1: memload printed no progress in 12 s; the guest's console ends:"
	tail -5 "$TMP/$1.serial" | sed 's/^/#   /'
	return 1
}

CAPS='[{"capability":"multifd","state":false},{"capability":"auto-converge","state":false},{"capability":"postcopy-ram","state":false}]'
PARAMS="{\"max-bandwidth\":$BW,\"downtime-limit\":$DOWNTIME}"
TABLE=""

# guest_stall NAME FROM SECONDS: the longest the guest wrote nothing in
# the SECONDS after its FROM-th progress line: the longest pause memload
# reported in the lines since, or, where it printed fewer lines than
# one a second, at least the time they leave out (a guest that does not
# run prints nothing).
guest_stall() {
	grep "^memload: dirtied" "$TMP/$1.serial" | tail -n +"$(($2 + 1))" |
		awk -v s="$3" '/longest pause/ && $(NF - 1) > m { m = $(NF - 1) }
			{ n++ } END { h = s - (n + 1); printf "%.3f", (h > m ? h : m) }'
}

# critical_pause WS_MIB RATE: how long the guest must write nothing within
# a round of pre-copy (which sends its working set but what fits the
# downtime) for that round to leave under bandwidth x downtime-limit
# dirty, and QEMU to complete a migration called "does-not-converge".
critical_pause() {
	awk -v ws="$(($1 << 8))" -v r="$2" -v bw="$((BW / 4096))" -v d="$DOWNTIME" \
		'BEGIN { thr = bw * d / 1000; printf "%.2f", (ws - thr) / bw - thr / r }'
}

# linux_case NAME PID RATE WS: plan the running VM NAME, migrate it to a
# fresh destination with the same settings, check the prediction.
linux_case() {
	local name=$1 ps=$2 rate=$3 ws=$4 dst=$1.dst pd t0 pred psec verd bound xfer ms sec real
	local lines start stall crit
	if [ "$rate" -gt 0 ] && ! wait_dirtying "$name" "$ps"; then
		# (a guest that dirtied before and stopped is the nested guest
		# stalled, as seen in the lab: its case cannot run; one that never
		# did is memload broken)
		if grep -q "^memload: dirtied" "$TMP/$name.serial"; then
			skip "$name" "the guest stopped dirtying before its case (a stall of the nested guest)"
		else
			fail "$name: the guest does not dirty its memory"
		fi
		return 1
	fi
	if ! migration_settings "$name" "$CAPS" "$PARAMS"; then
		fail "$name: QEMU $VER refused the settings"
		return 1
	fi
	"$KVMSTATS" plan --pid "$ps" --method scan --interval "$INTERVAL" --json \
		>"$TMP/$name.json" 2>"$TMP/$name.err"
	t0=$("$KVMSTATS" plan --pid "$ps" --method scan --interval 0 --json 2>/dev/null |
		jq '.vms[0].predicted_seconds // empty')
	pred=$(jq '.vms[0].predicted_transfer_bytes' "$TMP/$name.json" 2>/dev/null)
	psec=$(jq '.vms[0].predicted_seconds' "$TMP/$name.json" 2>/dev/null)
	verd=$(plan_verdict "$TMP/$name.json" 2>/dev/null)
	if [ -z "$t0" ] || [ -z "$verd" ] || [ -z "$pred" ]; then
		fail "$name: no plan" "$(head -c 300 "$TMP/$name.err")"
		return 1
	fi
	# (one called "does-not-converge" has no predicted time: it is
	# watched as long as three of its quiet migrations, as in
	# plan_matrix.sh)
	bound=$(awk -v t="$t0" -v p="$psec" -v v="$verd" -v k="$SLOW" 'BEGIN{
		if (v == "does-not-converge") b = 3 * t + 10
		else { m = t; if (p != "null" && p > m) m = p; b = 2 * m + 10 }
		if (k > 1) b *= 2; printf "%.1f", b}')

	launch_linux "$dst" "$rate" "$ws" -incoming defer
	pd=$QEMU_PID
	if ! wait_qmp "$dst" || ! migration_settings "$dst" "$CAPS" "$PARAMS"; then
		fail "$name: the destination QEMU did not start"
		return 1
	fi
	lines=$(grep -c "^memload: dirtied" "$TMP/$name.serial")
	start=$(date +%s.%N)
	read -r xfer ms _ < <(migrate_bounded "$name" "$dst" "$bound" 0)
	stall=$(guest_stall "$name" "$lines" "$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN { print n - s }')")
	if [ -n "$xfer" ]; then
		sec=$(awk -v m="$ms" 'BEGIN{printf "%.3f", m / 1000}')
		real=completed
	else
		xfer=- sec=- real="cancelled after ${bound}s"
	fi
	kill "$ps" "$pd" 2>/dev/null
	echo "# $name: plan: $(jq -c '.vms[0] | {verdict: (.prediction.verdict // .converges),
		dirty_pages_per_second, passes: .prediction.passes,
		bandwidth: .prediction.bandwidth_bytes_per_second,
		plan_seconds: .elapsed_seconds,
		interval: .prediction.predicted_seconds_interval}' "$TMP/$name.json"), T0 ${t0}s"
	[ "$rate" -gt 0 ] &&
		echo "# $name: while it migrated, the guest wrote nothing for at most $stall s at a time"
	# (a figure the plan does not give, null, is "-")
	TABLE="$TABLE$(printf '# %-6s %-17s %7s %12s %12s %7s %7s  %s' "$name" "$verd" \
		"$(jq -r '.vms[0].dirty_pages_per_second // "-" |
			if type == "number" then round else . end' "$TMP/$name.json")" \
		"$(num_or_dash %s "$pred")" "$xfer" "$(num_or_dash %.2f "$psec")" "$sec" "$real")
"
	crit=$(critical_pause "$ws" "$rate")
	# A guest that stops writing lets any migration complete: then the
	# case did not test the verdict (the guest's stall, not the model's).
	if [ "$verd" = does-not-converge ] && [ "$xfer" != - ] && [ "$rate" -gt 0 ] &&
		awk -v s="$stall" -v c="$crit" 'BEGIN { exit !(s >= c) }'; then
		skip "$name: predicted not to converge" \
			"QEMU completed after the guest wrote nothing for $stall s (from $crit s a round fits the downtime): the verdict was not tested"
	else
		check_verdict "$name" "$verd" "$psec" "$sec" "$bound"
	fi
	case $verd in
	converges | does-not-converge) ;;
	*) fail "$name: verdict $verd, where rate $rate pages/s is far from the threshold" ;;
	esac
	[ "$xfer" = - ] && return 0
	# (QEMU completed what the plan said would not: check_verdict failed)
	[ "$psec" = null ] && return 0
	check "$name: predicted bytes $pred within 10% of QEMU's $xfer" within "$pred" "$xfer" 10
	check "$name: predicted time ${psec}s within 15% of QEMU's ${sec}s" within_time "$psec" "$sec" 15
}

T_START=$SECONDS
launch_linux quiet 0 "$WS"
P_quiet=$QEMU_PID
launch_linux below "$R_BELOW" "$WS"
P_below=$QEMU_PID
launch_linux above "$R_ABOVE" "$WS_ABOVE"
P_above=$QEMU_PID
for g in "quiet $P_quiet" "below $P_below" "above $P_above"; do
	# shellcheck disable=SC2086 # NAME PID
	if ! wait_memload $g "$(slow 60)"; then
		fail "plan_linux: the Linux guests did not boot"
		exit 0
	fi
done
echo "# QEMU $VER, Linux $(basename "$KERNEL"), $MEM MiB guests booted in $((SECONDS - T_START)) s"

linux_case quiet "$P_quiet" 0 "$WS"
linux_case below "$P_below" "$R_BELOW" "$WS"
linux_case above "$P_above" "$R_ABOVE" "$WS_ABOVE"

echo "# max-bandwidth $((BW >> 20)) MiB/s, downtime-limit $DOWNTIME ms, working set $WS MiB ($WS_ABOVE above)"
echo "# rates (pages/s): below $R_BELOW, above $R_ABOVE; what memload did:"
for g in below above; do
	l=$(grep -h "^memload: dirtied" "$TMP/$g.serial" | tail -1)
	echo "# $g: ${l:-no progress line; its console ends: $(tail -1 "$TMP/$g.serial")}"
done
echo "# case   verdict            dirty/s  predicted B       QEMU B  pred s  QEMU s"
printf '%s' "$TABLE"
echo "# plan_linux: $((SECONDS - T_START)) s"
