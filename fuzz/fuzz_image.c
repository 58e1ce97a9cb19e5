// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * libFuzzer harness for everything that reads an untrusted image: the
 * validator, the parser, a reader on it, and the decoders of every stat.
 * Run by tests/integration/fuzz.sh for a bounded time.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kvmstats.h"

static void decode_all(struct kvmstats_reader *r)
{
	struct kvmstats_schema *s = kvmstats_reader__schema(r);
	struct kvmstats_sample *smp = kvmstats_sample__new(s);
	const struct kvmstats_stat *st;
	char buf[64];

	if (!smp)
		return;
	if (kvmstats_reader__read(r, smp))
		goto out;
	kvmstats_schema__for_each(st, s) {
		const uint64_t *v = kvmstats_stat__values(st, smp->data);
		double lo, hi;

		kvmstats_stat__format(st, (double)v[0], buf, sizeof(buf));
		if (kvmstats_schema__find(s, kvmstats_stat__name(st)) != st)
			abort();	/* names are unique: lookup must agree */
		if (kvmstats_hist__bucket_bounds(st, 0, &lo, &hi))
			continue;
		kvmstats_hist__quantile(st, v, 0.5);
		kvmstats_hist__quantile(st, v, 0.99);
		kvmstats_stat__rate(st, smp->data, smp->data, 1);
	}
out:
	kvmstats_sample__free(smp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvmstats_report *rep = kvmstats_report__new();
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_reader *r;
	int errors;

	errors = kvmstats_image__validate(data, size, rep);
	r = kvmstats_reader__open_mem(ctx, data, size, NULL);
	/* The parser accepts exactly what the validator finds no error in. */
	if ((r != NULL) != (errors == 0))
		abort();
	if (r) {
		decode_all(r);
		kvmstats_reader__close(r);
	}
	kvmstats_report__free(rep);
	kvmstats_ctx__free(ctx);
	return 0;
}
