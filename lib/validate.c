// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Every rule a stats image must follow, as findings.
 *
 * The kernel selftest kvm_binary_stats_test checks the header fields, the
 * id (which it reads right after the header, whatever id_offset says), the
 * type/unit/base ranges, exponent signs, name termination, non-zero sizes,
 * bucket_size use and that descriptor and data blocks do not overlap. It
 * does not check name uniqueness, header.flags, alignment, unused bytes,
 * that individual stats do not overlap, that every block lies inside the
 * file, or unit/type combinations; those are here too.
 *
 * The parser runs the same code: what `check` rejects, `dump` refuses to
 * read, but for what a newer kernel may legitimately send (a type, unit or
 * base beyond the ones known here, an id after a longer header). Those are
 * errors only in a strict report (KVMSTATS_REPORT_STRICT, `check`) and
 * warnings otherwise, so that the parser keeps such stats raw.
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
	{ "header.num_desc",
	  "the descriptor block fits in the image (an empty one, num_desc 0, holds no bytes: its offset may point anywhere, as the selftest accepts)" },
	{ "header.alignment", "id, descriptor and data offsets are 8-byte aligned" },
	{ "layout.bounds", "id, descriptor and data blocks lie inside the image" },
	{ "layout.overlap", "header, id, descriptor and data blocks do not overlap" },
	{ "layout.gaps", "no unused bytes lie between the header, id, descriptor and data blocks" },
	{ "layout.trailing", "nothing follows the data block" },
	{ "id.offset",
	  "the id lies right after the 24-byte header, where the kernel writes it and its selftest reads it (strict)" },
	{ "id.terminated", "the id is NUL-terminated within name_size" },
	{ "id.prefix", "the id starts with \"kvm\"" },
	{ "desc.name.terminated", "each name is NUL-terminated within name_size" },
	{ "desc.name.empty", "no name is empty" },
	{ "desc.name.unique", "no two stats share a name" },
	{ "desc.name.charset", "names are lower-case identifiers [a-z0-9_]" },
	{ "desc.flags.reserved", "no flag bits beyond type, unit and base" },
	{ "desc.type.known", "the type is at most LOG_HIST (strict; else kept raw)" },
	{ "desc.unit.known", "the unit is at most BOOLEAN (strict; else kept raw)" },
	{ "desc.base.known", "the base is POW10 or POW2 (strict; else kept raw)" },
	{ "desc.exponent", "exponent >= 0 for none/bytes/cycles, <= 0 for seconds, 0 for boolean" },
	{ "desc.unit.combination", "boolean stats are single instant or peak values" },
	{ "desc.size", "size is non-zero; scalars have one value" },
	{ "desc.bucket_size", "bucket_size is set for linear histograms only" },
	{ "desc.offset.aligned", "each stat's offset is 8-byte aligned" },
	{ "desc.offset.bounds", "each stat lies inside the data block" },
	{ "desc.overlap", "no two stats share data bytes" },
	{ "data.size", "the data block lies in the image and covers every stat" },
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

/* Findings are capped (see MAX_FINDINGS); the errors of each rule are
 * counted apart so that a rule never looks passed because its findings
 * were dropped. */
#define MAX_RULES 64

