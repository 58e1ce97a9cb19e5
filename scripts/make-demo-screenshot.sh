#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# make-demo-screenshot.sh [list|vm] [SECONDS|HH:MM:SS]: print the screen
# of `kvmstats top --replay dist/demo/recording.kvmlog` in a 100x30 tmux,
# as text, after SECONDS (20) of the recording, or at the frame whose
# clock (top right, UTC) is HH:MM:SS: the VM list, or (vm) the VM
# demo-irqchip opened with Enter, its rows that are zero hidden (z).
# Trailing blank lines are cut, and runs of blank lines inside become one.
# A clock gives the same screen on a loaded machine, where SECONDS of
# wall time may land on the frame before or after. README.md's
# screenshot is `list`, docs/top.md's `vm`. Needs tmux and a built tree; no /dev/kvm.
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
	case $WAIT in *:*) ;; *) WAIT=$((WAIT - 1)) ;; esac
fi
shot() {
	tmux -S "$SOCK" capture-pane -p | sed 's/ *$//' | cat -s | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
}

case $WAIT in
*:*:*)
	# The frame with that clock stays a second: two captures of it
	# alike are the whole frame drawn (not one caught mid-update).
	end=$((SECONDS + 60))
	while [ $SECONDS -lt $end ]; do
		a=$(shot)
		if [ "$(head -1 <<<"$a" | awk '{ print $NF }')" = "$WAIT" ]; then
			sleep 0.2
			[ "$(shot)" = "$a" ] && { echo "$a"; exit 0; }
		fi
		sleep 0.05
	done
	echo "make-demo-screenshot.sh: no frame at $WAIT within 60 s" >&2
	exit 1 ;;
esac
sleep "$WAIT"
shot
