// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * System calls run inside another process's thread (x86_64); see inject.h.
 *
 * The life of a held thread:
 *
 *   PTRACE_SEIZE + PTRACE_INTERRUPT  -> it stops in the kernel's signal
 *                                       handling on its way back to user
 *                                       space (a system call it sat in
 *                                       returns -EINTR, or one of the
 *                                       -ERESTART* codes, not acted on yet);
 *   save registers and signal mask, block every signal;
 *   per call: registers = saved, rip = a `syscall` instruction, rax = nr,
 *             PTRACE_SINGLESTEP: the kernel traps right after the system
 *             call (SIGTRAP), before any user instruction runs, and stops
 *             in its signal handling again; rax = result;
 *   registers = saved, signal mask = saved, PTRACE_DETACH (the SIGTRAP
 *   is dropped).
 *
 * Every stop is inside the kernel's signal handling, so when the thread
 * is let go with its own registers the kernel finishes the system call it
 * was interrupted in exactly as it would have without us: restarts it
 * (-ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND: rax = orig_rax,
 * rip -= 2; -ERESTART_RESTARTBLOCK: restart_syscall), or, when a signal
 * arrived meanwhile, runs its handler with the -EINTR that implies. One
 * stop per call (not two, as with PTRACE_SYSCALL) keeps the hold short:
 * on a busy host each stop costs a trip through the scheduler.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>

#include "inject.h"
#include "internal.h"

/* Registers, restart rules and the `syscall` instruction are x86_64's;
 * elsewhere every entry point fails with -EOPNOTSUPP (at the end). */
#if defined(__x86_64__)

#define MAX_PASSED_SIGNALS 64

static void pause_briefly(unsigned int round)
{
	struct timespec ts = { 0, 20000 };

	/* The thread we wait for may need the CPU we are on. */
	if (round < 8)
		sched_yield();
	else
		nanosleep(&ts, NULL);
}

/* Wait for @tid to stop, until @deadline (CLOCK_MONOTONIC ns; 0: no
 * limit). -ESRCH when it exited instead. */
static int wait_stop(pid_t tid, uint64_t deadline, int *status)
{
	for (unsigned int round = 0;; round++) {
		pid_t r = waitpid(tid, status, __WALL | (deadline ? WNOHANG : 0));

		if (r == tid)
			return WIFSTOPPED(*status) ? 0 : -ESRCH;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == ECHILD ? -ESRCH : -errno;
		if (ks_now_ns() >= deadline)
			return -ETIMEDOUT;
		pause_briefly(round);
	}
}

static uint64_t deadline_in(uint64_t timeout_ns)
{
	return timeout_ns == UINT64_MAX ? 0 : ks_now_ns() + timeout_ns;
}

static bool is_stop_signal(int sig)
{
	return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN ||
	       sig == SIGTTOU;
}

/* After PTRACE_INTERRUPT: wait for the interrupt's stop, passing on any
 * signal that was already on its way to the thread. -ETIMEDOUT when it
 * has not stopped by @deadline (a wait it cannot be woken from: disk,
 * FUSE, a vfork): it stays STOPPING, and only its stop, or the exit of
 * the thread that seized it, lets it go. */
static int wait_interrupted(struct ks_thread *t, uint64_t deadline)
{
	int status, err;

	for (int i = 0; i < MAX_PASSED_SIGNALS; i++) {
		err = wait_stop(t->tid, deadline, &status);
		if (err == -ETIMEDOUT)
			return err;
		if (err) {
			t->state = KS_THREAD_FREE;
			return err;
		}
		if (status >> 16 == PTRACE_EVENT_STOP) {
			t->state = KS_THREAD_STOPPED;
			/* A group stop: someone is stopping the process. */
			return WSTOPSIG(status) == SIGTRAP ? 0 : -EBUSY;
		}
		/* A signal-delivery stop: deliver it, untouched. */
		if (ptrace(PTRACE_CONT, t->tid, NULL,
			   (void *)(long)WSTOPSIG(status)) < 0) {
			t->state = KS_THREAD_FREE;
			return -errno;
		}
	}
	return -EAGAIN;		/* still STOPPING: release waits */
}

