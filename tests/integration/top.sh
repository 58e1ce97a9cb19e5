#!/bin/bash
# kvmstats top and demo, driven as a user would: in tmux at 80x24 on a
# host running the demo's guests and a real QEMU VM, with keys sent by
# send-keys and the screen read back with capture-pane. Also top --once
# (text and JSON, without a terminal) and demo's own life cycle.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu
source "$(dirname "$0")/../lib.sh"
require_kvm "top and demo"

SOCK=kstop-$$
TM() { tmux -L "$SOCK" "$@"; }
cleanup_tmux() { tmux -L "$SOCK" kill-server 2>/dev/null; }
trap 'cleanup_tmux; cleanup' EXIT

# screen: the pane as text.
screen() { TM capture-pane -p -t top; }
screen_has() { screen | grep -Eq -- "$1"; }
screen_lacks() { ! screen_has "$1"; }
line_has() { screen | sed -n "$1p" | grep -Eq -- "$2"; }
# wait_screen REGEX [SECONDS]: until the pane shows REGEX.
wait_screen() { wait_until $(($(slow "${2:-10}") * 10)) screen_has "$1"; }
# wait_gone REGEX [SECONDS]: until the pane no longer shows REGEX.
wait_gone() { wait_until $(($(slow "${2:-10}") * 10)) screen_lacks "$1"; }
# wait_screen_line N REGEX [SECONDS]: until the pane's line N shows REGEX.
wait_screen_line() { wait_until $(($(slow "${3:-10}") * 10)) line_has "$1" "$2"; }
# exits_col PID: the EXITS/s cells of PID's rows in the VM list.
exits_col() { screen | awk -v p="$1" '$1 == p { print $5 }' | tr '\n' ' '; }

# ---- the demo's guests, in the background --------------------------------
"$KVMSTATS" demo --no-top --vms 3 >"$TMP/demo.out" 2>"$TMP/demo.err" &
DEMO=$!
track "$DEMO"
for _ in $(seq 300); do
	grep -q "Ctrl-C stops them" "$TMP/demo.out" && break
	kill -0 "$DEMO" 2>/dev/null || break
	sleep 0.1
done
mapfile -t GUESTS < <(awk '/^pid [0-9]+:/ { sub(":", "", $2); print $2 }' "$TMP/demo.out")
check "demo --no-top started 3 guests and printed their pids" test "${#GUESTS[@]}" = 3
IRQ=$(awk '/irqchip/ { sub(":", "", $2); print $2 }' "$TMP/demo.out")
for g in "${GUESTS[@]}"; do
	check "demo guest $g is a tinyvmm" grep -q tinyvmm "/proc/$g/comm"
done

# ---- a real QEMU VM (QEMU 7.2 holds no stats fds: auto picks another source)
QEMU_SMP=2 start_qemu kstop-qemu 'exits=100000 dirty=4M dirtyloop=1' ||
	fail "QEMU started" "$(tail -3 "$SERIAL" 2>/dev/null)"
# QEMU 7.2 holds no stats fds; its single QMP monitor may be taken by
# another client on a shared host: --attach lets auto make it open them.
PIDS=(--attach)
for p in "${GUESTS[@]}" "$QEMU_PID"; do PIDS+=(--pid "$p"); done

# ---- top --once, without a terminal ---------------------------------------
"$KVMSTATS" top --once -s 0.5 "${PIDS[@]}" </dev/null >"$TMP/once.txt" 2>"$TMP/once.err"
check "top --once exits 0 without a terminal" test $? = 0
for p in "${GUESTS[@]}" "$QEMU_PID"; do
	check "top --once lists pid $p" grep -Eq "^ +$p " "$TMP/once.txt"
done
check "top --once names the QEMU VM" grep -q "kstop-qemu" "$TMP/once.txt"
check "top --once has a rate for exits" grep -Eq '^  exits +[0-9.]+[kM]? +[0-9.]+[kM]?' "$TMP/once.txt"
check "top --once shows levels, maxima and interval percentiles" \
	test -n "$(grep '(level)' "$TMP/once.txt")" -a -n "$(grep '(peak)' "$TMP/once.txt")" \
	-a -n "$(grep -E '^  halt_wait_hist .* p50 [^ ]+.* p90 [^ ]+.* p99 ' "$TMP/once.txt")"

"$KVMSTATS" top --once --json -s 0.5 "${PIDS[@]}" >"$TMP/once.json" </dev/null
check "top --once --json is one JSON value" jq -e . "$TMP/once.json"
check "--json: every VM, its vCPUs, an interval near 0.5 s" jq -e \
	--argjson n "$(( ${#GUESTS[@]} + 1 ))" \
	'(.vms | length) == $n and .interval > 0.4 and .interval < 1.5 and
	 all(.vms[]; (.vcpus | length) >= 1)' "$TMP/once.json"
