// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats list: every VMM process on the host (a process holding a KVM
 * VM fd), its VMs and vCPUs, its name, its guest memory where a source
 * knows it, and which sources can read it.
 *
 * The sources are probed (cheap, nothing is asked of the VMM), then the
 * host is opened as every other command would open it, to say which
 * source `auto` actually picks; QEMU's monitor is asked for the memory
 * size when the picked source does not know it.
 */
#include <errno.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <stdio.h>
#include <inttypes.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "sanitize.h"


struct vmm_row {
	pid_t pid;
	char name[128];
	int vms, vcpus;
	uint64_t memory;
	const char *source;	/* what auto picked, or NULL */
	const char *sources[8];
	int nsources;
	/* Per level, of its first VM (static names, or NULL: none). */
	const char *vm_source, *vcpu_source;
	char vm_why[512];	/* why no source has its VM stats */
	bool has_qmp;
	struct kvmstats_qmp_info qmp;
	bool gone;		/* exited while we looked */
};

static void count_fds(struct vmm_row *row)
{
	struct kvmstats_proc_fd *fds;
	int n = kvmstats_proc__kvm_fds(row->pid, &fds);

	if (n < 0) {
		row->gone = true;
		return;
	}
	for (int i = 0; i < n; i++) {
		row->vms += fds[i].kind == KVMSTATS_FD_VM;
		row->vcpus += fds[i].kind == KVMSTATS_FD_VCPU;
	}
	free(fds);
}

static struct kvmstats_host_opts host_opts(const struct target_args *a,
					   const char *source, const pid_t *pids,
					   size_t npids)
{
	return (struct kvmstats_host_opts){
		.sz = sizeof(struct kvmstats_host_opts),
		.pids = pids, .npids = npids, .source = source,
		.flags = a->flags, .qmp_path = a->qmp,
		.libvirt_uri = a->libvirt_uri, .timeout_ms = a->timeout_ms,
	};
}

static void probe_sources(struct cli *cli, const struct target_args *a,
			  struct vmm_row *row)
{
	struct kvmstats_host_opts o = host_opts(a, NULL, &row->pid, 1);

	for (const char *const *s = kvmstats_sources(); *s; s++) {
		/* attach stops threads of the VMM for a moment: only when the
		 * user allowed it. */
		if (!strcmp(*s, "attach") && !(a->flags & KVMSTATS_HOST_ATTACH))
			continue;
		if (row->nsources < (int)(sizeof(row->sources) / sizeof(row->sources[0])) &&
		    kvmstats_source__probe(cli->ctx, *s, row->pid, &o))
			row->sources[row->nsources++] = *s;
	}
}

static bool has_source(const struct vmm_row *row, const char *s)
{
	for (int i = 0; i < row->nsources; i++)
		if (!strcmp(row->sources[i], s))
			return true;
	return false;
}

/* Memory from QEMU's monitor, for a VMM read through another source. */
static uint64_t qmp_memory(struct cli *cli, const struct target_args *a,
			   pid_t pid)
{
	struct kvmstats_host_opts o = host_opts(a, "qmp", &pid, 1);
	struct kvmstats_host *h = kvmstats_host__new(cli->ctx, &o);
	uint64_t bytes = 0;

	if (h && kvmstats_host__refresh(h) > 0 && kvmstats_host__num_vmms(h))
		bytes = kvmstats_vmm__memory_bytes(kvmstats_host__vmm(h, 0));
	kvmstats_host__free(h);
	return bytes;
}

/* Which source serves each level, and what QMP said. */
static void take_levels(struct vmm_row *row, const struct kvmstats_vmm *v)
{
	const struct kvmstats_vm *vm = kvmstats_vmm__vm(v, 0);

	if (vm) {
		row->vm_source = kvmstats_vm__source(vm, KVMSTATS_LEVEL_VM);
		row->vcpu_source = kvmstats_vm__source(vm, KVMSTATS_LEVEL_VCPU);
		snprintf(row->vm_why, sizeof(row->vm_why), "%s",
			 kvmstats_vm__why_none(vm, KVMSTATS_LEVEL_VM));
	}
	row->qmp.sz = sizeof(row->qmp);
	row->has_qmp = !kvmstats_vmm__qmp_info(v, &row->qmp);
}