struct kvmstats_report {
	struct kvmstats_finding *f;
	size_t n, cap;
	size_t errors;
	unsigned int flags;
	bool oom;
	bool rules_full;
	size_t nrules;
	struct {
		const char *name;
		size_t errors;
	} rule[MAX_RULES];
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

int kvmstats_report__set_flags(struct kvmstats_report *r, unsigned int flags)
{
	if (!r || flags & ~KVMSTATS_REPORT_STRICT)
		return -EINVAL;
	r->flags = flags;
	return 0;
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
	for (size_t i = 0; i < r->nrules; i++)
		if (!strcmp(r->rule[i].name, rule))
			return r->rule[i].errors > 0;
	if (!r->rules_full)
		return false;
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

/* Findings are capped so a hostile image with 10^5 bad descriptors
 * yields a readable report of bounded size. */
#define MAX_FINDINGS 256

static void count_error(struct kvmstats_report *r, const char *rule)
{
	size_t i;

	r->errors++;
	for (i = 0; i < r->nrules; i++)
		if (!strcmp(r->rule[i].name, rule))
			break;
	if (i == MAX_RULES) {
		r->rules_full = true;
		return;
	}
	if (i == r->nrules)
		r->rule[r->nrules++].name = rule;
	r->rule[i].errors++;
}

void ks_report_add(struct kvmstats_report *r, enum kvmstats_severity sev,
		const char *rule, int32_t stat, const char *fmt, ...)
{
	struct kvmstats_finding *f;
	va_list ap;

	if (sev == KVMSTATS_SEV_ERROR)
		count_error(r, rule);
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

static int cmp_range(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* State shared by the checks of one image. */
struct image {
	const unsigned char *buf;
	size_t len;
	struct kvmstats_abi_header hdr;
	uint64_t dsz;			/* one descriptor with its name */
	uint64_t desc_end;
	uint64_t data_size;		/* bytes the descriptors cover */
};

/* What a newer kernel may send: an error only when the report is strict. */
static enum kvmstats_severity abi_severity(const struct kvmstats_report *r)
{
	return r->flags & KVMSTATS_REPORT_STRICT ? KVMSTATS_SEV_ERROR :
						   KVMSTATS_SEV_WARNING;
}

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
	/* No descriptors: an empty block, inside any file wherever it points. */
	if (h->num_desc && im->desc_end > im->len) {
		ERR(r, "header.num_desc", -1,
		    "%u descriptors of %llu bytes at %u end at %llu, past the image's %zu bytes",
		    h->num_desc, (unsigned long long)im->dsz, h->desc_offset,
		    (unsigned long long)im->desc_end, im->len);
		return -1;
	}
	return 0;
}

/* The data block ends where the furthest stat does. */
static void measure_data(struct image *im)
{
	for (uint32_t i = 0; i < im->hdr.num_desc; i++) {
		struct kvmstats_abi_desc d;
		const char *name;
		uint64_t end;

		desc_at(im, i, &d, &name);
		end = d.offset + (uint64_t)d.size * 8;
		if (end > im->data_size)
			im->data_size = end;
	}
}

/* Up to @n bytes of @s for a message, non-printable ones as '?'. */
static void printable(char *dst, const unsigned char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n && s[i]; i++)
		dst[i] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
	dst[i] = 0;
}

/* The kernel writes the id right after the header and its selftest reads
 * it there, never at id_offset: an id elsewhere is not the kernel's. */
static void check_id_offset(const struct image *im, struct kvmstats_report *r)
{
	const struct kvmstats_abi_header *h = &im->hdr;
	char seen[24] = "past the end";

	if (h->id_offset == sizeof(*h))
		return;
	if (im->len > sizeof(*h)) {
		size_t n = im->len - sizeof(*h);

		seen[0] = '"';
		printable(seen + 1, im->buf + sizeof(*h), n < 16 ? n : 16);
		strcat(seen, "\"");
	}
	ks_report_add(r, abi_severity(r), "id.offset", -1,
		      "id_offset is %u, not %zu: the kernel and its selftest put the id right after the header, where this image has %s",
		      h->id_offset, sizeof(*h), seen);
}

static void check_id(const struct image *im, struct kvmstats_report *r)
{
	const struct kvmstats_abi_header *h = &im->hdr;
	const char *id;

	check_id_offset(im, r);
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
	enum kvmstats_severity sev = abi_severity(r);
	const char *kept = sev == KVMSTATS_SEV_WARNING ? ", kept raw" : "";
	unsigned int type = KVMSTATS_FLAG_TYPE(d->flags);
	unsigned int unit = KVMSTATS_FLAG_UNIT(d->flags);
	unsigned int base = KVMSTATS_FLAG_BASE(d->flags);

	if (d->flags & ~0xfffu)
		WARN(r, "desc.flags.reserved", i, "%s: unknown flag bits 0x%x",
		     name, d->flags & ~0xfffu);
	if (type > KVMSTATS_TYPE_LOG_HIST)
		ks_report_add(r, sev, "desc.type.known", i,
			      "%s: type %u is past LOG_HIST (%u)%s", name, type,
			      KVMSTATS_TYPE_LOG_HIST, kept);
	if (unit > KVMSTATS_UNIT_BOOLEAN)
		ks_report_add(r, sev, "desc.unit.known", i,
			      "%s: unit %u is past BOOLEAN (%u)%s", name, unit,
			      KVMSTATS_UNIT_BOOLEAN, kept);
	if (base > KVMSTATS_BASE_POW2)
		ks_report_add(r, sev, "desc.base.known", i,
			      "%s: base %u is past POW2 (%u)%s", name, base,
			      KVMSTATS_BASE_POW2, kept);
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

/* Checks each descriptor; names must be terminated before anything else
 * can use them. Returns -1 when names are unusable. */
static int check_descs(struct image *im, struct kvmstats_report *r)
{
	bool names_ok = true;

	for (uint32_t i = 0; i < im->hdr.num_desc; i++) {
		struct kvmstats_abi_desc d;
		const char *name;

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

/* Bytes between the blocks that no block covers; @b sorted, empty
 * blocks ignored. */
static void check_gaps(const struct range *b, int n, size_t len,
		       struct kvmstats_report *r)
{
	uint64_t end = 0, unused = 0, first = 0, first_end = 0;

	for (int i = 0; i < n; i++) {
		if (b[i].lo == b[i].hi)
			continue;
		if (b[i].lo > end && end < len) {
			if (!unused) {
				first = end;
				first_end = b[i].lo;
			}
			unused += (b[i].lo < len ? b[i].lo : len) - end;
		}
		if (b[i].hi > end)
			end = b[i].hi;
	}
	if (unused)
		WARN(r, "layout.gaps", -1,
		     "%llu bytes belong to no block, the first at [%llu,%llu)",
		     (unsigned long long)unused, (unsigned long long)first,
		     (unsigned long long)first_end);
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
		if (b[i].lo < b[i].hi && b[i].hi > max_end)
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
	if (im->data_size && data_end > im->len)
		ERR(r, "data.size", -1,
		    "data block [%u,%llu) is past the end of the image (%zu bytes): truncated?",
		    h->data_offset, (unsigned long long)data_end, im->len);
	else if (max_end < im->len)
		WARN(r, "layout.trailing", -1, "%llu bytes follow the last block",
		     (unsigned long long)(im->len - max_end));
	if (h->num_desc && im->data_size < (uint64_t)h->num_desc * 8)
		ERR(r, "data.size", -1, "data block of %llu bytes cannot hold %u stats",
		    (unsigned long long)im->data_size, h->num_desc);
	qsort(b, 4, sizeof(b[0]), cmp_range);
	check_gaps(b, 4, im->len, r);
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
	/* The blocks first: their checks need no descriptor name. */
	measure_data(&im);
	check_layout(&im, r);
	check_id(&im, r);
	if (check_descs(&im, r))
		goto out;
	check_stat_overlap(&im, r);
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
