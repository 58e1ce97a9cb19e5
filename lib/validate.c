// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Every rule a stats image must follow, as findings.
 *
 * The kernel selftest kvm_binary_stats_test checks the header fields, the
 * id prefix, the type/unit/base ranges, exponent signs, name termination,
 * non-zero sizes, bucket_size use and that descriptor and data blocks do
 * not overlap. It does not check name uniqueness, header.flags, where the
 * id lies, alignment, that individual stats do not overlap, that every
 * block lies inside the file, or unit/type combinations; those are here
 * too. The parser runs the same code, so what `check` rejects, `dump`
 * refuses to read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const struct kvmstats_rule rules[] = {
	{ "header.size", "the image holds at least a whole header" },
	{ "header.flags", "header.flags is 0 (no flags are defined)" },
	{ "header.name_size", "name_size is non-zero, a multiple of 8 and sane" },
	{ "header.num_desc", "the descriptor block fits in the image" },
	{ "header.alignment", "id, descriptor and data offsets are 8-byte aligned" },
	{ "layout.bounds", "id, descriptor and data blocks lie inside the image" },
	{ "layout.overlap", "header, id, descriptor and data blocks do not overlap" },
	{ "layout.trailing", "nothing follows the data block" },
	{ "id.terminated", "the id is NUL-terminated within name_size" },
	{ "id.prefix", "the id starts with \"kvm\"" },
	{ "desc.name.terminated", "each name is NUL-terminated within name_size" },
	{ "desc.name.empty", "no name is empty" },
	{ "desc.name.unique", "no two stats share a name" },
	{ "desc.name.charset", "names are lower-case identifiers [a-z0-9_]" },
	{ "desc.flags.reserved", "no flag bits beyond type, unit and base" },
	{ "desc.type.known", "the type is one this library knows" },
	{ "desc.unit.known", "the unit is one this library knows" },
	{ "desc.base.known", "the base is POW10 or POW2" },
	{ "desc.exponent", "exponent >= 0 for none/bytes/cycles, <= 0 for seconds, 0 for boolean" },
	{ "desc.unit.combination", "boolean stats are single instant or peak values" },
	{ "desc.size", "size is non-zero; scalars have one value" },
	{ "desc.bucket_size", "bucket_size is set for linear histograms only" },
	{ "desc.offset.aligned", "each stat's offset is 8-byte aligned" },
	{ "desc.offset.bounds", "each stat lies inside the data block" },
	{ "desc.overlap", "no two stats share data bytes" },
	{ "data.size", "the data block covers every stat" },
	{ "data.boolean", "boolean values are 0 or 1" },
	{ "read.whole", "the fd reads from offset 0 to EOF", true },
	{ "read.offsets", "reads at odd offsets and lengths return the same bytes", true },
	{ "read.eof", "a read at or past EOF returns 0", true },
	{ "read.stable", "header, id and descriptors never change", true },
	{ "data.monotonic", "cumulative and peak stats never go down", true },
	{ "read.dup", "a dup()'d fd reads the same header, id and descriptors", true },
	{ "read.second_fd", "a second stats fd of the target reads the same", true },
	{ "read.after_close", "the stats fd still reads after its VM/vCPU fd is closed", true },
	{ NULL, NULL, false },
};

const struct kvmstats_rule *kvmstats_rules(void)
{
	return rules;
}

struct kvmstats_report {
	struct kvmstats_finding *f;
	size_t n, cap;
	size_t errors;
	bool oom;
};

struct kvmstats_report *kvmstats_report__new(void)
{
	return calloc(1, sizeof(struct kvmstats_report));
}

void kvmstats_report__free(struct kvmstats_report *r)
{
	if (!r)
		return;
	free(r->f);
	free(r);
}

size_t kvmstats_report__count(const struct kvmstats_report *r)
{
	return r->n;
}

size_t kvmstats_report__errors(const struct kvmstats_report *r)
{
	return r->errors;
}

