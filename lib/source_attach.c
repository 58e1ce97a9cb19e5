// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The attach source: real binary stats fds for a VMM that holds none
 * (QEMU up to 8.0, any VMM that never asked for them).
 *
 * Only the process that owns a VM may call KVM_GET_STATS_FD on it (from
 * anywhere else the ioctl fails with EIO), so the VMM is made to call it
 * itself: one of its threads is held with ptrace for a fraction of a
 * millisecond, runs the ioctl (inject.c), we take the new fd with
 * pidfd_getfd() and the thread closes its copy before it is let go. From
 * then on a reading is a pread of our own fd, as for the fd source, and
 * the VMM is never touched again (until a refresh finds new vCPUs).
 *
 * Which thread runs which ioctl matters. KVM_GET_STATS_FD on a vCPU fd
 * takes the vCPU's mutex, and the vCPU's thread holds that mutex for as
 * long as it sits in KVM_RUN, which for a halted guest with an in-kernel
 * irqchip is forever. So a vCPU's ioctl runs in the thread found in
 * KVM_RUN on it (/proc/PID/task/TID/syscall reads "16 0x<fd> 0xae80"),
 * or, for a busy vCPU, which that file only shows as "running", in the
 * running thread whose registers show that KVM_RUN once it is held: the
 * ptrace interrupt makes its KVM_RUN return -EINTR, which VMMs treat as
 * an ordinary kick, and the mutex is free. The VM's ioctl takes no
 * vCPU lock and runs in a helper thread (the main thread if it can),
 * along with the vCPUs whose thread was not seen in KVM_RUN; should one
 * of those block on its mutex after all, the threads that may hold it
 * are interrupted too ("kicked") until it returns.
 *
 * Safety: a VMM under a seccomp filter is refused unless forced (a system
 * call its filter does not allow could kill it); every thread is let go,
 * registers and signal mask restored, on every path; the time each was
 * held is measured (kvmstats_vmm__attach_hold_ns()); our own signals are
 * blocked while a thread is held, so that a Ctrl-C cannot leave one in
 * the middle of our calls.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/kvm.h>

#include "inject.h"
#include "internal.h"

#ifndef KVM_GET_STATS_FD
#define KVM_GET_STATS_FD _IO(KVMIO, 0xce)
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define MSEC 1000000ull
/* A thread interrupted stops within microseconds, unless it sits in a
 * wait nothing wakes (disk, FUSE, a vfork): then it is left alone (the
 * tracer thread's exit lets it go, see attach_tracer.c). */
#define HOLD_TIMEOUT_NS (500 * MSEC)
/* An injected call still running after this is interrupted; one that
 * not even that ends is left to the tracer thread to finish. */
#define CALL_TIMEOUT_NS (1000 * MSEC)
#define CANCEL_TIMEOUT_NS (200 * MSEC)
/* A vCPU ioctl still running after this waits for the vCPU's mutex. */
#define KICK_AFTER_NS (5 * MSEC)
#define KICK_GIVE_UP_NS (2000 * MSEC)
#define MAX_KICKED 16

/* Flags in /proc/PID/task/TID/stat of threads the kernel runs inside a
 * process (KVM's kvm-nx-lpage-recovery, io_uring workers): not ours to
 * touch, and their syscall line is a copy of their creator's. */
#define PF_IO_WORKER 0x00000010u
#define PF_USER_WORKER 0x00004000u
#define PF_KTHREAD 0x00200000u

/* Per-VMM state: hold times, and what not to try again. */
struct attach_priv {
	uint64_t hold_max_ns;
	uint64_t hold_total_ns;
	unsigned int holds;
	uint64_t vdso_insn;		/* a `syscall` in its vDSO; 0: unknown */
	int *failed;			/* KVM fds whose ioctl failed for good */
	size_t nfailed;
};

/* One KVM fd of the VMM to get a stats fd for. */
struct job {
	int fd;				/* VM or vCPU fd, in the VMM */
	int index;			/* vCPU index, -1 for a VM */
	pid_t tid;			/* vCPU: seen in KVM_RUN on it; 0: none */
	int stats_fd;			/* ours, or -1 */
	int err;			/* why not, or 0 */
	bool done;
};

