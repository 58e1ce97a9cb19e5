// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The exporter's number and text formatting (cli/prom_text.c, with the
 * model and expositions it renders): exact decimal scaling, the canonical
 * le rendering OpenMetrics asks for, label escaping, and gzip made of
 * separately deflated parts.
 */
#include "unit.h"

#include <zlib.h>

/* The renderer is built into kvmstats; the test takes it the same way the
 * benchmark does. */
#include "../../cli/prom_model.c"
#include "../../cli/prom_text.c"
#include "../../cli/prom_expo.c"
#include "../../cli/sanitize.c"

static void check_scaled(uint64_t raw, int mode, int exp, const char *want)
{
	char buf[64];
	size_t n = put_scaled(buf, raw, (struct scale){ (uint8_t)mode, (int16_t)exp });

	buf[n] = 0;
	assert_string_equal(buf, want);
}

static void test_scaled(void **state)
{
	(void)state;
	check_scaled(0, SCALE_NONE, 0, "0");
	check_scaled(UINT64_MAX, SCALE_NONE, 0, "18446744073709551615");
	check_scaled(1023, SCALE_POW10, -9, "0.000001023");
	check_scaled(2000000000, SCALE_POW10, -9, "2");
	check_scaled(1500000000, SCALE_POW10, -9, "1.5");
	check_scaled(1000000001, SCALE_POW10, -9, "1.000000001");
	check_scaled(0, SCALE_POW10, -9, "0");
	check_scaled(3, SCALE_POW10, 3, "3000");
	check_scaled(5, SCALE_POW2, 12, "20480");
	/* Past 64 bits: a double with every digit it has. */
	check_scaled(UINT64_MAX, SCALE_POW10, 3, "1.8446744073709552e+22");
}

static void check_double(double v, const char *text, const char *om)
{
	char buf[64];

	fmt_double(v, buf, sizeof(buf), false);
	assert_string_equal(buf, text);
	fmt_double(v, buf, sizeof(buf), true);
	assert_string_equal(buf, om);
}

/* As Go's strconv.FormatFloat(v, 'g', -1, 64), which OpenMetrics names
 * canonical, with ".0" on integral values in OpenMetrics. */
static void test_le(void **state)
{
	(void)state;
	check_double(0, "0", "0.0");
	check_double(1e-9, "1e-09", "1e-09");
	check_double(1023 / 1e9, "1.023e-06", "1.023e-06");
	check_double(131071 / 1e9, "0.000131071", "0.000131071");
	check_double(1073741823 / 1e9, "1.073741823", "1.073741823");
	check_double(1, "1", "1.0");
	check_double(10, "10", "10.0");
	check_double(100000, "100000", "100000.0");
	check_double(1e6, "1e+06", "1e+06");
	check_double(0.1, "0.1", "0.1");
	check_double(1e-5, "1e-05", "1e-05");
	check_double(0.0001, "0.0001", "0.0001");
	check_double(INFINITY, "+Inf", "+Inf");
	/* Each bound is the double nearest the exact decimal. */
	for (int i = 1; i < 31; i++) {
		char buf[64];
		double le = scaled_double((1ull << i) - 1, (struct scale){ SCALE_POW10, -9 });

		fmt_double(le, buf, sizeof(buf), false);
		assert_true(strtod(buf, NULL) == le);
		assert_true(strlen(buf) <= 12);
	}
}

static void test_u64(void **state)
{
	static const uint64_t v[] = { 0, 9, 10, 99, 100, 12345, 1000000007,
				      UINT64_MAX };
	char buf[32], want[32];

	(void)state;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		buf[prom_u64(buf, v[i])] = 0;
		snprintf(want, sizeof(want), "%llu", (unsigned long long)v[i]);
		assert_string_equal(buf, want);
	}
}

