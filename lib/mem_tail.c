// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The end of QEMU's first pass: which of the last pages it sends hold
 * data. The pages still pending when its estimate first falls under the
 * threshold are these, and a window sends as many of them as its budget
 * allows: a few hundred KiB of ROMs after thousands of never-touched
 * pages at the top of RAM leave almost nothing for the first sync, where
 * pages of data would leave up to the threshold (migrate_tail.c).
 *
 * QEMU walks its RAM blocks in the order of its ram_list, which
 * ram_block_add() keeps sorted by size, biggest first (ties in the order
 * they were added): x-query-ramblock and `info ramblock` list them so, as
 * do our regions read over QMP. Regions found otherwise are put in that
 * order by their length. A page that is not present is zero, as QEMU's
 * walk finds it; a present one is read and tested; a swapped one is not
 * known, and counted at the share of swapped among the pages not
 * present; one that cannot be read counts as data (the worst case, as
 * the estimates count unknown pages).
 */
#include <errno.h>
#include <stdlib.h>

#include "mem_internal.h"

#define FETCH 256

struct tail {
	const struct kvmstats_pages *pg;
	struct ks_view v;
	unsigned char *buf;
	struct ks_pageref ref[FETCH];
	uint64_t addr[FETCH];
	bool ok[FETCH];
	const unsigned char *ptr[FETCH];
	size_t queued;
	uint64_t seen; /* pages walked back from the end */
	double normal; /* of them not zero */
};

/* Read and test the pages queued: those not read count as data. */
static int flush(struct tail *t)
{
	uint64_t read = 0, zeros = 0;
	int err;

	if (!t->queued)
		return 0;
	err = ks_view_count_zero(&t->v, t->ref, t->queued, t->buf, t->addr,
				 t->ok, t->ptr, &read, &zeros);
	if (err)
		return err;
	t->normal += (double)(t->queued - zeros);
	t->queued = 0;
	return 0;
}

/* Regions in the order QEMU sends them. */
static void send_order(const struct kvmstats_pages *pg, size_t *order)
{
	bool qmp = kvmstats_ram__how(pg->ram) == KVMSTATS_RAM_QMP;

	for (size_t i = 0; i < pg->n; i++) {
		size_t j = i;

		while (!qmp && j > 0 &&
		       pg->r[order[j - 1]].npages < pg->r[i].npages) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
}

/* Walk back from the last page sent, recording the points. */
static int walk(struct tail *t, const size_t *order, uint64_t max_pages,
		struct kvmstats_tail_point *out, uint32_t *n)
{
	const struct kvmstats_pagemap_counts *c = &t->pg->c;
	double unknown =
		c->swapped ? (double)c->swapped / (double)(c->swapped + c->none)
			   : 0;
	uint64_t next = 1;
	int err = 0;

	for (size_t k = t->pg->n; k-- > 0 && !err && t->seen < max_pages;) {
		size_t ri = order[k];
		const struct ks_pg_region *r = &t->pg->r[ri];

		for (uint64_t p = r->npages;
		     p-- > 0 && !err && t->seen < max_pages;) {
			if (ks_bit(r->cand, p))
				t->ref[t->queued++] =
					(struct ks_pageref){ri, p};
			else
				t->normal += unknown;
			if (++t->seen != next && t->queued < FETCH)
				continue;
			err = flush(t);
			if (err || t->seen != next)
				continue;
			out[(*n)++] = (struct kvmstats_tail_point){t->seen,
								   t->normal};
			if (*n == KVMSTATS_TAIL_POINTS)
				return 0;
			next *= 2;
		}
	}
	/* The walk ended between two points: the last is where it ended. */
	err = err ? err : flush(t);
	if (!err && t->seen && (!*n || out[*n - 1].pages < t->seen))
		out[(*n)++] = (struct kvmstats_tail_point){t->seen, t->normal};
	return err;
}

int ks_pages_tail(const struct kvmstats_pages *pg, uint64_t max_pages,
		  struct kvmstats_tail_point *out, uint32_t *n)
{
	struct tail t = {.pg = pg};
	size_t *order;
	int err;

	*n = 0;
	if (!pg || !pg->n)
		return -EINVAL;
	order = calloc(pg->n, sizeof(*order));
	t.buf = aligned_alloc(KS_PAGE, (size_t)FETCH * KS_PAGE);
	err = order && t.buf ? ks_view_open(&t.v, pg) : -ENOMEM;
	if (!err) {
		send_order(pg, order);
		err = walk(&t, order, max_pages, out, n);
		ks_view_close(&t.v);
	}
	free(t.buf);
	free(order);
	if (err)
		*n = 0;
	return err;
}
