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
	if "$@"; then pass "$name"; else fail "$name" "command failed: $*"; fi
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
