// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Names as they may be shown (cli/sanitize.c): what a hostile VMM name,
 * stat name or path becomes in a table, on stderr, in CSV and in JSON.
 */
#include "unit.h"

#include "../../cli/sanitize.c"
/* The one CSV writer, which escapes through sanitize.c. */
#include "../../cli/render.c"

/* Valid UTF-8 without a control character, and no ESC at all. */
static bool shows_safely(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;

	while (*u) {
		size_t n = utf8_seq_len(u);

		if (!n || *u < 0x20 || *u == 0x7f || (n == 2 && u[0] == 0xc2 && u[1] < 0xa0))
			return false;
		u += n;
	}
	return true;
}

static void test_escapes(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "web1", "web1" },
		{ "caf\xc3\xa9 \xe2\x96\x87", "caf\xc3\xa9 \xe2\x96\x87" },
		{ "a\\x1b", "a\\x1b" },	/* a backslash is shown as it is */
		{ "\x1b[31mEVIL\x1b[0m", "\\x1b[31mEVIL\\x1b[0m" },
		{ "\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07" },
		{ "tab\there\r\nline", "tab\\x09here\\x0d\\x0aline" },
		{ "del\x7f", "del\\x7f" },
		{ "bytes\xff\xfe", "bytes\\xff\\xfe" },
		{ "csi\xc2\x9b" "2J", "csi\\u009b2J" },	/* C1 CSI, UTF-8 encoded */
		{ "rlo\xe2\x80\xae" "gnp.exe", "rlo\\u202egnp.exe" },
		{ "overlong\xc0\xaf", "overlong\\xc0\\xaf" },
		{ "surrogate\xed\xa0\x80", "surrogate\\xed\\xa0\\x80" },
		{ "cut\xe2\x96", "cut\\xe2\\x96" },
	};
	char out[256];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = str_escape(out, sizeof(out), cases[i].in);

		assert_string_equal(out, cases[i].out);
		assert_int_equal(n, strlen(cases[i].out));
		assert_int_equal(str_escaped_size(cases[i].in), n + 1);
		assert_true(shows_safely(out));
		assert_int_equal(str_clean(cases[i].in), !strcmp(cases[i].in, cases[i].out));
		assert_string_equal(safe_str(cases[i].in), cases[i].out);
	}
	/* A clean name is returned as it is, not copied. */
	assert_ptr_equal(safe_str(cases[0].in), cases[0].in);
}

/* Cut short at a whole character, and said so with "...". */
static void test_short_buffer(void **state)
{
	char out[12];

	(void)state;
	str_escape(out, sizeof(out), "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
	assert_string_equal(out, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9...");
	str_escape(out, sizeof(out), "ab\x1b\x1b\x1b");
	assert_string_equal(out, "ab\\x1b...");
	str_escape(out, 4, "abcdef");
	assert_string_equal(out, "...");
	str_escape(out, sizeof(out), "exactly 11!");
	assert_string_equal(out, "exactly 11!");
}

/* One row of @n text fields, as the CSV writer puts it. */
static char *csv_row(const char *const *fields, size_t n)
{
	char *buf = NULL;
	size_t len = 0;
	struct csv c = { .f = open_memstream(&buf, &len) };

	assert_non_null(c.f);
	for (size_t i = 0; i < n; i++)
		csv_field(&c, fields[i]);
	csv_u64(&c, 7);
	csv_empty(&c);
	csv_end(&c);
	fclose(c.f);
	return buf;
}

static void test_csv(void **state)
{
	static const char *const fields[] = {
		"web1", "a,b", "say \"hi\"", "x\n,y", " pad", "\x1b[31m",
	};
	char *row = csv_row(fields, sizeof(fields) / sizeof(fields[0]));

	(void)state;
	/* Quoted when a comma, a quote or an edge blank is in it; controls
	 * escaped visibly; the row ends CRLF. */
	assert_string_equal(row, "web1,\"a,b\",\"say \"\"hi\"\"\",\"x\\x0a,y\","
				 "\" pad\",\\x1b[31m,7,\r\n");
	free(row);
}

/* Keys and values at every depth; the text is JSON a parser takes, with
 * valid UTF-8 and no control character. */
static void test_json(void **state)
{
	struct json_object *o = json_object_new_object(), *a = json_object_new_array();
	struct json_object *in = json_object_new_object(), *c, *back, *v;
	const char *text;

	(void)state;
	json_object_object_add(in, "ok", json_object_new_string("fine"));
	json_object_object_add(in, "bad\x1b[2Jkey", json_object_new_int(7));
	json_object_array_add(a, json_object_new_string("\xff\xfe"));
	json_object_array_add(a, in);
	json_object_object_add(o, "name", json_object_new_string("VM \x1b]0;x\x07"));
	json_object_object_add(o, "list", a);
	json_object_object_add(o, "st\xc2\x9b" "at", json_object_new_int(1));
	c = json_clean(o);
	assert_ptr_not_equal(c, o);	/* a key needed escaping: a new root */
	text = json_object_to_json_string_ext(c, JSON_C_TO_STRING_PLAIN);
	assert_true(shows_safely(text));
	assert_null(strstr(text, "\\u001b"));
	back = json_tokener_parse(text);
	assert_non_null(back);
	assert_true(json_object_object_get_ex(back, "name", &v));
	assert_string_equal(json_object_get_string(v), "VM \\x1b]0;x\\x07");
	assert_true(json_object_object_get_ex(back, "st\\u009bat", &v));
	assert_true(json_object_object_get_ex(back, "list", &v));
	assert_string_equal(json_object_get_string(json_object_array_get_idx(v, 0)),
			    "\\xff\\xfe");
	assert_true(json_object_object_get_ex(json_object_array_get_idx(v, 1),
					      "bad\\x1b[2Jkey", &v));
	json_object_put(back);
	json_object_put(c);
	json_object_put(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escapes),
		cmocka_unit_test(test_short_buffer),
		cmocka_unit_test(test_csv),
		cmocka_unit_test(test_json),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
