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
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "plan_args.h"
#include "sanitize.h"
#include "kvmstats_mem.h"

enum {
	OPT_METHOD = OPT_CMD_BASE,
	OPT_INTERVAL,
	OPT_BANDWIDTH,
	OPT_DOWNTIME,
	OPT_MAX_CPU,
	OPT_RATE,
	OPT_REGION,
	OPT_PAGEMAP,
	OPT_SEED,
	OPT_PARALLEL,
	OPT_COMPRESSED,
	OPT_AUTO_CONVERGE,
	OPT_POSTCOPY,
};

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
	long v;

	if (used)
		return used < 0 ? -1 : 0;
	switch (c) {
	case OPT_METHOD:
		return plan_parse_methods(cli, arg, &a->methods) ? 0 : -1;
	case OPT_INTERVAL:
		return plan_parse_double(cli, "--interval", arg, 0, &a->interval) ? 0 : -1;
	case OPT_BANDWIDTH:
		return plan_parse_rate(cli, "--bandwidth", arg, &a->bandwidth) ? 0 : -1;
	case OPT_DOWNTIME:
		return plan_parse_double(cli, "--downtime", arg, 1, &a->downtime_ms) ? 0 : -1;
	case OPT_MAX_CPU:
		if (!plan_parse_double(cli, "--max-cpu", arg, 0.01, &a->max_cpu))
			return -1;
		return 0;
	case OPT_RATE:
		if (!plan_parse_double(cli, "--rate", arg, 0.001, &a->rate))
			return -1;
		a->rate *= 1048576;
		return 0;
	case OPT_REGION:
		return parse_region(cli, a, arg) ? 0 : -1;
	case OPT_PAGEMAP:
		return parse_pagemap(cli, arg, &a->pagemap) ? 0 : -1;
	case OPT_PARALLEL:
		v = cli_parse_long(cli, "--parallel", arg, 1, 255);
		if (v < 0)
			return -1;
		a->mig.parallel = (unsigned int)v;
		return 0;
	case OPT_COMPRESSED:
		a->mig.compress = kvmstats_mig_compress_parse(arg);
		if (a->mig.compress > 0)
			return 0;
		cli_err(cli, "--compressed: what is '%s'? (zlib, zstd)", arg);
		return -1;
	case OPT_AUTO_CONVERGE:
		a->mig.auto_converge = 1;
		return 0;
	case OPT_POSTCOPY:
		a->mig.postcopy = 1;
		return 0;
	case OPT_SEED:
		v = cli_parse_long(cli, "--seed", arg, 1, LONG_MAX);
		if (v < 0)
			return -1;
		a->seed = (uint64_t)v;
		return 0;
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

static void open_row(struct cli *cli, const struct plan_args *a, struct vm_row *row,
		     struct kvmstats_range *ranges)
{
	size_t nr = ranges_for(a, row->pid, ranges);
	struct kvmstats_scan_opts so = {
		.sz = sizeof(so), .max_cpu = a->max_cpu, .rate = (uint64_t)a->rate,
	};
	struct kvmstats_ram_opts ro = {
		.sz = sizeof(ro), .ranges = nr ? ranges : NULL, .nranges = nr,
		.qmp_path = a->t.npids == 1 ? a->t.qmp : NULL,
	};
	struct kvmstats_plan_opts po = {
		.sz = sizeof(po), .methods = a->methods,
		.flags = a->interval == 0 ? KVMSTATS_PLAN_ASSUME_CLEAN : 0,
		.interval_s = a->interval, .bandwidth = a->bandwidth,
		.downtime_ms = a->downtime_ms, .pagemap_mode = a->pagemap,
		.ram = &ro, .scan = &so, .seed = a->seed,
	};

	(void)cli;
	kvmstats_proc__name(row->pid, row->name, sizeof(row->name));
	row->p = kvmstats_plan__new(row->pid, &po, row->error, sizeof(row->error));
	if (!row->p && !row->error[0])
		snprintf(row->error, sizeof(row->error), "pid %d: %s", (int)row->pid,
			 strerror(errno));
	if (row->p) {
		kvmstats_plan__set_overrides(row->p, &a->mig);
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
		.libvirt_uri = a->t.libvirt_uri }) : NULL;
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
	struct timespec ts;
	double now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
	if (done < total && now - pr->last < 0.2)
		return 0;
	pr->last = now;
	fprintf(stderr, "\rscanning pid %d: %3.0f%% (%.0f of %.0f MiB)\033[K",
		(int)pr->pid, total ? 100.0 * (double)done / (double)total : 100.0,
		(double)done / 1048576.0, (double)total / 1048576.0);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t)
{
	double d = t - now_s();
	struct timespec ts;

	if (d <= 0)
		return;
	ts.tv_sec = (time_t)d;
	ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
	nanosleep(&ts, NULL);
}

