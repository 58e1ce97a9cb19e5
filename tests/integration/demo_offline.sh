#!/bin/bash
# kvmstats-test: needs=none
# The first run on a host without /dev/kvm (simulated: a mount namespace
# whose /dev has no kvm): `make demo` in a 100x30 terminal plays the
# shipped recording, looping, says it is one and how to see live VMs, and
# quits on q; without a terminal the demo names the cause first; top's
# empty screen does not send the user to a demo that cannot run.
. "$(dirname "$0")/../lib.sh"

REC=$ROOT/dist/demo/recording.kvmlog
check "the recording is shipped and reads as a log" \
	"$KVMSTATS" replay --json "$REC"

# The simulation itself must hold, or nothing below means anything.
without_kvm sh -c '[ ! -e /dev/kvm ] && echo x >/dev/null'
rc=$?
if [ $rc != 0 ]; then
	fail "a mount namespace without /dev/kvm" "status $rc (needs root and unshare)"
	exit 0
fi
pass "a mount namespace without /dev/kvm"

# ---- without a terminal: the cause first -----------------------------------
without_kvm "$KVMSTATS" demo </dev/null >"$TMP/out" 2>"$TMP/err"
check "demo without a terminal or /dev/kvm: status 1" test $? = 1
check "its first line is the cause: no /dev/kvm" \
	grep -q '^kvmstats: demo: /dev/kvm: No such file or directory' <(head -1 "$TMP/err")
check "then what to do: load the module, nested virtualization" \
	grep -q 'kvm_intel or kvm_amd.*nested virtualization' <(sed -n 2p "$TMP/err")
check "then the recording it would play on a terminal" \
	grep -qF "kvmstats top --replay $(realpath "$REC") --loop" "$TMP/err"
without_kvm "$KVMSTATS" demo --no-top </dev/null >/dev/null 2>"$TMP/err"
check "demo --no-top without /dev/kvm: the same cause first" \
	grep -q '^kvmstats: demo: /dev/kvm: ' <(head -1 "$TMP/err")

# An installed kvmstats finds the installed recording.
make -s -C "$ROOT" install PREFIX=/usr DESTDIR="$TMP/dest" >"$TMP/install.log" 2>&1
check "make install installs the recording" \
	cmp -s "$REC" "$TMP/dest/usr/share/kvmstats/demo/recording.kvmlog"
without_kvm "$TMP/dest/usr/bin/kvmstats" demo </dev/null >/dev/null 2>"$TMP/err"
check "an installed kvmstats offers the installed recording" \
	grep -qF "kvmstats top --replay $TMP/dest/usr/share/kvmstats/demo/recording.kvmlog --loop" \
	"$TMP/err"

# ---- top's empty screen -------------------------------------------------------
without_kvm "$KVMSTATS" top --once --interval 0.1 --name '^no such VM$' >"$TMP/top" 2>&1
check "top's empty list says there is no /dev/kvm and offers the recording" \
	grep -qx "no VM found: this host has no /dev/kvm; 'kvmstats demo' plays a recording" \
	"$TMP/top"
KVMSTATS_DEMO_RECORDING=$TMP/none without_kvm "$KVMSTATS" top --once --interval 0.1 \
	--name '^no such VM$' >"$TMP/top" 2>&1
check "without a recording either, it does not offer the demo" \
	grep -q "^no VM found: this host has no /dev/kvm (load kvm_intel or kvm_amd)$" "$TMP/top"

# ---- make demo in a 100x30 terminal ----------------------------------------------
# The default build runs through `make demo`, another one (ASan) directly.
if [ "$KVMSTATS" -ef "$ROOT/build/kvmstats" ]; then
	run="make -s --no-print-directory -C '$ROOT' demo"
else
	run="'$KVMSTATS' demo"
fi
SOCK=$TMP/tmux.sock
ms() { echo $(($(date +%s%N) / 1000000)); }
t0=$(ms)
without_kvm tmux -S "$SOCK" new-session -d -x 100 -y 30 \
	"$run 2>'$TMP/demo.err'; echo \$? >'$TMP/demo.part'; mv '$TMP/demo.part' '$TMP/demo.rc'; sleep 30"
rc=$?
check "tmux started in the namespace" test $rc = 0
tmux_pid=$(tmux -S "$SOCK" display-message -p '#{pid}' 2>/dev/null)
[ -n "$tmux_pid" ] && track "$tmux_pid"

# Screens over (at most) 15 s from the start: each VM row's EXITS/s.
: >"$TMP/rates"
while [ $(($(ms) - t0)) -lt 15000 ]; do
	tmux -S "$SOCK" capture-pane -p >"$TMP/screen" 2>/dev/null
	grep -q 'RECORDING' "$TMP/screen" && cp "$TMP/screen" "$TMP/last"
	# "    PID VM  SOURCE VCPUS EXITS/s ..." rows
	awk '$1 ~ /^[0-9]+$/ && $3 ~ /^(fd|qmp|attach|libvirt|debugfs)$/ &&
		$5 ~ /^[0-9.]+[kMG]?$/ { print $2, $5 }' \
		"$TMP/screen" >>"$TMP/rates"
	changing=$(sort -u "$TMP/rates" | awk '{ n[$1]++ } END { c = 0; for (v in n) if (n[v] > 1) c++; print c }')
	[ "$changing" -ge 3 ] && break
	sleep 0.5
done
elapsed=$(($(ms) - t0))
check "within 15 s, at least three VMs with changing rates ($changing VMs, $elapsed ms)" \
	test "$changing" -ge 3
check "the header says it is a recording" \
	grep -q '^kvmstats top RECORDING, not live' "$TMP/last"
check "the screen says how to see live VMs" \
	grep -q 'no /dev/kvm.*Live VMs: modprobe kvm_intel or kvm_amd.*q quits' "$TMP/last"
check "it fits 100x30" test "$(wc -l <"$TMP/last")" -le 30 -a \
	"$(awk '{ if (length > m) m = length } END { print m + 0 }' "$TMP/last")" -le 100

tmux -S "$SOCK" send-keys q
wait_file "$TMP/demo.rc" 5
check "q quits, status 0" test "$(cat "$TMP/demo.rc" 2>/dev/null)" = 0
check "after it, the cause and what to do are said on stderr" \
	grep -q 'that was a recording.*/dev/kvm: No such file' "$TMP/demo.err"
tmux -S "$SOCK" kill-server 2>/dev/null

# A /dev/kvm that is not KVM (here /dev/null bound over it): the demo
# plays the recording too, instead of failing to start guests.
SOCK2=$TMP/tmux2.sock
with_kvm_not_kvm tmux -S "$SOCK2" new-session -d -x 100 -y 30 "$run; sleep 30"
rc=$?
check "tmux started with a /dev/kvm that is not KVM" test $rc = 0
tmux_pid=$(tmux -S "$SOCK2" display-message -p '#{pid}' 2>/dev/null)
[ -n "$tmux_pid" ] && track "$tmux_pid"
wait_until "$(slow 100)" sh -c "tmux -S '$SOCK2' capture-pane -p 2>/dev/null | grep -q 'RECORDING, not live'"
check "a /dev/kvm that is not KVM: the demo plays the recording" \
	sh -c "tmux -S '$SOCK2' capture-pane -p | grep -q 'RECORDING, not live'"
tmux -S "$SOCK2" kill-server 2>/dev/null