int ks_thread_hold(struct ks_thread *t, pid_t tid, uint64_t timeout_ns)
{
	int err;

	memset(t, 0, sizeof(*t));
	t->tid = tid;
	/* No PTRACE_O_EXITKILL: if we die, the VMM must live on. */
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL))
		return -errno;
	t->since_ns = ks_now_ns();
	t->state = KS_THREAD_STOPPING;
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL)) {
		/* Only a thread that died in between refuses this. */
		err = -errno;
		t->state = KS_THREAD_FREE;
		return err;
	}
	err = wait_interrupted(t, deadline_in(timeout_ns));
	if (err)
		return err;
	if (ptrace(PTRACE_GETREGS, tid, NULL, &t->regs) ||
	    ptrace(PTRACE_GETSIGMASK, tid, (void *)sizeof(t->mask), &t->mask))
		return -errno;
	return 0;
}

bool ks_thread_was_in(const struct ks_thread *t, long nr, unsigned long a0,
		      unsigned long a1)
{
	return (long)t->regs.orig_rax == nr && t->regs.rdi == a0 &&
	       t->regs.rsi == a1;
}

static int read_remote(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len };
	struct iovec remote = { (void *)(uintptr_t)addr, len };
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

static bool is_syscall_insn(const unsigned char *b)
{
	return b[0] == 0x0f && b[1] == 0x05;
}

int ks_thread_syscall_insn(const struct ks_thread *t, uint64_t *addr)
{
	uint64_t at = t->regs.rip - 2;
	unsigned char b[2];

	/* rip - 2 on rip's own page: executable, since rip is. */
	if ((t->regs.rip & 4095) < 2 || read_remote(t->tid, at, b, 2) ||
	    !is_syscall_insn(b))
		return -ENOENT;
	*addr = at;
	return 0;
}

static int vdso_range(pid_t pid, uint64_t *lo, uint64_t *hi)
{
	char path[64], line[512];
	int err = -ENOENT;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long a, b;
		char perms[8];

		if (!strstr(line, "[vdso]") ||
		    sscanf(line, "%llx-%llx %7s", &a, &b, perms) != 3 ||
		    !strchr(perms, 'x'))
			continue;
		*lo = a;
		*hi = b;
		err = 0;
		break;
	}
	fclose(f);
	return err;
}

int ks_vdso_syscall_insn(pid_t pid, uint64_t *addr)
{
	uint64_t lo = 0, hi = 0;
	unsigned char *buf, *p;
	int err = vdso_range(pid, &lo, &hi);

	if (err)
		return err;
	if (hi <= lo || hi - lo > (1u << 20))
		return -ENOENT;
	buf = malloc(hi - lo);
	if (!buf)
		return -ENOMEM;
	err = read_remote(pid, lo, buf, hi - lo);
	/* Any 0f 05 will do: executed from its first byte, it is one. */
	p = err ? NULL : memmem(buf, hi - lo, "\x0f\x05", 2);
	if (p)
		*addr = lo + (uint64_t)(p - buf);
	else if (!err)
		err = -ENOENT;
	free(buf);
	return err;
}

/* Decode a stop met while our call runs: 1 for the trap after it, 0 to
 * keep waiting (the thread was resumed), or -errno. */
static int on_call_stop(struct ks_thread *t, int status)
{
	int sig = WSTOPSIG(status);

	if (sig == SIGTRAP && status >> 16 == 0)
		return 1;
	if (status >> 16 == PTRACE_EVENT_STOP || is_stop_signal(sig)) {
		/* Someone is stopping the process: finish our call first
		 * and stop it after (resent when we let go). */
		if (status >> 16 != PTRACE_EVENT_STOP)
			t->resend_sig = sig;
		if (!ptrace(PTRACE_SINGLESTEP, t->tid, NULL, NULL))
			return 0;
		t->state = KS_THREAD_FREE;	/* it died */
		return -ESRCH;
	}
	/* Every other signal is blocked, so this is a fault of our call
	 * (SIGSYS: a seccomp filter trapped it): dropped at release. */
	t->state = KS_THREAD_STOPPED;
	return sig == SIGSYS ? -EPERM : -EFAULT;
}

