// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * QEMU's stats (query-stats-schemas, query-stats) as the binary
 * interface's schemas and data blocks.
 *
 * The schemas QEMU reports are mapped to descriptors and encoded into a
 * real image, so a QMP reader has a real schema and every consumer reads
 * it like any other source; when they match this kernel's own
 * descriptors, the kernel's schema itself is used: the layout is then
 * exactly the kernel's, shared with fd readers. A monitor may say
 * anything: names that are no stat name, lists longer than any kernel
 * has, are left out.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "source_qmp.h"

/* More descriptors than any kernel has (x86 vCPU: 45). */
#define QMP_MAX_DESCS 1024
/* Entries of a values list read for their sizes: no kernel's has more. */
#define QMP_MAX_VALUES (2 * (size_t)QMP_MAX_DESCS)

/* ---- schemas ------------------------------------------------------------ */

const char *ks_json_str(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v))
		return NULL;
	return json_object_get_string(v);
}

static int word(const char *s, const char *const *words, int n)
{
	for (int i = 0; s && i < n; i++)
		if (!strcmp(s, words[i]))
			return i;
	return -1;
}

/* QAPI's StatsType and StatsUnit, in the kernel's numbering. */
static const char *const qmp_types[] = {
	"cumulative", "instant", "peak", "linear-histogram", "log2-histogram",
};
static const char *const qmp_units[] = {
	"none", "bytes", "seconds", "cycles", "boolean",
};

/* The "stats" list of the kvm provider in a query-stats or
 * query-stats-schemas result for @target (NULL: any target; @qom_path
 * gets the entry's qom-path). @i is where to start in @results. */
struct json_object *ks_qmp_provider_stats(struct json_object *results,
					  const char *target, size_t *i,
					  const char **qom_path)
{
	size_t n = json_object_is_type(results, json_type_array) ?
			   json_object_array_length(results) : 0;

	for (; *i < n; (*i)++) {
		struct json_object *e = json_object_array_get_idx(results, *i);
		struct json_object *stats;
		const char *p = ks_json_str(e, "provider"), *t = ks_json_str(e, "target");

		if (!p || strcmp(p, "kvm") || (target && (!t || strcmp(t, target))))
			continue;
		if (!json_object_object_get_ex(e, "stats", &stats) ||
		    !json_object_is_type(stats, json_type_array))
			continue;
		if (qom_path)
			*qom_path = ks_json_str(e, "qom-path");
		(*i)++;
		return stats;
	}
	return NULL;
}

/* A query-stats "stats" list's value sizes by name, for the descriptors
 * to look up in log n: a monitor may list tens of thousands, which a
 * scan per descriptor made seconds of CPU. Past QMP_MAX_VALUES entries,
 * left out. */
struct value_sizes {
	struct value_size {
		const char *name;
		size_t size;	/* array length for a histogram, else 1 */
		size_t at;	/* in the list: the first of a name wins */
	} *v;
	size_t n;
};

static int cmp_value(const void *a, const void *b)
{
	const struct value_size *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->at > y->at) - (x->at < y->at);
}

static int value_sizes_make(struct value_sizes *vs, struct json_object *values)
{
	size_t n = values ? json_object_array_length(values) : 0;

	if (n > QMP_MAX_VALUES)
		n = QMP_MAX_VALUES;
	vs->n = 0;
	vs->v = calloc(n ? n : 1, sizeof(*vs->v));
	if (!vs->v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(values, i);
		const char *name = ks_json_str(e, "name");
		struct json_object *v;

		if (!name || !json_object_object_get_ex(e, "value", &v))
			continue;
		vs->v[vs->n++] = (struct value_size){
			.name = name,
			.size = json_object_is_type(v, json_type_array) ?
					json_object_array_length(v) : 1,
			.at = i,
		};
	}
	qsort(vs->v, vs->n, sizeof(*vs->v), cmp_value);
	return 0;
}

/* Number of values of stat @name: the length of its array for a
 * histogram (the schema does not say), else 1; 0 when absent. */
