// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Parser, validator and encoder: the kernel's own x86 layouts (fixtures
 * saved from this kernel's stats fds) and every rule broken once.
 */
#include "unit.h"

#define CUM KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_NONE, 0)
#define NS KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_SECONDS, 0)
#define LOGH KVMSTATS_FLAGS(KVMSTATS_TYPE_LOG_HIST, KVMSTATS_UNIT_SECONDS, 0)
#define LINH KVMSTATS_FLAGS(KVMSTATS_TYPE_LINEAR_HIST, KVMSTATS_UNIT_NONE, 0)
#define BOOL KVMSTATS_FLAGS(KVMSTATS_TYPE_INSTANT, KVMSTATS_UNIT_BOOLEAN, 0)
#define PEAK KVMSTATS_FLAGS(KVMSTATS_TYPE_PEAK, KVMSTATS_UNIT_NONE, 0)

/* A small image like a vCPU's: scalars, a boolean, a peak, histograms. */
static const struct kvmstats_encode_desc small[] = {
	{ "exits", CUM, 0, 1, 0 },
	{ "halt_wait_ns", NS, -9, 1, 0 },
	{ "guest_mode", BOOL, 0, 1, 0 },
	{ "max_rmap", PEAK, 0, 1, 0 },
	{ "halt_wait_hist", LOGH, -9, 8, 0 },
	{ "lin_hist", LINH, 0, 4, 10 },
};
static const uint64_t small_values[] = {
	1000, 1250000000ull, 1, 42, 0, 1, 2, 4, 8, 0, 0, 1, 3, 5, 7, 9,
};

static unsigned char *small_image(size_t *len)
{
	unsigned char *img = kvmstats_image__encode("kvm-1/vcpu-0", small,
						    6, small_values, len, NULL);

	assert_non_null(img);
	return img;
}

static void put32(unsigned char *img, size_t off, uint32_t v)
{
	memcpy(img + off, &v, 4);
}

static uint32_t get32(const unsigned char *img, size_t off)
{
	uint32_t v;

	memcpy(&v, img + off, 4);
	return v;
}

/* Byte offset of descriptor @i's field at @field. */
static size_t desc_off(const unsigned char *img, uint32_t i, size_t field)
{
	return get32(img, 16) + i * (16 + get32(img, 4)) + field;
}

static int validate_errors(const unsigned char *img, size_t len,
			   const char *rule)
{
	struct kvmstats_report *r = kvmstats_report__new();
	int n = kvmstats_image__validate(img, len, r);
	bool failed = rule ? kvmstats_report__failed(r, rule) : true;

	if (rule && !failed) {
		for (size_t i = 0; i < kvmstats_report__count(r); i++)
			print_message("finding: %s %s\n",
				      kvmstats_report__finding(r, i)->rule,
				      kvmstats_report__finding(r, i)->msg);
	}
	kvmstats_report__free(r);
	assert_true(failed);
	return n;
}

/* Parsing must refuse the image too, naming the first broken rule. */
static void assert_rejected(const unsigned char *img, size_t len,
			    const char *rule)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	char why[256] = "";
	struct kvmstats_schema *s;

	assert_true(validate_errors(img, len, rule) > 0);
	s = kvmstats_schema__parse(ctx, img, len, why, sizeof(why));
	assert_null(s);
	assert_int_equal(errno, EBADMSG);
	assert_true(strchr(why, ':') != NULL);
	kvmstats_ctx__free(ctx);
}

static void test_kernel_vm_fixture(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	unsigned char *img;
	size_t len;
	struct kvmstats_schema *s;
	const struct kvmstats_stat *st;

	(void)state;
	img = read_fixture("x86-vm.bin", &len);
	assert_int_equal(validate_errors(img, len, NULL), 0);
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	assert_int_equal(kvmstats_schema__num_stats(s), 15);
	st = kvmstats_schema__find(s, "pages_4k");
	assert_non_null(st);
	assert_int_equal(kvmstats_stat__type(st), KVMSTATS_TYPE_INSTANT);
	st = kvmstats_schema__find(s, "max_mmu_rmap_size");
	assert_int_equal(kvmstats_stat__type(st), KVMSTATS_TYPE_PEAK);
	assert_null(kvmstats_schema__find(s, "no_such_stat"));
	kvmstats_schema__put(s);
	kvmstats_ctx__free(ctx);
	free(img);
}

