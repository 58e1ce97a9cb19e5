/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Options shared by `plan` and `drain` (plan_args.c). */
#ifndef KVMSTATS_PLAN_ARGS_H
#define KVMSTATS_PLAN_ARGS_H

#include "cli.h"
#include "kvmstats_mem.h"

/* How `plan` and `drain` plan each VM: the options both take. */
struct plan_common {
	unsigned int methods;	/* 1u << KVMSTATS_METHOD_* */
	double interval;	/* s the dirty rate is measured over; 0: clean */
	double bandwidth;	/* bytes/s; 0: QEMU's */
	double downtime_ms;	/* 0: QEMU's */
	uint64_t seed;		/* 0: from the clock */
	unsigned int pagemap_timeout_ms;	/* 0: the library's 10 s */
	struct kvmstats_migrate_overrides mig;	/* --parallel ... */
};

#define PLAN_COMMON_INIT(pc)                                                  \
	{ .methods = 1u << KVMSTATS_METHOD_SCAN, .interval = 1,               \
	  .mig = { .sz = sizeof((pc).mig), .compress = -1,                    \
		   .auto_converge = -1, .postcopy = -1 } }

/* Their option ids; a command's own options start at OPT_PLAN_CMD_BASE. */
enum {
	OPT_PLAN_METHOD = OPT_CMD_BASE,
	OPT_PLAN_INTERVAL,
	OPT_PLAN_BANDWIDTH,
	OPT_PLAN_DOWNTIME,
	OPT_PLAN_SEED,
	OPT_PLAN_PARALLEL,
	OPT_PLAN_COMPRESSED,
	OPT_PLAN_AUTO_CONVERGE,
	OPT_PLAN_POSTCOPY,
	OPT_PLAN_POSTCOPY_BW,
	OPT_PLAN_PAGEMAP_TIMEOUT,
	OPT_PLAN_CMD_BASE,
};

/* 1 if @c is one of the options above (parsed into @pc), 0 if it is
 * not, -1 after an error message. */
int plan_common_opt(const struct cli *cli, struct plan_common *pc, int c,
		    const char *arg);
/* @pc's part of a plan's options. */
void plan_common_fill(const struct plan_common *pc, struct kvmstats_plan_opts *po);
/* The points of a dirty curve: at interval/8, /4, /2 and the interval. */
#define PLAN_DIRTY_POINTS 4

/* Sleeps until @t (plan_now_s()'s clock); true when the measurement is to
 * stop (serve is stopping). */
typedef bool (*plan_sleep_fn)(void *arg, double t);

/* Every VM measured over the same interval (each from its own baseline),
 * as `plan`, `drain` and serve's planner do: the dirty rate (baselines,
 * then the PLAN_DIRTY_POINTS points), the prediction, and for a VM whose
 * verdict depends on the sample, up to two more intervals on the same
 * curve. @plans[i] may be NULL; their zero pages are estimated already.
 * @sleep NULL sleeps with plan_sleep_until(). False when @sleep stopped
 * it: the plans are then not all predicted. */
bool plan_measure(struct kvmstats_plan *const *plans, size_t n, double interval,
		  plan_sleep_fn sleep, void *arg);

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
/* CLOCK_MONOTONIC in seconds, and a sleep until such a time. */
double plan_now_s(void);
void plan_sleep_until(double t);

#endif
