// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * mkselftest DIR [BASE]: from a valid stats image (BASE, or one encoded
 * here with every type and unit), write one image per assertion of the
 * kernel selftest kvm_binary_stats_test that breaks that assertion, plus
 * images the selftest accepts, and print a manifest line per image:
 *
 *	ASSERTION FILE RULE
 *
 * RULE is the kvmstats check rule that must fail, or "-" for an image
 * that must pass. tests/integration/check_selftest.sh lists the
 * assertions (S1..S23) and feeds the images to `check` and `dump`.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmstats.h"

#define HDR_SIZE sizeof(struct kvmstats_abi_header)
#define DESC_SIZE sizeof(struct kvmstats_abi_desc)
#define F(t, u) KVMSTATS_FLAGS(KVMSTATS_TYPE_##t, KVMSTATS_UNIT_##u, 0)
#define SLACK 4096	/* room to append an id */

/* An image being mutated: @h is edited as a struct and written back to
 * the buffer when the mutation is done. */
struct image {
	unsigned char *buf;
	size_t len;
	struct kvmstats_abi_header h;
};

static unsigned char *desc_at(const struct image *im, uint32_t i)
{
	return im->buf + im->h.desc_offset + i * (DESC_SIZE + im->h.name_size);
}

static void get_desc(const struct image *im, uint32_t i,
		     struct kvmstats_abi_desc *d)
{
	memcpy(d, desc_at(im, i), DESC_SIZE);
}

static void put_desc(struct image *im, uint32_t i,
		     const struct kvmstats_abi_desc *d)
{
	memcpy(desc_at(im, i), d, DESC_SIZE);
}

/* The first scalar (one value, not boolean) stat when @type is -1, else
 * the first stat of @type; the first stat when there is none. */
static uint32_t pick(const struct image *im, int type)
{
	for (uint32_t i = 0; i < im->h.num_desc; i++) {
		struct kvmstats_abi_desc d;
		unsigned int t;

		get_desc(im, i, &d);
		t = KVMSTATS_FLAG_TYPE(d.flags);
		if (type >= 0 ? (int)t == type :
				t < KVMSTATS_TYPE_LINEAR_HIST && d.size == 1 &&
				KVMSTATS_FLAG_UNIT(d.flags) != KVMSTATS_UNIT_BOOLEAN)
			return i;
	}
	return 0;
}

/* Give stat @i new flags and exponent. */
static void set_stat(struct image *im, uint32_t i, uint32_t flags, int16_t exp)
{
	struct kvmstats_abi_desc d;

	get_desc(im, i, &d);
	d.flags = flags;
	d.exponent = exp;
	put_desc(im, i, &d);
}

/* ---- the mutations; @arg is each one's parameter ---------------------- */

/* S1, S21: cut the file to @len bytes, or by -@len when negative. */
static void truncate_to(struct image *im, long len)
{
	im->len = len < 0 ? im->len - (size_t)-len : (size_t)len;
}

/* S2: no descriptors, and the file ends inside the id. */
static void id_short(struct image *im, long arg)
{
	(void)arg;
	im->h.num_desc = 0;
	im->len = HDR_SIZE + im->h.name_size - 8;
}

static void id_short_desc(struct image *im, long arg)
{
	(void)arg;
	im->len = HDR_SIZE + 8;
}

static void id_prefix(struct image *im, long arg)
{
	(void)arg;
	memcpy(im->buf + HDR_SIZE, "xyz", 3);
}

static void id_unterminated(struct image *im, long arg)
{
	(void)arg;
	for (uint32_t i = 0; i < im->h.name_size; i++)
		im->buf[HDR_SIZE + i] = "kvm"[i % 3];
}

/* A valid id appended at the end and pointed at by id_offset, while the
 * place the selftest reads (right after the header) holds what @how
 * leaves there: a wrong prefix (0) or no NUL (1). */
static void id_moved(struct image *im, long how)
{
	size_t at = (im->len + 7) & ~(size_t)7;

	memset(im->buf + im->len, 0, at - im->len);
	memcpy(im->buf + at, im->buf + HDR_SIZE, im->h.name_size);
	im->h.id_offset = (uint32_t)at;
	im->len = at + im->h.name_size;
	if (how)
		id_unterminated(im, 0);
	else
		id_prefix(im, 0);
}

