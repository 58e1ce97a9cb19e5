// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What recording costs, per sample, against the bare pread loop over the
 * same stats fds, measured in one run (the machines are noisy, so the
 * variants take turns, round after round).
 *
 * A child process creates VMs with /dev/kvm (default 250 VMs x 3 vCPUs,
 * never run) and holds their stats fds, like a VMM; the library takes
 * them as it takes any VMM's (one host object per variant, each with its
 * own fds), and the bare loop reads the fds of one of them. CPU time per
 * sample of:
 *
 *   bare     pread of every stats fd into one buffer (the baseline)
 *   sweep    kvmstats_host__sweep(): the library's reading
 *   record   kvmstats_log_writer__sweep_host(), as `kvmstats record`
 *            runs it: each fd read and its delta taken at once; whole
 *            blocks every 256 samples, changed words between
 *   2 passes kvmstats_host__sweep() then write_host(): the same log,
 *            every block read again after the whole sweep
 *   raw      the 2 passes with every entry a whole data block
 *            (--keyframe 1), to show what the deltas save
 *
 * usage: record [--vms N] [--vcpus M] [--rounds R] [--dir DIR] [--raw 0]
 *               [--two-pass 0]
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmstats.h"
#include "kvmstats_log.h"

struct target {
	int fd;
	off_t data_offset;
	size_t data_size;
};

