// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Where the first pass ends: the pages still pending at its sync. The
 * migration thread reads its pending estimate once per window, and syncs
 * after the first window that leaves it under the threshold; the pass
 * sends its pages in a fixed order, so what is left then is the last
 * pages of that order, as many as the window's budget did not reach.
 * The window boundaries fall at a phase uniform over the pass's bytes:
 * the bytes still to send at the sync are uniform over [c(T) - W, c(T)]
 * (none below 0: the pass ended within the window), where c(T) is what
 * the last T pages cost, T the threshold in pages and W a window's
 * bytes. A tail of zero pages (9 bytes each) costs little: traced on
 * QEMU 10.0, a 128 MiB guest whose top 80 MiB were never touched synced
 * its first pass with 55 pages pending (its ROMs), where the pass's mean
 * cost per page would leave 955.
 *
 * c() is piecewise linear between the tail's points (mem_tail.c), and
 * past them at the rest of the pass's mean; so is its inverse, and the
 * mean leftover is its integral over that range, exact per segment.
 */
#include <math.h>

#include "mem_internal.h"

/* A pass's cost per page: its bytes shared between its zero and its
 * normal pages as QEMU's stream sizes them. */
struct costs {
	double zero, normal;
};

/* The breakpoints of c(): pages x[i] from the end cost y[i] bytes. */
struct curve {
	double x[KVMSTATS_TAIL_POINTS + 2], y[KVMSTATS_TAIL_POINTS + 2];
	unsigned int n;
};

static void add(struct curve *c, double x, double normal, const struct costs *k)
{
	c->x[c->n] = x;
	c->y[c->n] = (x - normal) * k->zero + normal * k->normal;
	c->n++;
}

/* c() of a pass of @pages pages, @normal of them not zero: the tail's
 * points where given, made consistent (never fewer than before, nor
 * more than the pages added or than the pass has), then the whole
 * pass. */
static void build(struct curve *c, const struct kvmstats_migrate_input *in,
		  double pages, double normal, const struct costs *k)
{
	double px = 0, pn = 0;

	c->n = 0;
	add(c, 0, 0, k);
	for (uint32_t i = 0;
	     in->tail && i < in->ntail && i < KVMSTATS_TAIL_POINTS; i++) {
		double x = (double)in->tail[i].pages,
		       nn = fmin(fmin(fmax(in->tail[i].normal, pn),
				      pn + (x - px)),
				 fmax(normal, pn));

		if (x <= px || x >= pages)
			break;
		add(c, x, nn, k);
		px = x;
		pn = nn;
	}
	add(c, pages, fmin(fmax(normal, pn), pn + (pages - px)), k);
}

/* c(x), and its inverse at @b. */
static double bytes_at(const struct curve *c, double x)
{
	for (unsigned int i = 1; i < c->n; i++)
		if (x <= c->x[i])
			return c->y[i - 1] + (c->y[i] - c->y[i - 1]) *
						     (x - c->x[i - 1]) /
						     (c->x[i] - c->x[i - 1]);
	return c->y[c->n - 1];
}

static double pages_at(const struct curve *c, unsigned int i, double b)
{
	if (c->y[i] <= c->y[i - 1])
		return c->x[i];
	return c->x[i - 1] + (c->x[i] - c->x[i - 1]) * (b - c->y[i - 1]) /
				     (c->y[i] - c->y[i - 1]);
}

/* The integral of the pages left over bytes left in [lo, hi]. */
static double integral(const struct curve *c, double lo, double hi)
{
	double sum = 0;

	for (unsigned int i = 1; i < c->n; i++) {
		double a = fmax(lo, c->y[i - 1]), b = fmin(hi, c->y[i]);

		if (b > a)
			sum += (pages_at(c, i, a) + pages_at(c, i, b)) / 2 *
			       (b - a);
	}
	return sum;
}

double ks_mig_first_leftover(const struct kvmstats_migrate_input *in,
			     double pages, double normal, double bytes,
			     double thr, double win, double *left_bytes)
{
	double zero = fmax(0, pages - normal), sized, ct, lo;
	struct costs k = {0, 0};
	struct curve c;

	*left_bytes = 0;
	if (pages <= 0 || bytes <= 0)
		return 0;
	sized = zero * KVMSTATS_QEMU_ZERO_PAGE_BYTES +
		normal * KVMSTATS_QEMU_NORMAL_PAGE_BYTES;
	if (in->tail && in->ntail && sized > 0) {
		k.zero = KVMSTATS_QEMU_ZERO_PAGE_BYTES * bytes / sized;
		k.normal = KVMSTATS_QEMU_NORMAL_PAGE_BYTES * bytes / sized;
	} else {
		/* No tail: every page at the pass's mean. */
		k.zero = k.normal = bytes / pages;
	}
	build(&c, in, pages, normal, &k);
	ct = bytes_at(&c, fmin(thr, pages));
	if (win <= 0) {
		*left_bytes = ct;
		return fmin(thr, pages);
	}
	lo = fmax(0, ct - win);
	*left_bytes = (ct * ct - lo * lo) / (2 * win);
	return integral(&c, lo, ct) / win;
}
