# Shared helpers for the integration tests (sourced). Each test prints TAP
# lines: "ok - NAME", "not ok - NAME: why", "ok - NAME # SKIP why";
# tests/run.sh counts them.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KVMSTATS=${KVMSTATS:-$ROOT/build/kvmstats}
TINYVMM=${TINYVMM:-$ROOT/build/tinyvmm}
TMP=$(mktemp -d /tmp/kvmstats-test.XXXXXX)
_pids=""

pass() { echo "ok - $1"; }
fail() { echo "not ok - $1${2:+: $2}"; }
skip() { echo "ok - $1 # SKIP $2"; }
# check NAME CMD...: pass when CMD succeeds.
check() {
	local name=$1
	shift
	if "$@" >/dev/null; then pass "$name"; else fail "$name" "command failed: $*"; fi
}

have_kvm() { [ -c /dev/kvm ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]; }
# Skip the whole file, visibly, when /dev/kvm is missing.
require_kvm() {
	if ! have_kvm; then
		skip "${1:-$(basename "$0")}" "/dev/kvm is not available"
		exit 0
	fi
}

# Remember a background process so that cleanup stops it.
track() { _pids="$_pids $1"; }

cleanup() {
	local p
	for p in $_pids; do kill -TERM "$p" 2>/dev/null; done
	for p in $_pids; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	rm -rf "$TMP"
}
trap cleanup EXIT

# wait_file FILE [SECONDS]: wait until FILE exists.
wait_file() {
	local i
	for i in $(seq $((${2:-10} * 10))); do
		[ -e "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

# Start tinyvmm in the background with --ready; sets VMM_PID.
start_vmm() {
	local ready=$TMP/ready.$RANDOM
	"$TINYVMM" --ready "$ready" --timeout 300 "$@" &
	VMM_PID=$!
	track "$VMM_PID"
	wait_file "$ready" 20 || { echo "# tinyvmm $* did not get ready"; return 1; }
}

MBGUEST=${MBGUEST:-$ROOT/build/mbguest.elf}

# launch_qemu NAME APPEND [QEMU ARGS...]: start a real QEMU VM running our
# multiboot guest, with a QMP socket, without waiting for it (so that
# several VMs boot in parallel). Sets QEMU_PID, QMP_SOCK ($TMP/NAME.qmp),
# SERIAL ($TMP/NAME.serial); QEMU's stderr goes to $TMP/NAME.log.
launch_qemu() {
	local name=$1 append=$2
	shift 2
	QMP_SOCK=$TMP/$name.qmp
	SERIAL=$TMP/$name.serial
	qemu-system-x86_64 -enable-kvm -m "${QEMU_MEM:-256}" -smp "${QEMU_SMP:-1}" \
		-display none -nodefaults -no-user-config -name "guest=$name" \
		-serial "file:$SERIAL" -qmp "unix:$QMP_SOCK,server=on,wait=off" \
		-kernel "$MBGUEST" -append "$append" "$@" 2>>"$TMP/$name.log" &
	QEMU_PID=$!
	track "$QEMU_PID"
}

# wait_ready NAME PID [SECONDS]: wait (bounded, default 30 s) for READY on
# the guest's serial port while QEMU lives.
wait_ready() {
	local i
	for i in $(seq $((${3:-30} * 10))); do
		grep -q READY "$TMP/$1.serial" 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || break
		sleep 0.1
	done
	echo "# QEMU $1 did not print READY"
	sed 's/^/# /' "$TMP/$1.log" 2>/dev/null | tail -5
	return 1
}

# start_qemu NAME APPEND [QEMU ARGS...]: launch_qemu, then wait for READY.
start_qemu() {
	launch_qemu "$@" && wait_ready "$1" "$QEMU_PID"
}

# qmp SOCK JSON...: send QMP commands (after qmp_capabilities), print the
# replies, one per line.
qmp() {
	local sock=$1
	shift
	{
		echo '{"execute":"qmp_capabilities"}'
		for c in "$@"; do echo "$c"; done
		sleep 0.5
	} | timeout 10 socat - "UNIX-CONNECT:$sock" | grep -v '"QMP"'
}

# shows_safely FILE: FILE is valid UTF-8 without a control character but
# newline and tab (no ESC, BEL, DEL, C1 CSI...): what names may put on a
# terminal or in JSON after kvmstats escaped them.
shows_safely() {
	iconv -f UTF-8 -t UTF-8 "$1" >/dev/null 2>&1 &&
		! LC_ALL=C grep -qaP '[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]' "$1"
}
