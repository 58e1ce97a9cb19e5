// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * bench/sources: what a reading of one VM costs through each source, in
 * one run on the same VMs, with the fd source as the baseline.
 *
 *   build/bench/sources [SWEEPS]		(default 200, one every 5 ms)
 *
 * VMs: a real QEMU (build/mbguest.elf as its guest, a QMP socket on its
 * command line) and our tinyvmm holding its stats fds (the fd source, with
 * as many vCPUs). Each source opens the VMM (timed: for attach, this is
 * when the VMM's threads are held), then sweeps it SWEEPS times, paced.
 * Per sweep it reports the caller's wall time, the CPU time of this
 * process (background pollers included) and the VMM's extra CPU time
 * (per thread, minus what each burnt idle, measured first; a vCPU thread
 * that spins in its guest is left out), and the age of the data served.
 * A source that cannot serve the VM here (libvirt without a libvirt
 * domain, ...) is skipped and the reason said. debugfs, when the host
 * has not mounted it, is mounted in a mount namespace of this bench's own
 * (the host's mounts stay as they are). Ratios are against the fd source, measured in this run.
 * Attach is opened a few more times for the distribution of hold times.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmstats.h"

#include "bench.h"

#define VCPUS "2"
#define PACE_NS 5000000ull
#define ATTACH_OPENS 9

struct result {
	const char *source;
	pid_t pid;
	bool ok;
	char why[256];
	double open_ms;
	double wall_us;		/* per sweep, caller's wall time */
	double cpu_us;		/* per sweep, this process's CPU */
	double vmm_us;		/* per sweep, the VMM's extra CPU */
	double age_ms;		/* mean age of the VM's data */
	int readers;
};

static char tmpdir[] = "/tmp/kvmstats-bench.XXXXXX";
static bool have_tmpdir;
static pid_t children[2];

static void sleep_until(uint64_t t)
{
	struct timespec ts = { (time_t)(t / 1000000000ull),
			       (long)(t % 1000000000ull) };

	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

/*
 * The VMM's CPU time, per thread, in ns (schedstat): its idle rate is
 * measured first and subtracted, and a thread busy while idle (a vCPU
 * spinning in its guest) is left out, its noise would hide the rest.
 */
#define MAX_THREADS 64

struct vmm_cpu {
	pid_t pid;
	int n;
	pid_t tid[MAX_THREADS];
	uint64_t ns[MAX_THREADS];
	double idle_rate[MAX_THREADS];	/* ns of CPU per ns, when idle */
	uint64_t at;
};

static void vmm_cpu_read(struct vmm_cpu *c)
{
	char path[96];
	struct dirent *de;
	DIR *dir;

	c->n = 0;
	c->at = now_ns();
	snprintf(path, sizeof(path), "/proc/%d/task", (int)c->pid);
	dir = opendir(path);
	if (!dir)
		return;
	while ((de = readdir(dir)) && c->n < MAX_THREADS) {
		int tid = atoi(de->d_name);
		FILE *f;

		if (tid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat",
			 (int)c->pid, tid);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%" SCNu64, &c->ns[c->n]) == 1)
			c->tid[c->n++] = tid;
		fclose(f);
	}
	closedir(dir);
}

/* Extra CPU ns the VMM spent since @before, beyond its idle rate. */
static double vmm_cpu_extra(const struct vmm_cpu *idle,
			    const struct vmm_cpu *before,
			    const struct vmm_cpu *after)
{
	double sum = 0;

	for (int i = 0; i < after->n; i++) {
		for (int j = 0; j < before->n; j++) {
			double rate = 0;

			if (before->tid[j] != after->tid[i])
				continue;
			for (int k = 0; k < idle->n; k++)
				if (idle->tid[k] == after->tid[i])
					rate = idle->idle_rate[k];
			if (rate > 0.5)
				break;
			sum += (double)(after->ns[i] - before->ns[j]) -
			       rate * (double)(after->at - before->at);
		}
	}
	return sum;
}

/* A second of nothing: each thread's idle rate. */
static void vmm_cpu_idle(struct vmm_cpu *idle, pid_t pid)
{
	struct vmm_cpu a = { .pid = pid };

	idle->pid = pid;
	vmm_cpu_read(&a);
	usleep(1000000);
	vmm_cpu_read(idle);
	for (int i = 0; i < idle->n; i++)
		for (int j = 0; j < a.n; j++)
			if (a.tid[j] == idle->tid[i])
				idle->idle_rate[i] = (double)(idle->ns[i] - a.ns[j]) /
						     (double)(idle->at - a.at);
}

static void stop_children(void)
{
	for (int i = 0; i < 2; i++) {
		if (children[i] <= 0)
			continue;
		kill(children[i], SIGTERM);
		waitpid(children[i], NULL, 0);
		children[i] = 0;
	}
	if (have_tmpdir) {
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
		if (system(cmd))
			fprintf(stderr, "bench/sources: could not remove %s\n", tmpdir);
	}
}

/* How long tasks here wait for a CPU (PSI): holds are mostly that wait. */
static void print_pressure(const char *when)
{
	char line[256] = "";
	FILE *f = fopen("/proc/pressure/cpu", "r");

	if (f && fgets(line, sizeof(line), f))
		printf("cpu pressure %s: %s", when, line);
	if (f)
		fclose(f);
}

static pid_t spawn(char *const argv[])
{
	pid_t pid = fork();

	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Wait up to @sec seconds for @needle in @path. */
static bool wait_for(const char *path, const char *needle, int sec, pid_t pid)
{
	char buf[4096];

	for (int i = 0; i < sec * 20; i++) {
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (f)
			fclose(f);
		buf[n] = 0;
		if (strstr(buf, needle))
			return true;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return false;
		usleep(50000);
	}
	return false;
}

static pid_t start_qemu(const char *guest)
{
	char serial[192], qmp[192], sock[160];
	char *argv[] = {
		"qemu-system-x86_64", "-enable-kvm", "-m", "256", "-smp", VCPUS,
		"-display", "none", "-nodefaults", "-no-user-config",
		"-name", "guest=bench", "-serial", serial, "-qmp", qmp,
		"-kernel", (char *)guest, "-append", "exits=1000", NULL,
	};
	pid_t pid;

	snprintf(sock, sizeof(sock), "%s/qmp", tmpdir);
	snprintf(serial, sizeof(serial), "file:%s/serial", tmpdir);
	snprintf(qmp, sizeof(qmp), "unix:%s,server=on,wait=off", sock);
	pid = children[0] = spawn(argv);
	snprintf(serial, sizeof(serial), "%s/serial", tmpdir);
	if (pid < 0 || !wait_for(serial, "READY", 30, pid))
		return -1;
	return pid;
}

static pid_t start_tinyvmm(const char *bin)
{
	char ready[160];
	char *argv[] = {
		(char *)bin, "--hold-stats", "--vcpus", VCPUS, "--exits", "1000",
		"--ready", ready, "--timeout", "600", NULL,
	};
	pid_t pid;

	snprintf(ready, sizeof(ready), "%s/ready", tmpdir);
	pid = children[1] = spawn(argv);
	if (pid < 0 || !wait_for(ready, "pid", 30, pid))
		return -1;
	return pid;
}

static struct kvmstats_host *open_host(struct kvmstats_ctx *ctx,
				       const char *source, pid_t *pid,
				       double *open_ms, char *why, size_t len)
{
	KVMSTATS_OPTS(kvmstats_host_opts, o, .pids = pid, .npids = 1,
		      .source = source, .flags = KVMSTATS_HOST_ATTACH);
	struct kvmstats_host *h = kvmstats_host__new(ctx, &o);
	uint64_t t0 = now_ns();
	int n;

	if (!h) {
		snprintf(why, len, "%s", strerror(errno));
		return NULL;
	}
	n = kvmstats_host__refresh(h);
	*open_ms = (double)(now_ns() - t0) / 1e6;
	if (n < 0 || !kvmstats_host__num_vmms(h)) {
		snprintf(why, len, "%s", n < 0 ? strerror(-n) : kvmstats_host__errors(h));
		why[strcspn(why, "\n")] = 0;
		kvmstats_host__free(h);
		return NULL;
	}
	return h;
}

static int count_readers(struct kvmstats_host *h)
{
	struct kvmstats_vmm *v = kvmstats_host__vmm(h, 0);
	int n = 0;

	for (size_t i = 0; i < kvmstats_vmm__num_vms(v); i++) {
		struct kvmstats_vm *vm = kvmstats_vmm__vm(v, i);

		n += (kvmstats_vm__reader(vm) != NULL) + (int)kvmstats_vm__num_vcpus(vm);
	}
	return n;
}

static double vm_age_ms(struct kvmstats_host *h)
{
	struct kvmstats_vm *vm = kvmstats_vmm__vm(kvmstats_host__vmm(h, 0), 0);
	struct kvmstats_reader *r = vm ? kvmstats_vm__reader(vm) : NULL;

	if (!r && vm && kvmstats_vm__num_vcpus(vm))
		r = kvmstats_vm__vcpu(vm, 0, NULL);
	return r ? (double)kvmstats_reader__age_ns(r) / 1e6 : 0;
}

static void measure(struct kvmstats_ctx *ctx, struct result *res, int sweeps,
		    const struct vmm_cpu *idle)
{
	struct vmm_cpu v0 = { .pid = res->pid }, v1 = { .pid = res->pid };
	uint64_t wall = 0, c0, next;
	struct kvmstats_host *h = NULL;
	double age = 0;

	/* Other clients (tests, libvirt) may hold QEMU's one monitor for a
	 * moment: ask again a few times. */
	for (int i = 0; i < 10; i++) {
		h = open_host(ctx, res->source, &res->pid, &res->open_ms,
			      res->why, sizeof(res->why));
		if (h || !strstr(res->why, "busy"))
			break;
		usleep(500000);
	}
	if (!h)
		return;
	res->readers = count_readers(h);
	for (int i = 0; i < 3; i++) {		/* warm up, let pollers start */
		kvmstats_host__sweep(h);
		usleep(20000);
	}
	c0 = cpu_ns();
	vmm_cpu_read(&v0);
	next = now_ns();
	for (int i = 0; i < sweeps; i++) {
		uint64_t s;

		sleep_until(next += PACE_NS);
		s = now_ns();
		kvmstats_host__sweep(h);
		wall += now_ns() - s;
		age += vm_age_ms(h);
	}
	vmm_cpu_read(&v1);
	res->cpu_us = (double)(cpu_ns() - c0) / sweeps / 1e3;
	res->vmm_us = vmm_cpu_extra(idle, &v0, &v1) / sweeps / 1e3;
	if (res->vmm_us < 0)
		res->vmm_us = 0;
	res->wall_us = (double)wall / sweeps / 1e3;
	res->age_ms = age / sweeps;
	res->ok = true;
	kvmstats_host__free(h);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void attach_holds(struct kvmstats_ctx *ctx, pid_t pid)
{
	double max_us[ATTACH_OPENS], sum_max = 0, worst = 0, open_ms;
	char why[256];
	int ok = 0, holds = 0;

	for (int i = 0; i < ATTACH_OPENS; i++) {
		struct kvmstats_host *h = open_host(ctx, "attach", &pid, &open_ms,
						    why, sizeof(why));
		uint64_t mx, total;
		int n;

		if (!h) {
			printf("  attach open %d failed: %s\n", i, why);
			continue;
		}
		n = kvmstats_vmm__attach_hold_ns(kvmstats_host__vmm(h, 0), &mx, &total);
		if (n > 0) {
			max_us[ok] = (double)mx / 1e3;
			sum_max += max_us[ok];
			worst = max_us[ok] > worst ? max_us[ok] : worst;
			holds = n;
			printf("  attach %d: %d threads held, longest %.0f us, "
			       "total %.0f us, open %.2f ms\n", i + 1, n,
			       (double)mx / 1e3, (double)total / 1e3, open_ms);
			ok++;
		}
		kvmstats_host__free(h);
		usleep(50000);
	}
	if (!ok)
		return;
	qsort(max_us, (size_t)ok, sizeof(*max_us), cmp_double);
	printf("held per attach (QEMU, %d threads): longest hold median %.0f us, "
	       "mean %.0f us, worst %.0f us\n", holds, max_us[ok / 2],
	       sum_max / ok, worst);
}

static void print_results(const struct result *r, size_t n)
{
	const struct result *fd = &r[0];

	printf("\n%-8s %-7s %7s %8s %9s %8s %8s %7s %8s %8s\n", "source", "VMM",
	       "readers", "open ms", "sweep us", "ours us", "vmm us", "age ms",
	       "x fd", "x fd+vmm");
	for (size_t i = 0; i < n; i++) {
		if (!r[i].ok) {
			printf("%-8s skipped: %s\n", r[i].source, r[i].why);
			continue;
		}
		printf("%-8s %-7s %7d %8.2f %9.1f %8.1f %8.1f %7.2f", r[i].source,
		       i == 0 ? "tinyvmm" : "qemu", r[i].readers, r[i].open_ms,
		       r[i].wall_us, r[i].cpu_us, r[i].vmm_us, r[i].age_ms);
		if (fd->ok && fd->cpu_us > 0)
			printf(" %8.1f %8.1f\n", r[i].cpu_us / fd->cpu_us,
			       (r[i].cpu_us + r[i].vmm_us) /
			       (fd->cpu_us + fd->vmm_us));
		else
			printf(" %8s %8s\n", "-", "-");
	}
	printf("(per sweep of one VM and its %s vCPUs. sweep: the caller's wall "
	       "time; ours: this\nprocess's CPU, pollers included; vmm: the "
	       "VMM's threads beyond their idle use,\nnoise for sources that "
	       "never contact it; x fd: ours / fd's ours, x fd+vmm: with\n"
	       "the VMM's)\n", VCPUS);
}

/* debugfs for this process only, when the host has not mounted it. */
static void private_debugfs(void)
{
	if (!access("/sys/kernel/debug/kvm", F_OK))
		return;
	if (unshare(CLONE_NEWNS) ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL))
		fprintf(stderr, "bench/sources: no private debugfs: %s\n",
			strerror(errno));
}

int main(int argc, char **argv)
{
	int sweeps = argc > 1 ? atoi(argv[1]) : 200;
	const char *guest = getenv("MBGUEST") ?: "build/mbguest.elf";
	const char *tiny = getenv("TINYVMM") ?: "build/tinyvmm";
	struct result res[] = {
		{ "fd" }, { "attach" }, { "qmp" }, { "libvirt" }, { "debugfs" },
	};
	struct kvmstats_ctx *ctx;
	pid_t qemu, vmm;
	static struct vmm_cpu idle[2];

	if (access("/dev/kvm", R_OK | W_OK)) {
		printf("bench/sources: /dev/kvm is not available: skipped\n");
		return 0;
	}
	if (access(guest, R_OK) || access(tiny, X_OK)) {
		printf("bench/sources: %s or %s missing (make build): skipped\n",
		       guest, tiny);
		return 0;
	}
	if (sweeps < 10)
		sweeps = 10;
	private_debugfs();
	if (!mkdtemp(tmpdir))
		return 1;
	have_tmpdir = true;
	atexit(stop_children);
	signal(SIGINT, exit);
	signal(SIGTERM, exit);
	qemu = start_qemu(guest);
	vmm = start_tinyvmm(tiny);
	if (qemu < 0 || vmm < 0) {
		fprintf(stderr, "bench/sources: %s did not start\n",
			qemu < 0 ? "QEMU" : "tinyvmm");
		return 1;
	}
	ctx = kvmstats_ctx__new(NULL);
	printf("QEMU pid %d, tinyvmm pid %d, %s vCPUs each, %d sweeps every "
	       "%llu ms\n", (int)qemu, (int)vmm, VCPUS, sweeps, PACE_NS / 1000000);
	print_pressure("before");
	vmm_cpu_idle(&idle[0], vmm);
	vmm_cpu_idle(&idle[1], qemu);
	res[0].pid = vmm;
	for (size_t i = 1; i < sizeof(res) / sizeof(res[0]); i++)
		res[i].pid = qemu;
	for (size_t i = 0; i < sizeof(res) / sizeof(res[0]); i++)
		measure(ctx, &res[i], sweeps, &idle[i != 0]);
	print_results(res, sizeof(res) / sizeof(res[0]));
	printf("\nattach: the time QEMU's threads were held\n");
	attach_holds(ctx, qemu);
	print_pressure("after");
	kvmstats_ctx__free(ctx);
	return 0;
}
