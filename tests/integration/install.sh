#!/bin/bash
# make install into a staging directory, then build a program against the
# installed header, pkg-config file and shared library, and run it on the
# kernel's own layouts: the library is usable as shipped.
# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats-test: needs=none nosan
source "$(dirname "$0")/../lib.sh"

DEST=$TMP/stage
# The library goes to the compiler's multiarch directory when it has one.
MA=$(cc -print-multiarch 2>/dev/null)
LIB=usr/lib${MA:+/$MA}
make -s -C "$ROOT" install PREFIX=/usr DESTDIR="$DEST" >"$TMP/install.log" 2>&1
check "make install PREFIX=/usr DESTDIR=..." test $? = 0
for f in usr/bin/kvmstats usr/include/kvmstats.h $LIB/libkvmstats.a \
	$LIB/libkvmstats.so.0 $LIB/pkgconfig/libkvmstats.pc \
	usr/share/man/man1/kvmstats.1 usr/share/man/man1/kvmstats-dump.1 \
	usr/libexec/kvmstats/tinyvmm usr/lib/systemd/system/kvmstats-serve.service \
	usr/lib/sysusers.d/kvmstats.conf etc/default/kvmstats; do
	check "installed $f" test -e "$DEST/$f"
done
check "the .pc's libdir is the multiarch directory" \
	grep -qx "libdir=\${prefix}/lib${MA:+/$MA}" "$DEST/$LIB/pkgconfig/libkvmstats.pc"
check "the units name the installed binary and options file" \
	grep -q "^ExecStart=/usr/bin/kvmstats serve .KVMSTATS_SERVE_OPTS$" \
	"$DEST/usr/lib/systemd/system/kvmstats-serve.service"
check "nothing of @...@ is left in the units" \
	bash -c "! grep -q '@[A-Z]*@' '$DEST'/usr/lib/systemd/system/*.service"

cat >"$TMP/consumer.c" <<'C'
#include <stdio.h>
#include <kvmstats.h>

int main(int argc, char **argv)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	char why[200];
	LIBKVMSTATS_READER_OPTS_CHECK
	struct kvmstats_reader *r = kvmstats_reader__open_file(ctx, argv[1],
		&(struct kvmstats_reader_opts){ .sz = sizeof(struct kvmstats_reader_opts),
						.errbuf = why, .errbuf_sz = sizeof(why) });
	struct kvmstats_sample *s;

	if (argc < 2 || !r) {
		fprintf(stderr, "open: %s\n", why);
		return 1;
	}
	s = kvmstats_sample__new(kvmstats_reader__schema(r));
	if (kvmstats_reader__read(r, s))
		return 1;
	printf("%s %u\n", kvmstats_reader__id(r),
	       kvmstats_schema__num_stats(kvmstats_reader__schema(r)));
	kvmstats_sample__free(s);
	kvmstats_reader__close(r);
	kvmstats_ctx__free(ctx);
	return 0;
}
C
sed -i 's/LIBKVMSTATS_READER_OPTS_CHECK//' "$TMP/consumer.c"
export PKG_CONFIG_SYSROOT_DIR=$DEST PKG_CONFIG_LIBDIR=$DEST/$LIB/pkgconfig:/$LIB/pkgconfig:/usr/share/pkgconfig
flags=$(pkg-config --cflags --libs libkvmstats)
check "pkg-config knows libkvmstats" test -n "$flags"
cc -std=c11 -Wall -Werror "$TMP/consumer.c" $flags -o "$TMP/consumer" 2>"$TMP/cc.log"
check "a C11 program builds against the installed header and library" test $? = 0
out=$(LD_LIBRARY_PATH=$DEST/$LIB "$TMP/consumer" "$ROOT/tests/fixtures/x86-vcpu.bin")
check "it reads the kernel's vCPU layout (45 stats)" test "${out#* }" = 45
# Only the declared API is exported.
hidden=$(nm -D --defined-only "$DEST/$LIB/libkvmstats.so.0" | awk '{print $3}' | grep -v '^kvmstats_' | grep -v '^LIBKVMSTATS' | head -3)
check "the shared library exports only kvmstats_* symbols" test -z "$hidden"

# uninstall takes back exactly what install put there.
make -s -C "$ROOT" uninstall PREFIX=/usr DESTDIR="$DEST" >>"$TMP/install.log" 2>&1
check "make uninstall" test $? = 0
left=$(find "$DEST" \( -type f -o -type l \) | head -3)
check "make uninstall leaves no file behind${left:+ ($left)}" test -z "$left"
