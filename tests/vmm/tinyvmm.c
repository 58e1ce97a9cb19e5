// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tinyvmm: command line, process lifetime, the ready file and stats images.
 *
 * Lifetime: create every VM and vCPU (holding stats fds if asked), start
 * the vCPU threads, wait until every vCPU reached its ready point, save
 * stats images, write the ready file, then wait for SIGTERM/SIGINT or the
 * timeout and tear everything down.  SIGTERM, SIGINT and SIGUSR2 (a vCPU
 * thread's "ready" or "failed") are blocked in every thread and taken by
 * the main thread with sigtimedwait, so no handler races the main loop.
 */
#define _GNU_SOURCE	/* POSIX and Linux interfaces, even with -std=c11 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tinyvmm.h"

struct tinyvmm tv;

static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static char err_msg[512];
static bool err_astray;

static void vfail(bool astray, const char *fmt, va_list ap)
{
	int saved = errno;

	pthread_mutex_lock(&err_lock);
	if (!err_msg[0]) {
		errno = saved;
		vsnprintf(err_msg, sizeof(err_msg), fmt, ap);
		err_astray = astray;
	}
	pthread_mutex_unlock(&err_lock);
}

/* Record the first error; every later one is a consequence of it. */
int tv_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(false, fmt, ap);
	va_end(ap);
	return -1;
}

/* The same, for a guest that left its program (see tinyvmm.h). */
int tv_astray(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(true, fmt, ap);
	va_end(ap);
	return -1;
}

/* One line appended to $KVMSTATS_TEST_ASTRAY, when the runner set it. */
static void report_astray(void)
{
	const char *path = getenv("KVMSTATS_TEST_ASTRAY");
	FILE *f;

	if (!err_astray || !path || !*path)
		return;
	f = fopen(path, "ae");
	if (!f)
		return;
	fprintf(f, "tinyvmm pid %d: %s\n", getpid(), err_msg);
	fclose(f);
}

/* One write per line, so lines from vCPU threads do not interleave. */
void tv_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	if (!tv.o.verbose)
		return;
	n = snprintf(line, sizeof(line), "tinyvmm: ");
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0)
		return;	/* nowhere left to report it */
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void usage(FILE *f)
{
	fputs("usage: tinyvmm [options]\n"
	      "  --vms N            VMs to create (default 1)\n"
	      "  --vcpus M          vCPUs per VM (default 1, at most 64)\n"
	      "  --exits K          port I/O exits per guest program (default 0)\n"
	      "  --pages P          4 KiB pages each vCPU writes per program\n"
	      "  --halts H          hlt instructions per program before the last (default 0)\n"
	      "  --halt-us U        with --irqchip, LAPIC timer that ends each of those halts (default 100)\n"
	      "  --mode real|prot   guest CPU mode (default prot)\n"
	      "  --workload halt|demo|dirty  (default halt)\n"
	      "  --pass-hz N        dirty: at most N passes per second per vCPU (default: no limit)\n"
	      "  --irqchip          in-kernel irqchip; halts wait in the kernel (prot mode)\n"
	      "  --hold-stats       hold KVM_GET_STATS_FD fds for every VM and vCPU\n"
	      "  --no-run           create everything but never enter KVM_RUN\n"
	      "  --ready FILE       write FILE when ready\n"
	      "  --save DIR         when ready, save every held stats fd to DIR/vmI[-vcpuJ].bin\n"
	      "  --timeout S        exit after S seconds (default 600)\n"
	      "  --verbose          say what is happening on stderr\n"
	      "  --name NAME        a name for tools to show (like QEMU's -name)\n"
	      "  --memfd            guest RAM in a memfd (MAP_SHARED), as QEMU's memory-backend-memfd\n"
	      "  --churn-ms N       with --memfd, once ready: every N ms truncate the memfd to 0,\n"
	      "                     N/2 ms later give it back its size and its data pages\n"
	      "                     (without it, with --memfd: each SIGUSR1 does one of the two)\n",
	      f);
}

static int parse_uint(const char *name, const char *s, unsigned long min,
		      unsigned long max, uint32_t *out)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
		return tv_fail("--%s: '%s' is not a number from %lu to %lu",
			       name, s, min, max);
	*out = (uint32_t)v;
	return 0;
}

