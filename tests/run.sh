#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Runs every test of the project and ends with "N passed, M failed,
# K skipped". Each test program prints TAP lines; a program that dies
# without saying why counts as one failure.
#
#   tests/run.sh                 the whole suite (make test)
#   tests/run.sh --lab [--npt N] every KVM test in the lab (make test-lab)
#   tests/run.sh --lab --stock   the lab's stock-KVM pass alone (what a
#                                 KVM such as kvm_pvm gets in the lab)
#   tests/run.sh --lab --stock --stack SUITE
#                                the stock pass of a Debian suite's stack
#                                (tests/lab/kvmlab --stack; trixie, sid)
#   tests/run.sh --lab [--stock] --stacks
#                                the lab pass, then the stacks' passes
#                                (KVMSTATS_TEST_STACKS), as make test runs them
#   tests/run.sh --inner         (inside the lab: one item of a lab pass, as told by
#                                 KVMSTATS_RUN_* variables)
#
# Where a test runs follows the tag line near the top of its file:
#
#   # kvmstats-test: needs=none|kvm|stock-kvm [stock] [qemu] [nosan]
#
# needs=none: on this machine, always. needs=kvm: on this machine's
# /dev/kvm when it has one, else in the lab (tests/lab/kvmlab: Debian's
# stock kernel with kvm_amd under QEMU's emulation). needs=stock-kvm: on
# a stock KVM (kvm_intel, kvm_amd) only: this machine's, or the lab's;
# some KVMs (kvm_pvm) leave counters at 0 that a stock KVM maintains.
# stock: a needs=kvm test that the lab's stock-KVM pass runs too, when
# this machine's KVM is not a stock one. qemu: once per tested QEMU (the
# system's, and QEMU 10.0 from bookworm-backports, fetched by
# tests/qemu/fetch.sh). nosan: not with the ASan+UBSan CLI. acceptance:
# an issue's acceptance test whose figures are QEMU's migration times,
# which hold on a machine to itself, not beside CI's builds and other
# labs: run only with KVMSTATS_TEST_ACCEPTANCE=1. lockdown: in the lab, a boot of its own
# with the kernel locked down (lockdown=integrity: debugfs refuses KVM's
# counter files), which a test of what is unknown needs. labqemu: a qemu script the lab runs with
# every QEMU too where this machine has no KVM (see lab_items). Unit tests
# carry the same tag in a C comment; without one a unit test needs no KVM
# and an integration script needs one.
#
# Outside the lab every integration script runs with the release CLI and
# again with the ASan+UBSan one (a QEMU script there with the further
# QEMU, see san_qemu); in the lab (everything 5-20x slower) once,
# with the ASan+UBSan CLI, and the QEMU 10 pass uses the release one.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
LOG=$(mktemp -d /tmp/kvmstats-run.XXXXXX)
passed=0 failed=0 skipped=0
MODE=outer NPT=${NPT:-} LAB_WHAT=all
QEMU_VERSIONS=${KVMSTATS_TEST_QEMUS:-system 10.0}
# The stacks whose stock pass make test runs too, besides the host's own
# (see stack_pass; KVMSTATS_TEST_STACKS= for none), and what that pass runs.
STACKS=${KVMSTATS_TEST_STACKS-trixie sid}
STACK_SCRIPTS=${KVMSTATS_TEST_STACK_SCRIPTS:-check_kvm agree stock plan_migrate libvirt serve}
STACK='' WITH_STACKS=0

while [ $# -gt 0 ]; do
	case $1 in
	--lab) MODE=lab ;;
	--inner) MODE=inner ;;
	--npt) NPT=$2; shift ;;
	--stock) LAB_WHAT=stock ;;
	--stack) STACK=$2; shift ;;
	--stacks) WITH_STACKS=1 ;;
	*) echo "usage: $0 [--lab [--npt 0|1] [--stock] [--stack SUITE | --stacks]]" >&2; exit 2 ;;
	esac
	shift
done

