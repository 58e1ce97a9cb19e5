#!/bin/bash
# top's VM list takes its columns from the stats the VMs have: an arm64
# VM (build/mklog's arm64.log, arm64's vCPU stat names) gets exits, HVC,
# WFI, WFE, MMIO user and kernel and wakeups, never a column of "-" for
# x86's exits; in --once and on the live screen.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=none
source "$(dirname "$0")/../lib.sh"

"$ROOT/build/mklog" "$TMP" || { fail "mklog wrote the logs"; exit 1; }
"$KVMSTATS" top --replay "$TMP/arm64.log" --once -s 1 </dev/null >"$TMP/once.txt" 2>"$TMP/once.err"
check "top --once of an arm64 VM exits 0" test $? = 0
head -4 "$TMP/once.txt" | sed 's/^/# /'
hdr=$(grep -m1 '^ *PID ' "$TMP/once.txt")
row=$(grep -m1 '^ *4343 ' "$TMP/once.txt")
check "the columns are arm64's: EXITS HVC WFI WFE MMIOU MMIOK WAKE" test \
	"$(echo "$hdr" | tr -s ' ' | sed 's/^ //; s/ $//')" = \
	"PID VM SOURCE VCPUS EXITS/s HVC/s WFI/s WFE/s MMIOU/s MMIOK/s WAKE/s"
check "no cell of the arm64 VM's row is '-'" awk -v r="$row" \
	'BEGIN { n = split(r, f, " "); for (i = 1; i <= n; i++) if (f[i] == "-") exit 1; exit n != 11 }'
# Per vCPU and second (mklog): exits 1000, hvc 100, wfi 50, wfe 20,
# mmio user 10, kernel 5, wakeups 40; two vCPUs.
check "each rate is the log's: 2k 200 100 40 20 10 80" test \
	"$(echo "$row" | awk '{ print $5, $6, $7, $8, $9, $10, $11 }')" = "2k 200 100 40 20 10 80"

# An x86 log (exits and halt_exits only): x86's columns it has, no arm64's.
"$KVMSTATS" top --replay "$TMP/valid.log" --once -s 1 </dev/null >"$TMP/x86.txt" 2>&1
check "an x86 VM keeps x86's columns, without arm64's" bash -c \
	"grep -m1 '^ *PID ' '$TMP/x86.txt' | grep -q 'EXITS/s *HALT/s' &&
	 ! grep -m1 '^ *PID ' '$TMP/x86.txt' | grep -q 'HVC/s'"

if command -v tmux >/dev/null; then
	TMS=kstarch-$$
	tmux -L "$TMS" new-session -d -s arch -x 120 -y 24 \
		"$KVMSTATS top --replay $TMP/arm64.log -s 1; sleep 30"
	for _ in $(seq "$(slow 50)"); do
		tmux -L "$TMS" capture-pane -p -t arch >"$TMP/screen.txt" 2>/dev/null
		grep -q '4343' "$TMP/screen.txt" && break
		sleep 0.1
	done
	tmux -L "$TMS" kill-server 2>/dev/null
	sed -n '1,4p' "$TMP/screen.txt" | sed 's/^/# /'
	check "the live screen shows arm64's columns and no HALT/s" bash -c \
		"grep -q 'HVC/s.*WFI/s.*WFE/s' '$TMP/screen.txt' && ! grep -q 'HALT/s' '$TMP/screen.txt'"
else
	fail "top_arch: the live screen" "tmux is not installed (scripts/deps.sh test)"
fi
