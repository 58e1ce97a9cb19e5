# shellcheck shell=bash
# Shared helpers for the integration tests (sourced). Each test prints TAP
# lines: "ok - NAME", "not ok - NAME: why", "ok - NAME # SKIP why";
# tests/run.sh counts them.
# SPDX-License-Identifier: GPL-2.0-or-later
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
# A KVM test where there is no KVM fails, visibly: tests/run.sh runs each
# test where there is one (this machine's, or the lab's: tests/lab/kvmlab).
require_kvm() {
	if ! have_kvm; then
		fail "${1:-$(basename "$0")}" "/dev/kvm is not available: run it in the lab (tests/lab/kvmlab -- bash $0)"
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

# wait_until TRIES CMD...: run CMD every 0.1 s until it succeeds, at most
# TRIES times; 1 if it never did.
wait_until() {
	local tries=$1
	shift
	for _ in $(seq "$tries"); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}

# wait_file FILE [SECONDS]: wait until FILE exists.
wait_file() { wait_until $((${2:-10} * 10)) test -e "$1"; }

# Start tinyvmm in the background with --ready; sets VMM_PID and VMM_READY
# (its ready file). It exits by itself after 300 s, scaled: a whole script
# runs for 20 minutes under emulation and its VMs must outlive it.
start_vmm() {
	VMM_READY=$TMP/ready.$RANDOM
	"$TINYVMM" --ready "$VMM_READY" --timeout "$(slow 300)" "$@" &
	VMM_PID=$!
	track "$VMM_PID"
	# Under emulation (scaled) a loaded lab took over 20 s once; a VMM
	# that exited is not waited for.
	wait_until $(($(slow 20) * 10)) sh -c "test -e '$VMM_READY' || ! kill -0 $VMM_PID 2>/dev/null"
	[ -e "$VMM_READY" ] && return 0
	echo "# tinyvmm $* did not get ready ($(kill -0 "$VMM_PID" 2>/dev/null &&
		echo still running || echo exited))"
	return 1
}

MBGUEST=${MBGUEST:-$ROOT/build/mbguest.elf}

# launch_qemu NAME APPEND [QEMU ARGS...]: start a real QEMU VM running our
# multiboot guest, with a QMP socket, without waiting for it (so that
# several VMs boot in parallel). Sets QEMU_PID, QMP_SOCK ($TMP/NAME.qmp),
# SERIAL ($TMP/NAME.serial); QEMU's stderr goes to $TMP/NAME.log.
# QEMU_CPUS: the CPUs it runs on (a taskset -c list), else any.
launch_qemu() {
	local name=$1 append=$2
	shift 2
	QMP_SOCK=$TMP/$name.qmp
	SERIAL=$TMP/$name.serial
	${QEMU_CPUS:+taskset -c "$QEMU_CPUS"} "$QEMU" -enable-kvm -m "${QEMU_MEM:-256}" -smp "${QEMU_SMP:-1}" \
		-display none -nodefaults -no-user-config -name "guest=$name" \
		-serial "file:$SERIAL" -qmp "unix:$QMP_SOCK,server=on,wait=off" \
		-kernel "$MBGUEST" -append "$append" "$@" 2>>"$TMP/$name.log" &
	QEMU_PID=$!
	track "$QEMU_PID"
}

# wait_ready NAME PID [SECONDS]: wait (bounded, default 30 s) for READY on
# the guest's serial port while QEMU lives.
wait_ready() {
	for _ in $(seq $((${3:-30} * 10))); do
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

# q NAME JSON: one QMP command on $TMP/NAME.qmp, its reply on stdout
# (greeting and events dropped); waits for the reply itself, bounded
# (scaled under emulation), rather than a fixed time.
q() {
	local line n=0 t
	t=$(slow 30)
	coproc QMPC { timeout "$t" socat - "UNIX-CONNECT:$TMP/$1.qmp" 2>/dev/null; }
	echo '{"execute":"qmp_capabilities"}' >&"${QMPC[1]}"
	echo "$2" >&"${QMPC[1]}"
	while IFS= read -r -t "$t" line <&"${QMPC[0]}"; do
		case $line in *'"QMP"'* | *'"event"'*) continue ;; esac
		n=$((n + 1))
		if [ "$n" = 2 ]; then
			echo "$line"
			break
		fi
	done
	eval "exec ${QMPC[1]}>&-"
	wait "$QMPC_PID" 2>/dev/null
}

