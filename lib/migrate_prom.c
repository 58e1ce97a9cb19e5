// SPDX-License-Identifier: LGPL-2.1-or-later
/* The plan figures of many VMs as Prometheus gauges (kvmstats serve). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"

/* ---- Prometheus gauges for the exporter ---- */

struct out {
	char *buf;
	size_t len, used;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->used < o->len ? o->buf + o->used : NULL,
		      o->used < o->len ? o->len - o->used : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->used += (size_t)n;
}

/* A label value: backslash, double quote and newline escaped. */
static void escape(char *dst, size_t len, const char *s)
{
	size_t k = 0;

	for (; *s && k + 3 < len; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n') {
			dst[k++] = '\\';
			dst[k++] = *s == '\n' ? 'n' : *s;
		} else {
			dst[k++] = *s;
		}
	}
	dst[k] = 0;
}

static const char *const gauge_names[KVMSTATS_PLAN_GAUGE_NR] = {
	[KVMSTATS_PLAN_GAUGE_MEMORY] = "kvmstats_plan_memory_bytes",
	[KVMSTATS_PLAN_GAUGE_ZERO] = "kvmstats_plan_zero_pages",
	[KVMSTATS_PLAN_GAUGE_NONZERO] = "kvmstats_plan_nonzero_pages",
	[KVMSTATS_PLAN_GAUGE_UNKNOWN] = "kvmstats_plan_unknown_pages",
	[KVMSTATS_PLAN_GAUGE_MISSING] = "kvmstats_plan_missing_pages",
	[KVMSTATS_PLAN_GAUGE_RATIO] = "kvmstats_plan_zero_ratio",
	[KVMSTATS_PLAN_GAUGE_DIRTY] = "kvmstats_plan_dirty_pages_per_second",
	[KVMSTATS_PLAN_GAUGE_BYTES] = "kvmstats_plan_predicted_transfer_bytes",
	[KVMSTATS_PLAN_GAUGE_SECONDS] = "kvmstats_plan_predicted_seconds",
	[KVMSTATS_PLAN_GAUGE_CONVERGES] = "kvmstats_plan_converges",
	[KVMSTATS_PLAN_GAUGE_SECONDS_LO] =
		"kvmstats_plan_predicted_low_seconds",
	[KVMSTATS_PLAN_GAUGE_SECONDS_HI] =
		"kvmstats_plan_predicted_high_seconds",
	[KVMSTATS_PLAN_GAUGE_BYTES_LO] =
		"kvmstats_plan_predicted_transfer_low_bytes",
	[KVMSTATS_PLAN_GAUGE_BYTES_HI] =
		"kvmstats_plan_predicted_transfer_high_bytes",
	[KVMSTATS_PLAN_GAUGE_DIRTY_SAMPLES] = "kvmstats_plan_dirty_samples",
	[KVMSTATS_PLAN_GAUGE_POSTCOPY] = "kvmstats_plan_postcopy_seconds",
	[KVMSTATS_PLAN_GAUGE_ELAPSED] = "kvmstats_plan_elapsed_seconds",
	[KVMSTATS_PLAN_GAUGE_RANK] = "kvmstats_plan_rank",
};

const char *kvmstats_plan_gauge_str(enum kvmstats_plan_gauge g)
{
	return g < KVMSTATS_PLAN_GAUGE_NR ? gauge_names[g] : "unknown";
}

double kvmstats_plan_vm__gauge(const struct kvmstats_plan_vm *v,
			       enum kvmstats_plan_gauge g, size_t rank)
{
	const struct kvmstats_estimate *e = &v->est[v->method];

	switch (g) {
	case KVMSTATS_PLAN_GAUGE_MEMORY:
		return (double)v->memory_bytes;
	case KVMSTATS_PLAN_GAUGE_ZERO:
		return (double)e->zero_pages;
	case KVMSTATS_PLAN_GAUGE_NONZERO:
		return (double)e->nonzero_pages;
	case KVMSTATS_PLAN_GAUGE_UNKNOWN:
		return (double)e->unknown_pages;
	case KVMSTATS_PLAN_GAUGE_MISSING:
		return (double)v->missing_pages;
	case KVMSTATS_PLAN_GAUGE_RATIO:
		return e->pages ? (double)e->zero_pages / (double)e->pages
				: NAN;
	case KVMSTATS_PLAN_GAUGE_DIRTY:
		return v->dirty_measured ? v->dirty.pages_per_second : NAN;
	/* Where the point prediction does not converge, bytes and seconds
	 * are what the model had sent when it gave up: no prediction. */
	case KVMSTATS_PLAN_GAUGE_BYTES:
		return v->pred.converges ? (double)v->pred.bytes : NAN;
	case KVMSTATS_PLAN_GAUGE_SECONDS:
		return v->pred.converges ? v->pred.seconds : NAN;
	case KVMSTATS_PLAN_GAUGE_CONVERGES:
		return v->pred.verdict == KVMSTATS_VERDICT_UNCERTAIN ? NAN :
		       v->pred.verdict == KVMSTATS_VERDICT_CONVERGES;
	case KVMSTATS_PLAN_GAUGE_SECONDS_LO:
		return v->pred.seconds_lo;
	case KVMSTATS_PLAN_GAUGE_SECONDS_HI:
		return v->pred.seconds_hi;
	case KVMSTATS_PLAN_GAUGE_BYTES_LO:
		return v->pred.bytes_lo;
	case KVMSTATS_PLAN_GAUGE_BYTES_HI:
		return v->pred.bytes_hi;
	case KVMSTATS_PLAN_GAUGE_DIRTY_SAMPLES:
		return v->pred.dirty_samples;
	case KVMSTATS_PLAN_GAUGE_POSTCOPY:
		return v->pred.postcopy ? v->pred.postcopy_s : NAN;
	case KVMSTATS_PLAN_GAUGE_ELAPSED:
		return v->elapsed_s;
	case KVMSTATS_PLAN_GAUGE_RANK:
		return (double)rank;
	default:
		return NAN;
	}
}

