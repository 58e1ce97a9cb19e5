// SPDX-License-Identifier: LGPL-2.1-or-later
/* The debugfs source: not written yet. */
#include <errno.h>

#include "internal.h"

static int debugfs_open(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	(void)v;
	ks_err(a->errbuf, a->errbuf_sz, "the debugfs source is not available yet");
	return -EOPNOTSUPP;
}

const struct ks_source ks_source_debugfs = {
	.name = "debugfs",
	.open = debugfs_open,
};
