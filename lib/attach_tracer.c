// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The attach source's safety net (see inject.h): a thread of our own that
 * holds the VMM's threads, so that none is ever left stopped.
 *
 * A seized thread can be let go (PTRACE_DETACH) only once it has stopped,
 * and one in a wait nothing wakes (disk, FUSE, a vfork) may not stop for
 * as long as it likes. But when the thread that seized it exits, the
 * kernel detaches it and drops the pending stop: it never stops for us.
 * So every pass runs in a tracer thread of its own: threads that did not
 * stop in time are left seized, every other one is let go, and the
 * tracer exits. One that is still inside a call of ours cannot be let go
 * that way (it would go on with our registers); the tracer keeps waiting
 * for it in the background, after the pass is over for the caller, then
 * closes any fd that call made and lets it go as usual.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "inject.h"
#include "internal.h"

/* The background wait for a stuck call: 1 ms, doubling to 100 ms. */
#define FINISH_POLL_MAX_NS 100000000ull

struct tracer {
	void (*fn)(void *arg, struct ks_leftovers *lo);
	void *arg;
	struct ks_leftovers *lo;
	pthread_mutex_t lock;
	pthread_cond_t done_cond;
	bool done;
	bool background;	/* the tracer goes on after done */
};

void ks_leave(struct ks_leftovers *lo, struct ks_thread *t)
{
	if (t->state == KS_THREAD_FREE)
		return;
	if (lo->n == KS_MAX_LEFT) {
		/* No room to wait later: wait now. */
		ks_thread_release(t);
		return;
	}
	lo->t[lo->n++] = *t;
	t->state = KS_THREAD_FREE;
}

/* Does anything keep the tracer alive after the pass? */
static bool needs_background(const struct ks_leftovers *lo)
{
	for (size_t i = 0; i < lo->n; i++)
		if (lo->t[i].state == KS_THREAD_IN_CALL)
			return true;
	return false;
}

/* A stuck call returned at last: close the fd a KVM_GET_STATS_FD made in
 * the VMM, then let the thread go. */
static void finish_call(struct ks_thread *t, long ret)
{
	long rc;

	if (t->call_nr == SYS_ioctl && ret >= 0)
		ks_thread_call(t, t->call_insn, SYS_close, (unsigned long)ret, 0, 0, &rc);
	ks_thread_release(t);
}

/* Until no thread is in a call of ours any more; threads that never
 * stopped are let go by the tracer's exit. */
static void finish_leftovers(struct ks_leftovers *lo)
{
	uint64_t pause = 1000000;

	while (needs_background(lo)) {
		struct timespec ts = { 0, (long)pause };

		for (size_t i = 0; i < lo->n; i++) {
			struct ks_thread *t = &lo->t[i];
			long ret;

			if (t->state == KS_THREAD_STOPPING)
				ks_thread_let_go(t, 0);
			if (t->state != KS_THREAD_IN_CALL)
				continue;
			if (!ks_thread_call_wait(t, 0, &ret))
				finish_call(t, ret);
			else if (t->state != KS_THREAD_IN_CALL)
				ks_thread_release(t);
		}
		nanosleep(&ts, NULL);
		if (pause < FINISH_POLL_MAX_NS)
			pause *= 2;
	}
}

static void *tracer_main(void *arg)
{
	struct tracer *tr = arg;
	struct ks_leftovers *lo = tr->lo;
	bool background;

	tr->fn(tr->arg, lo);
	background = needs_background(lo);
	pthread_mutex_lock(&tr->lock);
	tr->background = background;
	tr->done = true;
	pthread_cond_signal(&tr->done_cond);
	pthread_mutex_unlock(&tr->lock);
	/* From here tr is the caller's: only lo is ours. */
	if (background)
		finish_leftovers(lo);
	free(lo);
	return NULL;
}

void ks_run_traced(void (*fn)(void *arg, struct ks_leftovers *lo), void *arg)
{
	struct tracer tr = { .fn = fn, .arg = arg };
	pthread_t thread;

	tr.lo = calloc(1, sizeof(*tr.lo));
	if (!tr.lo) {
		struct ks_leftovers lo = { 0 };

		/* No tracer of its own: everything is waited for here. */
		fn(arg, &lo);
		for (size_t i = 0; i < lo.n; i++)
			ks_thread_release(&lo.t[i]);
		return;
	}
	pthread_mutex_init(&tr.lock, NULL);
	pthread_cond_init(&tr.done_cond, NULL);
	if (pthread_create(&thread, NULL, tracer_main, &tr)) {
		tracer_main(&tr);
	} else {
		pthread_mutex_lock(&tr.lock);
		while (!tr.done)
			pthread_cond_wait(&tr.done_cond, &tr.lock);
		pthread_mutex_unlock(&tr.lock);
		if (tr.background)
			pthread_detach(thread);
		else
			pthread_join(thread, NULL);
	}
	pthread_cond_destroy(&tr.done_cond);
	pthread_mutex_destroy(&tr.lock);
}