/* Open the rows' VMMs the way every command does: which source wins. */
static int open_host(struct cli *cli, const struct target_args *a,
		     struct vmm_row *rows, size_t n)
{
	struct kvmstats_host *h = target_host_new(cli, a);
	int err;

	if (!h)
		return -1;
	err = kvmstats_host__refresh(h);
	if (err < 0) {
		cli_err(cli, "scanning the host: %s", strerror(-err));
		kvmstats_host__free(h);
		return -1;
	}
	target_report_errors(cli, h);
	for (size_t i = 0; i < kvmstats_host__num_vmms(h); i++) {
		struct kvmstats_vmm *v = kvmstats_host__vmm(h, i);

		for (size_t j = 0; j < n; j++) {
			if (rows[j].pid != kvmstats_vmm__pid(v))
				continue;
			/* The library's static names outlive the host. */
			rows[j].source = kvmstats_vmm__source(v);
			rows[j].memory = kvmstats_vmm__memory_bytes(v);
			take_levels(&rows[j], v);
		}
	}
	kvmstats_host__free(h);
	for (size_t j = 0; j < n; j++)
		if (!rows[j].memory && has_source(&rows[j], "qmp") &&
		    (!rows[j].source || strcmp(rows[j].source, "qmp")))
			rows[j].memory = qmp_memory(cli, a, rows[j].pid);
	return 0;
}

static struct json_object *str_or_null(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

/* What the qmp source learnt: QEMU's version, and in which order it
 * lists histogram buckets and how that is known. */
static struct json_object *qmp_json(const struct kvmstats_qmp_info *q)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "socket", json_object_new_string(q->socket));
	json_object_object_add(o, "qemu_version",
			       json_object_new_string(q->qemu_version));
	json_object_object_add(o, "hist_order", json_object_new_string(
		q->hist_reversed ? "reversed" : "kernel"));
	json_object_object_add(o, "hist_order_from",
			       str_or_null(q->hist_order_from));
	return o;
}

static struct json_object *row_json(const struct vmm_row *row)
{
	struct json_object *o = json_object_new_object();
	struct json_object *src = json_object_new_array();

	json_object_object_add(o, "pid", json_object_new_int(row->pid));
	json_object_object_add(o, "name", json_object_new_string(row->name));
	json_object_object_add(o, "vms", json_object_new_int(row->vms));
	json_object_object_add(o, "vcpus", json_object_new_int(row->vcpus));
	json_object_object_add(o, "memory_bytes",
			       row->memory ? json_object_new_uint64(row->memory)
					   : NULL);
	for (int i = 0; i < row->nsources; i++)
		json_object_array_add(src, json_object_new_string(row->sources[i]));
	json_object_object_add(o, "sources", src);
	json_object_object_add(o, "source", str_or_null(row->source));
	json_object_object_add(o, "vm_source", str_or_null(row->vm_source));
	json_object_object_add(o, "vcpu_source", str_or_null(row->vcpu_source));
	if (row->source && !row->vm_source)
		json_object_object_add(o, "vm_unavailable",
				       json_object_new_string(row->vm_why));
	if (row->has_qmp)
		json_object_object_add(o, "qmp", qmp_json(&row->qmp));
	return o;
}

static void print_json(struct cli *cli, const struct vmm_row *rows, size_t n)
{
	struct json_object *arr = json_object_new_array();

	for (size_t i = 0; i < n; i++)
		if (!rows[i].gone)
			json_object_array_add(arr, row_json(&rows[i]));
	cli_print_json(cli, arr);
	json_object_put(arr);
}

struct cells {
	char pid[16], vms[16], vcpus[16], mem[32], sources[64], levels[32];
};

static void row_cells(const struct vmm_row *row, struct cells *c)
{
	size_t used = 0;

	snprintf(c->pid, sizeof(c->pid), "%d", (int)row->pid);
	snprintf(c->vms, sizeof(c->vms), "%d", row->vms);
	snprintf(c->vcpus, sizeof(c->vcpus), "%d", row->vcpus);
	if (row->memory)
		kvmstats_format_unit(KVMSTATS_UNIT_BYTES, (double)row->memory,
				     c->mem, sizeof(c->mem));
	else
		snprintf(c->mem, sizeof(c->mem), "-");
	c->sources[0] = 0;
	for (int i = 0; i < row->nsources && used < sizeof(c->sources); i++)
		used += (size_t)snprintf(c->sources + used, sizeof(c->sources) - used,
					 "%s%s", i ? "," : "", row->sources[i]);
	if (!row->nsources)
		snprintf(c->sources, sizeof(c->sources), "-");
	snprintf(c->levels, sizeof(c->levels), "%s/%s",
		 row->vm_source ? row->vm_source : "-",
		 row->vcpu_source ? row->vcpu_source : "-");
}

