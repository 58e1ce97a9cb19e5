// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats demo: real VMs to look at on a machine that has none.
 *
 * It starts the project's tiny VMM (tinyvmm, installed next to kvmstats
 * or in PREFIX/libexec/kvmstats) a few times in the background, each
 * with its own workload (exits that ramp up and down, halts with an
 * in-kernel irqchip so that the halt histograms fill, memory writes),
 * then opens `top` on them. Every guest it started is stopped when it
 * ends, whatever the way: top's 'q', Ctrl-C, SIGTERM, or (through
 * PR_SET_PDEATHSIG) the death of this process.
 *
 * Where /dev/kvm is missing (a laptop, a CI runner, a monitoring box), or
 * with --recording, it plays a recording of the same guests and a QEMU VM
 * instead (dist/demo/recording.kvmlog, installed as
 * PREFIX/share/kvmstats/demo/recording.kvmlog), looping, and says on the
 * screen that it is one and how to see live VMs.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define MAX_GUESTS 3
#define READY_TIMEOUT_MS 20000

enum { OPT_NO_TOP = OPT_CMD_BASE, OPT_RECORDING };

#define RECORDING_NAME "recording.kvmlog"

struct guest {
	const char *what; /* for the user */
	char vms[24];
	const char *args[12]; /* tinyvmm arguments after --vms N */
	pid_t pid;
	bool ready;
	char ready_path[PATH_MAX];
	char err_path[PATH_MAX];
};

struct demo {
	struct cli *cli;
	char tinyvmm[PATH_MAX];
	char dir[64];
	struct guest g[MAX_GUESTS];
	size_t n;
	sigset_t stop;		/* blocked while the guests start */
	bool interrupted;
};

/* ---- finding the tiny VMM and the recording ------------------------ */

static bool executable(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode) && !access(path, X_OK);
}

static bool readable(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode) && !access(path, R_OK);
}

/* The directory this binary is in; -1 (errno set) when unknown. */
static int self_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	char *slash;

	if (n <= 0)
		return -1;
	buf[n] = 0;
	slash = strrchr(buf, '/');
	if (slash)
		*slash = 0;
	return 0;
}

/* $KVMSTATS_DEMO_RECORDING, else the source tree's copy (a build tree's
 * kvmstats is in build/), else the installed one. */
static int find_recording(char *path, size_t len)
{
	static const char *const rel[] = {
		"../dist/demo/" RECORDING_NAME,
		"../share/kvmstats/demo/" RECORDING_NAME,
	};
	const char *env = getenv("KVMSTATS_DEMO_RECORDING");
	char self[PATH_MAX - 64];

	if (env && *env) {
		snprintf(path, len, "%s", env);
		return readable(path) ? 0 : -1;
	}
	if (self_dir(self, sizeof(self)))
		return -1;
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		char full[PATH_MAX], real[PATH_MAX];

		snprintf(full, sizeof(full), "%s/%s", self, rel[i]);
		if (!readable(full))
			continue;
		/* Shown to the user: without the "bin/../". */
		snprintf(path, len, "%s", realpath(full, real) ? real : full);
		return 0;
	}
	return -1;
}

/* Next to this binary (the build tree), else PREFIX/libexec/kvmstats
 * (an installed copy); $KVMSTATS_TINYVMM overrides both. */
static int find_tinyvmm(struct demo *d)
{
	char self[PATH_MAX - 64];
	const char *env = getenv("KVMSTATS_TINYVMM");

	if (env && *env) {
		snprintf(d->tinyvmm, sizeof(d->tinyvmm), "%s", env);
		if (executable(d->tinyvmm))
			return 0;
		cli_err(d->cli,
			"KVMSTATS_TINYVMM=%s is not an executable", env);
		return -1;
	}
	if (self_dir(self, sizeof(self))) {
		cli_err(d->cli, "/proc/self/exe: %s", strerror(errno));
		return -1;
	}
	snprintf(d->tinyvmm, sizeof(d->tinyvmm), "%s/tinyvmm", self);
	if (executable(d->tinyvmm))
		return 0;
	snprintf(d->tinyvmm, sizeof(d->tinyvmm),
		 "%s/../libexec/kvmstats/tinyvmm", self);
	if (executable(d->tinyvmm))
		return 0;
	cli_err(d->cli,
		"the tiny VMM is missing (looked for %s/tinyvmm and "
		"%s/../libexec/kvmstats/tinyvmm; 'make build' builds it)",
		self, self);
	return -1;
}

