// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats drain: the schedule that empties this host.
 *
 * Each VM is planned as `kvmstats plan` plans it (its zero pages, its
 * dirty rate over --interval, all VMs in the same interval, its own
 * migration settings); then the library's drain scheduler runs the
 * migrations --parallel-migrations at a time through --link and picks
 * the order (drain_out.c prints it).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "drain.h"
#include "plan_args.h"

enum {
	OPT_LINK = OPT_PLAN_CMD_BASE,
	OPT_PARALLEL_MIGRATIONS,
	OPT_ORDER,
	OPT_ABORT_AFTER,
};

/* 0, or -1 on a bad value (reported). */
static int drain_opt(struct cli *cli, void *ctx, int c, const char *arg)
{
	struct drain_args *a = ctx;
	int used = cli_target_opt(cli, &a->t, c, arg);
	long v;

	if (!used)
		used = plan_common_opt(cli, &a->pc, c, arg);
	if (used < 0)
		return -1;
	if (c == OPT_PLAN_METHOD && (a->pc.methods & (1u << KVMSTATS_METHOD_STATS))) {
		cli_err(cli, "--method: stats is not one of drain's (pagemap, sample, scan)");
		return -1;
	}
	if (used)
		return 0;
	switch (c) {
	case OPT_LINK:
		return plan_parse_rate(cli, "--link", arg, &a->link) ? 0 : -1;
	case OPT_PARALLEL_MIGRATIONS:
		v = cli_parse_long(cli, "--parallel-migrations", arg, 1, 64);
		if (v < 0)
			return -1;
		a->parallel = (uint32_t)v;
		return 0;
	case OPT_ORDER:
		a->order = kvmstats_drain_order_parse(arg);
		if (a->order >= 0)
			return 0;
		cli_err(cli, "--order: what is '%s'? (plan, largest-first, smallest-first)", arg);
		return -1;
	case OPT_ABORT_AFTER:
		return plan_parse_double(cli, "--abort-after", arg, 0, &a->abort) ? 0 : -1;
	}
	return 0;
}

static int drain_check(struct cli *cli, void *ctx)
{
	struct drain_args *a = ctx;

	if (!(a->link > 0))
		return cli_bad(cli, "--link BYTES/S is needed: the bandwidth the drain "
			       "may use in total");
	return target_args_check(cli, &a->t, true);
}

/* ---- each VM's plan ---- */

static void open_vm(const struct drain_args *a, struct drain_vm *v,
		    struct kvmstats_libvirt_guard *guard)
{
	struct kvmstats_ram_opts ro = {
		.sz = sizeof(ro), .qmp_path = a->t.npids == 1 ? a->t.qmp : NULL,
		.timeout_ms = a->t.timeout_ms,
	};
	struct kvmstats_plan_opts po = {
		.sz = sizeof(po), .ram = &ro, .libvirt_uri = a->t.libvirt_uri,
		.libvirt_guard = guard, .link_bw = a->link,
	};

	plan_common_fill(&a->pc, &po);
	kvmstats_proc__name(v->pid, v->name, sizeof(v->name));
	v->p = kvmstats_plan__new(v->pid, &po, v->error, sizeof(v->error));
	if (!v->p && !v->error[0])
		snprintf(v->error, sizeof(v->error), "pid %d: %s", (int)v->pid,
			 strerror(errno));
	if (!v->p)
		return;
	kvmstats_plan__set_overrides(v->p, &a->pc.mig);
	v->res = kvmstats_plan__result(v->p);
}

/* Zero pages, then every VM measured as `plan` measures it; @plans
 * has room for @n. */
static void plan_all(const struct drain_args *a, struct drain_vm *vms,
		     struct kvmstats_plan **plans, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		plans[i] = vms[i].p;
		if (vms[i].p)
			kvmstats_plan__estimate(vms[i].p);
	}
	plan_measure(plans, n, a->pc.interval, NULL, NULL);
}

/* ---- the drain's input ---- */

int drain_input_of(struct kvmstats_plan *p, const char *name,
		   struct kvmstats_drain_vm *out)
{
	const struct kvmstats_plan_vm *r = kvmstats_plan__result(p);
	const struct kvmstats_ram *ram = kvmstats_plan__ram(p);
	const struct kvmstats_estimate *e = &r->est[r->method];
	const struct kvmstats_migrate_detail *d = kvmstats_plan__detail(p);
	struct kvmstats_migrate_prediction legacy;
	uint64_t names = 0;

