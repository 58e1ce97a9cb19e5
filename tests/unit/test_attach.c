// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats-test: needs=kvm */
/*
 * The attach source on a VMM made here: a forked child that creates a VM
 * and vCPUs on /dev/kvm (and, on request, one more vCPU or a seccomp
 * filter) and never asks for stats fds itself.
 */
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/kvm.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* kvmstats-test: needs=kvm */
#include "unit.h"

enum cmd { ADD_VCPU = 'v', FILTER = 'f', STRICT = 's', QUIT = 'q' };

struct vmm {
	pid_t pid;
	int cmd;		/* we write commands */
	int ack;		/* it answers one byte per command */
};

static void vmm_main(int in, int out)
{
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	int vm = kvm >= 0 ? ioctl(kvm, KVM_CREATE_VM, 0) : -1;
	int nvcpus = 0;
	char c = vm >= 0 && ioctl(vm, KVM_CREATE_VCPU, nvcpus++) >= 0 ? 'k' : 'e';
	struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog prog = { 1, &allow };

	if (write(out, &c, 1) != 1 || c != 'k')
		_exit(1);
	while (read(in, &c, 1) == 1) {
		if (c == ADD_VCPU)
			c = ioctl(vm, KVM_CREATE_VCPU, nvcpus++) >= 0 ? 'k' : 'e';
		else if (c == FILTER)
			c = !prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) &&
			    !prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) ?
				'k' : 'e';
		else if (c == STRICT)	/* read and write stay allowed */
			c = !syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_STRICT) ?
				'k' : 'e';
		else
			break;
		if (write(out, &c, 1) != 1)
			break;
	}
	_exit(0);
}