#define WIDEN(w, s) ((w) = (int)strlen(s) > (w) ? (int)strlen(s) : (w))

static void print_table(const struct vmm_row *rows, size_t n)
{
	int wp = 3, wn = 4, wm = 6, ws = 6, wl = 7;
	struct cells c;

	for (size_t i = 0; i < n; i++) {
		if (rows[i].gone)
			continue;
		row_cells(&rows[i], &c);
		WIDEN(wp, c.pid);
		WIDEN(wn, safe_str(rows[i].name));
		WIDEN(wm, c.mem);
		WIDEN(ws, rows[i].source ? rows[i].source : "-");
		WIDEN(wl, c.levels);
	}
	printf("%*s  %-*s  %3s  %5s  %*s  %-*s  %-*s  %s\n", wp, "PID", wn,
	       "NAME", "VMS", "VCPUS", wm, "MEMORY", ws, "SOURCE", wl, "VM/VCPU",
	       "SOURCES");
	for (size_t i = 0; i < n; i++) {
		if (rows[i].gone)
			continue;
		row_cells(&rows[i], &c);
		printf("%*s  %-*s  %3s  %5s  %*s  %-*s  %-*s  %s\n", wp, c.pid, wn,
		       safe_str(rows[i].name), c.vms, c.vcpus, wm, c.mem, ws,
		       rows[i].source ? rows[i].source : "-", wl, c.levels,
		       c.sources);
	}
}

/* One row per VMM, the table's columns with raw values: memory in bytes
 * (empty when unknown), the sources that can read it as one field. */
static void print_csv(const struct vmm_row *rows, size_t n)
{
	static const char *const head[] = {
		"pid", "name", "vms", "vcpus", "memory_bytes", "source",
		"vm_source", "vcpu_source", "sources",
	};
	struct csv c = { .f = stdout };
	struct cells cl;

	for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
		csv_field(&c, head[i]);
	csv_end(&c);
	for (size_t i = 0; i < n; i++) {
		const struct vmm_row *r = &rows[i];

		if (r->gone)
			continue;
		row_cells(r, &cl);
		csv_int(&c, r->pid);
		csv_field(&c, r->name);
		csv_int(&c, r->vms);
		csv_int(&c, r->vcpus);
		if (r->memory)
			csv_u64(&c, r->memory);
		else
			csv_empty(&c);
		csv_field(&c, r->source ? r->source : "");
		csv_field(&c, r->vm_source ? r->vm_source : "");
		csv_field(&c, r->vcpu_source ? r->vcpu_source : "");
		csv_field(&c, r->nsources ? cl.sources : "");
		csv_end(&c);
	}
}

/* Stats fds the VMM holds: -1 when its fds cannot be listed. */
static int held_stats_fds(pid_t pid)
{
	struct kvmstats_proc_fd *fds;
	int n = kvmstats_proc__kvm_fds(pid, &fds), held = 0;

	if (n < 0)
		return -1;
	for (int i = 0; i < n; i++)
		held += fds[i].kind == KVMSTATS_FD_VM_STATS ||
			fds[i].kind == KVMSTATS_FD_VCPU_STATS;
	free(fds);
	return held;
}

/* debugfs for @pid: 0 counters readable, -ENOENT not mounted (or no
 * directory for it), -EPERM the kernel refuses the counter files. */
static int debugfs_state(pid_t pid)
{
	char path[128];
	struct statfs sf;
	uint64_t v;
	FILE *f;
	glob_t g;
	int ret = -ENOENT;

	if (statfs("/sys/kernel/debug/kvm", &sf) || sf.f_type != DEBUGFS_MAGIC)
		return -ENOENT;
	snprintf(path, sizeof(path), "/sys/kernel/debug/kvm/%d-*/exits", (int)pid);
	if (glob(path, 0, NULL, &g))
		return -ENOENT;
	f = fopen(g.gl_pathv[0], "re");
	if (!f)
		ret = errno == EPERM || errno == EACCES ? -EPERM : -errno;
	else
		ret = fscanf(f, "%" SCNu64, &v) == 1 ? 0 : -EPERM;
	if (f)
		fclose(f);
	globfree(&g);
	return ret;
}

