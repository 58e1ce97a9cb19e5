// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Values: names of types and units, unit scaling, human formatting and
 * histogram math.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "internal.h"

const char *kvmstats_type_str(unsigned int type)
{
	static const char *const names[] = {
		"cumulative", "instant", "peak", "linear_hist", "log_hist",
	};

	return type < ARRAY_SIZE(names) ? names[type] : "unknown";
}

const char *kvmstats_unit_str(unsigned int unit)
{
	static const char *const names[] = {
		"none", "bytes", "seconds", "cycles", "boolean",
	};

	return unit < ARRAY_SIZE(names) ? names[unit] : "unknown";
}

const char *kvmstats_base_str(unsigned int base)
{
	static const char *const names[] = { "pow10", "pow2" };

	return base < ARRAY_SIZE(names) ? names[base] : "unknown";
}

double kvmstats_stat__scale(const struct kvmstats_stat *st, double raw)
{
	int e = st->exponent;

	if (!e)
		return raw;
	if (kvmstats_stat__base(st) == KVMSTATS_BASE_POW2)
		return ldexp(raw, e);
	if (kvmstats_stat__base(st) != KVMSTATS_BASE_POW10)
		return raw;	/* unknown base: leave the raw value */
	return raw * pow(10.0, e);
}

static int format_seconds(double v, char *buf, size_t len)
{
	static const struct {
		double div;
		const char *sfx;
	} steps[] = {
		{ 1, "s" }, { 1e-3, "ms" }, { 1e-6, "us" }, { 1e-9, "ns" },
	};
	double a = fabs(v);

	if (v == 0)
		return snprintf(buf, len, "0 s");
	if (a >= 3600)
		return snprintf(buf, len, "%.2f h", v / 3600);
	if (a >= 60)
		return snprintf(buf, len, "%.2f min", v / 60);
	for (size_t i = 0; i < ARRAY_SIZE(steps); i++)
		if (a >= steps[i].div || i == ARRAY_SIZE(steps) - 1)
			return snprintf(buf, len, "%.3g %s", v / steps[i].div,
					steps[i].sfx);
	return 0;
}

static int format_scaled(double v, double step, const char *const *sfx,
			 size_t nsfx, char *buf, size_t len)
{
	size_t i = 0;

	while (fabs(v) >= step && i + 1 < nsfx) {
		v /= step;
		i++;
	}
	if (i == 0 && v == floor(v) && fabs(v) < 1e15)
		return snprintf(buf, len, "%.0f%s%s", v, *sfx[0] ? " " : "",
				sfx[0]);
	return snprintf(buf, len, "%.3g %s", v, sfx[i]);
}

int kvmstats_format_unit(unsigned int unit, double v, char *buf, size_t len)
{
	static const char *const bytes[] = { "B", "KiB", "MiB", "GiB", "TiB",
					     "PiB" };
	static const char *const plain[] = { "", "k", "M", "G", "T", "P" };
	static const char *const cycles[] = { "cycles", "kcycles", "Mcycles",
					      "Gcycles", "Tcycles" };

	switch (unit) {
	case KVMSTATS_UNIT_BOOLEAN:
		return snprintf(buf, len, "%s", v != 0 ? "yes" : "no");
	case KVMSTATS_UNIT_SECONDS:
		return format_seconds(v, buf, len);
	case KVMSTATS_UNIT_BYTES:
		return format_scaled(v, 1024, bytes, ARRAY_SIZE(bytes), buf, len);
	case KVMSTATS_UNIT_CYCLES:
		return format_scaled(v, 1000, cycles, ARRAY_SIZE(cycles), buf, len);
	default:
		return format_scaled(v, 1000, plain, ARRAY_SIZE(plain), buf, len);
	}
}

int kvmstats_stat__format(const struct kvmstats_stat *st, double raw,
			  char *buf, size_t len)
{
	return kvmstats_format_unit(kvmstats_stat__unit(st),
				    kvmstats_stat__scale(st, raw), buf, len);
}

