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

static double gauge(const struct kvmstats_plan_vm *v, int which, size_t rank)
{
	const struct kvmstats_estimate *e = &v->est[v->method];

	switch (which) {
	case 0: return (double)v->memory_bytes;
	case 1: return (double)e->zero_pages;
	case 2: return (double)e->nonzero_pages;
	case 3: return (double)e->unknown_pages;
	case 4: return e->pages ? (double)e->zero_pages / (double)e->pages : NAN;
	case 5: return v->dirty_measured ? v->dirty.pages_per_second : NAN;
	case 6: return (double)v->pred.bytes;
	case 7: return v->pred.seconds;
	case 8:
		return v->pred.verdict == KVMSTATS_VERDICT_UNCERTAIN ? NAN :
		       v->pred.verdict == KVMSTATS_VERDICT_CONVERGES;
	case 9: return v->elapsed_s;
	case 10: return (double)rank;
	case 11: return v->pred.seconds_lo;
	case 12: return v->pred.seconds_hi;
	case 13: return v->pred.bytes_lo;
	case 14: return v->pred.bytes_hi;
	case 15: return v->pred.dirty_samples;
	default: return v->pred.postcopy ? v->pred.postcopy_s : NAN;
	}
}

int kvmstats_plan__prometheus(const struct kvmstats_plan_vm *const *vms, size_t n,
			      char *buf, size_t len)
{
	static const char *const metric[][2] = {
		{ "memory_bytes", "Guest RAM found in the VMM, bytes" },
		{ "zero_pages", "Guest pages that are zero (4 KiB)" },
		{ "nonzero_pages", "Guest pages that are not zero (4 KiB)" },
		{ "unknown_pages", "Guest pages of unknown content (swapped)" },
		{ "zero_ratio", "Share of guest pages that are zero" },
		{ "dirty_pages_per_second", "Guest pages dirtied per second (absent when "
					    "not measured: a clean guest was assumed)" },
		{ "predicted_transfer_bytes", "Predicted bytes sent by a QEMU live migration" },
		{ "predicted_seconds", "Predicted duration of a QEMU live migration" },
		{ "converges", "1 when the migration is predicted to complete, 0 when "
			       "not; absent when uncertain" },
		{ "elapsed_seconds", "Wall time the plan took" },
		{ "rank", "Position by predicted migration cost, 1 = cheapest" },
		{ "predicted_low_seconds", "Predicted duration at the inputs' low bound" },
		{ "predicted_high_seconds", "Predicted duration at the inputs' high bound" },
		{ "predicted_transfer_low_bytes", "Predicted bytes at the inputs' low bound" },
		{ "predicted_transfer_high_bytes", "Predicted bytes at the inputs' high bound" },
		{ "dirty_samples", "Dirty-rate intervals measured" },
		{ "postcopy_seconds", "Predicted post-copy phase" },
	};
	struct out o = { buf, len, 0 };
	char name[260];

	if ((n && !vms) || (len && !buf))
		return -EINVAL;
	for (size_t m = 0; m < ARRAY_SIZE(metric); m++) {
		size_t rank = 0;

		put(&o, "# HELP kvmstats_plan_%s %s\n# TYPE kvmstats_plan_%s gauge\n",
		    metric[m][0], metric[m][1], metric[m][0]);
		for (size_t i = 0; i < n; i++) {
			const struct kvmstats_plan_vm *v = vms[i];

			if (!v || v->error || !v->predicted)
				continue;
			rank = 1;
			for (size_t j = 0; j < n; j++)
				rank += vms[j] && j != i &&
					kvmstats_plan_vm__compare(vms[j], v) < 0;
			escape(name, sizeof(name), v->name);
			/* unknown or not applicable: no sample, never NaN */
			if (isnan(gauge(v, (int)m, rank)))
				continue;
			put(&o, "kvmstats_plan_%s{pid=\"%d\",name=\"%s\",method=\"%s\"} %.17g\n",
			    metric[m][0], (int)v->pid, name, kvmstats_method_str(v->method),
			    gauge(v, (int)m, rank));
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
