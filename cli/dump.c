// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats dump: one reading of every VM and vCPU, as a table, JSON or
 * CSV; optionally saved as image files.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "sanitize.h"

/* --verbose: JSON stats and CSV rows carry their schema (type, unit,
 * base, exponent, histogram bounds). */
static bool verbose;

/* One target's reading: its reader and sample (NULL when the read
 * failed, which was reported). */
struct reading {
	struct kvmstats_reader *r;
	struct kvmstats_sample *smp;
	int err;
};

/* Readings that failed; the others are printed all the same, and the
 * exit status says one failed. */
static int read_errors;

static struct reading take(struct kvmstats_reader *r)
{
	struct reading rd = { .r = r };

	if (!r)
		return rd;
	rd.smp = kvmstats_sample__new(kvmstats_reader__schema(r));
	rd.err = rd.smp ? kvmstats_reader__read(r, rd.smp) : -ENOMEM;
	if (rd.err)
		read_errors++;
	return rd;
}

static void drop(struct reading *rd)
{
	kvmstats_sample__free(rd->smp);
	rd->smp = NULL;
}

static bool stat_missing(const struct reading *rd, const struct kvmstats_stat *st)
{
	const uint64_t *m = kvmstats_reader__missing(rd->r);
	uint32_t i = kvmstats_stat__index(st);

	return m && (m[i / 64] >> (i % 64)) & 1;
}

static struct json_object *reading_json(const struct reading *rd)
{
	if (!rd->r || rd->err)
		return json_object_new_object();
	return (verbose ? stats_json_verbose : stats_json)(
		kvmstats_reader__schema(rd->r), rd->smp->data,
		kvmstats_reader__missing(rd->r));
}

static void add_error(struct json_object *o, const struct reading *rd)
{
	if (rd->err)
		json_object_object_add(o, "error",
				       json_object_new_string(strerror(-rd->err)));
}