struct task {
	pid_t tid;
	char state;			/* R, S, D, ... */
	bool worker;
	bool running;			/* on a CPU when looked at */
	int kvm_run_fd;			/* in KVM_RUN on this fd, or -1 */
	int seccomp;			/* 0 none, 1 strict, 2 filter */
};

/* One attach: every job of one open or refresh. */
struct pass {
	const struct ks_source_args *a;
	struct kvmstats_vmm *v;
	struct attach_priv *p;
	struct job *jobs;
	size_t njobs;
	struct task *tasks;
	size_t ntasks;
	int err;			/* first failure, for the caller */
	char why[200];
	struct ks_leftovers *lo;	/* what the tracer thread finishes */
};

static void priv_free(void *priv)
{
	struct attach_priv *p = priv;

	if (p)
		free(p->failed);
	free(p);
}

int kvmstats_vmm__attach_hold_ns(const struct kvmstats_vmm *v,
				 uint64_t *max_ns, uint64_t *total_ns)
{
	const struct attach_priv *p = v->priv;

	/* Attach opened the VMM, or only its VM stats. */
	if (v->vm_priv_free == priv_free)
		p = v->vm_priv;
	else if (v->priv_free != priv_free)
		p = NULL;
	if (!p) {
		errno = ENOENT;
		return -ENOENT;
	}
	if (max_ns)
		*max_ns = p->hold_max_ns;
	if (total_ns)
		*total_ns = p->hold_total_ns;
	return (int)p->holds;
}

/* First failure wins the caller's message; every one is logged. */
static void note(struct pass *ps, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void note(struct pass *ps, int err, const char *fmt, ...)
{
	char msg[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ks_log(ps->a->ctx, KVMSTATS_LOG_INFO, "pid %d: attach: %s",
	       (int)ps->v->pid, msg);
	if (ps->err)
		return;
	ps->err = err;
	snprintf(ps->why, sizeof(ps->why), "%s", msg);
}

/* ---- what /proc says about the VMM's threads ------------------------ */

static ssize_t read_proc(pid_t pid, pid_t tid, const char *file, char *buf,
			 size_t len)
{
	char path[80];

	if (tid)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", (int)pid,
			 (int)tid, file);
	else
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	return ks_read_small(path, buf, len);
}

/* The number after "Key:" in a status file, or @dflt. */
static long status_field(const char *status, const char *key, long dflt)
{
	const char *p = strstr(status, key);

	return p ? strtol(p + strlen(key), NULL, 10) : dflt;
}

/* State and flags from .../stat; the name before them may hold anything,
 * so fields are counted from its closing parenthesis. */
static int parse_stat(const char *stat, struct task *t)
{
	const char *p = strrchr(stat, ')');
	unsigned long flags;
	char state;

	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", &state,
			 &flags) != 2)
		return -EINVAL;
	t->state = state;
	t->worker = flags & (PF_IO_WORKER | PF_USER_WORKER | PF_KTHREAD);
	return 0;
}

static void parse_syscall(const char *line, struct task *t)
{
	unsigned long a0, a1;
	long nr;

	t->running = !strncmp(line, "running", 7);
	t->kvm_run_fd = -1;
	if (sscanf(line, "%ld 0x%lx 0x%lx", &nr, &a0, &a1) == 3 &&
	    nr == SYS_ioctl && a1 == KVM_RUN && a0 <= INT32_MAX)
		t->kvm_run_fd = (int)a0;
}

static int read_task(pid_t pid, pid_t tid, struct task *t)
{
	char buf[2048];

	memset(t, 0, sizeof(*t));
	t->tid = tid;
	if (read_proc(pid, tid, "stat", buf, sizeof(buf)) < 0 ||
	    parse_stat(buf, t))
		return -ESRCH;
	/* Unreadable without ptrace rights: then nothing is known. */
	if (read_proc(pid, tid, "syscall", buf, sizeof(buf)) < 0)
		buf[0] = 0;
	parse_syscall(buf, t);
	if (read_proc(pid, tid, "status", buf, sizeof(buf)) < 0)
		return -ESRCH;
	t->seccomp = (int)status_field(buf, "\nSeccomp:", 0);
	return 0;
}

