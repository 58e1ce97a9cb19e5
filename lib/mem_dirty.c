// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Dirty rate by sampling, as QEMU's calc-dirty-rate (mode page-sampling)
 * does from inside: pick pages at random (512 per GiB by default, as
 * QEMU's DIRTYRATE_DEFAULT_SAMPLE_PAGES), hash them, hash them again
 * later; the share that changed, times the pages the sample stands for,
 * is the number of pages dirtied in that time. We read from outside, so
 * only present pages can be read without disturbing the guest: the sample
 * is drawn among the present, non-zero-PFN pages, and the pages that
 * became present since the baseline (a write to never-touched memory) are
 * found by classifying again and counted as dirtied when their content is
 * not zero (a THP backing makes 512 pages present for one write; only the
 * written ones matter to a migration).
 *
 * The hashes are taken again at several points of the interval: a guest
 * rewrites a working set, so pages dirtied within t grow concavely with
 * t, and a single rate at one interval says little about another. The
 * migration model interpolates this curve.
 *
 * Soft-dirty bits (clear_refs) would be exact but clearing them zaps every
 * KVM mapping of the VM (and these machines' kernels lack them), and
 * userfaultfd write-protection needs the VMM's cooperation: not defaults.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"

#define FETCH 256
/* At least this many pages: the curve's first point is often a share of
 * about a fifth to a third, which 1024 pages read to 4.5% (one sigma)
 * and 4096 to 2.3%; near the threshold a migration's short rounds read
 * the curve there, and 2% moves QEMU's syncs by one or two rounds (a
 * legacy guest 5% of its bytes, an auto-converge one a throttle step).
 * 16384 (64 MiB read per point, ~10 ms) read it to 1.2%, and every page
 * of a VM with fewer candidates: its curve has no sampling error. */
#define KS_DIRTY_MIN_PAGES 16384u
#define MAX_NEW_TESTED 4096u

struct kvmstats_dirty {
	const struct kvmstats_pages *pg;
	struct ks_view v;
	unsigned char *buf;
	uint64_t addr[FETCH];
	bool ok[FETCH];
	const unsigned char *ptr[FETCH];
	uint64_t n;
	struct ks_pageref *refs;
	uint64_t *hash;
	bool *readable;		/* at the baseline */
	uint64_t *read_ns;	/* when each batch was read at the baseline */
	uint64_t t0;
	double cpu;
	uint64_t seed;
	struct kvmstats_dirty_result res;
};

/* The most sampled pages found missing in one pass, as a share of the
 * population. */
static void note_missing(struct kvmstats_dirty *d, uint64_t missing)
{
	uint64_t m = d->n ? (uint64_t)llround((double)missing *
					      (double)d->pg->c.candidates /
					      (double)d->n) : 0;

	if (m > d->res.missing_pages)
		d->res.missing_pages = m;
}

/* Hash (or compare against the baseline) every sampled page. A page the
 * VMM took away (missing) at the baseline is left out; one that went
 * missing since is "gone", neither dirtied nor clean. Each batch's read
 * is timed: a page's interval is between its two reads, and a pass held
 * up (the CPUs are the guest's too) would otherwise move every point by
 * as long as it was held; *t gets the mean interval. */
static int hash_all(struct kvmstats_dirty *d, bool baseline, uint64_t *changed,
		    uint64_t *gone, double *t)
{
	uint64_t missing = 0;
	double sum = 0;

	*changed = *gone = 0;
	for (uint64_t i = 0; i < d->n; i += FETCH) {
		size_t m = d->n - i < FETCH ? (size_t)(d->n - i) : FETCH;
		uint64_t at = ks_now_ns();
		long got = ks_view_fetch(&d->v, d->refs + i, m, d->buf, d->addr,
					 d->ok, d->ptr);

		if (got < 0)
			return (int)got;
		at += (ks_now_ns() - at) / 2;
		if (baseline)
			d->read_ns[i / FETCH] = at;
		else
			sum += (double)m * ks_secs(at - d->read_ns[i / FETCH]);
		for (size_t k = 0; k < m; k++) {
			uint64_t h;

			missing += ks_view_missing(&d->v, &d->refs[i + k], d->ptr[k]);
			if (baseline) {
				d->readable[i + k] = d->ptr[k] != NULL;
				if (d->ptr[k])
					d->hash[i + k] = ks_hash_page(d->ptr[k]);
				continue;
			}
			if (!d->readable[i + k])
				continue;
			if (!d->ptr[k]) {
				(*gone)++;
				continue;
			}
			h = ks_hash_page(d->ptr[k]);
			*changed += h != d->hash[i + k];
		}
	}
	note_missing(d, missing);
	*t = d->n ? sum / (double)d->n : 0;
	return 0;
}

static int pick_sample(struct kvmstats_dirty *d, const struct kvmstats_dirty_opts *o)
{
	uint64_t total = d->pg->c.candidates, *idx;
	int err = 0;

	d->n = ks_sample_size(d->pg, o->pages_per_gib,
			      o->min_pages ? o->min_pages : KS_DIRTY_MIN_PAGES, total);
	d->refs = calloc(d->n ? d->n : 1, sizeof(*d->refs));
	d->hash = calloc(d->n ? d->n : 1, sizeof(*d->hash));
	d->readable = calloc(d->n ? d->n : 1, sizeof(*d->readable));
	d->read_ns = calloc(d->n / FETCH + 1, sizeof(*d->read_ns));
	idx = calloc(d->n ? d->n : 1, sizeof(*idx));
	if (!d->refs || !d->hash || !d->readable || !d->read_ns || !idx) {
		free(idx);
		return -ENOMEM;
	}
	err = ks_pick_sorted(idx, d->n, total, &d->seed);
	for (uint64_t j = 0; j < d->n && !err; j++)
		err = ks_pages_nth(d->pg, idx[j], &d->refs[j].region, &d->refs[j].page);
	free(idx);
	return err;
}

struct kvmstats_dirty *kvmstats_dirty__new(const struct kvmstats_pages *pg,
					   const struct kvmstats_dirty_opts *opts)
{
	struct kvmstats_dirty_opts o;
	struct kvmstats_dirty *d;
	uint64_t changed, gone;
	double cpu0 = ks_thread_cpu(), t;
	int err = ks_opts_copy(&o, sizeof(o), opts);

	if (err || !pg) {
		errno = EINVAL;
		return NULL;
	}
	/* New pages are told from the baseline's: every page must have
	 * been classified. */
	if (pg->c.unclassified) {
		errno = ETIME;
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		errno = ENOMEM;
		return NULL;
	}
	d->pg = pg;
	d->seed = ks_seed(o.seed);
	d->buf = aligned_alloc(KS_PAGE, (size_t)FETCH * KS_PAGE);
	err = d->buf ? ks_view_open(&d->v, pg) : -ENOMEM;
	if (!err)
		err = pick_sample(d, &o);
	d->t0 = ks_now_ns();
	if (!err)
		err = hash_all(d, true, &changed, &gone, &t);
	if (err) {
		kvmstats_dirty__free(d);
		errno = -err;
		return NULL;
	}
	d->res.population = pg->c.candidates;
	for (uint64_t i = 0; i < d->n; i++)
		d->res.sampled += d->readable[i];
	d->cpu = ks_thread_cpu() - cpu0;
	return d;
}

void kvmstats_dirty__free(struct kvmstats_dirty *d)
{
	if (!d)
		return;
	if (d->v.map)
		ks_view_close(&d->v);
	free(d->buf);
	free(d->refs);
	free(d->hash);
	free(d->readable);
	free(d->read_ns);
	free(d);
}

/* Pages that are candidates now and were not at the baseline, and how
 * many of them hold data: tested (a sample of them when many). */
static int new_pages(struct kvmstats_dirty *d, double *nonzero)
{
	const struct kvmstats_pages *old = d->pg;
	struct kvmstats_pages *now;
	struct ks_pageref ref[FETCH];
	uint64_t fresh = 0, seen = 0, tested = 0, zeros = 0;
	size_t m = 0;
	int err = 0;

	now = kvmstats_pages__classify(old->ram, &(struct kvmstats_pages_opts){
		.sz = sizeof(struct kvmstats_pages_opts),
		.mode = strcmp(old->mode, "pagemap") ? KVMSTATS_PAGEMAP_SCAN
						     : KVMSTATS_PAGEMAP_READ,
		.timeout_ms = old->timeout_ms });
	if (!now)
		return -errno;
	if (now->c.unclassified) {
		kvmstats_pages__free(now);
		return -ETIME;
	}
	for (size_t r = 0; r < now->n; r++)
		for (uint64_t w = 0; w < (now->r[r].npages + 63) / 64; w++)
			fresh += (uint64_t)__builtin_popcountll(now->r[r].cand[w] &
								~old->r[r].cand[w]);
	/* Test up to MAX_NEW_TESTED of them, spread evenly; a word at a
	 * time, so that a region's size costs its words, not its pages. */
	for (size_t r = 0; r < now->n && !err; r++) {
		for (uint64_t w = 0; w < (now->r[r].npages + 63) / 64 && !err; w++) {
			uint64_t bits = now->r[r].cand[w] & ~old->r[r].cand[w];

			while (bits && !err) {
				uint64_t p = w * 64 + (uint64_t)__builtin_ctzll(bits);

				bits &= bits - 1;
				if (fresh > MAX_NEW_TESTED &&
				    (seen++ * MAX_NEW_TESTED) % fresh >= MAX_NEW_TESTED)
					continue;
				ref[m].region = r;
				ref[m++].page = p;
				if (m < FETCH)
					continue;
				err = ks_view_count_zero(&d->v, ref, m, d->buf, d->addr,
							 d->ok, d->ptr, &tested, &zeros);
				m = 0;
			}
		}
	}
	if (!err && m)
		err = ks_view_count_zero(&d->v, ref, m, d->buf, d->addr, d->ok,
					 d->ptr, &tested, &zeros);
	kvmstats_pages__free(now);
	d->res.new_pages = fresh;
	*nonzero = tested ? (double)fresh * (double)(tested - zeros) / (double)tested : 0;
	return err;
}

int kvmstats_dirty__point(struct kvmstats_dirty *d)
{
	struct kvmstats_dirty_point *pt;
	uint64_t changed, gone, ok;
	double cpu0 = ks_thread_cpu(), fresh = 0, lo, hi, p;
	int err;

	if (d->res.npoints >= KVMSTATS_DIRTY_MAX_POINTS)
		return -ENOSPC;
	if (!ks_pidfd_alive(d->pg->ram->pidfd))
		return -ESRCH;
	pt = &d->res.points[d->res.npoints];
	err = hash_all(d, false, &changed, &gone, &pt->t);
	if (!err)
		err = new_pages(d, &fresh);
	d->cpu += ks_thread_cpu() - cpu0;
	if (err)
		return err;
	ok = d->res.sampled - gone;
	p = ok ? (double)changed / (double)ok : 0;
	ks_wilson(changed, ok, &lo, &hi);
	pt->changed = changed;
	pt->pages = p * (double)d->res.population + fresh;
	pt->lo = lo * (double)d->res.population + fresh;
	pt->hi = hi * (double)d->res.population + fresh;
	d->res.gone = gone;
	d->res.npoints++;
	return 0;
}

double ks_dirty_age(const struct kvmstats_dirty *d)
{
	return ks_secs(ks_now_ns() - d->t0);
}

int kvmstats_dirty__result(const struct kvmstats_dirty *d,
			   struct kvmstats_dirty_result *out)
{
	const struct kvmstats_dirty_point *last;

	*out = d->res;
	out->cpu_s = d->cpu;
	out->elapsed_s = ks_secs(ks_now_ns() - d->t0);
	if (!d->res.npoints)
		return -ENODATA;
	last = &d->res.points[d->res.npoints - 1];
	if (last->t > 0) {
		out->pages_per_second = last->pages / last->t;
		out->lo = last->lo / last->t;
		out->hi = last->hi / last->t;
	}
	return 0;
}

int kvmstats_dirty__measure(const struct kvmstats_pages *pg,
			    const struct kvmstats_dirty_opts *opts,
			    double interval_s, uint32_t points,
			    struct kvmstats_dirty_result *out)
{
	struct kvmstats_dirty *d;
	int err = 0;

	if (interval_s <= 0 || !points || points > KVMSTATS_DIRTY_MAX_POINTS)
		return -EINVAL;
	d = kvmstats_dirty__new(pg, opts);
	if (!d)
		return -errno;
	for (uint32_t i = 0; i < points && !err; i++) {
		double at = interval_s / (double)(1u << (points - 1 - i));

		ks_sleep(at - ks_dirty_age(d));
		err = kvmstats_dirty__point(d);
	}
	if (!err)
		err = kvmstats_dirty__result(d, out);
	kvmstats_dirty__free(d);
	return err;
}
