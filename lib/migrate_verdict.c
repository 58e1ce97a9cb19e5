// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The inputs' uncertainty carried through the model: the dirty curve is
 * a sample (each point has a 95% interval) and the zero count may be an
 * estimate (its interval). The model is run at the point estimate and at
 * both bounds: few zero pages and the high curve cost most, many zero
 * pages and the low curve least; the guest's writes are taken uniform
 * over its working set, and at the high bound as far apart from the pages
 * still pending as they can be (see migrate_model.c). The verdict is what
 * they agree on; where they disagree the sample decides, so it is
 * "uncertain" (the caller may measure longer and ask again).
 */
#include <errno.h>
#include <math.h>
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
	double zero = (double)in->zero_pages, z = high ? in->zero_lo : in->zero_hi;
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
		double lo = c[k - 1].lo / c[k - 1].t, hi = c[k - 1].hi / c[k - 1].t;

		c[i].pages = rate * c[i].t;
		c[i].lo = fmin(lo, rate) * c[i].t;
		c[i].hi = fmax(hi, rate) * c[i].t;
	}
}

/* Widen [lo, hi] by a run's figure, NAN once a run does not complete. */
static void widen(const struct kvmstats_migrate_prediction *p, double *lo,
		  double *hi, bool bytes)
{
	double v = bytes ? (double)p->bytes : p->seconds;

	if (!p->converges) {
		*hi = NAN;
		return;
	}
	if (isnan(*lo) || v < *lo)
		*lo = v;
	if (!isnan(*hi) && v > *hi)
		*hi = v;
}

int ks_migrate_predict(const struct kvmstats_migrate_input *input,
		       const struct kvmstats_migrate_settings *s,
		       const struct kvmstats_compress_estimate *c,
		       struct kvmstats_migrate_prediction *out,
		       struct kvmstats_migrate_detail *d)
{
	struct kvmstats_dirty_point curve[KVMSTATS_DIRTY_MAX_POINTS];
	struct kvmstats_dirty_point fitted[KVMSTATS_DIRTY_MAX_POINTS];
	struct kvmstats_migrate_prediction run[2];
	struct kvmstats_migrate_input in;
	unsigned int ok;
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
	err = ks_migrate_run(&in, s, c, out, d, KS_MIG_RUN_UNIFORM);
	for (int b = 0; !err && b < 2; b++) {
		struct kvmstats_migrate_input bound = in;

		at_bound(&bound, b, curve);
		err = ks_migrate_run(&bound, s, c, &run[b], NULL,
				     b ? KS_MIG_RUN_APART : KS_MIG_RUN_UNIFORM);
	}
	if (err)
		return err;
	ok = out->converges + run[0].converges + run[1].converges;
	out->verdict = ok == 3 ? KVMSTATS_VERDICT_CONVERGES :
		       ok == 0 ? KVMSTATS_VERDICT_NO : KVMSTATS_VERDICT_UNCERTAIN;
	out->seconds_lo = out->bytes_lo = NAN;
	out->seconds_hi = out->bytes_hi = 0;
	widen(out, &out->seconds_lo, &out->seconds_hi, false);
	widen(out, &out->bytes_lo, &out->bytes_hi, true);
	for (int b = 0; b < 2; b++) {
		widen(&run[b], &out->seconds_lo, &out->seconds_hi, false);
		widen(&run[b], &out->bytes_lo, &out->bytes_hi, true);
	}
	return 0;
}
