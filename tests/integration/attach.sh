#!/bin/bash
# The attach source: stats fds for VMMs that hold none, obtained by making
# the VMM call KVM_GET_STATS_FD itself (ptrace). Every value read this way
# is the kernel's; the VMM keeps running with its fd table as it was and
# no thread left stopped or traced; a VMM under seccomp is refused unless
# forced.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu
source "$(dirname "$0")/../lib.sh"
require_kvm "attach"

K=1000

# fd_table PID: "fd target" lines of the fds that stay open over three
# listings 0.25 s apart, sorted: other kvmstats on the host may make a VMM
# open fds for a moment (query-stats over QMP, an attach), a leak stays.
fd_list() {
	local f l
	for f in /proc/"$1"/fd/*; do
		l=$(readlink "$f") && echo "${f##*/} $l"
	done | sort
}
fd_table() {
	fd_list "$1" >"$TMP/fdl.1"
	sleep 0.25
	fd_list "$1" >"$TMP/fdl.2"
	sleep 0.25
	fd_list "$1" | comm -12 - "$TMP/fdl.1" | comm -12 - "$TMP/fdl.2" | sort -n
}

# jqe ARGS... FILE: jq -e on FILE, which must hold something (jq -e says
# yes to an empty input).
jqe() {
	[ -s "${!#}" ] && jq -e "$@" >/dev/null
}