enum {
	OPT_VMS = 256, OPT_VCPUS, OPT_EXITS, OPT_PAGES, OPT_HALTS, OPT_HALT_US,
	OPT_MODE, OPT_WORKLOAD, OPT_PASS_HZ, OPT_IRQCHIP, OPT_HOLD_STATS,
	OPT_NO_RUN, OPT_READY, OPT_SAVE, OPT_TIMEOUT, OPT_VERBOSE, OPT_HELP,
	OPT_NAME, OPT_MEMFD, OPT_CHURN_MS,
};

static const struct option long_opts[] = {
	{ "vms", required_argument, NULL, OPT_VMS },
	{ "vcpus", required_argument, NULL, OPT_VCPUS },
	{ "exits", required_argument, NULL, OPT_EXITS },
	{ "pages", required_argument, NULL, OPT_PAGES },
	{ "halts", required_argument, NULL, OPT_HALTS },
	{ "halt-us", required_argument, NULL, OPT_HALT_US },
	{ "mode", required_argument, NULL, OPT_MODE },
	{ "workload", required_argument, NULL, OPT_WORKLOAD },
	{ "pass-hz", required_argument, NULL, OPT_PASS_HZ },
	{ "irqchip", no_argument, NULL, OPT_IRQCHIP },
	{ "hold-stats", no_argument, NULL, OPT_HOLD_STATS },
	{ "no-run", no_argument, NULL, OPT_NO_RUN },
	{ "ready", required_argument, NULL, OPT_READY },
	{ "save", required_argument, NULL, OPT_SAVE },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "verbose", no_argument, NULL, OPT_VERBOSE },
	{ "name", required_argument, NULL, OPT_NAME },
	{ "memfd", no_argument, NULL, OPT_MEMFD },
	{ "churn-ms", required_argument, NULL, OPT_CHURN_MS },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

static int parse_word(const char *name, const char *s,
		      const char *const *words, int *out)
{
	int i;

	for (i = 0; words[i]; i++) {
		if (!strcmp(s, words[i])) {
			*out = i;
			return 0;
		}
	}
	return tv_fail("--%s: unknown value '%s'", name, s);
}

static const char *const mode_names[] = { "real", "prot", NULL };
static const char *const workload_names[] = { "halt", "demo", "dirty", NULL };

static int parse_one(struct opts *o, int c, const char *arg)
{
	uint32_t n;
	int w = 0;

	switch (c) {
	case OPT_VMS:
		if (parse_uint("vms", arg, 1, 100000, &n) < 0)
			return -1;
		o->vms = n;
		return 0;
	case OPT_VCPUS:
		if (parse_uint("vcpus", arg, 1, MAX_VCPUS, &n) < 0)
			return -1;
		o->vcpus = n;
		return 0;
	case OPT_EXITS:
		return parse_uint("exits", arg, 0, UINT32_MAX, &o->exits);
	case OPT_PAGES:
		o->pages_set = true;
		return parse_uint("pages", arg, 0, PROT_MODE_TOP / PAGE_SIZE,
				  &o->pages);
	case OPT_HALTS:
		return parse_uint("halts", arg, 0, UINT32_MAX, &o->halts);
	case OPT_HALT_US:
		return parse_uint("halt-us", arg, 1, 4000000, &o->halt_us);
	case OPT_PASS_HZ:
		return parse_uint("pass-hz", arg, 0, 1000000, &o->pass_hz);
	case OPT_TIMEOUT:
		if (parse_uint("timeout", arg, 1, 1000000000, &n) < 0)
			return -1;
		o->timeout = n;
		return 0;
	case OPT_MODE:
		if (parse_word("mode", arg, mode_names, &w) < 0)
			return -1;
		o->mode = w;
		return 0;
	case OPT_WORKLOAD:
		if (parse_word("workload", arg, workload_names, &w) < 0)
			return -1;
		o->workload = w;
		return 0;
	case OPT_IRQCHIP:
		o->irqchip = true;
		return 0;
	case OPT_HOLD_STATS:
		o->hold_stats = true;
		return 0;
	case OPT_NO_RUN:
		o->no_run = true;
		return 0;
	case OPT_READY:
		o->ready = arg;
		return 0;
	case OPT_SAVE:
		o->save = arg;
		return 0;
	case OPT_VERBOSE:
		o->verbose = true;
		return 0;
	case OPT_NAME:
		/* Only shown: tools read it from our command line, as QEMU's. */
		return 0;
	case OPT_MEMFD:
		o->memfd = true;
		return 0;
	case OPT_CHURN_MS:
		return parse_uint("churn-ms", arg, 2, 60000, &o->churn_ms);
	}
	return tv_fail("bad option (try --help)");
}