# count FILE RC NAME: add a finished test's TAP lines to the totals. A
# skip is "ok - x # SKIP why", or "not ok N # SKIP" from cmocka.
count() {
	local out=$1 rc=$2 name=$3 ok nok okskip nokskip
	ok=$(grep -c '^ok ' "$out")
	nok=$(grep -c '^not ok ' "$out")
	okskip=$(grep -c '^ok .*# SKIP' "$out")
	nokskip=$(grep -c '^not ok .*# SKIP' "$out")
	passed=$((passed + ok - okskip))
	failed=$((failed + nok - nokskip))
	skipped=$((skipped + okskip + nokskip))
	if [ "$rc" != 0 ] && [ "$nok" = "$nokskip" ]; then
		echo "not ok - $name exited with status $rc"
		failed=$((failed + 1))
	fi
}

# watchdog LIMIT FILE: just before a test's time limit, what every process
# is doing (state, kernel wait channel), for the report of a hung test.
watchdog() {
	local s
	trap 'kill $s 2>/dev/null; exit 0' TERM
	sleep $(($1 > 5 ? $1 - 2 : $1)) &
	s=$!
	wait $s
	ps -eo pid,ppid,stat,wchan:28,etime,args --forest | cut -c1-200 >"$2"
}

# run NAME TIMEOUT CMD...: run a test program, stream its output, count it;
# its status in RUN_RC. Not counted when the status is $VOID_RC.
run() {
	local name=$1 limit=$2 out rc t0 wd
	out=$LOG/$(echo "$1" | tr '/ :' '___').log
	shift 2
	echo "# --- $name"
	t0=$SECONDS
	watchdog "$limit" "$out.ps" &
	wd=$!
	timeout -k 10 "$limit" "$@" </dev/null 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	RUN_RC=$rc
	kill "$wd" 2>/dev/null
	wait "$wd" 2>/dev/null
	if [ -n "${VOID_RC:-}" ] && [ "$rc" = "$VOID_RC" ]; then
		echo "# --- $name: void (status $rc) after $((SECONDS - t0)) s"
		return
	fi
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		echo "# $name: still running after $limit s; the processes then:"
		sed 's/^/#   /' "$out.ps" 2>/dev/null
	fi
	count "$out" "$rc" "$name"
	echo "# --- $name: $((SECONDS - t0)) s"
}

# tag FILE WORD: does FILE's kvmstats-test tag line have WORD?
tag() {
	local line
	line=$(grep -m1 -E '^(#|/\*) kvmstats-test:' "$1")
	if [ -z "$line" ]; then
		case $1:$2 in
		*.c:needs=none | *.sh:needs=kvm) return 0 ;;
		*) return 1 ;;
		esac
	fi
	case " $line " in *" $2 "*) return 0 ;; esac
	return 1
}

have_kvm() { [ -c /dev/kvm ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]; }
# The KVM module in use: kvm_intel, kvm_amd (stock), kvm_pvm, ...
kvm_module() {
	local m
	for m in /sys/module/kvm_*; do
		[ -e "$m" ] || continue
		m=${m##*/}
		[ -d "/sys/module/$m/parameters" ] && [ "$m" != kvm_common ] && { echo "$m"; return; }
	done
	echo unknown
}
stock_kvm() { have_kvm && case $(kvm_module) in kvm_intel | kvm_amd) true ;; *) false ;; esac; }

