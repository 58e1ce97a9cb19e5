// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Parallel sweeps: every reader of a host read once, by a few threads.
 *
 * A stats fd read is a short pure-CPU trip into the kernel (about 1.3 us
 * here), and readers share nothing, so a host with thousands of them
 * sweeps faster when its readers are spread over one thread per core.
 * The threads are created at the first parallel sweep and kept with the
 * host; each sweep hands out chunks of a flat list of readers through one
 * atomic counter, so a thread that the scheduler delays takes fewer
 * chunks instead of holding the others up. Nothing is allocated per sweep:
 * the flat list only grows when the host gained readers.
 *
 * The list is ordered by source, and each thread adds up the time it
 * spent on each source's readers, which kvmstats_host__sweep_ns() reports.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Readers per chunk: big enough that the atomic counter is not the cost,
 * small enough that two threads end together. */
#define CHUNK 256
/* How many readers ahead each link of a reader's chain is prefetched. */
#define PF_READER 6
#define PF_SAMPLE 4
#define PF_DATA 2
/* Below this many readers one thread is quicker than waking others. */
#define MIN_PARALLEL 256
#define MAX_THREADS 256

struct ks_sweep_item {
	struct kvmstats_reader *r;
	unsigned int src;
};

/* What one thread did in a sweep; a cache line of its own each. */
struct ks_sweep_part {
	struct ks_sweep_pool *pool;
	uint64_t ns[KS_SWEEP_NSRC];
	int failed;
} __attribute__((aligned(64)));

struct ks_sweep_pool {
	unsigned int asked;		/* threads the caller asked for */
	unsigned int nthreads;		/* including the caller's */
	unsigned int started;		/* worker threads running */
	pthread_t *tids;
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	uint64_t gen;			/* sweeps started */
	unsigned int busy;		/* workers still in this sweep */
	bool stop;
	struct ks_sweep_item *items;
	size_t nitems, cap;
	atomic_size_t next;		/* first item not handed out */
	uint64_t time_ns;
	struct ks_sweep_part *parts;	/* [0] is the caller's */
	uint64_t ns[KS_SWEEP_NSRC];	/* last sweep, summed over threads */
};

/* The sources' names, in the order the flat list is sorted by. */
static const char *const src_names[KS_SWEEP_NSRC - 1] = {
	"fd", "attach", "qmp", "libvirt", "debugfs",
};

static unsigned int src_index(const char *name)
{
	for (unsigned int i = 0; i < ARRAY_SIZE(src_names); i++)
		if (name && !strcmp(src_names[i], name))
			return i;
	return KS_SWEEP_NSRC - 1;	/* a source this file does not know */
}

/* Sweep items [lo, hi), adding the time spent to each item's source. */
static void sweep_range(struct ks_sweep_pool *p, struct ks_sweep_part *part,
			size_t lo, size_t hi)
{
	unsigned int src = p->items[lo].src;
	uint64_t t = ks_now_ns();

	for (size_t i = lo; i < hi && i < lo + PF_READER; i++)
		ks_reader_prefetch(p->items[i].r, 0);
	for (size_t i = lo; i < hi; i++) {
		/* A chain of cold lines per reader: start on the next
		 * ones while the kernel copies this one. */
		if (i + PF_READER < hi)
			ks_reader_prefetch(p->items[i + PF_READER].r, 0);
		if (i + PF_SAMPLE < hi)
			ks_reader_prefetch(p->items[i + PF_SAMPLE].r, 1);
		if (i + PF_DATA < hi)
			ks_reader_prefetch(p->items[i + PF_DATA].r, 2);
		if (p->items[i].src != src) {
			uint64_t now = ks_now_ns();

			part->ns[src] += now - t;
			t = now;
			src = p->items[i].src;
		}
		if (kvmstats_reader__sweep(p->items[i].r, p->time_ns))
			part->failed++;
	}
	part->ns[src] += ks_now_ns() - t;
}

/* Take chunks from the shared counter until none is left. */
static void sweep_chunks(struct ks_sweep_pool *p, struct ks_sweep_part *part)
{
	for (;;) {
		size_t lo = atomic_fetch_add(&p->next, CHUNK);

		if (lo >= p->nitems)
			return;
		sweep_range(p, part, lo, lo + CHUNK < p->nitems ? lo + CHUNK : p->nitems);
	}
}