static void test_kernel_vcpu_fixture(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	unsigned char *img;
	size_t len, n = 0;
	struct kvmstats_schema *s;
	const struct kvmstats_stat *st;

	(void)state;
	img = read_fixture("x86-vcpu.bin", &len);
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	assert_int_equal(kvmstats_schema__num_stats(s), 45);
	st = kvmstats_schema__find(s, "halt_wait_ns");
	assert_int_equal(kvmstats_stat__unit(st), KVMSTATS_UNIT_SECONDS);
	assert_int_equal(kvmstats_stat__exponent(st), -9);
	assert_int_equal(kvmstats_stat__base(st), KVMSTATS_BASE_POW10);
	st = kvmstats_schema__find(s, "halt_wait_hist");
	assert_int_equal(kvmstats_stat__type(st), KVMSTATS_TYPE_LOG_HIST);
	assert_int_equal(kvmstats_stat__size(st), 32);
	st = kvmstats_schema__find(s, "guest_mode");
	assert_int_equal(kvmstats_stat__unit(st), KVMSTATS_UNIT_BOOLEAN);
	kvmstats_schema__for_each(st, s)
		n++;
	assert_int_equal(n, 45);
	/* data block: 42 scalars and three 32-bucket histograms */
	assert_int_equal(kvmstats_schema__data_size(s), (42 + 3 * 32) * 8);
	kvmstats_schema__put(s);
	kvmstats_ctx__free(ctx);
	free(img);
}

static void test_encode_roundtrip(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_reader *r;
	struct kvmstats_sample *smp;
	const struct kvmstats_stat *st;
	unsigned char *img;
	size_t len;

	(void)state;
	img = small_image(&len);
	assert_int_equal(validate_errors(img, len, NULL), 0);
	r = kvmstats_reader__open_mem(ctx, img, len, NULL);
	assert_non_null(r);
	assert_string_equal(kvmstats_reader__id(r), "kvm-1/vcpu-0");
	smp = kvmstats_sample__new(kvmstats_reader__schema(r));
	assert_int_equal(kvmstats_reader__read(r, smp), 0);
	assert_memory_equal(smp->data, small_values, sizeof(small_values));
	st = kvmstats_schema__find(kvmstats_reader__schema(r), "lin_hist");
	assert_int_equal(kvmstats_stat__bucket_size(st), 10);
	assert_int_equal(kvmstats_stat__values(st, smp->data)[3], 9);
	assert_string_equal(kvmstats_reader__source(r), "file");
	kvmstats_sample__free(smp);
	kvmstats_reader__close(r);
	kvmstats_ctx__free(ctx);
	free(img);
}

/* Like kvm_stats_read(): any offset, any length, short at EOF. */
static void test_image_pread(void **state)
{
	unsigned char *img, buf[4096];
	size_t len;

	(void)state;
	img = small_image(&len);
	for (size_t pos = 0; pos <= len + 8; pos += 7) {
		for (size_t cnt = 1; cnt < 200; cnt += 13) {
			ssize_t n = kvmstats_image__pread(img, len, buf, cnt, (off_t)pos);
			size_t want = pos >= len ? 0 : (len - pos < cnt ? len - pos : cnt);

			assert_int_equal(n, want);
			if (want)
				assert_memory_equal(buf, img + pos, want);
		}
	}
	assert_int_equal(kvmstats_image__pread(img, len, buf, 8, -1), -EINVAL);
	free(img);
}