# (the rate is the interval's change over its length: whether a guest the
# test does not pace ran in that half second is not asserted)
check "--json: demo VMs have exited, with a rate per second over the interval" \
	jq -e --argjson p "${GUESTS[0]}" '.interval as $t | [.vms[] | select(.pid == $p) |
	 .vcpu_sum.exits] | length > 0 and all(.[]; .value > 0 and .rate >= 0 and
	 (.rate * $t - .total | fabs) < 0.01)' "$TMP/once.json"
# The irqchip guest halts in some of its demo phases (a phase lasts 3 s):
# wait for an interval with halts in it.
for _ in $(seq "$(slow 8)"); do
	"$KVMSTATS" top --once --json -s 1 --pid "$IRQ" >"$TMP/irq.json" </dev/null
	jq -e '.vms[0].vcpu_sum.halt_wait_hist.count > 0' "$TMP/irq.json" >/dev/null && break
done
check "--json: the irqchip guest's halt_wait_hist has interval percentiles in seconds" \
	jq -e '.vms[0].vcpu_sum.halt_wait_hist | .count > 0 and .p50 > 0 and
	 .p50 <= .p90 and .p90 <= .p99 and .p99 < 1 and .rate > 0' "$TMP/irq.json"
check "--json: levels are not rates (instant and peak stats have no rate)" jq -e \
	'all(.vms[].stats | to_entries[] | select(.value.type == "instant" or
	 .value.type == "peak"); .value | has("rate") | not)' "$TMP/once.json"
if jq -e --argjson p "$QEMU_PID" '[.vms[] | select(.pid == $p) | .vcpus[].index] ==
	[0, 1]' "$TMP/once.json" >/dev/null; then
	pass "--json: QEMU's two vCPUs"
else
	fail "--json: QEMU's two vCPUs" "$(jq -c --argjson p "$QEMU_PID" '.vms[] |
		select(.pid == $p) | {source, vcpus: [.vcpus[].index]}' "$TMP/once.json")"
fi
# --name filters what the other options chose (here: every pid above).
"$KVMSTATS" top --once --json -s 0.2 "${PIDS[@]}" -g "^kstop-q" -f "^exits\$" \
	>"$TMP/name.json" 2>"$TMP/name.err" </dev/null
if jq -e --argjson p "$QEMU_PID" '[.vms[].pid] == [$p] and
	(.vms[0].vcpu_sum | keys) == ["exits"]' "$TMP/name.json" >/dev/null; then
	pass "--name picks the QEMU VM, --fields the stats"
else
	fail "--name picks the QEMU VM, --fields the stats" "$(head -c 300 "$TMP/name.json"
		head -3 "$TMP/name.err")"
fi
"$KVMSTATS" top --once -z -s 0.2 --pid "${GUESTS[0]}" >"$TMP/z.txt" </dev/null
check "--skip-zero hides all-zero rows" test -z "$(grep -E '^  pages_1g ' "$TMP/z.txt")" \
	-a -n "$(grep -E '^  exits ' "$TMP/z.txt")"

"$KVMSTATS" top </dev/null >/dev/null 2>"$TMP/tty.err"
check "top without a terminal fails with a clear message" test $? = 1 -a \
	-n "$(grep -i 'terminal' "$TMP/tty.err")"
"$KVMSTATS" top --json >/dev/null 2>&1 </dev/null
check "top --json without --once is a usage error" test $? = 2

# ---- --replay: a log of `kvmstats record` through the same pipeline --------
"$KVMSTATS" record --output "$TMP/top.log" --interval 0.2 --count 15 \
	--pid "${GUESTS[0]}" --pid "$IRQ" >/dev/null 2>"$TMP/record.err" </dev/null
check "record wrote a log to replay" test -s "$TMP/top.log"
"$KVMSTATS" top --replay "$TMP/top.log" --once --json -s 0.4 >"$TMP/replay.json" </dev/null
check "top --replay --once --json: rates between samples 0.4 s apart (recorded time)" \
	jq -e --argjson p "${GUESTS[0]}" --argjson q "$IRQ" \
	'.interval as $t | .interval >= 0.39 and .interval < 0.7 and
	 ([.vms[].pid] | sort) == ([$p, $q] | sort) and all(.vms[]; .vcpu_sum.exits |
	 .value > 0 and .rate >= 0 and (.rate * $t - .total | fabs) < 0.01)' "$TMP/replay.json"
