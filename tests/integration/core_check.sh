#!/bin/bash
# kvmstats check: the running kernel's interface passes; every malformed
# image is rejected with the broken rule named, by check and by dump, and
# nothing ever dies by a signal (also under ASan+UBSan when built).
# SPDX-License-Identifier: GPL-2.0-or-later
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

if ! have_kvm; then
	skip "check on this kernel" "/dev/kvm is not available"
	exit 0
fi
"$KVMSTATS" check --vms 3 --vcpus 4 >"$TMP/kernel" 2>&1
rc=$?
echo "# kernel: $(tail -1 "$TMP/kernel")"
check "check passes on this kernel (3 VMs x 4 vCPUs)" test $rc = 0
check "check ends with 'N passed, 0 failed'" grep -Eqx '[0-9]+ passed, 0 failed' "$TMP/kernel"
check "check counts every live rule per target" \
	test "$(tail -1 "$TMP/kernel" | cut -d' ' -f1)" = $((15 * 37))
"$KVMSTATS" --json check --vms 1 --vcpus 1 >"$TMP/kernel.json"
check "check --json" jq -e '.failed == 0 and (.targets | length) == 2' "$TMP/kernel.json"
