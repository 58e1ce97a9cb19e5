// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What the attach source takes from a VMM and how long it waits on one:
 * an fd is used only when it is KVM's stats fd of the VM or vCPU asked
 * for (a memfd, an eventfd, another vCPU's are refused); a thread that
 * does not stop (here: in vfork, a wait no signal ends) is never left
 * stopped; an injected call that does not return is interrupted, or,
 * when not even that ends it (a vCPU ioctl waiting for the vCPU's mutex),
 * finished in the background: the fd it makes is closed in the VMM and
 * the thread let go.
 */
#include <fcntl.h>
#include <linux/kvm.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* kvmstats-test: needs=kvm */
#include "unit.h"
#include "../../lib/inject.h"
#include "../../lib/internal.h"

#ifndef KVM_GET_STATS_FD
#define KVM_GET_STATS_FD _IO(KVMIO, 0xce)
#endif
#define MSEC 1000000ull

/* Never a skip: tests/run.sh runs this where there is a KVM (the lab's,
 * when the machine has none). */
static void need_kvm(void)
{
	if (access("/dev/kvm", R_OK | W_OK))
		fail_msg("/dev/kvm: %s: this test needs a KVM", strerror(errno));
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The stats fds of a VM and its vCPU 0 and 1 are what they claim; other
 * files, other kinds and other indexes are refused, with the reason. */
static void test_verify(void **state)
{
	int kvm, vm, vcpu0, vcpu1, vs, cs0, cs1, mfd, efd;
	char why[200];

	(void)state;
	need_kvm();
	kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	vm = ioctl(kvm, KVM_CREATE_VM, 0);
	vcpu0 = ioctl(vm, KVM_CREATE_VCPU, 0);
	vcpu1 = ioctl(vm, KVM_CREATE_VCPU, 1);
	vs = ioctl(vm, KVM_GET_STATS_FD, 0);
	cs0 = ioctl(vcpu0, KVM_GET_STATS_FD, 0);
	cs1 = ioctl(vcpu1, KVM_GET_STATS_FD, 0);
	mfd = memfd_create("kvm-vm-stats", MFD_CLOEXEC);
	efd = eventfd(0, EFD_CLOEXEC);
	assert_true(vs >= 0 && cs0 >= 0 && cs1 >= 0 && mfd >= 0 && efd >= 0);

	assert_int_equal(ks_verify_stats_fd(vs, -1, why, sizeof(why)), 0);
	assert_int_equal(ks_verify_stats_fd(cs0, 0, why, sizeof(why)), 0);
	assert_int_equal(ks_verify_stats_fd(cs1, 1, why, sizeof(why)), 0);
	/* The wrong kind or index. */
	assert_int_equal(ks_verify_stats_fd(cs1, 0, why, sizeof(why)), -EBADF);
	assert_non_null(strstr(why, "kvm-vcpu-stats:1"));
	assert_int_equal(ks_verify_stats_fd(vs, 0, why, sizeof(why)), -EBADF);
	assert_int_equal(ks_verify_stats_fd(cs0, -1, why, sizeof(why)), -EBADF);
	/* A memfd named like a stats fd forges nothing. */
	assert_int_equal(ks_verify_stats_fd(mfd, -1, why, sizeof(why)), -EBADF);
	assert_non_null(strstr(why, "/memfd:kvm-vm-stats"));
	/* Another anon inode is not a stats fd either, nor the VM fd. */
	assert_int_equal(ks_verify_stats_fd(efd, -1, why, sizeof(why)), -EBADF);
	assert_int_equal(ks_verify_stats_fd(vm, -1, why, sizeof(why)), -EBADF);
	/* The same by /proc name, in a process (here: ours). */
	assert_true(ks_remote_is_stats(getpid(), vs, -1));
	assert_true(ks_remote_is_stats(getpid(), cs1, 1));
	assert_false(ks_remote_is_stats(getpid(), cs1, 0));
	assert_false(ks_remote_is_stats(getpid(), mfd, -1));
	assert_false(ks_remote_is_stats(getpid(), 1000, -1));
	close(efd);
	close(mfd);
	close(cs1);
	close(cs0);
	close(vs);
	close(vcpu1);
	close(vcpu0);
	close(vm);
	close(kvm);
}

/* /proc/PID/task/TID/@file, whole (at most @len - 1 bytes); "" if gone. */
static const char *task_file(pid_t pid, pid_t tid, const char *file, char *buf,
			     size_t len)
{
	char path[80];
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", (int)pid, (int)tid, file);
	f = fopen(path, "re");
	if (f) {
		n = fread(buf, 1, len - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	return buf;
}

static char thread_state(pid_t pid, pid_t tid)
{
	char buf[512];
	const char *p = strrchr(task_file(pid, tid, "stat", buf, sizeof(buf)), ')');

	return p && p[1] == ' ' ? p[2] : 0;
}

static long tracer_of(pid_t pid, pid_t tid)
{
	char buf[2048];
	const char *p = strstr(task_file(pid, tid, "status", buf, sizeof(buf)),
			       "TracerPid:");

	return p ? strtol(p + 10, NULL, 10) : -1;
}

/* @pid's tracer once it has none, or after @ms: a tracer that exits
 * lets its tracees go a moment after its join returned (see below). */
static long tracer_after(pid_t pid, int ms)
{
	for (int i = 0; i < ms / 5 && tracer_of(pid, pid) != 0; i++)
		usleep(5000);
	return tracer_of(pid, pid);
}

/* Wait (bounded) for a byte on @fd; true when it came. */
static bool byte_within(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	return poll(&p, 1, ms) == 1 && read(fd, &c, 1) == 1;
}

struct hold_try {
	pid_t tid;
	int err;
	uint64_t took_ns;
};

static void try_hold(void *arg, struct ks_leftovers *lo)
{
	struct hold_try *h = arg;
	struct ks_thread t;
	uint64_t t0 = mono_ns();

	h->err = ks_thread_hold(&t, h->tid, 200 * MSEC);
	h->took_ns = mono_ns() - t0;
	ks_leave(lo, &t);
	ks_thread_release(&t);
}

/* A process whose only thread sits in vfork() (a killable wait: a
 * ptrace interrupt does not end it) until its child exits 1.5 s later:
 * the hold gives up after its 200 ms, and the process is never left
 * stopped, nor traced, once the tracer thread is gone. */
static void test_hold_deadline(void **state)
{
	struct hold_try h = { 0 };
	int out[2], status;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(out), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		close(out[0]);
		if (!vfork()) {
			usleep(1500000);
			_exit(0);
		}
		(void)!write(out[1], "x", 1);
		_exit(0);
	}
	close(out[1]);
	for (int i = 0; i < 200 && thread_state(pid, pid) != 'D'; i++)
		usleep(5000);
	assert_int_equal(thread_state(pid, pid), 'D');
	h.tid = pid;
	ks_run_traced(try_hold, &h);
	assert_int_equal(h.err, -ETIMEDOUT);
	assert_true(h.took_ns >= 200 * MSEC && h.took_ns < 600 * MSEC);
	/* The tracer thread is gone: nobody traces it any more. Its join
	 * returns once its tid is cleared, which the kernel's exit does
	 * before it lets the tracees go (exit_mm, then exit_notify): give
	 * the rest of that exit a moment, seen to take ms under emulation. */
	assert_int_equal(tracer_after(pid, 1000), 0);
	/* Out of vfork, it goes on: never stopped for us. */
	assert_true(byte_within(out[0], 5000));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(out[0]);
}

/* ---- a VMM whose vCPU thread holds its mutex (halted, in-kernel irqchip) */

struct halted {
	pid_t pid;
	pid_t vcpu_tid;		/* in KVM_RUN, halted */
	int vcpu_fd;		/* in the child */
	int ctl, ack;		/* we write a byte: its main thread answers */
};

static void on_usr1(int sig)
{
	(void)sig;
}

static volatile pid_t vcpu_tid;

static void *vcpu_thread(void *arg)
{
	int *fd = arg;

	vcpu_tid = (pid_t)syscall(SYS_gettid);
	/* One KVM_RUN: halted with interrupts off, it only ends on a
	 * signal; then the mutex is free for good. */
	ioctl(fd[0], KVM_RUN, 0);
	for (;;)
		pause();
	return NULL;
}

/* The child: a VM with an in-kernel irqchip whose vCPU runs `hlt` with
 * interrupts off; its main thread waits on @in in read(). */
static void halted_main(int in, int out)
{
	int kvm = open("/dev/kvm", O_RDWR), vm = ioctl(kvm, KVM_CREATE_VM, 0);
	unsigned char *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct kvm_userspace_memory_region mr = { .memory_size = 4096,
						  .userspace_addr = (uintptr_t)mem };
	struct kvm_sregs sr;
	struct kvm_regs r = { .rip = 0, .rflags = 2 };
	struct sigaction sa = { .sa_handler = on_usr1 };	/* no SA_RESTART */
	static int fd[2];
	pthread_t t;
	char c;

	sigaction(SIGUSR1, &sa, NULL);
	mem[0] = 0xf4;	/* hlt */
	if (ioctl(vm, KVM_CREATE_IRQCHIP, 0) || ioctl(vm, KVM_SET_USER_MEMORY_REGION, &mr))
		_exit(1);
	fd[0] = ioctl(vm, KVM_CREATE_VCPU, 0);
	if (fd[0] < 0 || ioctl(fd[0], KVM_GET_SREGS, &sr))
		_exit(1);
	sr.cs.base = 0;
	sr.cs.selector = 0;
	if (ioctl(fd[0], KVM_SET_SREGS, &sr) || ioctl(fd[0], KVM_SET_REGS, &r))
		_exit(1);
	pthread_create(&t, NULL, vcpu_thread, fd);
	while (!vcpu_tid)
		usleep(1000);
	fd[1] = vcpu_tid;
	(void)!write(out, fd, sizeof(fd));
	while (read(in, &c, 1) == 1)
		(void)!write(out, &c, 1);
	_exit(0);
}

static bool halted_start(struct halted *h)
{
	int to[2], from[2], fd[2];

	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	h->pid = fork();
	assert_true(h->pid >= 0);
	if (!h->pid) {
		close(to[1]);
		close(from[0]);
		halted_main(to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);
	h->ctl = to[1];
	h->ack = from[0];
	if (read(h->ack, fd, sizeof(fd)) != sizeof(fd))
		return false;
	h->vcpu_fd = fd[0];
	h->vcpu_tid = fd[1];
	/* In KVM_RUN, halted: sleeping in the kernel. */
	for (int i = 0; i < 200 && thread_state(h->pid, h->vcpu_tid) != 'S'; i++)
		usleep(5000);
	usleep(50000);
	return thread_state(h->pid, h->vcpu_tid) == 'S';
}

/* How many stats fds the child holds. */
static int stats_fds(pid_t pid)
{
	int n = 0;

	for (int fd = 0; fd < 64; fd++)
		n += ks_remote_is_stats(pid, fd, 0) || ks_remote_is_stats(pid, fd, -1);
	return n;
}

struct stuck {
	struct halted *h;
	int hold, start, wait, cancel;	/* what each step returned */
	int state;
};

/* From the child's main thread (in read()), KVM_GET_STATS_FD on the vCPU
 * whose thread holds its mutex: the call never returns by itself. (In
 * the tracer thread: no cmocka assertion here.) */
static void stuck_call(void *arg, struct ks_leftovers *lo)
{
	struct stuck *st = arg;
	struct ks_thread t;
	uint64_t insn = 0;
	long ret;

	st->hold = ks_thread_hold(&t, st->h->pid, 1000 * MSEC);
	if (!st->hold && ks_thread_syscall_insn(&t, &insn))
		st->hold = -ENOENT;
	if (!st->hold)
		st->start = ks_thread_call_start(&t, insn, SYS_ioctl,
						 (unsigned long)st->h->vcpu_fd,
						 KVM_GET_STATS_FD, 0);
	if (!st->hold && !st->start)
		st->wait = ks_thread_call_wait(&t, 200 * MSEC, &ret);
	if (st->wait == -ETIMEDOUT)
		st->cancel = ks_thread_call_cancel(&t, 200 * MSEC, &ret);
	st->state = t.state;
	ks_leave(lo, &t);
	ks_thread_release(&t);
}

/* Killed whatever the test's outcome (a failed assertion returns early). */
static pid_t stuck_child;

static int kill_stuck(void **state)
{
	(void)state;
	if (stuck_child > 0) {
		kill(stuck_child, SIGKILL);
		waitpid(stuck_child, NULL, 0);
	}
	stuck_child = 0;
	return 0;
}

static void test_stuck_call(void **state)
{
	struct halted h;
	struct stuck st = { .h = &h };
	char c = 'p';

	(void)state;
	need_kvm();
	assert_true(halted_start(&h));
	stuck_child = h.pid;
	assert_int_equal(write(h.ctl, &c, 1), 1);	/* the main thread is alive */
	assert_true(byte_within(h.ack, 2000));
	usleep(20000);
	ks_run_traced(stuck_call, &st);
	assert_int_equal(st.hold, 0);
	assert_int_equal(st.start, 0);
	assert_int_equal(st.wait, -ETIMEDOUT);
	/* A ptrace interrupt does not end a wait for the vCPU mutex. */
	assert_int_equal(st.cancel, -ETIMEDOUT);
	assert_int_equal(st.state, KS_THREAD_IN_CALL);
	/* Still in our call, held by the background tracer. */
	assert_int_not_equal(tracer_of(h.pid, h.pid), 0);
	/* The vCPU thread leaves KVM_RUN: the mutex is free, the call ends,
	 * and the tracer closes what it made and lets the thread go. */
	assert_int_equal(syscall(SYS_tgkill, h.pid, h.vcpu_tid, SIGUSR1), 0);
	assert_int_equal(tracer_after(h.pid, 3000), 0);
	assert_int_equal(stats_fds(h.pid), 0);
	/* And its read() goes on as if nothing happened. */
	c = 'q';
	assert_int_equal(write(h.ctl, &c, 1), 1);
	assert_true(byte_within(h.ack, 2000));
	close(h.ctl);
	close(h.ack);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verify),
		cmocka_unit_test(test_hold_deadline),
		cmocka_unit_test_teardown(test_stuck_call, kill_stuck),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
