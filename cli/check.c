// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats check: conformance of the running kernel's stats interface (on
 * VMs and vCPUs it creates itself), or of image files.
 *
 * Every (target, rule) pair counts once: passed when the rule found no
 * error on that target. Live rules only apply to live fds. Reports are
 * strict (the ABI this version knows, as the kernel's selftest holds it)
 * unless --allow-unknown asks for the parser's forward-compatible reading.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"
#include "sanitize.h"

enum { OPT_ALLOW_UNKNOWN = OPT_CMD_BASE, OPT_VMS, OPT_VCPUS };

struct check {
	struct cli *cli;
	int passed, failed;
	unsigned int report_flags;
	struct json_object *targets;	/* JSON mode */
};

static struct kvmstats_report *new_report(const struct check *c)
{
	struct kvmstats_report *r = kvmstats_report__new();

	if (r)
		kvmstats_report__set_flags(r, c->report_flags);
	return r;
}

static bool is_rule(const char *name)
{
	for (const struct kvmstats_rule *rule = kvmstats_rules(); rule->name;
	     rule++)
		if (!strcmp(rule->name, name))
			return true;
	return false;
}

static void print_finding(const struct check *c, const char *target,
			  const struct kvmstats_finding *f)
{
	bool err = f->severity == KVMSTATS_SEV_ERROR;

	if (!err && c->cli->verbose < 0)
		return;
	printf("%-4s %s %s: %s\n", err ? "FAIL" : "warn", safe_str(target),
	       f->rule, safe_str(f->msg));
}

/* Findings of @rule, or all of them when @rule is NULL; returns how many
 * there are, warnings included. */
static int print_findings(const struct check *c, const char *target,
			  const struct kvmstats_report *r, const char *rule)
{
	int n = 0;

	for (size_t i = 0; i < kvmstats_report__count(r); i++) {
		const struct kvmstats_finding *f = kvmstats_report__finding(r, i);

		if (rule && strcmp(f->rule, rule))
			continue;
		n++;
		print_finding(c, target, f);
	}
	return n;
}

/* The report keeps a bounded number of findings; say so when errors were
 * left out rather than let the list look complete. */
static void print_dropped(const char *target, const struct kvmstats_report *r)
{
	size_t listed = 0;

	for (size_t i = 0; i < kvmstats_report__count(r); i++)
		if (kvmstats_report__finding(r, i)->severity == KVMSTATS_SEV_ERROR)
			listed++;
	if (kvmstats_report__errors(r) > listed)
		printf("FAIL %s: %zu more errors not listed\n", safe_str(target),
		       kvmstats_report__errors(r) - listed);
}

/* --verbose: every rule that applies, in table order, with its findings
 * or "ok"; a rule with only warnings passed, and shows them. */
static void print_rules(const struct check *c, const char *target,
			const struct kvmstats_report *r, bool live)
{
	for (const struct kvmstats_rule *rule = kvmstats_rules(); rule->name;
	     rule++) {
		if (rule->live && !live)
			continue;
		if (!print_findings(c, target, r, rule->name))
			printf("ok   %s %s\n", safe_str(target), rule->name);
	}
	/* A caller's own rule (kvmstats_report__add()) is not in the table. */
	for (size_t i = 0; i < kvmstats_report__count(r); i++) {
		const struct kvmstats_finding *f = kvmstats_report__finding(r, i);

		if (!is_rule(f->rule))
			print_finding(c, target, f);
	}
}

static const char *rule_result(const struct kvmstats_report *r, const char *rule)
{
	if (kvmstats_report__failed(r, rule))
		return "failed";
	for (size_t i = 0; i < kvmstats_report__count(r); i++)
		if (!strcmp(kvmstats_report__finding(r, i)->rule, rule))
			return "warning";
	return "passed";
}

static struct json_object *findings_json(const struct kvmstats_report *r)
{
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; i < kvmstats_report__count(r); i++) {
		const struct kvmstats_finding *f = kvmstats_report__finding(r, i);
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "rule", json_object_new_string(f->rule));
		json_object_object_add(o, "severity", json_object_new_string(
			f->severity == KVMSTATS_SEV_ERROR ? "error" : "warning"));
		if (f->stat >= 0)
			json_object_object_add(o, "stat", json_object_new_int(f->stat));
		json_object_object_add(o, "message", json_object_new_string(f->msg));
		json_object_array_add(a, o);
	}
	return a;
}