/* May we ptrace @pid (what --attach needs)? Root, or its owner. */
static bool may_attach(pid_t pid)
{
	char path[32];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	return !geteuid() || (!stat(path, &st) && st.st_uid == geteuid());
}

/* --verbose: every source, whether it can read this VMM, and if not why
 * and what would. */
static void print_sources(const struct target_args *a, const struct vmm_row *r)
{
	int held = held_stats_fds(r->pid), dfs = debugfs_state(r->pid);
	bool counters = false;

	printf("  sources tried:\n");
	if (held < 0)
		printf("    fd: its fds cannot be listed by uid %d: run as root "
		       "(or with CAP_SYS_PTRACE)\n", (int)geteuid());
	else if (held)
		printf("    fd: it holds %d stats fd%s\n", held, held == 1 ? "" : "s");
	else
		printf("    fd: it holds no stats fd (QEMU up to 8.0 opens them "
		       "per query; 8.1+ holds its vCPUs' only)\n");
	counters |= held > 0;
	if (a->flags & KVMSTATS_HOST_ATTACH)
		printf("    attach: %s\n", has_source(r, "attach") ?
		       "it can be made to hand over its stats fds" :
		       "refused (see the error above)");
	else
		printf("    attach: not tried: --attach makes the VMM hand over "
		       "its stats fds (one thread held for a moment)%s\n",
		       may_attach(r->pid) ? "" : "; needs root or CAP_SYS_PTRACE");
	counters |= has_source(r, "attach");
	printf("    qmp: %s\n", has_source(r, "qmp") ?
	       "a QMP socket on its command line, or --qmp, can be used" :
	       "no QMP socket it names can be used (--qmp PATH gives one)");
	counters |= has_source(r, "qmp");
	printf("    libvirt: %s\n", has_source(r, "libvirt") ?
	       "a libvirt domain" : "not a libvirt domain this user can ask");
	counters |= has_source(r, "libvirt");
	if (dfs == -ENOENT)
		printf("    debugfs: not mounted (mount -t debugfs none "
		       "/sys/kernel/debug; the vCPUs summed)\n");
	else if (dfs == -EPERM)
		printf("    debugfs: the kernel refuses its counter files "
		       "(lockdown): every counter would be unknown\n");
	else
		printf("    debugfs: readable (the vCPUs summed)\n");
	if (counters || !dfs)
		return;
	if (may_attach(r->pid))
		printf("  counters: none of the sources tried reads them; "
		       "--attach would\n");
	else
		printf("  counters: none of the sources tried reads them; as "
		       "root (or with CAP_SYS_PTRACE), --attach would\n");
}

/* --verbose: per VMM, the sources of each level and what QMP said. */
static void print_details(const struct target_args *a,
			  const struct vmm_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct vmm_row *r = &rows[i];

		if (r->gone)
			continue;
		printf("\npid %d (%s):\n  VM stats: %s\n  vCPU stats: %s\n",
		       (int)r->pid, safe_str(r->name), r->vm_source ? r->vm_source : "none",
		       r->vcpu_source ? r->vcpu_source : "none");
		if (!r->vm_source && r->vm_why[0])
			printf("  no VM stats because: %s\n", safe_str(r->vm_why));
		print_sources(a, r);
		if (!r->has_qmp)
			continue;
		printf("  QMP: socket %s, QEMU %s\n  histograms: QEMU lists "
		       "buckets %s; %s\n", safe_str(r->qmp.socket),
		       r->qmp.qemu_version[0] ? safe_str(r->qmp.qemu_version) : "(version unknown)",
		       r->qmp.hist_reversed ? "last first (put back in order)"
					    : "in the kernel's order",
		       !strcmp(r->qmp.hist_order_from, "kernel") ?
			       "checked against the kernel's stats fds, once per QEMU binary" :
		       !strcmp(r->qmp.hist_order_from, "version") ?
			       "the known order of this QEMU release" :
			       "assumed: a release newer than those known");
	}
}

/* The VMMs to list: every one, or those asked for (which must be). */
static int collect(struct cli *cli, const struct target_args *a,
		   struct vmm_row **out, size_t *n)
{
	pid_t *pids = NULL;
	int np, bad = 0;
	struct vmm_row *rows;

