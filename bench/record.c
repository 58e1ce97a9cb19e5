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
 *   record   sweep + the log writer as `kvmstats record` runs it: whole
 *            blocks every 256 samples, changed words between
 *   raw      sweep + the log writer with every entry a whole data block
 *            (--keyframe 1), to show what the deltas save
 *
 * usage: record [--vms N] [--vcpus M] [--rounds R] [--dir DIR] [--raw 0]
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

static double t_write;	/* the writer's part of the record variant */

static void record(struct kvmstats_host *h, struct kvmstats_log_writer *w)
{
	double t0;
	int err;

	kvmstats_host__sweep(h);
	t0 = cpu_now();
	err = kvmstats_log_writer__write_host(w, h);
	t_write += cpu_now() - t0;

	if (err) {
		fprintf(stderr, "record bench: writing: %s\n", strerror(-err));
		exit(1);
	}
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

int main(int argc, char **argv)
{
	int nvms = 250, nvcpus = 3, rounds = 200, do_raw = 1;
	const char *dir = "/tmp";
	double t[4] = { 0 }, t0, tw = 0;
	struct kvmstats_ctx *ctx;
	struct kvmstats_host *h, *hs[3];
	struct kvmstats_log_writer *w, *wraw;
	char path[256], praw[256];
	pid_t self = getpid(), child;
	struct rlimit rl;
	uint64_t size, bytes = 0, nbytes = 0;
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
	for (int i = 0; i < 3; i++) {
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
	snprintf(praw, sizeof(praw), "%s/kvmstats-bench-record-raw.%d.log", dir, (int)self);
	w = writer(ctx, path, 0);
	wraw = writer(ctx, praw, 1);
	/* Warm up: first sweeps and key entries. */
	for (int i = 0; i < 3; i++) {
		bare();
		record(hs[1], w);
		record(hs[2], wraw);
	}
	for (int r = 0; r < rounds; r++) {
		t0 = cpu_now();
		bare();
		t[0] += cpu_now() - t0;
		t0 = cpu_now();
		sweep(h);
		t[1] += cpu_now() - t0;
		size = kvmstats_log_writer__size(w);
		t_write = 0;
		t0 = cpu_now();
		record(hs[1], w);
		t[2] += cpu_now() - t0;
		tw += t_write;
		if (kvmstats_log_writer__size(w) > size)
			bytes += kvmstats_log_writer__size(w) - size, nbytes++;
		t0 = cpu_now();
		if (do_raw)
			record(hs[2], wraw);
		t[3] += cpu_now() - t0;
	}
	printf("record: %zu stats fds (%d VMs x %d vCPUs + VM fds), %d samples each, CPU time per sample\n",
	       ntargets, nvms, nvcpus, rounds);
	printf("  bare pread loop   %9.1f us  (%.2f us per fd)\n", t[0] / rounds * 1e6,
	       t[0] / rounds / ntargets * 1e6);
	printf("  library sweep     %9.1f us  ratio %.3f\n", t[1] / rounds * 1e6, t[1] / t[0]);
	printf("  record (deltas)   %9.1f us  ratio %.3f  (log %.0f bytes per fd per sample)\n",
	       t[2] / rounds * 1e6, t[2] / t[0],
	       nbytes ? (double)bytes / nbytes / fds : 0.0);
	if (do_raw)
		printf("  record (raw)      %9.1f us  ratio %.3f\n", t[3] / rounds * 1e6,
		       t[3] / t[0]);
	printf("  the log writer's own calls: %.1f us per sample, %.3f us per fd: "
	       "%.1f%% of the bare pread\n",
	       tw / rounds * 1e6, tw / rounds / ntargets * 1e6, tw / t[0] * 100);
	kvmstats_log_writer__close(w);
	kvmstats_log_writer__close(wraw);
	unlink(path);
	unlink(praw);
	snprintf(path + strlen(path), sizeof(path) - strlen(path), ".1");
	unlink(path);
	snprintf(praw + strlen(praw), sizeof(praw) - strlen(praw), ".1");
	unlink(praw);
	for (int i = 0; i < 3; i++)
		kvmstats_host__free(hs[i]);
	kvmstats_ctx__free(ctx);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return 0;
}
