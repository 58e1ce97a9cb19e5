// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats plan: which VMs are cheapest to live-migrate.
 *
 * For each VM: find its guest RAM in the VMM, estimate its zero pages
 * with the methods asked for (stats, pagemap, sample, scan: side by side,
 * each with its cost and error bars), measure its dirty rate over
 * --interval (all VMs in the same interval), and predict what QEMU's
 * pre-copy would send and how long it would take. One row per VM, ranked
 * by predicted time. Guest memory is only read, never written; pages that
 * are not present are never read; the VMs keep running.
 *
 * QMP is talked to (briefly, for the RAM blocks and migration parameters)
 * before the stats source is opened, since a QEMU monitor serves one
 * client at a time.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "plan_args.h"
#include "sanitize.h"
#include "kvmstats_mem.h"

enum {
	OPT_MAX_CPU = OPT_PLAN_CMD_BASE,
	OPT_RATE,
	OPT_REGION,
	OPT_PAGEMAP,
	OPT_LINK,
};

#include "plan.h"

/* ---- options ---- */

static bool parse_region(const struct cli *cli, struct plan_args *a, const char *arg)
{
	struct region_arg *ra = &a->regions[a->nregions];
	const char *colon = strchr(arg, ':');

	ra->pid = 0;
	if (colon) {
		char *end;
		long pid = strtol(arg, &end, 10);

		if (end != colon || pid <= 0) {
			cli_err(cli, "--region: '%s': PID:START-END", arg);
			return false;
		}
		ra->pid = (pid_t)pid;
		arg = colon + 1;
	}
	if (kvmstats_range__parse(arg, &ra->r)) {
		cli_err(cli, "--region: '%s' is not START-END or START+LEN (hex addresses "
			"in the VMM, as /proc/PID/maps shows them)", arg);
		return false;
	}
	a->nregions++;
	return true;
}

static bool parse_pagemap(const struct cli *cli, const char *arg,
			  enum kvmstats_pagemap_mode *out)
{
	if (!strcmp(arg, "auto"))
		*out = KVMSTATS_PAGEMAP_AUTO;
	else if (!strcmp(arg, "scan"))
		*out = KVMSTATS_PAGEMAP_SCAN;
	else if (!strcmp(arg, "read"))
		*out = KVMSTATS_PAGEMAP_READ;
	else {
		cli_err(cli, "--pagemap: what is '%s'? (auto, scan, read)", arg);
		return false;
	}
	return true;
}

/* 0, or -1 on a bad value (reported). */
static int plan_opt(struct cli *cli, void *ctx, int c, const char *arg)
{
	struct plan_args *a = ctx;
	int used = cli_target_opt(cli, &a->t, c, arg);

	if (!used)
		used = plan_common_opt(cli, &a->pc, c, arg);
	if (used)
		return used < 0 ? -1 : 0;
	switch (c) {
	case OPT_MAX_CPU:
		return plan_parse_double(cli, "--max-cpu", arg, 0.01, &a->max_cpu) ? 0 : -1;
	case OPT_RATE:
		if (!plan_parse_double(cli, "--rate", arg, 0.001, &a->rate))
			return -1;
		a->rate *= 1048576;
		return 0;
	case OPT_REGION:
		return parse_region(cli, a, arg) ? 0 : -1;
	case OPT_LINK:
		return plan_parse_rate(cli, "--link", arg, &a->link) ? 0 : -1;
	case OPT_PAGEMAP:
		return parse_pagemap(cli, arg, &a->pagemap) ? 0 : -1;
	}
	return 0;
}

static size_t ranges_for(const struct plan_args *a, pid_t pid,
			 struct kvmstats_range *out)
{
	size_t n = 0;

	for (size_t i = 0; i < a->nregions; i++)
		if (!a->regions[i].pid || a->regions[i].pid == pid)
			out[n++] = a->regions[i].r;
	return n;
}

static void open_row(const struct plan_args *a, struct vm_row *row,
		     struct kvmstats_range *ranges,
		     struct kvmstats_libvirt_guard *guard)
{
	size_t nr = ranges_for(a, row->pid, ranges);
	struct kvmstats_scan_opts so = {
		.sz = sizeof(so), .max_cpu = a->max_cpu, .rate = (uint64_t)a->rate,
	};
	struct kvmstats_ram_opts ro = {
		.sz = sizeof(ro), .ranges = nr ? ranges : NULL, .nranges = nr,
		.qmp_path = a->t.npids == 1 ? a->t.qmp : NULL,
		.timeout_ms = a->t.timeout_ms,
	};
	struct kvmstats_plan_opts po = {
		.sz = sizeof(po), .pagemap_mode = a->pagemap, .ram = &ro,
		.scan = &so, .libvirt_uri = a->t.libvirt_uri,
		.libvirt_guard = guard, .link_bw = a->link,
	};

