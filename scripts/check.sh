#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# `make check`: the tests that need nothing but the build (no /dev/kvm, no
# QEMU or other daemon, no root, no network), as a package build runs
# them. The unit tests whose source is not tagged `kvmstats-test:
# needs=kvm`, every stats image of tests/fixtures and tests/tools/mkbad
# through `kvmstats check --file`, and the fuzz harnesses replaying those
# images once each. TAP lines, then "N passed, M failed, K skipped".
set -u
cd "$(dirname "$0")/.."
O=${O:-build}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvmstats-check.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
passed=0 failed=0 skipped=0

ok() { echo "ok - $1"; passed=$((passed + 1)); }
nok() { echo "not ok - $1${2:+: $2}"; failed=$((failed + 1)); }

# unit BIN: run one cmocka binary (TAP), count its lines; a binary that
# dies without a "not ok" counts as one failure.
unit() {
	local out=$TMP/$(basename "$1").tap rc n
	timeout -k 5 300 env CMOCKA_MESSAGE_OUTPUT=TAP "$1" >"$out" 2>&1 </dev/null
	rc=$?
	sed "s/^\(not \)\{0,1\}ok [0-9]* - /&$(basename "$1"): /" "$out"
	# cmocka writes a skipped test as "not ok N # SKIP".
	n=$(grep -c '^ok ' "$out")
	passed=$((passed + n))
	n=$(grep -c '^\(not \)\{0,1\}ok .*# SKIP' "$out")
	skipped=$((skipped + n))
	n=$(grep '^not ok ' "$out" | grep -vc '# SKIP')
	failed=$((failed + n))
	[ "$rc" = 0 ] || [ "$n" != 0 ] || nok "$(basename "$1") exited with status $rc"
}

for src in tests/unit/test_*.c; do
	bin=$O/tests/$(basename "$src" .c)
	if grep -q 'kvmstats-test: needs=kvm' "$src"; then
		echo "# $(basename "$src"): needs /dev/kvm, left to make test"
		continue
	fi
	[ -x "$bin" ] || { nok "$bin" "not built"; continue; }
	unit "$bin"
done

# Every image: the valid ones pass, each malformed one fails naming the
# rule it breaks (mkbad's manifest says which), none kills the CLI.
mkdir -p "$TMP/images"
if ! "$O/mkbad" "$TMP/images" >"$TMP/manifest"; then
	nok "mkbad writes the malformed images"
fi
for f in tests/fixtures/*.bin; do echo "$f -"; done >>"$TMP/manifest"
while read -r file rule; do
	name=$(basename "$file" .bin)
	# A newer kernel's type or unit (ok-unknown-*) is valid, but check
	# passes it only when told to allow what it does not know.
	allow=()
	case $name in ok-unknown-*) allow=(--allow-unknown) ;; esac
	timeout -k 5 60 "$O/kvmstats" check "${allow[@]}" --file "$file" >"$TMP/out" 2>&1
	rc=$?
	if [ "$rule" = - ]; then
		[ $rc = 0 ] && ok "check --file accepts $name" ||
			nok "check --file accepts $name" "status $rc: $(head -2 "$TMP/out")"
	elif [ $rc = 1 ] && grep -q "FAIL .* $rule:" "$TMP/out"; then
		ok "check --file rejects $name naming $rule"
	else
		nok "check --file rejects $name naming $rule" "status $rc: $(head -2 "$TMP/out")"
	fi
done <"$TMP/manifest"

# The fuzz harnesses, built without libFuzzer, on every seed: no crash.
seeds=("$TMP"/images/* tests/fixtures/*)
for r in "$O"/fuzz/replay_*; do
	[ -x "$r" ] || continue
	name=${r##*/replay_}
	extra=()
	[ -d "fuzz/corpus/$name" ] && extra=(fuzz/corpus/"$name"/*)
	if timeout -k 5 300 "$r" "${seeds[@]}" "${extra[@]}" >"$TMP/replay.log" 2>&1; then
		ok "fuzz_$name replays $((${#seeds[@]} + ${#extra[@]})) seeds without a crash"
	else
		tail -5 "$TMP/replay.log"
		nok "fuzz_$name replays its seeds without a crash" "$(tail -1 "$TMP/replay.log")"
	fi
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