"$KVMSTATS" top --replay "$TMP/nonexistent.log" --once >/dev/null 2>"$TMP/replay.err" </dev/null
check "top --replay of a missing file fails with exit 1" test $? = 1 -a -s "$TMP/replay.err"
TM new-session -d -s replay -x 80 -y 24 "$KVMSTATS top --replay $TMP/top.log -s 0.2; sleep 30"
for _ in $(seq 80); do
	TM capture-pane -p -t replay | grep -q "end of the log" && break
	sleep 0.1
done
R=$(TM capture-pane -p -t replay)
check "the replay screen plays the log to its end" test -n "$(grep 'end of the log' <<<"$R")" \
	-a -n "$(grep -E "^ +${GUESTS[0]} " <<<"$R")" -a -n "$(head -1 <<<"$R" | grep 'top.log')"
TM kill-session -t replay

# ---- the screen, in tmux at 80x24 -----------------------------------------
cat >"$TMP/run.sh" <<EOF
"$KVMSTATS" top ${PIDS[*]}
echo "rc=\$?" >"$TMP/rc"
# Written aside and renamed: wait_file must not see a file stty is still writing.
stty -a >"$TMP/stty.part" && mv "$TMP/stty.part" "$TMP/stty"
sleep 60
EOF
TM new-session -d -s top -x 80 -y 24 "bash $TMP/run.sh"
for p in "${GUESTS[@]}" "$QEMU_PID"; do wait_screen "^ +$p " 10; done
wait_screen "q:quit" 5
S1=$(screen)
check "80x24: the header and key hints" test -n "$(echo "$S1" | head -1 | grep 'kvmstats top')" \
	-a -n "$(echo "$S1" | tail -1 | grep 'q:quit')"
for p in "${GUESTS[@]}" "$QEMU_PID"; do
	check "80x24: pid $p has a row" grep -Eq "^ +$p " <<<"$S1"
done
check "80x24: no line is wider than the screen" \
	test "$(echo "$S1" | awk '{ if (length($0) > m) m = length($0) } END { print m }')" -le 80
# Rates need two readings; the demo's workload changes every few seconds.
wait_screen "^ +${GUESTS[0]} +[^ ]+ +[^ ]+ +[0-9]+ +[0-9.]+[kM]? " 5
E1=$(exits_col "${GUESTS[0]}")
for _ in 1 2 3; do
	sleep "$(slow_s 1.5)"
	E2=$(exits_col "${GUESTS[0]}")
	[ "$E1" != "$E2" ] && break
done
if [[ "$E1" =~ [1-9] ]] && [[ "$E2" =~ [1-9] ]] && [ "$E1" != "$E2" ]; then
	pass "exit rates change between screens ($E1-> $E2)"
else
	fail "exit rates change between screens" "'$E1' then '$E2'"
fi
Q=$(exits_col "$QEMU_PID")
check "the QEMU VM shows an exit rate ($Q)" test -n "$Q" -a "$Q" != "-"

# Drill down: filter the list to the irqchip guest, open it, then its vCPUs.
TM send-keys -t top g C-u
TM send-keys -t top -l "^$IRQ\$"
TM send-keys -t top Enter
wait_screen "filter: \\^$IRQ" 5
TM send-keys -t top Enter
check "Enter opens the VM: one row per stat" wait_screen "^STAT +TOTAL +RATE/s +%TOTAL" 5
check "VM view: VM stats first, then the vCPUs summed" test -n "$(screen | grep '^VM stats')" \
	-a -n "$(screen | grep '^remote_tlb_flush ')"
TM send-keys -t top /
TM send-keys -t top -l "^exits|hist"
TM send-keys -t top Enter
check "/ filters the stats; exits: total, rate and share" \
	wait_screen "^exits +[0-9.]+[kM]? +[0-9.]+[kM]? +[0-9.]+\$" 5
if wait_screen "p50 [0-9.]+ [mun]?s +p90 [0-9.]+ [mun]?s +p99 [0-9.]+ [mun]?s" 8; then
	pass "a histogram shows its interval's p50/p90/p99"
else
	fail "a histogram shows its interval's p50/p90/p99" "$(screen | grep p50)"
fi
TM send-keys -t top v
check "v: vCPUs side by side (vcpu0, vcpu1)" wait_screen "^STAT +vcpu0 +vcpu1" 5
# A vCPU's histograms fill only in the demo's phases that halt.
check "v: histogram percentiles per vCPU" wait_screen "^halt_[a-z_]+ p(50|90|99) .*[0-9] [mun]?s" 8
TM send-keys -t top Escape
wait_screen "^VMs sorted by" 5
TM send-keys -t top c
check "Esc back to the list; c clears the filter" wait_screen "^ +$QEMU_PID " 5
TM send-keys -t top g C-u
TM send-keys -t top -l "^$QEMU_PID\$"
TM send-keys -t top Enter
wait_screen "filter: \\^$QEMU_PID" 5
TM send-keys -t top Tab
check "Tab on the QEMU VM: its two vCPUs" wait_screen "^STAT +vcpu0 +vcpu1" 5
TM send-keys -t top Escape c

