#!/bin/bash
# kvmstats-test: needs=none nosan
# SPDX-License-Identifier: GPL-2.0-or-later
# The library and the CLI build for arm64 (everything but attach's
# injection, which is x86_64's and says so at run time): Debian's
# gcc-aarch64-linux-gnu against a sysroot of Debian's own arm64 -dev
# packages. The sysroot is made once and cached outside the tree
# (KVMSTATS_CROSS_CACHE, default ~/.cache/kvmstats) by tests/lab/arm64.sh:
# apt-get downloads the packages with a private state directory, from the
# sources this system's apt already uses, without changing its
# configuration, and dpkg -x unpacks them. With qemu-aarch64 (package
# qemu-user) the arm64 binaries also run: the CLI reads the kernel's stats
# images and refuses attach.
source "$(dirname "$0")/../lib.sh"

# shellcheck source=tests/lab/arm64.sh
source "$ROOT/tests/lab/arm64.sh"
CROSS=aarch64-linux-gnu
MA=aarch64-linux-gnu

if ! command -v $CROSS-gcc >/dev/null; then
	fail "cross compiler" "$CROSS-gcc is missing (package gcc-aarch64-linux-gnu; make test-deps)"
	exit 1
fi

if ! arm64_sysroot; then
	tail -20 "$ARM64_LOG"
	fail "an arm64 sysroot of Debian's -dev packages" "apt-get download failed (see above)"
	exit 1
fi
SR=$ARM64_SYSROOT
check "arm64 sysroot with json-c, ncurses, microhttpd, cap-ng, zlib, zstd, yaml, crypt" \
	test -f "$SR/usr/include/json-c/json.h" -a -f "$SR/usr/lib/$MA/libmicrohttpd.so" \
	-a -f "$SR/usr/include/linux/kvm.h"

# Into the tree's build-arm64/, built afresh (the warning check below
# needs every file compiled); lab_arm64.sh, later in the suite, builds
# there too and finds it done.
OUT=$ROOT/build-arm64
rm -rf "$OUT"
arm64_make "$OUT" programs "$OUT/tests/test_image" "$OUT/tests/test_inject" >"$TMP/make.log" 2>&1
rc=$?
[ $rc = 0 ] || tail -30 "$TMP/make.log"
check "make programs for arm64 (CC=$CROSS-gcc, WITH_LIBVIRT=no)" test $rc = 0
check "the arm64 build is warning-free" bash -c "! grep -q 'warning:' '$TMP/make.log'"
check "the test VMs (x86 guests) are left out on arm64" test ! -e "$OUT/tinyvmm"

is_arm64() { readelf -hW "$1" | grep -q 'Machine: *AArch64' && readelf -hW "$1" | grep -q 'Class: *ELF64'; }
check "build/kvmstats is an aarch64 ELF" is_arm64 "$OUT/kvmstats"
check "libkvmstats.so is an aarch64 ELF" is_arm64 "$OUT/libkvmstats.so.0.1.0"
check "the library's objects are aarch64 (libkvmstats.a)" \
	bash -c "readelf -hW '$OUT/libkvmstats.a' | grep 'Machine:' | sort -u | grep -qx '.*AArch64'"
check "the .pc names the arm64 multiarch directory" \
	grep -qx "libdir=\${prefix}/lib/$MA" "$OUT/libkvmstats.pc"

# Run them, when qemu-user can.
QEMU=$(command -v qemu-aarch64 || command -v qemu-aarch64-static)
if [ -z "$QEMU" ]; then
	echo "# qemu-aarch64 not installed (package qemu-user): the arm64 binaries were not run"
	exit 0
fi
run_arm() { "$QEMU" -L "$SR" "$@"; }
check "arm64 kvmstats runs (qemu-user)" run_arm "$OUT/kvmstats" --version
check "arm64 kvmstats check --file passes the kernel's x86 images" bash -c \
	"'$QEMU' -L '$SR' '$OUT/kvmstats' check --file '$ROOT/tests/fixtures/x86-vcpu.bin' | grep -Eqx '[0-9]+ passed, 0 failed'"
for t in test_image test_inject; do
	(cd "$ROOT" && CMOCKA_MESSAGE_OUTPUT=TAP run_arm "$OUT/tests/$t") >"$TMP/$t.tap" 2>&1
	rc=$?
	sed 's/^/# /' "$TMP/$t.tap"
	check "arm64 unit $t passes under qemu-user ($(grep -c '^ok' "$TMP/$t.tap") ok)" \
		bash -c "[ $rc = 0 ] && grep -q '^ok' '$TMP/$t.tap' && ! grep -q '^not ok' '$TMP/$t.tap'"
done

# attach on arm64: a clear refusal, not a crash or a silent nothing. The
# VMM is our x86_64 tinyvmm, when this host has /dev/kvm to run it.
if have_kvm && [ -x "$TINYVMM" ]; then
	start_vmm --vms 1 --vcpus 1
	run_arm "$OUT/kvmstats" dump --pid "$VMM_PID" --source attach >"$TMP/attach.out" 2>&1
	rc=$?
	check "arm64 dump --source attach: status 1, 'attach is only available on x86_64'" \
		bash -c "[ $rc = 1 ] && grep -q 'attach is only available on x86_64' '$TMP/attach.out'"
fi