static void test_schema_shared(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	unsigned char *a, *b;
	size_t alen, blen;
	struct kvmstats_reader *ra, *rb;

	(void)state;
	a = kvmstats_image__encode("kvm-1/vcpu-0", small, 6, small_values, &alen, NULL);
	b = kvmstats_image__encode("kvm-2/vcpu-7", small, 6, NULL, &blen, NULL);
	ra = kvmstats_reader__open_mem(ctx, a, alen, NULL);
	rb = kvmstats_reader__open_mem(ctx, b, blen, NULL);
	assert_non_null(ra);
	assert_non_null(rb);
	/* Same descriptors, different ids: one schema. */
	assert_ptr_equal(kvmstats_reader__schema(ra), kvmstats_reader__schema(rb));
	assert_int_equal(kvmstats_ctx__schema_count(ctx), 1);
	assert_string_equal(kvmstats_reader__id(rb), "kvm-2/vcpu-7");
	kvmstats_reader__close(ra);
	assert_int_equal(kvmstats_ctx__schema_count(ctx), 1);
	kvmstats_reader__close(rb);
	assert_int_equal(kvmstats_ctx__schema_count(ctx), 0);
	kvmstats_ctx__free(ctx);
	free(a);
	free(b);
}

static void test_rule_header_flags(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	put32(img, 0, 0x80);
	assert_rejected(img, len, "header.flags");
	free(img);
}

static void test_rule_duplicate_names(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	strcpy((char *)img + desc_off(img, 3, 16), "exits");
	assert_rejected(img, len, "desc.name.unique");
	free(img);
}

static void test_rule_zero_size(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);
	uint16_t zero = 0;

	(void)state;
	memcpy(img + desc_off(img, 0, 6), &zero, 2);
	assert_rejected(img, len, "desc.size");
	free(img);
}

static void test_rule_unterminated_name(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	memset(img + desc_off(img, 2, 16), 'a', get32(img, 4));
	assert_rejected(img, len, "desc.name.terminated");
	free(img);
}

static void test_rule_unterminated_id(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	memset(img + get32(img, 12), 'k', get32(img, 4));
	assert_rejected(img, len, "id.terminated");
	free(img);
}

static void test_rule_id_prefix(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	memcpy(img + get32(img, 12), "xen", 3);
	assert_rejected(img, len, "id.prefix");
	free(img);
}

static void test_rule_truncated(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	assert_rejected(img, len - 8, "data.size");
	assert_rejected(img, 20, "header.size");
	assert_rejected(img, get32(img, 16) + 10, "header.num_desc");
	free(img);
}

static void test_rule_huge_fields(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	put32(img, 8, 0x7fffffff);
	assert_rejected(img, len, "header.num_desc");
	free(img);
	img = small_image(&len);
	put32(img, 4, 0xfffffff0);
	assert_rejected(img, len, "header.name_size");
	free(img);
	img = small_image(&len);
	put32(img, desc_off(img, 5, 8), 0xfffffff0);
	assert_rejected(img, len, "desc.offset.bounds");
	free(img);
}

static void test_rule_overlapping_blocks(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	/* The data block starts inside the descriptors. */
	put32(img, 20, get32(img, 16) + 64);
	assert_rejected(img, len, "layout.overlap");
	free(img);
	img = small_image(&len);
	/* The id inside the header. */
	put32(img, 12, 8);
	assert_rejected(img, len, "layout.overlap");
	free(img);
}

static void test_rule_overlapping_stats(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	/* guest_mode moved onto halt_wait_ns. */
	put32(img, desc_off(img, 2, 8), 8);
	assert_rejected(img, len, "desc.overlap");
	free(img);
}

static void test_rule_alignment(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	put32(img, desc_off(img, 5, 8), get32(img, desc_off(img, 5, 8)) + 4);
	assert_rejected(img, len, "desc.offset.aligned");
	free(img);
}

static void test_rule_bucket_size(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	put32(img, desc_off(img, 5, 12), 0);
	assert_rejected(img, len, "desc.bucket_size");
	free(img);
	img = small_image(&len);
	put32(img, desc_off(img, 4, 12), 16);
	assert_rejected(img, len, "desc.bucket_size");
	free(img);
}

static void test_rule_exponent_and_combination(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);
	int16_t e = 3;

	(void)state;
	memcpy(img + desc_off(img, 1, 4), &e, 2);	/* seconds with e > 0 */
	assert_rejected(img, len, "desc.exponent");
	free(img);
	img = small_image(&len);
	put32(img, desc_off(img, 2, 0),
	      KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_BOOLEAN, 0));
	assert_rejected(img, len, "desc.unit.combination");
	free(img);
}

