/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Names as they may be shown (sanitize.c). A VMM chooses its own name
 * (QEMU's -name, its argv), the stat names a QMP monitor reports and the
 * ids and stat names in images and logs; a path may hold anything. None
 * of it reaches a terminal, a JSON string, a CSV field or a Prometheus
 * label raw: C0 controls, DEL, C1 controls, bidirectional overrides and
 * bytes that are not UTF-8 are escaped visibly (\x1b, \u009b), never
 * dropped.
 */
#ifndef KVMSTATS_SANITIZE_H
#define KVMSTATS_SANITIZE_H

#include <stdbool.h>
#include <stddef.h>

struct json_object;

/* Length of the valid UTF-8 sequence at @s (0 when it is not one). */
size_t utf8_seq_len(const unsigned char *s);
/* True when @s can be shown as it is. */
bool str_clean(const char *s);
/* @s escaped into @out (@len bytes with its NUL; a longer result is cut
 * at a character and ends "..."). Returns the length written. */
size_t str_escape(char *out, size_t len, const char *s);
/* Bytes str_escape() needs for all of @s, with its NUL. */
size_t str_escaped_size(const char *s);
/* @s itself when clean, else its escaped form in one of 8 rotating
 * buffers (so up to 8 may be used in one printf). Main thread only. */
const char *safe_str(const char *s);
/* Escape every string and key in @o, in place where it can. Returns the
 * object to use instead of @o: @o itself, or a new object (with a
 * reference for the caller; @o keeps its own) when @o's keys needed
 * escaping. */
struct json_object *json_clean(struct json_object *o);

#endif
