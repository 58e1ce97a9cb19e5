// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * mkbad DIR: write stats images that each break one rule (and one valid
 * image of a future kernel), and print a manifest "FILE RULE" per image
 * ("-" for images that must be accepted). The CLI tests feed them to
 * `kvmstats check --file` and `kvmstats dump --file`; the fuzzer uses them
 * as seeds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmstats.h"

#define F(t, u) KVMSTATS_FLAGS(KVMSTATS_TYPE_##t, KVMSTATS_UNIT_##u, 0)

static const struct kvmstats_encode_desc descs[] = {
	{ "exits", F(CUMULATIVE, NONE), 0, 1, 0 },
	{ "halt_wait_ns", F(CUMULATIVE, SECONDS), -9, 1, 0 },
	{ "guest_mode", F(INSTANT, BOOLEAN), 0, 1, 0 },
	{ "halt_wait_hist", F(LOG_HIST, SECONDS), -9, 8, 0 },
	{ "lin_hist", F(LINEAR_HIST, NONE), 0, 4, 10 },
};
#define NDESC (sizeof(descs) / sizeof(descs[0]))

struct image {
	unsigned char *buf;
	size_t len;
};

static uint32_t get32(const struct image *im, size_t off)
{
	uint32_t v;

	memcpy(&v, im->buf + off, 4);
	return v;
}

static void put32(struct image *im, size_t off, uint32_t v)
{
	memcpy(im->buf + off, &v, 4);
}

static void put16(struct image *im, size_t off, uint16_t v)
{
	memcpy(im->buf + off, &v, 2);
}

/* Offset of descriptor @i's field at byte @field. */
static size_t desc(const struct image *im, uint32_t i, size_t field)
{
	return get32(im, 16) + i * (16 + get32(im, 4)) + field;
}

static void header_flags(struct image *im) { put32(im, 0, 1u << 31); }
static void dup_names(struct image *im) { strcpy((char *)im->buf + desc(im, 2, 16), "exits"); }
static void zero_size(struct image *im) { put16(im, desc(im, 0, 6), 0); }
static void empty_name(struct image *im) { im->buf[desc(im, 1, 16)] = 0; }
static void unterminated_name(struct image *im) { memset(im->buf + desc(im, 1, 16), 'x', get32(im, 4)); }
static void unterminated_id(struct image *im) { memset(im->buf + get32(im, 12), 'k', get32(im, 4)); }
static void id_prefix(struct image *im) { memcpy(im->buf + get32(im, 12), "xyz", 3); }
static void truncated_data(struct image *im) { im->len -= 12; }
static void truncated_header(struct image *im) { im->len = 17; }
static void truncated_desc(struct image *im) { im->len = desc(im, 3, 4); }
static void empty_file(struct image *im) { im->len = 0; }
static void huge_num_desc(struct image *im) { put32(im, 8, 0xffffffffu); }
static void huge_name_size(struct image *im) { put32(im, 4, 0x7ffffff8u); }
static void huge_size(struct image *im) { put16(im, desc(im, 4, 6), 0xffff); }
static void offset_outside(struct image *im) { put32(im, desc(im, 1, 8), 0xfffffff0u); }
static void huge_data_offset(struct image *im) { put32(im, 20, 0xfffffff8u); }
static void overlap_blocks(struct image *im) { put32(im, 20, get32(im, 16) + 8); }
static void overlap_stats(struct image *im) { put32(im, desc(im, 2, 8), 8); }
static void misaligned_offset(struct image *im) { put32(im, desc(im, 1, 8), 12); }
static void misaligned_block(struct image *im) { put32(im, 16, get32(im, 16) + 4); }
static void bucket_nonlinear(struct image *im) { put32(im, desc(im, 3, 12), 4); }
static void bucket_zero(struct image *im) { put32(im, desc(im, 4, 12), 0); }
static void exponent_sign(struct image *im) { put16(im, desc(im, 1, 4), 9); }
static void bool_cumulative(struct image *im) { put32(im, desc(im, 2, 0), F(CUMULATIVE, BOOLEAN)); }
static void bool_value(struct image *im) { im->buf[get32(im, 20) + 16] = 7; }
static void unknown_type(struct image *im) { put32(im, desc(im, 0, 0), KVMSTATS_FLAGS(11, 9, 0)); }

static const struct {
	const char *file, *rule;
	void (*mutate)(struct image *im);
} cases[] = {
	{ "header-flags", "header.flags", header_flags },
	{ "duplicate-names", "desc.name.unique", dup_names },
	{ "zero-size", "desc.size", zero_size },
	{ "empty-name", "desc.name.empty", empty_name },
	{ "unterminated-name", "desc.name.terminated", unterminated_name },
	{ "unterminated-id", "id.terminated", unterminated_id },
	{ "id-prefix", "id.prefix", id_prefix },
	{ "truncated-data", "data.size", truncated_data },
	{ "truncated-header", "header.size", truncated_header },
	{ "truncated-desc", "header.num_desc", truncated_desc },
	{ "empty-file", "header.size", empty_file },
	{ "huge-num-desc", "header.num_desc", huge_num_desc },
	{ "huge-name-size", "header.name_size", huge_name_size },
	{ "huge-size", "data.size", huge_size },
	{ "offset-outside", "desc.offset.bounds", offset_outside },
	{ "huge-data-offset", "data.size", huge_data_offset },
	{ "overlap-blocks", "layout.overlap", overlap_blocks },
	{ "overlap-stats", "desc.overlap", overlap_stats },
	{ "misaligned-offset", "desc.offset.aligned", misaligned_offset },
	{ "misaligned-block", "header.alignment", misaligned_block },
	{ "bucket-size-nonlinear", "desc.bucket_size", bucket_nonlinear },
	{ "bucket-size-zero", "desc.bucket_size", bucket_zero },
	{ "exponent-sign", "desc.exponent", exponent_sign },
	{ "boolean-cumulative", "desc.unit.combination", bool_cumulative },
	{ "boolean-value", "data.boolean", bool_value },
	{ "ok-unknown-type", "-", unknown_type },
	{ "ok-valid", "-", NULL },
};

int main(int argc, char **argv)
{
	static const uint64_t values[] = { 5, 100, 1, 0, 1, 2, 3, 0, 0, 0, 0,
					   1, 2, 3, 4 };

	if (argc != 2) {
		fprintf(stderr, "usage: mkbad DIR\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct image im;
		char path[512];
		FILE *f;

		im.buf = kvmstats_image__encode("kvm-4242/vcpu-0", descs, NDESC,
						values, &im.len, NULL);
		if (!im.buf)
			return 1;
		if (cases[i].mutate)
			cases[i].mutate(&im);
		snprintf(path, sizeof(path), "%s/%s.bin", argv[1], cases[i].file);
		f = fopen(path, "wb");
		if (!f || fwrite(im.buf, 1, im.len, f) != im.len || fclose(f)) {
			fprintf(stderr, "mkbad: %s: %s\n", path, strerror(errno));
			return 1;
		}
		printf("%s %s\n", path, cases[i].rule);
		free(im.buf);
	}
	return 0;
}
