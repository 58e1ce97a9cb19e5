#!/bin/bash
# kvmstats-test: needs=none nosan
# `kvmstats check` fails every image the kernel selftest
# kvm_binary_stats_test rejects, naming the rule; `dump` never crashes on
# them. Usage: check_selftest.sh [BASE-IMAGE...]; without arguments the
# bases are the x86 fixtures and an image with every type and unit
# (check_kvm.sh passes the running kernel's own images).
#
# The assertions of stats_test() in the newest selftest (Linux 6.x, with
# read_stats_header(), read_stats_descriptors() and read_stat_data()), in
# its order, and the rule that catches each; build/mkselftest writes one
# image breaking each (two or three where the assertion has cases):
#  S1  the header reads whole (24 bytes at 0)            header.size
#  S2  name_size bytes read at 24, right after the header
#                                     layout.bounds (or header.num_desc)
#  S3  the id read at 24 starts with "kvm"     id.prefix (id.offset when
#      id_offset points elsewhere: the selftest ignores id_offset)
#  S4  strlen(id at 24) < name_size            id.terminated (id.offset)
#      -- num_desc 0 ends the test: such an image passes, even with its
#         empty blocks' offsets past the end (checked below)
#  S5  desc_offset != 0 and >= 24                         layout.overlap
#  S6  data_offset != 0 and >= 24                         layout.overlap
#  S7  the descriptor block ends before the data block if it starts
#      before it                                          layout.overlap
#  S8  num_desc descriptors read whole at desc_offset     header.num_desc
#  S9  each name is shorter than name_size         desc.name.terminated
#  S10 type <= LOG_HIST (5 and 15 here)                  desc.type.known
#  S11 unit <= BOOLEAN (5 and 15)                        desc.unit.known
#  S12 base <= POW2 (2 and 15)                           desc.base.known
#  S13 exponent >= 0 for units none, bytes, cycles         desc.exponent
#  S14 exponent <= 0 for seconds                           desc.exponent
#  S15 exponent == 0 for boolean                           desc.exponent
#  S16 size != 0                                               desc.size
#  S17 a linear histogram has a bucket_size             desc.bucket_size
#  S18 no other type has one (cumulative, log histogram) desc.bucket_size
#  S19 the data block (up to its furthest stat) ends before the
#      descriptor block if it starts before it            layout.overlap
#  S20 the data block holds at least num_desc values           data.size
#  S21 the data block reads whole at data_offset               data.size
#  S22 read_stat_data: size != 0 (S16 again, on a histogram)   desc.size
#  S23 read_stat_data: each stat's values read whole           data.size
#      (S21 covers every stat; the image moves one stat past the end)
# S10-S12 fail under `check`; `check --allow-unknown` and `dump` accept
# them with a warning, as a newer kernel may send such stats (id.offset
# likewise). The assertions on live fds (the stats fd of a dup(), of a
# second KVM_GET_STATS_FD, after the VM fd is closed) are the rules
# read.dup, read.second_fd and read.after_close of the live check
# (core_check.sh, check_kvm.sh); older selftests (5.14-6.0) also asserted
# each offset < the sum of the sizes, which S20/S23 cover here.
source "$(dirname "$0")/../lib.sh"

MK=$ROOT/build/mkselftest
[ -x "$MK" ] || { fail "build/mkselftest is built (make build/mkselftest)"; exit 1; }
# Both CLIs, unless the caller asks for $KVMSTATS alone (SELFTEST_ONE_CLI:
# check_kvm.sh, on the kernel's images, where the other cases run both);
# so the script is tagged nosan: an ASan pass of it would repeat the
# ASan CLI's half.
bins=("$KVMSTATS")
[ -z "${SELFTEST_ONE_CLI:-}" ] && [ -x "$ROOT/build-san/kvmstats" ] &&
	[ "$KVMSTATS" != "$ROOT/build-san/kvmstats" ] && bins+=("$ROOT/build-san/kvmstats")
RELAXED=" desc.type.known desc.unit.known desc.base.known id.offset "