void kvmstats_report__add(struct kvmstats_report *r, enum kvmstats_severity sev,
			  const char *rule, int32_t stat, const char *fmt, ...)
{
	char msg[sizeof(((struct kvmstats_finding *)0)->msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ks_report_add(r, sev, rule, stat, "%s", msg);
}

bool kvmstats_report__failed(const struct kvmstats_report *r, const char *rule)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->f[i].severity == KVMSTATS_SEV_ERROR &&
		    !strcmp(r->f[i].rule, rule))
			return true;
	return false;
}

const struct kvmstats_finding *
kvmstats_report__finding(const struct kvmstats_report *r, size_t i)
{
	if (i >= r->n) {
		errno = ENOENT;
		return NULL;
	}
	return &r->f[i];
}

const struct kvmstats_finding *ks_report_first_error(const struct kvmstats_report *r)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->f[i].severity == KVMSTATS_SEV_ERROR)
			return &r->f[i];
	return NULL;
}

/* Findings per rule are capped so a hostile image with 10^5 bad
 * descriptors yields a readable report of bounded size. */
#define MAX_FINDINGS 256

void ks_report_add(struct kvmstats_report *r, enum kvmstats_severity sev,
		const char *rule, int32_t stat, const char *fmt, ...)
{
	struct kvmstats_finding *f;
	va_list ap;

	if (sev == KVMSTATS_SEV_ERROR)
		r->errors++;
	if (r->n >= MAX_FINDINGS)
		return;
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 8;
		void *p = realloc(r->f, cap * sizeof(*r->f));

		if (!p) {
			r->oom = true;
			return;
		}
		r->f = p;
		r->cap = cap;
	}
	f = &r->f[r->n++];
	f->rule = rule;
	f->severity = sev;
	f->stat = stat;
	va_start(ap, fmt);
	vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
	va_end(ap);
}


struct range {
	uint64_t lo, hi;	/* [lo, hi) */
	const char *what;
	int32_t stat;
};

static bool overlaps(const struct range *a, const struct range *b)
{
	return a->lo < b->hi && b->lo < a->hi && a->lo < a->hi && b->lo < b->hi;
}

/* State shared by the checks of one image. */
struct image {
	const unsigned char *buf;
	size_t len;
	struct kvmstats_abi_header hdr;
	uint64_t dsz;			/* one descriptor with its name */
	uint64_t desc_end;
	uint64_t data_size;		/* bytes the descriptors cover */
	bool descs_readable;
};

static void desc_at(const struct image *im, uint32_t i,
		    struct kvmstats_abi_desc *d, const char **name)
{
	const unsigned char *p = im->buf + im->hdr.desc_offset + i * im->dsz;

	/* memcpy: the image buffer need not be aligned. */
	memcpy(d, p, sizeof(*d));
	*name = (const char *)p + sizeof(*d);
}

static int check_header(struct image *im, struct kvmstats_report *r)
{
	const struct kvmstats_abi_header *h = &im->hdr;

	if (im->len < sizeof(*h)) {
		ERR(r, "header.size", -1, "image is %zu bytes, a header needs %zu",
		    im->len, sizeof(*h));
		return -1;
	}
	memcpy(&im->hdr, im->buf, sizeof(*h));
	if (h->flags)
		ERR(r, "header.flags", -1, "header.flags is 0x%x, expected 0",
		    h->flags);
	if (!h->name_size || h->name_size > KS_MAX_NAME_SIZE) {
		ERR(r, "header.name_size", -1, "name_size %u is out of range 1..%u",
		    h->name_size, KS_MAX_NAME_SIZE);
		return -1;
	}
	if (h->name_size % 8)
		ERR(r, "header.name_size", -1,
		    "name_size %u is not a multiple of 8 (descriptors would be misaligned)",
		    h->name_size);
	if (h->id_offset % 8 || h->desc_offset % 8 || h->data_offset % 8)
		ERR(r, "header.alignment", -1,
		    "offsets id=%u desc=%u data=%u are not all 8-byte aligned",
		    h->id_offset, h->desc_offset, h->data_offset);
	im->dsz = sizeof(struct kvmstats_abi_desc) + (uint64_t)h->name_size;
	im->desc_end = h->desc_offset + im->dsz * h->num_desc;
	if (im->desc_end > im->len) {
		ERR(r, "header.num_desc", -1,
		    "%u descriptors of %llu bytes at %u end at %llu, past the image's %zu bytes",
		    h->num_desc, (unsigned long long)im->dsz, h->desc_offset,
		    (unsigned long long)im->desc_end, im->len);
		return -1;
	}
	return 0;
}