static struct target *targets;
static size_t ntargets;
static uint64_t buf[1 << 14];

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The child: create the VMs, hold their fds, wait to be killed. */
static void vmm(int nvms, int nvcpus, int ready)
{
	struct rlimit rl;
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	char ok = 0;

	/* Never outlive the bench, holding hundreds of VMs. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	for (int i = 0; kvm >= 0 && i < nvms; i++) {
		int vm = ioctl(kvm, KVM_CREATE_VM, 0);

		if (vm < 0 || ioctl(vm, KVM_GET_STATS_FD, NULL) < 0)
			goto out;
		for (int j = 0; j < nvcpus; j++) {
			int vcpu = ioctl(vm, KVM_CREATE_VCPU, j);

			if (vcpu < 0 || ioctl(vcpu, KVM_GET_STATS_FD, NULL) < 0)
				goto out;
		}
	}
	ok = kvm >= 0;
out:
	if (!ok)
		fprintf(stderr, "record bench: creating VMs: %s\n", strerror(errno));
	if (write(ready, &ok, 1) != 1 || !ok)
		_exit(1);
	for (;;)
		pause();
}

static pid_t start_vmm(int nvms, int nvcpus)
{
	int p[2];
	char ok = 0;
	pid_t pid;

	if (pipe(p))
		return -1;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		vmm(nvms, nvcpus, p[1]);
	}
	close(p[1]);
	if (pid < 0 || read(p[0], &ok, 1) != 1 || !ok) {
		close(p[0]);
		return -1;
	}
	close(p[0]);
	return pid;
}

/* The bare loop reads the very fds the library took from the VMM. */
static void add_target(struct kvmstats_reader *r)
{
	targets[ntargets].fd = kvmstats_reader__fd(r);
	targets[ntargets].data_offset =
		kvmstats_schema__data_offset(kvmstats_reader__schema(r));
	targets[ntargets].data_size =
		kvmstats_schema__data_size(kvmstats_reader__schema(r));
	ntargets++;
}

static size_t collect_targets(struct kvmstats_host *h)
{
	struct kvmstats_vmm *v = kvmstats_host__vmm(h, 0);
	size_t n = 0;

	for (size_t i = 0; i < kvmstats_vmm__num_vms(v); i++)
		n += 1 + kvmstats_vm__num_vcpus(kvmstats_vmm__vm(v, i));
	targets = calloc(n, sizeof(*targets));
	for (size_t i = 0; i < kvmstats_vmm__num_vms(v); i++) {
		struct kvmstats_vm *vm = kvmstats_vmm__vm(v, i);
		int index;

		if (kvmstats_vm__reader(vm))
			add_target(kvmstats_vm__reader(vm));
		for (size_t j = 0; j < kvmstats_vm__num_vcpus(vm); j++)
			add_target(kvmstats_vm__vcpu(vm, j, &index));
	}
	return ntargets;
}

static void bare(void)
{
	for (size_t i = 0; i < ntargets; i++)
		if (pread(targets[i].fd, buf, targets[i].data_size,
			  targets[i].data_offset) < 0)
			abort();
}

static void sweep(struct kvmstats_host *h)
{
	kvmstats_host__sweep(h);
}

static double t_write;	/* the writer's part of the two-pass variant */

static void check(int err)
{
	if (err) {
		fprintf(stderr, "record bench: writing: %s\n", strerror(-err));
		exit(1);
	}
}

static void fused(struct kvmstats_host *h, struct kvmstats_log_writer *w)
{
	check(kvmstats_log_writer__sweep_host(w, h, NULL, NULL));
}

static void record(struct kvmstats_host *h, struct kvmstats_log_writer *w)
{
	double t0;
	int err;

	kvmstats_host__sweep(h);
	t0 = cpu_now();
	err = kvmstats_log_writer__write_host(w, h);
	t_write += cpu_now() - t0;
	check(err);
}

static struct kvmstats_log_writer *writer(struct kvmstats_ctx *ctx,
					  const char *path, unsigned int key)
{
	KVMSTATS_OPTS(kvmstats_log_writer_opts, o, .flags = KVMSTATS_LOG_TRUNCATE,
		      .rotate_size = 64ull << 20, .rotate_keep = 1,
		      .keyframe_interval = key);
	struct kvmstats_log_writer *w = kvmstats_log_writer__open(ctx, path, &o);

	if (!w) {
		fprintf(stderr, "record bench: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	return w;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n ? v[n / 2] : 0;
}

#define NV 4	/* host objects: bare and sweep, record, 2 passes, raw */

static void unlink_log(const char *path)
{
	char p1[300];

	unlink(path);
	snprintf(p1, sizeof(p1), "%s.1", path);
	unlink(p1);
}

/* Bytes the sample just written added to @w's file, per fd. */
static void log_bytes(struct kvmstats_log_writer *w, uint64_t size, uint64_t *bytes,
		      uint64_t *nbytes)
{
	if (kvmstats_log_writer__size(w) > size)
		*bytes += kvmstats_log_writer__size(w) - size, (*nbytes)++;
}

int main(int argc, char **argv)
{
	int nvms = 250, nvcpus = 3, rounds = 200, do_raw = 1, do_two = 1;
	const char *dir = "/tmp";
	double t[5] = { 0 }, t0, tw = 0, *ratios;
	struct kvmstats_ctx *ctx;
	struct kvmstats_host *h, *hs[NV];
	struct kvmstats_log_writer *w, *w2, *wraw;
	char path[256], p2[256], praw[256];
	pid_t self = getpid(), child;
	struct rlimit rl;
	uint64_t size, bytes = 0, nbytes = 0, bytes2 = 0, nbytes2 = 0;
	size_t fds = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--vms"))
			nvms = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--vcpus"))
			nvcpus = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--raw"))
			do_raw = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--two-pass"))
			do_two = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
	}
	if (access("/dev/kvm", R_OK | W_OK)) {
		printf("record: /dev/kvm is not available: skipped\n");
		return 0;
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	child = start_vmm(nvms, nvcpus);
	if (child < 0)
		return 1;
	ctx = kvmstats_ctx__new(NULL);
	/* One host object per variant: each takes its own fds, and a
	 * variant's sweeps do not move the readers of another. */
	for (int i = 0; i < NV; i++) {
		hs[i] = kvmstats_host__new(ctx, &(struct kvmstats_host_opts){
			.sz = sizeof(struct kvmstats_host_opts), .pids = &child,
			.npids = 1, .source = "fd" });
		if (!hs[i] || kvmstats_host__refresh(hs[i]) < 0 ||
		    kvmstats_host__num_vmms(hs[i]) != 1) {
			fprintf(stderr, "record bench: the library does not see our VMs\n");
			kill(child, SIGKILL);
			return 1;
		}
	}
	h = hs[0];
	fds = collect_targets(h);
	snprintf(path, sizeof(path), "%s/kvmstats-bench-record.%d.log", dir, (int)self);
	snprintf(p2, sizeof(p2), "%s/kvmstats-bench-record-2.%d.log", dir, (int)self);
	snprintf(praw, sizeof(praw), "%s/kvmstats-bench-record-raw.%d.log", dir, (int)self);
	w = writer(ctx, path, 0);
	w2 = writer(ctx, p2, 0);
	wraw = writer(ctx, praw, 1);
	/* Warm up: first sweeps and key entries. */
	for (int i = 0; i < 3; i++) {
		bare();
		fused(hs[1], w);
		record(hs[2], w2);
		record(hs[3], wraw);
	}
	ratios = calloc((size_t)rounds * 5, sizeof(*ratios));
	for (int r = 0; r < rounds; r++) {
		double r_t[5];

		t0 = cpu_now();
		bare();
		r_t[0] = cpu_now() - t0;
		t[0] += r_t[0];
		t0 = cpu_now();
		sweep(h);
		r_t[1] = cpu_now() - t0;
		t[1] += r_t[1];
		size = kvmstats_log_writer__size(w);
		t0 = cpu_now();
		fused(hs[1], w);
		r_t[2] = cpu_now() - t0;
		t[2] += r_t[2];
		log_bytes(w, size, &bytes, &nbytes);
		size = kvmstats_log_writer__size(w2);
		t_write = 0;
		t0 = cpu_now();
		if (do_two)
			record(hs[2], w2);
		r_t[3] = cpu_now() - t0;
		t[3] += r_t[3];
		tw += t_write;
		log_bytes(w2, size, &bytes2, &nbytes2);
		t0 = cpu_now();
		if (do_raw)
			record(hs[3], wraw);
		r_t[4] = cpu_now() - t0;
		t[4] += r_t[4];
		for (int k = 1; k < 5; k++)
			ratios[k * rounds + r] = r_t[k] / r_t[0];
	}
	printf("record: %zu stats fds (%d VMs x %d vCPUs + VM fds), %d samples each, CPU time per sample\n",
	       ntargets, nvms, nvcpus, rounds);
	printf("  (ratio: of the sums over the rounds; median: of the rounds' own ratios,\n"
	       "   which a round disturbed by another process moves less)\n");
	printf("  bare pread loop   %9.1f us  (%.2f us per fd)\n", t[0] / rounds * 1e6,
	       t[0] / rounds / ntargets * 1e6);
	printf("  library sweep     %9.1f us  ratio %.3f  median %.3f\n", t[1] / rounds * 1e6,
	       t[1] / t[0], median(ratios + rounds, rounds));
	printf("  record            %9.1f us  ratio %.3f  median %.3f  (log %.0f bytes per fd per sample)\n",
	       t[2] / rounds * 1e6, t[2] / t[0], median(ratios + 2 * rounds, rounds),
	       nbytes ? (double)bytes / nbytes / fds : 0.0);
	printf("  sweep, then write %9.1f us  ratio %.3f  median %.3f  (log %.0f bytes per fd per sample)\n",
	       t[3] / rounds * 1e6, t[3] / t[0], median(ratios + 3 * rounds, rounds),
	       nbytes2 ? (double)bytes2 / nbytes2 / fds : 0.0);
	if (do_raw)
		printf("  the same, raw     %9.1f us  ratio %.3f\n", t[4] / rounds * 1e6,
		       t[4] / t[0]);
	printf("  sweep, then write: the writer's calls %.1f us per sample, %.3f us per fd: "
	       "%.1f%% of the bare pread\n",
	       tw / rounds * 1e6, tw / rounds / ntargets * 1e6, tw / t[0] * 100);
	free(ratios);
	kvmstats_log_writer__close(w);
	kvmstats_log_writer__close(w2);
	kvmstats_log_writer__close(wraw);
	unlink_log(path);
	unlink_log(p2);
	unlink_log(praw);
	for (int i = 0; i < NV; i++)
		kvmstats_host__free(hs[i]);
	kvmstats_ctx__free(ctx);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return 0;
}
