// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats follow: every real migration scores the plan.
 *
 * The predictions come from a plan's JSON (`kvmstats plan --json`, or a
 * drain plan's: the same per-VM fields), or from `kvmstats plan --json`
 * run as a child of this very binary (the planner's code, not a copy of
 * it). Then each VM's monitor is polled with query-migrate (read only,
 * one short exchange per poll: lib/migrate_follow.c), or libvirt's job
 * info for a VM libvirt runs (lib/follow_libvirt.c), and each event is
 * written: a migration seen starting, its progress each poll, its end
 * with the error of each prediction, (real - predicted) / real.
 *
 * A migration is ours when its status is under way, or has ended with
 * another status or other figures than at our first look (a VMM keeps
 * the figures of its last migration until the next one starts). Follow
 * stops when every followed migration ended, or at --timeout / --count.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "follow.h"
#include "plan_args.h"

/* Failed polls in a row before a VM is said to be unreadable. */
#define FOLLOW_SAY_AFTER 3
/* A plan's JSON is a few KiB per VM. */
#define PLAN_MAX_BYTES (64u << 20)

enum {
	OPT_PLAN = OPT_CMD_BASE,
	OPT_INTERVAL,
	OPT_TIMEOUT,
	OPT_COUNT,
};

struct follow_args {
	struct target_args t;
	const char *name_arg; /* --name as given, for a plan we run */
	const char *plan;
	double interval, timeout;
	long count;
};

static bool parse_secs(const struct cli *cli, const char *opt, const char *arg,
		       double min, double *out)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || !(v >= min) || v > 86400) {
		cli_err(cli,
			"%s: '%s' is not a number of seconds (%g to 86400)",
			opt, arg, min);
		return false;
	}
	*out = v;
	return true;
}

static int follow_opt(struct cli *cli, void *ctx, int c, const char *arg)
{
	struct follow_args *a = ctx;
	int used;

	if (c == 'g')
		a->name_arg = arg;
	used = cli_target_opt(cli, &a->t, c, arg);
	if (used)
		return used < 0 ? -1 : 0;
	switch (c) {
	case OPT_PLAN:
		a->plan = arg;
		return 0;
	case OPT_INTERVAL:
		return parse_secs(cli, "--interval", arg, 0.05, &a->interval)
			       ? 0
			       : -1;
	case OPT_TIMEOUT:
		return parse_secs(cli, "--timeout", arg, 0, &a->timeout) ? 0
									 : -1;
	case OPT_COUNT:
		a->count = cli_parse_long(cli, "--count", arg, 1, 100000000);
		return a->count < 0 ? -1 : 0;
	}
	return 0;
}

/* ---- the plan ---- */

static int read_all(int fd, char **out, size_t *len)
{
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap + 1), *p;
	ssize_t r;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (n == cap) {
			if (cap >= PLAN_MAX_BYTES) {
				free(buf);
				return -EFBIG;
			}
			cap *= 2;
			p = realloc(buf, cap + 1);
			if (!p) {
				free(buf);
				return -ENOMEM;
			}
			buf = p;
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(buf);
			return -errno;
		}
		if (!r)
			break;
		n += (size_t)r;
	}
	buf[n] = 0;
	*out = buf;
	*len = n;
	return 0;
}

/* `kvmstats plan --json` with our --pid, --name, --libvirt-uri and
 * --qmp-timeout, by this binary. */