/* Cross-option rules, and the demo's default page window. */
static int check_opts(struct opts *o)
{
	uint64_t top = o->mode == MODE_REAL ? REAL_MODE_TOP : PROT_MODE_TOP;

	if (o->irqchip && o->mode != MODE_PROT)
		return tv_fail("--irqchip needs --mode prot (the guest's timer handler is 32-bit code)");
	if (o->save && !o->hold_stats)
		return tv_fail("--save needs --hold-stats");
	if (o->churn_ms && (!o->memfd || o->workload != WL_HALT))
		return tv_fail("--churn-ms needs --memfd and the halt workload "
			       "(no vCPU may run on memory taken away)");
	if (o->workload == WL_DEMO && !o->pages_set)
		o->pages = o->mode == MODE_REAL ? 16 : 256;
	if (GUEST_BASE_SIZE + (uint64_t)o->vcpus * o->pages * PAGE_SIZE > top)
		return tv_fail("--pages %u x --vcpus %u does not fit below %#llx in %s mode",
			       o->pages, o->vcpus, (unsigned long long)top,
			       mode_names[o->mode]);
	return 0;
}

static int parse_opts(struct opts *o, int argc, char **argv)
{
	int c;

	o->vms = 1;
	o->vcpus = 1;
	o->halt_us = 100;
	o->mode = MODE_PROT;
	o->workload = WL_HALT;
	o->timeout = 600;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
		if (c == OPT_HELP) {
			usage(stdout);
			exit(0);
		}
		if (c == '?')
			return tv_fail("unknown or incomplete option '%s' (try --help)",
				       argv[optind - 1]);
		if (parse_one(o, c, optarg) < 0)
			return -1;
	}
	if (optind < argc)
		return tv_fail("unexpected argument '%s' (try --help)",
			       argv[optind]);
	return check_opts(o);
}

/* Each VM takes 2 fds plus 2 per vCPU; more with the stats fds held. */
static int raise_nofile(const struct opts *o)
{
	uint64_t per_vm = (1 + o->vcpus) * (o->hold_stats ? 2 : 1);
	uint64_t need = o->vms * per_vm + 16;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return tv_fail("getrlimit RLIMIT_NOFILE: %m");
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return tv_fail("setrlimit RLIMIT_NOFILE to %llu: %m",
			       (unsigned long long)rl.rlim_max);
	if (rl.rlim_cur != RLIM_INFINITY && need > rl.rlim_cur)
		return tv_fail("%llu fds needed, RLIMIT_NOFILE hard limit is %llu",
			       (unsigned long long)need,
			       (unsigned long long)rl.rlim_cur);
	return 0;
}

static int create_vms(struct tinyvmm *t)
{
	unsigned int i;

	t->vms = calloc(t->o.vms, sizeof(*t->vms));
	if (!t->vms)
		return tv_fail("out of memory");
	for (i = 0; i < t->o.vms; i++) {
		t->vms[i].index = i;
		t->nr_vms = i + 1;	/* vm_destroy() cleans a partial VM */
		if (vm_create(t, &t->vms[i]) < 0)
			return -1;
	}
	tv_log("%u VMs x %u vCPUs created in %.1f ms", t->o.vms, t->o.vcpus,
	       (now_ns() - t->start_ns) / 1e6);
	return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		p += n;
		len -= n;
	}
	return 0;
}

/* Copy a stats fd, header to last histogram bucket, into a file. */
static int save_one(int sfd, const char *path)
{
	char buf[4096];
	off_t off = 0;
	int fd, ret = -1;
	ssize_t n;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return tv_fail("open %s: %m", path);
	/* pread, never read: lseek on a stats fd does nothing. */
	while ((n = pread(sfd, buf, sizeof(buf), off)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			tv_fail("pread stats fd %d: %m", sfd);
			goto out;
		}
		if (write_all(fd, buf, n) < 0) {
			tv_fail("write %s: %m", path);
			goto out;
		}
		off += n;
	}
	ret = 0;
out:
	if (close(fd) < 0 && !ret)
		ret = tv_fail("close %s: %m", path);
	return ret;
}