/* Every thread of @pid (kernel workers included, marked). */
static int scan_tasks(pid_t pid, struct task **out)
{
	struct task *arr = NULL;
	size_t n = 0, cap = 0;
	char path[64];
	struct dirent *de;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -ESRCH;
	while ((de = readdir(dir))) {
		pid_t tid = (pid_t)atoi(de->d_name);

		if (tid <= 0)
			continue;
		if (n == cap) {
			void *p = realloc(arr, (cap = cap ? cap * 2 : 32) * sizeof(*arr));

			if (!p) {
				closedir(dir);
				free(arr);
				return -ENOMEM;
			}
			arr = p;
		}
		if (!read_task(pid, tid, &arr[n]))
			n++;	/* else it exited in between */
	}
	closedir(dir);
	*out = arr;
	return (int)n;
}

/* ---- safety ---------------------------------------------------------- */

/* Refuse what could hurt the VMM. Reads /proc only: also the probe. */
static int check_vmm(pid_t pid, bool force, char *why, size_t why_sz)
{
	char status[4096];
	struct task *tasks = NULL;
	int n, err = 0;
	long tracer;

	if (read_proc(pid, 0, "status", status, sizeof(status)) < 0) {
		ks_err(why, why_sz, "gone");
		return -ESRCH;
	}
	tracer = status_field(status, "\nTracerPid:", 0);
	if (tracer) {
		ks_err(why, why_sz, "already traced by pid %ld (a debugger?): "
		       "cannot attach", tracer);
		return -EBUSY;
	}
	if (strstr(status, "\nState:\tT")) {
		ks_err(why, why_sz, "stopped by a signal: not attaching");
		return -EBUSY;
	}
	n = scan_tasks(pid, &tasks);
	if (n < 0) {
		ks_err(why, why_sz, "listing its threads: %s", strerror(-n));
		return n;
	}
	for (int i = 0; i < n && !err; i++) {
		if (tasks[i].worker || !tasks[i].seccomp)
			continue;
		if (tasks[i].seccomp == 1) {
			ks_err(why, why_sz, "thread %d runs in strict seccomp "
			       "mode: it cannot make the calls attach needs",
			       (int)tasks[i].tid);
			err = -EPERM;
		} else if (!force) {
			ks_err(why, why_sz, "runs under a seccomp filter (thread "
			       "%d): a call it does not allow would kill it; "
			       "--force attaches anyway", (int)tasks[i].tid);
			err = -EPERM;
		}
	}
	free(tasks);
	return err;
}

/* ---- holding threads ------------------------------------------------- */

static void account(struct pass *ps, pid_t tid, uint64_t held_ns)
{
	struct attach_priv *p = ps->p;

	if (!held_ns)
		return;
	ks_log(ps->a->ctx, KVMSTATS_LOG_DEBUG, "pid %d: attach: thread %d held "
	       "%llu us", (int)ps->v->pid, (int)tid,
	       (unsigned long long)(held_ns / 1000));
	p->holds++;
	p->hold_total_ns += held_ns;
	if (held_ns > p->hold_max_ns)
		p->hold_max_ns = held_ns;
}

static struct job *pending_vcpu(struct pass *ps, int fd)
{
	for (size_t i = 0; i < ps->njobs; i++)
		if (ps->jobs[i].fd == fd && ps->jobs[i].index >= 0 &&
		    !ps->jobs[i].done)
			return &ps->jobs[i];
	return NULL;
}

/* Interrupt the threads that may hold vCPU @fd's mutex (in KVM_RUN on it,
 * or on a CPU, where a busy vCPU always is), except @busy, which waits
 * for it. Returns how many were added to @kicked. */
