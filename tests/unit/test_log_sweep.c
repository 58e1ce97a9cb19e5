// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats-test: needs=kvm */
/*
 * kvmstats_log_writer__sweep_host() on real stats fds: a child holds VMs
 * like a VMM; every sample of the log holds each VM and vCPU once, under
 * its own VM index and vCPU index, with the block a pread of its fd
 * returns (key entries and deltas both); a VMM the callback turns down is
 * read (its readers have readings) but not written.
 */
#include <fcntl.h>
#include <linux/kvm.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"
#include "kvmstats_log.h"

#define NVMS 2
#define NVCPUS 2
#define SAMPLES 12

static struct kvmstats_ctx *ctx;
static char dir[] = "/tmp/kvmstats-test-logsweep.XXXXXX";
static char path[128];
static pid_t child = -1;

/* The child: NVMS VMs of NVCPUS vCPUs, their stats fds held. */
static void vmm(int ready)
{
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	char ok = kvm >= 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (int i = 0; ok && i < NVMS; i++) {
		int vm = ioctl(kvm, KVM_CREATE_VM, 0);

		ok = vm >= 0 && ioctl(vm, KVM_GET_STATS_FD, NULL) >= 0;
		for (int j = 0; ok && j < NVCPUS; j++) {
			int vcpu = ioctl(vm, KVM_CREATE_VCPU, j);

			ok = vcpu >= 0 && ioctl(vcpu, KVM_GET_STATS_FD, NULL) >= 0;
		}
	}
	if (write(ready, &ok, 1) != 1 || !ok)
		_exit(1);
	for (;;)
		pause();
}

static int setup(void **state)
{
	int p[2];
	char ok = 0;

	(void)state;
	if (access("/dev/kvm", R_OK | W_OK))
		return 0;
	ctx = kvmstats_ctx__new(NULL);
	if (!mkdtemp(dir) || pipe(p))
		return -1;
	snprintf(path, sizeof(path), "%s/log", dir);
	child = fork();
	if (child == 0) {
		close(p[0]);
		vmm(p[1]);
	}
	close(p[1]);
	if (child < 0 || read(p[0], &ok, 1) != 1 || !ok)
		return -1;
	close(p[0]);
	return 0;
}

static int teardown(void **state)
{
	char cmd[160];

	(void)state;
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	kvmstats_ctx__free(ctx);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static struct kvmstats_host *host(void)
{
	struct kvmstats_host *h = kvmstats_host__new(ctx, &(struct kvmstats_host_opts){
		.sz = sizeof(struct kvmstats_host_opts), .pids = &child, .npids = 1,
		.source = "fd" });

	assert_non_null(h);
	assert_true(kvmstats_host__refresh(h) >= 0);
	assert_int_equal(kvmstats_host__num_vmms(h), 1);
	return h;
}

/* The reader of (vm, vcpu) in @h; vcpu -1: the VM's. */
static struct kvmstats_reader *reader_of(struct kvmstats_host *h, int vm, int vcpu)
{
	struct kvmstats_vm *v = kvmstats_vmm__vm(kvmstats_host__vmm(h, 0), (size_t)vm);

	if (vcpu < 0)
		return kvmstats_vm__reader(v);
	for (size_t k = 0; k < kvmstats_vm__num_vcpus(v); k++) {
		int index;
		struct kvmstats_reader *r = kvmstats_vm__vcpu(v, k, &index);

		if (index == vcpu)
			return r;
	}
	return NULL;
}

static bool no_vmm(const struct kvmstats_vmm *v, void *arg)
{
	(void)v;
	(*(int *)arg)++;
	return false;
}

static void test_sweep_host(void **state)
{
	KVMSTATS_OPTS(kvmstats_log_writer_opts, o, .flags = KVMSTATS_LOG_TRUNCATE,
		      .keyframe_interval = 4);
	struct kvmstats_log_writer *w;
	struct kvmstats_log_reader *lr;
	struct kvmstats_host *h;
	uint64_t buf[4096];
	int asked = 0, n = 0;

	(void)state;
	if (child < 0)
		skip();
	h = host();
	w = kvmstats_log_writer__open(ctx, path, &o);
	assert_non_null(w);
	for (int k = 0; k < SAMPLES; k++)
		assert_int_equal(kvmstats_log_writer__sweep_host(w, h, NULL, NULL), 0);
	/* Turned down: read, not written. */
	assert_int_equal(kvmstats_log_writer__sweep_host(w, h, no_vmm, &asked), 0);
	assert_int_equal(asked, 1);
	assert_non_null(kvmstats_reader__cur(reader_of(h, 0, 0)));
	assert_int_equal(kvmstats_log_writer__samples(w), SAMPLES + 1);
	assert_int_equal(kvmstats_log_writer__close(w), 0);

	lr = kvmstats_log_reader__open(ctx, path, NULL);
	assert_non_null(lr);
	while (kvmstats_log_reader__next(lr) > 0) {
		size_t ne = kvmstats_log_reader__num_entries(lr);

		assert_int_equal(ne, n < SAMPLES ? NVMS * (1 + NVCPUS) : 0);
		for (size_t i = 0; i < ne; i++) {
			const struct kvmstats_log_entry *e = kvmstats_log_reader__entry(lr, i);
			struct kvmstats_reader *r = reader_of(h, e->target->vm, e->target->vcpu);
			size_t size = kvmstats_schema__data_size(e->schema);

			assert_non_null(r);
			assert_int_equal(e->error, 0);
			assert_int_equal(e->target->pid, child);
			assert_string_equal(e->target->id, kvmstats_reader__id(r));
			assert_true(size <= sizeof(buf));
			/* Never-run VMs: their counters hold still. */
			assert_int_equal(pread(kvmstats_reader__fd(r), buf, size,
					       kvmstats_schema__data_offset(e->schema)),
					 (ssize_t)size);
			assert_memory_equal(e->data, buf, size);
		}
		n++;
	}
	assert_int_equal(n, SAMPLES + 1);
	kvmstats_log_reader__close(lr);
	kvmstats_host__free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sweep_host),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