if [ $# = 0 ]; then
	set -- "$ROOT/tests/fixtures/x86-vcpu.bin" "$ROOT/tests/fixtures/x86-vm.bin" synthetic
fi

# A signal (status > 128) or a sanitizer report is a crash.
crashed() { [ "$1" -gt 2 ] || grep -q 'Sanitizer\|runtime error' "$2"; }

# check_image BIN TAG ID FILE RULE
check_image() {
	local bin=$1 tag=$2 id=$3 file=$4 rule=$5 name crc vrc drc
	name="$tag $(basename "$file" .bin)"
	"$bin" check --file "$file" >"$TMP/out" 2>&1
	crc=$?
	"$bin" check --verbose --file "$file" >"$TMP/vout" 2>&1
	vrc=$?
	"$bin" dump --file "$file" >"$TMP/dout" 2>"$TMP/derr"
	drc=$?
	if crashed $crc "$TMP/out" || crashed $vrc "$TMP/vout" || crashed $drc "$TMP/derr"; then
		fail "$name: no crash" "check $crc/$vrc, dump $drc: $(grep -m2 'Sanitizer\|runtime error' "$TMP"/out "$TMP"/vout "$TMP"/derr)"
		return
	fi
	if [ "$rule" = - ]; then
		check "$name: check passes it" grep -qx '[0-9]* passed, 0 failed' "$TMP/out"
		check "$name: --verbose shows no failure" bash -c \
			"! grep -q '^FAIL' '$TMP/vout' && test $vrc = 0"
		check "$name: dump reads it" test $drc = 0
		return
	fi
	if [ $crc = 1 ] && grep -q "^FAIL file $file $rule: " "$TMP/out"; then
		pass "$name: check fails it naming $rule"
	else
		fail "$name: check fails it naming $rule" "status $crc: $(grep -m3 FAIL "$TMP/out")"
	fi
	# --verbose: the rule is listed as failed, never "ok" beside a
	# failure, and the target's summary line says FAIL.
	local bad
	bad=$(sed -n "s|^FAIL file $file \([a-z_.]*\): .*|\1|p" "$TMP/vout" | sort -u |
		while read -r r; do grep -qx "ok   file $file $r" "$TMP/vout" && echo "$r"; done)
	if [ $vrc = 1 ] && [ -z "$bad" ] && ! grep -qx "ok   file $file $rule" "$TMP/vout" &&
		grep -q "^FAIL file $file $rule: " "$TMP/vout" &&
		grep -q "^FAIL file $file: [0-9]* rules passed, [1-9][0-9]* failed$" "$TMP/vout"; then
		pass "$name: --verbose lists $rule as failed, no ok beside a failure"
	else
		fail "$name: --verbose lists $rule as failed, no ok beside a failure" \
			"status $vrc, ok beside FAIL: ${bad:-none}"
	fi
	if [[ $RELAXED == *" $rule "* ]]; then
		"$bin" check --allow-unknown --file "$file" >"$TMP/aout" 2>&1
		if [ $? = 0 ] && grep -q "^warn file $file $rule: " "$TMP/aout"; then
			pass "$name: check --allow-unknown passes it with a warning"
		else
			fail "$name: check --allow-unknown passes it with a warning" "$(head -3 "$TMP/aout")"
		fi
		if [ $drc = 0 ] && grep -q "warning: $rule: " "$TMP/derr"; then
			pass "$name: dump reads it with a warning"
		else
			fail "$name: dump reads it with a warning" "status $drc: $(head -2 "$TMP/derr")"
		fi
	elif [ $drc = 1 ] && grep -q "$file" "$TMP/derr"; then
		pass "$name: dump refuses it with a clear error"
	else
		fail "$name: dump refuses it with a clear error" "status $drc: $(head -2 "$TMP/derr")"
	fi
}

n=0
for base in "$@"; do
	n=$((n + 1))
	dir=$TMP/base$n
	mkdir -p "$dir"
	if [ "$base" = synthetic ]; then
		tag=synthetic
		"$MK" "$dir" >"$dir/manifest"
	else
		tag=$(basename "$base" .bin)
		"$MK" "$dir" "$base" >"$dir/manifest"
	fi || { fail "$tag: mkselftest wrote the images"; continue; }
	missing=
	for i in $(seq 1 23); do
		grep -q "^S$i " "$dir/manifest" || missing="$missing S$i"
	done
	check "$tag: an image for each of the 23 assertions (${missing:-none missing})" \
		test -z "$missing"
	for bin in "${bins[@]}"; do
		btag=$(basename "$(dirname "$bin")")
		while read -r id file rule; do
			check_image "$bin" "$btag $tag" "$id" "$file" "$rule"
		done <"$dir/manifest"
	done
done

# The issue's cases in JSON: the rule is failed, and the count says so.
f=$(awk '$1 == "S10" { print $2; exit }' "$TMP/base1/manifest")
"$KVMSTATS" --json check --file "$f" >"$TMP/json"
check "check --json: type 5 fails desc.type.known" jq -e \
	'.failed == 1 and .targets[0].rules["desc.type.known"] == "failed" and
	 .targets[0].rules["header.size"] == "passed" and
	 ([.targets[0].findings[] | select(.severity == "error")] | length) == 1' "$TMP/json"
"$KVMSTATS" --json check --allow-unknown --file "$f" >"$TMP/json"
check "check --json --allow-unknown: a warning, 0 failed" jq -e \
	'.failed == 0 and .targets[0].rules["desc.type.known"] == "warning"' "$TMP/json"
