/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * System calls run inside a thread of another process (x86_64), the way
 * CRIU's compel does it: seize the thread with ptrace, interrupt it, point
 * its registers at a `syscall` instruction the process already has, step
 * it through that one system call, and put every register back.
 *
 * The thread is never sent a signal (PTRACE_INTERRUPT, not SIGSTOP), its
 * signals are blocked while it runs our calls (they stay pending and are
 * delivered once it is let go), and a system call it was in when it was
 * interrupted is restarted exactly as the kernel would have restarted it.
 * Internal to libkvmstats; never installed.
 */
#ifndef KVMSTATS_INJECT_H
#define KVMSTATS_INJECT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

enum ks_thread_state {
	KS_THREAD_FREE,		/* not ours (never seized, or let go) */
	KS_THREAD_STOPPING,	/* seized and interrupted, not stopped yet */
	KS_THREAD_STOPPED,	/* in a ptrace stop: ours to use */
	KS_THREAD_IN_CALL,	/* running a system call we started */
};

/* One thread we hold. Zero-initialise, then ks_thread_hold(). */
struct ks_thread {
	pid_t tid;
	enum ks_thread_state state;
	bool regs_changed;	/* registers to restore at release */
	bool mask_changed;	/* restore the signal mask at release */
	int resend_sig;		/* a stop signal that came while we held it */
	uint64_t call_insn;	/* where the running call was started */
	long call_nr;		/* and which call it is */
	uint64_t mask;		/* its signal mask when interrupted */
	uint64_t since_ns;	/* when it was interrupted */
#if defined(__x86_64__)		/* the only architecture implemented */
	struct user_regs_struct regs;	/* its registers when interrupted */
#endif
};

/* Seize @tid and wait until it stops, polling for at most @timeout_ns
 * (UINT64_MAX: blocked as long as it takes). 0, or -EPERM (traced by
 * someone else, or no permission), -ESRCH (gone), -EBUSY (its process is
 * being stopped by a signal: let go again), -ETIMEDOUT (not stopped in
 * time: it cannot be let go until it stops, which the thread that seized
 * it may wait for with ks_thread_let_go(), or forgo by exiting: the
 * kernel then detaches it, and it never stops for us). */
int ks_thread_hold(struct ks_thread *t, pid_t tid, uint64_t timeout_ns);

/* Does the held thread sit in system call @nr with first arguments @a0
 * and @a1 (interrupted by us, or just returned from it)? */
bool ks_thread_was_in(const struct ks_thread *t, long nr, unsigned long a0,
		      unsigned long a1);

/* Address of the `syscall` instruction the thread stopped right after,
 * checked byte by byte; -ENOENT when it did not stop after one. */
int ks_thread_syscall_insn(const struct ks_thread *t, uint64_t *addr);
/* Address of a `syscall` instruction in the vDSO of @pid; -ENOENT. */
int ks_vdso_syscall_insn(pid_t pid, uint64_t *addr);

/* Start system call @nr(@a0, @a1, @a2) from the instruction at @insn and
 * let it run; ks_thread_call_wait() collects its result. Returns 0, or a
 * negative errno when it could not be started (the thread is still held
 * and ks_thread_release() restores it). */
int ks_thread_call_start(struct ks_thread *t, uint64_t insn, long nr,
			 unsigned long a0, unsigned long a1, unsigned long a2);
/* Wait up to @timeout_ns (UINT64_MAX: block) for the call to return,
 * polling: 0 with its result in
 * *ret (a value or -errno of the call itself), -ETIMEDOUT (still in the
 * call: wait again, or release, which waits for it), or another -errno. */
int ks_thread_call_wait(struct ks_thread *t, uint64_t timeout_ns, long *ret);
/* Both, for calls that do not block. */
int ks_thread_call(struct ks_thread *t, uint64_t insn, long nr,
		   unsigned long a0, unsigned long a1, unsigned long a2,
		   long *ret);

/* A call that does not return in time: interrupt it. An interruptible
 * wait ends (the call returns, or is set to be restarted, which is then
 * undone) and the thread stops: 0 when the call had returned (its result
 * in *ret), -EINTR when it had not (the thread is held, and released as
 * usual), -ETIMEDOUT when the thread did not stop within @timeout_ns (a
 * wait not even a signal ends: still IN_CALL), another -errno. */
int ks_thread_call_cancel(struct ks_thread *t, uint64_t timeout_ns, long *ret);

/* Put the registers and signal mask back (restarting the system call it
 * was interrupted in, as the kernel does) and let the thread go. Waits
 * for a call still running or a stop still coming, however long that
 * takes. Returns how long the thread was held, in ns (0 if never). */
uint64_t ks_thread_release(struct ks_thread *t);
/* The same, waiting at most @timeout_ns (0: not at all) for the call or
 * the stop: 0 when let go, -ETIMEDOUT when not (still IN_CALL or
 * STOPPING). */
int ks_thread_let_go(struct ks_thread *t, uint64_t timeout_ns);

/* ---- a tracer thread of our own, and what it takes (attach_tracer.c) */

#define KS_MAX_LEFT 32

/* What a pass could not finish in time: threads not let go (never
 * stopped, or still in a call of ours). */
struct ks_leftovers {
	struct ks_thread t[KS_MAX_LEFT];
	size_t n;
};

/* Run @fn in a thread of its own, which is then the tracer of every
 * thread @fn holds, and wait for it. What @fn leaves in @lo is finished
 * after: threads that never stopped are let go by that thread's exit (the
 * kernel detaches them: they never stop for us); threads still in a call
 * of ours in the background, while the caller goes on. */
void ks_run_traced(void (*fn)(void *arg, struct ks_leftovers *lo), void *arg);
/* Hand @t (when not FREE; it is FREE for the caller after) over to the
 * tracer. A KVM_GET_STATS_FD @t is still in is followed by a close of the
 * fd it makes. */
void ks_leave(struct ks_leftovers *lo, struct ks_thread *t);

#endif