/* 0 when /dev/kvm opens and is KVM, else the errno (ENOTTY: some other
 * device, a file or /dev/null bound over it). */
static int kvm_errno(void)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	int err = 0;

	if (fd < 0)
		return errno;
	if (ioctl(fd, KVM_GET_API_VERSION, 0) != KVM_API_VERSION)
		err = ENOTTY;
	close(fd);
	return err;
}

/* What to do to see live VMs, for /dev/kvm failing with @err. */
static const char *kvm_advice(int err)
{
	if (err == EACCES || err == EPERM)
		return "join the group that owns /dev/kvm (usually kvm), or "
		       "run 'sudo kvmstats demo'";
	if (err == ENOTTY)
		return "/dev/kvm is not KVM's device here: load kvm_intel or "
		       "kvm_amd and let udev make it";
	return "load kvm_intel or kvm_amd (in a VM: enable nested "
	       "virtualization first)";
}

/* ---- no /dev/kvm: the recording -------------------------------------- */

const char *demo_hint(void)
{
	char path[PATH_MAX];
	int err = kvm_errno();

	if (!err)
		return geteuid() ? "run 'sudo kvmstats' to see every user's "
				   "VMs, or 'kvmstats demo'"
				 : "start one, or run 'kvmstats demo'";
	if (err == EACCES || err == EPERM)
		return "/dev/kvm is not yours: join its group (kvm), or run "
		       "'sudo kvmstats'";
	if (!find_recording(path, sizeof(path)))
		return "this host has no /dev/kvm; 'kvmstats demo' plays a "
		       "recording";
	return "this host has no /dev/kvm (load kvm_intel or kvm_amd)";
}

/* Without a terminal: the cause first, then what to do. */
static int no_kvm(struct cli *cli, int err, const char *rec, bool found)
{
	cli_err(cli, "/dev/kvm: %s: the demo runs real VMs, and needs KVM",
		strerror(err));
	cli_err(cli, "to see live VMs: %s", kvm_advice(err));
	if (found)
		cli_err(cli, "meanwhile, on a terminal, 'kvmstats demo' plays "
			     "a recording: kvmstats top --replay %s --loop",
			rec);
	return EXIT_FAIL;
}

static int play_recording(struct cli *cli, int err, const char *interval)
{
	char path[PATH_MAX], notice[160];
	char *argv[] = { "top", "--replay", path, "--loop", "--interval",
			 (char *)interval, NULL };
	struct top_banner banner = { "RECORDING, not live", notice };
	int ret;

	if (find_recording(path, sizeof(path))) {
		cli_err(cli, "no recording to play: looked for $%s, and "
			     "../dist/demo/ and ../share/kvmstats/demo/ next "
			     "to this program",
			"KVMSTATS_DEMO_RECORDING");
		return EXIT_FAIL;
	}
	if (!err)
		snprintf(notice, sizeof(notice),
			 "recorded VMs, not this host's: 'kvmstats demo' "
			 "runs live ones; q quits");
	else
		snprintf(notice, sizeof(notice),
			 "recorded: no /dev/kvm (%s). Live VMs: %s. q quits",
			 strerror(err),
			 err == EACCES || err == EPERM
				 ? "kvm group or sudo"
				 : "modprobe kvm_intel or kvm_amd");
	if (!interval)
		argv[4] = NULL;
	ret = top_main(cli, interval ? 6 : 4, argv, &banner);
	if (ret == EXIT_OK && err) {
		cli_err(cli, "that was a recording (%s): /dev/kvm: %s",
			path, strerror(err));
		cli_err(cli, "to see live VMs: %s", kvm_advice(err));
	}
	return ret;
}

/* ---- the guests --------------------------------------------------------- */

/*
 * With N VMs: N-2 VMs in one VMM on the demo workload (each VM cycles
 * through its own phases: bursts of exits, idle halts, memory, quiet),
 * one VM with an in-kernel irqchip (its halts wait in the kernel and
 * fill the halt-polling histograms), one writing pages over and over.
 */
