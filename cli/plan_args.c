// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What `plan` and `drain` both parse and choose: numbers and rates of
 * their options, the estimation methods, the VMs asked for.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan_args.h"

bool plan_parse_double(const struct cli *cli, const char *opt, const char *arg,
		       double min, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !isfinite(v) || v < min) {
		cli_err(cli, "%s: '%s' is not a number >= %g", opt, arg, min);
		return false;
	}
	*out = v;
	return true;
}

/* BYTES/S with an optional K, M, G (powers of 1024) suffix. */
bool plan_parse_rate(const struct cli *cli, const char *opt, const char *arg,
		     double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	switch (*end) {
	case 'k': case 'K': v *= 1024; end++; break;
	case 'm': case 'M': v *= 1048576; end++; break;
	case 'g': case 'G': v *= 1073741824.0; end++; break;
	}
	if (*end == 'i' || *end == 'B')
		end += strspn(end, "iB");
	if (!strcmp(end, "/s"))
		end += 2;
	if (errno || end == arg || *end || !isfinite(v) || v <= 0) {
		cli_err(cli, "%s: '%s' is not a rate in bytes/s (e.g. 1G)", opt, arg);
		return false;
	}
	*out = v;
	return true;
}

bool plan_parse_methods(const struct cli *cli, const char *arg, unsigned int *out)
{
	char *copy = strdup(arg), *save = NULL;
	bool ok = copy != NULL;

	*out = 0;
	for (char *m = copy ? strtok_r(copy, ",", &save) : NULL; m && ok;
	     m = strtok_r(NULL, ",", &save)) {
		int k = kvmstats_method_parse(m);

		if (!strcmp(m, "all"))
			*out |= (1u << KVMSTATS_METHOD_NR) - 1;
		else if (k >= 0)
			*out |= 1u << k;
		else
			ok = false;
	}
	free(copy);
	if (!ok || !*out)
		cli_err(cli, "--method: what is '%s'? (stats, pagemap, sample, scan, all)",
			arg);
	return ok && *out;
}

int plan_select_pids(struct cli *cli, const struct target_args *t, pid_t **out)
{
	pid_t *all = NULL;
	int n = 0;

	if (t->npids) {
		*out = malloc(t->npids * sizeof(**out));
		if (!*out)
			return -ENOMEM;
		memcpy(*out, t->pids, t->npids * sizeof(**out));
		return (int)t->npids;
	}
	n = kvmstats_proc__vmm_pids(&all);
	if (n < 0) {
		cli_err(cli, "listing VMMs: %s", strerror(-n));
		return n;
	}
	if (t->name_set) {
		int k = 0;

		for (int i = 0; i < n; i++) {
			char name[128] = "";

			kvmstats_proc__name(all[i], name, sizeof(name));
			if (!regexec(&t->name_re, name, 0, NULL, 0))
				all[k++] = all[i];
		}
		n = k;
	}
	*out = all;
	return n;
}

/* The pagemap pass's time: a VMM picks its address space, and on kernels
 * without PAGEMAP_SCAN the pass costs about 1 s per TiB of it; the
 * default bound (10 s) leaves an honest VM of more than ~9 TiB partly
 * unknown there. Bounded all the same: a plan must end. */
#define PAGEMAP_TIMEOUT_MAX_S 600.0

static bool parse_pagemap_timeout(const struct cli *cli, const char *arg,
				  unsigned int *ms)
{
	double s;

	if (!plan_parse_double(cli, "--pagemap-timeout", arg, 0.001, &s))
		return false;
	if (s > PAGEMAP_TIMEOUT_MAX_S) {
		cli_err(cli, "--pagemap-timeout: '%s' is more than %g s", arg,
			PAGEMAP_TIMEOUT_MAX_S);
		return false;
	}
	*ms = (unsigned int)lround(s * 1000);
	return true;
}

/* --parallel N, --compressed zlib|zstd, --auto-converge, --postcopy
 * (named by @opt) into @mig; false after an error message. */
static bool parse_migration(const struct cli *cli, const char *opt, const char *arg,
			    struct kvmstats_migrate_overrides *mig)
{
	long v;

	if (!strcmp(opt, "--auto-converge")) {
		mig->auto_converge = 1;
		return true;
	}
	if (!strcmp(opt, "--postcopy")) {
		mig->postcopy = 1;
		return true;
	}
	if (!strcmp(opt, "--parallel")) {
		v = cli_parse_long(cli, "--parallel", arg, 1, 255);
		if (v < 0)
			return false;
		mig->parallel = (unsigned int)v;
		return true;
	}
	mig->compress = kvmstats_mig_compress_parse(arg);
	if (mig->compress > 0)
		return true;
	cli_err(cli, "--compressed: what is '%s'? (zlib, zstd)", arg);
	return false;
}

