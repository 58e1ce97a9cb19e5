// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * New VMMs are opened on worker threads: a VMM whose QMP monitor greets
 * and never answers costs the --timeout of each exchange, and while the
 * thread that samples or serves the host waited for it, every VM's
 * samples (record, top) or every scrape (serve) waited too.
 *
 * The host's thread asks the library which VMMs to open
 * (kvmstats_host__pending(), at most MAX_CLAIMS in flight: the work a
 * host's VMMs can cause is bounded however many processes they fork),
 * queues them here, and later inserts what the workers opened
 * (kvmstats_host__insert()); the workers only call
 * kvmstats_host__prepare(), which reads nothing the host's thread
 * changes. So the host itself stays a one-thread object.
 *
 * The scan of /proc for VM fds (every fd of every process: 6-30 ms on a
 * loaded 2-core machine, more with more processes) runs on a thread of
 * its own too, when discover_scan() asks; the host's thread claims among
 * what it found in its next discover_collect(). And the workers leave a
 * real-time class the host's thread runs in: an open (connecting,
 * parsing a schema) must not hold a CPU from a sample that is due.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "discover.h"

/* Opens in flight (queued, being opened, or opened and not inserted) per
 * worker: a worker finds the next one waiting when it is done. */
#define CLAIMS_PER_WORKER 2

struct opened {
	pid_t pid;
	struct kvmstats_vmm *v;		/* NULL: failed, for @why */
	uint64_t took_ns;
	char why[256];
};

struct discover {
	struct kvmstats_host *h;
	pthread_mutex_t mu;
	pthread_cond_t work, idle;
	pid_t *queue;			/* pids to open, in order */
	size_t nqueue, head;
	struct opened *done;		/* opened, for the host's thread */
	size_t ndone;
	unsigned int busy;		/* workers inside a prepare */
	bool stop;
	size_t max_claims;
	pthread_t *threads;
	unsigned int nthreads;

