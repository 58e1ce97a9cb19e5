#!/bin/bash
# kvmstats-test: needs=kvm
# A VMM names itself: a tinyvmm whose --name holds terminal escapes, OSC,
# BEL and bytes that are not UTF-8 (a guest that escaped into its VMM
# chooses its command line). Every command shows that name escaped
# (\x1b, \xff), never raw and never dropped: dump, list, top, record and
# replay, serve's labels; JSON is valid UTF-8. And `dump --save DIR` never
# writes through a link planted in DIR.
source "$(dirname "$0")/../lib.sh"
require_kvm "names_live"

RAW=$(printf 'VM \033[31mEVIL\033[0m\033]0;pwned\007\377\376')
NAME='VM \x1b[31mEVIL\x1b[0m\x1b]0;pwned\x07\xff\xfe'
start_vmm --hold-stats --vcpus 2 --name "$RAW" || { fail "tinyvmm started"; exit 1; }
P=$VMM_PID

# sink NAME CMD...: CMD's output shows safely and holds the escaped name.
sink() {
	local name=$1
	shift
	"$@" >"$TMP/out" 2>"$TMP/err"
	if ! shows_safely "$TMP/out" || ! shows_safely "$TMP/err"; then
		fail "$name" "raw control characters or invalid UTF-8: $(cat -v "$TMP/out" | grep -m1 EVIL)"
	elif ! grep -qF -- "$NAME" "$TMP/out"; then
		fail "$name" "the escaped name is not in its output: $(head -2 "$TMP/out")"
	else
		pass "$name"
	fi
}

sink "dump (table)" "$KVMSTATS" dump --pid $P
sink "dump --csv" "$KVMSTATS" dump --csv --pid $P
sink "list" "$KVMSTATS" list --pid $P
sink "top --once" "$KVMSTATS" top --once --interval 0.2 --pid $P
for cmd in "dump --json" "list --json" "top --once --json --interval 0.2"; do
	"$KVMSTATS" $cmd --pid $P >"$TMP/j" 2>/dev/null
	if shows_safely "$TMP/j" && jq -e --arg n "$NAME" '[.. | .name? | select(. == $n)] | length > 0' "$TMP/j" >/dev/null; then
		pass "$cmd: valid JSON, the name escaped"
	else
		fail "$cmd: valid JSON, the name escaped" "$(cat -v "$TMP/j" | head -c 300)"
	fi
done
"$KVMSTATS" record --pid $P --count 3 --interval 0.05 --output "$TMP/r.log" 2>/dev/null
sink "replay --csv of its log" "$KVMSTATS" replay --csv "$TMP/r.log"

# serve: the name label.
"$KVMSTATS" serve --listen 127.0.0.1:0 --ready "$TMP/ready" --pid $P 2>"$TMP/serve.err" &
S=$!
track $S
if wait_file "$TMP/ready" 20; then
	curl -sS --max-time 20 "http://$(cat "$TMP/ready")/metrics" >"$TMP/m.txt"
	check "serve: the exposition shows safely" shows_safely "$TMP/m.txt"
	check "serve: the name label holds the escaped name" \
		grep -qF "name=\"VM \\\\x1b[31mEVIL\\\\x1b[0m\\\\x1b]0;pwned\\\\x07\\\\xff\\\\xfe\"" "$TMP/m.txt"
	if command -v promtool >/dev/null; then
		check "serve: promtool accepts it" bash -c "promtool check metrics <'$TMP/m.txt'"
	fi
else
	fail "serve started" "$(cat "$TMP/serve.err")"
fi

# top's screen, in tmux: the name shows escaped (raw, tmux would have run
# its sequences: red text, a new window title, a bell).
if command -v tmux >/dev/null; then
	SOCK=kstn-$$
	tmux -L "$SOCK" new-session -d -s top -x 100 -y 24 "'$KVMSTATS' top --pid $P; sleep 30"
	for i in $(seq 50); do
		tmux -L "$SOCK" capture-pane -p -t top >"$TMP/pane" 2>/dev/null
		grep -qF 'EVIL' "$TMP/pane" && break
		sleep 0.2
	done
	tmux -L "$SOCK" capture-pane -p -e -t top >"$TMP/pane.e" 2>/dev/null
	check "top's screen shows the name escaped" grep -qF 'VM \x1b[31mEVIL\x1b[0m' "$TMP/pane"
	check "and nothing of it in red" bash -c "! grep -q \$'\\e\\[31m' '$TMP/pane.e'"
	check "nor a window title set from it" \
		bash -c "! tmux -L '$SOCK' display-message -p -t top '#{pane_title}' | grep -q pwned"
	tmux -L "$SOCK" kill-server 2>/dev/null
fi

# ---- dump --save never writes through a link planted in DIR ----------------
mkdir -p "$TMP/save"
echo precious >"$TMP/victim"
ln -s "$TMP/victim" "$TMP/save/$P-vm0.bin"
ln -s "$TMP/made-by-root" "$TMP/save/$P-vm0-vcpu0.bin"
"$KVMSTATS" dump --pid $P --save "$TMP/save" >/dev/null 2>"$TMP/save.err"
check "dump --save over planted links exits 0" test $? = 0
check "the file a link pointed to is untouched" test "$(cat "$TMP/victim")" = precious
check "nothing is created where a dangling link pointed" test ! -e "$TMP/made-by-root"
check "the images are regular files that check accepts" bash -c \
	"test -f '$TMP/save/$P-vm0.bin' -a ! -L '$TMP/save/$P-vm0.bin' -a ! -L '$TMP/save/$P-vm0-vcpu0.bin' &&
	 '$KVMSTATS' check --file '$TMP/save/$P-vm0.bin' --file '$TMP/save/$P-vm0-vcpu0.bin' >/dev/null"
ln -s "$TMP" "$TMP/savelink"
"$KVMSTATS" dump --pid $P --save "$TMP/savelink" >/dev/null 2>"$TMP/save.err"
check "dump --save to a link to a directory is refused" test $? = 1
check "and says why" grep -q "savelink: is a symbolic link" "$TMP/save.err"
