/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Helpers shared by the cmocka unit tests. */
#ifndef KVMSTATS_UNIT_H
#define KVMSTATS_UNIT_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvmstats.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures"
#endif

/* Read a fixture file whole; the test fails if it cannot. */
static inline unsigned char *read_fixture(const char *name, size_t *len)
{
	char path[256];
	unsigned char *buf = malloc(1 << 20);
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", FIXTURES, name);
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_non_null(buf);
	*len = fread(buf, 1, 1 << 20, f);
	fclose(f);
	assert_true(*len > 0);
	return buf;
}

#endif
