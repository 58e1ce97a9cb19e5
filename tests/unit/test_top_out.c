// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats top --once's text (cli/top_text.c) over the model it reads
 * (cli/top_model.c): a figure the readings do not give is "-" or said
 * in words, never 0. One reading has no interval: its header gives no
 * rate window; a counter unknown at the reading before has no rate.
 */
#include "unit.h"

#include <unistd.h>

/* The renderers are built into kvmstats; the test takes them the same
 * way test_plan_out.c takes plan's. */
#include "../../cli/top_model.c" // NOLINT(bugprone-suspicious-include)
#include "../../cli/top_text.c" // NOLINT(bugprone-suspicious-include)
#include "../../cli/render.c" // NOLINT(bugprone-suspicious-include)
#include "../../cli/sanitize.c" // NOLINT(bugprone-suspicious-include)

/* What top_text.c needs of cli/main.c and cli/demo.c. */
struct json_object *cli_json_double(double v)
{
	return isfinite(v) ? json_object_new_double(v) : NULL;
}

void cli_print_json(const struct cli *cli, struct json_object *o)
{
	(void)cli;
	puts(json_object_to_json_string(o));
}

const char *demo_hint(void)
{
	return "";
}

static const struct kvmstats_encode_desc descs[] = {
	{ "exits", KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_NONE, 0), 0, 1, 0 },
};

static struct kvmstats_schema *schema(struct kvmstats_ctx *ctx)
{
	uint64_t values[1] = { 0 };
	struct kvmstats_schema *s;
	size_t len;
	void *img = kvmstats_image__encode("kvm-1", descs, 1, values, &len, NULL);

	assert_non_null(img);
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	free(img);
	return s;
}

/* What @fn printed on stdout, NUL-terminated (the caller frees it). */
static char *captured(int (*fn)(const struct top_opts *, const struct top_model *),
		      const struct top_opts *o, const struct top_model *m)
{
	char path[] = "/tmp/test_top_out.XXXXXX";
	int fd = mkstemp(path), out = dup(STDOUT_FILENO);
	char *buf = calloc(1, 65536);
	ssize_t n;

	assert_true(fd >= 0 && out >= 0 && buf);
	unlink(path);
	fflush(stdout);
	assert_int_equal(dup2(fd, STDOUT_FILENO), STDOUT_FILENO);
	fn(o, m);
	fflush(stdout);
	assert_int_equal(dup2(out, STDOUT_FILENO), STDOUT_FILENO);
	close(out);
	n = pread(fd, buf, 65535, 0);
	assert_true(n > 0);
	close(fd);
	return buf;
}

/* One frame (a log shorter than --interval): no interval to speak of. */
static void test_one_reading(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_schema *s = schema(ctx);
	struct top_opts o = { .interval = 1, .once = true };
	struct top_model m;
	uint64_t data[1] = { 42 };
	struct top_vm *vm;
	char *text;

	(void)state;
	model_init(&m, false);
	model_begin(&m);
	vm = model_vm(&m, 1, 0);
	assert_non_null(vm);
	vm->pid = 1;
	snprintf(vm->id, sizeof(vm->id), "kvm-1");
	assert_int_equal(series_feed(&m, &vm->stats, s, data, 1000000000ull, false), 0);
	series_missing(&vm->stats, NULL);
	model_end(&m, 1000000000ull);
	text = captured(top_print_text, &o, &m);
	assert_null(strstr(text, "rates over 0.00 s"));
	assert_non_null(strstr(text, "no rates (one reading)"));
	free(text);
	model_free(&m);
	kvmstats_schema__put(s);
	kvmstats_ctx__free(ctx);
}

/* Every "exits" line of the text (the VM's and the vCPUs' sum) has @want
 * in its rate/s column. */
static void assert_rate_cells(const char *text, const char *want)
{
	const char *p = text;
	int lines = 0;

	while ((p = strstr(p, "\n  exits "))) {
		char name[32], total[32], rate[32];

		assert_int_equal(sscanf(p + 1, "%31s %31s %31s", name, total, rate), 3);
		assert_string_equal(rate, want);
		lines++;
		p++;
	}
	assert_int_equal(lines, 2);
}

/* Feed @vm's own stats and one vCPU one reading each at @t seconds;
 * @miss: exits unknown at it (the source zeroes its word). */
static void frame(struct top_model *m, struct kvmstats_schema *s, uint64_t t,
		  uint64_t exits, bool miss)
{
	uint64_t data[1] = { miss ? 0 : exits }, bits[1] = { 1 };
	struct top_vm *vm;
	struct top_series *c;

	model_begin(m);
	vm = model_vm(m, 1, 0);
	assert_non_null(vm);
	vm->pid = 1;
	snprintf(vm->id, sizeof(vm->id), "kvm-1");
	assert_int_equal(series_feed(m, &vm->stats, s, data, t * 1000000000ull, false), 0);
	series_missing(&vm->stats, miss ? bits : NULL);
	c = model_vcpu(vm, 0);
	assert_non_null(c);
	assert_int_equal(series_feed(m, c, s, data, t * 1000000000ull, false), 0);
	series_missing(c, miss ? bits : NULL);
	model_end(m, t * 1000000000ull);
}

/* A counter unknown at the previous reading (or at the baseline) and
 * known now: its zeroed word is no reading, so there is no rate (nor
 * total) over it, not the whole counter over one interval. */
static void test_unknown_before(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_schema *s = schema(ctx);
	const struct kvmstats_stat *st = kvmstats_schema__stat(s, 0);
	struct top_opts o = { .interval = 1, .once = true };
	struct top_model m;
	struct top_vm *vm;
	char *text;

	(void)state;
	model_init(&m, false);
	frame(&m, s, 1, 1000000, false);
	frame(&m, s, 2, 0, true);
	frame(&m, s, 3, 1000100, false);
	vm = m.vms[0];
	assert_true(series_known(&vm->stats, st));
	assert_true(isnan(series_rate(&vm->stats, st)));
	assert_true(isnan(series_rate(&vm->sum, st)));
	assert_true(isnan(vm_rate(vm, "exits")));
	text = captured(top_print_text, &o, &m);
	assert_rate_cells(text, "-");
	free(text);
	/* Known at both readings: a rate again. */
	frame(&m, s, 4, 1000200, false);
	assert_true(series_rate(&vm->stats, st) == 100);
	assert_true(series_rate(&vm->sum, st) == 100);
	/* Known at the baseline and now: a total. */
	assert_true(series_total(&vm->stats, st) == 200);
	model_free(&m);

	/* Unknown at the baseline: no total until a reset. */
	model_init(&m, false);
	frame(&m, s, 1, 0, true);
	frame(&m, s, 2, 1000000, false);
	frame(&m, s, 3, 1000100, false);
	vm = m.vms[0];
	assert_true(series_rate(&vm->stats, st) == 100);
	assert_true(isnan(series_total(&vm->stats, st)));
	assert_true(isnan(series_total(&vm->sum, st)));
	model_reset(&m);
	frame(&m, s, 4, 1000300, false);
	assert_true(series_total(&vm->stats, st) == 200);
	assert_true(series_total(&vm->sum, st) == 200);
	model_free(&m);
	kvmstats_schema__put(s);
	kvmstats_ctx__free(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_reading),
		cmocka_unit_test(test_unknown_before),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
