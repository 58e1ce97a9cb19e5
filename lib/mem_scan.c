// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Reading guest pages, only those that are there: the sample and scan
 * estimators.
 *
 * The classification (mem_pagemap.c) leaves a bitmap of candidates: pages
 * present in the VMM and not mapping the zero page. Only they are read:
 * reading a page that is not present would map it (a fault in the VMM's
 * address space) and reading a swapped one would swap it in.
 *
 * Anonymous (and private) RAM is copied out with process_vm_readv: one
 * local buffer of about a megabyte (it stays in L2) and one remote iovec
 * per run of candidates, up to IOV_MAX a call. The copy costs a second
 * pass over the data, but the alternatives (ptrace, /proc/PID/mem) cost
 * more per byte or stop the VMM. Shared RAM (memfd, shm, files) is read
 * with pread on the VMM's file into the same buffer, each run checked in
 * memory before and after (mem_view.c): the VMM may truncate the file
 * under us, and a load from a mapping of it would then raise SIGBUS. A
 * page gone meanwhile is unknown and counted as missing.
 *
 * The scan runs on ceil(max_cpu) threads taking 16 MiB chunks of address
 * space in turn. Each thread keeps its share of the budget by sleeping
 * after a batch until its CPU time over wall time is at most
 * max_cpu/threads and its bytes over wall time at most rate/threads.
 * The caller's thread watches: progress callback, cancellation, and the
 * VMM's pidfd; a VMM that exits ends the scan with -ESRCH and partial
 * counts (shared memory stays readable through our mapping, anonymous
 * memory does not).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mem_internal.h"

#define CHUNK_PAGES 4096u	/* 16 MiB of address space */
/* Pages per pread of shared RAM: 256 KiB, so that the copy is still in
 * L2 (512 KiB a core here) when it is tested. */
#define FILE_RUN 64u
#define MAX_IOV 1024u		/* IOV_MAX */
#define GIB (1ull << 30)

/* ---- helpers shared with the dirty sampler ---- */

void ks_wilson(uint64_t k, uint64_t n, double *lo, double *hi)
{
	const double z = 1.959964, z2 = z * z;
	double p, den, mid, half;

	if (!n) {
		*lo = 0;
		*hi = 1;
		return;
	}
	p = (double)k / (double)n;
	den = 1 + z2 / (double)n;
	mid = (p + z2 / (2.0 * (double)n)) / den;
	half = z * sqrt(p * (1 - p) / (double)n + z2 / (4.0 * (double)n * (double)n)) / den;
	*lo = mid - half < 0 ? 0 : mid - half;
	*hi = mid + half > 1 ? 1 : mid + half;
}

static inline uint64_t rotl(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* Four independent multiply-rotate lanes over the page, then mixed: fast
 * enough to hash a sample many times a second, and any change of a word
 * changes the result with overwhelming probability. Not cryptographic. */
uint64_t ks_hash_page(const void *page)
{
	const unsigned char *p = page;
	const uint64_t k1 = 0x9e3779b97f4a7c15ull, k2 = 0xc2b2ae3d27d4eb4full;
	uint64_t h[4] = { k1, k2, k1 ^ k2, k2 * 3 }, w;

	for (size_t i = 0; i < KS_PAGE; i += 32) {
		for (size_t l = 0; l < 4; l++) {
			memcpy(&w, p + i + 8 * l, 8);
			h[l] = rotl(h[l] ^ (w * k2), 31) * k1;
		}
	}
	w = rotl(h[0], 1) + rotl(h[1], 7) + rotl(h[2], 12) + rotl(h[3], 18);
	w ^= w >> 33;
	w *= k2;
	return w ^ (w >> 29);
}

/* ---- sample ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int ks_pick_sorted(uint64_t *idx, uint64_t n, uint64_t total, uint64_t *seed)
{
	uint64_t have = 0;

	if (n >= total) {
		for (uint64_t i = 0; i < total; i++)
			idx[i] = i;
		return 0;
	}
	/* A large share of the population: drawn and deduplicated, the last
	 * few would take many rounds; selection in order (Knuth's algorithm
	 * S) takes one pass over a population at most 4 times the sample. */
	if (n > total / 4) {
		for (uint64_t i = 0; i < total && have < n; i++)
			if (ks_rand_below(seed, total - i) < n - have)
				idx[have++] = i;
		return have == n ? 0 : -EAGAIN;
	}
	for (int round = 0; have < n && round < 64; round++) {
		for (uint64_t i = have; i < n; i++)
			idx[i] = ks_rand_below(seed, total);
		qsort(idx, n, sizeof(*idx), cmp_u64);
		have = 1;
		for (uint64_t i = 1; i < n; i++)
			if (idx[i] != idx[have - 1])
				idx[have++] = idx[i];
	}
	return have == n ? 0 : -EAGAIN;
}

