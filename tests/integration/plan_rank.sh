#!/bin/bash
# kvmstats plan's ranking against real migrations (issue 20): 8 VMs of
# our multiboot guest, of different sizes (64-256 MiB), non-zero shares
# and dirty rates (mbguest's rate=, all below the bandwidth, so all
# converge), each set to max-bandwidth 64 MiB/s and downtime-limit 300
# ms, are planned together by one `plan --method scan --json` over all 8
# pids, then migrated one by one over loopback TCP to a destination QEMU
# with the same settings. Asserts every migration completed and Kendall's
# tau between the plan's rank and QEMU's total-time is at least 0.8 (at
# most 2 of the 28 pairs in the wrong order). In the lab (`slow` > 1):
# 5 VMs of 64 MiB at 8 MiB/s (tau 0.8: at most 1 of 10 pairs wrong).
# Tagged nosan: its 40 s are QEMU's migrations; the code it runs, a plan
# VM by VM and their ranking, plan.sh and drain.sh (5 VMs at once) run
# with the ASan+UBSan CLI.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm nosan
source "$(dirname "$0")/../lib.sh"

require_kvm plan_rank
need_tools plan_rank "$QEMU" socat jq || exit 0
if [ ! -x "$KVMSTATS" ] || [ ! -f "$MBGUEST" ]; then
	fail plan_rank "build/kvmstats or build/mbguest.elf missing: run make build"
	exit 0
fi

# One VM a line: memory (MiB), then the guest's keys. Migration times
# spread from about 0.3 to 4.5 s.
if [ "$SLOW" -gt 1 ]; then
	BW=$((8 << 20))
	# The lab's migrations take 0.5-1.5 s more than their bytes at the
	# bandwidth, varying: the smallest two are 12 MiB apart.
	VMS="64 nonzero=2M stride=4K
64 nonzero=14M stride=4K
64 nonzero=24M stride=4K dirty=8M dirtyloop=1 rate=256
64 nonzero=36M stride=4K
64 nonzero=46M stride=4K dirty=16M dirtyloop=1 rate=512"
else
	BW=$((64 << 20))
	VMS="64 nonzero=16M stride=4K
64 nonzero=40M stride=4K
128 nonzero=56M stride=4K dirty=16M dirtyloop=1 rate=1024
128 nonzero=96M stride=4K
192 nonzero=112M stride=4K dirty=32M dirtyloop=1 rate=2048
192 nonzero=160M stride=4K
256 nonzero=192M stride=4K dirty=64M dirtyloop=1 rate=2048
256 nonzero=232M stride=4K dirty=32M dirtyloop=1 rate=4096"
fi
PARAMS="{\"max-bandwidth\":$BW,\"downtime-limit\":300}"

# setup NAME: the migration settings on NAME (legacy pre-copy).
setup() {
	migration_settings "$1" '[{"capability":"multifd","state":false}]' "$PARAMS"
}

n=0
while read -r mem keys; do
	n=$((n + 1))
	QEMU_MEM=$mem launch_qemu "vm$n" "$keys"
	eval "PID_$n=$QEMU_PID MEM_$n=$mem KEYS_$n=\$keys"
done <<<"$VMS"
pids=()
for i in $(seq "$n"); do
	eval "p=\$PID_$i"
	# shellcheck disable=SC2154 # set by the eval above
	if ! wait_ready "vm$i" "$p" "$(slow 240)" || ! setup "vm$i"; then
		fail "plan_rank: VM $i did not boot"
		exit 0
	fi
	pids+=(--pid "$p")
done

"$KVMSTATS" plan "${pids[@]}" --method scan --interval 2 --json >"$TMP/plan.json" 2>"$TMP/plan.err"
check "one plan over the $n VMs" test "$(jq '.vms | length' "$TMP/plan.json")" = "$n"

ROWS=""
for i in $(seq "$n"); do
	eval "p=\$PID_$i mem=\$MEM_$i keys=\$KEYS_$i"
	# shellcheck disable=SC2154 # set by the eval above
	read -r rank psec verd bws < <(jq -r --argjson p "$p" '.vms[] | select(.pid == $p) |
		"\(.rank) \(.predicted_seconds // "-") \(.prediction.verdict // .converges)
		\(.prediction.settings["max-bandwidth"].source // "-")"' "$TMP/plan.json" | tr '\n' ' ')
	# shellcheck disable=SC2154
	QEMU_MEM=$mem launch_qemu "dst$i" "$keys" -incoming defer
	if ! wait_until "$(slow 300)" test -S "$TMP/dst$i.qmp" || ! setup "dst$i"; then
		fail "plan_rank: the destination of VM $i did not start"
		continue
	fi
	# QEMU's bytes, total-time and setup-time (ms) once it completed,
	# within a minute (slowed)
	read -r xfer ms setup_ms < <(migrate_bounded "vm$i" "dst$i" "$(slow 60)" 0)
	kill "$p" "$QEMU_PID" 2>/dev/null
	if [ -z "$ms" ]; then
		fail "VM $i (${mem} MiB, $keys): the migration did not complete"
		continue
	fi
	ROWS="$ROWS$rank $ms $setup_ms $xfer $psec $verd $bws $mem $keys
"
done
echo "# max-bandwidth $((BW >> 20)) MiB/s, downtime-limit 300 ms"
echo "# rank  QEMU ms  setup ms  QEMU B  pred s  verdict  max-bandwidth from  MiB  guest"
sort -n <<<"$ROWS" | sed '/^$/d; s/^/# /'

# Kendall's tau-a between rank and QEMU's time: pairs in the same order
# minus pairs in the opposite order, over all pairs.
tau=$(awk 'BEGIN { n = 0 } NF { r[n] = $1; t[n] = $2; n++ }
	END { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) {
		s = (r[i] - r[j]) * (t[i] - t[j]); if (s > 0) c++; else if (s < 0) d++ }
	printf "%.3f", (n > 1 ? (c - d) / (n * (n - 1) / 2) : 0) }' <<<"$ROWS")
echo "# Kendall tau: $tau over $(sed '/^$/d' <<<"$ROWS" | wc -l) VMs"
check "Kendall tau between the plan's rank and QEMU's migration times is $tau >= 0.8 ($n VMs)" \
	awk -v t="$tau" -v m="$(sed '/^$/d' <<<"$ROWS" | wc -l)" -v n="$n" 'BEGIN { exit !(m == n && t >= 0.8) }'