static int save_images(struct tinyvmm *t)
{
	char path[PATH_MAX];
	unsigned int i, j;

	if (mkdir(t->o.save, 0755) < 0 && errno != EEXIST)
		return tv_fail("mkdir %s: %m", t->o.save);
	for (i = 0; i < t->nr_vms; i++) {
		struct vm *vm = &t->vms[i];

		snprintf(path, sizeof(path), "%s/vm%u.bin", t->o.save, i);
		if (save_one(vm->stats_fd, path) < 0)
			return -1;
		for (j = 0; j < t->o.vcpus; j++) {
			snprintf(path, sizeof(path), "%s/vm%u-vcpu%u.bin",
				 t->o.save, i, j);
			if (save_one(vm->vcpus[j].stats_fd, path) < 0)
				return -1;
		}
	}
	return 0;
}

static void print_stats_fds(FILE *f, struct tinyvmm *t)
{
	unsigned int i, j;

	fputs("stats_fds", f);
	for (i = 0; i < t->nr_vms; i++) {
		fprintf(f, " %d", t->vms[i].stats_fd);
		for (j = 0; j < t->o.vcpus; j++)
			fprintf(f, " %d", t->vms[i].vcpus[j].stats_fd);
	}
	fputc('\n', f);
}

/* Per vCPU, in the order of stats_fds: halts whose interrupt came first. */
static void print_early_wakes(FILE *f, struct tinyvmm *t)
{
	unsigned int i, j;

	fputs("early_wakes", f);
	for (i = 0; i < t->nr_vms; i++)
		for (j = 0; j < t->o.vcpus; j++)
			fprintf(f, " %llu", (unsigned long long)
				t->vms[i].vcpus[j].early_wakes);
	fputc('\n', f);
}

/* Written to a temporary name and renamed, so a reader never sees half. */
static int write_ready(struct tinyvmm *t)
{
	char tmp[PATH_MAX];
	FILE *f;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", t->o.ready,
			     getpid()) >= sizeof(tmp))
		return tv_fail("--ready path too long");
	f = fopen(tmp, "we");
	if (!f)
		return tv_fail("open %s: %m", tmp);
	fprintf(f, "pid %d\nvms %u\nvcpus %u\nexits %u\npages %u\nhalts %u\n"
		"mode %s\nworkload %s\nirqchip %d\n", getpid(), t->o.vms,
		t->o.vcpus, t->o.exits, t->o.pages, t->o.halts,
		mode_names[t->o.mode], workload_names[t->o.workload],
		t->o.irqchip);
	print_early_wakes(f, t);
	if (t->o.hold_stats)
		print_stats_fds(f, t);
	if (fclose(f) != 0) {
		unlink(tmp);
		return tv_fail("write %s: %m", tmp);
	}
	if (rename(tmp, t->o.ready) < 0) {
		unlink(tmp);
		return tv_fail("rename %s to %s: %m", tmp, t->o.ready);
	}
	return 0;
}

static struct timespec remaining(uint64_t deadline)
{
	uint64_t now = now_ns(), left = deadline > now ? deadline - now : 0;
	struct timespec ts = {
		.tv_sec = left / 1000000000ull,
		.tv_nsec = left % 1000000000ull,
	};

	return ts;
}

enum wait_result { WAIT_EVENT, WAIT_STOP, WAIT_TIMEOUT, WAIT_TOGGLE };

/* Wait for SIGUSR2 (a vCPU event), SIGUSR1 (--memfd: take the RAM away
 * or give it back), SIGTERM/SIGINT, or the deadline. */
static enum wait_result wait_signal(const sigset_t *set, uint64_t deadline)
{
	for (;;) {
		struct timespec ts = remaining(deadline);
		int sig = sigtimedwait(set, NULL, &ts);

		if (sig == SIGUSR2)
			return WAIT_EVENT;
		if (sig == SIGUSR1)
			return WAIT_TOGGLE;
		if (sig == SIGTERM || sig == SIGINT)
			return WAIT_STOP;
		if (sig < 0 && errno == EAGAIN)
			return WAIT_TIMEOUT;
	}
}