static void plan(struct demo *d, long nvms)
{
	static const struct guest specs[MAX_GUESTS] = {
		{"demo workload",
		 "",
		 {"--name", "demo", "--vcpus", "2", "--workload", "demo", NULL}},
		{"demo workload, in-kernel irqchip",
		 "",
		 {"--name", "demo-irqchip", "--vcpus", "2", "--workload", "demo",
		  "--irqchip", NULL}},
		{"dirtying memory",
		 "",
		 {"--name", "demo-dirty", "--vcpus", "1", "--workload", "dirty",
		  "--pages", "64",
		  "--pass-hz", "20", NULL}},
	};

	d->n = nvms >= 3 ? 3 : (size_t)nvms;
	for (size_t i = 0; i < d->n; i++) {
		d->g[i] = specs[i];
		snprintf(d->g[i].vms, sizeof(d->g[i].vms), "%ld",
			 i ? 1 : nvms - (long)d->n + 1);
		snprintf(d->g[i].ready_path, sizeof(d->g[i].ready_path),
			 "%s/ready%zu", d->dir, i);
		snprintf(d->g[i].err_path, sizeof(d->g[i].err_path),
			 "%s/stderr%zu", d->dir, i);
	}
}

/* In the child: its own process group (the terminal's Ctrl-C is ours to
 * handle), stderr to a file (not over top's screen), and SIGTERM when
 * we die, so that no guest outlives the demo. */
static void exec_guest(const struct demo *d, const struct guest *g,
		       pid_t parent)
{
	const char *argv[24];
	size_t n = 0;
	int fd;

	setpgid(0, 0);
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent)
		_exit(127);
	fd = open(g->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0)
		dup2(fd, STDERR_FILENO);
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
	}
	argv[n++] = "tinyvmm";
	argv[n++] = "--vms";
	argv[n++] = g->vms;
	for (size_t i = 0; g->args[i]; i++)
		argv[n++] = g->args[i];
	argv[n++] = "--hold-stats";
	argv[n++] = "--ready";
	argv[n++] = g->ready_path;
	argv[n++] = "--timeout";
	argv[n++] = "1000000000";
	argv[n] = NULL;
	execv(d->tinyvmm, (char *const *)argv);
	_exit(127);
}

static int spawn(struct demo *d, struct guest *g)
{
	pid_t parent = getpid();

	fflush(NULL);
	g->pid = fork();
	if (g->pid < 0) {
		cli_err(d->cli, "fork: %s", strerror(errno));
		return -1;
	}
	if (!g->pid)
		exec_guest(d, g, parent);
	return 0;
}

/* What a guest that died said, on one line. */
static void report_death(struct demo *d, struct guest *g, int status)
{
	char why[256] = "";
	int fd = open(g->err_path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, why, sizeof(why) - 1) : 0;

	if (fd >= 0)
		close(fd);
	why[n > 0 ? n : 0] = 0;
	why[strcspn(why, "\n")] = 0;
	cli_warn(d->cli, "the guest with %s %s (%s)", g->what,
		 WIFSIGNALED(status) ? "was killed" : "failed",
		 why[0]		       ? why
		 : WIFSIGNALED(status) ? strsignal(WTERMSIG(status))
				       : "no message");
	g->pid = 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/* Wait (bounded) until every guest wrote its ready file or died.
 * Returns how many are running. */
static size_t wait_ready(struct demo *d)
{
	size_t running = 0;

	for (long waited = 0; waited < READY_TIMEOUT_MS; waited += 50) {
		struct timespec now = {0, 0};
		size_t pending = 0;

		/* Ctrl-C while they start: stop them, quietly. */
		if (sigtimedwait(&d->stop, NULL, &now) > 0) {
			d->interrupted = true;
			return 0;
		}

		for (size_t i = 0; i < d->n; i++) {
			struct guest *g = &d->g[i];
			int status;

			if (!g->pid || g->ready)
				continue;
			if (waitpid(g->pid, &status, WNOHANG) == g->pid)
				report_death(d, g, status);
			else if (!access(g->ready_path, F_OK))
				g->ready = true;
			else
				pending++;
		}
		if (!pending)
			break;
		sleep_ms(50);
	}
	for (size_t i = 0; i < d->n; i++) {
		if (d->g[i].pid && !d->g[i].ready)
			cli_warn(
				d->cli,
				"the guest with %s did not start in time",
				d->g[i].what);
		running += d->g[i].pid && d->g[i].ready;
	}
	return running;
}

/* SIGTERM every guest, give each a few seconds, then SIGKILL. */
static void stop_all(struct demo *d)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->g[i].pid > 0)
			kill(d->g[i].pid, SIGTERM);
	for (size_t i = 0; i < d->n; i++) {
		struct guest *g = &d->g[i];
		int status;

		if (g->pid <= 0)
			continue;
		for (int t = 0; t < 100; t++) {
			if (waitpid(g->pid, &status, WNOHANG) == g->pid)
				break;
			if (t == 99) {
				kill(g->pid, SIGKILL);
				waitpid(g->pid, &status, 0);
			}
			sleep_ms(50);
		}
		g->pid = 0;
	}
}