	np = kvmstats_proc__vmm_pids(&pids);
	if (np < 0) {
		cli_err(cli, "listing processes: %s", strerror(-np));
		return -1;
	}
	rows = calloc((size_t)np + a->npids + 1, sizeof(*rows));
	if (!rows) {
		free(pids);
		cli_err(cli, "out of memory");
		return -1;
	}
	*n = 0;
	if (a->npids) {
		for (size_t i = 0; i < a->npids; i++) {
			bool vmm = false;

			for (int j = 0; j < np; j++)
				vmm |= pids[j] == a->pids[i];
			if (!vmm && target_pid_hidden(a->pids[i])) {
				cli_err(cli, "pid %d: its fds cannot be seen by uid %d "
					"(not root, no CAP_SYS_PTRACE): run as root "
					"to see whether it is a VMM",
					(int)a->pids[i], (int)geteuid());
				bad++;
				continue;
			}
			if (!vmm) {
				cli_err(cli, "pid %d is not a VMM (it holds no KVM VM fd)",
					(int)a->pids[i]);
				bad++;
				continue;
			}
			rows[(*n)++].pid = a->pids[i];
		}
	} else {
		for (int j = 0; j < np; j++)
			rows[(*n)++].pid = pids[j];
	}
	free(pids);
	*out = rows;
	return bad;
}

static int list_opt(struct cli *cli, void *ctx, int key, const char *arg)
{
	return cli_target_opt(cli, ctx, key, arg) < 0 ? -1 : 0;
}

/* --qmp tells memory even with another --source. */
static int list_check(struct cli *cli, void *ctx)
{
	return target_args_check(cli, ctx, true);
}

static const struct cli_opt list_opts[] = {
	CLI_OPT_PID("only this VMM (repeatable); one that holds no VM fd is "
		    "an error"),
	CLI_OPT_NAME("only VMMs whose name matches"),
	CLI_OPTS_SOURCE,
	{ "verbose", 'v', CLI_OPT_SHORT, NULL, NULL,
	  "per VMM: the source of each level and why, what QMP said" },
	{ 0 },
};

static const struct cli_spec list_spec = {
	.cmd = "list",
	.outputs = CLI_OUT_JSON | CLI_OUT_CSV,
	.text = "a table",
	.about = "The VMMs on the host (processes that hold a KVM VM fd): "
		 "their VMs, vCPUs,\nmemory, the sources that can read them "
		 "and the one that does.",
	.opts = list_opts,
	.opt = list_opt,
	.check = list_check,
};

int cmd_list(struct cli *cli, int argc, char **argv)
{
	struct vmm_row *rows = NULL;
	struct target_args a;
	size_t n = 0, kept = 0;
	int bad, ret, hidden;

	if (target_args_init(&a, argc))
		return EXIT_FAIL;
	ret = cli_parse(cli, &list_spec, &a, argc, argv);
	if (ret != CLI_PARSED)
		goto out;
	ret = EXIT_FAIL;
	bad = collect(cli, &a, &rows, &n);
	if (bad < 0)
		goto out;
	/* Other users' VMMs this user cannot see: said, never "none". */
	hidden = a.npids ? 0 : target_warn_hidden(cli);
	for (size_t i = 0; i < n; i++) {
		struct vmm_row *row = &rows[i];

		if (kvmstats_proc__name(row->pid, row->name, sizeof(row->name)))
			continue;	/* exited since the scan */
		count_fds(row);
		if (row->gone || (a.name_set &&
				  regexec(&a.name_re, row->name, 0, NULL, 0)))
			continue;
		probe_sources(cli, &a, row);
		rows[kept++] = *row;
	}
	n = kept;
	if (n && open_host(cli, &a, rows, n))
		goto out;
	if (cli->format == OUT_JSON)
		print_json(cli, rows, n);
	else if (cli->format == OUT_CSV)
		print_csv(rows, n);
	else if (n)
		print_table(rows, n);
	else if (hidden)
		printf("no VMM visible to uid %d; other users' VMMs are hidden "
		       "from it (run as root to see them)\n", (int)geteuid());
	else if (!bad)
		printf("no VMM on this host (no process holds a KVM VM fd)\n");
	if (cli->format == OUT_TABLE && cli->verbose > 0)
		print_details(&a, rows, n);
	ret = bad ? EXIT_FAIL : EXIT_OK;
out:
	free(rows);
	target_args_free(&a);
	return ret;
}
