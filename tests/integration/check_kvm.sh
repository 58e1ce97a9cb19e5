#!/bin/bash
# kvmstats-test: needs=kvm
# The running kernel's own stats images pass `kvmstats check` with 0
# failed, the id right after the header and no unused bytes, as the
# kernel selftest kvm_binary_stats_test reads them; and every
# selftest-assertion mutation of those images (check_selftest.sh) fails
# naming its rule.
source "$(dirname "$0")/../lib.sh"
require_kvm "check on the kernel's own images"

start_vmm --vms 1 --vcpus 2 --exits 100 --hold-stats ||
	{ fail "tinyvmm started"; exit 1; }
"$KVMSTATS" dump --pid "$VMM_PID" --save "$TMP/saved" >/dev/null
check "dump --save wrote the VM's and both vCPUs' images" \
	test "$(ls "$TMP/saved" | wc -l)" = 3
vm=$TMP/saved/$VMM_PID-vm0.bin
vcpu=$TMP/saved/$VMM_PID-vm0-vcpu0.bin

for img in "$vm" "$vcpu"; do
	name=$(basename "$img" .bin | sed "s/^$VMM_PID-//")
	"$KVMSTATS" check --file "$img" >"$TMP/out" 2>&1
	rc=$?
	echo "# $name: $(tail -1 "$TMP/out")"
	check "$name: check exits 0" test $rc = 0
	check "$name: 0 failed" grep -Eqx '[0-9]+ passed, 0 failed' "$TMP/out"
	"$KVMSTATS" --json check --file "$img" >"$TMP/json"
	# The kernel writes header, id, descriptors and data back to back.
	check "$name: id at 24 and no unused bytes" jq -e \
		'.failed == 0 and .targets[0].rules["id.offset"] == "passed" and
		 .targets[0].rules["layout.gaps"] == "passed" and
		 all(.targets[0].rules[]; . != "failed")' "$TMP/json"
	"$KVMSTATS" check --verbose --file "$img" >"$TMP/vout" 2>&1
	check "$name: --verbose says ok for every image rule" test \
		"$(grep -c "^ok   file $img [a-z]" "$TMP/vout")" = \
		"$(jq '.targets[0].rules | length' "$TMP/json")"
done

# The live check of this kernel, strict, rule by rule.
"$KVMSTATS" check --verbose --vms 1 --vcpus 1 >"$TMP/live" 2>&1
rc=$?
echo "# live: $(tail -1 "$TMP/live")"
check "live check --verbose exits 0" test $rc = 0
check "live check: no FAIL line" bash -c "! grep -q '^FAIL' '$TMP/live'"
check "live check: id.offset ok on the VM and the vCPU" test \
	"$(grep -Ec '^ok   vm0(/vcpu0)? id\.offset$' "$TMP/live")" = 2

# The kernel's own images, broken one selftest assertion at a time, with
# the release CLI alone: check_selftest.sh runs both CLIs on the same
# mutations of the fixtures, and this part costs minutes under emulation.
SELFTEST_ONE_CLI=1 KVMSTATS=$ROOT/build/kvmstats \
	bash "$(dirname "$0")/check_selftest.sh" "$vm" "$vcpu"

# The live check at scale: 3 VMs x 4 vCPUs, every live rule per target.
"$KVMSTATS" check --vms 3 --vcpus 4 >"$TMP/kernel" 2>&1
rc=$?
echo "# kernel: $(tail -1 "$TMP/kernel")"
check "check passes on this kernel (3 VMs x 4 vCPUs)" test $rc = 0
check "check ends with 'N passed, 0 failed'" grep -Eqx '[0-9]+ passed, 0 failed' "$TMP/kernel"
check "check counts every live rule per target" \
	test "$(tail -1 "$TMP/kernel" | cut -d' ' -f1)" = $((15 * 37))
"$KVMSTATS" --json check --vms 1 --vcpus 1 >"$TMP/kernel.json"
check "check --json" jq -e '.failed == 0 and (.targets | length) == 2' "$TMP/kernel.json"
