#!/bin/bash
# What kvmstats cannot see, it says, with why: a user who may not look at
# other users' processes' fds is told by list, top -1, plan and serve that
# their VMMs are hidden (never "no VMM on this host"), and a --pid of one
# of them says why it cannot be read. An explicit --qmp that cannot be
# used is an error, never a quiet fall back to another source.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm
source "$(dirname "$0")/../lib.sh"
require_kvm hidden

if ! command -v setpriv >/dev/null || [ "$(id -u)" != 0 ]; then
	skip hidden "needs root and setpriv (to become an unprivileged user)"
	exit 0
fi
chmod 755 "$TMP"
# nobody must be able to run the CLI under test.
if ! setpriv --reuid=nobody --regid=nogroup --clear-groups "$KVMSTATS" --version >/dev/null 2>&1; then
	skip hidden "user nobody cannot run $KVMSTATS"
	exit 0
fi
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$KVMSTATS" "$@"; }

# A root-owned VMM, with an in-kernel irqchip.
start_vmm --workload halt --name rootvm || { fail "tinyvmm started"; exit 0; }
P=$VMM_PID

as_nobody list >"$TMP/list.out" 2>"$TMP/list.err"
rc=$?
sed 's/^/# /' "$TMP/list.err"
[ "$rc" = 0 ] && pass "list as nobody runs (rc 0)" || fail "list as nobody runs" "rc $rc"
check "list as nobody: a warning says other users' VMMs are hidden, and why" \
	grep -q "cannot be seen by uid $(id -u nobody) (not root, no CAP_SYS_PTRACE)" "$TMP/list.err"
check "list as nobody: never 'no VMM on this host'" \
	bash -c "! grep -q 'no VMM on this host' '$TMP/list.out'"
check "list as nobody: says none is visible to it" \
	grep -q "no VMM visible to uid" "$TMP/list.out"

as_nobody list --pid "$P" >/dev/null 2>"$TMP/pid.err"
rc=$?
[ "$rc" = 1 ] && pass "list --pid ROOT_VMM as nobody fails (rc 1)" || fail "list --pid ROOT_VMM as nobody fails" "rc $rc"
check "list --pid ROOT_VMM as nobody: its fds cannot be seen, not 'not a VMM'" \
	grep -q "pid $P: its fds cannot be seen" "$TMP/pid.err"

as_nobody -1 --interval 0.2 >"$TMP/once.out" 2>"$TMP/once.err"
check "-1 as nobody: warns that other users' VMMs are hidden" \
	grep -q "cannot be seen by uid" "$TMP/once.err"
as_nobody dump >"$TMP/dump.out" 2>"$TMP/dump.err"
check "dump as nobody: warns that other users' VMMs are hidden" \
	grep -q "cannot be seen by uid $(id -u nobody)" "$TMP/dump.err"
as_nobody record --log --count 1 >"$TMP/rec.out" 2>"$TMP/rec.err"
check "record as nobody: warns that other users' VMMs are hidden" \
	grep -q "cannot be seen by uid $(id -u nobody)" "$TMP/rec.err"
as_nobody plan --methods pagemap >"$TMP/plan.out" 2>"$TMP/plan.err" ||
	as_nobody plan >"$TMP/plan.out" 2>"$TMP/plan.err"
check "plan as nobody: warns that other users' VMMs are hidden" \
	grep -q "cannot be seen by uid" "$TMP/plan.err"

mkdir -m 777 "$TMP/rw"
setpriv --reuid=nobody --regid=nogroup --clear-groups "$KVMSTATS" serve \
	--listen 127.0.0.1:0 --ready "$TMP/rw/addr" 2>"$TMP/serve.err" &
S=$!
track "$S"
wait_until "$(slow 100)" test -s "$TMP/rw/addr"
check "serve as nobody: warns that other users' VMMs are hidden" \
	grep -q "cannot be seen by uid" "$TMP/serve.err"
curl -sS --max-time 20 "http://$(cat "$TMP/rw/addr")/metrics" >"$TMP/m.txt" 2>"$TMP/curl.err" || sed "s/^/# /" "$TMP/curl.err"
grep -E "^kvmstats_hidden" "$TMP/m.txt" | sed "s/^/# /"
check "serve as nobody: kvmstats_hidden_processes > 0, kvmstats_hidden_vmms >= 0" \
	awk '/^kvmstats_hidden_processes / && $2 > 0 { p = 1 } /^kvmstats_hidden_vmms / { v = 1 }
		END { exit !(p && v) }' "$TMP/m.txt"
kill "$S" 2>/dev/null

# An explicit --qmp that cannot be used: an error, not another source.
"$KVMSTATS" dump --pid "$P" --qmp "$TMP/nosock" >"$TMP/q.out" 2>"$TMP/q.err"
rc=$?
[ "$rc" != 0 ] && grep -q -- "--qmp $TMP/nosock: No such file" "$TMP/q.err" &&
	pass "dump --qmp NO_SUCH_SOCKET fails (rc $rc) and says why" ||
	fail "dump --qmp NO_SUCH_SOCKET fails and says why" "rc $rc: $(cat "$TMP/q.err")"
python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.close()' "$TMP/dead.sock"
"$KVMSTATS" dump --pid "$P" --qmp "$TMP/dead.sock" >"$TMP/q.out" 2>"$TMP/q.err"
rc=$?
[ "$rc" = 1 ] && grep -Eq "dead.sock: (Connection refused|.*is not read through it)" "$TMP/q.err" && [ ! -s "$TMP/q.out" ] &&
	pass "dump --qmp DEAD_SOCKET fails (rc 1), no table from another source" ||
	fail "dump --qmp DEAD_SOCKET fails, no table from another source" "rc $rc: $(cat "$TMP/q.err")"

# The live screen, as nobody: not just "no VM found".
if command -v tmux >/dev/null; then
	TMS=kshid-$$
	tmux -L "$TMS" new-session -d -s hid -x 100 -y 30 \
		"setpriv --reuid=nobody --regid=nogroup --clear-groups $KVMSTATS top"
	seen=1
	wait_until "$(slow 50)" bash -c "tmux -L $TMS capture-pane -p -t hid | grep -q 'VMMs are hidden from uid'" || seen=0
	tmux -L "$TMS" capture-pane -p -t hid | grep -v '^$' | sed 's/^/# /' | tail -4
	tmux -L "$TMS" kill-server 2>/dev/null
	[ "$seen" = 1 ] && pass "top's screen as nobody says other users' VMMs are hidden" ||
		fail "top's screen as nobody says other users' VMMs are hidden"
else
	skip "top's screen as nobody" "tmux is not installed"
fi