/* S5, S6, S8: one header field set to @v. */
static void desc_offset(struct image *im, long v)
{
	im->h.desc_offset = (uint32_t)v;
}

static void data_offset(struct image *im, long v)
{
	im->h.data_offset = (uint32_t)v;
}

static void num_desc_to(struct image *im, long v)
{
	im->h.num_desc = (uint32_t)v;
}

/* S7: the data block starts inside the descriptor block. */
static void data_in_descs(struct image *im, long arg)
{
	(void)arg;
	im->h.data_offset = im->h.desc_offset + 8;
}

/* S19: the data block starts before the descriptors and runs into them. */
static void data_into_descs(struct image *im, long arg)
{
	(void)arg;
	im->h.data_offset = im->h.desc_offset - 8;
}

/* S8: the file ends inside the last descriptor. */
static void descs_short(struct image *im, long arg)
{
	(void)arg;
	im->len = (size_t)(desc_at(im, im->h.num_desc) - im->buf) - 8;
}

static void name_unterminated(struct image *im, long arg)
{
	memset(desc_at(im, pick(im, -1)) + DESC_SIZE, 'a' + (int)arg,
	       im->h.name_size);
}

/* S10-S12: a type, unit or base field (@arg: shift << 8 | value). */
static void flag_to(struct image *im, long arg)
{
	unsigned int shift = (unsigned int)arg >> 8;
	uint32_t i = pick(im, -1);
	struct kvmstats_abi_desc d;

	get_desc(im, i, &d);
	d.flags = (d.flags & ~(0xfu << shift)) | (uint32_t)(arg & 0xf) << shift;
	put_desc(im, i, &d);
}

#define TYPE(v) (0 << 8 | (v))
#define UNIT(v) (4 << 8 | (v))
#define BASE(v) (8 << 8 | (v))

/* S13: a cumulative scalar of unit @unit with exponent -1. */
static void exponent_neg(struct image *im, long unit)
{
	set_stat(im, pick(im, -1),
		 KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, unit, 0), -1);
}

/* S14: a cumulative scalar in seconds with exponent 3. */
static void seconds_exponent_pos(struct image *im, long arg)
{
	(void)arg;
	set_stat(im, pick(im, -1), F(CUMULATIVE, SECONDS), 3);
}

/* S15: an instant boolean (value 0) with exponent 1. */
static void bool_exponent(struct image *im, long arg)
{
	uint32_t i = pick(im, -1);
	struct kvmstats_abi_desc d;

	(void)arg;
	set_stat(im, i, F(INSTANT, BOOLEAN), 1);
	get_desc(im, i, &d);
	memset(im->buf + im->h.data_offset + d.offset, 0, 8);
}

/* S16/S22: size 0 on a scalar (@hist 0) or on a histogram. */
static void size_zero(struct image *im, long hist)
{
	uint32_t i = hist ? pick(im, KVMSTATS_TYPE_LOG_HIST) : pick(im, -1);
	struct kvmstats_abi_desc d;

	get_desc(im, i, &d);
	d.size = 0;
	put_desc(im, i, &d);
}

/* S17: a linear histogram without a bucket size. */
static void linear_no_bucket(struct image *im, long arg)
{
	uint32_t i = pick(im, KVMSTATS_TYPE_LOG_HIST);
	struct kvmstats_abi_desc d;

	(void)arg;
	get_desc(im, i, &d);
	d.flags = (d.flags & ~0xfu) | KVMSTATS_TYPE_LINEAR_HIST;
	d.bucket_size = 0;
	put_desc(im, i, &d);
}

/* S18: a bucket size on a stat of @type, which is not a linear histogram. */
static void bucket_on(struct image *im, long type)
{
	uint32_t i = pick(im, (int)type);
	struct kvmstats_abi_desc d;

	get_desc(im, i, &d);
	d.bucket_size = 1;
	put_desc(im, i, &d);
}