static void check_id(const struct image *im, struct kvmstats_report *r)
{
	const struct kvmstats_abi_header *h = &im->hdr;
	const char *id;

	if ((uint64_t)h->id_offset + h->name_size > im->len) {
		ERR(r, "layout.bounds", -1, "id at %u+%u is outside the image (%zu bytes)",
		    h->id_offset, h->name_size, im->len);
		return;
	}
	id = (const char *)im->buf + h->id_offset;
	if (!memchr(id, 0, h->name_size)) {
		ERR(r, "id.terminated", -1, "id is not NUL-terminated within %u bytes",
		    h->name_size);
		return;
	}
	if (strncmp(id, "kvm", 3))
		ERR(r, "id.prefix", -1, "id \"%.40s\" does not start with \"kvm\"", id);
}

static bool name_charset_ok(const char *s)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
		      *s == '_'))
			return false;
	return true;
}

static void check_flags(struct kvmstats_report *r, uint32_t i,
			const struct kvmstats_abi_desc *d, const char *name)
{
	unsigned int type = KVMSTATS_FLAG_TYPE(d->flags);
	unsigned int unit = KVMSTATS_FLAG_UNIT(d->flags);
	unsigned int base = KVMSTATS_FLAG_BASE(d->flags);

	if (d->flags & ~0xfffu)
		WARN(r, "desc.flags.reserved", i, "%s: unknown flag bits 0x%x",
		     name, d->flags & ~0xfffu);
	if (type > KVMSTATS_TYPE_LOG_HIST)
		WARN(r, "desc.type.known", i, "%s: unknown type %u, kept raw", name,
		     type);
	if (unit > KVMSTATS_UNIT_BOOLEAN)
		WARN(r, "desc.unit.known", i, "%s: unknown unit %u, kept raw", name,
		     unit);
	if (base > KVMSTATS_BASE_POW2)
		WARN(r, "desc.base.known", i, "%s: unknown base %u, kept raw", name,
		     base);
}

static void check_exponent(struct kvmstats_report *r, uint32_t i,
			   const struct kvmstats_abi_desc *d, const char *name)
{
	unsigned int unit = KVMSTATS_FLAG_UNIT(d->flags);
	unsigned int type = KVMSTATS_FLAG_TYPE(d->flags);
	bool bad = false;

	switch (unit) {
	case KVMSTATS_UNIT_NONE:
	case KVMSTATS_UNIT_BYTES:
	case KVMSTATS_UNIT_CYCLES:
		bad = d->exponent < 0;
		break;
	case KVMSTATS_UNIT_SECONDS:
		bad = d->exponent > 0;
		break;
	case KVMSTATS_UNIT_BOOLEAN:
		bad = d->exponent != 0;
		break;
	}
	if (bad)
		ERR(r, "desc.exponent", i, "%s: exponent %d not allowed for unit %s",
		    name, d->exponent, kvmstats_unit_str(unit));
	if (unit == KVMSTATS_UNIT_BOOLEAN &&
	    ((type != KVMSTATS_TYPE_INSTANT && type != KVMSTATS_TYPE_PEAK) ||
	     d->size != 1))
		ERR(r, "desc.unit.combination", i,
		    "%s: a boolean must be one instant or peak value (type %s, size %u)",
		    name, kvmstats_type_str(type), d->size);
}