static void test_escape(void **state)
{
	char out[64];

	(void)state;
	prom_escape_label("a\"b\\cd", out, sizeof(out));
	assert_string_equal(out, "a\\\"b\\\\cd");
	prom_escape_label("caf\xc3\xa9", out, sizeof(out));
	assert_string_equal(out, "caf\xc3\xa9");
	/* Controls and what is not UTF-8 (a stray byte, an overlong '/', a
	 * surrogate) are escaped as every sink escapes them, the backslash
	 * then escaped for the exposition: the label's value reads \x0a. */
	prom_escape_label("a\nb\x1b[31m", out, sizeof(out));
	assert_string_equal(out, "a\\\\x0ab\\\\x1b[31m");
	prom_escape_label("x\xffy", out, sizeof(out));
	assert_string_equal(out, "x\\\\xffy");
	prom_escape_label("\xc0\xaf", out, sizeof(out));
	assert_string_equal(out, "\\\\xc0\\\\xaf");
	prom_escape_label("\xed\xa0\x80", out, sizeof(out));
	assert_string_equal(out, "\\\\xed\\\\xa0\\\\x80");
	prom_escape_label("\xc2\x9b", out, sizeof(out));
	assert_string_equal(out, "\\\\u009b");
	/* A short buffer is never overrun. */
	prom_escape_label("\"\"\"\"\"\"\"\"\"\"", out, 8);
	assert_true(strlen(out) < 8);
}

/* Parts deflated apart (and in parallel) make one gzip stream that any
 * gzip reader inflates to the concatenation of the parts. */
static void test_gzip_parts(void **state)
{
	struct prom_pool *pool = prom_pool_new(3);
	struct prom_expo e = { 0 };
	struct iovec iov[PROM_MAX_PARTS + 4];
	unsigned char *gz, *back;
	size_t total = 0, n, want = 0;
	z_stream z = { 0 };

	(void)state;
	assert_non_null(pool);
	prom_expo_reset(&e, PROM_TEXT);
	e.nparts = 3;
	for (int i = 0; i < 100000; i++)
		prom_buf_printf(&e.part[0], "kvm_vcpu_exits_total{vcpu=\"%d\"} %d\n", i, i * 7);
	/* part 1 stays empty */
	for (int i = 0; i < 5000; i++)
		prom_buf_printf(&e.part[2], "x%d\n", rand());
	prom_buf_puts(prom_expo_tail(&e), "# EOF\n");
	for (size_t i = 0; i <= e.nparts; i++)
		want += e.part[i].len;
	assert_int_equal(prom_expo_gzip(pool, &e, &e, 1), 0);
	n = prom_expo_iov(&e, true, iov, PROM_MAX_PARTS + 4);
	gz = malloc(prom_expo_len(&e, true));
	for (size_t i = 0; i < n; i++) {
		memcpy(gz + total, iov[i].iov_base, iov[i].iov_len);
		total += iov[i].iov_len;
	}
	assert_int_equal(total, prom_expo_len(&e, true));
	back = malloc(want + 1);
	assert_int_equal(inflateInit2(&z, 16 + 15), Z_OK);
	z.next_in = gz;
	z.avail_in = (uInt)total;
	z.next_out = back;
	z.avail_out = (uInt)want + 1;
	/* Z_STREAM_END also checks the CRC-32 and length in the trailer. */
	assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
	assert_int_equal(z.total_out, want);
	assert_int_equal(z.avail_in, 0);
	inflateEnd(&z);
	total = 0;
	for (size_t i = 0; i <= e.nparts; i++) {
		assert_memory_equal(back + total, e.part[i].p, e.part[i].len);
		total += e.part[i].len;
	}
	free(gz);
	free(back);
	prom_expo_free(&e);
	prom_pool_free(pool);
}

