/* SPDX-License-Identifier: GPL-2.0-or-later */
/* kvmstats plan: what the command (plan.c) and its output (plan_out.c)
 * share. */
#ifndef KVMSTATS_CLI_PLAN_H
#define KVMSTATS_CLI_PLAN_H

#include "cli.h"
#include "kvmstats_mem.h"
#include "plan_args.h"

struct region_arg {
	pid_t pid;		/* 0: every VM */
	struct kvmstats_range r;
};

struct plan_args {
	struct target_args t;
	struct plan_common pc;
	double max_cpu;
	double rate;		/* bytes/s */
	double link;		/* bytes/s; 0: not known */
	enum kvmstats_pagemap_mode pagemap;
	struct region_arg *regions;
	size_t nregions;
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