static struct json_object *str_or_null(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

/* Which source serves each level, and why the VM stats have none. */
static void add_levels(struct json_object *o, const struct kvmstats_vm *vm)
{
	const char *why = kvmstats_vm__why_none(vm, KVMSTATS_LEVEL_VM);

	json_object_object_add(o, "vm_source", str_or_null(
		kvmstats_vm__source(vm, KVMSTATS_LEVEL_VM)));
	json_object_object_add(o, "vcpu_source", str_or_null(
		kvmstats_vm__source(vm, KVMSTATS_LEVEL_VCPU)));
	if (*why)
		json_object_object_add(o, "vm_unavailable",
				       json_object_new_string(why));
}

static struct json_object *vm_json(struct kvmstats_vmm *v, struct kvmstats_vm *vm)
{
	struct json_object *o = json_object_new_object();
	struct json_object *vcpus = json_object_new_array();
	struct reading rd = take(kvmstats_vm__reader(vm));

	json_object_object_add(o, "pid", json_object_new_int(kvmstats_vmm__pid(v)));
	json_object_object_add(o, "name", json_object_new_string(kvmstats_vmm__name(v)));
	json_object_object_add(o, "id", rd.r ? json_object_new_string(
						       kvmstats_reader__id(rd.r))
					     : NULL);
	json_object_object_add(o, "source",
			       json_object_new_string(kvmstats_vmm__source(v)));
	add_levels(o, vm);
	json_object_object_add(o, "stats", reading_json(&rd));
	add_error(o, &rd);
	drop(&rd);
	for (size_t i = 0; i < kvmstats_vm__num_vcpus(vm); i++) {
		struct json_object *c = json_object_new_object();
		int index;
		struct reading cr = take(kvmstats_vm__vcpu(vm, i, &index));

		json_object_object_add(c, "index", json_object_new_int(index));
		json_object_object_add(c, "id", json_object_new_string(
							kvmstats_reader__id(cr.r)));
		json_object_object_add(c, "stats", reading_json(&cr));
		add_error(c, &cr);
		drop(&cr);
		json_object_array_add(vcpus, c);
	}
	json_object_object_add(o, "vcpus", vcpus);
	/* Every reader read: is any counter of the VM known? (Only said
	 * when none is: a VM's JSON is otherwise that of a log's sample.) */
	if (vm_no_counter(vm))
		json_object_object_add(o, "unknown", json_object_new_string(
					       unknown_reason(kvmstats_vmm__source(v))));
	return o;
}

static int print_json(struct cli *cli, struct target_set *t)
{
	struct json_object *root = json_object_new_object();
	struct json_object *vms = json_object_new_array();
	struct json_object *files = json_object_new_array();

	for (size_t i = 0; i < t->nvmms; i++)
		for (size_t j = 0; j < kvmstats_vmm__num_vms(t->vmms[i]); j++)
			json_object_array_add(vms, vm_json(t->vmms[i],
					      kvmstats_vmm__vm(t->vmms[i], j)));
	for (size_t i = 0; i < t->nfiles; i++) {
		struct json_object *f = json_object_new_object();
		struct reading rd = take(t->files[i]);

		json_object_object_add(f, "path", json_object_new_string(t->paths[i]));
		json_object_object_add(f, "id", json_object_new_string(
							kvmstats_reader__id(rd.r)));
		json_object_object_add(f, "stats", reading_json(&rd));
		add_error(f, &rd);
		drop(&rd);
		json_object_array_add(files, f);
	}
	json_object_object_add(root, "vms", vms);
	json_object_object_add(root, "files", files);
	cli_print_json(cli, root);
	json_object_put(root);
	return 0;
}

/* ---- CSV (RFC 4180): one row per value --------------------------- */

/* Who a row is about: a VM's or vCPU's VMM (pid, name), or a file. */
struct csv_who {
	pid_t pid;		/* 0: a file */
	const char *name;
	const char *path;	/* NULL: not a file */
	int vcpu;		/* -1: not a vCPU */
};

static void csv_header(struct csv *c)
{
	static const char *const cols[] = {
		"pid", "name", "path", "id", "vcpu", "stat", "index", "value",
	};
	static const char *const vcols[] = {
		"type", "unit", "base", "exponent", "bucket_lo", "bucket_hi",
	};

	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
		csv_field(c, cols[i]);
	for (size_t i = 0; verbose && i < sizeof(vcols) / sizeof(vcols[0]); i++)
		csv_field(c, vcols[i]);
	csv_end(c);
}

/* The schema columns of --verbose: the bucket's raw bounds for
 * histograms (hi empty for the last, open-ended one). */
static void csv_schema(struct csv *c, const struct kvmstats_stat *st,
		       uint32_t k)
{
	unsigned int base = kvmstats_stat__base(st);
	double lo, hi;

	csv_field(c, kvmstats_type_str(kvmstats_stat__type(st)));
	csv_field(c, kvmstats_unit_str(kvmstats_stat__unit(st)));
	if (base == KVMSTATS_BASE_POW10 || base == KVMSTATS_BASE_POW2)
		csv_int(c, base == KVMSTATS_BASE_POW10 ? 10 : 2);
	else
		csv_empty(c);
	csv_int(c, kvmstats_stat__exponent(st));
	if (!stat_is_hist(st) || kvmstats_hist__bucket_bounds(st, k, &lo, &hi)) {
		csv_empty(c);
		csv_empty(c);
		return;
	}
	csv_u64(c, (uint64_t)lo);
	if (isinf(hi))
		csv_empty(c);
	else
		csv_u64(c, (uint64_t)hi);
}

static void csv_reading(struct csv *c, const struct reading *rd,
			const struct csv_who *w)
{
	const struct kvmstats_stat *st;

	if (!rd->r || rd->err)
		return;
	kvmstats_schema__for_each(st, kvmstats_reader__schema(rd->r)) {
		const uint64_t *v = kvmstats_stat__values(st, rd->smp->data);
		bool miss = stat_missing(rd, st);

		for (uint32_t k = 0; k < kvmstats_stat__size(st); k++) {
			if (w->pid)
				csv_int(c, w->pid);
			else
				csv_empty(c);
			csv_field(c, w->name);
			csv_field(c, w->path ? w->path : "");
			csv_field(c, kvmstats_reader__id(rd->r));
			csv_value(c, w->vcpu, st, k, miss ? NULL : v);
			if (verbose)
				csv_schema(c, st, k);
			csv_end(c);
		}
	}
}

static void csv_vm(struct csv *c, struct kvmstats_vmm *v,
		   struct kvmstats_vm *vm)
{
	struct csv_who w = { kvmstats_vmm__pid(v), kvmstats_vmm__name(v),
			     NULL, -1 };
	struct reading rd = take(kvmstats_vm__reader(vm));

	csv_reading(c, &rd, &w);
	drop(&rd);
	for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++) {
		struct reading cr = take(kvmstats_vm__vcpu(vm, k, &w.vcpu));

		csv_reading(c, &cr, &w);
		drop(&cr);
	}
}