# migration_settings NAME CAPS PARAMS: migration capabilities (a JSON
# array) and parameters (a JSON object) on $TMP/NAME.qmp, as an operator
# or libvirt sets them; says QEMU's refusal and fails on one.
migration_settings() {
	local r
	r=$(q "$1" "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":$2}}")
	case $r in *'"return"'*) ;; *) echo "# $1: capabilities: $r"; return 1 ;; esac
	r=$(q "$1" "{\"execute\":\"migrate-set-parameters\",\"arguments\":$3}")
	case $r in *'"return"'*) ;; *) echo "# $1: parameters: $r"; return 1 ;; esac
}

# migrate_tcp SRC DST: migrate $TMP/SRC.qmp's VM to DST's (a QEMU started
# with -incoming defer) over loopback TCP and wait (bounded) for the end;
# QEMU's query-migrate answer at completion goes to $TMP/SRC.final.
migrate_tcp() {
	local r st port
	port=$(free_port)
	r=$(q "$2" "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"tcp:127.0.0.1:$port\"}}")
	case $r in *'"return"'*) ;; *) echo "# $2: migrate-incoming: $r"; return 1 ;; esac
	r=$(q "$1" "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"tcp:127.0.0.1:$port\"}}")
	case $r in *'"return"'*) ;; *) echo "# $1: migrate: $r"; return 1 ;; esac
	for _ in $(seq $((300 * $(slow 1)))); do
		r=$(q "$1" '{"execute":"query-migrate"}')
		# A VM that came in by migration answers "completed" (its
		# incoming one's status) while its own runs: only its own
		# completed migration has a downtime. QEMU 7.2 says
		# "completed" before its total-time is worked out (0 until
		# then): as lib/migrate_follow.c, wait for the figures.
		st=$(jq -r '.return | if .status == "completed" and
			((has("downtime") | not) or ((."total-time" // 0) == 0))
			then "active" else .status // empty end' <<<"$r" 2>/dev/null)
		case $st in
		completed)
			jq -c .return <<<"$r" >"$TMP/$1.final"
			return 0
			;;
		failed | cancelled)
			echo "# $1: migration $st: $r"
			return 1
			;;
		esac
		sleep 0.2
	done
	return 1
}

# ---- the planner against real migrations (plan_matrix.sh, plan_linux.sh) ----
# wait_qmp NAME: the QMP socket answers.
wait_qmp() {
	wait_until "$(slow 300)" test -S "$TMP/$1.qmp" &&
		[ -n "$(q "$1" '{"execute":"query-status"}')" ]
}

# migrate_bounded SRC DST BOUND POSTCOPY: SRC to DST (started with -incoming
# defer) over loopback TCP; with POSTCOPY=1, migrate-start-postcopy once
# the first pass is over (polled every 10 ms until then, as libvirt's
# --postcopy-after-precopy waits for the pass's event). Prints
# "transferred total-time-ms setup-time-ms" once it completed; cancels
# it after BOUND seconds (returns 2) or when it failed (1). With
# MIGRATE_TRACE set, each poll appends "seconds status syncs throttle%
# transferred remaining dirty-pages-rate mbps" to that file.
migrate_bounded() {
	local r st sync port started=0 deadline
	port=$(free_port) || return 1
	r=$(q "$2" "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"tcp:127.0.0.1:$port\"}}")
	case $r in *'"return"'*) ;; *) echo "# $2: migrate-incoming: $r" >&2; return 1 ;; esac
	q "$1" "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"tcp:127.0.0.1:$port\"}}" >/dev/null
	deadline=$(awk -v n="$(date +%s.%N)" -v b="$3" 'BEGIN{printf "%.1f", n + b}')
	while awk -v n="$(date +%s.%N)" -v d="$deadline" 'BEGIN{exit !(n < d)}'; do
		r=$(q "$1" '{"execute":"query-migrate"}')
		st=$(jq -r '.return.status // empty' <<<"$r" 2>/dev/null)
		sync=$(jq -r '.return.ram["dirty-sync-count"] // 0' <<<"$r" 2>/dev/null)
		[ -n "${MIGRATE_TRACE:-}" ] && jq -r --arg t "$(date +%s.%N)" \
			'.return | "\($t) \(.status) \(.ram["dirty-sync-count"]) \(.["cpu-throttle-percentage"] // 0) \(.ram.transferred) \(.ram.remaining) \(.ram["dirty-pages-rate"]) \(.ram.mbps)"' \
			<<<"$r" >>"$MIGRATE_TRACE" 2>/dev/null
		case $st in
		completed)
			jq -r '.return | "\(.ram.transferred) \(.["total-time"]) \(.["setup-time"] // "-")"' <<<"$r"
			return 0
			;;
		failed | cancelled)
			echo "# migration $st: $r" >&2
			return 1
			;;
		esac
		if [ "$4" = 1 ] && [ "$started" = 0 ] && [ "$st" = active ] && [ "${sync:-0}" -ge 2 ]; then
			q "$1" '{"execute":"migrate-start-postcopy"}' >/dev/null
			started=1
		fi
		# Until post-copy starts, poll as libvirt's event would tell:
		# the switch's delay is ours, not QEMU's.
		if [ "$4" = 1 ] && [ "$started" = 0 ]; then sleep 0.01; else sleep 0.1; fi
	done
	q "$1" '{"execute":"migrate_cancel"}' >/dev/null
	for _ in $(seq "$(slow 100)"); do
		st=$(q "$1" '{"execute":"query-migrate"}' | jq -r '.return.status // empty' 2>/dev/null)
		[ "$st" = cancelled ] && break
		sleep 0.1
	done
	echo "# migration cancelled after ${3}s (status $st)" >&2
	return 2
}

