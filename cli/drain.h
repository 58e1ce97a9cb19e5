/* SPDX-License-Identifier: GPL-2.0-or-later */
/* kvmstats drain: shared by drain.c (planning, scheduling) and
 * drain_out.c (text and JSON). */
#ifndef KVMSTATS_CLI_DRAIN_H
#define KVMSTATS_CLI_DRAIN_H

#include "cli.h"
#include "kvmstats_drain.h"
#include "plan_args.h"

struct drain_args {
	struct target_args t;
	double link;		/* bytes/s */
	uint32_t parallel;
	int order;		/* enum kvmstats_drain_order */
	double abort;		/* s per GiB; 0: never */
	struct plan_common pc;
};

/* One VM: its plan, or why there is none. */
struct drain_vm {
	pid_t pid;
	char name[128];
	struct kvmstats_plan *p;
	const struct kvmstats_plan_vm *res;
	char error[256];
	int input;		/* index in the drain's input; -1: not in it */
	/* With auto-converge, alone (tried for a VM that does not converge). */
	bool ac_tried, ac_converges;
	double ac_seconds, ac_throttled_s;
	unsigned int ac_throttle;
};

/* The drain scheduler's input for one VM from its plan (predicted):
 * the per-VM model's inputs, its own max-bandwidth and downtime-limit;
 * the time the plan adds beyond the legacy pre-copy's bytes at its
 * bandwidth and zero-test pace (setup and switch-over) is kept as setup_s. @name is not
 * copied. -EINVAL when the model refuses it. Also serve's (serve_drain.c). */
int drain_input_of(struct kvmstats_plan *p, const char *name,
		   struct kvmstats_drain_vm *out);

/* Print @d (NULL: no VM could be planned) as the format asks. */
void drain_print(struct cli *cli, const struct drain_args *a,
		 const struct kvmstats_drain *d, const struct drain_vm *vms, size_t n);

#endif