static int print_csv(struct target_set *t)
{
	struct csv c = { stdout, 0 };

	csv_header(&c);
	for (size_t i = 0; i < t->nvmms; i++)
		for (size_t j = 0; j < kvmstats_vmm__num_vms(t->vmms[i]); j++)
			csv_vm(&c, t->vmms[i], kvmstats_vmm__vm(t->vmms[i], j));
	for (size_t i = 0; i < t->nfiles; i++) {
		struct csv_who w = { 0, "", t->paths[i], -1 };
		struct reading rd = take(t->files[i]);

		csv_reading(&c, &rd, &w);
		drop(&rd);
	}
	return 0;
}

/* ---- table -------------------------------------------------------- */

#define COLS 4

static void value_cell(const struct reading *rd, const struct kvmstats_stat *st,
		       char *buf, size_t len)
{
	if (rd->err)
		snprintf(buf, len, "error");
	else if (stat_missing(rd, st))
		snprintf(buf, len, "n/a");
	else
		stat_human(st, kvmstats_stat__values(st, rd->smp->data), buf, len);
}

/* "vcpu3"; a source's pseudo-vCPU of index -1 (debugfs: the vCPU stats
 * summed over every vCPU) is "vcpu-sum". */
static void vcpu_label(int index, char *buf, size_t len)
{
	if (index < 0)
		snprintf(buf, len, "vcpu-sum");
	else
		snprintf(buf, len, "vcpu%d", index);
}

static void hist_line(const char *label, const struct reading *rd,
		      const struct kvmstats_stat *st)
{
	const uint64_t *v = kvmstats_stat__values(st, rd->smp->data);
	char bar[160], txt[96];

	hist_bar(st, v, bar, sizeof(bar), 32);
	stat_human(st, v, txt, sizeof(txt));
	printf("  %-28s %-8s %s %s\n", safe_str(kvmstats_stat__name(st)), label, txt, bar);
}

static void table_single(const char *title, const struct reading *rd)
{
	const struct kvmstats_stat *st;
	char val[96];

	printf("%s\n", title);
	if (!rd->r)		/* nothing to read: no sample either */
		return;
	if (rd->err) {
		printf("  error: %s\n", strerror(-rd->err));
		return;
	}
	kvmstats_schema__for_each(st, kvmstats_reader__schema(rd->r)) {
		if (stat_is_hist(st) && !stat_missing(rd, st)) {
			hist_line("", rd, st);
			continue;
		}
		value_cell(rd, st, val, sizeof(val));
		printf("  %-28s %s\n", safe_str(kvmstats_stat__name(st)), val);
	}
}

/* vCPUs side by side, COLS at a time; histograms one line per vCPU. */
static void table_vcpus(struct reading *rd, const int *index, size_t n)
{
	const struct kvmstats_schema *s;
	const struct kvmstats_stat *st;
	char val[96], label[16];

	if (!n || !rd[0].r)
		return;
	s = kvmstats_reader__schema(rd[0].r);
	for (size_t base = 0; base < n; base += COLS) {
		size_t end = base + COLS < n ? base + COLS : n;

		printf("  %-28s", "vCPU");
		for (size_t i = base; i < end; i++) {
			vcpu_label(index[i], label, sizeof(label));
			printf(" %14s", label);
		}
		putchar('\n');
		kvmstats_schema__for_each(st, s) {
			if (stat_is_hist(st))
				continue;
			printf("  %-28s", safe_str(kvmstats_stat__name(st)));
			for (size_t i = base; i < end; i++) {
				/* vCPUs of another schema are printed alone. */
				if (kvmstats_reader__schema(rd[i].r) != s)
					snprintf(val, sizeof(val), "-");
				else
					value_cell(&rd[i], st, val, sizeof(val));
				printf(" %14s", val);
			}
			putchar('\n');
		}
	}
	kvmstats_schema__for_each(st, s) {
		if (!stat_is_hist(st))
			continue;
		for (size_t i = 0; i < n; i++) {
			if (rd[i].err || kvmstats_reader__schema(rd[i].r) != s)
				continue;
			vcpu_label(index[i], label, sizeof(label));
			if (stat_missing(&rd[i], st))
				printf("  %-28s %-8s n/a (not available from source %s)\n",
				       kvmstats_stat__name(st), label,
				       kvmstats_reader__source(rd[i].r));
			else
				hist_line(label, &rd[i], st);
		}
	}
}

