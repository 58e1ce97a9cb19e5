#!/bin/bash
# kvmstats-test: needs=none
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmlab's timers_stopped(), which voids a lab boot whose guest kernel
# says one of its CPUs stopped taking timer interrupts (its RCU stall
# reports, one a minute, name the same CPU with the same counts), on the
# consoles such boots printed: 6.1's report without "timer handling
# issue" (a CI run's boot that waited 24 min for nothing), and the form
# with it. A CPU whose counts move on, one report, or two CPUs' reports
# are not a stop. And KERNEL_CORRUPTED, what voids a boot whose kernel
# found its own stacks corrupted (a CI run's page-fault entry that ran
# off its trampoline's stack), but not any other kernel BUG.
source "$(dirname "$0")/../lib.sh"

eval "$(sed -n '/^timers_stopped() {/,/^}/p' "$ROOT/tests/lab/kvmlab")"
if ! declare -F timers_stopped >/dev/null; then
	fail "lab_stall: timers_stopped() not found in tests/lab/kvmlab"
	exit 0
fi
RUN=$TMP

# report T CPU TICKS SOFTIRQ FQS: one RCU stall report of 6.1's form.
report() {
	printf '[%s] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\n' "$1"
	printf '[%s] rcu: \t%s-...0: (%s ticks this GP) idle=efbc/1/0x4000000000000000 softirq=%s fqs=%s\n' \
		"$1" "$2" "$3" "$4" "$5"
}

stopped() { timers_stopped && echo stopped || echo running; }

{ report 195.552812 0 59 6840/6842 1045; report 258.584484 0 59 6840/6842 3657; } >"$RUN/console.log"
check "6.1's reports, the same CPU and counts a minute apart: stopped" test "$(stopped)" = stopped
report 195.552812 0 59 6840/6842 1045 >"$RUN/console.log"
check "one report: not yet" test "$(stopped)" = running
{ report 195.552812 0 59 6840/6842 1045; report 258.584484 0 61 6911/6913 3657; } >"$RUN/console.log"
check "the CPU's counts moved on: running" test "$(stopped)" = running
{ report 195.552812 0 59 6840/6842 1045; report 258.584484 1 59 6840/6842 3657; } >"$RUN/console.log"
check "two CPUs, one report each: running" test "$(stopped)" = running
printf '%s\n' '[ 80.1] rcu: 	Possible timer handling issue on cpu=1 timer-softirq=2114' \
	'[143.2] rcu: 	Possible timer handling issue on cpu=1 timer-softirq=2114' >"$RUN/console.log"
check "the reports that say 'timer handling issue', twice: stopped" test "$(stopped)" = stopped
: >"$RUN/console.log"
check "a quiet console: running" test "$(stopped)" = running

eval "$(grep -m1 '^KERNEL_CORRUPTED=' "$ROOT/tests/lab/kvmlab")"
corrupted() { grep -qE "${KERNEL_CORRUPTED:-^$}" <<<"$1"; }
check "the entry trampoline's stack guard page hit: a corrupted kernel" corrupted \
	'[   89.796615] BUG: ENTRY_TRAMPOLINE stack guard page was hit at 000000009e43e474 (stack is 0000000049edbfb6..000000005ac13d4f)'
check "a stack end overwritten: a corrupted kernel" corrupted \
	'[  301.2] Kernel panic - not syncing: corrupted stack end detected inside scheduler'
check "any other BUG is not voided" eval '! corrupted "[ 12.3] BUG: unable to handle page fault for address: 0000000000000008"'
