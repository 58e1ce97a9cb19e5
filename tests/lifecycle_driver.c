// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * lifecycle_driver: the library's sampling loop under a changing host,
 * for tests/integration/lifecycle.sh.
 *
 *   lifecycle_driver run --seconds S [--interval-ms M] [--timeout-ms T]
 *                        [--kill-at SWEEP:PID]... [--stop-file FILE]
 *	refresh + sweep the whole host every M ms for S seconds and log,
 *	per sweep, every VMM and what its readers returned, and this
 *	process's fds; the test reads the log. --kill-at sends SIGKILL to
 *	PID between the refresh and the sweep of sweep number SWEEP (the
 *	VMM dies while it is being read).
 *
 *   lifecycle_driver vmm --vcpus N --ready FILE
 *	a minimal VMM that holds stats fds for one VM and N vCPUs and never
 *	runs them; each SIGUSR1 creates one more vCPU (and its stats fd),
 *	then FILE is rewritten with the vCPU count; SIGUSR2 destroys the VM
 *	(closes every KVM fd, FILE then says 0) and the process lives on.
 *	SIGTERM ends it.
 *
 * Log lines (t is CLOCK_REALTIME in ms, to compare with the test's clock):
 *   S n=N t=T dur_us=D refresh_us=R vmms=V failed=F statsfds=A fdreaders=B schemas=C
 *   V n=N t=T pid=P uid=U src=S vms=M vcpus=K errs=E age_ms=G exits=X
 *     schema=VM/VCPU (addresses of the schemas: equal means shared)
 *     err=-ERRNO (the first failed reader's error, 0 if none)
 *   K n=N t=T pid=P (--kill-at fired)
 *   END sweeps=N fds_before=A fds_after=B
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "kvmstats.h"

#ifndef KVM_GET_STATS_FD
#define KVM_GET_STATS_FD _IO(KVMIO, 0xce)
#endif

#define MAX_KILLS 16

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned long long wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (unsigned long long)ts.tv_sec * 1000ull +
	       (unsigned long long)ts.tv_nsec / 1000000ull;
}

/* Open fds of this process, and how many are KVM stats fds. */
static int count_fds(int *stats)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	*stats = 0;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char link[128];
		ssize_t len;

		if (de->d_name[0] == '.')
			continue;
		n++;
		len = readlinkat(dirfd(d), de->d_name, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = 0;
		*stats += !strncmp(link, "anon_inode:kvm-vm-stats", 23) ||
			  !strncmp(link, "anon_inode:kvm-vcpu-stats", 25);
	}
	closedir(d);
	return n - 1;	/* the directory itself */
}

static uint64_t stat_sum(struct kvmstats_reader *r, const char *name)
{
	const struct kvmstats_sample *s = kvmstats_reader__cur(r);
	const struct kvmstats_stat *st;

	if (!s)
		return 0;
	st = kvmstats_schema__find(kvmstats_reader__schema(r), name);
	return st ? kvmstats_stat__values(st, s->data)[0] : 0;
}

struct vmm_tally {
	const void *vm_schema, *vcpu_schema;
	size_t vcpus;
	int errs, fdreaders;
	int first_err;		/* the first failed reader's error, for the log */
	uint64_t age, exits;
};

static void tally_reader(struct kvmstats_reader *r, struct vmm_tally *t,
			 bool vcpu)
{
	if (!r)
		return;
	if (kvmstats_reader__error(r) && !t->first_err)
		t->first_err = kvmstats_reader__error(r);
	t->errs += kvmstats_reader__error(r) != 0;
	t->fdreaders += kvmstats_reader__fd(r) >= 0;
	if (kvmstats_reader__age_ns(r) > t->age)
		t->age = kvmstats_reader__age_ns(r);
	if (vcpu)
		t->exits += stat_sum(r, "exits");
	if (vcpu)
		t->vcpu_schema = kvmstats_reader__schema(r);
	else
		t->vm_schema = kvmstats_reader__schema(r);
}

