#!/bin/bash
# kvmstats plan against real migrations to a second QEMU, per migration
# setting: each case boots our multiboot guest (256 MiB, a known content),
# sets max-bandwidth 32 MiB/s and downtime-limit 300 ms and the case's
# capabilities and parameters on QEMU (as an operator or libvirt would),
# runs `plan --method scan --interval 0 --json` (which reads them over
# QMP), then migrates over loopback TCP to a destination QEMU started with
# `-incoming defer` and the same settings, and compares with what QEMU's
# query-migrate reports at completion:
#  - legacy pre-copy, a compressible guest;
#  - multifd, 4 channels;
#  - multifd + zstd, a compressible guest (one word per page);
#  - multifd + zstd, random (incompressible) data and compressible data;
#  - multifd + zstd asked for by the option (--parallel 4 --compressed
#    zstd) on a VM set for legacy, and the settings' sources in the JSON.
# Asserts: predicted bytes within 10% (20% with compression) and time
# within 15% (25% with compression) of QEMU's transferred and total-time.
# Prints the table of predicted against real.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=kvm qemu
source "$(dirname "$0")/../lib.sh"

require_kvm plan_migrate
for tool in "$QEMU" socat jq; do
	if ! command -v "$tool" >/dev/null; then
		skip plan_migrate "$tool is not installed (scripts/deps.sh test)"
		exit 0
	fi
done
if [ ! -x "$KVMSTATS" ] || [ ! -f "$MBGUEST" ]; then
	fail plan_migrate "build/kvmstats or build/mbguest.elf missing: run make build"
	exit 0
fi
VER=$(qemu_version)

# q NAME JSON: one QMP command on NAME's socket, its reply on stdout
# (greeting and events dropped); bounded.
q() {
	local line n=0
	coproc QMPC { timeout 20 socat - "UNIX-CONNECT:$TMP/$1.qmp" 2>/dev/null; }
	echo '{"execute":"qmp_capabilities"}' >&"${QMPC[1]}"
	echo "$2" >&"${QMPC[1]}"
	while IFS= read -r -t 20 line <&"${QMPC[0]}"; do
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

# within A B PCT: |A - B| <= PCT% of B
within() {
	awk -v a="$1" -v b="$2" -v p="$3" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(b>0 && d<=b*p/100)}'
}

# setup NAME CAPS PARAMS: migration capabilities (a JSON array) and
# parameters (a JSON object) on NAME.
setup() {
	local r
	r=$(q "$1" "{\"execute\":\"migrate-set-capabilities\",\"arguments\":{\"capabilities\":$2}}")
	case $r in *'"return"'*) ;; *) echo "# $1: capabilities: $r"; return 1 ;; esac
	r=$(q "$1" "{\"execute\":\"migrate-set-parameters\",\"arguments\":$3}")
	case $r in *'"return"'*) ;; *) echo "# $1: parameters: $r"; return 1 ;; esac
}

# migrate SRC DST: SRC to DST (started with -incoming defer) over loopback
# TCP; prints "transferred total-time-ms" once it completed.
migrate() {
	local r st port=$((20000 + RANDOM % 20000))
	r=$(q "$2" "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"tcp:127.0.0.1:$port\"}}")
	case $r in *'"return"'*) ;; *) echo "# $2: migrate-incoming: $r" >&2; return 1 ;; esac
	q "$1" "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"tcp:127.0.0.1:$port\"}}" >/dev/null
	for _ in $(seq $((600 * $(slow 1)))); do
		r=$(q "$1" '{"execute":"query-migrate"}')
		st=$(jq -r '.return.status // empty' <<<"$r" 2>/dev/null)
		if [ "$st" = completed ]; then
			jq -r '.return | "\(.ram.transferred) \(.["total-time"]) \(.ram.normal) \(.ram.duplicate)"' <<<"$r"
			return 0
		fi
		if [ "$st" = failed ]; then
			echo "# migration failed: $r" >&2
			break
		fi
		sleep 0.1
	done
	return 1
}

TABLE=""
BW=$((32 << 20))

