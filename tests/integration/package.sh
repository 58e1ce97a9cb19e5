#!/bin/bash
# kvmstats-test: needs=none nosan
# SPDX-License-Identifier: GPL-2.0-or-later
# The Debian packages as a distribution builds them: dpkg-buildpackage -b
# in a copy of the tree (what git tracks, plus new files it does not
# ignore), without network when the kernel lets us take it away, then
# what fleets rely on: lintian has nothing to say above info, the
# binaries carry the distribution's hardening (fortified calls, BIND_NOW,
# RELRO, stack protector), the library sits in the multiarch directory
# with a symbols file covering every export, and each package holds what
# it claims.
source "$(dirname "$0")/../lib.sh"

for tool in dpkg-buildpackage dh lintian readelf; do
	if ! command -v "$tool" >/dev/null; then
		fail "packaging tools" "$tool is missing: make test-deps installs it"
		exit 1
	fi
done

SRC=$TMP/src/kvmstats
mkdir -p "$SRC"
(cd "$ROOT" && git ls-files -co --exclude-standard -z |
	xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$SRC"
check "a copy of the tree to build in" test -x "$SRC/debian/rules"

# No network: a build that reaches for apt-get or a mirror fails.
net=()
unshare -n true 2>/dev/null && net=(unshare -n)
# Built on every core, as buildds do (a serial build and make check took
# 6 of the suite's minutes).
(cd "$SRC" && DEB_BUILD_OPTIONS="parallel=$(nproc)" timeout -k 10 1200 "${net[@]}" dpkg-buildpackage -us -uc -b \
	>"$TMP/build.log" 2>&1)
rc=$?
[ $rc = 0 ] || tail -30 "$TMP/build.log"
check "dpkg-buildpackage -us -uc -b${net:+ without network} succeeds" test $rc = 0
[ $rc = 0 ] || exit 1
check "the build ran make check, and it passed" \
	grep -Eqx '[0-9]+ passed, 0 failed(, [0-9]+ skipped)?' "$TMP/build.log"
check "the build never ran apt-get" bash -c "! grep -q 'apt-get' '$TMP/build.log'"

cd "$TMP/src" || exit 1
timeout -k 10 600 lintian --allow-root --pedantic -I kvmstats_*.changes >"$TMP/lintian.log" 2>&1
sed 's/^/# lintian: /' "$TMP/lintian.log"
check "lintian: no error" bash -c "! grep -q '^E: ' '$TMP/lintian.log'"
check "lintian: no warning that is not overridden with a reason" \
	bash -c "! grep -q '^W: ' '$TMP/lintian.log'"

X=$TMP/x
for p in kvmstats libkvmstats0 libkvmstats-dev; do
	mkdir -p "$X/$p"
	dpkg-deb -x "$p"_*.deb "$X/$p" && dpkg-deb -e "$p"_*.deb "$X/$p/DEBIAN"
	check "package $p built and unpacks" test $? = 0
done
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
BIN=$X/kvmstats/usr/bin/kvmstats
VMM=$X/kvmstats/usr/libexec/kvmstats/tinyvmm
SO=$X/libkvmstats0/usr/lib/$MA/libkvmstats.so.0

# Hardening, read from the ELF files themselves.
for f in "$BIN" "$VMM" "$SO"; do
	[ -f "$f" ] || { fail "$f is in its package"; continue; }
	n=${f#"$X"/}
	check "$n: BIND_NOW" bash -c "readelf -dW '$f' | grep -Eq 'BIND_NOW|FLAGS_1.* NOW'"
	check "$n: RELRO" bash -c "readelf -lW '$f' | grep -q GNU_RELRO"
	check "$n: fortified functions (_FORTIFY_SOURCE)" \
		bash -c "readelf --dyn-syms -W '$f' | grep -q '__[a-z0-9_]*_chk@'"
	check "$n: stack protector" \
		bash -c "readelf --dyn-syms -W '$f' | grep -q '__stack_chk_fail@'"
done
check "kvmstats is position independent" \
	bash -c "readelf -hW '$BIN' | grep -q 'DYN'"
check "the installed kvmstats runs" "$BIN" --version

# The library's place, soname and symbols.
check "libkvmstats.so.0 is in the multiarch directory /usr/lib/$MA" test -L "$SO"
check "its soname is libkvmstats.so.0" \
	bash -c "readelf -dW '$SO' | grep -q 'SONAME.*\\[libkvmstats.so.0\\]'"
nm -D --defined-only "$SO" | awk '$3 ~ /^kvmstats_/ { sub(/@.*/, "", $3); print $3 }' |
	sort >"$TMP/exports"
grep -o '^ kvmstats_[a-z0-9_]*' "$X/libkvmstats0/DEBIAN/symbols" | tr -d ' ' |
	sort >"$TMP/symbols"
check "the symbols file lists every export ($(wc -l <"$TMP/exports") symbols)" \
	bash -c "test -s '$TMP/exports' && cmp -s '$TMP/exports' '$TMP/symbols'"
check "shlibs of libkvmstats0" grep -q '^libkvmstats 0 libkvmstats0' \
	"$X/libkvmstats0/DEBIAN/shlibs"
PC=$X/libkvmstats-dev/usr/lib/$MA/pkgconfig/libkvmstats.pc
check "the -dev .pc is in the multiarch directory, libdir too" \
	grep -qx "libdir=\${prefix}/lib/$MA" "$PC"
check "the -dev package has the headers and the static library" \
	test -f "$X/libkvmstats-dev/usr/include/kvmstats.h" -a \
	-f "$X/libkvmstats-dev/usr/lib/$MA/libkvmstats.a" -a \
	-L "$X/libkvmstats-dev/usr/lib/$MA/libkvmstats.so"

# What the CLI package claims.
K=$X/kvmstats
for f in usr/share/man/man1/kvmstats.1.gz usr/share/man/man1/kvmstats-serve.1.gz \
	usr/share/bash-completion/completions/kvmstats lib/systemd/system/kvmstats-serve.service \
	lib/systemd/system/kvmstats-record.service usr/lib/sysusers.d/kvmstats.conf \
	etc/default/kvmstats usr/share/doc/kvmstats/copyright; do
	check "kvmstats ships /$f" test -e "$K/$f"
done
check "/etc/default/kvmstats is a conffile" grep -qx /etc/default/kvmstats "$K/DEBIAN/conffiles"
check "the postinst creates the kvmstats user" grep -q 'systemd-sysusers.*kvmstats.conf' \
	"$K/DEBIAN/postinst"
# dh_installsystemd --no-enable --no-start: only units the admin enabled
# before are re-enabled (debian-installed), none is started.
check "the units are neither enabled nor started on install" bash -c \
	"grep -q 'deb-systemd-helper debian-installed' '$K/DEBIAN/postinst' &&
	 ! grep -q 'deb-systemd-invoke' '$K/DEBIAN/postinst'"
for u in serve record; do
	f=$K/lib/systemd/system/kvmstats-$u.service
	check "kvmstats-$u.service runs /usr/bin/kvmstats with its options file" bash -c \
		"grep -q '^ExecStart=/usr/bin/kvmstats $u \$KVMSTATS_${u^^}_OPTS$' '$f' &&
		 grep -qx 'EnvironmentFile=-/etc/default/kvmstats' '$f'"
done