static void test_rule_boolean_value(void **state)
{
	size_t len;
	unsigned char *img = small_image(&len);
	uint64_t two = 2;

	(void)state;
	memcpy(img + get32(img, 20) + 16, &two, 8);
	assert_rejected(img, len, "data.boolean");
	free(img);
}

/* A newer kernel's type or unit is kept raw with a warning. */
static void test_unknown_type_kept(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_report *r = kvmstats_report__new();
	struct kvmstats_schema *s;
	const struct kvmstats_stat *st;
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	put32(img, desc_off(img, 0, 0), KVMSTATS_FLAGS(9, 7, 0));
	assert_int_equal(kvmstats_image__validate(img, len, r), 0);
	assert_true(kvmstats_report__count(r) >= 2);
	assert_int_equal(kvmstats_report__finding(r, 0)->severity,
			 KVMSTATS_SEV_WARNING);
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	st = kvmstats_schema__find(s, "exits");
	assert_false(kvmstats_stat__known(st));
	assert_int_equal(kvmstats_stat__type(st), 9);
	assert_string_equal(kvmstats_type_str(9), "unknown");
	kvmstats_schema__put(s);
	kvmstats_report__free(r);
	kvmstats_ctx__free(ctx);
	free(img);
}

/* check's reading: what a newer kernel may send fails a strict report,
 * while the parser still keeps it raw. */
static void test_strict_report(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_report *r = kvmstats_report__new();
	struct kvmstats_schema *s;
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	assert_int_equal(kvmstats_report__set_flags(r, 1u << 7), -EINVAL);
	assert_int_equal(kvmstats_report__set_flags(r, KVMSTATS_REPORT_STRICT), 0);
	put32(img, desc_off(img, 0, 0), KVMSTATS_FLAGS(5, 15, 2));
	assert_int_equal(kvmstats_image__validate(img, len, r), 3);
	assert_true(kvmstats_report__failed(r, "desc.type.known"));
	assert_true(kvmstats_report__failed(r, "desc.unit.known"));
	assert_true(kvmstats_report__failed(r, "desc.base.known"));
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	kvmstats_schema__put(s);
	kvmstats_report__free(r);
	kvmstats_ctx__free(ctx);
	free(img);
}

/* The id where the selftest does not read it: "xyz" right after the
 * header, a valid id appended at the end. */
static void test_id_offset(void **state)
{
	struct kvmstats_report *strict = kvmstats_report__new();
	struct kvmstats_report *lax = kvmstats_report__new();
	size_t len, at;
	unsigned char *img = small_image(&len);

	(void)state;
	img = realloc(img, len + 64);
	assert_non_null(img);
	at = len;
	memcpy(img + at, img + 24, 48);
	put32(img, 12, (uint32_t)at);
	memcpy(img + 24, "xyz", 3);
	kvmstats_report__set_flags(strict, KVMSTATS_REPORT_STRICT);
	assert_int_equal(kvmstats_image__validate(img, at + 48, strict), 1);
	assert_true(kvmstats_report__failed(strict, "id.offset"));
	/* The 48 bytes it left behind are reported, not failed. */
	assert_int_equal(kvmstats_image__validate(img, at + 48, lax), 0);
	assert_int_equal(kvmstats_report__count(lax), 2);
	assert_string_equal(kvmstats_report__finding(lax, 0)->rule, "layout.gaps");
	assert_string_equal(kvmstats_report__finding(lax, 1)->rule, "id.offset");
	kvmstats_report__free(strict);
	kvmstats_report__free(lax);
	free(img);
}

/* No descriptors: both blocks are empty and may point past the end, as
 * the selftest accepts. */
