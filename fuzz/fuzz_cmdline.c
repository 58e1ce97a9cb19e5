// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * libFuzzer harness for QEMU's command line as kvmstats reads it for
 * its QMP sockets (lib/qmp_cmdline.c): the input is a /proc/PID/cmdline,
 * arguments separated by NULs, which a VMM writes as it likes. What
 * comes out is at most the sockets asked for, each a non-empty path
 * that fits PATH_MAX, and each made of the input's bytes.
 * Run by tests/integration/fuzz.sh for a bounded time.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "source_qmp.h"

/* Every byte of @path is a byte of the input (",," read as ","). */
static int from_input(const char *path, const uint8_t *data, size_t size)
{
	for (const char *p = path; *p; p++)
		if (!memchr(data, (unsigned char)*p, size))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char (*out)[PATH_MAX] = calloc(KS_QMP_MAX_SOCKS, sizeof(*out));
	int n;

	if (!out)
		return 0;
	n = ks_qmp_cmdline_sockets((const char *)data, size, out,
				   KS_QMP_MAX_SOCKS);
	if (n > KS_QMP_MAX_SOCKS)
		abort();
	for (int i = 0; i < n; i++)
		if (!out[i][0] || !memchr(out[i], 0, PATH_MAX) ||
		    !from_input(out[i], data, size))
			abort();
	free(out);
	return 0;
}