# Sorting, pause, reset, help.
TM send-keys -t top 1
check "1: sort by PID" wait_screen "sorted by PID" 5
TM send-keys -t top s
check "s: next sort column" wait_screen "sorted by VM" 5
TM send-keys -t top 5
TM send-keys -t top p
check "p: paused" wait_screen "PAUSED" 5
P1=$(screen | sed 1d)
sleep "$(slow_s 1.5)"
P2=$(screen | sed 1d)
check "paused: the screen stays as it was" test "$P1" = "$P2"
TM send-keys -t top p
check "p again: running" wait_gone PAUSED 5
TM send-keys -t top r
check "r: totals reset" wait_screen "totals reset" 5
TM send-keys -t top h
check "h: help" wait_screen "kvm_stat's reset" 5
TM send-keys -t top x
wait_screen "^VMs sorted by" 5

# Resizes: bigger, then smaller than 80x24, each waited for until the
# hints are on the new last line (the redraw), not for a fixed time.
TM resize-window -t top -x 120 -y 40
wait_screen_line 40 q:quit 2
check "resized to 120x40: more columns, hints on the last line" test -n \
	"$(screen | grep 'MMIO/s')" -a -n "$(screen | sed -n 40p | grep 'q:quit')"
TM resize-window -t top -x 60 -y 16
wait_screen_line 16 q:quit 2
W=$(screen | awk '{ if (length($0) > m) m = length($0) } END { print m }')
check "resized to 60x16: still drawn, nothing wider ($W)" test -n \
	"$(screen | sed -n 16p | grep 'q:quit')" -a "$W" -le 60
TM resize-window -t top -x 80 -y 24

# q quits and gives the terminal back.
TM send-keys -t top q
wait_file "$TMP/stty" 5
check "q quits with status 0" grep -q "rc=0" "$TMP/rc"
canonical_echo() { grep -Eq '(^| )icanon( |$)' "$1" && grep -Eq '(^| )echo( |$)' "$1"; }
check "the terminal is restored (canonical mode, echo)" canonical_echo "$TMP/stty"
check "the screen is given back" wait_gone "kvmstats top" 5
TM kill-session -t top

# ---- demo: stops what it started -------------------------------------------
kill -TERM "$DEMO"
for _ in $(seq 100); do kill -0 "$DEMO" 2>/dev/null || break; sleep 0.1; done
wait "$DEMO"
check "demo --no-top ends 0 on SIGTERM" test $? = 0
left=0
for g in "${GUESTS[@]}"; do kill -0 "$g" 2>/dev/null && left=$((left + 1)); done
check "demo stopped every guest it started" test "$left" = 0

# demo with its top: q ends both.
TM new-session -d -s top -x 80 -y 24 "$KVMSTATS demo --vms 2; echo rc=\$? >$TMP/demo.part; mv $TMP/demo.part $TMP/demo.rc; sleep 60"
if wait_screen "^ +[0-9]+ demo" 20; then
	pass "demo opens top on its guests"
else
	fail "demo opens top on its guests" "$(screen | head -5)"
fi
DPIDS=$(screen | awk '$2 ~ /^demo/ { print $1 }' | sort -u)
check "demo --vms 2 runs two VMs (demo, demo-irqchip)" test "$(screen | grep -Ec ' demo(-irqchip)? ')" = 2
TM send-keys -t top q
wait_file "$TMP/demo.rc" 10
check "demo exits 0 after q" grep -q "rc=0" "$TMP/demo.rc"
left=0
for g in $DPIDS; do kill -0 "$g" 2>/dev/null && left=$((left + 1)); done
check "after q, none of demo's guests is left" test -n "$DPIDS" -a "$left" = 0

# Without /dev/kvm (a private mount namespace with an empty /dev).
if unshare -m sh -c 'mount -t tmpfs none /dev' 2>/dev/null; then
	unshare -m sh -c "mount -t tmpfs none /dev && exec $KVMSTATS demo --no-top" \
		>/dev/null 2>"$TMP/nokvm.err"
	rc=$?
	check "demo without /dev/kvm says so and exits 1" test "$rc" = 1 -a \
		-n "$(head -1 "$TMP/nokvm.err" | grep '^kvmstats: demo: /dev/kvm: ')"
else
	skip "demo without /dev/kvm" "cannot make a mount namespace here"
fi
