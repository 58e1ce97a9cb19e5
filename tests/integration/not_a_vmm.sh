#!/bin/bash
# kvmstats-test: needs=none
# SPDX-License-Identifier: GPL-2.0-or-later
# A --pid that no command can read says why, the same in every command
# that reads VMs (dump, top, record, serve, plan): a process that holds
# no KVM VM fd is "not a VMM (it holds no KVM VM fd)", a pid that is gone
# is "no such process"; never errno's "Success", never a complaint of a
# source or of the memory map that hides the reason. Needs no /dev/kvm:
# the targets are a plain process, pid 1 and a pid that exited.
source "$(dirname "$0")/../lib.sh"
for t in curl; do
	command -v $t >/dev/null || { fail "not_a_vmm: $t is not installed (scripts/deps.sh test)"; exit 0; }
done

sleep 300 &
PLAIN=$!
track $PLAIN
true &
GONE=$!
wait $GONE

# says CMD... : run a one-shot command; its stderr in $TMP/err, rc in $rc.
says() {
	timeout 30 "$KVMSTATS" "$@" >"$TMP/out" 2>"$TMP/err"
	rc=$?
}

# one PID WHY LABEL: every command about PID says "pid PID: WHY".
one() {
	local pid=$1 why=$2 label=$3 cmd port sp
	for cmd in "dump" "top --once" "record --duration 1 --output $TMP/r.kvl" \
		"plan --interval 0" "plan --method stats --interval 0"; do
		says $cmd --pid "$pid"
		[ $rc = 1 ] && grep -qF "pid $pid: $why" "$TMP/err" && ! grep -q Success "$TMP/err" &&
			pass "not_a_vmm: ${cmd%% --output*} --pid ($label) exits 1 and says: $why" ||
			fail "not_a_vmm: ${cmd%% --output*} --pid ($label) says: $why" "rc $rc: $(head -c 300 "$TMP/err")"
	done
	# serve keeps serving (a VMM may come later) and says why once.
	port=$(free_port)
	"$KVMSTATS" serve --pid "$pid" --listen "127.0.0.1:$port" --ready "$TMP/ready" \
		>/dev/null 2>"$TMP/serve.err" &
	sp=$!
	track $sp
	if wait_file "$TMP/ready" 10 && curl -sf "http://127.0.0.1:$port/metrics" >/dev/null &&
		grep -qF "serve: pid $pid: $why" "$TMP/serve.err" && ! grep -q Success "$TMP/serve.err"; then
		pass "not_a_vmm: serve --pid ($label) serves and says: $why"
	else
		fail "not_a_vmm: serve --pid ($label) serves and says: $why" "$(head -c 300 "$TMP/serve.err")"
	fi
	kill $sp
	wait $sp 2>/dev/null
	rm -f "$TMP/ready"
}

one $PLAIN "not a VMM (it holds no KVM VM fd)" "a sleep"
one 1 "not a VMM (it holds no KVM VM fd)" "pid 1"
one $GONE "no such process" "exited"
