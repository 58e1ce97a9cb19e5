/* SPDX-License-Identifier: GPL-2.0-or-later */
/* kvmstats plan: what the command (plan.c) and its output (plan_out.c)
 * share. */
#ifndef KVMSTATS_CLI_PLAN_H
#define KVMSTATS_CLI_PLAN_H

#include "cli.h"
#include "kvmstats_mem.h"

struct region_arg {
	pid_t pid;		/* 0: every VM */
	struct kvmstats_range r;
};

struct plan_args {
	struct target_args t;
	unsigned int methods;
	double interval;
	double bandwidth;
	double downtime_ms;
	double max_cpu;
	double rate;		/* bytes/s */
	enum kvmstats_pagemap_mode pagemap;
	uint64_t seed;
	struct region_arg *regions;
	size_t nregions;
	struct kvmstats_migrate_overrides mig;	/* --parallel ... */
};

/* One VM: its plan, or why there is none. */
struct vm_row {
	pid_t pid;
	char name[128];
	struct kvmstats_plan *p;
	const struct kvmstats_plan_vm *res;
	char error[256];
};

void plan_print_json(struct cli *cli, struct vm_row *rows, size_t n);
void plan_print_table(struct cli *cli, const struct plan_args *a,
		      struct vm_row *rows, size_t n);

#endif