/* "VM web1  pid 42  id kvm-42  source fd", plus the level sources when
 * they differ ("VM stats: qmp, vCPU stats: fd"). */
static void level_title(char *buf, size_t len, struct kvmstats_vmm *v,
			const struct kvmstats_vm *vm, struct kvmstats_reader *r)
{
	const char *lv = kvmstats_vm__source(vm, KVMSTATS_LEVEL_VM);
	const char *lc = kvmstats_vm__source(vm, KVMSTATS_LEVEL_VCPU);
	int n;

	n = snprintf(buf, len, "VM %s  pid %d  id %s  source %s",
		     safe_str(kvmstats_vmm__name(v)), (int)kvmstats_vmm__pid(v),
		     r ? safe_str(kvmstats_reader__id(r)) : "-", kvmstats_vmm__source(v));
	if (n > 0 && (size_t)n < len && lv && lc && strcmp(lv, lc))
		snprintf(buf + n, len - (size_t)n, " (VM stats: %s, vCPU stats: %s)",
			 lv, lc);
}

static void table_vm(struct kvmstats_vmm *v, struct kvmstats_vm *vm)
{
	size_t n = kvmstats_vm__num_vcpus(vm);
	struct reading rd = take(kvmstats_vm__reader(vm));
	struct reading *cr = calloc(n ? n : 1, sizeof(*cr));
	int *index = calloc(n ? n : 1, sizeof(*index));
	char title[512];

	if (cr && index)
		for (size_t i = 0; i < n; i++)
			cr[i] = take(kvmstats_vm__vcpu(vm, i, &index[i]));
	level_title(title, sizeof(title), v, vm, rd.r);
	if (vm_no_counter(vm)) {
		size_t used = strlen(title);

		snprintf(title + used, sizeof(title) - used,
			 "\n  no counter readable: %s",
			 unknown_reason(kvmstats_vmm__source(v)));
	}
	if (rd.r)
		table_single(title, &rd);
	else
		printf("%s\n  VM stats: none (%s)\n", title,
		       safe_str(kvmstats_vm__why_none(vm, KVMSTATS_LEVEL_VM)));
	drop(&rd);
	if (!cr || !index)
		goto out;
	table_vcpus(cr, index, n);
	for (size_t i = 0; i < n; i++)
		drop(&cr[i]);
out:
	free(cr);
	free(index);
	putchar('\n');
}

static int print_table(struct target_set *t)
{
	char title[512];

	for (size_t i = 0; i < t->nvmms; i++)
		for (size_t j = 0; j < kvmstats_vmm__num_vms(t->vmms[i]); j++)
			table_vm(t->vmms[i], kvmstats_vmm__vm(t->vmms[i], j));
	for (size_t i = 0; i < t->nfiles; i++) {
		struct reading rd = take(t->files[i]);

		snprintf(title, sizeof(title), "File %s  id %s", safe_str(t->paths[i]),
			 safe_str(kvmstats_reader__id(rd.r)));
		table_single(title, &rd);
		drop(&rd);
		putchar('\n');
	}
	if (!t->nvmms && !t->nfiles && !t->failures)
		printf("no VM found: %s\n", demo_hint());
	return 0;
}

/* ---- --save ---------------------------------------------------------- */

static int save_one(struct cli *cli, int dirfd, const char *name,
		    struct kvmstats_reader *r)
{
	size_t len;
	void *img = kvmstats_reader__image(r, &len);
	ssize_t n = -1;
	int fd;

	if (!img) {
		cli_err(cli, "%s: reading image: %s", name, strerror(errno));
		return -1;
	}
	/* Run as root in a directory others may write to: whatever is at
	 * the name (an older image, or a link planted there) is replaced,
	 * never written through. */
	if (unlinkat(dirfd, name, 0) && errno != ENOENT) {
		cli_err(cli, "%s: %s", name, strerror(errno));
		free(img);
		return -1;
	}
	fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		    0644);
	if (fd >= 0) {
		n = write(fd, img, len);
		if (close(fd) && n == (ssize_t)len)
			n = -1;
	}
	free(img);
	if (n != (ssize_t)len) {
		cli_err(cli, "%s: %s", name, n < 0 ? strerror(errno) : "short write");
		return -1;
	}
	return 0;
}

