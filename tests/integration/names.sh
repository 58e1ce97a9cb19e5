#!/bin/bash
# kvmstats-test: needs=none
# Names from files: a log (build/mklog's names.log) and an image
# (names.bin) whose VM name, stats id and stat name hold terminal escapes,
# OSC, BEL, C1 CSI and bytes that are not UTF-8, and a path holding an
# escape. Every sink shows them escaped (\x1b, \u009b), never raw, never
# dropped: tables, top, CSV, JSON (valid UTF-8, parsed by jq), stderr.
source "$(dirname "$0")/../lib.sh"

"$ROOT/build/mklog" "$TMP" || { fail "mklog wrote the logs"; exit 1; }
NAME='VM \x1b[31mEVIL\x1b[0m\x1b]0;pwned\x07\xff\xfe'
ID='kvm-1\x1b[2J\u009b'
STAT='exits\x1b[5m\xff'

# sink NAME CMD...: stdout and stderr of CMD show safely, and hold
# the escaped forms of the names (WANT: a fixed string each).
sink() {
	local name=$1 want
	shift
	"$@" >"$TMP/out" 2>"$TMP/err"
	if ! shows_safely "$TMP/out" || ! shows_safely "$TMP/err"; then
		fail "$name" "raw control characters or invalid UTF-8: $(cat -v "$TMP/out" "$TMP/err" | head -3)"
		return
	fi
	for want in "${WANT[@]}"; do
		if ! grep -qF -- "$want" "$TMP/out" "$TMP/err"; then
			fail "$name" "'$want' is not in its output: $(head -3 "$TMP/out")"
			return
		fi
	done
	pass "$name"
}

WANT=("$STAT")
sink "replay (table): a stat name escaped" "$KVMSTATS" replay "$TMP/names.log"
WANT=("$NAME" "$ID" "$STAT")
sink "replay --csv: names escaped" "$KVMSTATS" replay --csv "$TMP/names.log"
sink "top --once --replay: names escaped" "$KVMSTATS" top --once --replay "$TMP/names.log"
WANT=("$STAT: not a lower-case identifier")
sink "the library's warnings on stderr: names escaped" "$KVMSTATS" replay "$TMP/names.log"
WANT=("$ID" "$STAT")
sink "dump --file (table): names escaped" "$KVMSTATS" dump --file "$TMP/names.bin"
sink "dump --file --csv: names escaped" "$KVMSTATS" dump --csv --file "$TMP/names.bin"
WANT=("$STAT")
sink "check --file: names escaped" "$KVMSTATS" check --file "$TMP/names.bin" -v

# JSON: valid, and the names read back as their escaped text.
"$KVMSTATS" replay --json "$TMP/names.log" >"$TMP/r.json" 2>/dev/null
check "replay --json is valid UTF-8 without control characters" shows_safely "$TMP/r.json"
check "jq reads it, the name escaped" jq -e --arg n "$NAME" 'select(.vms[0].name == $n)' "$TMP/r.json"
check "the id and the stat name (a key) escaped" jq -e --arg i "$ID" --arg s "$STAT" \
	'select(.vms[0].id == $i and .vms[0].stats[$s] == 42)' "$TMP/r.json"
"$KVMSTATS" top --once --json --replay "$TMP/names.log" >"$TMP/t.json" 2>/dev/null
check "top --once --json is valid UTF-8 without control characters" shows_safely "$TMP/t.json"
check "jq reads it, the name escaped" jq -e --arg n "$NAME" '.vms[0].name == $n' "$TMP/t.json"
"$KVMSTATS" dump --json --file "$TMP/names.bin" >"$TMP/d.json" 2>/dev/null
check "dump --json --file: valid, names escaped" jq -e --arg i "$ID" --arg s "$STAT" \
	'.files[0].id == $i and .files[0].stats[$s] == 42' "$TMP/d.json"

# A path is a name too.
EVIL=$(printf '%s/x\033[31mred\033]0;t\007.log' "$TMP")
cp "$TMP/valid.log" "$EVIL"
WANT=('x\x1b[31mred\x1b]0;t\x07.log')
sink "a path in an error: escaped" "$KVMSTATS" replay "$EVIL.missing"
