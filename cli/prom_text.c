// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The exporter's text: Prometheus text format 0.0.4 and OpenMetrics 1.0.
 * Buffers, numbers, label values, the exporter's own metrics, the lines
 * of each family of the model (prom_model.c) and its rendering in parts.
 *
 * Values are printed exactly: a power-of-ten exponent moves the decimal
 * point of the integer (1023 ns -> 0.000001023), it never goes through
 * a double. A log2 bucket i holds the integers [2^(i-1), 2^i), so its
 * inclusive upper bound (Prometheus' le) is 2^i - 1 raw units; a linear
 * bucket i holds [i*size, (i+1)*size), le = (i+1)*size - 1. The kernel's
 * last bucket takes every larger value: it is the +Inf bucket.
 *
 * Speed: the model is built once per change of the host (families,
 * series, label strings), and a rendering is memcpy of prebuilt strings
 * plus integer formatting into a reused buffer.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom_int.h"
#include "sanitize.h"

/* ---- buffers ------------------------------------------------------------ */

bool prom_buf_reserve(struct prom_buf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->failed)
		return false;
	if (b->cap - b->len >= more)
		return true;
	cap = b->cap ? b->cap : 4096;
	while (cap - b->len < more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->failed = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void prom_buf_free(struct prom_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

void prom_buf_put(struct prom_buf *b, const char *s, size_t n)
{
	if (!prom_buf_reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

void prom_buf_puts(struct prom_buf *b, const char *s)
{
	prom_buf_put(b, s, strlen(s));
}

void prom_buf_printf(struct prom_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !prom_buf_reserve(b, (size_t)n + 1))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* ---- numbers -------------------------------------------------------------- */

static const char digits2[201] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

size_t prom_u64(char *p, uint64_t v)
{
	char tmp[20];
	char *w = tmp + sizeof(tmp);
	size_t n;

	while (v >= 100) {
		unsigned int d = (unsigned int)(v % 100) * 2;

		v /= 100;
		*--w = digits2[d + 1];
		*--w = digits2[d];
	}
	if (v >= 10) {
		*--w = digits2[v * 2 + 1];
		*--w = digits2[v * 2];
	} else {
		*--w = (char)('0' + v);
	}
	n = (size_t)(tmp + sizeof(tmp) - w);
	memcpy(p, w, n);
	return n;
}

static const uint64_t pow10_u64[20] = {
	1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull,
	10000000ull, 100000000ull, 1000000000ull, 10000000000ull,
	100000000000ull, 1000000000000ull, 10000000000000ull,
	100000000000000ull, 1000000000000000ull, 10000000000000000ull,
	100000000000000000ull, 1000000000000000000ull,
	10000000000000000000ull,
};

/* Shortest text that reads back as @v, laid out as Go's strconv 'g' with
 * precision -1 does (exponent form below 1e-4 and from 1e+06 on), which
 * OpenMetrics takes as the canonical form of le; OpenMetrics also wants
 * ".0" on an integral value. */
static void fmt_double(double v, char *buf, size_t len, bool om)
{
	char tmp[40], mant[24], out[64];
	char *w = out, *e;
	int prec, exp, nd = 0;

	if (isinf(v)) {
		snprintf(buf, len, "%s", v > 0 ? "+Inf" : "-Inf");
		return;
	}
	if (v == 0) {
		snprintf(buf, len, "%s", om ? "0.0" : "0");
		return;
	}
	for (prec = 0; prec < 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	/* tmp is [-]d[.ddd]e[+-]xx: take the digits and the exponent. */
	e = strchr(tmp, 'e');
	for (char *p = tmp; e && p < e; p++)
		if (*p >= '0' && *p <= '9')
			mant[nd++] = *p;
	if (!e || !nd) {	/* not a finite number: NaN */
		snprintf(buf, len, "NaN");
		return;
	}
	exp = atoi(e + 1);
	if (v < 0)
		*w++ = '-';
	if (exp < -4 || exp >= 6) {
		*w++ = mant[0];
		if (nd > 1) {
			*w++ = '.';
			memcpy(w, mant + 1, (size_t)nd - 1);
			w += nd - 1;
		}
		w += sprintf(w, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	} else if (exp < 0) {
		*w++ = '0';
		*w++ = '.';
		for (int i = 0; i < -exp - 1; i++)
			*w++ = '0';
		memcpy(w, mant, (size_t)nd);
		w += nd;
	} else if (nd <= exp + 1) {
		memcpy(w, mant, (size_t)nd);
		w += nd;
		for (int i = 0; i < exp + 1 - nd; i++)
			*w++ = '0';
		if (om) {
			*w++ = '.';
			*w++ = '0';
		}
	} else {
		memcpy(w, mant, (size_t)exp + 1);
		w += exp + 1;
		*w++ = '.';
		memcpy(w, mant + exp + 1, (size_t)(nd - exp - 1));
		w += nd - exp - 1;
	}
	*w = 0;
	snprintf(buf, len, "%s", out);
}

/* A raw integer in base units as the nearest double: dividing by an exact
 * power of ten (not multiplying by an inexact 1e-9) keeps 1023 ns at the
 * double closest to 1.023e-06. */
static double scaled_double(uint64_t raw, struct scale sc)
{
	if (sc.mode == SCALE_POW2)
		return ldexp((double)raw, sc.exp);
	if (sc.mode == SCALE_POW10 && sc.exp < 0 && sc.exp >= -22)
		return (double)raw / pow(10, -sc.exp);
	if (sc.mode == SCALE_POW10)
		return (double)raw * pow(10, sc.exp);
	return (double)raw;
}

/* @raw in base units, exactly when that can be done in integers. */
static size_t put_scaled(char *p, uint64_t raw, struct scale sc)
{
	char *w = p;
	int k = sc.exp;

	if (sc.mode == SCALE_NONE || k == 0)
		return prom_u64(p, raw);
	if (sc.mode == SCALE_POW10 && k < 0 && k >= -19) {
		uint64_t div = pow10_u64[-k], ip = raw / div, fr = raw % div;
		char frac[20];

		w += prom_u64(w, ip);
		if (!fr)
			return (size_t)(w - p);
		for (int i = -k - 1; i >= 0; i--) {
			frac[i] = (char)('0' + fr % 10);
			fr /= 10;
		}
		k = -k;
		while (frac[k - 1] == '0')
			k--;
		*w++ = '.';
		memcpy(w, frac, (size_t)k);
		return (size_t)(w + k - p);
	}
	if (sc.mode == SCALE_POW10 && k > 0 && k <= 19 &&
	    raw <= UINT64_MAX / pow10_u64[k])
		return prom_u64(p, raw * pow10_u64[k]);
	if (sc.mode == SCALE_POW2 && k > 0 && k < 64 && raw <= (UINT64_MAX >> k))
		return prom_u64(p, raw << k);
	/* Out of integer range: a double, full precision. */
	return (size_t)snprintf(p, 32, "%.17g", scaled_double(raw, sc));
}

/* ---- label values ---------------------------------------------------------- */

/* A name, escaped as every sink escapes it (sanitize.c: valid UTF-8, no
 * control character; Prometheus rejects a whole scrape over one bad
 * byte), then as the exposition formats want: \\ and \". */
size_t prom_escape_label(const char *s, char *out, size_t len)
{
	char *clean = str_clean(s) ? NULL : malloc(str_escaped_size(s));
	const char *u = s;
	size_t o = 0;

	if (clean) {
		str_escape(clean, str_escaped_size(s), s);
		u = clean;
	}
	/* Whole characters only: a label is cut short, never made invalid. */
	while (*u) {
		size_t n = utf8_seq_len((const unsigned char *)u);
		bool quote = *u == '\\' || *u == '"';

		if (o + n + quote + 1 > len)
			break;
		if (quote)
			out[o++] = '\\';
		memcpy(out + o, u, n);
		o += n;
		u += n;
	}
	out[o] = 0;
	free(clean);
	return o;
}

/* HELP text: backslash and newline escaped (and quotes in OpenMetrics). */
static void put_help(struct prom_buf *b, const char *s, enum prom_format f)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '\n' || (*s == '"' && f == PROM_OPENMETRICS)) {
			prom_buf_put(b, "\\", 1);
			prom_buf_put(b, *s == '\n' ? "n" : s, 1);
		} else {
			prom_buf_put(b, s, 1);
		}
	}
}

/* ---- writers for the exporter's own metrics ------------------------------- */

void prom_family(struct prom_buf *b, enum prom_format f, const char *name,
		 const char *type, const char *unit, const char *help)
{
	bool counter = !strcmp(type, "counter");
	const char *sfx = counter && f == PROM_TEXT ? "_total" : "";

	if (f == PROM_OPENMETRICS) {
		prom_buf_printf(b, "# TYPE %s %s\n", name, type);
		if (unit)
			prom_buf_printf(b, "# UNIT %s %s\n", name, unit);
	}
	prom_buf_printf(b, "# HELP %s%s ", name, sfx);
	put_help(b, help, f);
	prom_buf_put(b, "\n", 1);
	if (f == PROM_TEXT)
		prom_buf_printf(b, "# TYPE %s%s %s\n", name, sfx, type);
}

void prom_sample(struct prom_buf *b, const char *name, const char *labels,
		 double v)
{
	char num[48];

	if (isnan(v))
		snprintf(num, sizeof(num), "NaN");
	else
		fmt_double(v, num, sizeof(num), false);
	if (labels && *labels)
		prom_buf_printf(b, "%s{%s} %s\n", name, labels, num);
	else
		prom_buf_printf(b, "%s %s\n", name, num);
}

void prom_sample_u64(struct prom_buf *b, const char *name, const char *labels,
		     uint64_t v)
{
	if (labels && *labels)
		prom_buf_printf(b, "%s{%s} %llu\n", name, labels, (unsigned long long)v);
	else
		prom_buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

void prom_end(struct prom_buf *b, enum prom_format f)
{
	if (f == PROM_OPENMETRICS)
		prom_buf_puts(b, "# EOF\n");
}

/* ---- the text of a family --------------------------------------------------- */

static int family_buckets(struct family *f, const struct kvmstats_stat *st)
{
	for (int fmt = PROM_TEXT; fmt <= PROM_OPENMETRICS; fmt++) {
		f->le[fmt] = calloc(f->size, sizeof(char *));
		f->le_len[fmt] = calloc(f->size, 1);
		if (!f->le[fmt] || !f->le_len[fmt])
			return -ENOMEM;
		for (uint32_t i = 0; i < f->size; i++) {
			double lo, hi, le;
			char num[48], frag[64];

			kvmstats_hist__bucket_bounds(st, i, &lo, &hi);
			/* Raw values are integers: < hi is <= hi - 1. */
			le = i + 1 == f->size ? INFINITY
					      : scaled_double((uint64_t)hi - 1, f->scale);
			fmt_double(le, num, sizeof(num), fmt == PROM_OPENMETRICS);
			snprintf(frag, sizeof(frag), ",le=\"%s\"} ", num);
			f->le[fmt][i] = strdup(frag);
			if (!f->le[fmt][i])
				return -ENOMEM;
			f->le_len[fmt][i] = (uint8_t)strlen(frag);
		}
	}
	return 0;
}


int prom_family_text(struct family *f, const char *help, const char *unit,
		     const struct kvmstats_stat *st)
{
	static const char *const types[] = { "counter", "gauge", "gauge",
					     "histogram" };

	for (int fmt = PROM_TEXT; fmt <= PROM_OPENMETRICS; fmt++) {
		struct prom_buf b = { 0 };

		prom_family(&b, fmt, f->base, types[f->kind],
			    unit && fmt == PROM_OPENMETRICS ? unit : NULL, help);
		prom_buf_put(&b, "", 1);
		if (b.failed)
			return -ENOMEM;
		f->hdr[fmt] = b.p;
		f->hdr_len[fmt] = b.len - 1;
	}
	return f->kind == FAM_HIST ? family_buckets(f, st) : 0;
}

/* ---- rendering the model --------------------------------------------------- */

static bool missing(const struct target *t, uint32_t stat)
{
	return t->missing && (t->missing[stat / 64] >> (stat % 64)) & 1;
}

/* One scalar sample. @w has room for it (see render_family). */
static char *put_scalar(char *w, const struct family *f, const struct target *t,
			const char *labels, uint64_t v)
{
	memcpy(w, f->sample, f->sample_len);
	w += f->sample_len;
	memcpy(w, labels, t->labels_len);
	w += t->labels_len;
	*w++ = '}';
	*w++ = ' ';
	if (f->kind == FAM_BOOL)
		*w++ = v ? '1' : '0';
	else
		w += put_scaled(w, v, f->scale);
	*w++ = '\n';
	return w;
}

static char *put_hist(char *w, const struct family *f, const struct target *t,
		      const char *labels, const uint64_t *v, const uint64_t *data,
		      int32_t sum_off, enum prom_format fmt)
{
	uint64_t cum = 0;

	for (uint32_t i = 0; i < f->size; i++) {
		cum += v[i];
		memcpy(w, f->sample, f->sample_len);
		w += f->sample_len;
		memcpy(w, labels, t->labels_len);
		w += t->labels_len;
		memcpy(w, f->le[fmt][i], f->le_len[fmt][i]);
		w += f->le_len[fmt][i];
		w += prom_u64(w, cum);
		*w++ = '\n';
	}
	if (sum_off >= 0) {
		memcpy(w, f->sum_name, f->sum_len);
		w += f->sum_len;
		memcpy(w, labels, t->labels_len);
		w += t->labels_len;
		*w++ = '}';
		*w++ = ' ';
		w += put_scaled(w, data[sum_off], f->sum_scale);
		*w++ = '\n';
	}
	/* OpenMetrics: _count if and only if there is a _sum. */
	if (sum_off >= 0 || fmt == PROM_TEXT) {
		memcpy(w, f->count_name, f->count_len);
		w += f->count_len;
		memcpy(w, labels, t->labels_len);
		w += t->labels_len;
		*w++ = '}';
		*w++ = ' ';
		w += prom_u64(w, cum);
		*w++ = '\n';
	}
	return w;
}

/* Series [lo, hi) of family @f; its header when lo is 0. */
static void render_family(const struct prom_model *m, const struct family *f,
			  enum prom_format fmt, size_t lo, size_t hi,
			  struct prom_buf *out)
{
	/* The longest sample: name, labels, le, a number, punctuation. */
	size_t line = f->sample_len + f->sum_len + f->count_len + m->max_labels + 96;
	size_t room = f->kind == FAM_HIST ? line * (f->size + 2) : line;

	if (!lo)
		prom_buf_put(out, f->hdr[fmt], f->hdr_len[fmt]);
	for (size_t i = lo; i < hi; i++) {
		const struct series *s = &f->series[i];
		const struct target *t = &m->targets[s->target];
		const char *labels = m->labels + t->labels;
		char *w;

		if (!t->data || missing(t, s->stat))
			continue;
		if (!prom_buf_reserve(out, room))
			return;
		w = out->p + out->len;
		/* A sum the source did not give this time: no _sum (nor,
		 * in OpenMetrics, _count), not its zeroed word. */
		if (f->kind == FAM_HIST)
			w = put_hist(w, f, t, labels, t->data + s->off, t->data,
				     s->sum_off >= 0 && missing(t, s->sum_stat) ?
				     -1 : s->sum_off, fmt);
		else
			w = put_scalar(w, f, t, labels, t->data[s->off]);
		out->len = (size_t)(w - out->p);
	}
}

/* Lines a series takes: the unit of work when a rendering is split. */
static size_t series_lines(const struct family *f)
{
	return f->kind == FAM_HIST ? (size_t)f->size + 2 : 1;
}

size_t prom_model_lines(const struct prom_model *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->nfams; i++)
		n += m->fams[i].nseries * series_lines(&m->fams[i]);
	return n;
}

/* Where part @k of @n starts: family *fam, series *ser (a family may be
 * cut between two parts; its header goes with its first series). */
static void part_start(const struct prom_model *m, size_t k, size_t n,
		       size_t *fam, size_t *ser)
{
	size_t goal = n ? prom_model_lines(m) / n * k : 0, done = 0;

	for (size_t i = 0; i < m->nfams; i++) {
		const struct family *f = &m->fams[i];
		size_t lines = f->nseries * series_lines(f);

		if (k && done + lines > goal) {
			*fam = i;
			*ser = (goal - done) / series_lines(f);
			return;
		}
		done += lines;
	}
	*fam = k ? m->nfams : 0;
	*ser = 0;
}

void prom_model_render_part(const struct prom_model *m, enum prom_format fmt,
			    size_t k, size_t n, struct prom_buf *out)
{
	size_t f0, s0, f1, s1;

	part_start(m, k, n, &f0, &s0);
	if (k + 1 < n)
		part_start(m, k + 1, n, &f1, &s1);
	else
		f1 = m->nfams, s1 = 0;
	for (size_t i = f0; i < m->nfams && (i < f1 || (i == f1 && s1)); i++) {
		const struct family *f = &m->fams[i];
		size_t lo = i == f0 ? s0 : 0, hi = i == f1 ? s1 : f->nseries;

		render_family(m, f, fmt, lo, hi, out);
	}
}

void prom_model_render_info(const struct prom_model *m, enum prom_format fmt,
			    struct prom_buf *out)
{
	prom_family(out, fmt, "kvmstats_vm_info", "gauge", NULL,
		    "Each VM that is exported: its stats id and the source "
		    "that reads it (always 1)");
	for (size_t i = 0; i < m->ntargets; i++) {
		const struct target *t = &m->targets[i];
		char id[4 * 256 + 1];

		if (t->vcpu != PROM_VM)
			continue;
		prom_escape_label(kvmstats_reader__id(t->r), id, sizeof(id));
		prom_buf_printf(out, "kvmstats_vm_info{%s,id=\"%s\",source=\"%s\"} 1\n",
				m->labels + t->labels, id,
				prom_source_name(t->src));
	}
}

