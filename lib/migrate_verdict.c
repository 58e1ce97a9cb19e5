// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The inputs' uncertainty carried through the model: the dirty curve is
 * a sample (each point has a 95% interval) and the zero count may be an
 * estimate (its interval). The model is run at the point estimate and at
 * both bounds: few zero pages and the high curve cost most, many zero
 * pages and the low curve least; the guest's writes are taken uniform
 * over its working set, and at the high bound as far apart from the pages
 * still pending as they can be (see migrate_model.c). Where multifd's
 * windows vary, each of the three is many paths, each drawing its
 * windows; a run is its median path, and its 10th and 90th percentiles
 * widen the interval. The verdict is what they agree on; where they
 * disagree the sample (or the windows) decides, so it is "uncertain"
 * (the caller may measure longer and ask again).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"

static const char *const verdict_names[] = {
	[KVMSTATS_VERDICT_CONVERGES] = "converges",
	[KVMSTATS_VERDICT_UNCERTAIN] = "uncertain",
	[KVMSTATS_VERDICT_NO] = "does-not-converge",
};

const char *kvmstats_verdict_str(enum kvmstats_verdict v)
{
	return v <= KVMSTATS_VERDICT_NO ? verdict_names[v] : "unknown";
}

/* @in at one bound: its curve's lo or hi, its zero estimate's hi or lo. */
static void at_bound(struct kvmstats_migrate_input *in, bool high,
		     struct kvmstats_dirty_point *curve)
{
	double zero = (double)in->zero_pages,
	       z = high ? in->zero_lo : in->zero_hi;
	double most = zero + (double)in->nonzero_pages;

	for (uint32_t i = 0; i < in->npoints; i++) {
		curve[i] = in->curve[i];
		curve[i].pages = high ? in->curve[i].hi : in->curve[i].lo;
	}
	if (in->npoints)
		in->curve = curve;
	if (in->zero_lo == 0 && in->zero_hi == 0)
		return;
	z = z < 0 ? 0 : z > most ? most : z;
	in->zero_pages = (uint64_t)llround(z);
	in->nonzero_pages = (uint64_t)llround(most) - in->zero_pages;
}

/* Where the curve's first points lie on one line through 0 (a guest that
 * has not yet come back to pages it dirtied), the line fitted to them all
 * (their pages over their seconds) stands for each: a short round's
 * pages are read off the first point alone otherwise, the least sure
 * (+-12% at 0.25 s where 1 s is +-4%), and near the threshold, where the
 * rounds' pages nearly match what is sent, its error is many times that
 * of the prediction. The line's interval is its longest point's. */
void ks_mig_fit_line(struct kvmstats_dirty_point *c, uint32_t n)
{
	double pages = 0, secs = 0, rate = 0;
	uint32_t k = 0;

	for (uint32_t m = 0; m < n; m++) {
		double r;
		bool fits = true;

		if (c[m].t <= 0)
			return;
		pages += c[m].pages;
		secs += c[m].t;
		r = pages / secs;
		for (uint32_t i = 0; i <= m && fits; i++)
			fits = r * c[i].t >= c[i].lo && r * c[i].t <= c[i].hi;
		if (!fits)
			break;
		k = m + 1;
		rate = r;
	}
	if (k < 2)
		return;
	for (uint32_t i = 0; i < k; i++) {
		double lo = c[k - 1].lo / c[k - 1].t,
		       hi = c[k - 1].hi / c[k - 1].t;

		c[i].pages = rate * c[i].t;
		c[i].lo = fmin(lo, rate) * c[i].t;
		c[i].hi = fmax(hi, rate) * c[i].t;
	}
}

/* Paths run where windows vary (odd: the median is one of them). */
#define KS_MIG_PATHS 201

/* A run over its paths: their times and bytes (+inf where a path does
 * not complete), sorted; the median path by time is the run. */
struct paths {
	double s[KS_MIG_PATHS], b[KS_MIG_PATHS];
	unsigned int n;
	struct kvmstats_migrate_prediction mid;
	/* The 10th and 90th percentiles, NAN where that path does not
	 * complete. */
	double lo_s, hi_s, lo_b, hi_b;
};

static int by_value(const void *a, const void *b)
{
	const double *x = a, *y = b;

	return (*x > *y) - (*x < *y);
}

static double finite_or_nan(double v)
{
	return isinf(v) ? NAN : v;
}

/* ks_migrate_run over the paths of @in: one where windows do not vary,
 * KS_MIG_PATHS where multifd's do, each drawing its windows' packets in
 * flight. The run is its median path by time; @d is that path's. */
