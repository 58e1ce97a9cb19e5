#!/bin/bash
# Bounded libFuzzer runs (ASan+UBSan) of the parsers of what kvmstats
# does not trust: the stats image parser, seeded with the kernel's own
# layouts and mkbad's broken images; the log reader, seeded with mklog's
# sound, damaged and forged logs; and what a VMM writes, seeded from
# fuzz/corpus/: QEMU's command line (its QMP sockets), its monitor's
# stats answers (schemas, values, vCPUs), and the QMP client's estimate
# of what a reply costs json-c, held to what json-c takes. FUZZ_SECONDS
# (default 20) is each one's time; FUZZ_JOBS (default: the CPUs, at most
# 2) of them run at once, each a single process on its own CPU, their
# lines printed in order when all have ended.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=none nosan
source "$(dirname "$0")/../lib.sh"

SECONDS_EACH=${FUZZ_SECONDS:-20}
JOBS=${FUZZ_JOBS:-$(nproc)}
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1
[ "$JOBS" -gt 2 ] && JOBS=2
NJOB=0
# fuzz_bg ARGS...: fuzz ARGS in the background, once fewer than JOBS run.
fuzz_bg() {
	while [ "$(jobs -pr | wc -l)" -ge "$JOBS" ]; do
		wait -n
	done
	NJOB=$((NJOB + 1))
	fuzz "$@" >"$TMP/job$NJOB.tap" 2>&1 &
}

# fuzz NAME FUZZER CORPUS MAXLEN
fuzz() {
	local name=$1 fuzzer=$2 corpus=$3
	if [ ! -x "$fuzzer" ]; then
		skip "fuzz $name" "$fuzzer not built (clang missing?)"
		return
	fi
	if "$fuzzer" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 \
		-max_len="$4" -print_final_stats=1 "$corpus" >"$TMP/$name.log" 2>&1; then
		pass "fuzz $name for $SECONDS_EACH s: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$TMP/$name.log" | grep -o '[0-9]*$') inputs, no crash"
	else
		tail -40 "$TMP/$name.log"
		fail "fuzz $name" "libFuzzer found a crash (see above)"
	fi
}

mkdir -p "$TMP/images" "$TMP/logs"
cp "$ROOT"/tests/fixtures/*.bin "$TMP/images/"
"$ROOT/build/mkbad" "$TMP/images" >/dev/null
fuzz_bg "image parser" "$ROOT/build/fuzz/fuzz_image" "$TMP/images" 16384

if "$ROOT/build/mklog" --small "$TMP/logs"; then
	fuzz_bg "log reader" "$ROOT/build/fuzz/fuzz_log" "$TMP/logs" 65536
else
	fail "fuzz log reader" "build/mklog could not write the seed logs"
fi

for name in cmdline qmp qmp_cost; do
	mkdir -p "$TMP/$name"
	cp "$ROOT/fuzz/corpus/$name"/* "$TMP/$name/"
done
fuzz_bg "QEMU command line" "$ROOT/build/fuzz/fuzz_cmdline" "$TMP/cmdline" 16384
fuzz_bg "QMP stats answers" "$ROOT/build/fuzz/fuzz_qmp" "$TMP/qmp" 65536
fuzz_bg "QMP cost estimate" "$ROOT/build/fuzz/fuzz_qmp_cost" "$TMP/qmp_cost" 65536
wait
for i in $(seq "$NJOB"); do
	cat "$TMP/job$i.tap"
done