# within_time PRED REAL PCT: within PCT%, or within 0.5 s below a second
# of real time (QEMU's own fixed costs, see plan_migrate.sh).
within_time() {
	within "$1" "$2" "$3" || awk -v a="$1" -v b="$2" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(b < 1 && d <= 0.5)}'
}

# within_twice PRED REAL: REAL at most twice PRED (or, below a second of
# real time, at most PRED + 0.5 s: QEMU's fixed costs).
within_twice() {
	awk -v a="$1" -v b="$2" 'BEGIN{exit !(b <= 2 * a || (b < 1 && b - a <= 0.5))}'
}

# plan_verdict FILE: the plan's verdict (the uncertain one where the plan
# gives one; converges true/false before it did).
plan_verdict() {
	jq -r '.vms[0].prediction.verdict // (if .vms[0].converges == null then "unknown"
		elif .vms[0].converges then "converges" else "does-not-converge" end)' "$1"
}

# check_verdict NAME VERDICT PSEC SEC BOUND [MUST_COMPLETE]: the plan's
# verdict against what QEMU did (SEC "-": it did not complete within
# BOUND seconds): "converges" completes within 2x PSEC; "does-not-converge"
# does not complete, but with MUST_COMPLETE=1 (auto-converge, postcopy:
# they complete however the guest dirties). "uncertain" checks nothing.
check_verdict() {
	local name=$1 verd=$2 psec=$3 sec=$4 bound=$5
	case $verd in
	converges)
		if [ "$sec" = - ]; then
			fail "$name: predicted to converge in ${psec}s, QEMU did not complete in ${bound}s"
		else
			check "$name: converges as predicted, in ${sec}s, within 2x the predicted ${psec}s" \
				within_twice "$psec" "$sec"
		fi
		;;
	does-not-converge)
		[ "${6:-0}" = 1 ] && return 0
		check "$name: predicted not to converge, QEMU did not complete in ${bound}s" \
			test "$sec" = -
		;;
	esac
}

# num_or_dash FMT VALUE: VALUE printed with FMT, or "-" where it is null
# or empty (unknown, as a plan's time and transfer where it does not
# converge): never 0.
# shellcheck disable=SC2059 # the format is the caller's
num_or_dash() {
	case $2 in
	"" | null) printf '%s' - ;;
	*) printf "$1" "$2" ;;
	esac
}

# rel_error REAL PRED: (real - predicted) / real, as the tests compute
# a prediction's error.
rel_error() { awk -v r="$1" -v p="$2" 'BEGIN { printf "%.9f", (r - p) / r }'; }

# same A B: |A - B| within 1% of |B| (or 1e-9); B may be negative.
same() {
	awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d;
		m = b < 0 ? -b : b; exit !(a != "" && b != "" && d <= m / 100 + 1e-9) }'
}

# start_serve NAME ARGS...: kvmstats serve on a free loopback port, in the
# background; sets SERVE_PID, ADDR and URL (its /metrics).
start_serve() {
	local name=$1
	shift
	"$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/$name.ready" "$@" \
		2>>"$TMP/$name.err" &
	SERVE_PID=$!
	track $SERVE_PID
	wait_file "$TMP/$name.ready" 20 || { echo "# serve $name did not start:"; \
		sed 's/^/# /' "$TMP/$name.err"; return 1; }
	ADDR=$(cat "$TMP/$name.ready")
	URL=http://$ADDR/metrics
}