/* S20: every stat on the first 8 bytes: the data block is too small. */
static void data_too_small(struct image *im, long arg)
{
	(void)arg;
	for (uint32_t i = 0; i < im->h.num_desc; i++) {
		struct kvmstats_abi_desc d;

		get_desc(im, i, &d);
		d.offset = 0;
		d.size = 1;
		put_desc(im, i, &d);
	}
}

/* S23: one stat's values past the end of the file. */
static void stat_past_eof(struct image *im, long arg)
{
	uint32_t i = pick(im, -1);
	struct kvmstats_abi_desc d;

	(void)arg;
	get_desc(im, i, &d);
	d.offset = (uint32_t)(im->len - im->h.data_offset + 64);
	put_desc(im, i, &d);
}

/* Accepted: no descriptors, both empty blocks pointing past the end. */
static void empty_far(struct image *im, long arg)
{
	(void)arg;
	im->h.num_desc = 0;
	im->h.desc_offset = 0x7ffff000;
	im->h.data_offset = 0x7ffff000;
	im->len = HDR_SIZE + im->h.name_size;
}

static void unchanged(struct image *im, long arg)
{
	(void)im;
	(void)arg;
}

static const struct mutation {
	const char *assertion;	/* S1..S23, or P for images that pass */
	const char *name;
	const char *rule;	/* "-": must pass */
	void (*fn)(struct image *im, long arg);
	long arg;
} mutations[] = {
	{ "S1", "empty-file", "header.size", truncate_to, 0 },
	{ "S1", "short-header", "header.size", truncate_to, HDR_SIZE - 1 },
	{ "S2", "id-short", "layout.bounds", id_short, 0 },
	{ "S2", "id-short-descs", "header.num_desc", id_short_desc, 0 },
	{ "S3", "id-prefix", "id.prefix", id_prefix, 0 },
	{ "S3", "id-moved-prefix", "id.offset", id_moved, 0 },
	{ "S4", "id-unterminated", "id.terminated", id_unterminated, 0 },
	{ "S4", "id-moved-unterminated", "id.offset", id_moved, 1 },
	{ "S5", "desc-offset-0", "layout.overlap", desc_offset, 0 },
	{ "S5", "desc-offset-16", "layout.overlap", desc_offset, 16 },
	{ "S6", "data-offset-0", "layout.overlap", data_offset, 0 },
	{ "S6", "data-offset-16", "layout.overlap", data_offset, 16 },
	{ "S7", "data-in-descs", "layout.overlap", data_in_descs, 0 },
	{ "S8", "descs-short", "header.num_desc", descs_short, 0 },
	{ "S8", "num-desc-huge", "header.num_desc", num_desc_to, 0xffffffffL },
	{ "S9", "name-unterminated", "desc.name.terminated", name_unterminated, 0 },
	{ "S10", "type-5", "desc.type.known", flag_to, TYPE(5) },
	{ "S10", "type-15", "desc.type.known", flag_to, TYPE(15) },
	{ "S11", "unit-5", "desc.unit.known", flag_to, UNIT(5) },
	{ "S11", "unit-15", "desc.unit.known", flag_to, UNIT(15) },
	{ "S12", "base-2", "desc.base.known", flag_to, BASE(2) },
	{ "S12", "base-15", "desc.base.known", flag_to, BASE(15) },
	{ "S13", "none-exponent-neg", "desc.exponent", exponent_neg,
	  KVMSTATS_UNIT_NONE },
	{ "S13", "bytes-exponent-neg", "desc.exponent", exponent_neg,
	  KVMSTATS_UNIT_BYTES },
	{ "S13", "cycles-exponent-neg", "desc.exponent", exponent_neg,
	  KVMSTATS_UNIT_CYCLES },
	{ "S14", "seconds-exponent-pos", "desc.exponent", seconds_exponent_pos, 0 },
	{ "S15", "boolean-exponent", "desc.exponent", bool_exponent, 0 },
	{ "S16", "size-0", "desc.size", size_zero, 0 },
	{ "S17", "linear-bucket-0", "desc.bucket_size", linear_no_bucket, 0 },
	{ "S18", "cumulative-bucket", "desc.bucket_size", bucket_on,
	  KVMSTATS_TYPE_CUMULATIVE },
	{ "S18", "log-hist-bucket", "desc.bucket_size", bucket_on,
	  KVMSTATS_TYPE_LOG_HIST },
	{ "S19", "data-into-descs", "layout.overlap", data_into_descs, 0 },
	{ "S20", "data-too-small", "data.size", data_too_small, 0 },
	{ "S21", "data-short", "data.size", truncate_to, -8 },
	{ "S22", "hist-size-0", "desc.size", size_zero, 1 },
	{ "S23", "stat-past-eof", "data.size", stat_past_eof, 0 },
	{ "P", "base", "-", unchanged, 0 },
	{ "P", "no-descs-offsets-past-eof", "-", empty_far, 0 },
};