static void test_family_names(void **state)
{
	static const struct kvmstats_encode_desc d[] = {
		{ "exits", KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_NONE, 0), 0, 1, 0 },
		{ "halt_wait_ns", KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_SECONDS, 0), -9, 1, 0 },
		{ "halt_wait_hist", KVMSTATS_FLAGS(KVMSTATS_TYPE_LOG_HIST, KVMSTATS_UNIT_SECONDS, 0), -9, 32, 0 },
		{ "pages_4k", KVMSTATS_FLAGS(KVMSTATS_TYPE_INSTANT, KVMSTATS_UNIT_NONE, 0), 0, 1, 0 },
		{ "mem_bytes", KVMSTATS_FLAGS(KVMSTATS_TYPE_PEAK, KVMSTATS_UNIT_BYTES, 1), 12, 1, 0 },
		{ "lat_cycles", KVMSTATS_FLAGS(KVMSTATS_TYPE_INSTANT, KVMSTATS_UNIT_CYCLES, 0), 0, 1, 0 },
		{ "blocking", KVMSTATS_FLAGS(KVMSTATS_TYPE_INSTANT, KVMSTATS_UNIT_BOOLEAN, 0), 0, 1, 0 },
	};
	static const char *const want[] = {
		"kvm_vcpu_exits", "kvm_vcpu_halt_wait_seconds",
		"kvm_vcpu_halt_wait_hist_seconds", "kvm_vcpu_pages_4k",
		"kvm_vcpu_mem_bytes", "kvm_vcpu_lat_cycles", "kvm_vcpu_blocking",
	};
	uint64_t values[38] = { 0 };
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_schema *s;
	size_t len;
	void *img = kvmstats_image__encode("kvm-1/vcpu-0", d, 7, values, &len, NULL);

	(void)state;
	assert_non_null(img);
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	for (uint32_t i = 0; i < 7; i++) {
		const char *unit;
		char name[160];

		assert_true(family_name(kvmstats_schema__stat(s, i), true, name,
					sizeof(name), &unit));
		assert_string_equal(name, want[i]);
	}
	/* halt_wait_hist's sum is halt_wait_ns, a true sum. */
	assert_non_null(hist_sum(s, kvmstats_schema__stat(s, 2)));
	kvmstats_schema__put(s);
	free(img);
	kvmstats_ctx__free(ctx);
}

/* A histogram whose sum stat the source did not give at this reading
 * (the missing bitmap): its buckets and count are there, its _sum is
 * not, and never the sum's zeroed word as "0". */
static void test_hist_sum_missing(void **state)
{
	static const struct kvmstats_encode_desc d[] = {
		{ "halt_wait_ns", KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_SECONDS, 0), -9, 1, 0 },
		{ "halt_wait_hist", KVMSTATS_FLAGS(KVMSTATS_TYPE_LOG_HIST, KVMSTATS_UNIT_SECONDS, 0), -9, 4, 0 },
	};
	static const char labels[] = "pid=\"1\",name=\"vm\",vm=\"0\",vcpu=\"0\"";
	uint64_t values[5] = { 0 }, data[5] = { 0, 1, 2, 3, 4 }, miss[1] = { 0 };
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct prom_model *m = prom_model_new(NULL);
	const struct kvmstats_stat *hist, *sum;
	struct kvmstats_schema *s;
	struct schema_map *map;
	struct prom_buf b = { 0 };
	struct family *f;
	size_t len;
	void *img = kvmstats_image__encode("kvm-1/vcpu-0", d, 2, values, &len, NULL);

	(void)state;
	assert_non_null(img);
	assert_non_null(m);
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	hist = kvmstats_schema__stat(s, 1);
	sum = hist_sum(s, hist);
	assert_non_null(sum);
	data[kvmstats_stat__offset(sum) / 8] = 0;	/* as a source leaves it */
	map = get_map(m, s, true);
	assert_non_null(map);
	assert_true(map->fam[1] >= 0 && map->sum_off[1] >= 0);
	/* One vCPU target, as add_target() makes it. */
	m->labels = strdup(labels);
	assert_non_null(m->labels);
	m->labels_len = m->labels_cap = sizeof(labels);
	m->max_labels = sizeof(labels) - 1;
	m->targets = calloc(1, sizeof(*m->targets));
	assert_non_null(m->targets);
	m->targets[0] = (struct target){ .vcpu = 0, .labels_len = sizeof(labels) - 1,
					 .data = data, .missing = miss };
	m->ntargets = 1;
	f = &m->fams[map->fam[1]];
	f->series = calloc(1, sizeof(*f->series));
	assert_non_null(f->series);
	f->cap = f->nseries = 1;
	f->series[0] = (struct series){
		.off = kvmstats_stat__offset(hist) / 8, .sum_off = map->sum_off[1],
		.stat = 1, .sum_stat = kvmstats_stat__index(sum) };
	miss[0] = 1ull << kvmstats_stat__index(sum);

	for (int fmt = PROM_TEXT; fmt <= PROM_OPENMETRICS; fmt++) {
		b.len = 0;
		prom_model_render_part(m, (enum prom_format)fmt, 0, 1, &b);
		prom_buf_put(&b, "", 1);
		assert_false(b.failed);
		assert_non_null(strstr(b.p, "kvm_vcpu_halt_wait_hist_seconds_bucket{"));
		assert_null(strstr(b.p, "_sum{"));
		/* OpenMetrics: _count if and only if there is a _sum. */
		if (fmt == PROM_TEXT)
			assert_non_null(strstr(b.p, "kvm_vcpu_halt_wait_hist_seconds_count{"));
		else
			assert_null(strstr(b.p, "_count{"));
	}
	/* Known again: the sum is back. */
	miss[0] = 0;
	data[kvmstats_stat__offset(sum) / 8] = 5;
	b.len = 0;
	prom_model_render_part(m, PROM_TEXT, 0, 1, &b);
	prom_buf_put(&b, "", 1);
	assert_non_null(strstr(b.p, "kvm_vcpu_halt_wait_hist_seconds_sum{"));
	prom_buf_free(&b);
	prom_model_free(m);
	kvmstats_schema__put(s);
	free(img);
	kvmstats_ctx__free(ctx);
}