static void check_size(struct kvmstats_report *r, uint32_t i,
		       const struct kvmstats_abi_desc *d, const char *name)
{
	unsigned int type = KVMSTATS_FLAG_TYPE(d->flags);
	bool hist = type == KVMSTATS_TYPE_LINEAR_HIST ||
		    type == KVMSTATS_TYPE_LOG_HIST;

	if (!d->size)
		ERR(r, "desc.size", i, "%s: size is 0", name);
	else if (!hist && type <= KVMSTATS_TYPE_LOG_HIST && d->size != 1)
		WARN(r, "desc.size", i, "%s: %s stat with %u values", name,
		     kvmstats_type_str(type), d->size);
	if (type == KVMSTATS_TYPE_LINEAR_HIST && !d->bucket_size)
		ERR(r, "desc.bucket_size", i,
		    "%s: linear histogram with bucket_size 0", name);
	else if (type != KVMSTATS_TYPE_LINEAR_HIST && d->bucket_size)
		ERR(r, "desc.bucket_size", i, "%s: bucket_size %u on a %s stat",
		    name, d->bucket_size, kvmstats_type_str(type));
	if (d->offset % 8)
		ERR(r, "desc.offset.aligned", i, "%s: offset %u is not 8-byte aligned",
		    name, d->offset);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void check_unique(const struct image *im, struct kvmstats_report *r)
{
	const char **names;
	uint32_t n = im->hdr.num_desc;

	if (n < 2)
		return;
	names = malloc(n * sizeof(*names));
	if (!names) {
		r->oom = true;
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct kvmstats_abi_desc d;

		desc_at(im, i, &d, &names[i]);
	}
	qsort(names, n, sizeof(*names), cmp_str);
	for (uint32_t i = 1; i < n; i++)
		if (!strcmp(names[i - 1], names[i]) &&
		    (i < 2 || strcmp(names[i - 2], names[i])))
			ERR(r, "desc.name.unique", -1, "name \"%.60s\" is used twice or more",
			    names[i]);
	free(names);
}

static int cmp_range(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Checks each descriptor; names must be terminated before anything else
 * can use them. Returns -1 when names are unusable. */
static int check_descs(struct image *im, struct kvmstats_report *r)
{
	bool names_ok = true;

	for (uint32_t i = 0; i < im->hdr.num_desc; i++) {
		struct kvmstats_abi_desc d;
		const char *name;
		uint64_t end;

		desc_at(im, i, &d, &name);
		if (!memchr(name, 0, im->hdr.name_size)) {
			ERR(r, "desc.name.terminated", i,
			    "descriptor %u: name is not NUL-terminated within %u bytes",
			    i, im->hdr.name_size);
			names_ok = false;
			continue;
		}
		if (!*name)
			ERR(r, "desc.name.empty", i, "descriptor %u: empty name", i);
		else if (!name_charset_ok(name))
			WARN(r, "desc.name.charset", i, "%.60s: not a lower-case identifier",
			     name);
		check_flags(r, i, &d, name);
		check_exponent(r, i, &d, name);
		check_size(r, i, &d, name);
		end = d.offset + (uint64_t)d.size * 8;
		if (end > im->data_size)
			im->data_size = end;
	}
	if (!names_ok)
		return -1;
	check_unique(im, r);
	return 0;
}

/* Stats must not share bytes: sort their ranges and compare neighbours. */
static void check_stat_overlap(const struct image *im, struct kvmstats_report *r)
{
	uint32_t n = im->hdr.num_desc;
	struct range *rg;

	if (n < 2)
		return;
	rg = malloc(n * sizeof(*rg));
	if (!rg) {
		r->oom = true;
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct kvmstats_abi_desc d;
		const char *name;

		desc_at(im, i, &d, &name);
		rg[i] = (struct range){ d.offset, d.offset + (uint64_t)d.size * 8,
					name, (int32_t)i };
	}
	qsort(rg, n, sizeof(*rg), cmp_range);
	for (uint32_t i = 1; i < n; i++) {
		uint32_t j = i - 1;

		if (rg[j].lo < rg[j].hi && rg[i].lo < rg[j].hi)
			ERR(r, "desc.overlap", rg[i].stat,
			    "%.40s [%llu,%llu) overlaps %.40s [%llu,%llu)", rg[i].what,
			    (unsigned long long)rg[i].lo, (unsigned long long)rg[i].hi,
			    rg[j].what, (unsigned long long)rg[j].lo,
			    (unsigned long long)rg[j].hi);
	}
	free(rg);
}

static void check_layout(const struct image *im, struct kvmstats_report *r)
{
	const struct kvmstats_abi_header *h = &im->hdr;
	struct range b[4] = {
		{ 0, sizeof(*h), "header", -1 },
		{ h->id_offset, (uint64_t)h->id_offset + h->name_size, "id", -1 },
		{ h->desc_offset, im->desc_end, "descriptors", -1 },
		{ h->data_offset, h->data_offset + im->data_size, "data", -1 },
	};
	uint64_t data_end = b[3].hi, max_end = 0;

	for (int i = 0; i < 4; i++) {
		if (b[i].hi > max_end)
			max_end = b[i].hi;
		for (int j = i + 1; j < 4; j++)
			if (overlaps(&b[i], &b[j]))
				ERR(r, "layout.overlap", -1,
				    "%s [%llu,%llu) overlaps %s [%llu,%llu)", b[i].what,
				    (unsigned long long)b[i].lo, (unsigned long long)b[i].hi,
				    b[j].what, (unsigned long long)b[j].lo,
				    (unsigned long long)b[j].hi);
	}
	if (im->data_size > KS_MAX_DATA)
		ERR(r, "desc.offset.bounds", -1,
		    "data block of %llu bytes exceeds the %u-byte limit",
		    (unsigned long long)im->data_size, KS_MAX_DATA);
	if (data_end > im->len)
		ERR(r, "data.size", -1,
		    "data block [%u,%llu) is past the end of the image (%zu bytes): truncated?",
		    h->data_offset, (unsigned long long)data_end, im->len);
	else if (max_end < im->len)
		WARN(r, "layout.trailing", -1, "%llu bytes follow the last block",
		     (unsigned long long)(im->len - max_end));
	if (h->num_desc && im->data_size < (uint64_t)h->num_desc * 8)
		ERR(r, "data.size", -1, "data block of %llu bytes cannot hold %u stats",
		    (unsigned long long)im->data_size, h->num_desc);
}

static void check_values(const struct image *im, struct kvmstats_report *r)
{
	const unsigned char *data = im->buf + im->hdr.data_offset;

	for (uint32_t i = 0; i < im->hdr.num_desc; i++) {
		struct kvmstats_abi_desc d;
		const char *name;
		uint64_t v;

		desc_at(im, i, &d, &name);
		if (KVMSTATS_FLAG_UNIT(d.flags) != KVMSTATS_UNIT_BOOLEAN || !d.size)
			continue;
		memcpy(&v, data + d.offset, sizeof(v));
		if (v > 1)
			ERR(r, "data.boolean", i, "%s: boolean holds %llu", name,
			    (unsigned long long)v);
	}
}

int ks_check_image(const unsigned char *buf, size_t len,
		   struct kvmstats_report *r)
{
	struct image im = { .buf = buf, .len = len };
	size_t errors = r->errors;

	if (len > KS_MAX_IMAGE) {
		ERR(r, "layout.bounds", -1, "image of %zu bytes exceeds the %u-byte limit",
		    len, KS_MAX_IMAGE);
		return (int)(r->errors - errors);
	}
	if (check_header(&im, r))
		goto out;
	check_id(&im, r);
	if (check_descs(&im, r))
		goto out;
	check_stat_overlap(&im, r);
	check_layout(&im, r);
	if (r->errors == errors)
		check_values(&im, r);
out:
	if (r->oom)
		return -ENOMEM;
	return (int)(r->errors - errors);
}

int kvmstats_image__validate(const void *buf, size_t len,
			     struct kvmstats_report *r)
{
	if (!buf || !r)
		return -EINVAL;
	return ks_check_image(buf, len, r);
}