static void log_vmm(int n, struct kvmstats_vmm *v, int *fdreaders)
{
	struct vmm_tally t = { 0 };

	for (size_t i = 0; i < kvmstats_vmm__num_vms(v); i++) {
		struct kvmstats_vm *vm = kvmstats_vmm__vm(v, i);

		tally_reader(kvmstats_vm__reader(vm), &t, false);
		for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++)
			tally_reader(kvmstats_vm__vcpu(vm, k, NULL), &t, true);
		t.vcpus += kvmstats_vm__num_vcpus(vm);
	}
	*fdreaders += t.fdreaders;
	/* Schemas by address: two sources sharing one have the same
	 * layout (the context keeps one schema per descriptor block). */
	printf("V n=%d t=%llu pid=%d uid=%llu src=%s vms=%zu vcpus=%zu errs=%d "
	       "age_ms=%llu exits=%llu schema=%p/%p err=%d\n",
	       n, wall_ms(), (int)kvmstats_vmm__pid(v),
	       (unsigned long long)kvmstats_vmm__uid(v), kvmstats_vmm__source(v),
	       kvmstats_vmm__num_vms(v), t.vcpus, t.errs,
	       (unsigned long long)(t.age / 1000000),
	       (unsigned long long)t.exits, t.vm_schema, t.vcpu_schema,
	       t.first_err);
}

struct run_opts {
	unsigned int seconds, interval_ms, timeout_ms;
	int kill_sweep[MAX_KILLS];
	pid_t kill_pid[MAX_KILLS];
	int nkills;
	const char *stop_file;
};

static void kill_due(const struct run_opts *o, int n)
{
	for (int i = 0; i < o->nkills; i++)
		if (o->kill_sweep[i] == n && kill(o->kill_pid[i], SIGKILL) == 0)
			printf("K n=%d t=%llu pid=%d\n", n, wall_ms(),
			       (int)o->kill_pid[i]);
}

static int sweep_loop(struct kvmstats_ctx *ctx, struct kvmstats_host *h,
		      const struct run_opts *o)
{
	uint64_t end = mono_ns() + (uint64_t)o->seconds * 1000000000ull;
	int n;

	for (n = 0; mono_ns() < end; n++) {
		uint64_t t0, t1, t2;
		int failed, stats, fdreaders = 0, err;

		if (o->stop_file && !access(o->stop_file, F_OK))
			break;
		t0 = mono_ns();
		err = kvmstats_host__refresh(h);
		if (err < 0)
			fprintf(stderr, "refresh: %s\n", strerror(-err));
		t1 = mono_ns();
		kill_due(o, n);
		failed = kvmstats_host__sweep(h);
		t2 = mono_ns();
		for (size_t i = 0; i < kvmstats_host__num_vmms(h); i++)
			log_vmm(n, kvmstats_host__vmm(h, i), &fdreaders);
		count_fds(&stats);
		printf("S n=%d t=%llu dur_us=%llu refresh_us=%llu vmms=%zu "
		       "failed=%d statsfds=%d fdreaders=%d schemas=%zu\n",
		       n, wall_ms(), (unsigned long long)(t2 - t1) / 1000,
		       (unsigned long long)(t1 - t0) / 1000,
		       kvmstats_host__num_vmms(h), failed, stats, fdreaders,
		       kvmstats_ctx__schema_count(ctx));
		fflush(stdout);
		usleep(o->interval_ms * 1000);
	}
	return n;
}