static size_t kick_holders(struct pass *ps, pid_t busy, int fd,
			   struct ks_thread *kicked, size_t nkicked)
{
	struct task *tasks = NULL;
	int n = scan_tasks(ps->v->pid, &tasks);
	size_t added = 0;

	for (int i = 0; i < n && nkicked + added < MAX_KICKED; i++) {
		struct task *t = &tasks[i];
		struct ks_thread *k = &kicked[nkicked + added];
		bool seen = false;

		for (size_t j = 0; j < nkicked + added; j++)
			seen |= kicked[j].tid == t->tid;
		if (seen || t->worker || t->tid == busy ||
		    (t->kvm_run_fd != fd && !t->running))
			continue;
		if (ks_thread_hold(k, t->tid, HOLD_TIMEOUT_NS)) {
			ks_leave(ps->lo, k);	/* if it did not stop */
			account(ps, k->tid, ks_thread_release(k));
			continue;
		}
		added++;
	}
	free(tasks);
	return added;
}

/* Wait up to @timeout_ns for the call of @x to return, then interrupt
 * it. -ETIMEDOUT when it did not return: the thread is held (the call
 * undone) or, if not even that ended the call, still in it. */
static int call_wait(struct pass *ps, struct ks_thread *x, uint64_t timeout_ns,
		     long *ret)
{
	int err = ks_thread_call_wait(x, timeout_ns, ret);

	if (err != -ETIMEDOUT)
		return err;
	err = ks_thread_call_cancel(x, CANCEL_TIMEOUT_NS, ret);
	if (err == -EINTR || err == -ETIMEDOUT)
		note(ps, -ETIMEDOUT, "thread %d: the injected call did not return "
		     "within %llu ms%s", (int)x->tid,
		     (unsigned long long)((timeout_ns + CANCEL_TIMEOUT_NS) / MSEC),
		     err == -ETIMEDOUT ? ": left to finish in the background" : "");
	return err == -EINTR ? -ETIMEDOUT : err;
}

static int wait_ioctl(struct pass *ps, struct ks_thread *x,
		      const struct job *j, long *ret)
{
	struct ks_thread kicked[MAX_KICKED];
	uint64_t start = ks_now_ns();
	size_t nkicked = 0;
	int err;

	/* A VM's ioctl takes no vCPU mutex, and a vCPU's own thread, just
	 * out of KVM_RUN, holds none: it returns at once. */
	if (j->index < 0 ||
	    ks_thread_was_in(x, SYS_ioctl, (unsigned long)j->fd, KVM_RUN))
		return call_wait(ps, x, CALL_TIMEOUT_NS, ret);
	for (;;) {
		err = ks_thread_call_wait(x, KICK_AFTER_NS, ret);
		/* Kicked threads go at once: the holder has let go of the
		 * mutex by now, or was not among them. */
		for (size_t i = 0; i < nkicked; i++)
			account(ps, kicked[i].tid, ks_thread_release(&kicked[i]));
		if (err != -ETIMEDOUT)
			return err;
		if (ks_now_ns() - start > KICK_GIVE_UP_NS)
			break;
		nkicked = kick_holders(ps, x->tid, j->fd, kicked, 0);
	}
	ks_log(ps->a->ctx, KVMSTATS_LOG_WARN, "pid %d thread %d: "
	       "KVM_GET_STATS_FD on fd %d blocks: interrupting it",
	       (int)ps->v->pid, (int)x->tid, j->fd);
	return call_wait(ps, x, 0, ret);
}

/* Where the held thread can run a system call from. */
static int call_site(struct pass *ps, struct ks_thread *x, uint64_t *insn)
{
	int err;

	if (!ks_thread_syscall_insn(x, insn))
		return 0;
	if (!ps->p->vdso_insn) {
		err = ks_vdso_syscall_insn(ps->v->pid, &ps->p->vdso_insn);
		if (err)
			return err;
	}
	*insn = ps->p->vdso_insn;
	return 0;
}

/* Is the fd we took what job @j asked for? If not, it is dropped (see
 * ks_drop_fd()) and the reason said. */