static struct json_object *rules_json(const struct kvmstats_report *r, bool live)
{
	struct json_object *o = json_object_new_object();

	for (const struct kvmstats_rule *rule = kvmstats_rules(); rule->name;
	     rule++)
		if (!rule->live || live)
			json_object_object_add(o, rule->name, json_object_new_string(
				rule_result(r, rule->name)));
	return o;
}

/* Count the rules that apply to this target and report its findings. */
static void tally(struct check *c, const char *target,
		  const struct kvmstats_report *r, bool live)
{
	int passed = 0, failed = 0;

	for (const struct kvmstats_rule *rule = kvmstats_rules(); rule->name;
	     rule++) {
		if (rule->live && !live)
			continue;
		if (kvmstats_report__failed(r, rule->name))
			failed++;
		else
			passed++;
	}
	c->passed += passed;
	c->failed += failed;
	if (c->cli->format != OUT_JSON) {
		if (c->cli->verbose > 0)
			print_rules(c, target, r, live);
		else
			print_findings(c, target, r, NULL);
		print_dropped(target, r);
		if (c->cli->verbose > 0)
			printf("%-4s %s: %d rules passed, %d failed\n",
			       failed ? "FAIL" : "ok", safe_str(target), passed, failed);
		return;
	}
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "target", json_object_new_string(target));
	json_object_object_add(o, "passed", json_object_new_int(passed));
	json_object_object_add(o, "failed", json_object_new_int(failed));
	json_object_object_add(o, "rules", rules_json(r, live));
	json_object_object_add(o, "findings", findings_json(r));
	json_object_array_add(c->targets, o);
}

static void check_file(struct check *c, const char *path)
{
	struct kvmstats_report *r = new_report(c);
	unsigned char *buf = NULL;
	size_t len = 0, cap = 0;
	FILE *f = fopen(path, "rb");
	char target[300];

	snprintf(target, sizeof(target), "file %s", path);
	if (!f || !r) {
		cli_err(c->cli, "%s: %s", path, strerror(errno));
		c->failed++;
		goto out;
	}
	/* Bounded: anything over 16 MiB is rejected by the checks anyway. */
	for (;;) {
		if (len == cap) {
			void *p;

			if (cap > (16u << 20)) {
				cli_err(c->cli, "%s: larger than any stats image", path);
				c->failed++;
				goto out;
			}
			p = realloc(buf, cap = cap ? cap * 2 : 65536);
			if (!p)
				goto out;
			buf = p;
		}
		size_t n = fread(buf + len, 1, cap - len, f);

		len += n;
		if (n == 0)
			break;
	}
	kvmstats_image__validate(buf, len, r);
	tally(c, target, r, false);
out:
	if (f)
		fclose(f);
	free(buf);
	kvmstats_report__free(r);
}

/* ---- live checks ---------------------------------------------------- */

struct live_target {
	char name[32];
	int obj_fd;	/* the VM or vCPU fd */
	int stats_fd;
	bool vm;
};

static int get_stats_fd(int obj_fd)
{
	return ioctl(obj_fd, KVM_GET_STATS_FD, NULL);
}

static void check_live(struct check *c, struct live_target *t,
		       struct kvmstats_report *r)
{
	int dup_fd, second;

