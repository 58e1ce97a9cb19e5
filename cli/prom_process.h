/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The exporter's own process_* metrics and kvmstats_build_info. */
#ifndef KVMSTATS_PROM_PROCESS_H
#define KVMSTATS_PROM_PROCESS_H

#include "prom.h"

/* How this binary was built (also `kvmstats version --json`). */
struct build_info {
	const char *commit;	/* git describe at build time; "" unknown */
	const char *compiler;
	const char *arch;
	bool libvirt;		/* built with the libvirt source */
};

const struct build_info *build_info(void);

/* kvmstats_build_info and process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_start_time_seconds, process_open_fds, process_max_fds, in the
 * meaning Prometheus client libraries give them. */
void prom_process_metrics(struct prom_buf *b, enum prom_format f);

#endif