static const struct kvmstats_encode_desc synthetic[] = {
	{ "exits", F(CUMULATIVE, NONE), 0, 1, 0 },
	{ "halt_wait_ns", F(CUMULATIVE, SECONDS), -9, 1, 0 },
	{ "guest_mode", F(INSTANT, BOOLEAN), 0, 1, 0 },
	{ "max_bytes", F(PEAK, BYTES), 0, 1, 0 },
	{ "tsc_cycles", F(CUMULATIVE, CYCLES), 0, 1, 0 },
	{ "halt_wait_hist", F(LOG_HIST, SECONDS), -9, 8, 0 },
	{ "lin_hist", F(LINEAR_HIST, NONE), 0, 4, 10 },
};

static int load_base(const char *path, struct image *base)
{
	FILE *f;
	long n;

	if (!path) {
		base->buf = kvmstats_image__encode("kvm-4242/vcpu-0", synthetic,
						   sizeof(synthetic) / sizeof(synthetic[0]),
						   NULL, &base->len, NULL);
		return base->buf ? 0 : -1;
	}
	f = fopen(path, "rb");
	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto err;
	base->len = (size_t)n;
	base->buf = malloc(base->len + 1);
	if (!base->buf || fread(base->buf, 1, base->len, f) != base->len)
		goto err;
	fclose(f);
	return 0;
err:
	fprintf(stderr, "mkselftest: %s: %s\n", path, strerror(errno ? errno : EIO));
	if (f)
		fclose(f);
	return -1;
}

static int write_one(const char *dir, const struct mutation *m,
		     const struct image *base)
{
	struct image im = { malloc(base->len + SLACK), base->len, base->h };
	char path[512];
	FILE *f;
	int ret = -1;

	if (!im.buf)
		return -1;
	memcpy(im.buf, base->buf, base->len);
	m->fn(&im, m->arg);
	memcpy(im.buf, &im.h, HDR_SIZE);
	snprintf(path, sizeof(path), "%s/%s-%s.bin", dir, m->assertion, m->name);
	f = fopen(path, "wb");
	if (f && fwrite(im.buf, 1, im.len, f) == im.len && !fclose(f)) {
		printf("%s %s %s\n", m->assertion, path, m->rule);
		ret = 0;
	} else {
		fprintf(stderr, "mkselftest: %s: %s\n", path, strerror(errno));
	}
	free(im.buf);
	return ret;
}

int main(int argc, char **argv)
{
	struct image base = { 0 };

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: mkselftest DIR [BASE-IMAGE]\n");
		return 2;
	}
	if (load_base(argc == 3 ? argv[2] : NULL, &base))
		return 1;
	if (base.len >= HDR_SIZE)
		memcpy(&base.h, base.buf, HDR_SIZE);
	/* The mutations assume the kernel's layout: header, id, descriptors,
	 * data, with a name_size that leaves room to append an id. */
	if (base.len < HDR_SIZE || base.h.id_offset != HDR_SIZE || !base.h.num_desc ||
	    base.h.name_size > SLACK / 2 ||
	    base.h.desc_offset != HDR_SIZE + base.h.name_size ||
	    (uint64_t)base.h.desc_offset + base.h.num_desc * (DESC_SIZE + base.h.name_size) >
		    base.len) {
		fprintf(stderr, "mkselftest: the base is not a kernel-like image\n");
		return 1;
	}
	for (size_t i = 0; i < sizeof(mutations) / sizeof(mutations[0]); i++)
		if (write_one(argv[1], &mutations[i], &base))
			return 1;
	free(base.buf);
	return 0;
}