# scripts NEEDS [WORD]: integration scripts with needs=NEEDS (and WORD).
scripts() {
	local t
	for t in tests/integration/*.sh; do
		tag "$t" "needs=$1" || continue
		[ -z "${2:-}" ] || tag "$t" "$2" || continue
		# An issue's acceptance test (real migrations timed: a
		# machine to itself) runs when asked for, never counted as a
		# pass or a skip.
		tag "$t" acceptance && [ "${KVMSTATS_TEST_ACCEPTANCE:-0}" != 1 ] && continue
		echo "$t"
	done
}

units() {
	local t
	for t in tests/unit/test_*.c; do
		tag "$t" "needs=$1" && basename "$t" .c
	done
}

# unit_pass NEEDS: the unit tests, release and ASan+UBSan builds.
unit_pass() {
	local u
	for u in $(units "$1"); do
		[ -x "build/tests/$u" ] &&
			run "unit $u" 300 env CMOCKA_MESSAGE_OUTPUT=TAP "build/tests/$u"
	done
	for u in $(units "$1"); do
		[ -x "build-san/tests/$u" ] &&
			run "asan+ubsan $u" 600 env CMOCKA_MESSAGE_OUTPUT=TAP \
				ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 "build-san/tests/$u"
	done
}

# script_pass SCRIPT...: integration scripts with the release CLI, then
# (but those tagged nosan) with the ASan+UBSan one.
script_pass() {
	local t
	for t in "$@"; do
		run "$(basename "$t" .sh)" 1200 bash "$t"
	done
	[ -x build-san/kvmstats ] || return 0
	for t in "$@"; do
		sans "$t" && san_run "$t"
	done
	return 0
}

# san_run SCRIPT: one integration script with the ASan+UBSan CLI; a
# QEMU-tagged one with QEMU $SAN_QEMU when kvm_suite set it.
san_run() {
	local name qemu=()
	name="asan+ubsan $(basename "$1" .sh)"
	if [ -n "${SAN_QEMU:-}" ] && tag "$1" qemu; then
		name="asan+ubsan qemu-$SAN_QEMU $(basename "$1" .sh)"
		qemu=(KVMSTATS_QEMU="$SAN_QEMU_W")
	fi
	run "$name" 1200 env "${qemu[@]}" \
		KVMSTATS="$ROOT/build-san/kvmstats" \
		KVMSTATS_TINYVMM="$ROOT/build/tinyvmm" \
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 bash "$1"
}

# sans SCRIPT: does script_pass run SCRIPT with the ASan+UBSan CLI?
sans() { [ -x build-san/kvmstats ] && ! tag "$1" nosan; }

# san_qemu: on a machine's own KVM the ASan+UBSan pass runs the QEMU
# scripts with the last further QEMU (10.0), and its pass of them with
# the release CLI is not run again: each QEMU is met once, by one of the
# two CLIs (the release one with the system's QEMU). Two passes of every
# QEMU script with 10.0 cost 9-10 min of CI's time, the ASan one being a
# full pass too. Sets SAN_QEMU (the version) and SAN_QEMU_W (its binary).
san_qemu() {
	local v
	SAN_QEMU=""
	for v in $QEMU_VERSIONS; do
		[ "$v" = system ] && continue
		qemu_wrapper "$v" || continue
		SAN_QEMU=$v SAN_QEMU_W=$QEMU_W
	done
}

# script_once SCRIPT...: each script once, with the ASan+UBSan CLI but
# those tagged nosan (the lab's way: under emulation two passes would not
# fit CI's time; the release CLI runs there in the QEMU 10 pass).
script_once() {
	local t
	for t in "$@"; do
		if tag "$t" nosan || [ ! -x build-san/kvmstats ]; then
			run "$(basename "$t" .sh)" 1200 bash "$t"
		else
			san_run "$t"
		fi
	done
}

# qemu_pass SCRIPT...: the QEMU-based scripts again with each QEMU but
# the system's (release CLI only: the ASan pass covers the code), but
# those the ASan pass ran with it (san_qemu).
qemu_pass() {
	local v t
	for v in $QEMU_VERSIONS; do
		[ "$v" = system ] && continue
		qemu_wrapper "$v" || continue
		for t in "$@"; do
			tag "$t" qemu || continue
			[ "$v" = "${SAN_QEMU:-}" ] && sans "$t" && continue
			run "qemu-$v $(basename "$t" .sh)" 1200 \
				env KVMSTATS_QEMU="$QEMU_W" bash "$t"
		done
	done
}

# qemu_wrapper VERSION: set QEMU_W to the QEMU of that version, fetched
# once (outside the lab, which has no network) and remembered in
# KVMSTATS_QEMU_<version>; a failure to get it is a failed test. 1 too
# when that QEMU is the system's (a Debian 13 host's 10.0): the system's
# pass has tested it already.
qemu_wrapper() {
	local var=KVMSTATS_QEMU_${1//./_}
	case ${!var:-} in
	none | system) return 1 ;;	# could not be had (counted already), or the system's
	?*) QEMU_W=${!var}; return 0 ;;
	esac
	if QEMU_W=$(tests/qemu/fetch.sh "$1" 2>"$LOG/qemu-$1.err"); then
		if [ "$QEMU_W" = "$(command -v qemu-system-x86_64)" ]; then
			echo "# QEMU $1 is this host's own: its pass is the system's"
			export "$var=system"
			return 1
		fi
		export "$var=$QEMU_W"
		return 0
	fi
	echo "not ok - QEMU $1 for the QEMU matrix: $(tail -1 "$LOG/qemu-$1.err")"
	failed=$((failed + 1))
	export "$var=none"
	return 1
}

# lab_scripts WHAT: the integration scripts of a lab pass (all: every
# one that needs a KVM; stock: what a non-stock KVM could not show).
lab_scripts() {
	local t
	for t in $(if [ "$1" = all ]; then scripts kvm; else scripts kvm stock; fi; scripts stock-kvm); do
		tag "$t" lockdown || echo "$t"
	done
}

# lockdown_item: the lab's locked-down boot (see lockdown above), as an
# item "lockdown:once:SCRIPT,...", or nothing.
lockdown_item() {
	local t b=""
	for t in $(scripts kvm lockdown); do
		b="$b,$t"
	done
	[ -z "$b" ] || echo "lockdown:once:${b#,}"
}

# stack_items: a stack's pass in as few boots as its scripts allow: the
# scripts in two batches (a boot each), so that a boot that stalls costs
# half the pass, not all of it.
stack_items() {
	local n=0 t a="" b=""
	for t in $STACK_SCRIPTS; do
		t=tests/integration/$t.sh
		[ -f "$t" ] || { echo "plain:$t"; continue; }	# counted as a failure inside
		if [ $((n % 2)) = 0 ]; then a="$a,$t"; else b="$b,$t"; fi
		n=$((n + 1))
	done
	[ -n "$a" ] && echo "plain:${a#,}"
	[ -n "$b" ] && echo "plain:${b#,}"
}

# batches PREFIX SCRIPT...: the scripts as items PREFIX:A,B,C, three a
# boot (a boot costs half a minute under emulation, and a stalled one
# costs its three scripts, not a whole pass); a last one left alone
# joins the batch before it.
batches() {
	local prefix=$1 n=0 b="" t
	shift
	for t in "$@"; do
		b="$b,$t"
		n=$((n + 1))
		[ $((n % 3)) = 0 ] && [ $# -ne $((n + 1)) ] && { echo "$prefix:${b#,}"; b=""; }
	done
	[ -z "$b" ] || echo "$prefix:${b#,}"
}

# lab_items WHAT: what a lab pass runs, one boot each, as items for
# --inner: "units", "once:SCRIPT,..." (with the ASan+UBSan CLI but
# nosan), "plain:SCRIPT,..." (release CLI), "qemu:VERSION:SCRIPT,..." (a
# QEMU-tagged script with that QEMU, release CLI). WHAT: all (every KVM
# test) or stock (what a non-stock KVM could not show). In the pass of
# every KVM test (a host without KVM) the other QEMUs run only the
# scripts tagged labqemu (QMP's answers, which differ between QEMUs):
# the whole QEMU matrix under emulation would not fit CI's time.
lab_items() {
	local t v var qs
	if [ "$1" = stack ]; then
		stack_items
		return
	fi
	if [ "$1" = all ]; then
		echo units
		# shellcheck disable=SC2046
		batches once $(lab_scripts all)
		lockdown_item
	else
		# shellcheck disable=SC2046
		batches plain $(lab_scripts stock)
	fi
	for v in $QEMU_VERSIONS; do
		[ "$v" = system ] && continue
		var=KVMSTATS_QEMU_${v//./_}
		[ "${!var:-}" = system ] && continue	# the system's QEMU (lab_pass asked)
		[ "$1" = stock ] && stack_meets "$v" && continue
		qs=""
		for t in $(lab_scripts "$1"); do
			tag "$t" qemu || continue
			[ "$1" = all ] && ! tag "$t" labqemu && continue
			qs="$qs $t"
		done
		# shellcheck disable=SC2086
		batches "qemu:$v" $qs
	done
}

# lab_pass NAME WHAT: each of lab_items WHAT in a boot of its own, so that
# a lab that fails as a whole under emulation costs one item: its kernel
# stops, is reset or finds its memory corrupted (kvmlab's status 75), or
# a nested guest leaves its program (the inner runner's 75, see below).
# That boot's output is void and a fresh boot runs the item again: an
# item has up to three boots, the last of which counts however it ends,
# and a pass voids at most four boots (a lab that keeps failing ends).
# About one boot in 15 stalls (QEMU 10 emulating; one in 3 with 7.2):
# with a single boot again, an item that stalled twice would fail one
# run without KVM (15 boots) in 15.
#
# Nested paging: the stock pass has it (npt=1), as hosts do. The pass of
# every KVM test, where this machine has no KVM, runs on shadow paging
# (npt=0): with emulated nested paging, lifecycle.sh's nested guests
# corrupted the lab kernel's memory in 3 runs of 3 ("corrupted stack end
# detected"), prom_rules_live's and record.sh's ran code never given to
# them; on shadow paging they pass. --npt (make test-lab NPT=) chooses.
lab_pass() {
	local name=$1 what=$2 envs=() v var item boots voids=0 NPT=$NPT	# lab_boot reads it
	if [ -z "$NPT" ]; then
		NPT=0
		[ "$what" != all ] && NPT=1
	fi
	[ "$what" = stack ] && envs+=(--stack "$STACK")
	for v in $QEMU_VERSIONS; do
		[ "$v" = system ] && continue
		qemu_wrapper "$v"
		var=KVMSTATS_QEMU_${v//./_}
		envs+=(--env "$var=${!var}")
	done
	for item in $(lab_items "$what"); do
		VOID_RC=75 lab_boot "$name: $item" "$item" "${envs[@]}"
		boots=1
		while [ "$RUN_RC" = 75 ]; do
			voids=$((voids + 1))
			echo "# $name: emulation failed the lab during $item (status 75, why above): the lines above do not count; a fresh boot runs it again"
			boots=$((boots + 1))
			if [ "$boots" -lt 3 ] && [ "$voids" -lt 4 ]; then
				VOID_RC=75 lab_boot "$name: $item (again)" "$item" "${envs[@]}"
			else
				lab_boot "$name: $item (again, counted)" "$item" "${envs[@]}"
				break
			fi
		done
	done
}

# stack_pass SUITE: the stock pass of a Debian suite's stack (kvmlab
# --stack: its kernel, QEMU, libvirt and libraries; the project built
# there) with that suite's own QEMU only.
stack_pass() {
	local STACK=$1 QEMU_VERSIONS=system	# lab_pass and lab_boot read them
	lab_pass "lab: $1 stack" stack
}

# host_stack: this host's Debian suite (its stack is the plain lab's).
host_stack() { (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}"); }

# other_stacks: the stacks of KVMSTATS_TEST_STACKS but the host's own.
other_stacks() {
	local s host
	host=$(host_stack)
	for s in $STACKS; do
		[ "$s" = "$host" ] || echo "$s"
	done
}

# run_stacks: other_stacks, as make test (or --lab --stacks) runs them,
# where this user may: a stack's root is made with debootstrap and
# chroot, as root.
run_stacks() {
	[ "$MODE" = outer ] || [ "$WITH_STACKS" = 1 ] || return 0
	[ "$(id -u)" = 0 ] || return 0
	other_stacks
}

# stack_skips: run by another user than root, each stack is skipped,
# saying why.
stack_skips() {
	local s
	[ "$(id -u)" = 0 ] && return
	for s in $(other_stacks); do
		echo "ok - lab: $s stack # SKIP its root is made with debootstrap, as root (KVMSTATS_TEST_STACKS= runs none)"
		skipped=$((skipped + 1))
	done
}

# suite_qemu SUITE: the QEMU a Debian suite ships, as a version of the
# QEMU matrix (Debian 13's is 10.0 for its life), or nothing.
suite_qemu() { case $1 in trixie) echo 10.0 ;; esac; }

# stack_meets VERSION: does a stack this run passes meet QEMU VERSION on
# a stock KVM, as its own QEMU? The host's stock pass then leaves that
# QEMU to it: one stock pass per QEMU (the lab's 96 s of QEMU 10.0 on
# 6.1 left out, where trixie's pass runs it on 6.12).
stack_meets() {
	local s
	for s in $(run_stacks); do
		[ "$(suite_qemu "$s")" = "$1" ] && return 0
	done
	return 1
}

# lane_job JOB: one job of lanes: "stock" (this host's stock pass) or
# "stack:SUITE".
lane_job() {
	case $1 in
	stock) lab_pass "lab: stock-KVM pass" stock ;;
	stack:*) stack_pass "${1#stack:}" ;;
	esac
}

# lanes JOB...: the lab passes JOB, KVMSTATS_LAB_LANES (default 2) at a
# time, each lab then of one vCPU. Two labs of two vCPUs at once each
# ran 2-3 times slower than alone (one's vCPUs spinning on the other's,
# preempted); two of one vCPU each run a little slower, but end both in
# about the time of the longer (docs/testing.md, How long it takes).
# Each job's lines are printed whole, in the order given, once all ended.
lanes() {
	local max=${KVMSTATS_LAB_LANES:-2} i=0 j p f s job LAB_SMP=${LAB_SMP:-}
	[ "$max" -gt 1 ] && LAB_SMP=1
	for job in "$@"; do
		while [ "$(jobs -pr | wc -l)" -ge "$max" ]; do
			wait -n
		done
		i=$((i + 1))
		echo "# lane: $job starts after $SECONDS s${LAB_SMP:+, a lab of $LAB_SMP vCPU}"
		(
			passed=0 failed=0 skipped=0
			lane_job "$job"
			echo "$passed $failed $skipped" >"$LOG/lane$i.count"
		) >"$LOG/lane$i.out" 2>&1 &
	done
	wait
	for ((j = 1; j <= i; j++)); do
		cat "$LOG/lane$j.out"
		if read -r p f s 2>/dev/null <"$LOG/lane$j.count"; then
			passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
		else
			echo "not ok - lab: lane $j ended without its totals"
			failed=$((failed + 1))
		fi
	done
	[ "$i" = 0 ] || echo "# lanes: $i lab passes ended after $SECONDS s"
}

# labs WHAT: the lab passes after this host's own tests: WHAT (all: every
# KVM test, alone first, as its tests were timed; stock: the stock pass;
# none), then in lanes the stacks (the stock pass among them).
labs() {
	local s jobs=()
	[ "$1" = all ] && lab_pass "lab: every KVM test" all
	[ "$1" = stock ] && jobs+=(stock)
	for s in $(run_stacks); do
		jobs+=("stack:$s")
	done
	stack_skips
	lanes "${jobs[@]}"
}

# lab_boot NAME ITEM KVMLAB-OPTIONS...: one boot of the lab for ITEM
# (lockdown:ITEM: with the kernel locked down).
lab_boot() {
	local name=$1 item=$2 append=${KVMSTATS_LAB_APPEND:-} smp=()
	shift 2
	case $item in
	lockdown:*) item=${item#lockdown:} append="$append${append:+ }lockdown=integrity" ;;
	esac
	[ -n "${LAB_SMP:-}" ] && smp=(--smp "$LAB_SMP")	# (lanes), else kvmlab's
	run "$name" 3600 env KVMSTATS_LAB_APPEND="$append" \
		tests/lab/kvmlab --npt "$NPT" "${smp[@]}" --timeout 3500 "$@" \
		--env KVMSTATS_RUN_ITEM="$item" --env KVMSTATS_TEST_QEMUS="$QEMU_VERSIONS" \
		-- bash tests/run.sh --inner
}

# Inside the lab: this is a stock KVM; everything under emulation is
# slower, so the tests' time limits scale by KVMSTATS_TEST_SLOW.
if [ "$MODE" = inner ]; then
	export KVMSTATS_TEST_SLOW=${KVMSTATS_TEST_SLOW:-10}
	# tinyvmm appends here when its guest left its program (tinyvmm.h).
	export KVMSTATS_TEST_ASTRAY=$LOG/astray
fi
# kvm_suite [stock-kvm]: every test that needs a KVM (with stock-kvm,
# those that need a stock one too), on this machine's KVM.
kvm_suite() {
	local set=kvm
	[ -n "${1:-}" ] && set="kvm stock-kvm"
	unit_pass kvm
	san_qemu
	# shellcheck disable=SC2046
	script_pass $(for n in $set; do scripts "$n"; done)
	# shellcheck disable=SC2046
	qemu_pass $(for n in $set; do scripts "$n" qemu; done)
	SAN_QEMU=""
}

# inner_item ITEM: one of lab_items', inside the lab.
inner_item() {
	local t
	case $1 in
	units) unit_pass kvm ;;
	once:*)
		# shellcheck disable=SC2046
		script_once $(echo "${1#once:}" | tr ',' ' ') ;;
	plain:*)
		for t in $(echo "${1#plain:}" | tr ',' ' '); do
			run "$(basename "$t" .sh)" 1200 bash "$t"
		done ;;
	qemu:*:*)
		t=${1#qemu:}
		# shellcheck disable=SC2046
		QEMU_VERSIONS=${t%%:*} qemu_pass $(echo "${t#*:}" | tr ',' ' ') ;;
	*) echo "not ok - lab: unknown item $1"; failed=$((failed + 1)) ;;
	esac
}

case $MODE in
inner)
	stock_kvm || { echo "not ok - the lab has no stock KVM: $(kvm_module)"; exit 1; }
	inner_item "${KVMSTATS_RUN_ITEM:-}"
	;;
lab)
	if [ -n "$STACK" ] && [ "$STACK" != "$(host_stack)" ]; then
		stack_pass "$STACK"
	elif [ "$WITH_STACKS" = 1 ]; then
		labs "$LAB_WHAT"
	else
		lab_pass "lab: $LAB_WHAT" "$LAB_WHAT"
	fi
	;;
outer)
	unit_pass none
	# shellcheck disable=SC2046
	script_pass $(scripts none)
	if stock_kvm; then
		echo "# KVM tests: on this machine's stock KVM ($(kvm_module))"
		kvm_suite stock-kvm
		labs none
	elif have_kvm; then
		echo "# KVM tests: on this machine's KVM ($(kvm_module)), then a stock-KVM pass in the lab"
		kvm_suite
		labs stock
	else
		echo "# KVM tests: this machine has no /dev/kvm, so in the lab"
		labs all
	fi
	;;
esac

# Under emulation a nested tinyvmm guest was seen to run code it was never
# given (an MMIO read at a rip in its mailbox, an emulation failure at a
# rip in its data), an emulator's corruption of its state: the item is
# void, as for a stopped lab guest, and runs again in a fresh boot.
if [ "$MODE" = inner ] && [ -s "$KVMSTATS_TEST_ASTRAY" ]; then
	echo "# a nested guest left its program under emulation; this boot is void:"
	sed 's/^/#   /' "$KVMSTATS_TEST_ASTRAY"
	exit 75
fi

echo
echo "# logs: $LOG"
if [ "$MODE" = inner ]; then
	echo "# lab totals: $passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed, $skipped skipped"
fi
[ "$failed" = 0 ]