static void remove_dir(struct demo *d)
{
	for (size_t i = 0; i < d->n; i++) {
		unlink(d->g[i].ready_path);
		unlink(d->g[i].err_path);
	}
	rmdir(d->dir);
}

/* ---- running ------------------------------------------------------------ */

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void catch_stop(void)
{
	struct sigaction sa = {.sa_handler = on_stop};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

static int run_top(struct demo *d, const char *interval)
{
	char *argv[2 * MAX_GUESTS + 4];
	char pids[MAX_GUESTS][16];
	int argc = 0;

	argv[argc++] = "top";
	for (size_t i = 0; i < d->n; i++) {
		if (!d->g[i].pid)
			continue;
		snprintf(pids[i], sizeof(pids[i]), "%d", (int)d->g[i].pid);
		argv[argc++] = "--pid";
		argv[argc++] = pids[i];
	}
	if (interval) {
		argv[argc++] = "--interval";
		argv[argc++] = (char *)interval;
	}
	argv[argc] = NULL;
	return cmd_top(d->cli, argc, argv);
}

/* --no-top: wait for Ctrl-C or SIGTERM; a guest dying on its own is
 * reported, and when none is left the demo ends. */
static int run_quiet(struct demo *d)
{
	sigset_t set, old;
	size_t alive = 0;

	for (size_t i = 0; i < d->n; i++) {
		if (!d->g[i].pid)
			continue;
		printf("pid %d: %s VM%s, %s\n", (int)d->g[i].pid, d->g[i].vms,
		       strcmp(d->g[i].vms, "1") ? "s" : "", d->g[i].what);
		alive++;
	}
	printf("watch them with: %s top; Ctrl-C stops them\n", d->cli->prog);
	fflush(stdout);
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, &old);
	while (alive) {
		int sig = sigwaitinfo(&set, NULL);

		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
			break;
		for (size_t i = 0; sig == SIGCHLD && i < d->n; i++) {
			int status;

			if (d->g[i].pid && waitpid(d->g[i].pid, &status,
						   WNOHANG) == d->g[i].pid) {
				report_death(d, &d->g[i], status);
				alive--;
			}
		}
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return alive ? EXIT_OK : EXIT_FAIL;
}

struct demo_args {
	bool no_top, recording, vms_set;
	long nvms;
	const char *interval;
};

static int demo_opt(struct cli *cli, void *ctx, int key, const char *arg)
{
	struct demo_args *a = ctx;
	char *end;

	switch (key) {
	case OPT_NO_TOP:
		a->no_top = true;
		break;
	case 'n':
		a->nvms = cli_parse_long(cli, "--vms", arg, 1, 64);
		a->vms_set = true;
		return a->nvms < 0 ? -1 : 0;
	case 's':
		/* Checked now, as top will, before any guest starts. */
		if (!(strtod(arg, &end) >= 0.01) || *end || end == arg ||
		    strtod(arg, NULL) > 3600) {
			cli_err(cli, "--interval: '%s' is not a number of "
				"seconds in 0.01..3600", arg);
			return -1;
		}
		a->interval = arg;
		break;
	case OPT_RECORDING:
		a->recording = true;
		break;
	}
	return 0;
}

static int demo_check(struct cli *cli, void *ctx)
{
	struct demo_args *a = ctx;

	if (a->recording && a->no_top)
		return cli_bad(cli, "--recording plays in top; --no-top runs "
			       "guests");
	if (a->recording && a->vms_set)
		return cli_bad(cli, "--vms: the recording has the VMs it has");
	if (a->no_top && a->interval)
		return cli_bad(cli, "--interval is top's; --no-top shows none");
	return 0;
}

static const struct cli_opt demo_opts[] = {
	{ "vms", 'n', CLI_OPT_SHORT, "N", "4",
	  "guests to run, 1 to 64, in up to three VMMs" },
	{ "interval", 's', CLI_OPT_SHORT, "SECONDS", "1",
	  "top's time between readings" },
	{ "no-top", OPT_NO_TOP, 0, NULL, NULL,
	  "run the guests until Ctrl-C, for another tool to watch" },
	{ "recording", OPT_RECORDING, 0, NULL, NULL,
	  "play the recording of the demo's guests, as without /dev/kvm" },
	{ 0 },
};

static const struct cli_spec demo_spec = {
	.cmd = "demo",
	.text = "a screen",
	.about = "Real VMs to look at: start the project's tiny VMM with a few "
		 "workloads and open\ntop on them; every guest stops with it. "
		 "Without /dev/kvm (or with\n--recording), play a recording of "
		 "them instead, looping.",
	.opts = demo_opts,
	.opt = demo_opt,
	.check = demo_check,
};

int cmd_demo(struct cli *cli, int argc, char **argv)
{
	struct demo d = {.cli = cli};
	struct demo_args a = { .nvms = 4 };
	const char *interval;
	bool no_top, tty;
	char rec[PATH_MAX];
	size_t running;
	sigset_t old;
	int ret, err;

	ret = cli_parse(cli, &demo_spec, &a, argc, argv);
	if (ret != CLI_PARSED)
		return ret;
	interval = a.interval;
	no_top = a.no_top;
	tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
	err = kvm_errno();
	if (err && (no_top || !tty)) {
		bool found = !find_recording(rec, sizeof(rec));

		return no_kvm(cli, err, rec, found);
	}
	if (!no_top && !tty) {
		cli_err(cli, "top needs a terminal; use 'demo --no-top'");
		return EXIT_FAIL;
	}
	if (err || a.recording)
		return play_recording(cli, err, interval);
	if (find_tinyvmm(&d))
		return EXIT_FAIL;
	snprintf(d.dir, sizeof(d.dir), "/tmp/kvmstats-demo.XXXXXX");
	if (!mkdtemp(d.dir)) {
		cli_err(cli, "%s: %s", d.dir, strerror(errno));
		return EXIT_FAIL;
	}
	plan(&d, a.nvms);
	sigemptyset(&d.stop);
	sigaddset(&d.stop, SIGINT);
	sigaddset(&d.stop, SIGTERM);
	sigaddset(&d.stop, SIGHUP);
	sigprocmask(SIG_BLOCK, &d.stop, &old);
	ret = EXIT_FAIL;
	for (size_t i = 0; i < d.n; i++)
		if (spawn(&d, &d.g[i]))
			goto out;
	running = wait_ready(&d);
	if (d.interrupted) {
		ret = EXIT_OK;
		goto out;
	}
	if (!running) {
		cli_err(cli, "no guest could start");
		goto out;
	}
	if (no_top) {
		ret = run_quiet(&d);
		goto out;
	}
	if (running < d.n) {
		/* Let the warnings be read before the screen takes over. */
		cli_warn(cli, "going on with %zu of %zu guests", running, d.n);
		sleep_ms(3000);
	}
	/* top catches these itself while it runs; around it, a stop
	 * request (maybe pending since the start) skips it. */
	catch_stop();
	sigprocmask(SIG_SETMASK, &old, NULL);
	ret = stop_requested ? EXIT_OK : run_top(&d, interval);
out:
	stop_all(&d);
	remove_dir(&d);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return ret;
}
