#!/bin/bash
# Runs every test of the project and ends with "N passed, M failed,
# K skipped". Unit tests (cmocka, TAP output), the integration scripts
# (with a bounded fuzzing run), and both again under ASan+UBSan. Each test prints TAP
# lines; a program that dies without saying why counts as one failure.
# SPDX-License-Identifier: GPL-2.0-or-later
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
LOG=$(mktemp -d /tmp/kvmstats-run.XXXXXX)
passed=0 failed=0 skipped=0

# run NAME TIMEOUT CMD...: run a test program, echo its output, count it.
run() {
	local name=$1 limit=$2 out=$LOG/$(echo "$1" | tr '/ ' '__').log
	shift 2
	echo "# --- $name"
	timeout -k 10 "$limit" "$@" >"$out" 2>&1 </dev/null
	local rc=$?
	cat "$out"
	local ok nok skip
	ok=$(grep -c '^ok ' "$out")
	nok=$(grep -c '^not ok ' "$out")
	skip=$(grep -c '^ok .*# SKIP' "$out")
	passed=$((passed + ok - skip))
	skipped=$((skipped + skip))
	failed=$((failed + nok))
	if [ "$rc" != 0 ] && [ "$nok" = 0 ]; then
		echo "not ok - $name exited with status $rc"
		failed=$((failed + 1))
	fi
}

if [ ! -c /dev/kvm ]; then
	echo "# NOTICE: /dev/kvm is missing: every KVM test below is SKIPPED, not passed"
fi

for t in build/tests/test_*; do
	[ -x "$t" ] || continue
	run "unit $(basename "$t")" 300 env CMOCKA_MESSAGE_OUTPUT=TAP "$t"
done
for t in build-san/tests/test_*; do
	[ -x "$t" ] || continue
	run "asan+ubsan $(basename "$t")" 600 env CMOCKA_MESSAGE_OUTPUT=TAP \
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 "$t"
done
for t in tests/integration/*.sh; do
	[ -f "$t" ] || continue
	run "$(basename "$t" .sh)" 1200 bash "$t"
done

# The integration tests again with the CLI built with ASan+UBSan (leaks
# included), but for the fuzzer (sanitized already), the install check and
# the load test (whose memory bounds do not hold for ASan's allocator).
if [ -x build-san/kvmstats ]; then
	for t in tests/integration/*.sh; do
		case $(basename "$t" .sh) in fuzz | install | serve_load) continue ;; esac
		run "asan+ubsan $(basename "$t" .sh)" 1200 env \
			KVMSTATS="$ROOT/build-san/kvmstats" \
			KVMSTATS_TINYVMM="$ROOT/build/tinyvmm" \
			ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 bash "$t"
	done
fi

echo
echo "# logs: $LOG"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