static void vmm_start(struct vmm *v)
{
	int to[2], from[2];
	char c = 0;

	/* Never a skip: tests/run.sh runs this where there is a KVM (the
	 * lab's, when the machine has none). */
	if (access("/dev/kvm", R_OK | W_OK))
		fail_msg("/dev/kvm: %s: this test needs a KVM", strerror(errno));
	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	v->pid = fork();
	assert_true(v->pid >= 0);
	if (!v->pid) {
		close(to[1]);
		close(from[0]);
		vmm_main(to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);
	v->cmd = to[1];
	v->ack = from[0];
	assert_int_equal(read(v->ack, &c, 1), 1);
	assert_int_equal(c, 'k');
}

static void vmm_do(struct vmm *v, char cmd)
{
	char c = 0;

	assert_int_equal(write(v->cmd, &cmd, 1), 1);
	assert_int_equal(read(v->ack, &c, 1), 1);
	assert_int_equal(c, 'k');
}

static void vmm_stop(struct vmm *v)
{
	int status;

	kill(v->pid, SIGKILL);	/* strict mode cannot even exit cleanly */
	assert_int_equal(waitpid(v->pid, &status, 0), v->pid);
	close(v->cmd);
	close(v->ack);
}

/* "fd target" of every fd of @pid, one string, for before/after. */
static void fd_table(pid_t pid, char *buf, size_t len)
{
	char path[64], link[256];
	size_t used = 0;

	buf[0] = 0;
	for (int fd = 0; fd < 64; fd++) {
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
		n = readlink(path, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = 0;
		used += (size_t)snprintf(buf + used, len - used, "%d %s\n", fd, link);
		assert_true(used < len);
	}
}

static struct kvmstats_host *attach(struct kvmstats_ctx *ctx, pid_t *pid,
				    unsigned int flags)
{
	KVMSTATS_OPTS(kvmstats_host_opts, o, .pids = pid, .npids = 1,
		      .source = "attach", .flags = flags);
	struct kvmstats_host *h = kvmstats_host__new(ctx, &o);

	assert_non_null(h);
	assert_true(kvmstats_host__refresh(h) >= 0);
	return h;
}

static size_t vcpus(struct kvmstats_host *h)
{
	struct kvmstats_vmm *v = kvmstats_host__vmm(h, 0);

	assert_non_null(v);
	assert_int_equal(kvmstats_vmm__num_vms(v), 1);
	return kvmstats_vm__num_vcpus(kvmstats_vmm__vm(v, 0));
}

static int holds(struct kvmstats_host *h)
{
	uint64_t max, total;

	return kvmstats_vmm__attach_hold_ns(kvmstats_host__vmm(h, 0), &max, &total);
}

/* Open, then a hot-added vCPU: attached at the next refresh, alone. */
static void test_open_and_refresh(void **state)
{
	struct kvmstats_ctx *ctx;
	char before[4096], after[4096], id[64], *line;
	struct kvmstats_host *h;
	struct kvmstats_reader *r0;
	struct kvmstats_vmm *v;
	struct vmm m;
	int index, n;

	(void)state;
	vmm_start(&m);
	ctx = kvmstats_ctx__new(NULL);
	fd_table(m.pid, before, sizeof(before));
	h = attach(ctx, &m.pid, 0);
	assert_int_equal(kvmstats_host__num_vmms(h), 1);
	v = kvmstats_host__vmm(h, 0);
	assert_string_equal(kvmstats_vmm__source(v), "fd");
	assert_int_equal(vcpus(h), 1);
	snprintf(id, sizeof(id), "kvm-%d", (int)m.pid);
	r0 = kvmstats_vm__reader(kvmstats_vmm__vm(v, 0));
	assert_string_equal(kvmstats_reader__id(r0), id);
	n = holds(h);
	assert_true(n >= 1);
	assert_int_equal(kvmstats_host__sweep(h), 0);

	/* Nothing new: no thread is held again. */
	kvmstats_host__refresh(h);
	assert_int_equal(holds(h), n);

	vmm_do(&m, ADD_VCPU);
	r0 = kvmstats_vm__vcpu(kvmstats_vmm__vm(v, 0), 0, NULL);
	kvmstats_host__refresh(h);
	assert_int_equal(vcpus(h), 2);
	/* vCPU 0 kept its reader; one hold, for vCPU 1 only. */
	assert_ptr_equal(kvmstats_vm__vcpu(kvmstats_vmm__vm(v, 0), 0, NULL), r0);
	assert_int_equal(holds(h), n + 1);
	kvmstats_vm__vcpu(kvmstats_vmm__vm(kvmstats_host__vmm(h, 0), 0), 1, &index);
	assert_int_equal(index, 1);
	assert_int_equal(kvmstats_host__sweep(h), 0);

	/* The child's fds are its own: the new vCPU's, and no other. */
	fd_table(m.pid, after, sizeof(after));
	line = strstr(after, "anon_inode:kvm-vcpu:1\n");
	assert_non_null(line);
	while (line > after && line[-1] != '\n')
		line--;
	memmove(line, strchr(line, '\n') + 1, strlen(strchr(line, '\n') + 1) + 1);
	assert_string_equal(before, after);
	kvmstats_host__free(h);
	kvmstats_ctx__free(ctx);
	vmm_stop(&m);
}

/* A seccomp filter: refused, unless forced (this one allows all). */
static void test_seccomp_filter(void **state)
{
	struct kvmstats_ctx *ctx;
	struct kvmstats_host *h;
	struct vmm m;

	(void)state;
	vmm_start(&m);
	ctx = kvmstats_ctx__new(NULL);
	vmm_do(&m, FILTER);
	assert_false(kvmstats_source__probe(ctx, "attach", m.pid, NULL));
	h = attach(ctx, &m.pid, 0);
	assert_int_equal(kvmstats_host__num_vmms(h), 0);
	assert_non_null(strstr(kvmstats_host__errors(h), "seccomp"));
	assert_non_null(strstr(kvmstats_host__errors(h), "--force"));
	kvmstats_host__free(h);
	h = attach(ctx, &m.pid, KVMSTATS_HOST_FORCE);
	assert_int_equal(kvmstats_host__num_vmms(h), 1);
	assert_int_equal(vcpus(h), 1);
	kvmstats_host__free(h);
	kvmstats_ctx__free(ctx);
	vmm_stop(&m);
}

/* Strict seccomp would kill it at our first ioctl: refused, even forced. */
static void test_seccomp_strict(void **state)
{
	struct kvmstats_ctx *ctx;
	struct kvmstats_host *h;
	struct vmm m;

	(void)state;
	vmm_start(&m);
	ctx = kvmstats_ctx__new(NULL);
	vmm_do(&m, STRICT);
	h = attach(ctx, &m.pid, KVMSTATS_HOST_FORCE);
	assert_int_equal(kvmstats_host__num_vmms(h), 0);
	assert_non_null(strstr(kvmstats_host__errors(h), "strict"));
	assert_int_equal(kill(m.pid, 0), 0);	/* alive */
	kvmstats_host__free(h);
	kvmstats_ctx__free(ctx);
	vmm_stop(&m);
}

/* Not a VMM: nothing to attach to, nothing touched. */
static void test_not_a_vmm(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	pid_t self = getpid();
	struct kvmstats_host *h;

	(void)state;
	assert_false(kvmstats_source__probe(ctx, "attach", self, NULL));
	h = attach(ctx, &self, 0);
	assert_int_equal(kvmstats_host__num_vmms(h), 0);
	/* Said before any source is tried. */
	assert_non_null(strstr(kvmstats_host__errors(h), "not a VMM"));
	kvmstats_host__free(h);
	kvmstats_ctx__free(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_and_refresh),
		cmocka_unit_test(test_seccomp_filter),
		cmocka_unit_test(test_seccomp_strict),
		cmocka_unit_test(test_not_a_vmm),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
