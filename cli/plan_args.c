// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What `plan` and `drain` both parse and choose: numbers and rates of
 * their options, the estimation methods, the VMs asked for.
 */
#include <errno.h>
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

bool plan_parse_migration(const struct cli *cli, const char *opt, const char *arg,
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