	kvmstats_fd__check(t->stats_fd, r);
	dup_fd = dup(t->stats_fd);
	kvmstats_fd__compare(t->stats_fd, dup_fd, "read.dup", r);
	if (dup_fd >= 0)
		close(dup_fd);
	second = get_stats_fd(t->obj_fd);
	if (second < 0)
		cli_err(c->cli, "%s: second KVM_GET_STATS_FD: %s", t->name,
			strerror(errno));
	kvmstats_fd__compare(t->stats_fd, second, "read.second_fd", r);
	if (second >= 0)
		close(second);
}

static int create_targets(struct check *c, int kvm, int nvms, int nvcpus,
			  struct live_target *t)
{
	int n = 0;

	for (int i = 0; i < nvms; i++) {
		int vm = ioctl(kvm, KVM_CREATE_VM, 0);

		if (vm < 0) {
			cli_err(c->cli, "KVM_CREATE_VM: %s", strerror(errno));
			return -1;
		}
		t[n] = (struct live_target){ .obj_fd = vm, .vm = true };
		snprintf(t[n].name, sizeof(t[n].name), "vm%d", i);
		t[n].stats_fd = get_stats_fd(vm);
		n++;
		for (int j = 0; j < nvcpus; j++) {
			int fd = ioctl(vm, KVM_CREATE_VCPU, j);

			if (fd < 0) {
				cli_err(c->cli, "KVM_CREATE_VCPU: %s", strerror(errno));
				return -1;
			}
			t[n] = (struct live_target){ .obj_fd = fd };
			snprintf(t[n].name, sizeof(t[n].name), "vm%d/vcpu%d", i, j);
			t[n].stats_fd = get_stats_fd(fd);
			n++;
		}
	}
	return n;
}

static int check_kernel(struct check *c, int nvms, int nvcpus)
{
	size_t max = (size_t)nvms * (nvcpus + 1);
	struct live_target *t = calloc(max, sizeof(*t));
	struct kvmstats_report **r = calloc(max, sizeof(*r));
	int kvm, n = 0, ret = -1;

	kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0) {
		cli_err(c->cli, "/dev/kvm: %s (no KVM here: nothing to check)",
			strerror(errno));
		goto out;
	}
	if (ioctl(kvm, KVM_CHECK_EXTENSION, KVM_CAP_BINARY_STATS_FD) <= 0) {
		cli_err(c->cli, "this kernel has no KVM_CAP_BINARY_STATS_FD (Linux 5.14+)");
		goto out;
	}
	if (!t || !r)
		goto out;
	n = create_targets(c, kvm, nvms, nvcpus, t);
	if (n < 0)
		goto out;
	for (int i = 0; i < n; i++) {
		r[i] = new_report(c);
		if (!r[i])
			goto out;
		if (t[i].stats_fd < 0) {
			cli_err(c->cli, "%s: KVM_GET_STATS_FD: %s", t[i].name,
				strerror(errno));
			c->failed++;
			continue;
		}
		check_live(c, &t[i], r[i]);
	}
	/* Close every VM and vCPU fd: the stats fds must still read. */
	for (int i = n - 1; i >= 0; i--) {
		close(t[i].obj_fd);
		t[i].obj_fd = -1;
	}
	for (int i = 0; i < n; i++) {
		struct kvmstats_report *after = new_report(c);

		if (t[i].stats_fd < 0 || !after) {
			kvmstats_report__free(after);
			continue;
		}
		if (kvmstats_fd__check(t[i].stats_fd, after) > 0) {
			const struct kvmstats_finding *f =
				kvmstats_report__finding(after, 0);

			kvmstats_report__add(r[i], KVMSTATS_SEV_ERROR,
					     "read.after_close", -1, "%s: %s",
					     f ? f->rule : "?", f ? f->msg : "?");
		}
		kvmstats_report__free(after);
		tally(c, t[i].name, r[i], true);
	}
	ret = 0;
out:
	for (int i = 0; i < n; i++) {
		if (t[i].stats_fd >= 0)
			close(t[i].stats_fd);
		if (t[i].obj_fd >= 0)
			close(t[i].obj_fd);
		kvmstats_report__free(r[i]);
	}
	if (kvm >= 0)
		close(kvm);
	free(t);
	free(r);
	return ret;
}