	for (size_t i = 0; i < kvmstats_ram__count(ram); i++)
		names += strlen(kvmstats_ram__region(ram, i)->name);
	memset(out, 0, sizeof(*out));
	out->pid = r->pid;
	out->name = name;
	out->memory_bytes = r->memory_bytes;
	out->model = (struct kvmstats_migrate_input){
		.sz = sizeof(out->model), .zero_pages = e->zero_pages,
		.nonzero_pages = e->nonzero_pages, .unknown_pages = e->unknown_pages,
		.nblocks = (uint32_t)kvmstats_ram__count(ram), .block_name_bytes = names,
		.curve = r->dirty_measured ? r->dirty.points : NULL,
		.npoints = r->dirty_measured ? r->dirty.npoints : 0,
		.tail = r->tail, .ntail = r->ntail,
	};
	/* The zero test as the plan modelled it (its testers included): the
	 * schedule paces each pass by it, so it is not setup time. */
	out->model.walk_rate = d->walk_rate;
	/* Alone, its stop-and-copy has the whole link (--link). */
	out->model.link_bw = d->link_bw;
	out->max_bandwidth = d->effective_bw > 0 ? d->effective_bw : r->bandwidth;
	out->downtime_s = r->downtime_s;
	out->model.bandwidth = out->max_bandwidth;
	out->model.downtime_s = r->downtime_s;
	if (kvmstats_migrate__predict(&out->model, &legacy))
		return -EINVAL;
	out->setup_s = fmax(0, r->pred.seconds - legacy.seconds);
	if (!r->pred.converges || !legacy.converges)
		out->setup_s = 0;
	return 0;
}

/* Would auto-converge move it, at the bandwidth it would have alone?
 * The plan is re-predicted with it, then put back as it was. */
static void try_auto_converge(const struct drain_args *a, struct drain_vm *v, double bw)
{
	struct kvmstats_migrate_overrides o = a->pc.mig;
	const struct kvmstats_migrate_detail *d;

	if (a->pc.mig.auto_converge == 1)
		return;
	o.auto_converge = 1;
	o.bandwidth = bw;
	if (kvmstats_plan__set_overrides(v->p, &o) || kvmstats_plan__predict(v->p))
		goto out;
	d = kvmstats_plan__detail(v->p);
	v->ac_tried = true;
	v->ac_converges = v->res->pred.converges;
	v->ac_seconds = v->res->pred.seconds;
	v->ac_throttle = d->max_throttle;
	v->ac_throttled_s = d->throttled_s;
out:
	kvmstats_plan__set_overrides(v->p, &a->pc.mig);
	kvmstats_plan__predict(v->p);
}

static struct kvmstats_drain *schedule(const struct drain_args *a, struct drain_vm *vms,
				       size_t n, size_t *nin)
{
	struct kvmstats_drain_vm *in = calloc(n ? n : 1, sizeof(*in));
	struct kvmstats_drain *d = NULL;
	size_t k = 0;

	if (!in)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (!vms[i].p || vms[i].res->error || !vms[i].res->predicted)
			continue;
		if (!drain_input_of(vms[i].p, vms[i].name, &in[k]))
			vms[i].input = (int)k++;
	}
	*nin = k;
	if (k)
		d = kvmstats_drain__new(in, k, sizeof(*in), &(struct kvmstats_drain_opts){
			.sz = sizeof(struct kvmstats_drain_opts), .link = a->link,
			.parallel = a->parallel, .order = (enum kvmstats_drain_order)a->order,
			.abort_s_per_gib = a->abort > 0 ? a->abort : -1 });
	for (size_t i = 0; d && i < k; i++) {
		const struct kvmstats_drain_slot *s = kvmstats_drain__slot(d, i);
		struct drain_vm *v = NULL;

		for (size_t j = 0; j < n; j++)
			if (vms[j].input == (int)s->index)
				v = &vms[j];
		if (v && !s->converges)
			try_auto_converge(a, v, fmin(in[s->index].max_bandwidth, a->link));
	}
	free(in);
	return d;
}

/* ---- the command ---- */