static int run_plan(struct cli *cli, const struct follow_args *a, char **out,
		    size_t *len)
{
	char **argv = calloc(2 * a->t.npids + 10, sizeof(*argv));
	char(*pids)[16] = calloc(a->t.npids + 1, sizeof(*pids));
	char timeout[16];
	int fds[2], status, e, k = 0;
	pid_t child;

	e = !argv || !pids ? -ENOMEM : pipe2(fds, O_CLOEXEC) ? -errno : 0;
	if (e) {
		free(argv);
		free(pids);
		return e;
	}
	argv[k++] = (char *)cli->prog;
	argv[k++] = "plan";
	argv[k++] = "--json";
	for (size_t i = 0; i < a->t.npids; i++) {
		snprintf(pids[i], sizeof(pids[i]), "%d", (int)a->t.pids[i]);
		argv[k++] = "--pid";
		argv[k++] = pids[i];
	}
	if (a->name_arg) {
		argv[k++] = "--name";
		argv[k++] = (char *)a->name_arg;
	}
	if (a->t.libvirt_uri) {
		argv[k++] = "--libvirt-uri";
		argv[k++] = (char *)a->t.libvirt_uri;
	}
	if (a->t.timeout_ms) {
		snprintf(timeout, sizeof(timeout), "%u", a->t.timeout_ms);
		argv[k++] = "--qmp-timeout";
		argv[k++] = timeout;
	}
	fflush(stdout);
	child = fork();
	if (!child) {
		dup2(fds[1], STDOUT_FILENO);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(fds[1]);
	e = child < 0 ? -errno : read_all(fds[0], out, len);
	close(fds[0]);
	free(argv);
	free(pids);
	if (child > 0 && waitpid(child, &status, 0) == child &&
	    WIFEXITED(status) && WEXITSTATUS(status) > 1)
		cli_warn(cli, "the plan exited with status %d",
			 WEXITSTATUS(status));
	return e;
}

static int load_plan(struct cli *cli, const struct follow_args *a, char **out,
		     size_t *len)
{
	int fd, e;

	if (!a->plan)
		return run_plan(cli, a, out, len);
	fd = strcmp(a->plan, "-") ? open(a->plan, O_RDONLY | O_CLOEXEC)
				  : STDIN_FILENO;
	if (fd < 0)
		return -errno;
	e = read_all(fd, out, len);
	if (fd != STDIN_FILENO)
		close(fd);
	return e;
}

static double jdouble(struct json_object *o, const char *k)
{
	struct json_object *j;

	if (!json_object_object_get_ex(o, k, &j) ||
	    !(json_object_is_type(j, json_type_double) ||
	      json_object_is_type(j, json_type_int)))
		return NAN;
	return json_object_get_double(j);
}

static bool selected(const struct follow_args *a, pid_t pid, const char *name)
{
	bool ok = !a->t.npids;

	for (size_t i = 0; i < a->t.npids && !ok; i++)
		ok = a->t.pids[i] == pid;
	return ok &&
	       (!a->t.name_set || !regexec(&a->t.name_re, name, 0, NULL, 0));
}

/* One entry of vms[]; false: not one to follow. */
static bool take_vm(const struct follow_args *a, struct json_object *e,
		    struct fvm *v)
{
	struct json_object *pred = NULL;
	const char *name;
	double pid = jdouble(e, "pid"), passes;

	if (!json_object_is_type(e, json_type_object) || !(pid >= 1) ||
	    pid > INT32_MAX)
		return false;
	memset(v, 0, sizeof(*v));
	v->pid = (pid_t)pid;
	name = json_object_get_string(json_object_object_get(e, "name"));
	snprintf(v->name, sizeof(v->name), "%s", name ? name : "");
	if (!selected(a, v->pid, v->name))
		return false;
	v->pred_s = jdouble(e, "predicted_seconds");
	v->pred_bytes = jdouble(e, "predicted_transfer_bytes");
	v->pred_dirty = jdouble(e, "dirty_pages_per_second");
	json_object_object_get_ex(e, "prediction", &pred);
	passes = pred ? jdouble(pred, "passes") : NAN;
	v->pred_passes = passes >= 0 && passes < 1e6 ? (int)passes : -1;
	v->sched_start = jdouble(e, "scheduled_start_s");
	v->sched_end = jdouble(e, "scheduled_end_s");
	v->seen_s = NAN;
	return true;
}

static int parse_plan(struct cli *cli, const struct follow_args *a,
		      const char *text, struct fvm **out, size_t *n)
{
	struct json_object *root = json_tokener_parse(text), *vms;
	size_t len;

	*n = 0;
	if (!root || !json_object_object_get_ex(root, "vms", &vms) ||
	    !json_object_is_type(vms, json_type_array)) {
		cli_err(cli, "the plan is not a plan's JSON (no \"vms\" list)");
		json_object_put(root);
		return -EINVAL;
	}
	len = json_object_array_length(vms);
	*out = calloc(len + 1, sizeof(**out));
	if (!*out) {
		json_object_put(root);
		return -ENOMEM;
	}
	for (size_t i = 0; i < len; i++)
		*n += take_vm(a, json_object_array_get_idx(vms, i),
			      &(*out)[*n]);
	json_object_put(root);
	return 0;
}

/* ---- watching ---- */

static void poll_error(struct cli *cli, struct fvm *v, int e, const char *why,
		       double t)
{
	if (e == -ESRCH) {
		if (v->state == FVM_RUN)
			follow_out_end(cli, v, t, "gone");
		else
			follow_out_unreadable(cli, v, t, why);
		v->state = v->state == FVM_RUN ? FVM_DONE : FVM_DROP;
		return;
	}
	/* Busy or slow: tried again next poll, and said once it lasts (a
	 * monitor is busy for a moment while someone else asks it, or while
	 * QEMU's main loop is slow to take our connection mid-migration). */
	if (++v->fails == FOLLOW_SAY_AFTER)
		follow_out_unreadable(cli, v, t, why);
}

static void poll_vm(struct cli *cli, struct fvm *v, double t)
{
	char why[512] = "";
	int e = kvmstats_follow__poll(v->f, &v->m, why, sizeof(why));

	if (e) {
		if (!why[0])
			snprintf(why, sizeof(why), "%s", strerror(-e));
		poll_error(cli, v, e, why, t);
		return;
	}
	v->fails = 0;
	if (!v->base.set && v->state == FVM_WAIT) {
		/* What a VMM shows of a migration before ours. */
		kvmstats_migbase__set(&v->base, &v->m);
		if (kvmstats_migst_ended(v->m.status))
			return;
	}
	if (v->state == FVM_WAIT && kvmstats_migbase__is_new(&v->base, &v->m)) {
		v->state = FVM_RUN;
		v->seen_s = t;
		follow_out_start(cli, v, t);
	}
	if (v->state != FVM_RUN)
		return;
	if (kvmstats_migst_ended(v->m.status)) {
		follow_out_end(cli, v, t, v->m.status_name);
		v->state = FVM_DONE;
		return;
	}
	follow_out_progress(cli, v, t);
}

/* The VMs libvirt runs share @guard: a hung libvirtd costs follow one
 * waiting thread, not one per VM. */
static void open_vms(struct cli *cli, const struct follow_args *a,
		     struct fvm *vms, size_t n,
		     struct kvmstats_libvirt_guard *guard)
{
	struct kvmstats_follow_opts o = {.sz = sizeof(o),
					 .timeout_ms = a->t.timeout_ms,
					 .libvirt_uri = a->t.libvirt_uri,
					 .libvirt_guard = guard};
	char why[512];

	for (size_t i = 0; i < n; i++) {
		why[0] = 0;
		if (!kvmstats_follow__open(&vms[i].f, vms[i].pid, &o, why,
					   sizeof(why)))
			continue;
		vms[i].state = FVM_DROP;
		follow_out_unreadable(cli, &vms[i], 0,
				      why[0] ? why : "cannot open");
	}
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* EXIT_OK once every VM followed saw its migration end. */
static int watch(struct cli *cli, const struct follow_args *a, struct fvm *vms,
		 size_t n)
{
	double t0 = plan_now_s(), t;
	size_t waiting = n, done = 0;

	for (long round = 0; waiting; round++) {
		if (round)
			sleep_s(a->interval);
		t = plan_now_s() - t0;
		waiting = 0;
		for (size_t i = 0; i < n; i++) {
			if (vms[i].state == FVM_WAIT || vms[i].state == FVM_RUN)
				poll_vm(cli, &vms[i], t);
			waiting += vms[i].state == FVM_WAIT ||
				   vms[i].state == FVM_RUN;
		}
		if ((a->count && round + 1 >= a->count) ||
		    (a->timeout > 0 && plan_now_s() - t0 >= a->timeout))
			break;
	}
	for (size_t i = 0; i < n; i++)
		done += vms[i].state == FVM_DONE;
	if (waiting)
		cli_warn(cli, "%zu migration(s) not ended when follow stopped",
			 waiting);
	return done == n && !waiting ? EXIT_OK : EXIT_FAIL;
}

static const struct cli_opt follow_opts[] = {
	{"plan", OPT_PLAN, 0, "FILE|-", "run kvmstats plan",
	 "the predictions: a plan's JSON (kvmstats plan --json)"},
	{"interval", OPT_INTERVAL, 0, "SECONDS", "1",
	 "poll each VM's migration this often"},
	{"timeout", OPT_TIMEOUT, 0, "SECONDS", "0: none",
	 "stop after this long, ended or not"},
	{"count", OPT_COUNT, 0, "N", "none", "stop after N polls"},
	CLI_OPT_QMP_TIMEOUT,
	CLI_OPT_LIBVIRT_URI(
		"the libvirt connection to ask about the VMs libvirt runs"),
	CLI_OPT_PID("only this VMM's migration (repeatable)"),
	CLI_OPT_NAME("only VMMs whose name matches"),
	{0},
};

static const struct cli_spec follow_spec = {
	.cmd = "follow",
	.outputs = CLI_OUT_JSON,
	.text = "a line per event",
	.about = "Watch live migrations as QEMU counts them (query-migrate, "
		 "read only; libvirt's\njob info for the VMs libvirt runs) "
		 "beside the plan's prediction, and at the\nend of each the "
		 "error of the prediction: (real - predicted) / real of its\n"
		 "time and of its bytes.",
	.opts = follow_opts,
	.opt = follow_opt,
};

int cmd_follow(struct cli *cli, int argc, char **argv)
{
	struct follow_args a = {.interval = 1};
	struct kvmstats_libvirt_guard *guard = NULL;
	struct fvm *vms = NULL;
	char *text = NULL;
	size_t n = 0, len = 0;
	int ret, e;

	if (target_args_init(&a.t, argc))
		return EXIT_FAIL;
	ret = cli_parse(cli, &follow_spec, &a, argc, argv);
	if (ret != CLI_PARSED)
		goto out;
	ret = EXIT_FAIL;
	e = load_plan(cli, &a, &text, &len);
	if (e) {
		cli_err(cli, "the plan %s: %s",
			a.plan ? a.plan : "(kvmstats plan)", strerror(-e));
		goto out;
	}
	if (parse_plan(cli, &a, text, &vms, &n))
		goto out;
	if (!n) {
		cli_err(cli, "no VM of the plan to follow");
		goto out;
	}
	guard = kvmstats_libvirt_guard__new();
	if (!guard) {
		cli_err(cli, "%s", strerror(ENOMEM));
		goto out;
	}
	open_vms(cli, &a, vms, n, guard);
	ret = watch(cli, &a, vms, n);
out:
	for (size_t i = 0; vms && i < n; i++)
		kvmstats_follow__free(vms[i].f);
	kvmstats_libvirt_guard__free(guard);
	free(vms);
	free(text);
	target_args_free(&a.t);
	return ret;
}