	plan_common_fill(&a->pc, &po);
	kvmstats_proc__name(row->pid, row->name, sizeof(row->name));
	row->p = kvmstats_plan__new(row->pid, &po, row->error, sizeof(row->error));
	if (!row->p && !row->error[0])
		snprintf(row->error, sizeof(row->error), "pid %d: %s", (int)row->pid,
			 strerror(errno));
	if (row->p) {
		kvmstats_plan__set_overrides(row->p, &a->pc.mig);
		row->res = kvmstats_plan__result(row->p);
	}
}

/* The stats estimator reads KVM's stats through the core library's
 * sources; a VMM no source can open gets "unavailable", not a failure. */
static void read_stats(struct cli *cli, const struct plan_args *a,
		       struct vm_row *rows, size_t n)
{
	pid_t *pids = calloc(n ? n : 1, sizeof(*pids));
	struct kvmstats_host *h;
	size_t np = 0;

	if (!pids)
		return;
	for (size_t i = 0; i < n; i++)
		if (rows[i].p)
			pids[np++] = rows[i].pid;
	h = np ? kvmstats_host__new(cli->ctx, &(struct kvmstats_host_opts){
		.sz = sizeof(struct kvmstats_host_opts), .pids = pids, .npids = np,
		.source = a->t.source, .flags = a->t.flags,
		.qmp_path = np == 1 ? a->t.qmp : NULL,
		.libvirt_uri = a->t.libvirt_uri, .timeout_ms = a->t.timeout_ms }) : NULL;
	if (h && kvmstats_host__refresh(h) < 0) {
		kvmstats_host__free(h);
		h = NULL;
	}
	for (size_t i = 0; i < n; i++) {
		struct kvmstats_vmm *v = NULL;

		for (size_t k = 0; h && k < kvmstats_host__num_vmms(h); k++)
			if (kvmstats_vmm__pid(kvmstats_host__vmm(h, k)) == rows[i].pid)
				v = kvmstats_host__vmm(h, k);
		if (rows[i].p)
			kvmstats_plan__stats(rows[i].p, v);
	}
	kvmstats_host__free(h);
	free(pids);
}

/* ---- progress on a terminal ---- */

struct progress {
	pid_t pid;
	double last;
};

static int show_progress(void *arg, uint64_t done, uint64_t total)
{
	struct progress *pr = arg;
	double now = plan_now_s();

	if (done < total && now - pr->last < 0.2)
		return 0;
	pr->last = now;
	fprintf(stderr, "\rscanning pid %d: %3.0f%% (%.0f of %.0f MiB)\033[K",
		(int)pr->pid, total ? 100.0 * (double)done / (double)total : 100.0,
		(double)done / 1048576.0, (double)total / 1048576.0);
	return 0;
}

/* ---- the steps, over every VM ---- */

static void estimate_all(struct cli *cli, struct vm_row *rows, size_t n)
{
	bool tty = isatty(STDERR_FILENO) && cli->verbose >= 0;

	for (size_t i = 0; i < n; i++) {
		struct progress pr = { rows[i].pid, 0 };

		if (!rows[i].p)
			continue;
		if (tty) {
			/* The scan options were copied at plan__new: progress is
			 * wired through a fresh plan only when on a terminal. */
			kvmstats_plan__set_progress(rows[i].p, show_progress, &pr);
		}
		kvmstats_plan__estimate(rows[i].p);
		if (tty)
			fprintf(stderr, "\r\033[K");
		kvmstats_plan__set_progress(rows[i].p, NULL, NULL);
	}
}

static int cmp_rows(const void *x, const void *y)
{
	const struct vm_row *a = x, *b = y;

	if (!a->p || !b->p)
		return a->p ? -1 : b->p ? 1 : (a->pid > b->pid) - (a->pid < b->pid);
	return kvmstats_plan_vm__compare(a->res, b->res);
}

/* ---- the command ---- */

/* --qmp also asks QEMU for its RAM blocks, whatever --source reads. */
static int plan_check(struct cli *cli, void *ctx)
{
	struct plan_args *a = ctx;

	return target_args_check(cli, &a->t, true);
}

