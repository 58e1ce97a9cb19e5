// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * System call injection (lib/inject.c) on a child process that sits in
 * the system calls whose restart rules differ: after our calls and the
 * release, each must behave as if we had never been there.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"
#include "../../lib/inject.h"

#if defined(__x86_64__)	/* the only architecture inject.c implements */
#define MSEC 1000000ull

enum what { PPOLL, READ, SLEEP, BUSY };

struct shared {
	volatile uint64_t spins;
	volatile int stop;
	volatile int handled;
	long ret;
	int err;
	uint64_t elapsed_ns;
	char byte;
};

struct child {
	pid_t pid;
	int ctl;		/* parent writes here */
	struct shared *sh;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_usr1(int sig)
{
	(void)sig;
}

static void child_main(enum what w, int in, struct shared *sh)
{
	struct pollfd p = { .fd = in, .events = POLLIN };
	struct timespec ts = { 10, 0 }, nap = { 0, 300 * MSEC };
	struct sigaction sa = { .sa_handler = on_usr1 };
	uint64_t t0 = now_ns();

	sigaction(SIGUSR1, &sa, NULL);	/* no SA_RESTART */
	switch (w) {
	case PPOLL:
		sh->ret = ppoll(&p, 1, &ts, NULL);
		break;
	case READ:
		sh->ret = read(in, &sh->byte, 1);
		break;
	case SLEEP:
		sh->ret = clock_nanosleep(CLOCK_MONOTONIC, 0, &nap, NULL);
		break;
	case BUSY:
		while (!sh->stop)
			sh->spins++;
		sh->ret = 0;
		break;
	}
	sh->err = errno;
	sh->elapsed_ns = now_ns() - t0;
	_exit(0);
}

static void start(struct child *c, enum what w)
{
	int pfd[2];

	c->sh = mmap(NULL, sizeof(*c->sh), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(c->sh != MAP_FAILED);
	memset(c->sh, 0, sizeof(*c->sh));
	assert_int_equal(pipe(pfd), 0);
	c->pid = fork();
	assert_true(c->pid >= 0);
	if (!c->pid) {
		close(pfd[1]);
		child_main(w, pfd[0], c->sh);
	}
	close(pfd[0]);
	c->ctl = pfd[1];
}

/* Wait until the child sits in system call @nr (-1: spins in user space). */
static void wait_in(const struct child *c, long nr)
{
	char path[64], buf[256];

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)c->pid);
	for (int i = 0; i < 2000; i++) {
		int fd = open(path, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

		if (fd >= 0)
			close(fd);
		if (n > 0) {
			buf[n] = 0;
			if (nr < 0 ? c->sh->spins > 1000 : strtol(buf, NULL, 10) == nr &&
							      strncmp(buf, "running", 7))
				return;
		}
		usleep(1000);
	}
	fail_msg("child never reached system call %ld", nr);
}

static void finish(struct child *c)
{
	int status;

	assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
	assert_true(WIFEXITED(status));
	close(c->ctl);
}

/* getpid, then dup + close: what attach does, with fds we can check. */
static void run_calls(struct ks_thread *t, pid_t pid)
{
	char path[64];
	uint64_t insn;
	long ret, fd;

	if (ks_thread_syscall_insn(t, &insn))
		assert_int_equal(ks_vdso_syscall_insn(pid, &insn), 0);
	assert_int_equal(ks_thread_call(t, insn, SYS_getpid, 0, 0, 0, &ret), 0);
	assert_int_equal(ret, pid);
	assert_int_equal(ks_thread_call(t, insn, SYS_dup, 2, 0, 0, &fd), 0);
	assert_true(fd > 2);
	snprintf(path, sizeof(path), "/proc/%d/fd/%ld", (int)pid, fd);
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(ks_thread_call(t, insn, SYS_close, (unsigned long)fd, 0, 0,
					&ret), 0);
	assert_int_equal(ret, 0);
	assert_int_not_equal(access(path, F_OK), 0);
}

static void hold_and_call(struct child *c, long nr, long want_rax)
{
	struct ks_thread t;

	wait_in(c, nr);
	assert_int_equal(ks_thread_hold(&t, c->pid, 1000 * MSEC), 0);
	assert_int_equal((long)t.regs.orig_rax, nr);
	assert_int_equal((long)t.regs.rax, want_rax);
	run_calls(&t, c->pid);
	assert_true(ks_thread_release(&t) > 0);
	assert_int_equal(t.state, KS_THREAD_FREE);
}

/* ppoll: -ERESTARTNOHAND; restarted, it still waits for its fd. */
static void test_ppoll_restarts(void **state)
{
	struct child c;

	(void)state;
	start(&c, PPOLL);
	hold_and_call(&c, SYS_ppoll, -514);
	usleep(20000);
	assert_int_equal(c.sh->elapsed_ns, 0);	/* still in ppoll */
	assert_int_equal(write(c.ctl, "x", 1), 1);
	finish(&c);
	assert_int_equal(c.sh->ret, 1);
}

/* A signal that comes while the thread is held runs its handler after,
 * and ppoll then returns EINTR, as without us. */
static void test_signal_while_held(void **state)
{
	struct ks_thread t;
	struct child c;

	(void)state;
	start(&c, PPOLL);
	wait_in(&c, SYS_ppoll);
	assert_int_equal(ks_thread_hold(&t, c.pid, 1000 * MSEC), 0);
	run_calls(&t, c.pid);
	assert_int_equal(kill(c.pid, SIGUSR1), 0);
	ks_thread_release(&t);
	finish(&c);
	assert_int_equal(c.sh->ret, -1);
	assert_int_equal(c.sh->err, EINTR);
}

/* read on a pipe: -ERESTARTSYS. */
static void test_read_restarts(void **state)
{
	struct child c;

	(void)state;
	start(&c, READ);
	hold_and_call(&c, SYS_read, -512);
	assert_int_equal(write(c.ctl, "y", 1), 1);
	finish(&c);
	assert_int_equal(c.sh->ret, 1);
	assert_int_equal(c.sh->byte, 'y');
}

/* A relative sleep: -ERESTART_RESTARTBLOCK, resumed with what is left. */
static void test_sleep_resumes(void **state)
{
	struct child c;

	(void)state;
	start(&c, SLEEP);
	hold_and_call(&c, SYS_clock_nanosleep, -516);
	finish(&c);
	assert_int_equal(c.sh->ret, 0);
	assert_true(c.sh->elapsed_ns >= 300 * MSEC);
	assert_true(c.sh->elapsed_ns < 2000 * MSEC);
}

/* A thread in user space: no syscall at rip - 2, the vDSO's is used. */
static void test_busy_thread(void **state)
{
	struct ks_thread t;
	struct child c;
	uint64_t before;

	(void)state;
	start(&c, BUSY);
	wait_in(&c, -1);
	assert_int_equal(ks_thread_hold(&t, c.pid, 1000 * MSEC), 0);
	assert_true((long)t.regs.orig_rax < 0);
	run_calls(&t, c.pid);
	before = c.sh->spins;
	ks_thread_release(&t);
	for (int i = 0; i < 1000 && c.sh->spins < before + 1000; i++)
		usleep(1000);
	assert_true(c.sh->spins >= before + 1000);
	c.sh->stop = 1;
	finish(&c);
}

/* A thread someone already traces (here: we) is refused, untouched. */
static void test_refused(void **state)
{
	struct ks_thread t, again;
	struct child c;

	(void)state;
	start(&c, PPOLL);
	wait_in(&c, SYS_ppoll);
	assert_int_equal(ks_thread_hold(&t, c.pid, 1000 * MSEC), 0);
	assert_int_equal(ks_thread_hold(&again, c.pid, 100 * MSEC), -EPERM);
	assert_int_equal(again.state, KS_THREAD_FREE);
	assert_int_equal(ks_thread_release(&again), 0);
	ks_thread_release(&t);
	assert_int_equal(write(c.ctl, "x", 1), 1);
	finish(&c);
	assert_int_equal(c.sh->ret, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ppoll_restarts),
		cmocka_unit_test(test_signal_while_held),
		cmocka_unit_test(test_read_restarts),
		cmocka_unit_test(test_sleep_resumes),
		cmocka_unit_test(test_busy_thread),
		cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* !__x86_64__ */

/* Elsewhere the injection is not implemented, and says so. */
static void test_not_supported(void **state)
{
	struct ks_thread t;

	(void)state;
	assert_int_equal(ks_thread_hold(&t, getpid(), 0), -EOPNOTSUPP);
	assert_int_equal(t.state, KS_THREAD_FREE);
	assert_int_equal(ks_thread_release(&t), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_not_supported),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
