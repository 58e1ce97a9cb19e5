#!/bin/bash
# kvmstats-test: needs=none
# Logs and log paths from elsewhere: forged logs (build/mklog) end quickly
# in `replay` and `top --replay` with a clear outcome and little memory,
# and `record` never writes through a link planted at its output path.
source "$(dirname "$0")/../lib.sh"

MKLOG=$ROOT/build/mklog
[ -x "$MKLOG" ] || { fail "build/mklog built"; exit 1; }
"$MKLOG" "$TMP" || { fail "mklog wrote the logs"; exit 1; }

# timed NAME SECONDS CMD...: run CMD (stdout to $TMP/out, stderr to
# $TMP/err, peak RSS in KiB to $TMP/rss), killed after 30 s; sets RC and
# fails NAME when it took SECONDS or more.
timed() {
	local name=$1 limit=$2 t0 t1
	shift 2
	t0=$(date +%s%N)
	/usr/bin/time -f %M -o "$TMP/rss" timeout 30 "$@" >"$TMP/out" 2>"$TMP/err"
	RC=$?
	t1=$(date +%s%N)
	ELAPSED=$(((t1 - t0) / 1000000))
	if [ "$ELAPSED" -lt $((limit * 1000)) ]; then
		pass "$name: ${ELAPSED} ms"
	else
		fail "$name" "took ${ELAPSED} ms (limit ${limit} s)"
	fi
}

timed "replay of a sound log" 1 "$KVMSTATS" replay --json "$TMP/valid.log"
check "it reads its 40 samples" test "$(wc -l <"$TMP/out")" = 40

# 1 MiB of sync words, each claiming the rest of the file (the old reader
# checked each claim: 15 s here).
timed "replay of a 1 MiB log of forged record headers" 1 "$KVMSTATS" replay "$TMP/flood.log"
check "it says where the damage is" grep -q "log ends with a torn record at offset 32" "$TMP/err"
timed "top --once --replay of it" 1 "$KVMSTATS" top --once --replay "$TMP/flood.log"

# Sound small records each followed by a claim of the rest of the file.
timed "replay of a 1 MiB log of alternating sound and forged records" 1 \
	"$KVMSTATS" replay "$TMP/alternate.log"
check "replay gives up on it with exit status 1" test "$RC" = 1
check "and says why" grep -q "gave up at offset .*a forged file?" "$TMP/err"
check "and that the log is too damaged to read on" grep -q "alternate.log: too damaged to read on" "$TMP/err"
check "warnings about single records stop after 16" test "$(grep -c 'is damaged' "$TMP/err")" -le 16
timed "top --once --replay of it" 1 "$KVMSTATS" top --once --replay "$TMP/alternate.log"
check "top says the same and exits 1" \
	bash -c "test $RC = 1 && grep -q 'reading the log: too damaged' '$TMP/err'"

# 2.5 KiB naming ids near 2^24 and a 1 MiB block (the old reader: 281 MB).
timed "replay of 2.5 KiB of records with huge ids" 1 "$KVMSTATS" replay "$TMP/ids.log"
check "it costs less than 48 MB of memory (peak $(cat "$TMP/rss") KiB)" test "$(cat "$TMP/rss")" -lt 49152

timed "replay of a log cut by kill -9" 1 "$KVMSTATS" replay --json "$TMP/cut.log"
check "it keeps every whole sample" test "$(wc -l <"$TMP/out")" = 39
timed "replay of a log with a flipped byte" 1 "$KVMSTATS" replay --json "$TMP/flipped.log"
check "it skips one record, says so, exits 0" \
	bash -c "test $RC = 0 && test \$(wc -l <'$TMP/out') = 39 && grep -q 'is damaged' '$TMP/err'"

# ---- record never writes through a planted link -------------------------
echo precious >"$TMP/victim"
ln -s "$TMP/victim" "$TMP/planted.log"
"$KVMSTATS" record --count 1 --interval 0.01 --output "$TMP/planted.log" >/dev/null 2>"$TMP/err"
check "record --output LINK exits 1" test $? = 1
check "and says it will not write through a link" grep -q "planted.log: is a symbolic link" "$TMP/err"
check "the link's target is untouched" test "$(cat "$TMP/victim")" = precious
# A dangling link: the old writer created the file it points to, as root.
ln -s "$TMP/made-by-root" "$TMP/dangling.log"
"$KVMSTATS" record --count 1 --interval 0.01 --output "$TMP/dangling.log" >/dev/null 2>"$TMP/err"
check "record --output DANGLING-LINK exits 1" test $? = 1
check "and creates nothing where the link points" test ! -e "$TMP/made-by-root"
: >"$TMP/empty"
ln -s "$TMP/empty" "$TMP/empty.log"
"$KVMSTATS" record --count 1 --interval 0.01 --output "$TMP/empty.log" >/dev/null 2>&1
check "nor writes into an empty file a link points to" test ! -s "$TMP/empty"
# The text log (--log-file) too.
ln -s "$TMP/made-by-root" "$TMP/text.log"
"$KVMSTATS" record --log --log-file "$TMP/text.log" --count 1 --interval 0.01 >/dev/null 2>"$TMP/err"
check "record --log-file LINK exits 1, says why, creates nothing" bash -c \
	"test $? = 1 && grep -q 'text.log: is a symbolic link' '$TMP/err' && test ! -e '$TMP/made-by-root'"
echo "not a log" >"$TMP/foreign.log"
"$KVMSTATS" record --count 1 --interval 0.01 --output "$TMP/foreign.log" >/dev/null 2>"$TMP/err"
check "record --output FILE of another kind exits 1, FILE untouched" \
	bash -c "test $? = 1 && test \"\$(cat '$TMP/foreign.log')\" = 'not a log'"
