/* SPDX-License-Identifier: GPL-2.0-or-later */
/* kvmstats follow: the planner's prediction beside QEMU's own counters of
 * each migration (follow.c watches, follow_out.c writes). */
#ifndef KVMSTATS_CLI_FOLLOW_H
#define KVMSTATS_CLI_FOLLOW_H

#include "cli.h"
#include "kvmstats_follow.h"

enum fvm_state {
	FVM_WAIT,	/* no migration of ours seen yet */
	FVM_RUN,	/* one under way */
	FVM_DONE,	/* it ended (or its VMM left): reported */
	FVM_DROP,	/* not followed (not readable) */
};

/* One followed VM: what the plan said, what QEMU says. A prediction not
 * in the plan is NAN (passes: -1): unknown, never 0. */
struct fvm {
	pid_t pid;
	char name[128];
	double pred_s, pred_bytes, pred_dirty;
	int pred_passes;
	double sched_start, sched_end;	/* a drain plan's, else NAN */
	struct kvmstats_follow *f;
	enum fvm_state state;
	struct kvmstats_migbase base;	/* the last migration before ours */
	struct kvmstats_migration m;	/* the latest answer */
	double seen_s;			/* ours first seen, since start */
	int fails;			/* failed polls in a row */
};

/* The events, as text or JSON lines (follow_out.c). @t: seconds since
 * follow started. */
void follow_out_start(const struct cli *cli, const struct fvm *v, double t);
void follow_out_progress(const struct cli *cli, const struct fvm *v, double t);
void follow_out_end(const struct cli *cli, const struct fvm *v, double t,
		    const char *outcome);
void follow_out_unreadable(const struct cli *cli, const struct fvm *v,
			   double t, const char *why);
/* (real - predicted) / real; NAN when either is unknown or real is 0. */
double follow_error(double real, double pred);

#endif