static int qmp_ok(void *priv, struct kvmstats_sample *smp, uint64_t *missing)
{
	(void)missing;
	memset(smp->data, 0, smp->size);
	return *(int *)priv;
}

static uint64_t qmp_age(void *priv)
{
	(void)priv;
	return 250000000;	/* a poll 0.25 s old */
}

static const struct kvmstats_reader_ops qmp_ops = {
	.source = "qmp", .read = qmp_ok, .age_ns = qmp_age };

/* A background source's data age is that of the readings it served:
 * where its every reading failed it served none, and has no age (the
 * exporter leaves the sample out), not 0, which reads as fresh. */
static void test_source_age_unknown(void **state)
{
	static const struct kvmstats_encode_desc d[] = {
		{ "exits", KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_NONE, 0), 0, 1, 0 },
	};
	unsigned int qmp = prom_source_index("qmp");
	uint64_t values[1] = { 0 };
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct prom_model *m = prom_model_new(NULL);
	struct prom_model_stats st;
	struct kvmstats_schema *s;
	struct kvmstats_reader *r;
	size_t len;
	void *img = kvmstats_image__encode("kvm-1", d, 1, values, &len, NULL);
	int err = 0;

	(void)state;
	assert_non_null(img);
	assert_non_null(m);
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	r = kvmstats_reader__open_ops(s, &qmp_ops, &err);
	assert_non_null(r);
	assert_int_equal(kvmstats_reader__sweep(r, 1), 0);
	m->targets = calloc(1, sizeof(*m->targets));
	assert_non_null(m->targets);
	m->targets[0] = (struct target){ .r = r, .vcpu = PROM_VM, .src = qmp };
	m->ntargets = 1;

	prom_model_prepare(m);
	prom_model_stats(m, &st);
	assert_int_equal(st.src_read[qmp], 1);
	assert_int_equal(st.src_age_ns[qmp], 250000000);

	/* The monitor stops answering: the read fails. */
	err = -EBUSY;
	assert_int_equal(kvmstats_reader__sweep(r, 2), -EBUSY);
	prom_model_prepare(m);
	prom_model_stats(m, &st);
	assert_int_equal(st.src_errors[qmp], 1);
	assert_int_equal(st.src_read[qmp], 0);

	prom_model_free(m);
	kvmstats_reader__close(r);
	kvmstats_schema__put(s);
	free(img);
	kvmstats_ctx__free(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scaled),
		cmocka_unit_test(test_le),
		cmocka_unit_test(test_u64),
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_gzip_parts),
		cmocka_unit_test(test_family_names),
		cmocka_unit_test(test_hist_sum_missing),
		cmocka_unit_test(test_source_age_unknown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