/* Wait until the call's trap; stays IN_CALL on -ETIMEDOUT and -EAGAIN. */
static int wait_call_stop(struct ks_thread *t, uint64_t deadline)
{
	int status, err;

	for (int i = 0; i < MAX_PASSED_SIGNALS; i++) {
		err = wait_stop(t->tid, deadline, &status);
		if (err == -ESRCH)
			t->state = KS_THREAD_FREE;
		if (err)
			return err;
		err = on_call_stop(t, status);
		if (err < 0)
			return err;
		if (err) {
			t->state = KS_THREAD_STOPPED;
			return 0;
		}
	}
	return -EAGAIN;
}

int ks_thread_call_start(struct ks_thread *t, uint64_t insn, long nr,
			 unsigned long a0, unsigned long a1, unsigned long a2)
{
	struct user_regs_struct r = t->regs;
	uint64_t all = ~0ull;

	if (t->state != KS_THREAD_STOPPED)
		return -EINVAL;
	if (!t->mask_changed) {
		/* Signals stay pending until we let go: none may run a
		 * handler on our registers. */
		if (ptrace(PTRACE_SETSIGMASK, t->tid, (void *)sizeof(all), &all))
			return -errno;
		t->mask_changed = true;
	}
	r.rip = insn;
	r.rax = (unsigned long)nr;
	r.orig_rax = (unsigned long)-1;	/* no restart logic on the way */
	r.rdi = a0;
	r.rsi = a1;
	r.rdx = a2;
	r.r10 = r.r8 = r.r9 = 0;
	t->regs_changed = true;
	if (ptrace(PTRACE_SETREGS, t->tid, NULL, &r) ||
	    ptrace(PTRACE_SINGLESTEP, t->tid, NULL, NULL))
		return -errno;
	t->state = KS_THREAD_IN_CALL;
	t->call_insn = insn;
	t->call_nr = nr;
	return 0;
}

int ks_thread_call_wait(struct ks_thread *t, uint64_t timeout_ns, long *ret)
{
	struct user_regs_struct r;
	int err;

	if (t->state != KS_THREAD_IN_CALL)
		return -EINVAL;
	err = wait_call_stop(t, deadline_in(timeout_ns));
	if (err)
		return err;
	if (ptrace(PTRACE_GETREGS, t->tid, NULL, &r))
		return -errno;
	/* One instruction ran, and it was our `syscall`. */
	if (r.rip != t->call_insn + 2)
		return -EIO;
	*ret = (long)r.rax;
	return 0;
}

int ks_thread_call(struct ks_thread *t, uint64_t insn, long nr,
		   unsigned long a0, unsigned long a1, unsigned long a2,
		   long *ret)
{
	int err = ks_thread_call_start(t, insn, nr, a0, a1, a2);

	return err ? err : ks_thread_call_wait(t, UINT64_MAX, ret);
}

int ks_thread_call_cancel(struct ks_thread *t, uint64_t timeout_ns, long *ret)
{
	uint64_t deadline = deadline_in(timeout_ns);
	struct user_regs_struct r;
	int status, err, sig;

	if (t->state != KS_THREAD_IN_CALL)
		return -EINVAL;
	/* Wakes an interruptible wait; the call returns (or is set to be
	 * restarted) and the thread stops before any user instruction. */
	if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL) && errno == ESRCH) {
		t->state = KS_THREAD_FREE;
		return -ESRCH;
	}
	err = wait_stop(t->tid, deadline, &status);
	if (err == -ESRCH)
		t->state = KS_THREAD_FREE;
	if (err)
		return err;
	sig = WSTOPSIG(status);
	t->state = KS_THREAD_STOPPED;
	/* A stop signal on its way: sent again when we let go. */
	if (status >> 16 != PTRACE_EVENT_STOP && is_stop_signal(sig))
		t->resend_sig = sig;
	if (ptrace(PTRACE_GETREGS, t->tid, NULL, &r))
		return -errno;
	/* Past our `syscall`: it returned. Else it is set to start again. */
	if (r.rip != t->call_insn + 2)
		return -EINTR;
	*ret = (long)r.rax;
	return 0;
}