static size_t value_size(const struct value_sizes *vs, const char *name)
{
	size_t lo = 0, hi = vs->n;

	while (lo < hi) {	/* the first of @name */
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(vs->v[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < vs->n && !strcmp(vs->v[lo].name, name) ? vs->v[lo].size : 0;
}

/* A name the kernel could give a stat: short, and [A-Za-z0-9_] only
 * (what a monitor says goes to terminals and JSON). */
static bool stat_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	return n && n < KS_ABI_NAME_SIZE &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			 "0123456789_") == n;
}

/* What a descriptor of a monitor's may be, held to what kernels define
 * with headroom (a schema is kept in memory once per vCPU, for as long
 * as the VMM is watched): the kernel's histograms have 32 buckets
 * (HALT_POLL_HIST_COUNT, LOGHIST_BUCKET_COUNT_LARGE; 64 is the most ever
 * proposed, LOGHIST_BUCKET_COUNT_XLARGE), and an x86 vCPU's data block
 * is about 1.1 KiB. */
#define QMP_MAX_BUCKETS 256
#define QMP_MAX_DATA (16u << 10)

/* Why stats of a schema were left out: how many, and the first reason. */
struct dropped {
	size_t n;
	char first[160];
};

static bool drop(struct dropped *dr, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static bool drop(struct dropped *dr, const char *name, const char *fmt, ...)
{
	va_list ap;
	int len;

	if (dr->n++)
		return false;
	/* The name is the monitor's: only a checked one is shown. */
	len = snprintf(dr->first, sizeof(dr->first), "%s: ",
		       stat_name(name) ? name : "(a stat without a valid name)");
	if (len < 0 || (size_t)len >= sizeof(dr->first))
		return false;
	va_start(ap, fmt);
	vsnprintf(dr->first + len, sizeof(dr->first) - (size_t)len, fmt, ap);
	va_end(ap);
	return false;
}

/* The exponent a unit allows (the interface's rule, as validate.c). */
static bool exponent_ok(int unit, long long exp)
{
	switch (unit) {
	case KVMSTATS_UNIT_SECONDS:
		return exp <= 0 && exp >= INT16_MIN;
	case KVMSTATS_UNIT_BOOLEAN:
		return exp == 0;
	default:
		return exp >= 0 && exp <= INT16_MAX;
	}
}

/* Type, unit, base and exponent of entry @e into @d; false (and why)
 * when the interface has no such stat. */
static bool to_flags(struct json_object *e, struct kvmstats_encode_desc *d,
		     int *type, struct dropped *dr)
{
	struct json_object *v;
	const char *unit_s = ks_json_str(e, "unit");
	int unit = unit_s ? word(unit_s, qmp_units, ARRAY_SIZE(qmp_units)) : 0;
	int base = KVMSTATS_BASE_POW10;
	long long exp = 0;

	*type = word(ks_json_str(e, "type"), qmp_types, ARRAY_SIZE(qmp_types));
	if (*type < 0 || unit < 0)
		return drop(dr, d->name, "a type or unit this library cannot express");
	if (json_object_object_get_ex(e, "base", &v) &&
	    json_object_get_int(v) == 2)
		base = KVMSTATS_BASE_POW2;
	if (json_object_object_get_ex(e, "exponent", &v))
		exp = json_object_get_int64(v);
	if (!exponent_ok(unit, exp))
		return drop(dr, d->name, "exponent %lld out of range for unit %s",
			    exp, qmp_units[unit]);
	if (unit == KVMSTATS_UNIT_BOOLEAN && *type != KVMSTATS_TYPE_INSTANT &&
	    *type != KVMSTATS_TYPE_PEAK)
		return drop(dr, d->name, "a boolean %s", qmp_types[*type]);
	d->exponent = (int16_t)exp;
	d->flags = KVMSTATS_FLAGS(*type, unit, base);
	return true;
}

/* One QMP schema entry as a descriptor; false (and why, in @dr) to
 * leave it out: one bad stat costs that stat, not the schema. */
static bool to_desc(struct json_object *e, const struct value_sizes *values,
		    struct kvmstats_encode_desc *d, struct dropped *dr)
{
	struct json_object *v;
	long long bsz = 0;
	size_t size;
	int type = 0;

	d->name = ks_json_str(e, "name");
	if (!stat_name(d->name))
		return drop(dr, NULL, "not a stat name");
	if (!to_flags(e, d, &type, dr))
		return false;
	if (json_object_object_get_ex(e, "bucket-size", &v))
		bsz = json_object_get_int64(v);
	if (type == KVMSTATS_TYPE_LINEAR_HIST && (bsz <= 0 || bsz > UINT32_MAX))
		return drop(dr, d->name, "a linear histogram needs a bucket-size "
			    "in 1..%u (%lld)", UINT32_MAX, bsz);
	if (type != KVMSTATS_TYPE_LINEAR_HIST && bsz)
		return drop(dr, d->name, "bucket-size %lld on a %s", bsz,
			    qmp_types[type]);
	d->bucket_size = (uint32_t)bsz;
	d->size = 1;
	if (type != KVMSTATS_TYPE_LINEAR_HIST && type != KVMSTATS_TYPE_LOG_HIST)
		return true;
	/* Histogram sizes come only with values. */
	size = value_size(values, d->name);
	if (!size)
		return drop(dr, d->name, "a histogram without values");
	if (size > QMP_MAX_BUCKETS)
		return drop(dr, d->name, "%zu buckets, more than %u", size,
			    QMP_MAX_BUCKETS);
	d->size = (uint16_t)size;
	return true;
}

static int cmp_desc_name(const void *a, const void *b)
{
	const struct kvmstats_encode_desc *x = *(const struct kvmstats_encode_desc *const *)a;
	const struct kvmstats_encode_desc *y = *(const struct kvmstats_encode_desc *const *)b;
	int c = strcmp(x->name, y->name);

	/* The first listed of a name sorts first, and is kept. */
	return c ? c : (x > y) - (x < y);
}

/* Leave out a name listed again (its first is kept) and whatever would
 * take the data block past QMP_MAX_DATA, keeping the order of @d.
 * Returns how many are left. */
static size_t drop_dups(struct kvmstats_encode_desc *d, size_t n,
			struct dropped *dr)
{
	struct kvmstats_encode_desc **by = calloc(n ? n : 1, sizeof(*by));
	size_t keep = 0, words = 0;

	if (!by)
		return n;	/* the schema's validation refuses a name twice */
	for (size_t i = 0; i < n; i++)
		by[i] = &d[i];
	qsort(by, n, sizeof(*by), cmp_desc_name);
	for (size_t i = 1; i < n; i++) {
		if (strcmp(by[i]->name, by[i - 1]->name))
			continue;
		by[i]->flags = UINT32_MAX;	/* a mark: no stat has these flags */
		drop(dr, by[i]->name, "listed twice");
	}
	free(by);
	for (size_t i = 0; i < n; i++) {
		if (d[i].flags == UINT32_MAX)
			continue;
		if ((words + d[i].size) * 8 > QMP_MAX_DATA) {
			drop(dr, d[i].name, "past %u bytes of data in one schema",
			     QMP_MAX_DATA);
			continue;
		}
		words += d[i].size;
		d[keep++] = d[i];
	}
	return keep;
}

/* QEMU builds its lists by prepending, so its schemas come in reverse
 * descriptor order. The kernel lists the generic stats first, starting
 * with these; reversing unless the list already starts with one gives the
 * kernel's order (and so the kernel's data layout). */
static bool kernel_order(struct json_object *list)
{
	const char *first = ks_json_str(json_object_array_get_idx(list, 0), "name");

	return first && (!strcmp(first, "remote_tlb_flush") ||
			 !strcmp(first, "halt_successful_poll"));
}

static struct kvmstats_schema *build_schema(struct kvmstats_ctx *ctx,
					    struct json_object *list,
					    struct json_object *values,
					    const char *id, struct dropped *dr,
					    char *err, size_t errsz)
{
	size_t n = json_object_array_length(list), nd = 0, len;
	struct kvmstats_encode_desc *d = NULL;
	struct kvmstats_schema *s = NULL;
	struct value_sizes vs = { 0 };
	bool keep = kernel_order(list);
	void *img;

	if (n > QMP_MAX_DESCS) {
		ks_err(err, errsz, "%zu stats in one schema: not a kernel's", n);
		return NULL;
	}
	d = calloc(n ? n : 1, sizeof(*d));
	if (!d || value_sizes_make(&vs, values))
		goto out;
	for (size_t i = 0; i < n; i++) {
		size_t j = keep ? i : n - 1 - i;

		if (to_desc(json_object_array_get_idx(list, j), &vs, &d[nd], dr))
			nd++;
	}
	nd = drop_dups(d, nd, dr);
	img = kvmstats_image__encode(id, d, nd, NULL, &len, NULL);
	if (!img)
		ks_err(err, errsz, "encoding the schema: %s", strerror(errno));
	else
		s = kvmstats_schema__parse(ctx, img, len, err, errsz);
	free(img);
out:
	free(vs.v);
	free(d);
	return s;
}

static bool same_stat(const struct kvmstats_stat *a,
		      const struct kvmstats_stat *b)
{
	return !strcmp(kvmstats_stat__name(a), kvmstats_stat__name(b)) &&
	       kvmstats_stat__flags(a) == kvmstats_stat__flags(b) &&
	       kvmstats_stat__exponent(a) == kvmstats_stat__exponent(b) &&
	       kvmstats_stat__size(a) == kvmstats_stat__size(b) &&
	       kvmstats_stat__bucket_size(a) == kvmstats_stat__bucket_size(b);
}

/* The descriptors QEMU reports do not say where the kernel puts each
 * value (its data block follows its structs, not the descriptor order:
 * max_mmu_rmap_size comes after max_mmu_page_hash_collisions). When they
 * match this kernel's own, take the kernel's schema: the layout is then
 * exactly the kernel's, shared with fd readers. */
static struct kvmstats_schema *prefer_kernel(struct kvmstats_ctx *ctx,
					     struct kvmstats_schema *built,
					     bool vcpu)
{
	struct kvmstats_schema *k[2] = { NULL, NULL }, *ks;
	const struct kvmstats_stat *a, *b;
	bool same;

	if (ks_kernel_schemas(ctx, &k[0], &k[1]))
		return built;	/* no /dev/kvm here: the encoded layout */
	ks = k[vcpu];
	kvmstats_schema__put(k[!vcpu]);
	same = kvmstats_schema__num_stats(ks) == kvmstats_schema__num_stats(built);
	for (a = kvmstats_schema__next(ks, NULL), b = kvmstats_schema__next(built, NULL);
	     same && a && b;
	     a = kvmstats_schema__next(ks, a), b = kvmstats_schema__next(built, b))
		same = same_stat(a, b);
	if (!same) {
		kvmstats_schema__put(ks);
		return built;
	}
	kvmstats_schema__put(built);
	return ks;
}

/* ---- what a result costs ------------------------------------------------ */

/* What json-c builds for one target's query-stats result (qmp.c's
 * estimate, with room): its object, its list, provider and qom-path;
 * then each stat's object and name, and each value. */
#define COST_TARGET 4096u
#define COST_STAT 1200u
#define COST_VALUE 100u

size_t ks_qmp_cost_of_list(struct json_object *list)
{
	size_t n = json_object_is_type(list, json_type_array) ?
			   json_object_array_length(list) : 0, words = 0;

	if (n > QMP_MAX_DESCS)
		n = QMP_MAX_DESCS;
	/* Histogram sizes come with the values: the most kept. */
	for (size_t i = 0; i < n; i++) {
		int type = word(ks_json_str(json_object_array_get_idx(list, i),
					    "type"), qmp_types,
				ARRAY_SIZE(qmp_types));

		words += type == KVMSTATS_TYPE_LINEAR_HIST ||
				 type == KVMSTATS_TYPE_LOG_HIST ?
				 QMP_MAX_BUCKETS : 1;
	}
	if (words > QMP_MAX_DATA / 8)
		words = QMP_MAX_DATA / 8;
	return COST_TARGET + n * COST_STAT + words * COST_VALUE;
}

/* ---- snapshots ---------------------------------------------------------- */

int ks_snap_alloc(struct snap *s, const struct kvmstats_schema *sc)
{
	size_t words = (kvmstats_schema__num_stats(sc) + 63) / 64;

	s->data = calloc(1, kvmstats_schema__data_size(sc) + 8);
	s->missing = calloc(words + 1, sizeof(uint64_t));
	return s->data && s->missing ? 0 : -ENOMEM;
}

void ks_snap_free(struct snap *s)
{
	free(s->data);
	free(s->missing);
}

static void set_bit(uint64_t *map, uint32_t i, bool on)
{
	if (on)
		map[i / 64] |= 1ull << (i % 64);
	else
		map[i / 64] &= ~(1ull << (i % 64));
}

static uint64_t value_u64(struct json_object *v)
{
	if (json_object_is_type(v, json_type_boolean))
		return json_object_get_boolean(v) ? 1 : 0;
	return json_object_get_uint64(v);
}

/* One value of a "stats" list into the snapshot; false if it does not fit
 * the stat (a histogram of another size). @reversed: QEMU's list is last
 * element first. */
static bool fill_one(const struct kvmstats_stat *st, struct json_object *v,
		     uint64_t *data, bool reversed)
{
	uint64_t *out = data + kvmstats_stat__offset(st) / 8;
	uint32_t size = kvmstats_stat__size(st);

	if (!json_object_is_type(v, json_type_array)) {
		if (size != 1)
			return false;
		*out = value_u64(v);
		return true;
	}
	if (json_object_array_length(v) != size)
		return false;
	for (uint32_t k = 0; k < size; k++)
		out[reversed ? size - 1 - k : k] =
			value_u64(json_object_array_get_idx(v, k));
	return true;
}

void ks_snap_fill(struct snap *s, const struct kvmstats_schema *sc,
		  struct json_object *values, bool reversed)
{
	uint32_t nst = kvmstats_schema__num_stats(sc);
	size_t n = json_object_array_length(values);

	memset(s->data, 0, kvmstats_schema__data_size(sc));
	for (uint32_t i = 0; i < nst; i++)
		set_bit(s->missing, i, true);
	/* No more entries than a list of every stat, twice. */
	if (n > 2 * (size_t)nst)
		n = 2 * (size_t)nst;
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(values, i);
		const char *name = ks_json_str(e, "name");
		const struct kvmstats_stat *st;
		struct json_object *v;

		if (!name || !json_object_object_get_ex(e, "value", &v))
			continue;
		st = kvmstats_schema__find(sc, name);
		if (st && fill_one(st, v, s->data, reversed))
			set_bit(s->missing, kvmstats_stat__index(st), false);
	}
}

struct kvmstats_schema *ks_qmp_schema(struct kvmstats_ctx *ctx,
				      struct json_object *list,
				      struct json_object *values,
				      const char *id, bool vcpu, char *err,
				      size_t errsz)
{
	struct dropped dr = { 0 };
	struct kvmstats_schema *s = build_schema(ctx, list, values, id, &dr,
						 err, errsz);

	/* Left out, and said why: the operator sees a stat missing. */
	if (dr.n)
		ks_log(ctx, KVMSTATS_LOG_WARN,
		       "%s: QMP %s schema: %zu stat%s left out (first: %s)", id,
		       vcpu ? "vCPU" : "VM", dr.n, dr.n == 1 ? "" : "s", dr.first);
	return s ? prefer_kernel(ctx, s, vcpu) : NULL;
}
