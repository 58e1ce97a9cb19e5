// SPDX-License-Identifier: LGPL-2.1-or-later
/* The qmp source: not written yet. */
#include <errno.h>

#include "internal.h"

static int qmp_open(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	(void)v;
	ks_err(a->errbuf, a->errbuf_sz, "the qmp source is not available yet");
	return -EOPNOTSUPP;
}

const struct ks_source ks_source_qmp = {
	.name = "qmp",
	.open = qmp_open,
};