# run_case NAME GUEST CAPS PARAMS BYTES% TIME% [PLAN OPTIONS...]: GUEST is
# mbguest's command line; $EXTRA, more QEMU arguments for both QEMUs.
run_case() {
	local name=$1 guest=$2 caps=$3 params=$4 pb=$5 pt=$6
	local out pred psec xfer ms normal dup sec src dst ps pd
	shift 6
	# shellcheck disable=SC2206 # word splitting wanted
	local extra=(${EXTRA:-})
	params=$(jq -c --argjson bw "$BW" '. + {"max-bandwidth": $bw, "downtime-limit": 300}' <<<"$params")
	src=$name.src dst=$name.dst
	QEMU_MEM=256 launch_qemu "$src" "$guest" "${extra[@]}"
	ps=$QEMU_PID
	QEMU_MEM=256 launch_qemu "$dst" "$guest" "${extra[@]}" -incoming defer
	pd=$QEMU_PID
	if ! wait_ready "$src" "$ps" 60 || ! wait_wait_qmp "$dst"; then
		fail "$name: VMs did not start"
		return
	fi
	# With plan options, the VM is planned as it stands (only the
	# bandwidth and downtime set) and the options say the rest.
	if [ $# -gt 0 ]; then
		setup "$src" '[]' "$(jq -c '{"max-bandwidth", "downtime-limit"}' <<<"$params")" &&
			out=$("$KVMSTATS" plan --pid "$ps" --method scan --interval 0 --json "$@" 2>"$TMP/$name.err")
	fi
	if ! setup "$src" "$caps" "$params" || ! setup "$dst" "$caps" "$params"; then
		fail "$name: QEMU $VER refused the settings"
		kill "$ps" "$pd" 2>/dev/null
		return
	fi
	[ $# -gt 0 ] ||
		out=$("$KVMSTATS" plan --pid "$ps" --method scan --interval 0 --json 2>"$TMP/$name.err")
	echo "$out" >"$TMP/$name.json"
	pred=$(jq '.vms[0].predicted_transfer_bytes // 0' <<<"$out")
	psec=$(jq '.vms[0].predicted_seconds // 0' <<<"$out")
	read -r xfer ms normal dup < <(migrate "$src" "$dst")
	kill "$ps" "$pd" 2>/dev/null
	if [ -z "$xfer" ]; then
		fail "$name: the migration did not complete"
		return
	fi
	sec=$(awk -v m="$ms" 'BEGIN{printf "%.3f", m / 1000}')
	echo "# $name: plan: $(jq -c '.vms[0].prediction | {mechanism, qemu_version,
		wire_bytes, effective_bandwidth_bytes_per_second, compression,
		settings: (.settings | with_entries(select(.value.source != "default")))}' <<<"$out")"
	TABLE="$TABLE$(printf '# %-28s %12s %12s %8.2f %8.2f  normal=%s duplicate=%s' \
		"$name" "$pred" "$xfer" "$psec" "$sec" "$normal" "$dup")
"
	check "$name: predicted bytes $pred within $pb% of QEMU's $xfer" within "$pred" "$xfer" "$pb"
	check "$name: predicted time ${psec}s within $pt% of QEMU's ${sec}s" within "$psec" "$sec" "$pt"
	LAST_JSON=$TMP/$name.json
}

# wait_wait_qmp NAME: the destination's QMP socket answers.
wait_wait_qmp() {
	wait_until 300 test -S "$TMP/$1.qmp" &&
		[ -n "$(q "$1" '{"execute":"query-status"}')" ]
}

# Compressible: one word per page. Mixed: the same, and 16 MiB of random
# bytes QEMU's generic loader puts at 64 MiB (the guest never touches
# them; filling them from the guest is slow where KVM emulates it).
COMP='nonzero=48M stride=4K'
MIXED='nonzero=32M stride=4K'
head -c $((16 << 20)) /dev/urandom >"$TMP/random.bin"
RANDOM_AT="-device loader,file=$TMP/random.bin,addr=0x4000000,force-raw=on"
run_case legacy "$COMP" '[]' '{}' 10 15
run_case multifd4 "$COMP" '[{"capability":"multifd","state":true}]' \
	'{"multifd-channels":4}' 10 15
run_case multifd4-zstd "$COMP" '[{"capability":"multifd","state":true}]' \
	'{"multifd-channels":4,"multifd-compression":"zstd"}' 20 25
EXTRA=$RANDOM_AT run_case multifd4-zstd-mixed "$MIXED" \
	'[{"capability":"multifd","state":true}]' \
	'{"multifd-channels":4,"multifd-compression":"zstd"}' 20 25
# The options say how the migration will run, over QEMU's (legacy) settings.
run_case options-zstd "$COMP" '[{"capability":"multifd","state":true}]' \
	'{"multifd-channels":4,"multifd-compression":"zstd"}' 20 25 \
	--parallel 4 --compressed zstd

check "options-zstd: the JSON says each setting's source (multifd from the option, bandwidth from QEMU)" \
	jq -e '.vms[0].prediction | .mechanism == "multifd+zstd" and
	.settings.multifd.source == "option" and .settings["multifd-channels"].value == "4" and
	.settings["multifd-compression"].source == "option" and
	.settings["max-bandwidth"].source == "qmp" and
	.settings["max-bandwidth"].value == "33554432" and
	.settings["downtime-limit"].value == "300" and .compression.ratio < 0.1' "$LAST_JSON"

echo "# QEMU $VER, max-bandwidth 32 MiB/s, downtime-limit 300 ms, 256 MiB guests"
echo "# case                          predicted B   QEMU sent B  pred s   QEMU s"
printf '%s' "$TABLE"