static int verify(struct pass *ps, struct job *j, long rfd)
{
	char why[200];
	int err = ks_verify_stats_fd(j->stats_fd, j->index, why, sizeof(why));

	if (!err)
		return 0;
	note(ps, err, "fd %ld the VMM returned: %s", rfd, why);
	ks_drop_fd(j->stats_fd);
	j->stats_fd = -1;
	return err;
}

/* Run job @j in held thread @x: the ioctl, pidfd_getfd, the close. The
 * job's own outcome goes to j->err; a negative return means the thread
 * can run no more calls (it is restored when released). */
static int run_job(struct pass *ps, struct ks_thread *x, struct job *j)
{
	long rfd, rc = 0;
	uint64_t insn;
	int err, getfd_err = 0;

	j->done = true;
	err = call_site(ps, x, &insn);
	if (!err)
		err = ks_thread_call_start(x, insn, SYS_ioctl, (unsigned long)j->fd,
					   KVM_GET_STATS_FD, 0);
	if (!err)
		err = wait_ioctl(ps, x, j, &rfd);
	if (err) {
		j->err = err;
		return err;
	}
	if (rfd < 0) {
		j->err = (int)rfd;	/* the kernel's answer */
		return 0;
	}
	/* Another thread of the VMM may have put another file at that
	 * number since (a memfd forging stats, a FUSE file that blocks):
	 * what is there is checked before it is taken, and after. */
	if (!ks_remote_is_stats(ps->v->pid, (int)rfd, j->index)) {
		note(ps, -EBADF, "fd %ld the VMM returned is no longer a KVM "
		     "stats fd: not taken", rfd);
		j->err = -EBADF;
		return 0;
	}
	j->stats_fd = (int)syscall(SYS_pidfd_getfd, ps->v->pidfd, (int)rfd, 0);
	if (j->stats_fd < 0)
		getfd_err = -errno;
	else
		getfd_err = verify(ps, j, rfd);
	/* The VMM's copy goes whatever happened to ours. */
	err = ks_thread_call_start(x, insn, SYS_close, (unsigned long)rfd, 0, 0);
	if (!err)
		err = call_wait(ps, x, CALL_TIMEOUT_NS, &rc);
	if (err || rc)
		ks_log(ps->a->ctx, KVMSTATS_LOG_WARN,
		       "pid %d thread %d: closing fd %ld it opened for us "
		       "failed: %s", (int)ps->v->pid, (int)x->tid, rfd,
		       strerror(err ? -err : (int)-rc));
	j->err = getfd_err;
	return err;
}

/* Which jobs a held thread runs: the vCPU it was in KVM_RUN on, the
 * vCPUs it was seen running, and, for the helper, everything left. */
static bool wants(const struct ks_thread *x, const struct job *j, bool helper)
{
	if (j->done)
		return false;
	if (j->index >= 0 && ks_thread_was_in(x, SYS_ioctl, (unsigned long)j->fd,
					      KVM_RUN))
		return true;
	if (j->tid)
		return j->tid == x->tid;
	return helper;
}

/* Jobs for the helper: VMs, and vCPUs no thread was seen running. A vCPU
 * whose thread could not be held is left alone: its ioctl would wait
 * for that thread's KVM_RUN to end. */
static size_t helper_jobs(const struct pass *ps)
{
	size_t n = 0;

	for (size_t i = 0; i < ps->njobs; i++)
		n += !ps->jobs[i].done && !ps->jobs[i].tid;
	return n;
}