# untouched PID: no thread traced or in a tracing stop.
untouched() {
	local s
	for s in /proc/"$1"/task/*/status; do
		grep -q '^TracerPid:[[:space:]]*0$' "$s" || return 1
		grep -q '^State:[[:space:]]*[tT]' "$s" && return 1
	done
	return 0
}

# qemu_running SOCK: QEMU's human monitor says "VM status: running". Not
# QMP: a host-wide kvmstats (another test) may hold QEMU's one QMP client
# slot, and `qmp` would then get no answer.
qemu_running() {
	local i
	for i in 1 2 3; do
		{ echo "info status"; sleep 0.5; } |
			timeout 10 socat - "UNIX-CONNECT:$1" >"$TMP/status" 2>&1
		grep -q 'VM status: running' "$TMP/status" && return 0
		grep -q 'VM status' "$TMP/status" && break
	done
	sed 's/^/# /' "$TMP/status"
	return 1
}

# same_fds NAME PID BEFORE: the VMM's fd table equals BEFORE.
same_fds() {
	fd_table "$2" >"$TMP/fds.after"
	if cmp -s "$3" "$TMP/fds.after"; then
		pass "$1"
	else
		diff "$3" "$TMP/fds.after" | sed 's/^/# /' | head -10
		fail "$1"
	fi
}

# --- (a1) tinyvmm holding stats fds, frozen guest: every value equals
# what the kernel gave the VMM through its own fds (saved at ready).
start_vmm --vms 2 --vcpus 2 --exits $K --pages 16 --hold-stats --save "$TMP/kernel" ||
	{ fail "tinyvmm started"; exit 1; }
P=$VMM_PID
fd_table "$P" >"$TMP/fds.before"
"$KVMSTATS" dump --pid "$P" --source attach --json >"$TMP/a1.json"
check "a1: dump --source attach exits 0" test $? = 0
check "a1: source fd, two VMs of two vCPUs, kernel ids" jqe --argjson p "$P" \
	'(.vms | length) == 2 and all(.vms[]; .source == "fd" and
	 .id == "kvm-\($p)" and (.vcpus | length) == 2 and
	 all(.vcpus[]; .id == "kvm-\($p)/vcpu-\(.index)"))' "$TMP/a1.json"
jq -S '[.vms | to_entries[] | .key as $i | {key: "vm\($i)", value: .value.stats},
	(.value.vcpus[] | {key: "vm\($i)-vcpu\(.index)", value: .stats})] |
	from_entries' "$TMP/a1.json" >"$TMP/a"
files=()
for f in "$TMP"/kernel/*.bin; do files+=(--file "$f"); done
"$KVMSTATS" dump --json "${files[@]}" | jq -S '[.files[] |
	{key: (.path | split("/") | last | rtrimstr(".bin")), value: .stats}] |
	from_entries' >"$TMP/b"
if [ -s "$TMP/b" ] && cmp -s "$TMP/a" "$TMP/b"; then
	pass "a1: every stat equals the kernel's ($(jq '[.[] | length] | add' "$TMP/a") stats of $(jq length "$TMP/a") targets)"
else
	diff "$TMP/a" "$TMP/b" | sed 's/^/# /' | head -20
	fail "a1: every stat equals the kernel's"
fi
same_fds "a1: fd table as before" "$P" "$TMP/fds.before"
check "a1: no thread left traced or stopped" untouched "$P"
check "a1: tinyvmm still runs" kill -0 "$P"
# The frozen guest's deterministic counters, for a2.
emul=$(jq '.["vm0-vcpu0"].insn_emulation' "$TMP/b")

# --- (a2) the same guest in a tinyvmm that holds no stats fds: --attach
# (auto) reaches it only through attach; its vCPU threads are gone, so
# their ioctls run in the main thread.
start_vmm --vcpus 2 --exits $K --pages 16 || { fail "tinyvmm started"; exit 1; }
P=$VMM_PID
fd_table "$P" >"$TMP/fds.before"
check "a2: it holds no stats fd" bash -c "! grep -q anon_inode:kvm-.*stats $TMP/fds.before"
"$KVMSTATS" dump --pid "$P" --attach --json >"$TMP/a2.json"
check "a2: dump --attach exits 0" test $? = 0
check "a2: source fd, two vCPUs" jqe \
	'.vms[0].source == "fd" and (.vms[0].vcpus | length) == 2' "$TMP/a2.json"
check "a2: exits, halts and emulated instructions are the guest's" jqe \
	--argjson k $K --argjson e "${emul:-null}" \
	'all(.vms[0].vcpus[].stats; .exits >= $k + 1 and .exits <= $k + 50 and
	 .halt_exits == 1 and .insn_emulation == $e)' "$TMP/a2.json"
check "a2: histograms and VM stats are there" jqe \
	'(.vms[0].stats | length) >= 10 and
	 all(.vms[0].vcpus[].stats; (.halt_wait_hist | length) == 32)' "$TMP/a2.json"
same_fds "a2: fd table as before" "$P" "$TMP/fds.before"
check "a2: no thread left traced or stopped" untouched "$P"
"$KVMSTATS" dump --pid "$P" --json >"$TMP/noattach.json" 2>/dev/null
check "a2: without --attach, attach is not used" \
	bash -c "! grep -q '\"source\": *\"fd\"' $TMP/noattach.json"

# --- (a3) vCPUs that sit in KVM_RUN (in-kernel irqchip, long halts):
# each vCPU's ioctl runs in its own thread, whose KVM_RUN we interrupt.
# The halts are 2 s, the bound 600 ms: a dump that waited for a halt to
# end would take up to 2 s more, from wherever in a halt it came; the
# bound leaves room for a loaded machine, where the whole dump took 264
# ms of a 250 ms bound beside 300 ms halts once. Under emulation the
# halts are tinyvmm's longest (4 s, its guest's APIC timer in ns) and the
# bound 2.5 s, which no lab run has exceeded.
HALT_US=2000000 BOUND_MS=600
[ "$SLOW" -gt 1 ] && HALT_US=4000000 BOUND_MS=$(slow 250)
start_vmm --vcpus 2 --irqchip --workload dirty --pages 1 --halts 1 \
	--halt-us "$HALT_US" || { fail "tinyvmm --irqchip started"; exit 1; }
P=$VMM_PID
sleep 0.5
fd_table "$P" >"$TMP/fds.before"
n_in_run=$(grep -l '^16 0x[0-9a-f]* 0xae80 .* 0x[1-9a-f][0-9a-f]*$' \
	/proc/"$P"/task/*/syscall 2>/dev/null | wc -l)
echo "# vCPU threads seen in KVM_RUN: $n_in_run"
start=$(date +%s%N)
"$KVMSTATS" dump --pid "$P" --source attach --json >"$TMP/a3.json"
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
check "a3: dump --source attach exits 0 (${ms} ms)" test $rc = 0
check "a3: source fd, two vCPUs with stats" jqe \
	'.vms[0].source == "fd" and (.vms[0].vcpus | length) == 2 and
	 all(.vms[0].vcpus[].stats; .exits > 0)' "$TMP/a3.json"