static int parse_kill(struct run_opts *o, const char *arg)
{
	int sweep, pid;

	if (o->nkills >= MAX_KILLS || sscanf(arg, "%d:%d", &sweep, &pid) != 2 ||
	    pid <= 1)
		return -1;
	o->kill_sweep[o->nkills] = sweep;
	o->kill_pid[o->nkills++] = pid;
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	struct run_opts o = { .seconds = 10, .interval_ms = 20,
			      .timeout_ms = 500 };
	struct kvmstats_ctx *ctx;
	struct kvmstats_host *h;
	int before, after, stats, n;

	for (int i = 0; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--seconds"))
			o.seconds = (unsigned int)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--interval-ms"))
			o.interval_ms = (unsigned int)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--timeout-ms"))
			o.timeout_ms = (unsigned int)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--stop-file"))
			o.stop_file = argv[i + 1];
		else if (strcmp(argv[i], "--kill-at") || parse_kill(&o, argv[i + 1]))
			return fprintf(stderr, "bad option %s\n", argv[i]), 2;
	}
	before = count_fds(&stats);
	ctx = kvmstats_ctx__new(NULL);
	h = kvmstats_host__new(ctx, &(struct kvmstats_host_opts){
		.sz = sizeof(struct kvmstats_host_opts),
		.timeout_ms = o.timeout_ms });
	if (!ctx || !h) {
		perror("host");
		return 1;
	}
	n = sweep_loop(ctx, h, &o);
	kvmstats_host__free(h);
	kvmstats_ctx__free(ctx);
	after = count_fds(&stats);
	printf("END sweeps=%d fds_before=%d fds_after=%d\n", n, before, after);
	return 0;
}

/* ---- the minimal VMM ---------------------------------------------------- */

static int write_ready(const char *path, int vcpus)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "%d\n", vcpus);
	if (fclose(f))
		return -1;
	return rename(tmp, path);	/* readers never see half a file */
}

#define MAX_FDS 256

/* Every KVM fd the minimal VMM holds, to destroy the VM on SIGUSR2. */
static int held[MAX_FDS];
static int nheld;

static int hold(int fd)
{
	if (fd < 0 || nheld == MAX_FDS)
		return -1;
	held[nheld++] = fd;
	return fd;
}

static int add_vcpu(int vm, int index)
{
	int fd = hold(ioctl(vm, KVM_CREATE_VCPU, index));

	if (fd < 0 || hold(ioctl(fd, KVM_GET_STATS_FD, NULL)) < 0) {
		perror("vcpu");
		return -1;
	}
	return 0;
}

static int cmd_vmm(int argc, char **argv)
{
	const char *ready = NULL;
	int vcpus = 1, kvm, vm;
	sigset_t set;

	for (int i = 0; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--vcpus"))
			vcpus = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--ready"))
			ready = argv[i + 1];
	}
	if (!ready || vcpus < 1)
		return fprintf(stderr, "usage: vmm --vcpus N --ready FILE\n"), 2;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	vm = kvm < 0 ? -1 : hold(ioctl(kvm, KVM_CREATE_VM, 0));
	if (vm < 0 || hold(ioctl(vm, KVM_GET_STATS_FD, NULL)) < 0) {
		perror("vm");
		return 1;
	}
	for (int i = 0; i < vcpus; i++)
		if (add_vcpu(vm, i))
			return 1;
	if (write_ready(ready, vcpus))
		return 1;
	for (;;) {
		int sig = sigwaitinfo(&set, NULL);

		if (sig == SIGTERM || sig == SIGINT)
			return 0;
		if (sig == SIGUSR2 && nheld) {
			while (nheld)
				close(held[--nheld]);
			if (write_ready(ready, 0))
				return 1;
			continue;
		}
		if (sig != SIGUSR1 || !nheld)
			continue;
		if (add_vcpu(vm, vcpus) || write_ready(ready, vcpus + 1))
			return 1;
		vcpus++;
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return cmd_run(argc - 2, argv + 2);
	if (argc >= 2 && !strcmp(argv[1], "vmm"))
		return cmd_vmm(argc - 2, argv + 2);
	fprintf(stderr, "usage: lifecycle_driver run|vmm [OPTIONS]\n");
	return 2;
}
