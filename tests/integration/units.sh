#!/bin/bash
# kvmstats-test: needs=kvm
# SPDX-License-Identifier: GPL-2.0-or-later
# The systemd units' privileges, without systemd: serve and record run as
# an unprivileged uid with exactly the capabilities their unit grants
# (AmbientCapabilities=, read from dist/*.service), no_new_privs, and a
# /proc that shows only ptraceable processes (ProtectProc=ptraceable),
# and must read a root VMM's stats; without those capabilities they must
# not; each keeps only what its mode needs; every system call they make
# is one their unit's SystemCallFilter= allows; systemd-analyze security
# scores stay where docs/packaging.md says.
source "$(dirname "$0")/../lib.sh"
require_kvm "units"

DIST=$ROOT/dist
USER_ID=65534
# unit_caps UNIT: the AmbientCapabilities of a unit, as setpriv's list.
unit_caps() {
	sed -n 's/^AmbientCapabilities=//p' "$DIST/$1" | tr ' ' '\n' |
		sed 's/^CAP_//' | tr 'A-Z' 'a-z' | sed 's/^/+/' | paste -sd, -
}
# as_unit CAPS: sets AS_UNIT, the command prefix that runs what follows
# as uid 65534 with CAPS (setpriv's list, or "") ambient and bounding,
# no_new_privs, in a mount namespace whose /proc has hidepid=ptraceable.
# Every stage execs the next: a background job's pid is kvmstats' own.
as_unit() {
	local caps=-all${1:+,$1}
	AS_UNIT=(unshare -m --propagation private sh -c
		'mount -t proc -o hidepid=ptraceable proc /proc && exec "$@"' sh
		setpriv --reuid=$USER_ID --regid=$USER_ID --clear-groups --no-new-privs
		--inh-caps="$caps" --ambient-caps="$caps" --bounding-set="$caps")
}
# cap_eff PID: the effective capabilities, as names.
cap_eff() {
	capsh --decode="$(awk '/^CapEff/ {print $2}' "/proc/$1/status")" | sed 's/.*=//'
}

# uid 65534 writes its files in $TMP/run (and must reach it without
# CAP_DAC_READ_SEARCH too).
chmod 0711 "$TMP"
mkdir -m 0777 "$TMP/run"
start_vmm --vms 2 --vcpus 2 --hold-stats --name unitvm || exit 1
check "the VMM runs as root" test "$(stat -c %u "/proc/$VMM_PID")" = 0

SERVE_CAPS=$(unit_caps kvmstats-serve.service)
RECORD_CAPS=$(unit_caps kvmstats-record.service)
check "kvmstats-serve.service grants ptrace, dac_read_search, checkpoint_restore" \
	test "$SERVE_CAPS" = "+sys_ptrace,+dac_read_search,+checkpoint_restore"
check "kvmstats-record.service grants ptrace and dac_read_search" \
	test "$RECORD_CAPS" = "+sys_ptrace,+dac_read_search"

# serve_as CAPS NAME [ARGS...]: start serve like its unit; sets SERVE_PID, PORT.
serve_as() {
	local caps=$1 name=$2
	shift 2
	PORT=$((20000 + RANDOM % 20000))
	as_unit "$caps"
	"${AS_UNIT[@]}" "$KVMSTATS" serve --listen 127.0.0.1:$PORT \
		--ready "$TMP/run/$name.ready" --pid "$VMM_PID" "$@" 2>"$TMP/$name.err" &
	SERVE_PID=$!
	track $SERVE_PID
	wait_file "$TMP/run/$name.ready" 20
}
metric_lines() {
	curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" |
		grep -c "^kvm_[a-z_]*{.*pid=\"$VMM_PID\""
}
check "serve with the unit's capabilities starts" serve_as "$SERVE_CAPS" caps
n=$(metric_lines)
check "... reads the root VMM's stats as uid $USER_ID ($n series)" test "${n:-0}" -gt 0
check "... keeps only CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH without --plan-interval" \
	test "$(cap_eff $SERVE_PID)" = "cap_dac_read_search,cap_sys_ptrace"
kill $SERVE_PID; wait $SERVE_PID 2>/dev/null

check "serve --plan-interval with the unit's capabilities starts" \
	serve_as "$SERVE_CAPS" plan --plan-interval 60
check "... keeps CAP_CHECKPOINT_RESTORE too" \
	test "$(cap_eff $SERVE_PID)" = "cap_dac_read_search,cap_sys_ptrace,cap_checkpoint_restore"
kill $SERVE_PID; wait $SERVE_PID 2>/dev/null

check "serve without capabilities starts" serve_as "" nocaps
n=$(metric_lines)
check "... cannot read the root VMM ($n series): the capabilities are needed" test "${n:-1}" = 0
kill $SERVE_PID; wait $SERVE_PID 2>/dev/null

# record like its unit: a log in a directory of its own, then replayed.
mkdir -m 0777 "$TMP/run/log"
as_unit "$RECORD_CAPS"
"${AS_UNIT[@]}" "$KVMSTATS" record --output "$TMP/run/log/k.log" \
	--interval 0.2 --count 3 --pid "$VMM_PID" >"$TMP/record.out" 2>&1
check "record with the unit's capabilities, as uid $USER_ID" test $? = 0
vms=$("$KVMSTATS" --json replay "$TMP/run/log/k.log" 2>/dev/null | tail -1 |
	jq "[.vms[] | select(.pid == $VMM_PID)] | length")