int kvmstats_hist__bucket_bounds(const struct kvmstats_stat *st, uint32_t i,
				 double *lo, double *hi)
{
	bool last = i + 1 == st->size;

	if (i >= st->size)
		return -ERANGE;
	switch (kvmstats_stat__type(st)) {
	case KVMSTATS_TYPE_LOG_HIST:
		/* The kernel puts value v in bucket fls64(v): 0 in bucket 0,
		 * [2^(i-1), 2^i) in bucket i, and clamps to the last. */
		*lo = i ? ldexp(1, (int)i - 1) : 0;
		*hi = last ? INFINITY : ldexp(1, (int)i);
		if (!i)
			*hi = last ? INFINITY : 1;
		return 0;
	case KVMSTATS_TYPE_LINEAR_HIST:
		/* v / bucket_size, clamped to the last bucket. */
		*lo = (double)i * st->bucket_size;
		*hi = last ? INFINITY : (double)(i + 1) * st->bucket_size;
		return 0;
	default:
		return -EINVAL;
	}
}

/* Buckets are u64s the kernel (or an image, or a log) hands us: their sum
 * can pass 2^64. A wrapped sum would be a small, wrong number; the count
 * saturates at UINT64_MAX instead, which means "that many or more". */
uint64_t kvmstats_hist__count(const struct kvmstats_stat *st,
			      const uint64_t *buckets)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < st->size; i++)
		if (__builtin_add_overflow(n, buckets[i], &n))
			return UINT64_MAX;
	return n;
}

/* The exact total, in 128 bits: 2^32 buckets of UINT64_MAX still fit. */
static double hist_total(const struct kvmstats_stat *st, const uint64_t *buckets)
{
	unsigned __int128 n = 0;

	for (uint32_t i = 0; i < st->size; i++)
		n += buckets[i];
	return (double)n;
}

double kvmstats_hist__quantile(const struct kvmstats_stat *st,
			       const uint64_t *buckets, double q)
{
	double total = hist_total(st, buckets);
	double rank, seen = 0, lo, hi;

	if (!total || q < 0 || q > 1 || isnan(q))
		return NAN;
	rank = q * total;
	for (uint32_t i = 0; i < st->size; i++) {
		if (!buckets[i])
			continue;
		if (seen + (double)buckets[i] < rank && i + 1 < st->size) {
			seen += (double)buckets[i];
			continue;
		}
		if (kvmstats_hist__bucket_bounds(st, i, &lo, &hi))
			return NAN;
		/* The open last bucket has no upper edge: report its floor.
		 * Values are integers: a bucket one wide (log2 buckets 0 and
		 * 1, linear ones of size 1) holds only lo, nothing to
		 * interpolate. */
		if (isinf(hi) || hi - lo <= 1)
			return lo;
		return lo + (hi - lo) * ((rank - seen) / (double)buckets[i]);
	}
	return NAN;
}

double kvmstats_stat__rate(const struct kvmstats_stat *st, const void *prev,
			   const void *cur, uint64_t dt_ns)
{
	uint64_t a, b;

	if (kvmstats_stat__type(st) != KVMSTATS_TYPE_CUMULATIVE || !dt_ns)
		return NAN;
	a = kvmstats_stat__values(st, prev)[0];
	b = kvmstats_stat__values(st, cur)[0];
	if (b < a)
		return NAN;
	return (double)(b - a) * 1e9 / (double)dt_ns;
}

void kvmstats_hist__delta(const struct kvmstats_stat *st, const void *prev,
			  const void *cur, uint64_t *out)
{
	const uint64_t *a = kvmstats_stat__values(st, prev);
	const uint64_t *b = kvmstats_stat__values(st, cur);

	for (uint32_t i = 0; i < st->size; i++)
		out[i] = b[i] >= a[i] ? b[i] - a[i] : 0;
}