	pthread_t scanner;
	bool has_scanner;
	pthread_cond_t scan_cv;
	bool scan_wanted;		/* asked by discover_scan() */
	bool scanning;			/* the scanner is at it */
	bool scanned;			/* a scan for discover_collect() */
	pid_t *cand;			/* what it found */
	int ncand;			/* or a negative errno */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Take the next pid to open; false when stopping. Under d->mu. */
static bool next_pid(struct discover *d, pid_t *pid)
{
	while (!d->stop && d->head == d->nqueue)
		pthread_cond_wait(&d->work, &d->mu);
	if (d->stop)
		return false;
	*pid = d->queue[d->head++];
	d->busy++;
	return true;
}

/* Out of a real-time class the host's thread may run in (`chrt -f
 * kvmstats record`): a real-time worker would hold a CPU from the sample
 * until it blocks. Not a higher nice: on a loaded host that starved the
 * opens (a good monitor waited over 12 s). Best effort. */
static void lower_priority(void)
{
	struct sched_param sp = { 0 };

	/* Only when real-time: sched_setscheduler is not in the units'
	 * system call filter (@resources), sched_getscheduler is. */
	if (sched_getscheduler(0) == SCHED_OTHER)
		return;
	pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
}

static void *worker(void *arg)
{
	struct discover *d = arg;
	struct opened o;

	lower_priority();
	pthread_mutex_lock(&d->mu);
	while (next_pid(d, &o.pid)) {
		uint64_t t0 = mono_ns();

		pthread_mutex_unlock(&d->mu);
		o.why[0] = 0;
		o.v = kvmstats_host__prepare(d->h, o.pid, o.why, sizeof(o.why));
		o.took_ns = mono_ns() - t0;
		pthread_mutex_lock(&d->mu);
		/* Room for every claim was made when it was queued. */
		d->done[d->ndone++] = o;
		d->busy--;
		pthread_cond_broadcast(&d->idle);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

/* The scanner: a scan of /proc whenever discover_scan() asks. */
static void *scanner(void *arg)
{
	struct discover *d = arg;

	lower_priority();
	pthread_mutex_lock(&d->mu);
	for (;;) {
		pid_t *cand = NULL;
		int n;

		while (!d->stop && !d->scan_wanted)
			pthread_cond_wait(&d->scan_cv, &d->mu);
		if (d->stop)
			break;
		d->scan_wanted = false;
		d->scanning = true;
		pthread_mutex_unlock(&d->mu);
		n = kvmstats_proc__vmm_pids(&cand);
		pthread_mutex_lock(&d->mu);
		d->scanning = false;
		free(d->cand);
		d->cand = n < 0 ? NULL : cand;
		d->ncand = n;
		d->scanned = true;
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

static int start_workers(struct discover *d, unsigned int threads)
{
	sigset_t all, old;
	int err = 0;

	d->threads = calloc(threads, sizeof(*d->threads));
	if (!d->threads)
		return -ENOMEM;
	/* The host's thread takes the signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (; d->nthreads < threads; d->nthreads++) {
		err = -pthread_create(&d->threads[d->nthreads], NULL, worker, d);
		if (err)
			break;
	}
	/* Without it, discover_scan() scans on the host's thread. */
	d->has_scanner = d->nthreads &&
			 !pthread_create(&d->scanner, NULL, scanner, d);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return d->nthreads ? 0 : err;
}

/* The lock the host's thread shares with the workers inherits priority:
 * under `chrt -f`, a worker preempted while holding it on a host others
 * load would hold the sampling thread for as long as the scheduler keeps
 * the worker off a CPU (intervals of 0.8 and 2.2 s were seen). */
static void init_lock(pthread_mutex_t *mu)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	if (pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT) ||
	    pthread_mutex_init(mu, &a))
		pthread_mutex_init(mu, NULL);
	pthread_mutexattr_destroy(&a);
}

struct discover *discover_new(struct kvmstats_host *h, unsigned int threads)
{
	struct discover *d = calloc(1, sizeof(*d));
	int err;

	if (!d)
		return NULL;
	d->h = h;
	d->max_claims = (size_t)threads * CLAIMS_PER_WORKER;
	init_lock(&d->mu);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->idle, NULL);
	pthread_cond_init(&d->scan_cv, NULL);
	err = -ENOMEM;
	d->queue = calloc(d->max_claims, sizeof(*d->queue));
	d->done = calloc(d->max_claims, sizeof(*d->done));
	if (d->queue && d->done)
		err = start_workers(d, threads ? threads : 1);
	if (err) {
		discover_free(d);
		errno = -err;
		return NULL;
	}
	return d;
}

void discover_free(struct discover *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->stop = true;
	pthread_cond_broadcast(&d->work);
	pthread_cond_broadcast(&d->scan_cv);
	pthread_mutex_unlock(&d->mu);
	for (unsigned int i = 0; i < d->nthreads; i++)
		pthread_join(d->threads[i], NULL);
	if (d->has_scanner)
		pthread_join(d->scanner, NULL);
	/* Given back, so that the host forgets the claims. */
	for (size_t i = 0; i < d->ndone; i++) {
		kvmstats_vmm__close(d->done[i].v);
		kvmstats_host__insert(d->h, d->done[i].pid, NULL, "stopped", 0);
	}
	for (size_t i = d->head; i < d->nqueue; i++)
		kvmstats_host__insert(d->h, d->queue[i], NULL, "stopped", 0);
	pthread_cond_destroy(&d->work);
	pthread_cond_destroy(&d->idle);
	pthread_cond_destroy(&d->scan_cv);
	pthread_mutex_destroy(&d->mu);
	free(d->cand);
	free(d->threads);
	free(d->queue);
	free(d->done);
	free(d);
}

/* Claims in flight: queued, being opened, opened and not inserted. */
static size_t in_flight(const struct discover *d)
{
	return d->nqueue - d->head + d->busy + d->ndone;
}

/* Queue the @n pids the host claimed (kvmstats_host__pending*()), and
 * free them. Returns @n or a negative errno. */
static int queue_claims(struct discover *d, pid_t *pids, int n)
{
	int i;

	if (n <= 0)
		return n;
	pthread_mutex_lock(&d->mu);
	memmove(d->queue, d->queue + d->head,
		(d->nqueue - d->head) * sizeof(*d->queue));
	d->nqueue -= d->head;
	d->head = 0;
	/* The library keeps the claims within max_claims, and every claim
	 * in flight is one of ours: they all fit. */
	for (i = 0; i < n && in_flight(d) < d->max_claims; i++)
		d->queue[d->nqueue++] = pids[i];
	pthread_cond_broadcast(&d->work);
	pthread_mutex_unlock(&d->mu);
	for (; i < n; i++)
		kvmstats_host__insert(d->h, pids[i], NULL, "no room", 0);
	free(pids);
	return n;
}

int discover_refresh(struct discover *d)
{
	int dropped = kvmstats_host__update(d->h), n;
	pid_t *pids;

	n = kvmstats_host__pending(d->h, d->max_claims, &pids);
	n = queue_claims(d, pids, n);
	return n < 0 ? n : dropped;
}

int discover_scan(struct discover *d)
{
	int dropped;

	if (!d->has_scanner)
		return discover_refresh(d);
	dropped = kvmstats_host__update(d->h);
	pthread_mutex_lock(&d->mu);
	d->scan_wanted = true;
	pthread_cond_signal(&d->scan_cv);
	pthread_mutex_unlock(&d->mu);
	return dropped;
}

/* Claim among what the scanner found, if it found anything since. */
static int claim_scanned(struct discover *d)
{
	pid_t *cand, *pids = NULL;
	int n;

	pthread_mutex_lock(&d->mu);
	if (!d->scanned) {
		pthread_mutex_unlock(&d->mu);
		return 0;
	}
	d->scanned = false;
	cand = d->cand;
	n = d->ncand;
	d->cand = NULL;
	pthread_mutex_unlock(&d->mu);
	if (n >= 0)
		n = kvmstats_host__pending_among(d->h, cand, (size_t)n,
						 d->max_claims, &pids);
	free(cand);
	return queue_claims(d, pids, n);
}

int discover_collect(struct discover *d)
{
	struct opened done[64];
	size_t n;
	int added = 0;

	pthread_mutex_lock(&d->mu);
	n = d->ndone < 64 ? d->ndone : 64;
	memcpy(done, d->done, n * sizeof(*done));
	memmove(d->done, d->done + n, (d->ndone - n) * sizeof(*done));
	d->ndone -= n;
	pthread_mutex_unlock(&d->mu);
	for (size_t i = 0; i < n; i++)
		added += kvmstats_host__insert(d->h, done[i].pid, done[i].v,
					       done[i].why, done[i].took_ns) > 0;
	/* After the inserts, which make room for claims. A failed scan is
	 * tried again at the next discover_scan(). */
	claim_scanned(d);
	return added;
}

bool discover_busy(struct discover *d)
{
	bool busy;

	pthread_mutex_lock(&d->mu);
	busy = in_flight(d) > 0 || d->scan_wanted || d->scanning ||
	       d->scanned;
	pthread_mutex_unlock(&d->mu);
	return busy;
}

bool discover_wait(struct discover *d, uint64_t timeout_ns)
{
	uint64_t end = mono_ns() + timeout_ns;
	struct timespec ts;
	bool settled;

	/* pthread_cond_timedwait() counts in CLOCK_REALTIME. */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(timeout_ns / 1000000000ull);
	ts.tv_nsec += (long)(timeout_ns % 1000000000ull);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&d->mu);
	while (d->head < d->nqueue || d->busy) {
		if (mono_ns() >= end ||
		    pthread_cond_timedwait(&d->idle, &d->mu, &ts) == ETIMEDOUT)
			break;
	}
	settled = d->head == d->nqueue && !d->busy;
	pthread_mutex_unlock(&d->mu);
	return settled;
}