/* ---- the steps, over every VM ---- */

static void estimate_all(struct cli *cli, const struct plan_args *a,
			 struct vm_row *rows, size_t n)
{
	bool tty = isatty(STDERR_FILENO) && cli->verbose >= 0;

	(void)a;
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

/* Dirty rate of every VM over the same interval: baselines, then points
 * at interval/8, /4, /2 and the full interval. */
static void dirty_all(const struct plan_args *a, struct vm_row *rows, size_t n)
{
	const unsigned int points = 4;
	double interval = a->interval > 0 ? a->interval : 1, t0;

	if (a->interval == 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (rows[i].p && !rows[i].res->error)
			kvmstats_plan__dirty_begin(rows[i].p);
	t0 = now_s();
	for (unsigned int k = 0; k < points; k++) {
		sleep_until(t0 + interval / (double)(1u << (points - 1 - k)));
		for (size_t i = 0; i < n; i++)
			if (rows[i].p && !rows[i].res->error)
				kvmstats_plan__dirty_point(rows[i].p);
	}
}

static int cmp_rows(const void *x, const void *y)
{
	const struct vm_row *a = x, *b = y;

	if (!a->p || !b->p)
		return a->p ? -1 : b->p ? 1 : (a->pid > b->pid) - (a->pid < b->pid);
	return kvmstats_plan_vm__compare(a->res, b->res);
}

/* ---- JSON ---- */

#define jset json_object_object_add
#define ju64 json_object_new_uint64
#define jstr json_object_new_string

static struct json_object *jnum(double v)
{
	return isfinite(v) ? json_object_new_double(v) : NULL;
}

static struct json_object *interval_json(double lo, double hi)
{
	struct json_object *a = json_object_new_array();

	json_object_array_add(a, jnum(lo));
	json_object_array_add(a, jnum(hi));
	return a;
}

static const char *kind_str(enum kvmstats_ram_kind k)
{
	switch (k) {
	case KVMSTATS_RAM_ANON: return "anonymous";
	case KVMSTATS_RAM_SHMEM: return "shmem";
	case KVMSTATS_RAM_HUGETLB: return "hugetlb";
	case KVMSTATS_RAM_FILE: return "file";
	}
	return "unknown";
}

static struct json_object *ram_json(const struct kvmstats_ram *ram)
{
	struct json_object *o = json_object_new_object();
	struct json_object *rs = json_object_new_array();
	char buf[40];

	jset(o, "how", jstr(
		kvmstats_ram_how_str(kvmstats_ram__how(ram))));
	jset(o, "note", jstr(kvmstats_ram__note(ram)));
	jset(o, "qmp", jstr(kvmstats_ram__qmp_path(ram)));
	for (size_t i = 0; i < kvmstats_ram__count(ram); i++) {
		const struct kvmstats_ram_region *r = kvmstats_ram__region(ram, i);
		struct json_object *j = json_object_new_object();

		snprintf(buf, sizeof(buf), "%" PRIx64 "-%" PRIx64, r->start, r->start + r->len);
		jset(j, "range", jstr(buf));
		jset(j, "bytes", ju64(r->len));
		jset(j, "name", jstr(r->name));
		jset(j, "kind", jstr(kind_str(r->kind)));
		jset(j, "shared", json_object_new_boolean(r->shared));
		jset(j, "page_size", ju64(r->page_size));
		jset(j, "path", jstr(r->path));
		jset(j, "why", jstr(r->why));
		json_object_array_add(rs, j);
	}
	jset(o, "regions", rs);
	return o;
}

static struct json_object *estimate_json(const struct kvmstats_estimate *e)
{
	struct json_object *o = json_object_new_object();

	jset(o, "method", jstr(kvmstats_method_str(e->method)));
	jset(o, "valid", json_object_new_boolean(e->valid));
	jset(o, "zero_pages", e->valid ? ju64(e->zero_pages) : NULL);
	jset(o, "nonzero_pages", e->valid ? ju64(e->nonzero_pages) : NULL);
	jset(o, "unknown_pages", e->valid ? ju64(e->unknown_pages) : NULL);
	jset(o, "zero_pages_interval", e->valid ?
			       interval_json(e->zero_lo, e->zero_hi) : NULL);
	jset(o, "coverage", jnum(e->coverage));
	jset(o, "elapsed_seconds", jnum(e->elapsed_s));
	jset(o, "cpu_seconds", jnum(e->cpu_s));
	jset(o, "bytes_read", ju64(e->bytes_read));
	jset(o, "pages_tested", ju64(e->tested));
	jset(o, "missing_pages", ju64(e->missing_pages));
	jset(o, "note", jstr(e->note));
	return o;
}

static struct json_object *counts_json(const struct kvmstats_pagemap_counts *c)
{
	struct json_object *o = json_object_new_object();

	jset(o, "present", ju64(c->present));
	jset(o, "pfn_zero", ju64(c->pfn_zero));
	jset(o, "huge", ju64(c->huge));
	jset(o, "swapped", ju64(c->swapped));
	jset(o, "cached", ju64(c->cached));
	jset(o, "not_present", ju64(c->none));
	jset(o, "candidates", ju64(c->candidates));
	return o;
}

static struct json_object *dirty_json(const struct kvmstats_plan_vm *r)
{
	struct json_object *o = json_object_new_object();
	struct json_object *curve = json_object_new_array();
	const struct kvmstats_dirty_result *d = &r->dirty;

	for (uint32_t i = 0; i < d->npoints; i++) {
		struct json_object *p = json_object_new_object();

		jset(p, "t", jnum(d->points[i].t));
		jset(p, "pages", jnum(d->points[i].pages));
		jset(p, "interval", interval_json(d->points[i].lo,
								     d->points[i].hi));
		json_object_array_add(curve, p);
	}
	jset(o, "pages_per_second", jnum(d->pages_per_second));
	jset(o, "bytes_per_second", jnum(d->pages_per_second *
							   KVMSTATS_PAGE_SIZE));
	jset(o, "interval", interval_json(d->lo, d->hi));
	jset(o, "sampled_pages", ju64(d->sampled));
	jset(o, "population", ju64(d->population));
	jset(o, "new_pages", ju64(d->new_pages));
	jset(o, "missing_pages", ju64(d->missing_pages));
	jset(o, "curve", curve);
	return o;
}

static void add_prediction(struct json_object *o, const struct kvmstats_plan_vm *r)
{
	const struct kvmstats_migrate_prediction *p = &r->pred;
	struct json_object *j = json_object_new_object();

	jset(o, "dirty_pages_per_second",
			       r->dirty_measured ? jnum(r->dirty.pages_per_second) :
			       json_object_new_double(0));
	jset(o, "assumed_clean", json_object_new_boolean(p->assumed_clean));
	jset(o, "predicted_transfer_bytes", ju64(p->bytes));
	jset(o, "predicted_seconds", jnum(p->seconds));
	jset(o, "converges", json_object_new_boolean(p->converges));
	jset(j, "passes", json_object_new_int((int)p->passes));
	jset(j, "first_pass_bytes", ju64(p->first_pass_bytes));
	jset(j, "final_bytes", ju64(p->final_bytes));
	jset(j, "downtime_seconds", jnum(p->downtime_s));
	jset(j, "bandwidth_bytes_per_second", jnum(r->bandwidth));
	jset(j, "bandwidth_source", jstr(r->bandwidth_source));
	jset(j, "downtime_limit_seconds", jnum(r->downtime_s));
	jset(j, "note", jstr(p->note));
	jset(o, "prediction", j);
}

/* The settings the model used, each with where it came from, and how it
 * ran them. */
static void add_settings(struct json_object *pred, const struct kvmstats_plan *p)
{
	const struct kvmstats_migrate_settings *s = kvmstats_plan__settings(p);
	const struct kvmstats_migrate_detail *d = kvmstats_plan__detail(p);
	const struct kvmstats_compress_estimate *c = &d->compress;
	struct json_object *set = json_object_new_object(), *cj;
	char v[32];

	for (int k = 0; k < KVMSTATS_MIG_NKEYS; k++) {
		struct json_object *e = json_object_new_object();

		kvmstats_migrate_settings__value(s, (enum kvmstats_mig_key)k, v, sizeof(v));
		jset(e, "value", jstr(v));
		jset(e, "source", jstr(kvmstats_mig_src_str(s->src[k])));
		jset(set, kvmstats_mig_key_str((enum kvmstats_mig_key)k), e);
	}
	snprintf(v, sizeof(v), "%u.%u", s->qemu_major, s->qemu_minor);
	jset(pred, "qemu_version", s->qemu_major ? jstr(v) : NULL);
	jset(pred, "settings", set);
	jset(pred, "mechanism", jstr(d->mechanism ? d->mechanism : "legacy"));
	jset(pred, "effective_bandwidth_bytes_per_second", jnum(d->effective_bw));
	jset(pred, "wire_bytes", ju64(d->wire_bytes));
	if (c->valid || c->note[0]) {
		cj = json_object_new_object();
		jset(cj, "method", jstr(kvmstats_mig_compress_str(c->method)));
		jset(cj, "level", json_object_new_int(c->level));
		jset(cj, "sampled_pages", ju64(c->pages));
		jset(cj, "ratio", c->valid ? jnum(c->ratio) : NULL);
		jset(cj, "elapsed_seconds", jnum(c->elapsed_s));
		jset(cj, "note", jstr(c->note));
		jset(pred, "compression", cj);
	}
	if (s->auto_converge) {
		jset(pred, "max_throttle_percent", json_object_new_int((int)d->max_throttle));
		jset(pred, "throttled_seconds", jnum(d->throttled_s));
	}
	jset(pred, "not_modelled", jstr(d->not_modelled));
}

static struct json_object *row_json(const struct vm_row *row, int rank)
{
	struct json_object *o = json_object_new_object();
	const struct kvmstats_plan_vm *r = row->res;
	const struct kvmstats_estimate *e;
	struct json_object *ests;
	bool ok = r && !r->error && r->predicted;

	jset(o, "pid", json_object_new_int((int)row->pid));
	jset(o, "name", jstr(row->name));
	jset(o, "rank", ok ? json_object_new_int(rank) : NULL);
	if (!r) {		/* res is set exactly when p is */
		jset(o, "error", jstr(row->error));
		return o;
	}
	jset(o, "memory_bytes", ju64(r->memory_bytes));
	jset(o, "pages", ju64(r->pages));
	jset(o, "missing_pages", ju64(r->missing_pages));
	if (ok) {
		e = &r->est[r->method];
		jset(o, "method", jstr(
					       kvmstats_method_str(r->method)));
		jset(o, "zero_pages", ju64(e->zero_pages));
		jset(o, "nonzero_pages", ju64(e->nonzero_pages));
		jset(o, "unknown_pages", ju64(e->unknown_pages));
		jset(o, "zero_pages_interval",
				       interval_json(e->zero_lo, e->zero_hi));
		jset(o, "zero_ratio", jnum(e->pages ? (double)e->zero_pages /
								       (double)e->pages : 0));
		jset(o, "coverage", jnum(e->coverage));
		add_prediction(o, r);
		add_settings(json_object_object_get(o, "prediction"), row->p);
	}
	jset(o, "elapsed_seconds", jnum(r->elapsed_s));
	ests = json_object_new_array();
	for (int m = 0; m < KVMSTATS_METHOD_NR; m++)
		if (r->done & (1u << m))
			json_object_array_add(ests, estimate_json(&r->est[m]));
	jset(o, "estimates", ests);
	jset(o, "dirty", r->dirty_measured ? dirty_json(r) : NULL);
	jset(o, "pagemap", counts_json(&r->counts));
	jset(o, "ram", ram_json(kvmstats_plan__ram(row->p)));
	if (r->error)
		jset(o, "error", jstr(r->error_msg));
	return o;
}

static void print_json(struct cli *cli, struct vm_row *rows, size_t n)
{
	struct json_object *root = json_object_new_object();
	struct json_object *vms = json_object_new_array();

	for (size_t i = 0; i < n; i++)
		json_object_array_add(vms, row_json(&rows[i], (int)i + 1));
	jset(root, "vms", vms);
	cli_print_json(cli, root);
	json_object_put(root);
}

/* ---- table ---- */

static void human_bytes(double b, char *buf, size_t len)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int i = 0;

	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

static void human_secs(double s, char *buf, size_t len)
{
	if (!isfinite(s))
		snprintf(buf, len, "-");
	else if (s < 1e-3)
		snprintf(buf, len, "%.0f us", s * 1e6);
	else if (s < 1)
		snprintf(buf, len, "%.0f ms", s * 1e3);
	else
		snprintf(buf, len, "%.2f s", s);
}

/* The zero share as a bar of @w cells. */
static void zero_bar(double share, int w, char *buf, size_t len)
{
	int full = (int)lround(share * w);
	size_t used = 0;

	for (int i = 0; i < w && used + 4 < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s",
					 i < full ? "\u2588" : "\u00b7");
}

static void print_row(const struct vm_row *row, int rank)
{
	const struct kvmstats_plan_vm *r = row->res;
	const struct kvmstats_estimate *e;
	char mem[16], bar[64], dirty[20], xfer[16], secs[16], cost[16];
	double share;

	if (!row->p || r->error || !r->predicted) {
		/* (the reason is on stderr, once) */
		printf("%-4s %-7d %-16.16s not planned: see the error\n", "-",
		       (int)row->pid, safe_str(row->name));
		return;
	}
	e = &r->est[r->method];
	share = e->pages ? (double)e->zero_pages / (double)e->pages : 0;
	human_bytes((double)r->memory_bytes, mem, sizeof(mem));
	zero_bar(share, 12, bar, sizeof(bar));
	if (r->dirty_measured)
		human_bytes(r->dirty.pages_per_second * KVMSTATS_PAGE_SIZE, dirty,
			    sizeof(dirty) - 2);
	else
		snprintf(dirty, sizeof(dirty), "clean?");
	if (r->dirty_measured)
		strcat(dirty, "/s");
	human_bytes((double)r->pred.bytes, xfer, sizeof(xfer));
	human_secs(r->pred.seconds, secs, sizeof(secs));
	human_secs(r->elapsed_s, cost, sizeof(cost));
	printf("%-4d %-7d %-16.16s %10s %-7s %5.1f%% %5.1f%% %s %12s %10s %9s %-4s %9s\n",
	       rank, (int)r->pid, safe_str(r->name), mem, kvmstats_method_str(r->method),
	       100 * e->coverage, 100 * share, bar, dirty, xfer, secs,
	       r->pred.converges ? "yes" : "NO", cost);
}

/* -v: the settings the model used and where each came from. */
static void print_settings(const struct kvmstats_plan *p)
{
	const struct kvmstats_migrate_settings *s = kvmstats_plan__settings(p);
	const struct kvmstats_migrate_detail *d = kvmstats_plan__detail(p);
	char v[32];

	if (s->qemu_major)
		printf("  migration: %s, QEMU %u.%u, at %.1f MiB/s\n", d->mechanism,
		       s->qemu_major, s->qemu_minor, d->effective_bw / 1048576.0);
	else
		printf("  migration: %s, QEMU version unknown (7.2 assumed), at %.1f MiB/s\n",
		       d->mechanism, d->effective_bw / 1048576.0);
	for (int k = 0; k < KVMSTATS_MIG_NKEYS; k++) {
		kvmstats_migrate_settings__value(s, (enum kvmstats_mig_key)k, v, sizeof(v));
		printf("    %-26s %-12s (%s)\n", kvmstats_mig_key_str((enum kvmstats_mig_key)k),
		       v, kvmstats_mig_src_str(s->src[k]));
	}
	if (d->compress.note[0])
		printf("  compression: %s\n", d->compress.note);
	if (s->auto_converge)
		printf("  auto-converge: the guest's vCPUs throttled up to %u%% for %.2f s\n",
		       d->max_throttle, d->throttled_s);
	if (d->not_modelled[0])
		printf("  not modelled: %s\n", d->not_modelled);
}

static void print_estimates(const struct vm_row *row, bool verbose)
{
	const struct kvmstats_plan_vm *r = row->res;
	const struct kvmstats_ram *ram = kvmstats_plan__ram(row->p);
	char t[16], c[16];

	printf("\npid %d %s: %zu RAM region(s) via %s%s%s\n", (int)r->pid,
	       safe_str(r->name), kvmstats_ram__count(ram),
	       kvmstats_ram_how_str(kvmstats_ram__how(ram)),
	       kvmstats_ram__note(ram)[0] ? " - " : "", safe_str(kvmstats_ram__note(ram)));
	for (size_t i = 0; verbose && i < kvmstats_ram__count(ram); i++) {
		const struct kvmstats_ram_region *g = kvmstats_ram__region(ram, i);

		printf("  %" PRIx64 "-%" PRIx64 " %-22s %s\n", g->start, g->start + g->len,
		       safe_str(g->name), safe_str(g->why));
	}
	printf("  %-8s %7s %-27s %8s %10s %10s  %s\n", "METHOD", "ZERO", "  (95% / bounds)",
	       "COVERAGE", "TIME", "CPU", "NOTE");
	for (int m = 0; m < KVMSTATS_METHOD_NR; m++) {
		const struct kvmstats_estimate *e = &r->est[m];
		double pg = e->pages ? (double)e->pages : 1;

		if (!(r->done & (1u << m)))
			continue;
		human_secs(e->elapsed_s, t, sizeof(t));
		human_secs(e->cpu_s, c, sizeof(c));
		if (!e->valid) {
			printf("  %-8s %7s %-27s %8s %10s %10s  %s\n",
			       kvmstats_method_str(e->method), "-", "", "-", t, c, e->note);
			continue;
		}
		printf("  %-8s %6.2f%%  [%6.2f%% .. %6.2f%%]       %7.1f%% %10s %10s  %s\n",
		       kvmstats_method_str(e->method), 100 * (double)e->zero_pages / pg,
		       100 * e->zero_lo / pg, 100 * e->zero_hi / pg, 100 * e->coverage, t, c,
		       e->note);
	}
	if (r->dirty_measured)
		printf("  dirty: %.0f pages/s [%.0f .. %.0f] (%.1f MiB/s), %" PRIu64
		       " pages sampled\n", r->dirty.pages_per_second, r->dirty.lo, r->dirty.hi,
		       r->dirty.pages_per_second * KVMSTATS_PAGE_SIZE / 1048576.0,
		       r->dirty.sampled);
	if (r->predicted)
		printf("  model: %s at %.0f MiB/s (%s), downtime limit %.0f ms\n", r->pred.note,
		       r->bandwidth / 1048576.0, r->bandwidth_source, r->downtime_s * 1e3);
	if (r->predicted && verbose)
		print_settings(row->p);
}

/* Pages the VMM took away while the plan read them: unknown, so said. */
static void print_missing(const struct vm_row *rows, size_t n)
{
	bool first = true;

	for (size_t i = 0; i < n; i++) {
		const struct kvmstats_plan_vm *r = rows[i].res;
		char b[16];

		if (!rows[i].p || !r->missing_pages)
			continue;
		human_bytes((double)r->missing_pages * KVMSTATS_PAGE_SIZE, b, sizeof(b));
		printf("%spid %d: %" PRIu64 " pages (%s, %.2f%% of its RAM) went "
		       "missing while the plan read them (the VMM took them away); "
		       "counted as unknown\n", first ? "\n" : "", (int)r->pid,
		       r->missing_pages, b, r->pages ? 100.0 * (double)r->missing_pages /
		       (double)r->pages : 0);
		first = false;
	}
}

static void print_table(struct cli *cli, const struct plan_args *a,
			struct vm_row *rows, size_t n)
{
	bool detail = cli->verbose > 0 || __builtin_popcount(a->methods) > 1;

	if (!n) {
		if (!a->t.npids && target_warn_hidden(cli))
			printf("no VMM visible to uid %d; other users' VMMs are "
			       "hidden from it (run as root to see them)\n",
			       (int)geteuid());
		else
			printf("no VMM found; see 'kvmstats list'\n");
		return;
	}
	printf("%-4s %-7s %-16s %10s %-7s %6s %6s %-12s %12s %10s %9s %-4s %9s\n", "RANK",
	       "PID", "NAME", "MEMORY", "METHOD", "COVER", "ZERO", "", "DIRTY", "TRANSFER",
	       "TIME", "CONV", "PLAN_TOOK");
	for (size_t i = 0; i < n; i++)
		print_row(&rows[i], (int)i + 1);
	for (size_t i = 0; detail && i < n; i++)
		if (rows[i].p)
			print_estimates(&rows[i], cli->verbose > 0);
	for (size_t i = 0; i < n; i++)
		if (rows[i].p && rows[i].res->predicted &&
		    !kvmstats_plan__settings(rows[i].p)->qemu_major)
			printf("\npid %d: QEMU's migration settings were not read (%s): its "
			       "defaults (QEMU 7.2's) and the options were used\n",
			       (int)rows[i].pid,
			       kvmstats_ram__note(kvmstats_plan__ram(rows[i].p))[0] ?
				       safe_str(kvmstats_ram__note(kvmstats_plan__ram(rows[i].p))) :
				       "no QMP");
	for (size_t i = 0; i < n; i++)
		if (rows[i].p && rows[i].res->predicted &&
		    kvmstats_plan__detail(rows[i].p)->not_modelled[0])
			printf("\npid %d: on but not modelled: %s\n", (int)rows[i].pid,
			       kvmstats_plan__detail(rows[i].p)->not_modelled);
	print_missing(rows, n);
	if (a->interval == 0)
		printf("\n--interval 0: no dirty rate measured; the model assumed clean guests\n");
}

/* ---- the command ---- */

/* --qmp also asks QEMU for its RAM blocks, whatever --source reads. */
static int plan_check(struct cli *cli, void *ctx)
{
	struct plan_args *a = ctx;

	return target_args_check(cli, &a->t, true);
}

static const struct cli_opt plan_opts[] = {
	{ "method", OPT_METHOD, 0, "M[,M...]", "scan",
	  "how zero pages are estimated: stats, pagemap, sample, scan, all" },
	{ "interval", OPT_INTERVAL, 0, "SECONDS", "1",
	  "the dirty rate is measured over this long; 0: clean guests" },
	{ "bandwidth", OPT_BANDWIDTH, 0, "BYTES/S", "QEMU's, else 128M",
	  "migration bandwidth (suffix K, M or G)" },
	{ "downtime", OPT_DOWNTIME, 0, "MS", "QEMU's, else 300",
	  "downtime limit of the model" },
	{ "max-cpu", OPT_MAX_CPU, 0, "N", "1",
	  "CPU budget of a scan, in cores (0.5: half a core)" },
	{ "rate", OPT_RATE, 0, "MIB/S", "none",
	  "guest memory read per second by a scan, at most" },
	{ "region", OPT_REGION, 0, "[PID:]START-END", "QEMU's RAM blocks",
	  "guest RAM is these ranges of the VMM (repeatable)" },
	{ "pagemap", OPT_PAGEMAP, 0, "MODE", "auto",
	  "classify with PAGEMAP_SCAN (scan), pagemap entries (read), or auto" },
	{ "seed", OPT_SEED, 0, "N", "from the clock",
	  "seed of the random samples, for reproducible output" },
	{ "parallel", OPT_PARALLEL, 0, "N", "QEMU's",
	  "the migration will use multifd with N channels (virsh --parallel)" },
	{ "compressed", OPT_COMPRESSED, 0, "zlib|zstd", "QEMU's",
	  "multifd will compress with this (virsh --compressed)" },
	{ "auto-converge", OPT_AUTO_CONVERGE, 0, NULL, NULL,
	  "the migration will auto-converge (its CPU throttle is modelled)" },
	{ "postcopy", OPT_POSTCOPY, 0, NULL, NULL,
	  "the migration may switch to post-copy (not modelled yet: said so)" },
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
	struct plan_args a = { .interval = 1, .methods = 1u << KVMSTATS_METHOD_SCAN,
		.mig = { .sz = sizeof(a.mig), .compress = -1, .auto_converge = -1,
			 .postcopy = -1 } };
	struct kvmstats_range *ranges = NULL;
	struct vm_row *rows = NULL;
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
	if (!rows)
		goto out;
	for (int i = 0; i < n; i++) {
		rows[i].pid = pids[i];
		open_row(cli, &a, &rows[i], ranges);
	}
	if (a.methods & (1u << KVMSTATS_METHOD_STATS))
		read_stats(cli, &a, rows, (size_t)n);
	estimate_all(cli, &a, rows, (size_t)n);
	dirty_all(&a, rows, (size_t)n);
	for (int i = 0; i < n; i++)
		if (rows[i].p)
			kvmstats_plan__predict(rows[i].p);
	qsort(rows, (size_t)n, sizeof(*rows), cmp_rows);
	for (int i = 0; i < n; i++) {
		failed += !rows[i].p || rows[i].res->error;
		if (!rows[i].p)
			cli_err(cli, "%s", rows[i].error);	/* names the pid */
		else if (rows[i].res->error)
			cli_err(cli, "pid %d: %s", (int)rows[i].pid, rows[i].res->error_msg);
	}
	if (cli->format == OUT_JSON)
		print_json(cli, rows, (size_t)n);
	else
		print_table(cli, &a, rows, (size_t)n);
	ret = failed ? EXIT_FAIL : EXIT_OK;
out:
	for (int i = 0; rows && i < n; i++)
		kvmstats_plan__free(rows[i].p);
	free(rows);
	free(pids);
	free(ranges);
	free(a.regions);
	target_args_free(&a.t);
	return ret;
}
