// SPDX-License-Identifier: GPL-2.0-or-later
/* How one stat looks: raw JSON (with its schema, verbose), human text,
 * histogram bars; and the CSV writer every CSV output shares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sanitize.h"

bool stat_is_hist(const struct kvmstats_stat *st)
{
	unsigned int t = kvmstats_stat__type(st);

	return t == KVMSTATS_TYPE_LOG_HIST || t == KVMSTATS_TYPE_LINEAR_HIST;
}

struct json_object *stat_json(const struct kvmstats_stat *st,
			      const uint64_t *v)
{
	uint32_t n = kvmstats_stat__size(st);
	struct json_object *a;

	if (n == 1 && !stat_is_hist(st)) {
		if (kvmstats_stat__unit(st) == KVMSTATS_UNIT_BOOLEAN)
			return json_object_new_boolean(v[0] != 0);
		return json_object_new_uint64(v[0]);
	}
	a = json_object_new_array_ext((int)n);
	for (uint32_t i = 0; i < n; i++)
		json_object_array_add(a, json_object_new_uint64(v[i]));
	return a;
}

static struct json_object *stat_json_verbose(const struct kvmstats_stat *st,
					     struct json_object *value);

static struct json_object *stats_obj(const struct kvmstats_schema *s,
				     const void *data, const uint64_t *missing,
				     bool verbose)
{
	struct json_object *o = json_object_new_object();
	const struct kvmstats_stat *st;

	kvmstats_schema__for_each(st, s) {
		uint32_t i = kvmstats_stat__index(st);
		struct json_object *v = NULL;

		if (!missing || !((missing[i / 64] >> (i % 64)) & 1))
			v = stat_json(st, kvmstats_stat__values(st, data));
		json_object_object_add(o, kvmstats_stat__name(st),
				       verbose ? stat_json_verbose(st, v) : v);
	}
	return o;
}

struct json_object *stats_json(const struct kvmstats_schema *s,
			       const void *data, const uint64_t *missing)
{
	return stats_obj(s, data, missing, false);
}

/* [[lo, hi], ...] per bucket in raw units; hi null for the last one,
 * which takes every larger value. */
static struct json_object *bounds_json(const struct kvmstats_stat *st)
{
	uint32_t n = kvmstats_stat__size(st);
	struct json_object *a = json_object_new_array_ext((int)n);

	for (uint32_t i = 0; i < n; i++) {
		struct json_object *b = json_object_new_array_ext(2), *top;
		double lo, hi;

		if (kvmstats_hist__bucket_bounds(st, i, &lo, &hi)) {
			json_object_put(b);
			json_object_put(a);
			return NULL;
		}
		/* The last bucket takes every larger value: no upper bound. */
		top = isinf(hi) ? NULL : json_object_new_uint64((uint64_t)hi);
		json_object_array_add(b, json_object_new_uint64((uint64_t)lo));
		json_object_array_add(b, top);
		json_object_array_add(a, b);
	}
	return a;
}

static struct json_object *stat_json_verbose(const struct kvmstats_stat *st,
					     struct json_object *value)
{
	struct json_object *o = json_object_new_object(), *exp;
	unsigned int base = kvmstats_stat__base(st);
	int b = base == KVMSTATS_BASE_POW10 ? 10
		: base == KVMSTATS_BASE_POW2 ? 2
					     : 0;

	json_object_object_add(o, "value", value);
	json_object_object_add(o, "type", json_object_new_string(
				   kvmstats_type_str(kvmstats_stat__type(st))));
	json_object_object_add(o, "unit", json_object_new_string(
				   kvmstats_unit_str(kvmstats_stat__unit(st))));
	/* A base this version does not know is null, not a guess. */
	json_object_object_add(o, "base", b ? json_object_new_int(b) : NULL);
	exp = json_object_new_int(kvmstats_stat__exponent(st));
	json_object_object_add(o, "exponent", exp);
	if (!stat_is_hist(st))
		return o;
	if (kvmstats_stat__type(st) == KVMSTATS_TYPE_LINEAR_HIST)
		json_object_object_add(o, "bucket_size", json_object_new_uint64(
					   kvmstats_stat__bucket_size(st)));
	json_object_object_add(o, "bounds", bounds_json(st));
	return o;
}

struct json_object *stats_json_verbose(const struct kvmstats_schema *s,
				       const void *data,
				       const uint64_t *missing)
{
	return stats_obj(s, data, missing, true);
}

/* ---- CSV ------------------------------------------------------------ */

static void csv_sep(struct csv *c)
{
	if (c->col++)
		fputc(',', c->f);
}

