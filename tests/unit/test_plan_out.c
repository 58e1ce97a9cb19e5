// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats plan's output (cli/plan_out.c) for a VM whose point prediction
 * does not converge: the model's bytes and seconds are then what it had
 * sent when it gave up, so the JSON has null and the table "-" for them,
 * never those figures. The prediction is the model's own, from an input
 * that dirties faster than the bandwidth sends.
 */
#include "unit.h"

#include <math.h>
#include <unistd.h>

/* The output is built into kvmstats; the test takes it the same way
 * test_prom.c takes the exporter's. */
#include "../../cli/plan_out.c" // NOLINT(bugprone-suspicious-include)
#include "../../cli/sanitize.c" // NOLINT(bugprone-suspicious-include)

/* What plan_out.c needs of cli/main.c and cli/targets.c. */
struct json_object *cli_json_double(double v)
{
	return isfinite(v) ? json_object_new_double(v) : NULL;
}

void cli_print_json(const struct cli *cli, struct json_object *o)
{
	(void)cli;
	puts(json_object_to_json_string(o));
}

int target_warn_hidden(struct cli *cli)
{
	(void)cli;
	return 0;
}

/* @pages dirtied per second (surely: the interval is the point) over
 * 100000 pages at 100 MB/s, 300 ms. */
static void predict(double pages, struct kvmstats_plan_vm *v)
{
	struct kvmstats_dirty_point c[2] = {
		{.t = 0.5,
		 .pages = pages / 2,
		 .lo = pages / 2,
		 .hi = pages / 2},
		{.t = 1, .pages = pages, .lo = pages, .hi = pages}};
	struct kvmstats_migrate_input in = {
		.sz = sizeof(in),
		.nonzero_pages = 100000,
		.curve = c,
		.npoints = 2,
		.bandwidth = 100e6,
		.downtime_s = 0.3,
	};

	memset(v, 0, sizeof(*v));
	v->pid = 42;
	snprintf(v->name, sizeof(v->name), "vm");
	v->memory_bytes = 100000ull * KVMSTATS_PAGE_SIZE;
	v->pages = 100000;
	v->method = KVMSTATS_METHOD_SCAN;
	v->est[KVMSTATS_METHOD_SCAN] =
		(struct kvmstats_estimate){.valid = true,
					   .pages = 100000,
					   .nonzero_pages = 100000,
					   .coverage = 1};
	v->predicted = true;
	v->bandwidth = 100e6;
	v->bandwidth_source = "option";
	v->downtime_s = 0.3;
	assert_int_equal(kvmstats_migrate__predict(&in, &v->pred), 0);
}

static bool is_null(struct json_object *o, const char *k)
{
	struct json_object *j = NULL;

	return json_object_object_get_ex(o, k, &j) && !j;
}

static void test_json_null(void **state)
{
	struct json_object *o = json_object_new_object(), *p;
	struct kvmstats_plan_vm v;

	(void)state;
	predict(1000000, &v);
	/* The model gave up: it has figures, but they are no prediction. */
	assert_false(v.pred.converges);
	assert_int_equal(v.pred.verdict, KVMSTATS_VERDICT_NO);
	assert_true(v.pred.bytes > 0 && v.pred.seconds > 0);
	add_prediction(o, &v);
	assert_true(is_null(o, "predicted_transfer_bytes"));
	assert_true(is_null(o, "predicted_seconds"));
	assert_true(json_object_get_boolean(
			    json_object_object_get(o, "converges")) == false);
	p = json_object_object_get(o, "prediction");
	assert_non_null(p);
	assert_true(is_null(p, "passes"));
	assert_true(is_null(p, "final_bytes"));
	assert_true(is_null(p, "downtime_seconds"));
	/* the note names where it gave up */
	assert_non_null(strstr(
		json_object_get_string(json_object_object_get(p, "note")),
		"does not converge: after"));
	json_object_put(o);

	/* One that converges has its figures. */
	o = json_object_new_object();
	predict(1000, &v);
	assert_true(v.pred.converges);
	add_prediction(o, &v);
	assert_true(json_object_get_uint64(json_object_object_get(
			    o, "predicted_transfer_bytes")) == v.pred.bytes);
	assert_true(json_object_get_double(json_object_object_get(
			    o, "predicted_seconds")) == v.pred.seconds);
	p = json_object_object_get(o, "prediction");
	assert_int_equal(
		json_object_get_int(json_object_object_get(p, "passes")),
		(int)v.pred.passes);
	json_object_put(o);
}

/* print_row's line for @v, in @buf. */
static void row_text(const struct kvmstats_plan_vm *v, char *buf, size_t len)
{
	static char plan; /* print_row only asks whether there is one */
	struct vm_row row = {
		.pid = v->pid, .p = (struct kvmstats_plan *)&plan, .res = v};
	FILE *f = tmpfile();
	int saved;
	size_t n;

	assert_non_null(f);
	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	assert_true(saved >= 0);
	assert_true(dup2(fileno(f), STDOUT_FILENO) >= 0);
	print_row(&row, 1);
	fflush(stdout);
	assert_true(dup2(saved, STDOUT_FILENO) >= 0);
	close(saved);
	rewind(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
	fclose(f);
}

static void test_table_dash(void **state)
{
	struct kvmstats_plan_vm v;
	char line[512], secs[16];

	(void)state;
	predict(1000000, &v);
	row_text(&v, line, sizeof(line));
	/* TRANSFER and TIME "-", then CONV NO */
	assert_non_null(strstr(line, "         -         - NO  "));
	human_secs(v.pred.seconds, secs, sizeof(secs));
	assert_null(strstr(line, secs));

	predict(1000, &v);
	row_text(&v, line, sizeof(line));
	human_secs(v.pred.seconds, secs, sizeof(secs));
	assert_non_null(strstr(line, secs));
	assert_non_null(strstr(line, " yes "));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_null),
		cmocka_unit_test(test_table_dash),
	};

	return cmocka_run_group_tests_name("plan_out", tests, NULL, NULL);
}