static void visit(struct pass *ps, pid_t tid, bool helper)
{
	struct ks_thread x;
	int err = ks_thread_hold(&x, tid, HOLD_TIMEOUT_NS);

	if (err == -ETIMEDOUT) {
		note(ps, err, "thread %d did not stop within %llu ms (a wait "
		     "nothing wakes): left alone", (int)tid,
		     (unsigned long long)(HOLD_TIMEOUT_NS / MSEC));
		ks_leave(ps->lo, &x);
		return;
	}
	if (err) {
		note(ps, err, "thread %d: %s%s", (int)tid, strerror(-err),
		     err == -EPERM ? " (ptrace needs CAP_SYS_PTRACE)" : "");
		account(ps, tid, ks_thread_release(&x));
		return;
	}
	/* VMs first: a helper that fails on a vCPU has done them. */
	for (int kind = 0; kind < 2 && !err; kind++) {
		for (size_t i = 0; i < ps->njobs && !err; i++) {
			struct job *j = &ps->jobs[i];

			if ((j->index < 0) != (kind == 0) || !wants(&x, j, helper))
				continue;
			err = run_job(ps, &x, j);
		}
	}
	if (err)
		note(ps, err, "thread %d: injected call failed: %s", (int)tid,
		     strerror(-err));
	/* Still in a call of ours: the tracer thread finishes it. */
	if (x.state == KS_THREAD_IN_CALL) {
		account(ps, tid, ks_now_ns() - x.since_ns);
		ks_leave(ps->lo, &x);
	}
	account(ps, tid, ks_thread_release(&x));
}

static bool vcpus_left(const struct pass *ps)
{
	for (size_t i = 0; i < ps->njobs; i++)
		if (!ps->jobs[i].done && ps->jobs[i].index >= 0)
			return true;
	return false;
}

/* The helper: the main thread if it is an idle one, else another idle
 * thread not in KVM_RUN, else any we may touch. */
static pid_t pick_helper(const struct pass *ps)
{
	pid_t best = 0;
	int best_score = -1;

	for (size_t i = 0; i < ps->ntasks; i++) {
		const struct task *t = &ps->tasks[i];
		int score;

		if (t->worker || t->kvm_run_fd >= 0 || !strchr("RS", t->state))
			continue;
		score = (t->state == 'S') * 2 + (t->tid == ps->v->pid);
		if (score > best_score) {
			best = t->tid;
			best_score = score;
		}
	}
	return best;
}

static void run_pass(struct pass *ps)
{
	pid_t helper = pick_helper(ps);

	/* vCPUs in KVM_RUN: in their own thread. */
	for (size_t i = 0; i < ps->njobs; i++)
		if (!ps->jobs[i].done && ps->jobs[i].tid)
			visit(ps, ps->jobs[i].tid, false);
	/* Busy vCPUs show as running: a hold tells whose KVM_RUN it was
	 * (the helper's hold will tell for itself). */
	for (size_t i = 0; i < ps->ntasks && vcpus_left(ps); i++)
		if (ps->tasks[i].running && !ps->tasks[i].worker &&
		    ps->tasks[i].tid != helper)
			visit(ps, ps->tasks[i].tid, false);
	if (!helper_jobs(ps))
		return;
	if (helper)
		visit(ps, helper, true);
	else
		note(ps, -ESRCH, "no thread it runs could make the calls");
}

/* The pass, in the tracer thread (attach_tracer.c). */
static void traced_pass(void *arg, struct ks_leftovers *lo)
{
	struct pass *ps = arg;

	ps->lo = lo;
	run_pass(ps);
	ps->lo = NULL;
}

/* ---- jobs and results ------------------------------------------------ */

static bool failed_before(const struct attach_priv *p, int fd)
{
	for (size_t i = 0; i < p->nfailed; i++)
		if (p->failed[i] == fd)
			return true;
	return false;
}


static bool have_vcpu(const struct kvmstats_vmm *v, int fd)
{
	for (size_t i = 0; i < v->nvms; i++)
		for (size_t j = 0; j < v->vms[i]->nvcpus; j++)
			if (v->vms[i]->vcpus[j].remote_fd == fd)
				return true;
	return false;
}