static void *worker(void *arg)
{
	struct ks_sweep_part *part = arg;
	struct ks_sweep_pool *p = part->pool;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->lock);
		sweep_chunks(p, part);
		pthread_mutex_lock(&p->lock);
		if (--p->busy == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

void ks_sweep_pool_free(struct ks_sweep_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	for (unsigned int i = 0; i < p->started; i++)
		pthread_join(p->tids[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->tids);
	free(p->parts);
	free(p->items);
	free(p);
}

/* Start the workers with every signal blocked: the application's signal
 * handling must never land on a thread it does not know about. */
static void start_workers(struct ks_sweep_pool *p)
{
	sigset_t all, old;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (unsigned int i = 1; i < p->nthreads; i++) {
		if (pthread_create(&p->tids[p->started], NULL, worker, &p->parts[i]))
			break;
		p->started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	p->nthreads = p->started + 1;
}

static struct ks_sweep_pool *pool_new(unsigned int threads)
{
	struct ks_sweep_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->asked = threads;
	p->nthreads = threads;
	p->tids = calloc(threads, sizeof(*p->tids));
	p->parts = aligned_alloc(64, threads * sizeof(*p->parts));
	if (!p->tids || !p->parts ||
	    pthread_mutex_init(&p->lock, NULL)) {
		free(p->tids);
		free(p->parts);
		free(p);
		return NULL;
	}
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	for (unsigned int i = 0; i < threads; i++)
		p->parts[i] = (struct ks_sweep_part){ .pool = p };
	start_workers(p);
	return p;
}

static int grow(struct ks_sweep_pool *p, size_t n)
{
	void *q;

	if (n <= p->cap)
		return 0;
	q = realloc(p->items, n * sizeof(*p->items));
	if (!q)
		return -ENOMEM;
	p->items = q;
	p->cap = n;
	return 0;
}

static size_t count_readers(const struct kvmstats_host *h)
{
	size_t n = 0;

	for (size_t i = 0; i < h->n; i++)
		for (size_t j = 0; j < h->vmms[i]->nvms; j++)
			n += (h->vmms[i]->vms[j]->r != NULL) +
			     h->vmms[i]->vms[j]->nvcpus;
	return n;
}

/* The flat list, sorted by source (a pass per source: a few VMMs each). */
static int flatten(struct ks_sweep_pool *p, const struct kvmstats_host *h)
{
	int err = grow(p, count_readers(h));

	if (err)
		return err;
	p->nitems = 0;
	for (unsigned int src = 0; src < KS_SWEEP_NSRC; src++) {
		for (size_t i = 0; i < h->n; i++) {
			const struct kvmstats_vmm *v = h->vmms[i];

			if (src_index(v->source) != src)
				continue;
			for (size_t j = 0; j < v->nvms; j++) {
				const struct kvmstats_vm *vm = v->vms[j];

				if (vm->r)
					p->items[p->nitems++] = (struct ks_sweep_item){ vm->r, src };
				for (size_t k = 0; k < vm->nvcpus; k++)
					p->items[p->nitems++] =
						(struct ks_sweep_item){ vm->vcpus[k].r, src };
			}
		}
	}
	return 0;
}

static unsigned int online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (unsigned int)n;
}

/* (Re)create the pool when the thread count asked for changed. */
static int get_pool(struct kvmstats_host *h, unsigned int threads)
{
	/* Fewer threads than asked may have started: keep what we have. */
	if (h->pool && h->pool->asked == threads)
		return 0;
	ks_sweep_pool_free(h->pool);
	h->pool = pool_new(threads);
	return h->pool ? 0 : -ENOMEM;
}

static void run(struct ks_sweep_pool *p, bool parallel)
{
	unsigned int helpers = parallel ? p->started : 0;

	for (unsigned int i = 0; i < p->nthreads; i++) {
		memset(p->parts[i].ns, 0, sizeof(p->parts[i].ns));
		p->parts[i].failed = 0;
	}
	atomic_store(&p->next, 0);
	if (helpers) {
		pthread_mutex_lock(&p->lock);
		p->busy = helpers;
		p->gen++;
		pthread_cond_broadcast(&p->go);
		pthread_mutex_unlock(&p->lock);
	}
	sweep_chunks(p, &p->parts[0]);
	if (helpers) {
		pthread_mutex_lock(&p->lock);
		while (p->busy)
			pthread_cond_wait(&p->done, &p->lock);
		pthread_mutex_unlock(&p->lock);
	}
}

int kvmstats_host__sweep_parallel(struct kvmstats_host *h, unsigned int threads)
{
	struct ks_sweep_pool *p;
	int failed = 0, err;

	if (!threads)
		threads = online_cpus();
	if (threads > MAX_THREADS)
		threads = MAX_THREADS;
	err = get_pool(h, threads);
	if (err)
		return err;
	p = h->pool;
	ks_host_drop_dead(h);
	err = flatten(p, h);
	if (err)
		return err;
	p->time_ns = ks_now_ns();
	h->time_ns = p->time_ns;
	run(p, p->nitems >= MIN_PARALLEL);
	memset(p->ns, 0, sizeof(p->ns));
	for (unsigned int i = 0; i < p->nthreads; i++) {
		failed += p->parts[i].failed;
		for (unsigned int s = 0; s < KS_SWEEP_NSRC; s++)
			p->ns[s] += p->parts[i].ns[s];
	}
	return failed;
}

uint64_t kvmstats_host__sweep_ns(const struct kvmstats_host *h,
				 const char *source)
{
	if (!h->pool)
		return 0;
	return h->pool->ns[src_index(source)];
}

unsigned int kvmstats_host__sweep_threads(const struct kvmstats_host *h)
{
	return h->pool ? h->pool->nthreads : 0;
}