struct check_args {
	struct check *c;
	char **files;
	size_t nfiles;
	long nvms, nvcpus;
	bool sized;		/* --vms or --vcpus given */
};

static int check_opt(struct cli *cli, void *ctx, int key, const char *arg)
{
	struct check_args *a = ctx;

	switch (key) {
	case OPT_VMS:
		a->nvms = cli_parse_long(cli, "--vms", arg, 1, 256);
		a->sized = true;
		return a->nvms < 0 ? -1 : 0;
	case OPT_VCPUS:
		a->nvcpus = cli_parse_long(cli, "--vcpus", arg, 0, 64);
		a->sized = true;
		return a->nvcpus < 0 ? -1 : 0;
	case OPT_FILE:
		a->files[a->nfiles++] = (char *)arg;
		a->nfiles += cli_more_operands(cli, arg, a->files + a->nfiles);
		return 0;
	case OPT_ALLOW_UNKNOWN:
		a->c->report_flags &= ~KVMSTATS_REPORT_STRICT;
		return 0;
	}
	return 0;
}

static int check_check(struct cli *cli, void *ctx)
{
	struct check_args *a = ctx;

	if (a->nfiles && a->sized)
		return cli_bad(cli, "--vms and --vcpus size the VMs checked on "
			       "this kernel; --file checks images instead");
	return 0;
}

static const struct cli_opt check_opts[] = {
	{ "vms", OPT_VMS, 0, "N", "2", "VMs to create on this kernel" },
	{ "vcpus", OPT_VCPUS, 0, "M", "2", "vCPUs in each of them" },
	CLI_OPT_FILE("check these image files instead of this kernel"),
	{ "allow-unknown", OPT_ALLOW_UNKNOWN, 0, NULL, NULL,
	  "a type, unit or base newer than kvmstats warns, does not fail" },
	{ "verbose", 'v', CLI_OPT_SHORT, NULL, NULL,
	  "every rule per target, passed or not" },
	{ 0 },
};

static const struct cli_spec check_spec = {
	.cmd = "check",
	.outputs = CLI_OUT_JSON,
	.text = "a report",
	.about = "Conformance of this kernel's stats interface, on VMs and "
		 "vCPUs it creates\n(never run), or of image files: every "
		 "rule, per target. Exit status 1\nwhen a rule is broken.",
	.opts = check_opts,
	.opt = check_opt,
	.check = check_check,
};

int cmd_check(struct cli *cli, int argc, char **argv)
{
	struct check c = { .cli = cli, .report_flags = KVMSTATS_REPORT_STRICT };
	struct check_args a = { .c = &c, .nvms = 2, .nvcpus = 2 };
	char **files = calloc((size_t)argc + 1, sizeof(*files));
	size_t nfiles;
	int ret;

	if (!files)
		return EXIT_FAIL;
	a.files = files;
	ret = cli_parse(cli, &check_spec, &a, argc, argv);
	if (ret != CLI_PARSED)
		goto out;
	nfiles = a.nfiles;
	c.targets = json_object_new_array();
	for (size_t i = 0; i < nfiles; i++)
		check_file(&c, files[i]);
	if (!nfiles && check_kernel(&c, (int)a.nvms, (int)a.nvcpus))
		c.failed++;
	if (cli->format == OUT_JSON) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "targets", c.targets);
		json_object_object_add(o, "passed", json_object_new_int(c.passed));
		json_object_object_add(o, "failed", json_object_new_int(c.failed));
		cli_print_json(cli, o);
		json_object_put(o);
	} else {
		json_object_put(c.targets);
		printf("%d passed, %d failed\n", c.passed, c.failed);
	}
	ret = c.failed ? EXIT_FAIL : EXIT_OK;
out:
	free(files);
	return ret;
}
