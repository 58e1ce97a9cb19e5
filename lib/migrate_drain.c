// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The drain of a host: an event simulation of its migrations through one
 * shared link, a few at a time (see kvmstats_drain.h for the model).
 *
 * Each running migration is QEMU's pre-copy pass by pass, as
 * migrate_model.c computes it for one VM at a constant bandwidth, but
 * with the bandwidth changing at every start and finish: a pass sends
 * its bytes at whatever rate the VM has while it runs, but for the
 * leftover QEMU still holds when it syncs the bitmap; the next pass is
 * that leftover and the pages the guest dirtied during the pass (the
 * VM's dirty curve at the pass's length) not already in it (the bitmap's
 * union over the working set, as the model takes it); the stop-and-copy
 * comes when they fit in the current bandwidth x downtime-limit. At a
 * constant bandwidth the two agree (the unit tests check it). A
 * migration whose pending memory after a sync stops falling (no new low
 * in 4 syncs, the model's rule) never ends at that bandwidth: it waits
 * for a bigger share or its abort.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvmstats_drain.h"

#define GIB 1073741824.0
#define MAX_PASSES 2000u
/* Totals closer than this are the same drain (then the mean end decides). */
#define TIE_S 1e-3
/* Greedy search: at most this many schedules simulated. */
#define GREEDY_BUDGET 20000u

enum { CURVE_MID, CURVE_LO, CURVE_HI, NCURVES };

enum phase { P_WAIT, P_SETUP, P_COPY, P_FINAL, P_DONE, P_ABORTED };

/* One VM as the drain sees it: its input and its three dirty curves. */
struct dvm {
	struct kvmstats_drain_vm in;
	char name[128];
	struct kvmstats_dirty_point curve[NCURVES][KVMSTATS_DIRTY_MAX_POINTS];
	double ws[NCURVES];	/* the pages its writes fall on, by curve */
	double cap;		/* pages: no pass sends more */
	double downtime_s;
};

/* Its migration under way. */
struct mig {
	const struct dvm *v;
	const struct kvmstats_dirty_point *curve;
	double ws;		/* its curve's working set */
	bool apart;		/* the high curve's: writes apart from the leftover */
	enum phase ph;
	double setup_left, left, pass_b, pass_t, sent;
	double pass_pg;		/* pages of the pass, its leftover included */
	uint32_t passes;
	bool stuck;		/* its pending memory stopped falling */
	double low;		/* the least pending after a sync so far */
	unsigned int stalled;	/* syncs since it was last lower */
	double start, end, abort_at;
	double share;
	double own;		/* min(its max-bandwidth, its walk's pace) */
	enum kvmstats_drain_limit by;
};

struct kvmstats_drain {
	struct kvmstats_drain_opts o;
	struct dvm *vms;
	size_t n;
	struct kvmstats_drain_result res;
	struct kvmstats_drain_slot *slots;
};

/* ---- one migration, pass by pass ---- */

static double pass_bytes(const struct kvmstats_migrate_input *in, double zero,
			 double normal, double blocks)
{
	double names = in->nblocks ? blocks / in->nblocks * (double)in->block_name_bytes : 0;

	return zero * KVMSTATS_QEMU_ZERO_PAGE_BYTES +
	       normal * KVMSTATS_QEMU_NORMAL_PAGE_BYTES + blocks + names +
	       KVMSTATS_QEMU_EOS_BYTES;
}

static void mig_start(struct mig *m, const struct dvm *v, int curve, double now,
		      double abort_per_gib)
{
	const struct kvmstats_migrate_input *in = &v->in.model;

	memset(m, 0, sizeof(*m));
	m->v = v;
	m->curve = v->curve[curve];
	m->ws = v->ws[curve];
	m->apart = curve == CURVE_HI;
	m->ph = v->in.setup_s > 0 ? P_SETUP : P_COPY;
	m->setup_left = v->in.setup_s;
	m->pass_b = pass_bytes(in, (double)in->zero_pages,
			       (double)(in->nonzero_pages + in->unknown_pages), in->nblocks);
	m->left = m->pass_b;
	m->passes = 1;
	m->low = INFINITY;
	m->start = now;
	m->pass_pg = v->cap;
	m->end = INFINITY;
	m->abort_at = abort_per_gib < 0 ? INFINITY :
		      now + abort_per_gib * (double)v->in.memory_bytes / GIB;
}

/* Bytes of the pass under way that QEMU still holds when it syncs the
 * bitmap at @bw (none in the stop and copy): its leftover. */
static double hold(const struct mig *m, double bw)
{
	const struct kvmstats_migrate_input *in = &m->v->in.model;
	double per = m->pass_pg > 0 ? m->pass_b / m->pass_pg : 0, l;

	if (m->ph == P_FINAL || per <= 0 || bw <= 0)
		return 0;
	/* The first pass ends at any phase of a window, with its last pages
	 * left, a later one after whole windows (migrate_model.c). */
	if (m->passes > 1) {
		l = ks_mig_round_leftover(m->pass_pg,
					  bw * m->v->downtime_s / KVMSTATS_PAGE_SIZE,
					  bw * KS_MIG_WINDOW_S / per);
		l = (l < m->pass_pg ? l : m->pass_pg) * per;
	} else {
		ks_mig_first_leftover(in, m->pass_pg,
				      (double)(in->nonzero_pages + in->unknown_pages),
				      m->pass_b,
				      bw * m->v->downtime_s / KVMSTATS_PAGE_SIZE,
				      bw * KS_MIG_WINDOW_S, &l);
	}
	return l < m->left ? l : m->left;
}

/* The pass under way has been sent but its leftover, at @bw: the sync
 * adds the pages dirtied during it to that leftover; the next pass, or
 * the stop and copy when they fit in bw x downtime-limit, or the end. */
static void end_of_pass(struct mig *m, double bw)
{
	const struct kvmstats_migrate_input *in = &m->v->in.model;
	double d, pend, per = m->pass_pg > 0 ? m->pass_b / m->pass_pg : 0;

	if (m->ph == P_FINAL) {
		m->ph = P_DONE;
		return;
	}
	d = in->npoints ? ks_mig_dirtied_at(m->curve, in->npoints, m->pass_t,
					    m->ws, m->v->cap) : 0;
	/* The bitmap's union, as the per-VM model takes it. */
	pend = per > 0 ? m->left / per : 0;
	d = ks_mig_newly_dirty(d, pend, m->ws, m->v->cap, m->passes > 1, m->apart);
	pend += d;
	m->pass_b = m->left + pass_bytes(in, 0, d, d > 0 ? in->nblocks : 0);
	m->pass_pg = pend;
	m->left = m->pass_b;
	if (pend * KVMSTATS_PAGE_SIZE < bw * m->v->downtime_s)
		m->ph = P_FINAL;
	ks_mig_new_low(&m->low, &m->stalled, pend);
	m->stuck = m->ph != P_FINAL && m->stalled >= KS_MIG_STALLED;
	m->pass_t = 0;
	m->passes++;
}

/* Send what @m sends before its next sync at @bw: seconds it takes. */
static double to_sync(struct mig *m, double bw)
{
	double x = m->left - hold(m, bw);

	m->sent += x;
	m->left -= x;
	m->pass_t += x / bw;
	return x / bw;
}

/* Seconds to @m's next sync at @bw. */
static double to_sync_s(const struct mig *m, double bw)
{
	return bw > 0 ? (m->left - hold(m, bw)) / bw : INFINITY;
}

/* Run @m for @dt seconds at @bw. */
static void mig_advance(struct mig *m, double bw, double dt)
{
	if (m->ph == P_SETUP) {
		double x = dt < m->setup_left ? dt : m->setup_left;

		m->setup_left -= x;
		dt -= x;
		if (m->setup_left > 0)
			return;
		m->ph = P_COPY;
	}
	while (dt > 0 && (m->ph == P_COPY || m->ph == P_FINAL)) {
		double x = to_sync_s(m, bw);

		if (x > dt) {
			m->left -= bw * dt;
			m->sent += bw * dt;
			m->pass_t += dt;
			return;
		}
		dt -= to_sync(m, bw);
		end_of_pass(m, bw);
	}
}

/* Seconds until @m completes at a constant @bw; INFINITY if it never
 * would (its passes stop shrinking). */
static double mig_time_left(const struct mig *m, double bw)
{
	struct mig c = *m;
	double t = c.ph == P_SETUP ? c.setup_left : 0;

	if (c.ph == P_SETUP)
		c.ph = P_COPY;
	if (bw <= 0)
		return c.ph == P_DONE ? t : INFINITY;
	for (uint32_t i = 0; i < MAX_PASSES && c.ph != P_DONE; i++) {
		bool was_final = c.ph == P_FINAL;

		t += to_sync(&c, bw);
		end_of_pass(&c, bw);
		if (!was_final && c.stuck && (i > 0 || m->pass_t == 0))
			return INFINITY;
	}
	return c.ph == P_DONE ? t : INFINITY;
}

/* ---- the link's shares ---- */

static int cmp_own(const void *a, const void *b)
{
	const struct mig *x = *(struct mig *const *)a, *y = *(struct mig *const *)b;

	return (x->own > y->own) - (x->own < y->own);
}

/* QEMU tests each page of a pass for zero before it sends it (see
 * migrate_model.c): the pass's bytes cannot go faster than its pages are
 * tested. A mostly-zero first pass is a few bytes per page tested, so a
 * large zero guest takes less of the link than its share, leaving the
 * rest to the others; its later passes are whole pages, rarely paced. */
static void own_limit(struct mig *m)
{
	double walk = m->v->in.model.walk_rate, pace;

	m->own = m->v->in.max_bandwidth;
	m->by = KVMSTATS_DRAIN_BY_OWN;
	if (walk <= 0 || m->pass_pg <= 0)
		return;
	pace = m->pass_b / m->pass_pg * walk / KVMSTATS_PAGE_SIZE;
	if (pace < m->own) {
		m->own = pace;
		m->by = KVMSTATS_DRAIN_BY_WALK;
	}
}

/* Max-min fair shares of @link among the migrations that send: the
 * smallest own limits are served first, what they leave goes to the rest. */
static void share_link(struct mig **run, size_t k, double link)
{
	struct mig *s[k ? k : 1];
	size_t m = 0;

	for (size_t i = 0; i < k; i++) {
		run[i]->share = 0;
		run[i]->by = KVMSTATS_DRAIN_BY_NONE;
		if (run[i]->ph != P_SETUP) {
			own_limit(run[i]);
			s[m++] = run[i];
		}
	}
	if (m > 1)
		qsort(s, m, sizeof(*s), cmp_own);
	for (size_t i = 0; i < m; i++) {
		double fair = link / (double)(m - i);

		if (s[i]->own > fair) {
			s[i]->share = fair;
			s[i]->by = KVMSTATS_DRAIN_BY_LINK;
		} else {
			s[i]->share = s[i]->own;
		}
		link -= s[i]->share;
	}
}

/* ---- a whole drain in one order ---- */

struct run {
	const struct kvmstats_drain *d;
	int curve;
	struct mig *m;			/* per position of the order */
	struct kvmstats_drain_slot *rec;	/* per position; NULL: not kept */
	double total, sum_end;
};

static void record_seg(struct kvmstats_drain_slot *s, const struct mig *m,
		       double from, double to)
{
	struct kvmstats_drain_seg *last = s->nsegs ? &s->segs[s->nsegs - 1] : NULL;

	if (to <= from)
		return;
	if (last && last->by == m->by && fabs(last->bandwidth - m->share) <=
					       1e-9 * (m->share + 1)) {
		last->to_s = to;
		return;
	}
	if (s->nsegs == KVMSTATS_DRAIN_MAX_SEGS) {
		last->to_s = to;	/* the rest folded into the last */
		return;
	}
	s->segs[s->nsegs++] = (struct kvmstats_drain_seg){ from, to, m->share, m->by };
}

/* The next event: the first completion, abort, setup's end, or the end
 * of a pass its walk paced (the next one's pace differs). */
static double next_event(struct mig **run, size_t k, double now)
{
	double dt = INFINITY;

	for (size_t i = 0; i < k; i++) {
		double x = run[i]->ph == P_SETUP ? run[i]->setup_left
						 : mig_time_left(run[i], run[i]->share);

		if (run[i]->by == KVMSTATS_DRAIN_BY_WALK)
			x = fmin(x, to_sync_s(run[i], run[i]->share));

		if (x < dt)
			dt = x;
		if (run[i]->abort_at - now < dt)
			dt = run[i]->abort_at - now;
	}
	return dt < 0 ? 0 : dt;
}

static void step(struct run *r, struct mig **run, size_t k, double now, double dt)
{
	for (size_t i = 0; i < k; i++) {
		struct mig *m = run[i];
		double left = m->ph == P_SETUP ? m->setup_left : mig_time_left(m, m->share);
		size_t pos = (size_t)(m - r->m);

		if (r->rec)
			record_seg(&r->rec[pos], m, now, now + dt);
		if (left <= dt * (1 + 1e-9) + 1e-12) {
			mig_advance(m, m->share, left * (1 + 1e-9) + 1e-12);
			if (m->ph == P_DONE)
				m->end = now + left;
			continue;
		}
		mig_advance(m, m->share, dt);
		if (m->abort_at <= now + dt + 1e-12) {
			m->ph = P_ABORTED;
			m->end = m->abort_at;
		}
	}
}

/* Run the drain in @order; r->total INFINITY when a migration would
 * never end nor be aborted. */
static void simulate(struct run *r, const size_t *order)
{
	const struct kvmstats_drain *d = r->d;
	size_t n = d->n, next = 0, k = 0;
	struct mig *run[n];
	double now = 0;

	r->total = r->sum_end = 0;
	for (;;) {
		double dt;
		size_t j = 0;

		while (k < d->o.parallel && next < n) {
			mig_start(&r->m[next], &d->vms[order[next]], r->curve, now,
				  d->o.abort_s_per_gib);
			run[k++] = &r->m[next++];
		}
		if (!k)
			break;
		share_link(run, k, d->o.link);
		dt = next_event(run, k, now);
		if (!isfinite(dt)) {
			/* Never aborted, never done: neither is the drain. */
			for (size_t i = next; i < n; i++)
				r->m[i] = (struct mig){ .v = &d->vms[order[i]],
					.start = INFINITY, .end = INFINITY };
			r->total = INFINITY;
			r->sum_end = INFINITY;
			return;
		}
		step(r, run, k, now, dt);
		now += dt;
		for (size_t i = 0; i < k; i++) {
			if (run[i]->ph == P_DONE || run[i]->ph == P_ABORTED)
				r->sum_end += run[i]->end;
			else
				run[j++] = run[i];
		}
		k = j;
	}
	r->total = now;
}

static bool better(double total, double sum_end, double best, double best_sum)
{
	if (total < best - TIE_S)
		return true;
	return total <= best + TIE_S && sum_end < best_sum - TIE_S;
}

/* ---- the order ---- */

static bool next_perm(size_t *a, size_t n)
{
	size_t i = n - 1, j = n - 1, t;

	while (i > 0 && a[i - 1] >= a[i])
		i--;
	if (i == 0)
		return false;
	while (a[j] <= a[i - 1])
		j--;
	t = a[i - 1], a[i - 1] = a[j], a[j] = t;
	for (j = n - 1; i < j; i++, j--)
		t = a[i], a[i] = a[j], a[j] = t;
	return true;
}

static void exhaustive(struct kvmstats_drain *d, struct run *r, size_t *order)
{
	size_t n = d->n, perm[n];
	double best = INFINITY, best_sum = INFINITY;

	for (size_t i = 0; i < n; i++)
		perm[i] = i;
	do {
		simulate(r, perm);
		d->res.orders_tried++;
		if (better(r->total, r->sum_end, best, best_sum) || best == INFINITY) {
			best = r->total;
			best_sum = r->sum_end;
			memcpy(order, perm, sizeof(perm));
		}
	} while (next_perm(perm, n));
}

/* A VM's time alone at min(own, link): its end if it never converges. */
static double alone_time(const struct kvmstats_drain *d, size_t i)
{
	struct mig m;
	double bw = fmin(d->vms[i].in.max_bandwidth, d->o.link), t;

	mig_start(&m, &d->vms[i], CURVE_MID, 0, d->o.abort_s_per_gib);
	t = mig_time_left(&m, bw);
	return t < m.abort_at ? t : m.abort_at;
}

/* Sort key of VM @i: @by 1: memory, largest first; -1: smallest first;
 * 2: @times, longest first. Ties keep the caller's order. */
static double sort_key(const struct kvmstats_drain *d, size_t i, int by,
		       const double *times)
{
	if (by == 2)
		return -times[i];
	return (double)d->vms[i].in.memory_bytes * (by == 1 ? -1 : 1);
}

/* Insertion sort (stable; a drain has few VMs). */
static void sort_order(const struct kvmstats_drain *d, size_t *order, int by,
		       const double *times)
{
	for (size_t i = 1; i < d->n; i++) {
		size_t v = order[i], j = i;
		double kv = sort_key(d, v, by, times);

		while (j && sort_key(d, order[j - 1], by, times) > kv) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = v;
	}
}

/* Longest first (LPT), then swaps of two VMs while one helps, bounded. */
static void greedy(struct kvmstats_drain *d, struct run *r, size_t *order)
{
	size_t n = d->n;
	double times[n], best, best_sum;
	bool improved = true;

	for (size_t i = 0; i < n; i++) {
		times[i] = alone_time(d, i);
		order[i] = i;
	}
	sort_order(d, order, 2, times);
	simulate(r, order);
	d->res.orders_tried = 1;
	best = r->total;
	best_sum = r->sum_end;
	while (improved && d->res.orders_tried < GREEDY_BUDGET) {
		improved = false;
		for (size_t i = 0; i < n && d->res.orders_tried < GREEDY_BUDGET; i++) {
			for (size_t j = i + 1; j < n && d->res.orders_tried < GREEDY_BUDGET; j++) {
				size_t t = order[i];

				order[i] = order[j], order[j] = t;
				simulate(r, order);
				d->res.orders_tried++;
				if (better(r->total, r->sum_end, best, best_sum)) {
					best = r->total;
					best_sum = r->sum_end;
					improved = true;
					continue;
				}
				order[j] = order[i], order[i] = t;
			}
		}
	}
}

static void choose_order(struct kvmstats_drain *d, struct run *r, size_t *order)
{
	for (size_t i = 0; i < d->n; i++)
		order[i] = i;
	if (d->o.order != KVMSTATS_DRAIN_ORDER_PLAN) {
		d->res.search = KVMSTATS_DRAIN_FIXED;
		d->res.orders_tried = 1;
		sort_order(d, order, d->o.order == KVMSTATS_DRAIN_ORDER_LARGEST_FIRST ? 1 : -1,
			   NULL);
		return;
	}
	if (d->n <= KVMSTATS_DRAIN_EXHAUSTIVE_MAX) {
		d->res.search = KVMSTATS_DRAIN_EXHAUSTIVE;
		exhaustive(d, r, order);
	} else {
		d->res.search = KVMSTATS_DRAIN_GREEDY;
		greedy(d, r, order);
	}
}

/* ---- each VM alone, and what would move one that does not converge ---- */

static int predict_alone(const struct dvm *v, double bw, double downtime_s,
			 const struct kvmstats_dirty_point *curve,
			 struct kvmstats_migrate_prediction *out)
{
	struct kvmstats_migrate_input in = v->in.model;
	int err;

	in.sz = sizeof(in);
	in.bandwidth = bw;
	in.downtime_s = downtime_s;
	in.curve = in.npoints ? curve : NULL;
	err = kvmstats_migrate__predict(&in, out);
	if (!err)
		out->seconds += v->in.setup_s;
	return err;
}

/* The smallest downtime-limit (up to 60 s) under which it converges. */
static double downtime_needed(const struct dvm *v, double bw)
{
	struct kvmstats_migrate_prediction p;
	double lo = v->downtime_s, hi = 60;

	if (predict_alone(v, bw, hi, v->curve[CURVE_MID], &p) || !p.converges)
		return 0;
	for (int i = 0; i < 40 && hi - lo > 1e-3; i++) {
		double mid = (lo + hi) / 2;

		if (!predict_alone(v, bw, mid, v->curve[CURVE_MID], &p) && p.converges)
			hi = mid;
		else
			lo = mid;
	}
	return hi;
}

/* The largest share of its dirty curve under which it converges. */
static double quiet_factor(const struct dvm *v, double bw)
{
	struct kvmstats_dirty_point c[KVMSTATS_DIRTY_MAX_POINTS];
	struct kvmstats_migrate_prediction p;
	double lo = 0, hi = 1;

	for (int i = 0; i < 30; i++) {
		double f = (lo + hi) / 2;

		for (uint32_t k = 0; k < v->in.model.npoints; k++) {
			c[k] = v->curve[CURVE_MID][k];
			c[k].pages *= f;
		}
		if (!predict_alone(v, bw, v->downtime_s, c, &p) && p.converges)
			lo = f;
		else
			hi = f;
	}
	return lo;
}

static void alone(const struct kvmstats_drain *d, struct kvmstats_drain_slot *s)
{
	const struct dvm *v = &d->vms[s->index];
	double bw = fmin(v->in.max_bandwidth, d->o.link);

	if (predict_alone(v, bw, v->downtime_s, v->curve[CURVE_MID], &s->alone))
		return;
	s->dirty_bps = s->alone.dirty_pages_per_second * KVMSTATS_PAGE_SIZE;
	if (s->alone.converges && s->converges)
		return;
	s->downtime_needed_s = downtime_needed(v, bw);
	s->quiet_dirty_bps = s->dirty_bps * quiet_factor(v, bw);
}

/* ---- the result ---- */

static enum kvmstats_drain_limit main_limit(const struct kvmstats_drain_slot *s)
{
	double t[KVMSTATS_DRAIN_BY_WALK + 1] = { 0 }, most = 0;
	enum kvmstats_drain_limit best = KVMSTATS_DRAIN_BY_NONE;

	for (uint32_t i = 0; i < s->nsegs; i++)
		if ((unsigned int)s->segs[i].by <= KVMSTATS_DRAIN_BY_WALK)
			t[s->segs[i].by] += s->segs[i].to_s - s->segs[i].from_s;
	for (int by = KVMSTATS_DRAIN_BY_OWN; by <= KVMSTATS_DRAIN_BY_WALK; by++)
		if (t[by] > most) {
			most = t[by];
			best = (enum kvmstats_drain_limit)by;
		}
	return best;
}

static void fill_slot(struct kvmstats_drain *d, size_t pos, size_t idx,
		      const struct mig *m)
{
	struct kvmstats_drain_slot *s = &d->slots[pos];
	const struct dvm *v = &d->vms[idx];

	s->index = idx;
	s->pid = v->in.pid;
	memcpy(s->name, v->name, sizeof(s->name));
	s->position = (uint32_t)pos + 1;
	s->start_s = m->start;
	s->end_s = m->end;
	s->seconds = m->end - m->start;
	s->bytes = (uint64_t)m->sent;
	s->passes = m->passes;
	s->converges = m->ph == P_DONE;
	s->aborted = m->ph == P_ABORTED;
	s->abort_after_s = isfinite(m->abort_at) ? m->abort_at - m->start : -1;
	s->limit = main_limit(s);
	s->min_share = INFINITY;
	for (uint32_t i = 0; i < s->nsegs; i++) {
		if (s->segs[i].by == KVMSTATS_DRAIN_BY_NONE)
			continue;
		s->min_share = fmin(s->min_share, s->segs[i].bandwidth);
		s->max_share = fmax(s->max_share, s->segs[i].bandwidth);
	}
	if (!isfinite(s->min_share))
		s->min_share = 0;
	alone(d, s);
}

/* The chosen order at the dirty curves' lo and hi: the interval. */
static void bounds(struct kvmstats_drain *d, struct run *r, const size_t *order)
{
	struct kvmstats_drain_result *res = &d->res;

	res->total_lo_s = res->total_hi_s = res->total_s;
	for (int c = CURVE_LO; c <= CURVE_HI; c++) {
		r->curve = c;
		simulate(r, order);
		res->total_lo_s = fmin(res->total_lo_s, r->total);
		res->total_hi_s = fmax(res->total_hi_s, r->total);
		for (size_t i = 0; i < d->n; i++) {
			struct kvmstats_drain_slot *s = &d->slots[i];
			bool conv = r->m[i].ph == P_DONE;

			s->end_lo_s = c == CURVE_LO ? fmin(s->end_s, r->m[i].end)
						    : fmin(s->end_lo_s, r->m[i].end);
			s->end_hi_s = c == CURVE_LO ? fmax(s->end_s, r->m[i].end)
						    : fmax(s->end_hi_s, r->m[i].end);
			s->uncertain |= conv != s->converges;
		}
	}
}

static int schedule(struct kvmstats_drain *d)
{
	struct kvmstats_drain_result *res = &d->res;
	size_t n = d->n, order[n];
	struct run r = { .d = d, .curve = CURVE_MID };

	r.m = calloc(n, sizeof(*r.m));
	if (!r.m)
		return -ENOMEM;
	choose_order(d, &r, order);
	r.rec = d->slots;
	simulate(&r, order);
	res->total_s = r.total;
	res->mean_end_s = r.sum_end / (double)n;
	for (size_t i = 0; i < n; i++)
		fill_slot(d, i, order[i], &r.m[i]);
	r.rec = NULL;
	bounds(d, &r, order);
	for (size_t i = 0; i < n; i++) {
		res->not_converging += !d->slots[i].converges;
		res->uncertain += d->slots[i].uncertain;
	}
	free(r.m);
	return 0;
}

/* ---- the object ---- */

static int copy_vm(struct dvm *v, const struct kvmstats_drain_vm *in)
{
	const struct kvmstats_migrate_input *m = &in->model;
	struct kvmstats_dirty_point fit[KVMSTATS_DIRTY_MAX_POINTS];

	if (!(in->max_bandwidth > 0) || m->npoints > KVMSTATS_DIRTY_MAX_POINTS ||
	    (m->npoints && !m->curve))
		return -EINVAL;
	v->in = *in;
	v->in.name = NULL;
	snprintf(v->name, sizeof(v->name), "%s", in->name ? in->name : "");
	/* Read as the per-VM model reads it (its first points' line). */
	if (m->npoints)
		memcpy(fit, m->curve, m->npoints * sizeof(*fit));
	ks_mig_fit_line(fit, m->npoints);
	for (uint32_t k = 0; k < m->npoints; k++) {
		v->curve[CURVE_MID][k] = v->curve[CURVE_LO][k] = v->curve[CURVE_HI][k] =
			fit[k];
		v->curve[CURVE_LO][k].pages = fmin(fit[k].lo, fit[k].pages);
		v->curve[CURVE_HI][k].pages = fmax(fit[k].hi, fit[k].pages);
	}
	v->in.model.curve = NULL;
	v->cap = (double)(m->zero_pages + m->nonzero_pages + m->unknown_pages);
	for (int c = 0; c < NCURVES; c++)
		v->ws[c] = ks_mig_working_set(v->curve[c], m->npoints, v->cap);
	v->downtime_s = in->downtime_s > 0 ? in->downtime_s : KVMSTATS_QEMU_DOWNTIME_MS / 1e3;
	return 0;
}

struct kvmstats_drain *kvmstats_drain__new(const struct kvmstats_drain_vm *vms, size_t n,
					   size_t vm_sz,
					   const struct kvmstats_drain_opts *opts)
{
	struct kvmstats_drain *d;
	int err = -EINVAL;

	if (!vms || !n || n > 4096 || vm_sz < sizeof(*vms) || !opts) {
		errno = EINVAL;
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		errno = ENOMEM;
		return NULL;
	}
	if (ks_opts_copy(&d->o, sizeof(d->o), opts) || !(d->o.link > 0) ||
	    d->o.order > KVMSTATS_DRAIN_ORDER_SMALLEST_FIRST)
		goto err;
	d->o.parallel = d->o.parallel ? d->o.parallel : 2;
	d->o.abort_s_per_gib = d->o.abort_s_per_gib == 0 ? 150 : d->o.abort_s_per_gib;
	err = -ENOMEM;
	d->n = n;
	d->vms = calloc(n, sizeof(*d->vms));
	d->slots = calloc(n, sizeof(*d->slots));
	if (!d->vms || !d->slots)
		goto err;
	for (size_t i = 0; i < n; i++) {
		err = copy_vm(&d->vms[i], (const void *)((const char *)vms + i * vm_sz));
		if (err)
			goto err;
	}
	d->res.link = d->o.link;
	d->res.parallel = d->o.parallel;
	d->res.abort_s_per_gib = d->o.abort_s_per_gib;
	d->res.order = d->o.order;
	d->res.n = n;
	err = schedule(d);
	if (!err)
		return d;
err:
	kvmstats_drain__free(d);
	errno = -err;
	return NULL;
}

void kvmstats_drain__free(struct kvmstats_drain *d)
{
	if (!d)
		return;
	free(d->vms);
	free(d->slots);
	free(d);
}

const struct kvmstats_drain_result *kvmstats_drain__result(const struct kvmstats_drain *d)
{
	return d ? &d->res : NULL;
}

const struct kvmstats_drain_slot *kvmstats_drain__slot(const struct kvmstats_drain *d,
						       size_t i)
{
	return d && i < d->n ? &d->slots[i] : NULL;
}

/* ---- names ---- */

static const char *const order_names[] = { "plan", "largest-first", "smallest-first" };
static const char *const search_names[] = { "exhaustive", "greedy", "fixed" };
static const char *const limit_names[] = { "setup", "own", "link", "walk" };

const char *kvmstats_drain_order_str(enum kvmstats_drain_order o)
{
	return (size_t)o < ARRAY_SIZE(order_names) ? order_names[o] : "?";
}

int kvmstats_drain_order_parse(const char *s)
{
	for (size_t i = 0; s && i < ARRAY_SIZE(order_names); i++)
		if (!strcmp(s, order_names[i]))
			return (int)i;
	return -EINVAL;
}

const char *kvmstats_drain_search_str(enum kvmstats_drain_search s)
{
	return (size_t)s < ARRAY_SIZE(search_names) ? search_names[s] : "?";
}

const char *kvmstats_drain_limit_str(enum kvmstats_drain_limit l)
{
	return (size_t)l < ARRAY_SIZE(limit_names) ? limit_names[l] : "?";
}