/* Returns 0 when every vCPU is at its ready point, 1 if told to stop. */
static int wait_ready(struct tinyvmm *t, const sigset_t *set,
		      uint64_t deadline)
{
	while (atomic_load(&t->pending) && !atomic_load(&t->failed)) {
		switch (wait_signal(set, deadline)) {
		case WAIT_EVENT:
		case WAIT_TOGGLE:	/* not ready: nothing to take away yet */
			break;
		case WAIT_STOP:
			return 1;
		case WAIT_TIMEOUT:
			return tv_fail("timed out: %u vCPUs never became ready",
				       atomic_load(&t->pending));
		}
	}
	return atomic_load(&t->failed) ? -1 : 0;
}

static int churn_or_wait(struct tinyvmm *t, const sigset_t *set,
			 uint64_t deadline);

static int run(struct tinyvmm *t, const sigset_t *set)
{
	uint64_t deadline = t->start_ns + (uint64_t)t->o.timeout * 1000000000ull;
	int r;

	if (raise_nofile(&t->o) < 0 || kvm_open(t) < 0 || create_vms(t) < 0)
		return -1;

	if (!t->o.no_run) {
		atomic_store(&t->pending, t->o.vms * t->o.vcpus);
		if (vcpus_start(t) < 0)
			return -1;
		r = wait_ready(t, set, deadline);
		if (r)
			return r < 0 ? -1 : 0;
	}

	if (t->o.save && save_images(t) < 0)
		return -1;
	if (t->o.ready && write_ready(t) < 0)
		return -1;
	tv_log("ready, pid %d", getpid());
	return churn_or_wait(t, set, deadline);
}

/* --churn-ms: take every VM's RAM away (truncated) and give it back,
 * half a period each. */
static int churn_step(struct tinyvmm *t, bool away)
{
	unsigned int i;

	for (i = 0; i < t->nr_vms; i++)
		if (vm_churn(&t->vms[i], away) < 0)
			return -1;
	return 0;
}

/* After ready: until SIGTERM/SIGINT or the deadline, churning the RAM
 * when asked to (--churn-ms), or taking it away and giving it back at
 * each SIGUSR1 (--memfd). */
static int churn_or_wait(struct tinyvmm *t, const sigset_t *set,
			 uint64_t deadline)
{
	uint64_t half = (uint64_t)t->o.churn_ms * 500000ull, next = deadline;
	bool away = false;
	unsigned int i;

	for (i = 0; t->o.memfd && i < t->nr_vms; i++)
		if (vm_churn_save(&t->vms[i]) < 0)
			return -1;
	if (t->o.churn_ms)
		next = now_ns();
	for (;;) {
		switch (wait_signal(set, next < deadline ? next : deadline)) {
		case WAIT_EVENT:
			if (atomic_load(&t->failed))
				return -1;
			break;
		case WAIT_TOGGLE:
			if (!t->o.memfd)
				break;
			away = !away;
			if (churn_step(t, away) < 0)
				return -1;
			tv_log("RAM %s", away ? "taken away" : "given back");
			break;
		case WAIT_STOP:
			return 0;
		case WAIT_TIMEOUT:
			if (now_ns() >= deadline) {
				tv_log("timeout after %u s", t->o.timeout);
				return 0;
			}
			away = !away;
			if (churn_step(t, away) < 0)
				return -1;
			next += half;
			break;
		}
	}
}

static void teardown(struct tinyvmm *t)
{
	unsigned int i;

	if (t->vms) {
		vcpus_stop(t);
		for (i = 0; i < t->nr_vms; i++)
			vm_destroy(t, &t->vms[i]);
	}
	free(t->vms);
	t->vms = NULL;
	if (t->kvm_fd >= 0)
		close(t->kvm_fd);
	t->kvm_fd = -1;
}

int main(int argc, char **argv)
{
	struct tinyvmm *t = &tv;
	sigset_t set;
	int r;

	t->kvm_fd = -1;
	t->start_ns = now_ns();
	if (parse_opts(&t->o, argc, argv) < 0) {
		fprintf(stderr, "tinyvmm: %s\n", err_msg);
		return 1;
	}

	/* Blocked before any thread exists, so every thread inherits it. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	r = run(t, &set);
	teardown(t);
	if (r < 0 || atomic_load(&t->failed)) {
		fprintf(stderr, "tinyvmm: %s\n", err_msg[0] ? err_msg :
			"unknown error");
		report_astray();
		return 1;
	}
	return 0;
}