static void test_no_descriptors(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_reader *rd;
	struct kvmstats_sample *smp;
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	put32(img, 8, 0);
	put32(img, 16, 0x7ffff000);
	put32(img, 20, 0x7ffff000);
	assert_int_equal(validate_errors(img, 24 + 48, NULL), 0);
	rd = kvmstats_reader__open_mem(ctx, img, 24 + 48, NULL);
	assert_non_null(rd);
	assert_int_equal(kvmstats_schema__num_stats(kvmstats_reader__schema(rd)), 0);
	smp = kvmstats_sample__new(kvmstats_reader__schema(rd));
	assert_non_null(smp);
	assert_int_equal(kvmstats_reader__read(rd, smp), 0);
	kvmstats_sample__free(smp);
	kvmstats_reader__close(rd);
	/* Still an error when the file cannot even hold the id. */
	assert_rejected(img, 24 + 40, "layout.bounds");
	kvmstats_ctx__free(ctx);
	free(img);
}

/* Findings are capped, yet every failed rule still counts as failed. */
static void test_rules_past_the_cap(void **state)
{
	enum { N = 400 };
	struct kvmstats_encode_desc d[N];
	char names[N][16];
	struct kvmstats_report *r = kvmstats_report__new();
	unsigned char *img;
	size_t len;

	(void)state;
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "s%d", i);
		d[i] = (struct kvmstats_encode_desc){ names[i], CUM, 0, 1, 0 };
	}
	img = kvmstats_image__encode("kvm-1", d, N, NULL, &len, NULL);
	assert_non_null(img);
	for (int i = 0; i < N - 1; i++)		/* N - 1 desc.bucket_size */
		put32(img, desc_off(img, i, 12), 8);
	put32(img, desc_off(img, N - 1, 8), 4);	/* then desc.offset.aligned */
	assert_true(kvmstats_image__validate(img, len, r) >= N);
	assert_true(kvmstats_report__count(r) < N);
	assert_true(kvmstats_report__failed(r, "desc.bucket_size"));
	assert_true(kvmstats_report__failed(r, "desc.offset.aligned"));
	assert_false(kvmstats_report__failed(r, "desc.exponent"));
	kvmstats_report__free(r);
	free(img);
}

static void test_bad_opts(void **state)
{
	struct {
		struct kvmstats_reader_opts o;
		char future[8];
	} big = { .o = { .sz = sizeof(big) }, .future = { 1 } };
	size_t len;
	unsigned char *img = small_image(&len);

	(void)state;
	assert_null(kvmstats_reader__open_mem(NULL, img, len, &big.o));
	assert_int_equal(errno, EINVAL);
	big.future[0] = 0;
	struct kvmstats_reader *r = kvmstats_reader__open_mem(NULL, img, len, &big.o);

	assert_non_null(r);
	kvmstats_reader__close(r);
	free(img);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kernel_vm_fixture),
		cmocka_unit_test(test_kernel_vcpu_fixture),
		cmocka_unit_test(test_encode_roundtrip),
		cmocka_unit_test(test_image_pread),
		cmocka_unit_test(test_schema_shared),
		cmocka_unit_test(test_rule_header_flags),
		cmocka_unit_test(test_rule_duplicate_names),
		cmocka_unit_test(test_rule_zero_size),
		cmocka_unit_test(test_rule_unterminated_name),
		cmocka_unit_test(test_rule_unterminated_id),
		cmocka_unit_test(test_rule_id_prefix),
		cmocka_unit_test(test_rule_truncated),
		cmocka_unit_test(test_rule_huge_fields),
		cmocka_unit_test(test_rule_overlapping_blocks),
		cmocka_unit_test(test_rule_overlapping_stats),
		cmocka_unit_test(test_rule_alignment),
		cmocka_unit_test(test_rule_bucket_size),
		cmocka_unit_test(test_rule_exponent_and_combination),
		cmocka_unit_test(test_rule_boolean_value),
		cmocka_unit_test(test_unknown_type_kept),
		cmocka_unit_test(test_strict_report),
		cmocka_unit_test(test_id_offset),
		cmocka_unit_test(test_no_descriptors),
		cmocka_unit_test(test_rules_past_the_cap),
		cmocka_unit_test(test_bad_opts),
	};

	return cmocka_run_group_tests_name("image", tests, NULL, NULL);
}