uint64_t ks_sample_size(const struct kvmstats_pages *pg, uint32_t per_gib,
			uint32_t min_pages, uint64_t population)
{
	double gib = (double)(pg->c.pages * KS_PAGE) / (double)GIB;
	uint64_t n = (uint64_t)ceil(gib * (per_gib ? per_gib : 512));

	if (n < (min_pages ? min_pages : 1024))
		n = min_pages ? min_pages : 1024;
	return n < population ? n : population;
}

/* Appends to an estimate's note what fits of it. */
static void note_append(char *note, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void note_append(char *note, size_t len, const char *fmt, ...)
{
	size_t used = strlen(note);
	va_list ap;

	if (used >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(note + used, len - used, fmt, ap);
	va_end(ap);
}

void ks_note_missing(char *note, size_t len, uint64_t n, const char *what)
{
	note_append(note, len, "; %" PRIu64 " %s page%s went missing while read",
		    n, what, n == 1 ? "" : "s");
}

void ks_note_unclassified(char *note, size_t len, const struct kvmstats_pages *pg)
{
	uint64_t n = pg->c.unclassified;

	if (n)
		note_append(note, len, "; %" PRIu64 " page%s not classified within "
			    "the pagemap pass's time: unknown", n, n == 1 ? "" : "s");
}

#define FETCH 256	/* pages per fetch: 1 MiB */

struct fetcher {
	struct ks_view v;
	unsigned char *buf;
	uint64_t addr[FETCH];
	bool ok[FETCH];
	const unsigned char *ptr[FETCH];
	struct ks_pageref refs[FETCH];
};

static int fetcher_open(struct fetcher *f, const struct kvmstats_pages *pg)
{
	int err = ks_view_open(&f->v, pg);

	if (err)
		return err;
	f->buf = aligned_alloc(KS_PAGE, (size_t)FETCH * KS_PAGE);
	if (!f->buf) {
		ks_view_close(&f->v);
		return -ENOMEM;
	}
	return 0;
}

static void fetcher_close(struct fetcher *f)
{
	ks_view_close(&f->v);
	free(f->buf);
}

/* @missing of the @n sampled pages went missing: as many of the
 * candidates, in proportion, are unknown; the zero share of the pages
 * tested stands for the rest. */
static void sample_result(const struct kvmstats_pages *pg, uint64_t n,
			  uint64_t tested, uint64_t zeros, uint64_t missing,
			  struct kvmstats_estimate *e)
{
	const struct kvmstats_pagemap_counts *c = &pg->c;
	uint64_t known = c->none + c->pfn_zero, N = c->candidates, M, rest;
	double lo, hi, p = tested ? (double)zeros / (double)tested : 0;
	double fpc = N > 1 ? sqrt((double)(N - tested) / (double)(N - 1)) : 0;

	M = n ? (uint64_t)llround((double)missing * (double)N / (double)n) : 0;
	rest = N - M;
	ks_wilson(zeros, tested, &lo, &hi);
	/* A sample that is a large share of the population knows more than
	 * Wilson says: shrink the interval by the finite population factor. */
	lo = p - (p - lo) * fpc;
	hi = p + (hi - p) * fpc;
	e->pages = c->pages;
	e->zero_pages = known + (uint64_t)llround(p * (double)rest);
	e->missing_pages = M;
	e->unknown_pages = c->swapped + M;
	e->nonzero_pages = c->pages - e->zero_pages - e->unknown_pages;
	e->zero_lo = (double)known + lo * (double)rest;
	e->zero_hi = (double)known + hi * (double)rest;
	e->coverage = c->pages ? (double)(known + tested) / (double)c->pages : 1;
	e->tested = tested;
}

int kvmstats_pages__sample(const struct kvmstats_pages *pg,
			   const struct kvmstats_sample_opts *opts,
			   struct kvmstats_estimate *e)
{
	struct kvmstats_sample_opts o;
	uint64_t t0 = ks_now_ns(), seed, n, *idx = NULL;
	uint64_t tested = 0, zeros = 0, missing = 0;
	double cpu0 = ks_thread_cpu();
	kvmstats_zero_fn zero;
	struct fetcher *f = NULL;
	int err = ks_opts_copy(&o, sizeof(o), opts);

	if (err || !pg || !e)
		return -EINVAL;
	memset(e, 0, sizeof(*e));
	e->method = KVMSTATS_METHOD_SAMPLE;
	zero = kvmstats_zero__get(o.zero);
	if (!zero)
		return -errno;
	seed = ks_seed(o.seed);
	n = ks_sample_size(pg, o.pages_per_gib, o.min_pages, pg->c.candidates);
	idx = malloc((n ? n : 1) * sizeof(*idx));
	f = malloc(sizeof(*f));
	if (!idx || !f || (err = fetcher_open(f, pg))) {
		free(f);
		free(idx);
		return err ? err : -ENOMEM;
	}
	err = ks_pick_sorted(idx, n, pg->c.candidates, &seed);
	for (uint64_t i = 0; !err && i < n; i += FETCH) {
		size_t m = n - i < FETCH ? (size_t)(n - i) : FETCH;
		long got;

		for (size_t k = 0; k < m && !err; k++)
			err = ks_pages_nth(pg, idx[i + k], &f->refs[k].region,
					   &f->refs[k].page);
		if (err)
			break;
		got = ks_view_fetch(&f->v, f->refs, m, f->buf, f->addr, f->ok, f->ptr);
		if (got < 0) {
			err = (int)got;
			break;
		}
		e->bytes_read += (uint64_t)got * KS_PAGE;
		for (size_t k = 0; k < m; k++) {
			if (!f->ptr[k]) {
				missing += ks_view_missing(&f->v, &f->refs[k], f->ptr[k]);
				continue;
			}
			tested++;
			zeros += zero(f->ptr[k], KS_PAGE);
		}
	}
	fetcher_close(f);
	free(f);
	free(idx);
	if (err == -ESRCH)
		snprintf(e->note, sizeof(e->note), "the VM exited during the sample");
	if (err)
		return err;
	sample_result(pg, n, tested, zeros, missing, e);
	e->valid = true;
	e->elapsed_s = pg->elapsed + ks_secs(ks_now_ns() - t0);
	e->cpu_s = pg->elapsed + ks_thread_cpu() - cpu0;
	snprintf(e->note, sizeof(e->note), "%s + %" PRIu64 " of %" PRIu64
		 " present pages tested%s", pg->mode, tested, pg->c.candidates,
		 tested == pg->c.candidates ? " (all: exact)" : "");
	if (missing)
		ks_note_missing(e->note, sizeof(e->note), missing, "sampled");
	ks_note_unclassified(e->note, sizeof(e->note), pg);
	return 0;
}

/* ---- scan ---- */

struct scan {
	const struct kvmstats_pages *pg;
	struct ks_view v;
	kvmstats_zero_fn zero;
	uint32_t batch_pages;
	double duty;		/* share of a core per thread */
	double rate;		/* bytes/s per thread; 0: none */
	uint64_t nchunks;
	atomic_uint_fast64_t next;
	atomic_uint_fast64_t done_pages;
	atomic_int stop;	/* 0, or -errno that ended the scan */
	pthread_mutex_t lock;	/* guards the totals below */
	uint64_t zeros, nonzero, failed, missing, bytes;
	double cpu;
};

struct worker {
	struct scan *s;
	pthread_t tid;
	unsigned char *buf;
	unsigned char *vec;	/* mincore */
	bool *ok;		/* per buffer page: read */
	uint64_t *run_page;	/* region page of each buffer page */
	struct iovec *iov;
	uint64_t zeros, nonzero, failed, missing, bytes;
	uint64_t t0;
	double cpu0;
	bool joined;
};

static void chunk_at(const struct scan *s, uint64_t c, size_t *region,
		     uint64_t *p0, uint64_t *p1)
{
	for (size_t i = 0; i < s->pg->n; i++) {
		uint64_t n = (s->pg->r[i].npages + CHUNK_PAGES - 1) / CHUNK_PAGES;

		if (c < n) {
			*region = i;
			*p0 = c * CHUNK_PAGES;
			*p1 = *p0 + CHUNK_PAGES < s->pg->r[i].npages ?
				      *p0 + CHUNK_PAGES : s->pg->r[i].npages;
			return;
		}
		c -= n;
	}
	*region = 0;
	*p0 = *p1 = 0;
}

/* Sleep until this thread is back within its CPU and byte budgets. */
static void throttle(struct worker *w)
{
	struct scan *s = w->s;
	double wall = ks_secs(ks_now_ns() - w->t0), need = 0;

	if (s->duty < 0.999)
		need = (ks_thread_cpu() - w->cpu0) / s->duty;
	if (s->rate > 0 && (double)w->bytes / s->rate > need)
		need = (double)w->bytes / s->rate;
	while (need > wall && !atomic_load(&s->stop)) {
		double d = need - wall > 0.05 ? 0.05 : need - wall;
		struct timespec ts = { 0, (long)(d * 1e9) };

		nanosleep(&ts, NULL);
		wall = ks_secs(ks_now_ns() - w->t0);
	}
}

static void test_pages(struct worker *w, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (w->s->zero(p + i * KS_PAGE, KS_PAGE))
			w->zeros++;
		else
			w->nonzero++;
	}
}

/* Shared memory: each run read from the file (in memory before, or
 * missing), then tested. Only a page read as zeros can be a hole the VMM
 * punched or truncated meanwhile: those are checked in memory again
 * after the read (or missing), the others were read whole. */
static void scan_file(struct worker *w, size_t region, uint64_t page,
		      uint64_t end)
{
	struct scan *s = w->s;

	while (page < end && !atomic_load(&s->stop)) {
		uint64_t at = page, n = ks_pages_next_run(s->pg, region, &at, end,
							  FILE_RUN < s->batch_pages ?
							  FILE_RUN : s->batch_pages);
		size_t got, zeros = 0;

		if (!n || at >= end)
			break;
		if (at + n > end)
			n = end - at;
		got = ks_view_read(&s->v, region, at, (size_t)n, w->buf, w->vec,
				   w->ok, false);
		for (size_t i = 0; i < n; i++) {
			if (!w->ok[i]) {
				w->missing++;
			} else if (!s->zero(w->buf + i * KS_PAGE, KS_PAGE)) {
				w->nonzero++;
				w->ok[i] = false;	/* done with */
			} else {
				zeros++;	/* ok[i] stays: to check again */
			}
		}
		if (zeros) {
			ks_view_recheck(&s->v, region, at, (size_t)n, w->vec, w->ok);
			for (size_t i = 0; i < n; i++) {
				w->zeros += w->ok[i];
				zeros -= w->ok[i];
			}
			w->missing += zeros;	/* zero, then gone: a hole */
		}
		w->bytes += got * KS_PAGE;
		atomic_fetch_add(&s->done_pages, n);
		page = at + n;
		throttle(w);
	}
}

/* Gather runs from @page into one process_vm_readv; returns pages. */
static size_t gather(struct worker *w, size_t region, uint64_t *page,
		     uint64_t end, size_t *niov)
{
	struct scan *s = w->s;
	uint64_t base = s->pg->ram->r[region].start;
	size_t nb = 0;

	*niov = 0;
	while (*niov < MAX_IOV && nb < s->batch_pages) {
		uint64_t at = *page, n = ks_pages_next_run(s->pg, region, &at, end,
							   s->batch_pages - nb);

		if (!n || at >= end) {
			*page = end;
			break;
		}
		if (at + n > end)
			n = end - at;
		w->iov[*niov].iov_base = (void *)(uintptr_t)(base + at * KS_PAGE);
		w->iov[(*niov)++].iov_len = n * KS_PAGE;
		for (uint64_t i = 0; i < n; i++)
			w->run_page[nb + i] = at + i;
		nb += n;
		*page = at + n;
	}
	return nb;
}

static void scan_copy(struct worker *w, size_t region, uint64_t page, uint64_t end)
{
	struct scan *s = w->s;

	while (page < end && !atomic_load(&s->stop)) {
		struct iovec local = { w->buf, 0 };
		size_t niov, nb = gather(w, region, &page, end, &niov);
		ssize_t got;

		if (!nb)
			break;
		local.iov_len = nb * KS_PAGE;
		got = process_vm_readv(s->pg->ram->pid, &local, 1, w->iov, niov, 0);
		if (got < 0 && errno == ESRCH) {
			atomic_store(&s->stop, -ESRCH);
			break;
		}
		got = got < 0 ? 0 : got / KS_PAGE;
		test_pages(w, w->buf, (size_t)got);
		w->bytes += (uint64_t)got * KS_PAGE;
		atomic_fetch_add(&s->done_pages, (uint64_t)got + ((size_t)got < nb));
		if ((size_t)got < nb) {
			/* That page vanished: count it missing, go on after it. */
			w->missing++;
			page = w->run_page[got] + 1;
		}
		throttle(w);
	}
}

/* A region that cannot be read safely: its candidates stay unknown. */
static void skip_chunk(struct worker *w, size_t region, uint64_t page, uint64_t end)
{
	uint64_t n;

	while (page < end && (n = ks_pages_next_run(w->s->pg, region, &page, end, end - page))) {
		if (page >= end)
			break;
		n = page + n > end ? end - page : n;
		w->failed += n;
		atomic_fetch_add(&w->s->done_pages, n);
		page += n;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct scan *s = w->s;

	w->t0 = ks_now_ns();
	w->cpu0 = ks_thread_cpu();
	while (!atomic_load(&s->stop)) {
		uint64_t c = atomic_fetch_add(&s->next, 1), p0, p1;
		size_t region;

		if (c >= s->nchunks)
			break;
		chunk_at(s, c, &region, &p0, &p1);
		if (s->v.blind[region])
			skip_chunk(w, region, p0, p1);
		else if (s->v.fd[region] >= 0)
			scan_file(w, region, p0, p1);
		else
			scan_copy(w, region, p0, p1);
	}
	pthread_mutex_lock(&s->lock);
	s->zeros += w->zeros;
	s->nonzero += w->nonzero;
	s->failed += w->failed;
	s->missing += w->missing;
	s->bytes += w->bytes;
	s->cpu += ks_thread_cpu() - w->cpu0;
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static int worker_init(struct worker *w, struct scan *s)
{
	memset(w, 0, sizeof(*w));
	w->s = s;
	w->buf = aligned_alloc(KS_PAGE, (size_t)s->batch_pages * KS_PAGE);
	w->vec = malloc(s->batch_pages);
	w->ok = malloc(s->batch_pages * sizeof(*w->ok));
	w->run_page = malloc(s->batch_pages * sizeof(*w->run_page));
	w->iov = malloc(MAX_IOV * sizeof(*w->iov));
	return w->buf && w->vec && w->ok && w->run_page && w->iov ? 0 : -ENOMEM;
}

static void worker_free(struct worker *w)
{
	free(w->buf);
	free(w->vec);
	free(w->ok);
	free(w->run_page);
	free(w->iov);
}

static unsigned int thread_count(const struct scan *s, double max_cpu)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned int n = (unsigned int)ceil(max_cpu);

	if (cpus > 0 && n > (unsigned int)cpus)
		n = (unsigned int)cpus;
	if (n > s->nchunks)
		n = (unsigned int)s->nchunks;
	return n ? n : 1;
}

/* The caller's thread: progress, cancellation, the VMM's life. */
static void watch(struct scan *s, const struct kvmstats_scan_opts *o,
		  unsigned int nthreads, struct worker *w)
{
	uint64_t total = s->pg->c.candidates * KS_PAGE;

	for (;;) {
		struct timespec ts = { 0, 20L * 1000 * 1000 };
		unsigned int live = 0;

		for (unsigned int i = 0; i < nthreads; i++) {
			if (!w[i].joined && !pthread_tryjoin_np(w[i].tid, NULL))
				w[i].joined = true;
			live += !w[i].joined;
		}
		if (!live)
			break;
		if (!ks_pidfd_alive(s->pg->ram->pidfd)) {
			int zero = 0;

			atomic_compare_exchange_strong(&s->stop, &zero, -ESRCH);
		}
		if (o->progress && o->progress(o->progress_arg,
					       atomic_load(&s->done_pages) * KS_PAGE,
					       total)) {
			int zero = 0;

			atomic_compare_exchange_strong(&s->stop, &zero, -ECANCELED);
		}
		nanosleep(&ts, NULL);
	}
	if (o->progress)
		o->progress(o->progress_arg, atomic_load(&s->done_pages) * KS_PAGE,
			    total);
}

static int run_threads(struct scan *s, const struct kvmstats_scan_opts *o)
{
	double max_cpu = o->max_cpu > 0 ? o->max_cpu : 1;
	unsigned int n = thread_count(s, max_cpu), started = 0;
	struct worker *w = calloc(n, sizeof(*w));
	int err = w ? 0 : -ENOMEM;

	s->duty = max_cpu / n > 1 ? 1 : max_cpu / n;
	s->rate = o->rate ? (double)o->rate / n : 0;
	for (unsigned int i = 0; !err && i < n; i++) {
		err = worker_init(&w[i], s);
		if (!err)
			err = -pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
		if (!err)
			started++;
	}
	if (err)
		atomic_store(&s->stop, err);
	watch(s, o, started, w);
	for (unsigned int i = 0; w && i < n; i++)
		worker_free(&w[i]);
	free(w);
	return err;
}

static void scan_result(const struct scan *s, struct kvmstats_estimate *e,
			int err)
{
	const struct kvmstats_pagemap_counts *c = &s->pg->c;
	uint64_t tested = s->zeros + s->nonzero;

	e->pages = c->pages;
	e->zero_pages = c->none + c->pfn_zero + s->zeros;
	e->nonzero_pages = s->nonzero;
	/* Whatever was not tested (a stopped scan) is unknown. */
	e->unknown_pages = c->pages - e->zero_pages - e->nonzero_pages;
	e->zero_lo = (double)e->zero_pages;
	e->zero_hi = (double)(e->zero_pages + e->unknown_pages);
	e->coverage = c->pages ? (double)(c->pages - e->unknown_pages) / (double)c->pages : 1;
	e->tested = tested;
	e->bytes_read = s->bytes;
	e->missing_pages = s->missing;
	e->valid = !err;
	if (err == -ESRCH)
		snprintf(e->note, sizeof(e->note), "the VM exited during the "
			 "scan: %" PRIu64 " of %" PRIu64 " present pages tested",
			 tested, c->candidates);
	else if (err == -ECANCELED)
		snprintf(e->note, sizeof(e->note), "scan cancelled: %" PRIu64
			 " of %" PRIu64 " present pages tested", tested, c->candidates);
	else
		snprintf(e->note, sizeof(e->note), "%s + every present page tested "
			 "(%s)", s->pg->mode, kvmstats_zero__name(KVMSTATS_ZERO_BEST));
	if (s->missing)
		ks_note_missing(e->note, sizeof(e->note), s->missing, "present");
	ks_note_unclassified(e->note, sizeof(e->note), s->pg);
}

int kvmstats_pages__scan(const struct kvmstats_pages *pg,
			 const struct kvmstats_scan_opts *opts,
			 struct kvmstats_estimate *e)
{
	struct kvmstats_scan_opts o;
	struct scan *s;
	uint64_t t0 = ks_now_ns();
	double cpu0 = ks_thread_cpu();
	int err = ks_opts_copy(&o, sizeof(o), opts);

	if (err || !pg || !e)
		return -EINVAL;
	memset(e, 0, sizeof(*e));
	e->method = KVMSTATS_METHOD_SCAN;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->pg = pg;
	s->zero = kvmstats_zero__get(o.zero);
	s->batch_pages = (o.batch_bytes ? o.batch_bytes : 1u << 20) / KS_PAGE;
	if (!s->batch_pages)
		s->batch_pages = 1;
	pthread_mutex_init(&s->lock, NULL);
	err = s->zero ? ks_view_open(&s->v, pg) : -errno;
	if (err)
		goto out;
	for (size_t i = 0; i < pg->n; i++)
		s->nchunks += (pg->r[i].npages + CHUNK_PAGES - 1) / CHUNK_PAGES;
	err = run_threads(s, &o);
	if (!err)
		err = atomic_load(&s->stop);
	ks_view_close(&s->v);
	scan_result(s, e, err);
	e->elapsed_s = pg->elapsed + ks_secs(ks_now_ns() - t0);
	e->cpu_s = pg->elapsed + s->cpu + ks_thread_cpu() - cpu0;
	e->test_cpu_s = s->cpu;
out:
	pthread_mutex_destroy(&s->lock);
	free(s);
	return err;
}
