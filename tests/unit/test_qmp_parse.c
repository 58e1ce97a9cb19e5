// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What a monitor answers, parsed (lib/qmp.c, lib/qmp_schema.c): the
 * client's tokener takes strict JSON and a stream of messages, its cost
 * estimate is per message, and a schema is built from QEMU's descriptors
 * in time that does not grow with the values list a monitor sends.
 */
#include <time.h>

#include "unit.h"

#include "../../lib/source_qmp.h"

static struct json_object *parse(const char *text)
{
	struct json_tokener *tok = ks_qmp_tokener();
	struct json_object *o;

	assert_non_null(tok);
	o = json_tokener_parse_ex(tok, text, (int)strlen(text));
	json_tokener_free(tok);
	return o;
}

/* json-c's leniencies would hide what it builds from the cost scan. */
static void test_strict(void **state)
{
	static const char *const refused[] = {
		"/*\"*/[[],[]]", "// \"\n[1]", "'a'", "[1,]",
	};
	struct json_object *o;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		assert_null(parse(refused[i]));
	o = parse("{\"return\": [1, \"x\"], \"id\": 3}");
	assert_non_null(o);
	json_object_put(o);
}

/* A monitor's stream: the next message follows the first. */
static void test_stream(void **state)
{
	const char *text = "{\"event\": \"STOP\"}\r\n{\"return\": {}}\r\n";
	struct json_tokener *tok = ks_qmp_tokener();
	struct json_object *o;
	size_t end;

	(void)state;
	o = json_tokener_parse_ex(tok, text, (int)strlen(text));
	assert_non_null(o);
	assert_true(json_object_object_get_ex(o, "event", NULL));
	json_object_put(o);
	end = json_tokener_get_parse_end(tok);
	json_tokener_reset(tok);
	o = json_tokener_parse_ex(tok, text + end, (int)(strlen(text) - end));
	assert_non_null(o);
	assert_true(json_object_object_get_ex(o, "return", NULL));
	json_object_put(o);
	json_tokener_free(tok);
}

/* The estimate of a message, of two the costlier; a reply nested past
 * 16 is refused. */
static void test_estimate(void **state)
{
	const char *small = "{\"return\": {}}";
	const char *big = "[[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[]]";
	char deep[64] = "";
	size_t a, b, both;
	char two[128];

	(void)state;
	assert_int_equal(ks_qmp_estimate(small, strlen(small), SIZE_MAX, &a), 0);
	assert_int_equal(ks_qmp_estimate(big, strlen(big), SIZE_MAX, &b), 0);
	assert_true(b > a);
	snprintf(two, sizeof(two), "%s%s", big, small);
	assert_int_equal(ks_qmp_estimate(two, strlen(two), SIZE_MAX, &both), 0);
	assert_int_equal(both, b);
	assert_int_equal(ks_qmp_estimate(big, strlen(big), b - 1, &b), -EMSGSIZE);
	memset(deep, '[', 17);
	assert_int_equal(ks_qmp_estimate(deep, strlen(deep), SIZE_MAX, &a),
			 -EMSGSIZE);
}

/* @ndesc histogram descriptors h0.., and a values list of @nval entries
 * v0.. followed by h0's: the descriptors look their sizes up in it. */
static struct kvmstats_schema *schema_of(struct kvmstats_ctx *ctx, int ndesc,
					 int nval, double *cpu_ms)
{
	struct json_object *list = json_object_new_array();
	struct json_object *vals = json_object_new_array();
	struct kvmstats_schema *s;
	struct timespec t0, t1;
	char name[32], err[256] = "";

	for (int i = 0; i < ndesc; i++) {
		struct json_object *d = json_object_new_object();

		snprintf(name, sizeof(name), "h%d", i);
		json_object_object_add(d, "name", json_object_new_string(name));
		json_object_object_add(d, "type",
				       json_object_new_string("log2-histogram"));
		json_object_array_add(list, d);
	}
	for (int i = 0; i <= nval; i++) {
		struct json_object *v = json_object_new_object();
		struct json_object *hist = json_object_new_array();

		for (int k = 0; k < 4 && i == nval; k++)
			json_object_array_add(hist, json_object_new_int(k));
		snprintf(name, sizeof(name), i < nval ? "v%d" : "h0", i);
		json_object_object_add(v, "name", json_object_new_string(name));
		json_object_object_add(v, "value", hist);
		json_object_array_add(vals, v);
	}
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
	s = ks_qmp_schema(ctx, list, vals, "kvm-1", true, err, sizeof(err));
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
	*cpu_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
		  (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	json_object_put(list);
	json_object_put(vals);
	return s;
}

/* 1024 descriptors against 60,000 values took 5.4 s of CPU when each
 * descriptor scanned the list; an index takes about a millisecond. */
static void test_many_values(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_schema *s;
	double ms;

	(void)state;
	s = schema_of(ctx, 1024, 60000, &ms);
	print_message("# 1024 descriptors, 60000 values: %.1f ms of CPU\n", ms);
	assert_true(ms < 500);
	/* Every histogram but h0 has no values, and h0's come past the
	 * entries a kernel could list: none is kept. */
	assert_non_null(s);
	assert_int_equal(kvmstats_schema__num_stats(s), 0);
	kvmstats_schema__put(s);
	s = schema_of(ctx, 4, 10, &ms);
	assert_non_null(s);
	assert_int_equal(kvmstats_schema__num_stats(s), 1);
	assert_int_equal(kvmstats_stat__size(kvmstats_schema__find(s, "h0")), 4);
	kvmstats_schema__put(s);
	kvmstats_ctx__free(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strict),
		cmocka_unit_test(test_stream),
		cmocka_unit_test(test_estimate),
		cmocka_unit_test(test_many_values),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