check "a3: the attach did not wait for a halt to end" test "$ms" -lt "$BOUND_MS"
same_fds "a3: fd table as before" "$P" "$TMP/fds.before"
check "a3: no thread left traced or stopped" untouched "$P"
sleep "$(awk -v h="$HALT_US" 'BEGIN { print h / 1e6 + 0.5 }')"
"$KVMSTATS" dump --pid "$P" --source attach --json >"$TMP/a3b.json"
check "a3: its vCPUs kept running (halt_exits grew)" jq -e -n \
	--slurpfile a "$TMP/a3.json" --slurpfile b "$TMP/a3b.json" \
	'[$a[0].vms[0].vcpus[].stats.halt_exits] as $x |
	 [$b[0].vms[0].vcpus[].stats.halt_exits] as $y |
	 $y[0] > $x[0] and $y[1] > $x[1]'
check "a3: tinyvmm still runs" kill -0 "$P"

# --- (b) real QEMU (7.2 holds no stats fds): vCPU 0 busy rewriting
# memory, vCPU 1 halted in the kernel (never started by the guest).
if [ ! -r "$MBGUEST" ]; then
	skip "b: QEMU" "$MBGUEST missing (make build)"
else
	QEMU_SMP=2 start_qemu x "exits=$K dirty=1M dirtyloop=1" \
		-chardev "socket,id=hmp,path=$TMP/x.hmp,server=on,wait=off" \
		-mon chardev=hmp,mode=readline ||
		{ fail "b: QEMU started"; exit 1; }
	Q=$QEMU_PID
	fd_table "$Q" >"$TMP/fds.before"
	"$KVMSTATS" dump --pid "$Q" --attach --source attach --json >"$TMP/b.json"
	check "b: dump --attach --source attach exits 0" test $? = 0
	check "b: source fd, name x, two vCPUs named by their threads" jqe \
		--argjson p "$Q" '.vms[0].source == "fd" and .vms[0].name == "x" and
		 .vms[0].id == "kvm-\($p)" and (.vms[0].vcpus | length) == 2 and
		 all(.vms[0].vcpus[]; .id | test("^kvm-[0-9]+/vcpu-[01]$"))' "$TMP/b.json"
	check "b: vCPU stats present" jqe \
		'all(.vms[0].vcpus[].stats; (.exits | type) == "number" and
		 (.halt_wait_hist | length) == 32) and
		 (.vms[0].vcpus[] | select(.index == 0) | .stats.exits) >= 1000' \
		"$TMP/b.json"
	same_fds "b: QEMU's fd table as before" "$Q" "$TMP/fds.before"
	check "b: no QEMU thread left traced or stopped" untouched "$Q"
	check "b: QEMU says it is running" qemu_running "$TMP/x.hmp"
	sleep 1
	"$KVMSTATS" dump --pid "$Q" --source attach --json >"$TMP/b2.json"
	check "b: its vCPU counters kept counting" jq -e -n \
		--slurpfile a "$TMP/b.json" --slurpfile b "$TMP/b2.json" \
		'($a[0].vms[0].vcpus[] | select(.index == 0) | .stats.exits) <
		 ($b[0].vms[0].vcpus[] | select(.index == 0) | .stats.exits)'
	same_fds "b: fd table as before after a second attach" "$Q" "$TMP/fds.before"
	check "b: QEMU still runs" kill -0 "$Q"

	# --- (c) seccomp: refused without --force, with a clear reason.
	QEMU_SMP=1 start_qemu sb "" -sandbox on || { fail "c: QEMU started"; exit 1; }
	S=$QEMU_PID
	fd_table "$S" >"$TMP/fds.before"
	"$KVMSTATS" dump --pid "$S" --attach --source attach --json \
		>"$TMP/c.json" 2>"$TMP/c.err"
	check "c: -sandbox on refused: status 1" test $? = 1
	echo "# $(head -1 "$TMP/c.err")"
	check "c: one clear line: seccomp, and --force" grep -q 'seccomp.*--force' "$TMP/c.err"
	same_fds "c: fd table untouched" "$S" "$TMP/fds.before"
	check "c: no thread traced or stopped" untouched "$S"
	"$KVMSTATS" dump --pid "$S" --attach --source attach --force --json \
		>"$TMP/c2.json" 2>"$TMP/c2.err"
	check "c: --force attaches (QEMU's filter allows ioctl and close)" jqe \
		'.vms[0].source == "fd" and (.vms[0].vcpus | length) == 1' "$TMP/c2.json"
	same_fds "c: fd table as before after --force" "$S" "$TMP/fds.before"
	check "c: QEMU still runs" kill -0 "$S"
fi