static int run_paths(const struct kvmstats_migrate_input *in,
		     const struct kvmstats_migrate_settings *s,
		     const struct kvmstats_compress_estimate *c,
		     unsigned int flags, struct paths *ps,
		     struct kvmstats_migrate_detail *d)
{
	struct kvmstats_migrate_prediction p;
	unsigned int lo, hi, mid = 0;
	double sorted[KS_MIG_PATHS];
	int err;

	ps->n = ks_migrate_windows_vary(in, s) ? KS_MIG_PATHS : 1;
	for (unsigned int i = 0; i < ps->n; i++) {
		err = ks_migrate_run(in, s, c, &p, NULL,
				     flags | KS_MIG_RUN_PATH(i));
		if (err)
			return err;
		ps->s[i] = p.converges ? p.seconds : INFINITY;
		ps->b[i] = p.converges ? (double)p.bytes : INFINITY;
	}
	memcpy(sorted, ps->s, ps->n * sizeof(*sorted));
	qsort(sorted, ps->n, sizeof(*sorted), by_value);
	while (mid + 1 < ps->n && ps->s[mid] != sorted[ps->n / 2])
		mid++;
	qsort(ps->s, ps->n, sizeof(*ps->s), by_value);
	qsort(ps->b, ps->n, sizeof(*ps->b), by_value);
	lo = ps->n / 10;
	hi = ps->n - 1 - lo;
	ps->lo_s = finite_or_nan(ps->s[lo]);
	ps->hi_s = finite_or_nan(ps->s[hi]);
	ps->lo_b = finite_or_nan(ps->b[lo]);
	ps->hi_b = finite_or_nan(ps->b[hi]);
	return ks_migrate_run(in, s, c, &ps->mid, d,
			      flags | KS_MIG_RUN_PATH(mid));
}

/* Widen [lo, hi] by a run's percentiles, NAN once one does not complete. */
static void widen(double v_lo, double v_hi, double *lo, double *hi)
{
	if (isnan(*lo) || (!isnan(v_lo) && v_lo < *lo))
		*lo = v_lo;
	if (isnan(v_hi))
		*hi = NAN;
	else if (!isnan(*hi) && v_hi > *hi)
		*hi = v_hi;
}

int ks_migrate_predict(const struct kvmstats_migrate_input *input,
		       const struct kvmstats_migrate_settings *s,
		       const struct kvmstats_compress_estimate *c,
		       struct kvmstats_migrate_prediction *out,
		       struct kvmstats_migrate_detail *d)
{
	struct kvmstats_dirty_point curve[KVMSTATS_DIRTY_MAX_POINTS];
	struct kvmstats_dirty_point fitted[KVMSTATS_DIRTY_MAX_POINTS];
	struct paths run[3];
	struct kvmstats_migrate_input in;
	unsigned int yes = 0, no = 0;
	int err = ks_opts_copy(&in, sizeof(in), input);

	if (err || !out || (in.npoints && !in.curve))
		return -EINVAL;
	if (in.npoints > KVMSTATS_DIRTY_MAX_POINTS)
		in.npoints = KVMSTATS_DIRTY_MAX_POINTS;
	in.sz = sizeof(in);
	if (in.npoints) {
		memcpy(fitted, in.curve, in.npoints * sizeof(*fitted));
		ks_mig_fit_line(fitted, in.npoints);
		in.curve = fitted;
	}
	err = run_paths(&in, s, c, KS_MIG_RUN_UNIFORM, &run[0], d);
	for (int b = 0; !err && b < 2; b++) {
		struct kvmstats_migrate_input bound = in;

		at_bound(&bound, b, curve);
		err = run_paths(&bound, s, c,
				b ? KS_MIG_RUN_APART : KS_MIG_RUN_UNIFORM,
				&run[1 + b], NULL);
	}
	if (err)
		return err;
	*out = run[0].mid;
	out->seconds_lo = out->bytes_lo = NAN;
	out->seconds_hi = out->bytes_hi = 0;
	/* A run completes where its slow paths do (its 90th percentile),
	 * and does not where even its fast ones do not (its 10th). */
	for (int i = 0; i < 3; i++) {
		yes += !isnan(run[i].hi_s);
		no += isnan(run[i].lo_s);
		widen(run[i].lo_s, run[i].hi_s, &out->seconds_lo,
		      &out->seconds_hi);
		widen(run[i].lo_b, run[i].hi_b, &out->bytes_lo, &out->bytes_hi);
	}
	out->verdict = yes == 3	 ? KVMSTATS_VERDICT_CONVERGES
		       : no == 3 ? KVMSTATS_VERDICT_NO
				 : KVMSTATS_VERDICT_UNCERTAIN;
	return 0;
}