static int save_all(struct cli *cli, struct target_set *t, const char *dir)
{
	int dirfd, failed = 0;
	char name[128];

	if (mkdir(dir, 0755) && errno != EEXIST) {
		cli_err(cli, "%s: %s", dir, strerror(errno));
		return -1;
	}
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dirfd < 0) {
		struct stat st;
		bool link = !lstat(dir, &st) && S_ISLNK(st.st_mode);

		cli_err(cli, "%s: %s", dir, link ?
			"is a symbolic link: refusing to write through it" : strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < t->nvmms; i++) {
		struct kvmstats_vmm *v = t->vmms[i];
		int pid = (int)kvmstats_vmm__pid(v);

		for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++) {
			struct kvmstats_vm *vm = kvmstats_vmm__vm(v, j);
			int index;

			snprintf(name, sizeof(name), "%d-vm%zu.bin", pid, j);
			if (kvmstats_vm__reader(vm))
				failed |= save_one(cli, dirfd, name, kvmstats_vm__reader(vm));
			for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++) {
				struct kvmstats_reader *r = kvmstats_vm__vcpu(vm, k, &index);

				snprintf(name, sizeof(name), "%d-vm%zu-vcpu%d.bin", pid, j,
					 index);
				failed |= save_one(cli, dirfd, name, r);
			}
		}
	}
	close(dirfd);
	return failed ? -1 : 0;
}

struct dump_args {
	struct target_args t;
	const char *save;
};

static int dump_opt(struct cli *cli, void *ctx, int key, const char *arg)
{
	struct dump_args *d = ctx;
	int used = cli_target_opt(cli, &d->t, key, arg);

	if (used)
		return used < 0 ? -1 : 0;
	if (key == 's')
		d->save = arg;
	return 0;
}

static int dump_check(struct cli *cli, void *ctx)
{
	struct dump_args *d = ctx;

	if (d->save && d->t.nfiles && !target_args_host(&d->t))
		return cli_bad(cli, "--save writes the images of VMMs, and "
			       "--file reads images: nothing to save");
	return target_args_check(cli, &d->t, false);
}

static const struct cli_opt dump_opts[] = {
	CLI_OPTS_TARGET,
	CLI_OPT_FILE("read these image files (every operand up to the next "
		     "option)"),
	{ "save", 's', CLI_OPT_SHORT, "DIR", "none",
	  "write each target's image to DIR/PID-vmI[-vcpuN].bin" },
	{ "verbose", 'v', CLI_OPT_SHORT, NULL, NULL,
	  "each value with its type, unit, base, exponent, bucket bounds" },
	{ 0 },
};

static const struct cli_spec dump_spec = {
	.cmd = "dump",
	.outputs = CLI_OUT_JSON | CLI_OUT_CSV,
	.text = "a table",
	.about = "One reading of every VM and vCPU (of the VMMs chosen, and of "
		 "image files):\na table with units, raw values as JSON, or "
		 "one CSV row per value.",
	.opts = dump_opts,
	.opt = dump_opt,
	.check = dump_check,
};

int cmd_dump(struct cli *cli, int argc, char **argv)
{
	struct dump_args d = { 0 };
	struct target_set t = { 0 };
	int ret;

	if (target_args_init(&d.t, argc))
		return EXIT_FAIL;
	ret = cli_parse(cli, &dump_spec, &d, argc, argv);
	if (ret != CLI_PARSED)
		goto out;
	verbose = cli->verbose > 0;
	ret = EXIT_FAIL;
	if (targets_open(cli, &t, &d.t))
		goto out;
	/* Nothing in sight: say that other users' VMMs are hidden, if so. */
	if (!t.nvmms && !d.t.nfiles && !d.t.npids)
		target_warn_hidden(cli);
	if (cli->format == OUT_JSON)
		print_json(cli, &t);
	else if (cli->format == OUT_CSV)
		print_csv(&t);
	else
		print_table(&t);
	if (d.save && save_all(cli, &t, d.save))
		t.failures++;
	if (read_errors)
		cli_err(cli, "%d reading(s) failed", read_errors);
	ret = t.failures || read_errors ? EXIT_FAIL : EXIT_OK;
out:
	targets_close(&t);
	target_args_free(&d.t);
	return ret;
}