/* The VM fds without a reader and the vCPU fds not read yet. */
static int make_jobs(struct pass *ps)
{
	struct kvmstats_proc_fd *fds = NULL;
	int n = kvmstats_proc__kvm_fds(ps->v->pid, &fds);

	if (n < 0)
		return n;
	ps->jobs = calloc((size_t)n + 1, sizeof(*ps->jobs));
	if (!ps->jobs) {
		free(fds);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		const struct kvmstats_proc_fd *f = &fds[i];
		struct kvmstats_vm *vm = ks_vmm_vm_of_fd(ps->v, f->fd);

		if (failed_before(ps->p, f->fd))
			continue;
		if (f->kind == KVMSTATS_FD_VM && vm && vm->r)
			continue;
		if (f->kind == KVMSTATS_FD_VCPU &&
		    (ps->a->vm_only || have_vcpu(ps->v, f->fd)))
			continue;
		if (f->kind != KVMSTATS_FD_VM && f->kind != KVMSTATS_FD_VCPU)
			continue;
		ps->jobs[ps->njobs++] = (struct job){
			.fd = f->fd,
			.index = f->kind == KVMSTATS_FD_VCPU ? f->index : -1,
			.stats_fd = -1,
		};
	}
	free(fds);
	return 0;
}

/* vCPU jobs learn the thread that sits in KVM_RUN on their fd. */
static void match_threads(struct pass *ps)
{
	for (size_t i = 0; i < ps->ntasks; i++) {
		const struct task *t = &ps->tasks[i];
		struct job *j;

		if (t->worker || t->kvm_run_fd < 0)
			continue;
		j = pending_vcpu(ps, t->kvm_run_fd);
		if (j)
			j->tid = t->tid;
	}
}

static struct kvmstats_reader *open_reader(struct pass *ps, struct job *j)
{
	struct kvmstats_reader *r;
	char why[160] = "";

	r = kvmstats_reader__open_fd(ps->a->ctx, j->stats_fd,
		&(struct kvmstats_reader_opts){
			.sz = sizeof(struct kvmstats_reader_opts),
			.flags = KVMSTATS_READER_OWN_FD,
			.errbuf = why, .errbuf_sz = sizeof(why) });
	if (!r) {
		note(ps, -errno, "fd %d: %s", j->fd, why);
		close(j->stats_fd);
	}
	j->stats_fd = -1;
	return r;
}

static int add_vm_result(struct pass *ps, struct job *j)
{
	struct kvmstats_vm *vm = ks_vmm_vm_of_fd(ps->v, j->fd);
	struct kvmstats_reader *r = j->stats_fd >= 0 ? open_reader(ps, j) : NULL;

	if (vm) {
		vm->r = r;
		return r ? 1 : 0;
	}
	/* Kept even without a reader: its vCPUs are grouped under it. */
	vm = kvmstats_vmm__add_vm(ps->v, r);
	if (!vm) {
		kvmstats_reader__close(r);
		return -ENOMEM;
	}
	vm->vm_fd = j->fd;
	return r ? 1 : 0;
}

static int add_vcpu_result(struct pass *ps, struct job *j)
{
	struct kvmstats_vm *vm = ks_vmm_owner_vm(ps->v, j->fd);
	struct kvmstats_reader *r = open_reader(ps, j);

	if (!r)
		return 0;
	if (!vm)
		vm = kvmstats_vmm__add_vm(ps->v, NULL);
	if (!vm || ks_vm_add_vcpu(vm, j->index, j->fd, r)) {
		kvmstats_reader__close(r);
		return -ENOMEM;
	}
	return 1;
}

static void remember_failure(struct pass *ps, const struct job *j)
{
	struct attach_priv *p = ps->p;
	void *n;

	if (j->index < 0)
		note(ps, j->err, "KVM_GET_STATS_FD on VM fd %d: %s", j->fd,
		     strerror(-j->err));
	else
		note(ps, j->err, "KVM_GET_STATS_FD on vCPU %d (fd %d): %s",
		     j->index, j->fd, strerror(-j->err));
	/* Refused by the kernel: asking again would hold threads again. */
	if (!j->done || (j->err != -ENOTTY && j->err != -EINVAL))
		return;
	n = realloc(p->failed, (p->nfailed + 1) * sizeof(*p->failed));
	if (!n)
		return;
	p->failed = n;
	p->failed[p->nfailed++] = j->fd;
}

