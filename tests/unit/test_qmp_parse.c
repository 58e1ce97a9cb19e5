// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What a monitor answers, parsed (lib/qmp.c): the client's tokener takes
 * strict JSON and a stream of messages, and its cost estimate is per
 * message.
 */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strict),
		cmocka_unit_test(test_stream),
		cmocka_unit_test(test_estimate),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