int ks_thread_let_go(struct ks_thread *t, uint64_t timeout_ns)
{
	uint64_t deadline = deadline_in(timeout_ns);

	/* Our call, or the stop, must come before it can be let go. */
	while (t->state == KS_THREAD_IN_CALL) {
		int err = wait_call_stop(t, deadline);

		if (err == -ETIMEDOUT)
			return err;
		if (err && err != -EAGAIN && t->state == KS_THREAD_IN_CALL)
			t->state = KS_THREAD_FREE;	/* cannot wait for it */
	}
	while (t->state == KS_THREAD_STOPPING)
		if (wait_interrupted(t, deadline) == -ETIMEDOUT)
			return -ETIMEDOUT;
	ks_thread_release(t);
	return 0;
}

uint64_t ks_thread_release(struct ks_thread *t)
{
	if (t->state == KS_THREAD_FREE)
		return 0;
	/* Our call, or the stop, must come before it can be let go; each
	 * round ends with the thread stopped, gone, or one signal on. */
	while (t->state == KS_THREAD_IN_CALL) {
		int err = wait_call_stop(t, 0);

		if (err && err != -EAGAIN && t->state == KS_THREAD_IN_CALL)
			t->state = KS_THREAD_FREE;	/* cannot wait for it */
	}
	while (t->state == KS_THREAD_STOPPING)
		wait_interrupted(t, 0);
	if (t->state != KS_THREAD_STOPPED)
		goto out;
	/* Stopped in the kernel's signal handling: from here it finishes
	 * the interrupted system call itself. */
	if (t->regs_changed)
		ptrace(PTRACE_SETREGS, t->tid, NULL, &t->regs);
	if (t->mask_changed)
		ptrace(PTRACE_SETSIGMASK, t->tid, (void *)sizeof(t->mask), &t->mask);
	ptrace(PTRACE_DETACH, t->tid, NULL, NULL);
	if (t->resend_sig)
		kill(t->tid, t->resend_sig);
out:
	t->state = KS_THREAD_FREE;
	return ks_now_ns() - t->since_ns;
}

#else /* !__x86_64__ */

int ks_thread_hold(struct ks_thread *t, pid_t tid, uint64_t timeout_ns)
{
	(void)timeout_ns;
	memset(t, 0, sizeof(*t));
	t->tid = tid;
	return -EOPNOTSUPP;
}

bool ks_thread_was_in(const struct ks_thread *t, long nr, unsigned long a0,
		      unsigned long a1)
{
	(void)t, (void)nr, (void)a0, (void)a1;
	return false;
}

int ks_thread_syscall_insn(const struct ks_thread *t, uint64_t *addr)
{
	(void)t, (void)addr;
	return -EOPNOTSUPP;
}

int ks_vdso_syscall_insn(pid_t pid, uint64_t *addr)
{
	(void)pid, (void)addr;
	return -EOPNOTSUPP;
}

int ks_thread_call_start(struct ks_thread *t, uint64_t insn, long nr,
			 unsigned long a0, unsigned long a1, unsigned long a2)
{
	(void)t, (void)insn, (void)nr, (void)a0, (void)a1, (void)a2;
	return -EOPNOTSUPP;
}

int ks_thread_call_wait(struct ks_thread *t, uint64_t timeout_ns, long *ret)
{
	(void)t, (void)timeout_ns, (void)ret;
	return -EOPNOTSUPP;
}

int ks_thread_call(struct ks_thread *t, uint64_t insn, long nr,
		   unsigned long a0, unsigned long a1, unsigned long a2,
		   long *ret)
{
	(void)t, (void)insn, (void)nr, (void)a0, (void)a1, (void)a2, (void)ret;
	return -EOPNOTSUPP;
}

int ks_thread_call_cancel(struct ks_thread *t, uint64_t timeout_ns, long *ret)
{
	(void)t, (void)timeout_ns, (void)ret;
	return -EOPNOTSUPP;
}

int ks_thread_let_go(struct ks_thread *t, uint64_t timeout_ns)
{
	(void)t, (void)timeout_ns;
	return -EOPNOTSUPP;
}

uint64_t ks_thread_release(struct ks_thread *t)
{
	t->state = KS_THREAD_FREE;
	return 0;
}

#endif /* __x86_64__ */
