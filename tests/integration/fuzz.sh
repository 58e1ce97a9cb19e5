#!/bin/bash
# A bounded libFuzzer run of the image parser (ASan+UBSan), seeded with the
# kernel's own layouts. FUZZ_SECONDS overrides the default 60 s.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=none nosan
source "$(dirname "$0")/../lib.sh"

FUZZER=$ROOT/build/fuzz/fuzz_image
if [ ! -x "$FUZZER" ]; then
	skip "fuzz image parser" "build/fuzz/fuzz_image not built (clang missing?)"
	exit 0
fi
mkdir -p "$TMP/corpus"
cp "$ROOT"/tests/fixtures/*.bin "$TMP/corpus/"
"$ROOT/build/mkbad" "$TMP/corpus" >/dev/null
if "$FUZZER" -max_total_time="${FUZZ_SECONDS:-60}" -rss_limit_mb=2048 \
	-max_len=16384 -print_final_stats=1 "$TMP/corpus" >"$TMP/fuzz.log" 2>&1; then
	pass "fuzz image parser for ${FUZZ_SECONDS:-60} s: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$TMP/fuzz.log" | grep -o '[0-9]*$') inputs, no crash"
else
	tail -40 "$TMP/fuzz.log"
	fail "fuzz image parser" "libFuzzer found a crash (see above)"
fi