int kvmstats_plan__prometheus(const struct kvmstats_plan_vm *const *vms, size_t n,
			      char *buf, size_t len)
{
	/* Its own order and words; the names and values are the gauges'. */
	static const struct {
		enum kvmstats_plan_gauge g;
		const char *help;
	} metric[] = {
		{KVMSTATS_PLAN_GAUGE_MEMORY,
		 "Guest RAM found in the VMM, bytes"},
		{KVMSTATS_PLAN_GAUGE_ZERO, "Guest pages that are zero (4 KiB)"},
		{KVMSTATS_PLAN_GAUGE_NONZERO,
		 "Guest pages that are not zero (4 KiB)"},
		{KVMSTATS_PLAN_GAUGE_UNKNOWN,
		 "Guest pages of unknown content (swapped)"},
		{KVMSTATS_PLAN_GAUGE_RATIO,
		 "Share of guest pages that are zero"},
		{KVMSTATS_PLAN_GAUGE_DIRTY,
		 "Guest pages dirtied per second (absent when "
		 "not measured: a clean guest was assumed)"},
		{KVMSTATS_PLAN_GAUGE_BYTES,
		 "Predicted bytes sent by a QEMU live migration (absent "
		 "when it does not converge)"},
		{KVMSTATS_PLAN_GAUGE_SECONDS,
		 "Predicted duration of a QEMU live migration (absent "
		 "when it does not converge)"},
		{KVMSTATS_PLAN_GAUGE_CONVERGES,
		 "1 when the migration is predicted to complete, "
		 "0 when not; absent when uncertain"},
		{KVMSTATS_PLAN_GAUGE_ELAPSED, "Wall time the plan took"},
		{KVMSTATS_PLAN_GAUGE_RANK,
		 "Position by predicted migration cost, 1 = cheapest"},
		{KVMSTATS_PLAN_GAUGE_SECONDS_LO,
		 "Predicted duration at the inputs' low bound"},
		{KVMSTATS_PLAN_GAUGE_SECONDS_HI,
		 "Predicted duration at the inputs' high bound"},
		{KVMSTATS_PLAN_GAUGE_BYTES_LO,
		 "Predicted bytes at the inputs' low bound"},
		{KVMSTATS_PLAN_GAUGE_BYTES_HI,
		 "Predicted bytes at the inputs' high bound"},
		{KVMSTATS_PLAN_GAUGE_DIRTY_SAMPLES,
		 "Dirty-rate intervals measured"},
		{KVMSTATS_PLAN_GAUGE_POSTCOPY, "Predicted post-copy phase"},
	};
	struct out o = { buf, len, 0 };
	char name[260];

	if ((n && !vms) || (len && !buf))
		return -EINVAL;
	for (size_t m = 0; m < ARRAY_SIZE(metric); m++) {
		const char *gname = kvmstats_plan_gauge_str(metric[m].g);
		size_t rank = 0;

		put(&o, "# HELP %s %s\n# TYPE %s gauge\n", gname,
		    metric[m].help, gname);
		for (size_t i = 0; i < n; i++) {
			const struct kvmstats_plan_vm *v = vms[i];
			double val;

			if (!v || v->error || !v->predicted)
				continue;
			rank = 1;
			for (size_t j = 0; j < n; j++)
				rank += vms[j] && j != i &&
					kvmstats_plan_vm__compare(vms[j], v) < 0;
			escape(name, sizeof(name), v->name);
			/* unknown or not applicable: no sample, never NaN */
			val = kvmstats_plan_vm__gauge(v, metric[m].g, rank);
			if (isnan(val))
				continue;
			put(&o,
			    "%s{pid=\"%d\",name=\"%s\",method=\"%s\"} %.17g\n",
			    gname, (int)v->pid, name,
			    kvmstats_method_str(v->method), val);
		}
	}
	put(&o, "# HELP kvmstats_plan_verdict 1 for the model's verdict\n"
		"# TYPE kvmstats_plan_verdict gauge\n");
	for (size_t i = 0; i < n; i++) {
		if (!vms[i] || vms[i]->error || !vms[i]->predicted)
			continue;
		escape(name, sizeof(name), vms[i]->name);
		put(&o, "kvmstats_plan_verdict{pid=\"%d\",name=\"%s\",method=\"%s\","
			"verdict=\"%s\"} 1\n", (int)vms[i]->pid, name,
		    kvmstats_method_str(vms[i]->method),
		    kvmstats_verdict_str(vms[i]->pred.verdict));
	}
	if (len)
		buf[o.used < len ? o.used : len - 1] = 0;
	return o.used > INT32_MAX ? -EOVERFLOW : (int)o.used;
}
