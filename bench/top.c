// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * bench/top: the CPU time `kvmstats top` spends per refresh, at its
 * default 1 s interval, watching 100 VMs x 2 vCPUs (300 stats fds held by
 * the tiny VMM), against the bare pread loop over the same fds measured
 * in the same run.
 *
 *   build/bench/top [SECONDS]	(default 20 s of top per screen size)
 *
 * top runs for real, in tmux, at 80x24 and at 200x60 (more rows drawn);
 * its CPU time is read from /proc/PID/schedstat (ns, unlike the 10 ms
 * ticks of /proc/PID/stat). A refresh here is everything one interval
 * costs: sweep, model, drawing, and a share of the VMM rescan that runs
 * every 3 s.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmstats.h"

#include "bench.h"

#define VMS 100
#define VCPUS 2

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* build/bench/top -> build/ */
static int build_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	char *s;

	if (n <= 0)
		return -1;
	buf[n] = 0;
	for (int i = 0; i < 2; i++) {
		s = strrchr(buf, '/');
		if (!s)
			return -1;
		*s = 0;
	}
	return 0;
}

static pid_t start_vmm(const char *dir, const char *ready)
{
	char path[PATH_MAX];
	pid_t pid;

	snprintf(path, sizeof(path), "%s/tinyvmm", dir);
	unlink(ready);
	pid = fork();
	if (pid == 0) {
		execl(path, "tinyvmm", "--vms", "100", "--vcpus", "2",
		      "--hold-stats", "--no-run", "--ready", ready, "--timeout",
		      "600", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; pid > 0 && i < 200; i++) {
		if (!access(ready, F_OK))
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1;
		sleep_s(0.1);
	}
	if (pid > 0)
		kill(pid, SIGTERM);
	return -1;
}

struct fds {
	int fd[VMS * (VCPUS + 1)];
	off_t off[VMS * (VCPUS + 1)];
	size_t size[VMS * (VCPUS + 1)];
	int n;
};

static void add(struct fds *f, struct kvmstats_reader *r)
{
	struct kvmstats_schema *s = kvmstats_reader__schema(r);

	f->fd[f->n] = kvmstats_reader__fd(r);
	f->off[f->n] = kvmstats_schema__data_offset(s);
	f->size[f->n++] = kvmstats_schema__data_size(s);
}

/* CPU ns of one bare sweep: a pread of each data block, nothing else. */
static double bare_sweep(struct kvmstats_vmm *v, int rounds)
{
	static uint64_t buf[4096];
	struct fds f = {.n = 0};
	uint64_t t0;

	for (size_t i = 0; i < kvmstats_vmm__num_vms(v); i++) {
		struct kvmstats_vm *vm = kvmstats_vmm__vm(v, i);

		add(&f, kvmstats_vm__reader(vm));
		for (size_t j = 0; j < kvmstats_vm__num_vcpus(vm); j++)
			add(&f, kvmstats_vm__vcpu(vm, j, NULL));
	}
	t0 = cpu_ns();
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < f.n; i++)
			if (pread(f.fd[i], buf, f.size[i], f.off[i]) < 0)
				return -1;
	return (double)(cpu_ns() - t0) / rounds;
}

/* CPU ns the main thread of @pid has run. */
static long long run_ns(pid_t pid)
{
	char path[64];
	long long ns = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &ns) != 1)
		ns = -1;
	fclose(f);
	return ns;
}

/* CPU ns per refresh of top in a tmux pane of @cols x @rows. */
static double top_refresh(const char *dir, pid_t vmm, int cols, int rows,
			  double seconds)
{
	char cmd[PATH_MAX + 256], sock[64];
	long long c0, c1;
	uint64_t w0, w1;
	pid_t pane = 0;
	FILE *p;

	snprintf(sock, sizeof(sock), "ksbench-%d", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "tmux -L %s new-session -d -x %d -y %d "
		 "'exec %s/kvmstats top --interval 1 --pid %d'",
		 sock, cols, rows, dir, (int)vmm);
	if (system(cmd))
		return -1;
	snprintf(cmd, sizeof(cmd), "tmux -L %s display -p '#{pane_pid}'", sock);
	p = popen(cmd, "r");
	if (p) {
		if (fscanf(p, "%d", &pane) != 1)
			pane = 0;
		pclose(p);
	}
	if (pane <= 0) {
		fprintf(stderr,
			"bench/top: %s/kvmstats top did not start in tmux\n",
			dir);
		return -1;
	}
	/* Warm up: the first rescan, the first frames, the first draw. */
	sleep_s(3.5);
	c0 = run_ns(pane);
	w0 = now_ns();
	sleep_s(seconds);
	c1 = run_ns(pane);
	w1 = now_ns();
	snprintf(cmd, sizeof(cmd), "tmux -L %s kill-server", sock);
	if (system(cmd))
		fprintf(stderr, "bench/top: tmux kill-server failed\n");
	if (pane <= 0 || c0 < 0 || c1 < c0)
		return -1;
	return (double)(c1 - c0) / ((double)(w1 - w0) / 1e9);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 20, bare, small, big;
	char dir[PATH_MAX - 64], ready[96];
	struct kvmstats_ctx *ctx;
	struct kvmstats_vmm *v;
	pid_t vmm;
	int ret = 1;

	if (access("/dev/kvm", R_OK | W_OK) ||
	    system("tmux -V >/dev/null 2>&1")) {
		printf("bench/top: needs /dev/kvm and tmux (skipped)\n");
		return 0;
	}
	if (build_dir(dir, sizeof(dir)))
		return 1;
	snprintf(ready, sizeof(ready), "/tmp/bench-top.%d.ready",
		 (int)getpid());
	vmm = start_vmm(dir, ready);
	if (vmm < 0) {
		fprintf(stderr, "bench/top: tinyvmm did not start\n");
		return 1;
	}
	ctx = kvmstats_ctx__new(NULL);
	v = ctx ? kvmstats_vmm__open(ctx, vmm, NULL) : NULL;
	if (!v) {
		fprintf(stderr, "bench/top: opening the VMM: %s\n",
			strerror(errno));
		goto out;
	}
	bare_sweep(v, 100); /* warm the caches */
	bare = bare_sweep(v, 2000);
	small = top_refresh(dir, vmm, 80, 24, seconds);
	big = top_refresh(dir, vmm, 200, 60, seconds);
	if (bare <= 0 || small <= 0 || big <= 0) {
		fprintf(stderr, "bench/top: a measurement failed\n");
		goto out;
	}
	printf("top, %d VMs x %d vCPUs (%d stats fds), 1 s interval, %.0f s "
	       "each:\n",
	       VMS, VCPUS, VMS * (VCPUS + 1), seconds);
	printf("  bare pread loop over the same fds  %9.1f us CPU per sweep\n",
	       bare / 1e3);
	printf("  top at 80x24                       %9.1f us CPU per refresh  "
	       "(%.1fx bare)\n",
	       small / 1e3, small / bare);
	printf("  top at 200x60                      %9.1f us CPU per refresh  "
	       "(%.1fx bare)\n",
	       big / 1e3, big / bare);
	printf("  top's share of one core            %9.3f %%\n", big / 1e7);
	ret = 0;
out:
	kvmstats_vmm__close(v);
	kvmstats_ctx__free(ctx);
	kill(vmm, SIGTERM);
	waitpid(vmm, NULL, 0);
	unlink(ready);
	return ret;
}