static const struct cli_opt plan_opts[] = {
	{ "method", OPT_PLAN_METHOD, 0, "M[,M...]", "scan",
	  "how zero pages are estimated: stats, pagemap, sample, scan, all" },
	{ "interval", OPT_PLAN_INTERVAL, 0, "SECONDS", "1",
	  "the dirty rate is measured over this long; 0: clean guests" },
	{ "bandwidth", OPT_PLAN_BANDWIDTH, 0, "BYTES/S", "QEMU's, else 128M",
	  "migration bandwidth (suffix K, M or G)" },
	{ "downtime", OPT_PLAN_DOWNTIME, 0, "MS", "QEMU's, else 300",
	  "downtime limit of the model" },
	{ "max-cpu", OPT_MAX_CPU, 0, "N", "1",
	  "CPU budget of a scan, in cores (0.5: half a core)" },
	{ "rate", OPT_RATE, 0, "MIB/S", "none",
	  "guest memory read per second by a scan, at most" },
	{ "region", OPT_REGION, 0, "[PID:]START-END", "QEMU's RAM blocks",
	  "guest RAM is these ranges of the VMM (repeatable)" },
	{ "pagemap", OPT_PAGEMAP, 0, "MODE", "auto",
	  "classify with PAGEMAP_SCAN (scan), pagemap entries (read), or auto" },
	{ "pagemap-timeout", OPT_PLAN_PAGEMAP_TIMEOUT, 0, "SECONDS", "10",
	  "pages not classified by then are unknown (at most 600)" },
	{ "seed", OPT_PLAN_SEED, 0, "N", "from the clock",
	  "seed of the random samples, for reproducible output" },
	{ "parallel", OPT_PLAN_PARALLEL, 0, "N", "QEMU's",
	  "the migration will use multifd with N channels (virsh --parallel)" },
	{ "compressed", OPT_PLAN_COMPRESSED, 0, "zlib|zstd", "QEMU's",
	  "multifd will compress with this (virsh --compressed)" },
	{ "auto-converge", OPT_PLAN_AUTO_CONVERGE, 0, NULL, NULL,
	  "the migration will auto-converge (its CPU throttle is modelled)" },
	{ "postcopy", OPT_PLAN_POSTCOPY, 0, NULL, NULL,
	  "the migration will switch to post-copy after the first pass" },
	{ "link", OPT_LINK, 0, "BYTES/S", "not known: max-bandwidth's",
	  "the link's speed: what QEMU sends unlimited (the stop-and-copy, "
	  "post-copy) runs at it (suffix K, M or G)" },
	{ "postcopy-bandwidth", OPT_PLAN_POSTCOPY_BW, 0, "BYTES/S",
	  "QEMU's, else --bandwidth's",
	  "post-copy's bandwidth limit (virsh --postcopy-bandwidth; suffix K, M or G)" },
	{ "verbose", 'v', CLI_OPT_SHORT, NULL, NULL,
	  "every method's estimate and the RAM regions of each VM" },
	CLI_OPTS_TARGET,
	{ 0 },
};

static const struct cli_spec plan_spec = {
	.cmd = "plan",
	.outputs = CLI_OUT_JSON,
	.text = "a table",
	.about = "Rank VMs by their predicted live-migration cost: zero pages "
		 "estimated by the\nmethods asked for, the dirty rate measured "
		 "over --interval, QEMU's pre-copy\nmodelled. Guest memory is "
		 "only read, never written.",
	.opts = plan_opts,
	.opt = plan_opt,
	.check = plan_check,
};

int cmd_plan(struct cli *cli, int argc, char **argv)
{
	struct plan_args a = { .pc = PLAN_COMMON_INIT(a.pc) };
	struct kvmstats_range *ranges = NULL;
	struct vm_row *rows = NULL;
	struct kvmstats_plan **plans = NULL;
	struct kvmstats_libvirt_guard *guard;
	pid_t *pids = NULL;
	int n = 0, ret, failed = 0;

	if (target_args_init(&a.t, argc))
		return EXIT_FAIL;
	a.regions = calloc((size_t)argc + 1, sizeof(*a.regions));
	ranges = calloc((size_t)argc + 1, sizeof(*ranges));
	ret = a.regions && ranges ? cli_parse(cli, &plan_spec, &a, argc, argv)
				  : EXIT_FAIL;
	if (ret != CLI_PARSED)
		goto out;
	ret = EXIT_FAIL;
	n = plan_select_pids(cli, &a.t, &pids);
	if (n < 0)
		goto out;
	rows = calloc((size_t)n + 1, sizeof(*rows));
	plans = calloc((size_t)n + 1, sizeof(*plans));
	if (!rows || !plans)
		goto out;
	/* A hung libvirtd costs the plan one timeout, not one per VM. */
	guard = kvmstats_libvirt_guard__new();
	for (int i = 0; i < n; i++) {
		rows[i].pid = pids[i];
		open_row(&a, &rows[i], ranges, guard);
	}
	kvmstats_libvirt_guard__free(guard);
	if (a.pc.methods & (1u << KVMSTATS_METHOD_STATS))
		read_stats(cli, &a, rows, (size_t)n);
	estimate_all(cli, rows, (size_t)n);
	for (int i = 0; i < n; i++)
		plans[i] = rows[i].p;
	plan_measure(plans, (size_t)n, a.pc.interval, NULL, NULL);
	qsort(rows, (size_t)n, sizeof(*rows), cmp_rows);
	for (int i = 0; i < n; i++) {
		failed += !rows[i].p || rows[i].res->error;
		if (!rows[i].p)
			cli_err(cli, "%s", rows[i].error);	/* names the pid */
		else if (rows[i].res->error)
			cli_err(cli, "pid %d: %s", (int)rows[i].pid, rows[i].res->error_msg);
	}
	if (cli->format == OUT_JSON)
		plan_print_json(cli, rows, (size_t)n);
	else
		plan_print_table(cli, &a, rows, (size_t)n);
	ret = failed ? EXIT_FAIL : EXIT_OK;
out:
	for (int i = 0; rows && i < n; i++)
		kvmstats_plan__free(rows[i].p);
	free(rows);
	free(plans);
	free(pids);
	free(ranges);
	free(a.regions);
	target_args_free(&a.t);
	return ret;
}
