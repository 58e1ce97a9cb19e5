#!/bin/bash
# kvmstats check on image files: every malformed
# image is rejected with the broken rule named, by check and by dump, and
# nothing ever dies by a signal (also under ASan+UBSan when built).
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=none
source "$(dirname "$0")/../lib.sh"

"$ROOT/build/mkbad" "$TMP" >"$TMP/manifest" || { fail "mkbad"; exit 1; }
bins=("$KVMSTATS")
[ -x "$ROOT/build-san/kvmstats" ] && bins+=("$ROOT/build-san/kvmstats")

for bin in "${bins[@]}"; do
	tag=$(basename "$(dirname "$bin")")
	while read -r file rule; do
		name=$(basename "$file" .bin)
		"$bin" check --file "$file" >"$TMP/out" 2>&1
		crc=$?
		"$bin" dump --file "$file" >"$TMP/dout" 2>&1
		drc=$?
		if [ "$rule" = - ]; then
			check "$tag: dump reads $name" test $drc = 0
			case $name in
			ok-unknown-*)
				# A newer kernel's type: check fails it unless
				# told to allow what it does not know.
				check "$tag: check fails $name naming desc.type.known" \
					grep -q "^FAIL .* desc.type.known:" "$TMP/out"
				"$bin" check --allow-unknown --file "$file" >/dev/null 2>&1
				check "$tag: check --allow-unknown accepts $name" test $? = 0
				;;
			*) check "$tag: check accepts $name" test $crc = 0 ;;
			esac
			continue
		fi
		if [ $crc = 1 ] && grep -q "FAIL .* $rule:" "$TMP/out"; then
			pass "$tag: check rejects $name naming $rule"
		else
			fail "$tag: check rejects $name naming $rule" "status $crc: $(head -3 "$TMP/out")"
		fi
		if [ $drc = 1 ] && [ "$(grep -c "$file" "$TMP/dout")" -ge 1 ]; then
			pass "$tag: dump refuses $name with a clear error"
		else
			fail "$tag: dump refuses $name with a clear error" "status $drc: $(head -3 "$TMP/dout")"
		fi
	done <"$TMP/manifest"
done

# A file that is not there, a directory, and /dev/zero (endless).
"$KVMSTATS" dump --file /nonexistent >/dev/null 2>&1
check "dump of a missing file: status 1" test $? = 1
"$KVMSTATS" dump --file / >/dev/null 2>&1
check "dump of a directory: status 1" test $? = 1
timeout 20 "$KVMSTATS" dump --file /dev/zero >/dev/null 2>"$TMP/err"
check "dump of an endless file stops with status 1" test $? = 1
check "check of several files counts each" bash -c \
	"'$KVMSTATS' check --file '$ROOT/tests/fixtures/x86-vm.bin' --file '$ROOT/tests/fixtures/x86-vcpu.bin' | grep -qx '58 passed, 0 failed'"