/*
 * Names come from VMMs (QEMU's -name, a process name), logs and file
 * paths: anything but NUL. Control characters, bidirectional overrides
 * and bytes that are not UTF-8 are escaped visibly first (safe_str(), as
 * in every other output: a spreadsheet or a terminal showing the CSV
 * never sees them raw); the rest is kept byte for byte by RFC 4180
 * quoting, so that a printable name read back from the CSV is the name.
 * The one place every CSV text field passes, whatever the command.
 */
void csv_field(struct csv *c, const char *s)
{
	char *esc = NULL;
	size_t n;

	csv_sep(c);
	/* Control characters escaped visibly, and never cut short. */
	if (!str_clean(s)) {
		n = str_escaped_size(s);
		esc = malloc(n);
		if (esc)
			str_escape(esc, n, s);
		s = esc ? esc : safe_str(s);
	}
	n = strlen(s);
	/* Blanks at an edge are quoted too: some readers trim them. */
	if (!s[strcspn(s, ",\"\r\n")] && (!n || (s[0] != ' ' && s[n - 1] != ' '))) {
		fputs(s, c->f);
		free(esc);
		return;
	}
	fputc('"', c->f);
	for (const char *p = s; *p; p++) {
		if (*p == '"')
			fputc('"', c->f);
		fputc(*p, c->f);
	}
	fputc('"', c->f);
	free(esc);
}

void csv_u64(struct csv *c, uint64_t v)
{
	csv_sep(c);
	fprintf(c->f, "%llu", (unsigned long long)v);
}

void csv_int(struct csv *c, long long v)
{
	csv_sep(c);
	fprintf(c->f, "%lld", v);
}

void csv_double(struct csv *c, double v, int decimals)
{
	csv_sep(c);
	fprintf(c->f, "%.*f", decimals, v);
}

void csv_empty(struct csv *c)
{
	csv_sep(c);
}

void csv_value(struct csv *c, int vcpu, const struct kvmstats_stat *st,
	       uint32_t k, const uint64_t *v)
{
	if (vcpu >= 0)
		csv_int(c, vcpu);
	else
		csv_empty(c);
	csv_field(c, kvmstats_stat__name(st));
	csv_u64(c, k);
	if (v)
		csv_u64(c, v[k]);
	else
		csv_empty(c);
}

void csv_end(struct csv *c)
{
	fputs("\r\n", c->f);
	c->col = 0;
}

/* A histogram's quantile in the stat's unit, or "-" when empty. */
static void quantile_str(const struct kvmstats_stat *st, const uint64_t *v,
			 double q, char *buf, size_t len)
{
	double x = kvmstats_hist__quantile(st, v, q);

	if (isnan(x))
		snprintf(buf, len, "-");
	else
		kvmstats_stat__format(st, x, buf, len);
}

void stat_human(const struct kvmstats_stat *st, const uint64_t *v, char *buf,
		size_t len)
{
	char p50[32], p99[32];
	uint32_t n = kvmstats_stat__size(st);

	if (!kvmstats_stat__known(st)) {
		snprintf(buf, len, "%llu (raw)", (unsigned long long)v[0]);
		return;
	}
	if (stat_is_hist(st)) {
		quantile_str(st, v, 0.5, p50, sizeof(p50));
		quantile_str(st, v, 0.99, p99, sizeof(p99));
		snprintf(buf, len, "n=%llu p50=%s p99=%s",
			 (unsigned long long)kvmstats_hist__count(st, v), p50, p99);
		return;
	}
	kvmstats_stat__format(st, (double)v[0], buf, len);
	if (n > 1) {
		size_t used = strlen(buf);

		snprintf(buf + used, len - used, " (+%u values)", n - 1);
	}
}

/* Eight levels of block characters; empty buckets are a dot. */
void hist_bar(const struct kvmstats_stat *st, const uint64_t *v, char *buf,
	      size_t len, int width)
{
	static const char *const lv[] = { "\u2581", "\u2582", "\u2583",
					   "\u2584", "\u2585", "\u2586",
					   "\u2587", "\u2588" };
	uint32_t n = kvmstats_stat__size(st), first = n, last = 0;
	uint64_t max = 0;
	size_t used = 0;

	buf[0] = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!v[i])
			continue;
		if (first == n)
			first = i;
		last = i;
		if (v[i] > max)
			max = v[i];
	}
	if (!max)
		return;
	for (uint32_t i = first; i <= last && (int)(i - first) < width; i++) {
		const char *c = v[i] ? lv[(int)((double)v[i] * 7 / (double)max)] : ".";

		if (used + strlen(c) + 1 > len)
			break;
		used += (size_t)snprintf(buf + used, len - used, "%s", c);
	}
}

const char *unknown_reason(const char *source)
{
	if (source && !strcmp(source, "debugfs"))
		return "debugfs refuses its counter files (kernel lockdown); "
		       "--attach, or a VMM holding its stats fds, reads them";
	return "its source gives none of its counters";
}
