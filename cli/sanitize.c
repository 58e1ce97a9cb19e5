// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Names as they may be shown: see sanitize.h. One escaping for every
 * sink, so that a name reads the same in a table, on stderr, in JSON, in
 * CSV and in a Prometheus label:
 *
 *   C0 controls (ESC, BEL, CR, LF...), DEL   \x1b
 *   C1 controls (U+0080..U+009F: CSI, OSC)   \u009b
 *   bidirectional overrides and isolates     \u202e
 *   a byte that is not valid UTF-8           \xff
 *
 * A terminal then never sees an escape sequence from a name, and JSON
 * strings are valid UTF-8 without a control character in them.
 */
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sanitize.h"

#define RING 8
#define RING_LEN 4096

size_t utf8_seq_len(const unsigned char *s)
{
	size_t n;
	uint32_t c;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0)
		n = 2, c = s[0] & 0x1f;
	else if ((s[0] & 0xf0) == 0xe0)
		n = 3, c = s[0] & 0x0f;
	else if ((s[0] & 0xf8) == 0xf0)
		n = 4, c = s[0] & 0x07;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and values past U+10FFFF are invalid. */
	if ((n == 2 && c < 0x80) || (n == 3 && c < 0x800) ||
	    (n == 4 && c < 0x10000) || c > 0x10ffff ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return n;
}

static uint32_t code_point(const unsigned char *s, size_t n)
{
	static const unsigned char mask[] = { 0, 0x7f, 0x1f, 0x0f, 0x07 };
	uint32_t c = s[0] & mask[n];

	for (size_t i = 1; i < n; i++)
		c = (c << 6) | (s[i] & 0x3f);
	return c;
}

/* A character that must not reach a terminal as it is. */
static bool is_control(uint32_t c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) ||
	       (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
}

/* How the character of @n bytes at @s is shown: into @esc (NUL-ended),
 * or NULL when as it is. */
static const char *escape_of(const unsigned char *s, size_t n, char esc[8])
{
	uint32_t c;

	if (!n) {
		snprintf(esc, 8, "\\x%02x", s[0]);
		return esc;
	}
	c = code_point(s, n);
	if (!is_control(c))
		return NULL;
	if (c < 0x80)
		snprintf(esc, 8, "\\x%02x", (unsigned int)c);
	else
		snprintf(esc, 8, "\\u%04x", (unsigned int)c);
	return esc;
}

bool str_clean(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	char esc[8];

	while (*u) {
		size_t n;

		/* The common case: printable ASCII. */
		if (*u >= 0x20 && *u < 0x7f) {
			u++;
			continue;
		}
		n = utf8_seq_len(u);
		if (escape_of(u, n, esc))
			return false;
		u += n;
	}
	return true;
}

size_t str_escaped_size(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t size = 1;
	char esc[8];

	while (*u) {
		size_t n = utf8_seq_len(u);
		const char *e = escape_of(u, n, esc);

		size += e ? strlen(e) : n;
		u += n ? n : 1;
	}
	return size;
}

size_t str_escape(char *out, size_t len, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	bool cut = str_escaped_size(s) > len;
	/* Cut short: whole characters, then "..." where they stop. */
	size_t room = cut && len > 3 ? len - 3 : len, o = 0;
	char esc[8];

	if (!len)
		return 0;
	while (*u) {
		size_t n = utf8_seq_len(u);
		const char *e = escape_of(u, n, esc);
		size_t w = e ? strlen(e) : n;

		if (o + w + 1 > room)
			break;
		memcpy(out + o, e ? e : (const char *)u, w);
		o += w;
		u += n ? n : 1;
	}
	if (cut && len > 3) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = 0;
	return o;
}

static char *ring_next(void)
{
	static char ring[RING][RING_LEN];
	static unsigned int next;

	return ring[next++ % RING];
}

const char *safe_str(const char *s)
{
	char *buf;

	if (!s || str_clean(s))
		return s;
	buf = ring_next();
	str_escape(buf, RING_LEN, s);
	return buf;
}

static char *escaped_copy(const char *s)
{
	size_t size = str_escaped_size(s);
	char *out = malloc(size);

	if (out)
		str_escape(out, size, s);
	return out;
}

/* An object whose keys need escaping: a new one with escaped keys and
 * the same values (a reference of their own each). */
static struct json_object *rekey(struct json_object *o)
{
	struct json_object *n = json_object_new_object();

	if (!n)
		return o;
	json_object_object_foreach(o, key, val) {
		char *k = str_clean(key) ? NULL : escaped_copy(key);

		json_object_object_add(n, k ? k : key, json_object_get(val));
		free(k);
	}
	return n;
}

struct json_object *json_clean(struct json_object *o)
{
	bool dirty_keys = false;

	switch (json_object_get_type(o)) {
	case json_type_string: {
		const char *s = json_object_get_string(o);
		char *e;

		if (str_clean(s) || !(e = escaped_copy(s)))
			return o;
		json_object_set_string(o, e);
		free(e);
		return o;
	}
	case json_type_array:
		for (size_t i = 0; i < json_object_array_length(o); i++) {
			struct json_object *v = json_object_array_get_idx(o, i);
			struct json_object *c = json_clean(v);

			if (c != v)
				json_object_array_put_idx(o, i, c);
		}
		return o;
	case json_type_object: {
		json_object_object_foreach(o, key, val) {
			struct json_object *c = json_clean(val);

			dirty_keys |= !str_clean(key);
			if (c != val)
				json_object_object_add(o, key, c);
		}
		return dirty_keys ? rekey(o) : o;
	}
	default:
		return o;
	}
}
