// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats record --log (cli/record_text.c): a counter's rate is taken
 * between two readings that both know it. A reading the source could
 * not give it in has a 0 in its word, which is no reading: the line
 * after such a gap has no rate for it (null), not the whole counter over
 * one interval; the line after that has one again.
 */
#include "unit.h"

#include <math.h>
#include <time.h>

/* The text log is built into kvmstats; the test takes it the same way
 * test_plan_out.c takes plan's. */
#include "../../cli/record_text.c" // NOLINT(bugprone-suspicious-include)
#include "../../cli/render.c" // NOLINT(bugprone-suspicious-include)
#include "../../cli/sanitize.c" // NOLINT(bugprone-suspicious-include)

/* What record_text.c needs of cli/main.c, cli/outfile.c, cli/targets.c. */
struct json_object *cli_json_double(double v)
{
	return isfinite(v) ? json_object_new_double(v) : NULL;
}

void cli_err(const struct cli *cli, const char *fmt, ...)
{
	(void)cli, (void)fmt;
}

int cli_parse_regex(const struct cli *cli, const char *opt, const char *arg,
		    regex_t *re, bool *set)
{
	(void)cli, (void)opt, (void)arg, (void)re, (void)set;
	return -1;
}

FILE *open_output(const char *path, bool append)
{
	(void)path, (void)append;
	return NULL;
}

int target_warn_unknown(struct cli *cli, struct kvmstats_vmm *v)
{
	(void)cli, (void)v;
	return 0;
}

static const struct kvmstats_encode_desc descs[] = {
	{ "exits", KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_NONE, 0), 0, 1, 0 },
	{ "pages_4k", KVMSTATS_FLAGS(KVMSTATS_TYPE_INSTANT, KVMSTATS_UNIT_NONE, 0), 0, 1, 0 },
};

/* exits at each sweep; at sweep 1 the source does not give it. */
static const uint64_t exits[4] = { 1000000, 0, 1000100, 1000200 };

static int gap_read(void *priv, struct kvmstats_sample *smp, uint64_t *missing)
{
	int k = *(int *)priv;

	smp->data[0] = exits[k];
	smp->data[1] = 5;
	if (k == 1)
		missing[0] |= 1;	/* exits is stat 0 */
	return 0;
}

static const struct kvmstats_reader_ops gap_ops = { .source = "qmp", .read = gap_read };

static void test_rate_after_unknown(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct cli cli = { .format = OUT_JSON, .ctx = ctx };
	struct text_log t = { .cli = &cli };
	struct kvmstats_vmm *v = kvmstats_vmm__new(7, "gap");
	struct kvmstats_vmm *sel[1] = { v };
	struct kvmstats_schema *s;
	struct kvmstats_reader *r;
	uint64_t values[2] = { 0 };
	char *out = NULL, line[4][512];
	size_t len, outsz = 0;
	void *img = kvmstats_image__encode("kvm-7", descs, 2, values, &len, NULL);
	int k = 0;
	FILE *f;

	(void)state;
	assert_non_null(img);
	assert_non_null(v);
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	r = kvmstats_reader__open_ops(s, &gap_ops, &k);
	assert_non_null(r);
	assert_non_null(kvmstats_vmm__add_vm(v, r));
	f = open_memstream(&out, &outsz);
	assert_non_null(f);
	t.out = f;
	for (k = 0; k < 4; k++) {
		assert_int_equal(kvmstats_reader__sweep(r, 0), 0);
		text_log_line(&t, sel, 1, 1700000000000000000ull, (unsigned long)k);
		nanosleep(&(struct timespec){ 0, 2000000 }, NULL);
	}
	t.out = NULL;
	fclose(f);
	print_message("%s", out);
	/* Lines of sweeps 1, 2, 3 (sweep 0 has no rate to give). */
	assert_int_equal(sscanf(out, "%511[^\n]\n%511[^\n]\n%511[^\n]", line[1], line[2],
				line[3]), 3);
	assert_non_null(strstr(line[1], "\"exits\":null"));
	assert_non_null(strstr(line[2], "\"exits\":null"));
	assert_null(strstr(line[3], "\"exits\":null"));
	assert_non_null(strstr(line[3], "\"exits\":"));
	free(out);
	text_log_free(&t);
	kvmstats_vmm__close(v);
	kvmstats_schema__put(s);
	free(img);
	kvmstats_ctx__free(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rate_after_unknown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