int plan_common_opt(const struct cli *cli, struct plan_common *pc, int c,
		    const char *arg)
{
	bool ok;
	long v;

	switch (c) {
	case OPT_PLAN_METHOD:
		ok = plan_parse_methods(cli, arg, &pc->methods);
		break;
	case OPT_PLAN_INTERVAL:
		ok = plan_parse_double(cli, "--interval", arg, 0, &pc->interval);
		break;
	case OPT_PLAN_BANDWIDTH:
		ok = plan_parse_rate(cli, "--bandwidth", arg, &pc->bandwidth);
		break;
	case OPT_PLAN_DOWNTIME:
		ok = plan_parse_double(cli, "--downtime", arg, 1, &pc->downtime_ms);
		break;
	case OPT_PLAN_SEED:
		v = cli_parse_long(cli, "--seed", arg, 1, LONG_MAX);
		ok = v > 0;
		pc->seed = ok ? (uint64_t)v : 0;
		break;
	case OPT_PLAN_PARALLEL:
		ok = parse_migration(cli, "--parallel", arg, &pc->mig);
		break;
	case OPT_PLAN_COMPRESSED:
		ok = parse_migration(cli, "--compressed", arg, &pc->mig);
		break;
	case OPT_PLAN_AUTO_CONVERGE:
		ok = parse_migration(cli, "--auto-converge", arg, &pc->mig);
		break;
	case OPT_PLAN_POSTCOPY:
		ok = parse_migration(cli, "--postcopy", arg, &pc->mig);
		break;
	case OPT_PLAN_POSTCOPY_BW:
		ok = plan_parse_rate(cli, "--postcopy-bandwidth", arg,
				     &pc->mig.postcopy_bw);
		break;
	case OPT_PLAN_PAGEMAP_TIMEOUT:
		ok = parse_pagemap_timeout(cli, arg, &pc->pagemap_timeout_ms);
		break;
	default:
		return 0;
	}
	return ok ? 1 : -1;
}

void plan_common_fill(const struct plan_common *pc, struct kvmstats_plan_opts *po)
{
	po->methods = pc->methods;
	po->flags |= pc->interval == 0 ? KVMSTATS_PLAN_ASSUME_CLEAN : 0;
	po->interval_s = pc->interval;
	po->bandwidth = pc->bandwidth;
	po->downtime_ms = pc->downtime_ms;
	po->seed = pc->seed;
	po->pagemap_timeout_ms = pc->pagemap_timeout_ms;
}

/* Measured without error so far. */
static bool plan_ok(struct kvmstats_plan *p)
{
	return p && !kvmstats_plan__result(p)->error;
}

/* Its verdict depends on the sample: its low and high dirty curves
 * disagree. */
static bool plan_uncertain(struct kvmstats_plan *p)
{
	const struct kvmstats_plan_vm *r;

	if (!plan_ok(p))
		return false;
	r = kvmstats_plan__result(p);
	return r->predicted && r->dirty_measured &&
	       r->pred.verdict == KVMSTATS_VERDICT_UNCERTAIN;
}

#define PLAN_EXTRA 2

static bool sleep_until(plan_sleep_fn sleep, void *arg, double t)
{
	if (sleep)
		return sleep(arg, t);
	plan_sleep_until(t);
	return false;
}

/* Sleep until @p's dirty baseline is @at seconds old: each VM's points
 * are timed from its own baseline, so its interval is the one asked for
 * however long the baselines read after it took (timed from the last
 * one's end, the ASan CLI in the lab read a 4 s rate over 4.7 s). */
static bool sleep_until_age(plan_sleep_fn sleep, void *arg,
			    const struct kvmstats_plan *p, double at)
{
	double age;

	if (kvmstats_plan__dirty_age(p, &age))
		return false;
	return sleep_until(sleep, arg, plan_now_s() + at - age);
}

bool plan_measure(struct kvmstats_plan *const *plans, size_t n, double interval,
		  plan_sleep_fn sleep, void *arg)
{
	for (size_t i = 0; interval > 0 && i < n; i++)
		if (plan_ok(plans[i]))
			kvmstats_plan__dirty_begin(plans[i]);
	for (unsigned int k = 0; interval > 0 && k < PLAN_DIRTY_POINTS; k++) {
		double at = interval / (double)(1u << (PLAN_DIRTY_POINTS - 1 - k));

		for (size_t i = 0; i < n; i++) {
			if (!plan_ok(plans[i]))
				continue;
			if (sleep_until_age(sleep, arg, plans[i], at))
				return false;
			kvmstats_plan__dirty_point(plans[i]);
		}
	}
	for (size_t i = 0; i < n; i++)
		if (plans[i])
			kvmstats_plan__predict(plans[i]);
	/* The points added for an uncertain verdict: at 2 and 3 intervals,
	 * as kvmstats_plan__run() adds them. */
	for (unsigned int k = 1; interval > 0 && k <= PLAN_EXTRA; k++) {
		size_t more = 0;

		for (size_t i = 0; i < n; i++)
			more += plan_uncertain(plans[i]);
		if (!more)
			return true;
		for (size_t i = 0; i < n; i++) {
			if (!plan_uncertain(plans[i]))
				continue;
			if (sleep_until_age(sleep, arg, plans[i], interval * (k + 1)))
				return false;
			kvmstats_plan__dirty_extend(plans[i]);
			kvmstats_plan__predict(plans[i]);
		}
	}
	return true;
}

double plan_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void plan_sleep_until(double t)
{
	double d = t - plan_now_s();
	struct timespec ts;

	if (d <= 0)
		return;
	ts.tv_sec = (time_t)d;
	ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
	nanosleep(&ts, NULL);
}
