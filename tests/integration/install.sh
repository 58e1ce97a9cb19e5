#!/bin/bash
# make install into a staging directory, then build a program against the
# installed header, pkg-config file and shared library, and run it on the
# kernel's own layouts: the library is usable as shipped.
# SPDX-License-Identifier: GPL-2.0-or-later
source "$(dirname "$0")/../lib.sh"

DEST=$TMP/stage
make -s -C "$ROOT" install PREFIX=/usr DESTDIR="$DEST" >"$TMP/install.log" 2>&1
check "make install PREFIX=/usr DESTDIR=..." test $? = 0
for f in usr/bin/kvmstats usr/include/kvmstats.h usr/lib/libkvmstats.a \
	usr/lib/libkvmstats.so.0 usr/lib/pkgconfig/libkvmstats.pc \
	usr/share/man/man1/kvmstats.1 usr/share/man/man1/kvmstats-dump.1; do
	check "installed $f" test -e "$DEST/$f"
done

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
export PKG_CONFIG_SYSROOT_DIR=$DEST PKG_CONFIG_LIBDIR=$DEST/usr/lib/pkgconfig:/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/share/pkgconfig
flags=$(pkg-config --cflags --libs libkvmstats)
check "pkg-config knows libkvmstats" test -n "$flags"
cc -std=c11 -Wall -Werror "$TMP/consumer.c" $flags -o "$TMP/consumer" 2>"$TMP/cc.log"
check "a C11 program builds against the installed header and library" test $? = 0
out=$(LD_LIBRARY_PATH=$DEST/usr/lib "$TMP/consumer" "$ROOT/tests/fixtures/x86-vcpu.bin")
check "it reads the kernel's vCPU layout (45 stats)" test "${out#* }" = 45
# Only the declared API is exported.
hidden=$(nm -D --defined-only "$DEST/usr/lib/libkvmstats.so.0" | awk '{print $3}' | grep -v '^kvmstats_' | grep -v '^LIBKVMSTATS' | head -3)
check "the shared library exports only kvmstats_* symbols" test -z "$hidden"