# within A B PCT: |A - B| <= PCT% of B
within() {
	awk -v a="$1" -v b="$2" -v p="$3" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(b>0 && d<=b*p/100)}'
}

# need_tools NAME TOOL...: each TOOL is a command here; else says skip
# for NAME and returns 1 (the caller exits).
need_tools() {
	local name=$1 t
	shift
	for t in "$@"; do
		command -v "$t" >/dev/null && continue
		skip "$name" "$t is not installed (scripts/deps.sh test)"
		return 1
	done
}

# The fake VMM of the hostile tests, run with Debian's python3 itself (a
# wrapper script in front of it would drop the argv[0] it needs).
# shellcheck disable=SC2034 # used by the scripts that source this file
HOSTILE=$ROOT/tests/tools/hostile_qmp.py
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

# need_debugfs NAME: debugfs at $DBG with KVM's directory in it. Mounting
# it is the administrator's choice: mounted here only when it is not, and
# then unmounted at exit (lazily if busy). Says skip for NAME and returns
# 1 when it cannot be had (the caller exits).
DBG=/sys/kernel/debug
need_debugfs() {
	DBG_MOUNTED=0
	if [ "$(stat -f -c %T "$DBG" 2>/dev/null)" != debugfs ]; then
		if ! mount -t debugfs none "$DBG" 2>/dev/null; then
			skip "$1" "debugfs cannot be mounted here"
			return 1
		fi
		DBG_MOUNTED=1
	fi
	trap 'cleanup; [ "$DBG_MOUNTED" = 1 ] && { umount "$DBG" 2>/dev/null || umount -l "$DBG"; }' EXIT
	if [ ! -d "$DBG/kvm" ]; then
		skip "$1" "debugfs has no kvm directory"
		return 1
	fi
}

# private_dev KVM CMD...: run CMD (as root) in a private mount namespace
# whose /dev is a fresh tmpfs with the usual nodes and its own ptys; KVM
# says what /dev/kvm is there: "none", or "MAJOR MINOR" of the character
# device put in its place. Made from nothing, so it works on a host that
# has a /dev/kvm and on one that has none.
private_dev() {
	unshare -m --propagation private sh -c '
		kvm=$1
		shift
		mount -t tmpfs -o mode=755 none /dev || exit 125
		while read -r n maj min; do
			mknod -m 666 "/dev/$n" c "$maj" "$min" || exit 125
		done <<-NODES
			null 1 3
			zero 1 5
			full 1 7
			random 1 8
			urandom 1 9
			tty 5 0
		NODES
		[ "$kvm" = none ] || mknod -m 666 /dev/kvm c $kvm || exit 125
		mkdir /dev/pts /dev/shm
		mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts /dev/pts || exit 125
		ln -s pts/ptmx /dev/ptmx
		mount -t tmpfs none /dev/shm
		ln -s /proc/self/fd /dev/fd
		for i in 0 1 2; do ln -s /proc/self/fd/$i /dev/$(echo stdin stdout stderr | cut -d" " -f$((i + 1))); done
		exec "$@"' private_dev "$@"
}

# without_kvm CMD...: CMD on a host without KVM, for the offline paths.
without_kvm() { private_dev none "$@"; }

# with_kvm_not_kvm CMD...: CMD where /dev/kvm is a device that is not
# KVM (/dev/null's).
with_kvm_not_kvm() { private_dev "1 3" "$@"; }

