#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# make-demo-screenshot.sh [list|vm] [SECONDS]: print the screen of
# `kvmstats top --replay dist/demo/recording.kvmlog` in a 100x30 tmux, as
# text, after SECONDS (20) of the recording: the VM list, or (vm) the VM
# demo-irqchip opened with Enter, its rows that are zero hidden (z). Trailing blank lines are cut, and runs
# of blank lines inside become one. README.md's screenshot is `list`,
# docs/top.md's `vm`. Needs tmux and a built tree; no /dev/kvm.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVMSTATS=${KVMSTATS:-$ROOT/build/kvmstats}
REC=dist/demo/recording.kvmlog	# as the title shows it
VIEW=${1:-list}
WAIT=${2:-20}
SOCK=$(mktemp -u /tmp/kvmstats-shot.XXXXXX)
trap 'tmux -S "$SOCK" kill-server 2>/dev/null; rm -f "$SOCK"' EXIT

# A fixed clock: the recording's times, shown in UTC.
tmux -S "$SOCK" new-session -d -x 100 -y 30 -c "$ROOT" \
	"TZ=UTC LANG=C.UTF-8 '$KVMSTATS' top --replay '$REC'; sleep 5"
if [ "$VIEW" = vm ]; then
	sleep 1
	tmux -S "$SOCK" send-keys g irqchip Enter
	sleep 0.5
	tmux -S "$SOCK" send-keys Enter z
	WAIT=$((WAIT - 1))
fi
sleep "$WAIT"
tmux -S "$SOCK" capture-pane -p | sed 's/ *$//' | cat -s | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
