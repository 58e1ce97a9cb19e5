// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats top --once's text (cli/top_text.c) over the model it reads
 * (cli/top_model.c): a figure the readings do not give is "-" or said
 * in words, never 0. One reading has no interval: its header gives no
 * rate window.
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_reading),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
