#!/bin/bash
# kvmstats-test: needs=kvm qemu
# record gives up, after start-up, every capability its refreshes do not
# need (as serve does): CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (the fd and
# attach sources, another user's /proc/PID/fd), and CAP_DAC_OVERRIDE only
# when the qmp source may be used (another user's QMP socket); bounding
# set included, and no_new_privs. With that it still picks up, at a
# refresh, VMMs of another user that start after it: one holding stats
# fds (fd source) and a QEMU (qmp source).
source "$(dirname "$0")/../lib.sh"
require_kvm "record_caps"
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
	skip "record_caps" "needs root and setpriv"
	exit 0
fi

# caps PID FIELD: a line of /proc/PID/status.
caps() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
# caps_dropped PID: its effective set is no longer the test's own.
caps_dropped() { [ "$(caps "$1" CapEff)" != "$(caps $$ CapEff)" ]; }

# record_bg NAME ARGS...: record in the background; sets R.
record_bg() {
	local name=$1
	shift
	"$KVMSTATS" record --output "$TMP/$name.log" --interval 0.2 --refresh 0.5 "$@" \
		2>"$TMP/$name.err" &
	R=$!
	track $R
	sleep 1
	# It drops them at its start, the effective set last (one capset),
	# which under emulation took longer than the second above.
	wait_until "$(slow 50)" caps_dropped "$R"
}

record_bg auto --duration 12
check "record (source auto) keeps CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE ($(caps $R CapEff))" \
	test "$(caps $R CapEff)" = 0000000000080006 -a "$(caps $R CapPrm)" = 0000000000080006
check "and its bounding set no more ($(caps $R CapBnd))" test "$(caps $R CapBnd)" = 0000000000080006
check "no_new_privs is set" test "$(caps $R NoNewPrivs)" = 1
AUTO=$R
record_bg fd --source fd --duration 8
check "record --source fd keeps CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH only ($(caps $R CapEff))" \
	test "$(caps $R CapEff)" = 0000000000080004 -a "$(caps $R CapBnd)" = 0000000000080004
FD=$R

# Another user's VMMs, started after record: a tinyvmm holding its stats
# fds, and a QEMU with its QMP socket in a directory of its own (0700).
setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps=+dac_override \
	--ambient-caps=+dac_override "$TINYVMM" --hold-stats --ready "$TMP/nb.ready" \
	--timeout 60 2>/dev/null &
NB=$!
track $NB
mkdir -m 700 "$TMP/nbq"
chown 65534:65534 "$TMP/nbq"
chmod 755 "$TMP"
setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps=+dac_override \
	--ambient-caps=+dac_override qemu-system-x86_64 -enable-kvm -m 64 -display none \
	-nodefaults -no-user-config -name guest=nbq \
	-qmp "unix:$TMP/nbq/q.sock,server=on,wait=off" -kernel "$MBGUEST" -append "" \
	2>"$TMP/nbq.log" &
QP=$!
track $QP
wait_file "$TMP/nb.ready" 20 || fail "tinyvmm as nobody started"
wait $FD
wait $AUTO
pids() { "$KVMSTATS" replay --json "$1" 2>/dev/null | jq -r '.vms[].pid' | sort -u; }
check "record --source fd, without the other capabilities, picked up another user's tinyvmm" \
	grep -qx "$NB" <(pids "$TMP/fd.log")
check "record (auto) picked up another user's tinyvmm" grep -qx "$NB" <(pids "$TMP/auto.log")
check "and another user's QEMU, over its QMP socket" grep -qx "$QP" <(pids "$TMP/auto.log")
