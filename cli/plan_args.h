/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Options shared by `plan` and `drain` (plan_args.c). */
#ifndef KVMSTATS_PLAN_ARGS_H
#define KVMSTATS_PLAN_ARGS_H

#include "cli.h"
#include "kvmstats_mem.h"

/* A number >= @min; false after an error message. */
bool plan_parse_double(const struct cli *cli, const char *opt, const char *arg,
		       double min, double *out);
/* BYTES/S with an optional K, M, G (powers of 1024) suffix. */
bool plan_parse_rate(const struct cli *cli, const char *opt, const char *arg,
		     double *out);
/* --method M[,M...] into 1u << KVMSTATS_METHOD_* bits. */
bool plan_parse_methods(const struct cli *cli, const char *arg, unsigned int *out);
/* The VMMs --pid and --name choose (every VMM without them): a count
 * and *@out (malloc'ed), or -errno (reported). */
int plan_select_pids(struct cli *cli, const struct target_args *t, pid_t **out);
/* --parallel N, --compressed zlib|zstd, --auto-converge, --postcopy
 * (named by @opt) into @mig; false after an error message. */
bool plan_parse_migration(const struct cli *cli, const char *opt, const char *arg,
			  struct kvmstats_migrate_overrides *mig);
/* CLOCK_MONOTONIC in seconds, and a sleep until such a time. */
double plan_now_s(void);
void plan_sleep_until(double t);

#endif