/* Readers for what the pass got; returns how many or -ENOMEM. */
static int add_results(struct pass *ps)
{
	int added = 0, r = 0;

	for (int kind = 0; kind < 2; kind++) {
		for (size_t i = 0; i < ps->njobs && r >= 0; i++) {
			struct job *j = &ps->jobs[i];

			if ((j->index < 0) != (kind == 0))
				continue;
			if (!j->done && !j->err)
				j->err = j->tid ? -EBUSY : ps->err ? ps->err : -EAGAIN;
			if (j->stats_fd < 0)
				remember_failure(ps, j);
			if (j->index < 0)
				r = add_vm_result(ps, j);
			else if (j->stats_fd >= 0)
				r = add_vcpu_result(ps, j);
			added += r > 0;
		}
	}
	for (size_t i = 0; i < ps->njobs; i++)
		if (ps->jobs[i].stats_fd >= 0)
			close(ps->jobs[i].stats_fd);
	return r < 0 ? r : added;
}

/* ---- the source ------------------------------------------------------- */

static int attach_pass(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	struct pass ps = { .a = a, .v = v,
			   .p = a->vm_only ? v->vm_priv : v->priv };
	sigset_t all, old;
	int err, added;

	err = make_jobs(&ps);
	if (err || !ps.njobs)
		goto out;
	err = check_vmm(v->pid, a->opts->flags & KVMSTATS_HOST_FORCE, ps.why,
			sizeof(ps.why));
	if (err) {
		ps.err = err;
		goto out;
	}
	err = scan_tasks(v->pid, &ps.tasks);
	if (err < 0)
		goto out;
	ps.ntasks = (size_t)err;
	match_threads(&ps);
	/* Not even Ctrl-C may leave a thread in the middle of our calls
	 * (the tracer thread inherits the mask). */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	ks_run_traced(traced_pass, &ps);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	added = add_results(&ps);
	err = added;
	if (added == 0)
		err = ps.err ? ps.err : -EIO;
out:
	if (err < 0 && !ps.why[0])
		snprintf(ps.why, sizeof(ps.why), "%s", strerror(-err));
	if (err < 0)
		ks_err(a->errbuf, a->errbuf_sz, "attach: %s", ps.why);
	free(ps.jobs);
	free(ps.tasks);
	return err;
}

static bool attach_probe(const struct ks_source_args *a, pid_t pid)
{
	struct kvmstats_proc_fd *fds;
	bool vm = false;
	int n = kvmstats_proc__kvm_fds(pid, &fds);

	for (int i = 0; i < n; i++)
		vm |= fds[i].kind == KVMSTATS_FD_VM;
	if (n >= 0)
		free(fds);
	return vm && !check_vmm(pid, a->opts->flags & KVMSTATS_HOST_FORCE,
				NULL, 0);
}

/* Opens the VMM, or (a->vm_only) only the VM stats of the VMs it holds
 * that have no reader yet: then no vCPU is touched, and the VM's ioctl
 * runs in a helper thread (the main thread, sitting in ppoll, if it can). */
static int attach_open(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	struct attach_priv *p;
	int err;

#if !defined(__x86_64__)	/* the injection (inject.c) is x86_64's */
	ks_err(a->errbuf, a->errbuf_sz, "attach: attach is only available on x86_64");
	return -EOPNOTSUPP;
#endif
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	ks_vmm_set_priv(v, a->vm_only, p, priv_free);
	err = attach_pass(a, v);
	if (err == 0) {
		ks_err(a->errbuf, a->errbuf_sz, "attach: holds no KVM %s fd",
		       a->vm_only ? "VM without a reader" : "VM or vCPU");
		err = -ENOENT;
	}
	return err < 0 ? err : 0;
}

static int attach_refresh(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	if (v->priv_free != priv_free)
		return -EINVAL;
	return attach_pass(a, v);
}

const struct ks_source ks_source_attach = {
	.name = "attach",
	.probe = attach_probe,
	.open = attach_open,
	.refresh = attach_refresh,
	.reads_as = "fd",
	.vm_level = true,
};