check "... logged the root VMM's 2 VMs" test "$vms" = 2
as_unit ""
"${AS_UNIT[@]}" "$KVMSTATS" record --output "$TMP/run/log/n.log" --interval 0.2 \
	--count 2 --pid "$VMM_PID" >"$TMP/record-nocaps.out" 2>&1
rc=$?
vms=0
[ -e "$TMP/run/log/n.log" ] && vms=$("$KVMSTATS" --json replay "$TMP/run/log/n.log" |
	jq -s "[.[].vms[] | select(.pid == $VMM_PID)] | length")
check "... and without capabilities logs none of them (status $rc)" test "$vms" = 0
check "... saying so on stderr" test -s "$TMP/record-nocaps.out"

# The syscall filter: every call serve and record make (traced, after
# their exec) is in what their unit allows.
# filter_set UNIT: the allowed system calls, one a line. The first
# SystemCallFilter= is an allow list; ~ lines remove, later ones add.
expand_group() {
	systemd-analyze syscall-filter --no-pager "$1" 2>/dev/null |
		awk 'NR > 1 && NF == 1 && $1 !~ /^#/ {print $1}' | while read -r s; do
		case $s in @*) expand_group "$s" ;; *) echo "$s" ;; esac
	done
}
expand() { for x in "$@"; do case $x in @*) expand_group "$x" ;; *) echo "$x" ;; esac; done; }
filter_set() {
	local line set
	set=$(while read -r line; do
		case $line in
		'~'*) echo "-${line#\~}" ;;
		*) echo "+$line" ;;
		esac
	done < <(sed -n 's/^SystemCallFilter=//p' "$DIST/$1") |
		while read -r op; do
			expand ${op:1} | sed "s/^/${op:0:1}/"
		done)
	# Apply in order: + adds, - removes.
	echo "$set" | awk '/^\+/ {a[substr($0,2)] = 1} /^-/ {delete a[substr($0,2)]}
		END {for (s in a) print s}' | sort -u
}
# traced_calls LOG: the calls made after kvmstats was exec'd.
traced_calls() {
	awk '/execve\("[^"]*\/kvmstats"/ {on = 1} on' "$1" |
		sed -E 's/^[0-9]+ +//; s/^(<\.\.\. )?([a-z_0-9]+).*/\2/' |
		grep -E '^[a-z_0-9]+$' | grep -v '^exit' | sort -u
}
if ! command -v strace >/dev/null || ! command -v systemd-analyze >/dev/null; then
	fail "syscall filters" "strace and systemd-analyze are needed (make test-deps)"
	exit 1
fi
for u in serve record; do
	filter_set kvmstats-$u.service >"$TMP/$u.allowed"
done
check "the filters are non-trivial ($(wc -l <"$TMP/serve.allowed") calls for serve)" \
	test "$(wc -l <"$TMP/serve.allowed")" -gt 100
# LeakSanitizer cannot run under ptrace: off for the traced runs.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
PORT=$((20000 + RANDOM % 20000))
strace -f -qq -o "$TMP/serve.trace" timeout -s INT 4 unshare -m --propagation private \
	setpriv --reuid=$USER_ID --regid=$USER_ID --clear-groups --no-new-privs \
	--inh-caps="-all,$SERVE_CAPS" --ambient-caps="-all,$SERVE_CAPS" \
	"$KVMSTATS" serve --listen 127.0.0.1:$PORT --plan-interval 1 --pid "$VMM_PID" \
	>/dev/null 2>&1 &
sleep 2.5
curl -s --compressed --max-time 3 "http://127.0.0.1:$PORT/metrics" >/dev/null
wait $!
strace -f -qq -o "$TMP/record.trace" setpriv --reuid=$USER_ID --regid=$USER_ID \
	--clear-groups --no-new-privs --inh-caps="-all,$RECORD_CAPS" \
	--ambient-caps="-all,$RECORD_CAPS" "$KVMSTATS" record \
	--output "$TMP/run/log/t.log" --interval 0.2 --count 5 >/dev/null 2>&1
for u in serve record; do
	traced_calls "$TMP/$u.trace" >"$TMP/$u.calls"
	out=$(comm -23 "$TMP/$u.calls" "$TMP/$u.allowed" | paste -sd' ' -)
	check "$u: its $(wc -l <"$TMP/$u.calls") system calls are all in its unit's filter${out:+ (not: $out)}" \
		test -z "$out" -a "$(wc -l <"$TMP/$u.calls")" -gt 20
done

# The scores docs/packaging.md gives (systemd-analyze reads a unit file
# offline).
for u in serve:2.2 record:1.8; do
	name=${u%:*}
	sed -e 's|@BINDIR@|/usr/bin|g' -e 's|@SYSCONFDIR@|/etc|g' \
		"$DIST/kvmstats-$name.service" >"$TMP/kvmstats-$name.service"
	score=$(systemd-analyze security --offline=yes "$TMP/kvmstats-$name.service" 2>/dev/null |
		sed -n 's/.*exposure level for .*: \([0-9.]*\) .*/\1/p')
	check "kvmstats-$name.service: systemd-analyze security $score (documented: ${u#*:})" \
		test "$score" = "${u#*:}"
done