# free_port: a loopback TCP port nobody listens on (bounded tries).
# Below the kernel's ephemeral ports (32768 up: a connection's own end
# may hold one, and a listener's bind then fails), and never one this
# test was given before (two taken before either is bound would clash).
free_port() {
	local p
	for _ in $(seq 50); do
		p=$((16384 + RANDOM % 16000))
		grep -qx "$p" "$TMP/.ports" 2>/dev/null && continue
		(exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && continue
		echo "$p" >>"$TMP/.ports"
		echo "$p"
		return 0
	done
	return 1
}

# ---- the QEMU under test -------------------------------------------------
# Every QEMU a test starts is $QEMU: KVMSTATS_QEMU=PATH selects another
# one (tests/qemu/fetch.sh VERSION prints the path of a QEMU of that
# version: the run is then repeated per version), else the system's.
QEMU=${KVMSTATS_QEMU:-qemu-system-x86_64}

# have_qemu: is $QEMU there to run?
have_qemu() { command -v "$QEMU" >/dev/null 2>&1; }

# qemu_version: $QEMU's version, e.g. "10.0.2".
qemu_version() {
	"$QEMU" --version 2>/dev/null | sed -n '1s/^QEMU emulator version \([0-9.]*\).*/\1/p'
}

# qemu_at_least MAJOR.MINOR: is $QEMU that release or newer?
qemu_at_least() {
	local v want=$1
	v=$(qemu_version)
	[ -n "$v" ] && [ "$(printf '%s\n%s\n' "$want" "$v" | sort -V | head -1)" = "$want" ]
}

# qemu_holds_stats: does $QEMU hold its vCPUs' stats fds (8.1+)?
qemu_holds_stats() { qemu_at_least 8.1; }

# qemu_path: the absolute path of $QEMU (what libvirt's <emulator> wants).
qemu_path() { command -v "$QEMU"; }

# ---- a private libvirtd --------------------------------------------------
# libvirt_start: libvirtd and virtlogd in a private mount namespace of
# their own: /etc/libvirt, /etc/passwd and /etc/group (with the
# libvirt-qemu user libvirt wants) are the test's files bound over the
# host's, and /run, /var/lib, /var/log and /var/cache are empty tmpfs, so
# the host's files and any libvirtd of the host are untouched. virsh and
# kvmstats join that namespace with nsenter ("${LV_NS[@]}"); the pid
# namespace is the host's. Sets LV (its files), LVD (libvirtd's pid),
# LV_HOLDER, LV_NS and VIRSH; returns 1, with the daemon's last words,
# when it did not start. LV_QEMU_CONF: more qemu.conf lines; LV_DIR: its
# files' directory (default $TMP/lv: a second daemon needs its own);
# LIBVIRTD_CONF: more libvirtd.conf lines.
libvirt_start() {
	LV=${LV_DIR:-$TMP/lv}
	mkdir -p "$LV/etc"
	cat >"$LV/etc/qemu.conf" <<-CONF
		user = "root"
		group = "root"
		security_driver = "none"
		dynamic_ownership = 0
		${LV_QEMU_CONF:-}
	CONF
	printf 'log_outputs = "3:stderr"\n%s\n' "${LIBVIRTD_CONF:-}" >"$LV/etc/libvirtd.conf"
	echo 'log_outputs = "3:stderr"' >"$LV/etc/virtlogd.conf"
	cp /etc/passwd "$LV/passwd"
	cp /etc/group "$LV/group"
	getent passwd libvirt-qemu >/dev/null ||
		echo 'libvirt-qemu:x:64055:64055::/var/lib/libvirt:/usr/sbin/nologin' >>"$LV/passwd"
	getent group libvirt-qemu >/dev/null || echo 'libvirt-qemu:x:64055:' >>"$LV/group"
	# $QEMU's directory stays visible if a tmpfs below would hide it
	# (tests/qemu/fetch.sh unpacks under /var/cache).
	local qdir keep=""
	qdir=$(dirname "$(qemu_path)")
	case $qdir in /run/* | /var/lib/* | /var/log/* | /var/cache/*)
		mkdir -p "$LV/qemu"
		keep="mount --bind '$qdir' '$LV/qemu'"
		;;
	esac
	# The namespace's first process mounts, starts both daemons and
	# reaps them (bash's wait) when they are stopped.
	cat >"$LV/ns.sh" <<-NS
		set -e
		${keep:+$keep}
		for d in /run /var/lib /var/log /var/cache; do mount -t tmpfs tmpfs \$d; done
		${keep:+mkdir -p '$qdir' && mount --bind '$LV/qemu' '$qdir'}
		mount --bind "$LV/etc" /etc/libvirt
		mount --bind "$LV/passwd" /etc/passwd
		mount --bind "$LV/group" /etc/group
		virtlogd -t 180 2>"$LV/virtlogd.log" &
		echo \$! >"$LV/virtlogd.pid"
		for i in \$(seq $(slow 50)); do [ -S /run/libvirt/virtlogd-sock ] && break; sleep 0.1; done
		libvirtd -t 180 2>"$LV/libvirtd.log" &
		echo \$! >"$LV/libvirtd.pid"
		set +e
		wait
	NS
	unshare -m --propagation private bash "$LV/ns.sh" &
	LV_HOLDER=$!
	track "$LV_HOLDER"
	LV_NS=(nsenter -t "$LV_HOLDER" -m --)
	VIRSH=("${LV_NS[@]}" virsh -q -c qemu:///system)
	LVD=
	for _ in $(seq "$(slow 100)"); do
		[ -s "$LV/libvirtd.pid" ] && [ -z "$LVD" ] && LVD=$(cat "$LV/libvirtd.pid") &&
			track "$LVD" && track "$(cat "$LV/virtlogd.pid")"
		if [ -n "$LVD" ] && timeout "$(slow 5)" "${VIRSH[@]}" list >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$LV_HOLDER" 2>/dev/null || break
		sleep 0.1
	done
	sed 's/^/# /' "$LV/libvirtd.log" 2>/dev/null | tail -5
	return 1
}

# libvirt_domain NAME VCPUS CMDLINE [DEVICES_XML]: a transient kvm domain
# (persistent, defined then started, with LV_PERSISTENT set)
# of $QEMU running our guest with CMDLINE, started, its READY awaited
# (bounded). With ACPI: without it libvirt 9.0 passes -no-acpi, which
# QEMU 9+ no longer has. Sets DOM_PID; its serial output goes to $LV/NAME.serial. On
# any exit the domain is destroyed first (libvirtd leaves QEMU running
# when it is stopped). Returns 1 ($LV/create.log says why) when it did
# not start.
libvirt_domain() {
	local name=$1 vcpus=$2 cmdline=$3 devices=${4:-}
	cat >"$LV/$name.xml" <<-XML
		<domain type='kvm'>
		  <name>$name</name>
		  <memory unit='MiB'>64</memory>
		  <vcpu>$vcpus</vcpu>
		  <os>
		    <type arch='x86_64' machine='pc'>hvm</type>
		    <kernel>$MBGUEST</kernel>
		    <cmdline>$cmdline</cmdline>
		  </os>
		  <features><acpi/><apic/></features>
		  <on_poweroff>destroy</on_poweroff>
		  <devices>
		    <emulator>$(qemu_path)</emulator>
		    <serial type='file'><source path='$LV/$name.serial'/></serial>
		    $devices
		  </devices>
		</domain>
	XML
	LV_DOMS="${LV_DOMS:-} $name"
	# shellcheck disable=SC2154 # d is the trap's own loop variable
	trap 'for d in $LV_DOMS; do timeout "$(slow 10)" "${VIRSH[@]}" destroy "$d" >/dev/null 2>&1; done; cleanup' EXIT
	if [ -n "${LV_PERSISTENT:-}" ]; then
		timeout "$(slow 30)" "${VIRSH[@]}" define "$LV/$name.xml" >"$LV/create.log" 2>&1 &&
			timeout "$(slow 30)" "${VIRSH[@]}" start "$name" >>"$LV/create.log" 2>&1 || return 1
	else
		timeout "$(slow 30)" "${VIRSH[@]}" create "$LV/$name.xml" >"$LV/create.log" 2>&1 || return 1
	fi
	DOM_PID=$("${LV_NS[@]}" cat "/run/libvirt/qemu/$name.pid")
	track "$DOM_PID"
	for _ in $(seq "$(slow 300)"); do
		grep -q READY "$LV/$name.serial" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "# domain $name did not print READY"
	return 0
}

# shows_safely FILE: FILE is valid UTF-8 without a control character but
# newline, tab and a CR that ends a line (CSV's CRLF): no ESC, BEL, DEL,
# C1 CSI...: what names may put on a terminal or in JSON after kvmstats
# escaped them.
shows_safely() {
	iconv -f UTF-8 -t UTF-8 "$1" >/dev/null 2>&1 &&
		! LC_ALL=C sed 's/\r$//' "$1" |
		LC_ALL=C grep -qaP '[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]'
}

# Under emulation (the lab) everything runs 5-20 times slower: time limits
# and the periods a timing test depends on scale by KVMSTATS_TEST_SLOW
# (10 in the lab, 1 elsewhere); counts and exact values never do.
SLOW=${KVMSTATS_TEST_SLOW:-1}
# slow N: N (an integer: ms, s, tries) times the slowdown.
slow() { echo $(($1 * SLOW)); }
# slow_s SECONDS: the same for a decimal number of seconds (for sleep).
slow_s() { awk -v s="$1" -v k="$SLOW" 'BEGIN { print s * k }'; }
# qmp_timeout: kvmstats' --qmp-timeout (ms) for a monitor that may answer
# slowly under emulation on a loaded host (seen in sid's lab): the
# default 1 s times SLOW, within the option's 60 s.
qmp_timeout() {
	local ms=$((1000 * SLOW))
	echo $((ms > 60000 ? 60000 : ms))
}
