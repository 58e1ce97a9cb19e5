#!/bin/bash
# kvmstats-test: needs=none nosan
# The README a newcomer reads: at most 300 lines, `make demo` in the first
# 40; every command has its page in docs/ next to its man page; every
# relative link of README.md, docs/*.md and dist/*/README.md leads to a
# file.
. "$(dirname "$0")/../lib.sh"

README=$ROOT/README.md
n=$(wc -l <"$README")
check "README.md has at most 300 lines ($n)" test "$n" -le 300
check "its first 40 lines name 'make demo'" grep -q 'make demo' <(head -40 "$README")

missing=""
for cmd in top list dump record serve plan check demo; do
	[ -f "$ROOT/docs/kvmstats-$cmd.1" ] || missing="$missing kvmstats-$cmd.1"
	[ -f "$ROOT/docs/$cmd.md" ] || missing="$missing $cmd.md"
	grep -q "(docs/$cmd.md)" "$README" || missing="$missing README->$cmd.md"
done
check "each command has a man page and a page in docs/, linked from the README${missing:+ (missing:$missing)}" \
	test -z "$missing"

# Pages other engineers write; until they land, a link to them is
# reported, not failed.
pending="docs/threat-model.md docs/packaging.md docs/testing.md"
out=$(cd "$ROOT" && /usr/bin/python3 - $pending <<'EOF'
import glob, os, re, sys
pending = set(sys.argv[1:])
for f in ['README.md'] + sorted(glob.glob('docs/*.md') + glob.glob('dist/*/README.md')):
    text = re.sub(r'```.*?```', '', open(f).read(), flags=re.S)
    for m in re.finditer(r'\]\(([^)#\s]+)(#[^)]*)?\)', text):
        if re.match(r'[a-z]+:', m.group(1)):
            continue
        t = os.path.normpath(os.path.join(os.path.dirname(f), m.group(1)))
        if not os.path.exists(t):
            print(('pending ' if t in pending else 'broken ') + f + ' -> ' + m.group(1))
EOF
)
broken=$(grep '^broken ' <<<"$out" | cut -d' ' -f2- | tr '\n' ';')
check "every relative link leads to a file${broken:+ (broken: $broken)}" test -z "$broken"
grep "^pending " <<<"$out" | sort -u | sed "s/^pending /# not written yet: /"
true

# The README's screen is what top draws now, from the same recording
# (scripts/make-demo-screenshot.sh, in tmux), not an old picture.
if command -v tmux >/dev/null; then
	awk '/^The recording in a 100x30 terminal/ { on = 1; next }
		on && /^```$/ { if (in_block) exit; in_block = 1; next }
		in_block { print }' "$README" >"$TMP/readme-shot"
	# The frame of the README's clock: on a loaded machine a fixed wait
	# lands a frame early or late.
	at=$(head -1 "$TMP/readme-shot" | awk '{ print $NF }')
	KVMSTATS=$KVMSTATS "$ROOT/scripts/make-demo-screenshot.sh" list "$at" >"$TMP/shot" 2>&1
	if cmp -s "$TMP/shot" "$TMP/readme-shot"; then
		pass "the README's screen is what top draws from the recording"
	else
		fail "the README's screen is what top draws from the recording" \
			"$(diff "$TMP/readme-shot" "$TMP/shot" | head -6 | tr '\n' '|')"
	fi
else
	fail "the README's screen" "tmux is not installed (scripts/deps.sh test)"
fi