static const struct cli_opt drain_opts[] = {
	{ "link", OPT_LINK, 0, "BYTES/S", "none: needed",
	  "bandwidth the whole drain may use (suffix K, M or G)" },
	{ "parallel-migrations", OPT_PARALLEL_MIGRATIONS, 0, "N", "2",
	  "migrations at a time" },
	{ "order", OPT_ORDER, 0, "ORDER", "plan",
	  "plan (the shortest drain), largest-first or smallest-first" },
	{ "abort-after", OPT_ABORT_AFTER, 0, "S_PER_GIB", "150",
	  "a migration not done after this many seconds per GiB is aborted; 0: never" },
	{ "method", OPT_PLAN_METHOD, 0, "M[,M...]", "scan",
	  "how zero pages are estimated: pagemap, sample, scan" },
	{ "interval", OPT_PLAN_INTERVAL, 0, "SECONDS", "1",
	  "the dirty rate is measured over this long; 0: clean guests" },
	{ "bandwidth", OPT_PLAN_BANDWIDTH, 0, "BYTES/S", "QEMU's, else 128M",
	  "each migration's own bandwidth limit (suffix K, M or G)" },
	{ "downtime", OPT_PLAN_DOWNTIME, 0, "MS", "QEMU's, else 300",
	  "downtime limit of each migration" },
	{ "pagemap-timeout", OPT_PLAN_PAGEMAP_TIMEOUT, 0, "SECONDS", "10",
	  "pages not classified by then are unknown (at most 600)" },
	{ "seed", OPT_PLAN_SEED, 0, "N", "from the clock",
	  "seed of the random samples, for reproducible output" },
	{ "parallel", OPT_PLAN_PARALLEL, 0, "N", "QEMU's",
	  "the migrations will use multifd with N channels (virsh --parallel)" },
	{ "compressed", OPT_PLAN_COMPRESSED, 0, "zlib|zstd", "QEMU's",
	  "multifd will compress with this (virsh --compressed)" },
	{ "auto-converge", OPT_PLAN_AUTO_CONVERGE, 0, NULL, NULL,
	  "the migrations will auto-converge" },
	{ "postcopy", OPT_PLAN_POSTCOPY, 0, NULL, NULL,
	  "the migrations may switch to post-copy (not modelled: said so)" },
	{ "verbose", 'v', CLI_OPT_SHORT, NULL, NULL,
	  "each migration's bandwidth shares over time" },
	CLI_OPT_PID("only this VMM process (repeatable)"),
	CLI_OPT_NAME("only VMMs whose name matches (QEMU's -name, else the "
		     "process name)"),
	{ "qmp", OPT_QMP, 0, "PATH", "from QEMU's command line",
	  "the QMP socket of the one --pid given" },
	CLI_OPT_QMP_TIMEOUT,
	{ 0 },
};

static const struct cli_spec drain_spec = {
	.cmd = "drain",
	.outputs = CLI_OUT_JSON,
	.text = "a table",
	.about = "The schedule that empties this host: every VM planned as plan "
		 "plans it, then\nmigrated --parallel-migrations at a time through "
		 "one --link; the order,\neach migration's start, end and "
		 "bandwidth share, the total time and the VMs\nthat will not "
		 "converge. Guest memory is only read, never written.",
	.opts = drain_opts,
	.opt = drain_opt,
	.check = drain_check,
};

int cmd_drain(struct cli *cli, int argc, char **argv)
{
	struct drain_args a = { .pc = PLAN_COMMON_INIT(a.pc), .parallel = 2,
		.order = KVMSTATS_DRAIN_ORDER_PLAN, .abort = 150 };
	struct kvmstats_drain *d = NULL;
	struct drain_vm *vms = NULL;
	struct kvmstats_plan **plans = NULL;
	struct kvmstats_libvirt_guard *guard;
	pid_t *pids = NULL;
	size_t nin = 0;
	int n = 0, ret, failed = 0;

	if (target_args_init(&a.t, argc))
		return EXIT_FAIL;
	ret = cli_parse(cli, &drain_spec, &a, argc, argv);
	if (ret != CLI_PARSED)
		goto out;
	ret = EXIT_FAIL;
	n = plan_select_pids(cli, &a.t, &pids);
	if (n < 0)
		goto out;
	vms = calloc((size_t)n + 1, sizeof(*vms));
	plans = calloc((size_t)n + 1, sizeof(*plans));
	if (!vms || !plans)
		goto out;
	/* A hung libvirtd costs the drain one timeout, not one per VM. */
	guard = kvmstats_libvirt_guard__new();
	for (int i = 0; i < n; i++) {
		vms[i].pid = pids[i];
		vms[i].input = -1;
		open_vm(&a, &vms[i], guard);
	}
	kvmstats_libvirt_guard__free(guard);
	plan_all(&a, vms, plans, (size_t)n);
	for (int i = 0; i < n; i++) {
		failed += !vms[i].p || vms[i].res->error;
		if (!vms[i].p)
			cli_err(cli, "%s", vms[i].error);
		else if (vms[i].res->error)
			cli_err(cli, "pid %d: %s", (int)vms[i].pid, vms[i].res->error_msg);
	}
	d = schedule(&a, vms, (size_t)n, &nin);
	if (nin && !d) {
		cli_err(cli, "scheduling: %s", strerror(errno));
		goto out;
	}
	if (!n)
		cli_warn(cli, "no VMM to drain%s", a.t.name_set ? " matches --name" : "");
	drain_print(cli, &a, d, vms, (size_t)n);
	ret = failed ? EXIT_FAIL : EXIT_OK;
out:
	kvmstats_drain__free(d);
	for (int i = 0; vms && i < n; i++)
		kvmstats_plan__free(vms[i].p);
	free(vms);
	free(plans);
	free(pids);
	target_args_free(&a.t);
	return ret;
}
