// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * libFuzzer harness for the statistics log reader: every record, the
 * damage scan, the decoders of every entry, a rewind and a second pass.
 * The input is the file, served from a memfd. Run by
 * tests/integration/fuzz.sh for a bounded time, seeded by build/mklog.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvmstats.h"
#include "kvmstats_log.h"

static void check_entry(const struct kvmstats_log_entry *e)
{
	const struct kvmstats_stat *st;
	char buf[64];

	if (!e || !e->target || e->schema != e->target->schema)
		abort();
	/* A value exactly when there is no error. */
	if ((e->data != NULL) != (e->error == 0))
		abort();
	if (!e->data)
		return;
	kvmstats_schema__for_each(st, e->schema) {
		const uint64_t *v = kvmstats_stat__values(st, e->data);

		kvmstats_stat__format(st, (double)v[0], buf, sizeof(buf));
	}
}

/* Every sample; the number read, or -1 when the reader failed. */
static long read_all(struct kvmstats_log_reader *r)
{
	long samples = 0;
	int n;

	while ((n = kvmstats_log_reader__next(r)) > 0) {
		for (size_t i = 0; i < kvmstats_log_reader__num_entries(r); i++)
			check_entry(kvmstats_log_reader__entry(r, i));
		samples++;
	}
	return n < 0 ? -1 : samples;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	struct kvmstats_ctx *ctx;
	struct kvmstats_log_reader *r;
	char path[64];
	long first, second;

	if (fd < 0)
		fd = memfd_create("fuzz-log", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ctx = kvmstats_ctx__new(NULL);
	r = kvmstats_log_reader__open(ctx, path, NULL);
	if (r) {
		first = read_all(r);
		kvmstats_log_reader__rewind(r);
		second = read_all(r);
		/* The same file reads the same way twice. */
		if (first != second)
			abort();
		kvmstats_log_reader__close(r);
	}
	kvmstats_ctx__free(ctx);
	return 0;
}
