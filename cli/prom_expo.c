// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The exporter's expositions: the model (prom_model.c) rendered in parts
 * by a pool of worker threads created once, each part then deflated on
 * its own into one gzip member; the buffers are kept from one scrape to
 * the next.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#include "prom.h"

/* ---- threads ------------------------------------------------------------ */

struct prom_pool {
	unsigned int nthreads;		/* including the caller's */
	unsigned int started;
	pthread_t *tids;
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	uint64_t gen;
	unsigned int busy;
	bool stop;
	/* The job: fn(arg, i) for every i < njobs. */
	void (*fn)(void *arg, size_t i);
	void *arg;
	size_t njobs;
	atomic_size_t next;
	/* Deflate streams, one per part, reused by every gzip. */
	z_stream *z[PROM_MAX_PARTS + 1];
	int zlevel[PROM_MAX_PARTS + 1];
};

static void pool_jobs(struct prom_pool *p)
{
	for (;;) {
		size_t i = atomic_fetch_add(&p->next, 1);

		if (i >= p->njobs)
			return;
		p->fn(p->arg, i);
	}
}

static void *pool_worker(void *arg)
{
	struct prom_pool *p = arg;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->lock);
		pool_jobs(p);
		pthread_mutex_lock(&p->lock);
		if (--p->busy == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct prom_pool *prom_pool_new(unsigned int threads)
{
	struct prom_pool *p = calloc(1, sizeof(*p));
	sigset_t all, old;

	if (!p)
		return NULL;
	if (!threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		threads = n < 1 ? 1 : n > PROM_MAX_PARTS ? PROM_MAX_PARTS : (unsigned int)n;
	}
	if (threads > PROM_MAX_PARTS)
		threads = PROM_MAX_PARTS;
	p->tids = calloc(threads, sizeof(*p->tids));
	if (!p->tids) {
		free(p);
		return NULL;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	/* Signals belong to the main thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (unsigned int i = 1; i < threads; i++) {
		if (pthread_create(&p->tids[p->started], NULL, pool_worker, p))
			break;
		p->started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	p->nthreads = p->started + 1;
	return p;
}

void prom_pool_free(struct prom_pool *p)
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
	for (size_t i = 0; i <= PROM_MAX_PARTS; i++) {
		if (p->z[i])
			deflateEnd(p->z[i]);
		free(p->z[i]);
	}
	free(p->tids);
	free(p);
}

unsigned int prom_pool_threads(const struct prom_pool *p)
{
	return p ? p->nthreads : 1;
}

void prom_pool_run(struct prom_pool *p, size_t njobs,
		   void (*fn)(void *arg, size_t i), void *arg)
{
	struct prom_pool one = { .fn = fn, .arg = arg, .njobs = njobs };

	if (!p || p->started == 0 || njobs < 2) {
		pool_jobs(&one);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	p->njobs = njobs;
	atomic_store(&p->next, 0);
	pthread_mutex_lock(&p->lock);
	p->busy = p->started;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	pool_jobs(p);
	pthread_mutex_lock(&p->lock);
	while (p->busy)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

/* ---- expositions: rendered in parts, gzipped in parts -------------------- */

void prom_expo_reset(struct prom_expo *e, enum prom_format fmt)
{
	e->fmt = fmt;
	e->nparts = 0;
	e->gz_ready = false;
	for (size_t i = 0; i < PROM_MAX_PARTS + 1; i++) {
		e->part[i].len = 0;
		e->part[i].failed = false;
		e->zpart[i].len = 0;
		e->zpart[i].failed = false;
	}
}

void prom_expo_free(struct prom_expo *e)
{
	for (size_t i = 0; i < PROM_MAX_PARTS + 1; i++) {
		prom_buf_free(&e->part[i]);
		prom_buf_free(&e->zpart[i]);
	}
}

struct render_job {
	const struct prom_model *m;
	struct prom_expo *e;
	size_t n;
};

static void render_job(void *arg, size_t i)
{
	struct render_job *j = arg;

	prom_model_render_part(j->m, j->e->fmt, i, j->n, &j->e->part[i]);
}

int prom_expo_render(struct prom_pool *pool, const struct prom_model *m,
		     struct prom_expo *e)
{
	struct render_job j = { m, e, prom_pool_threads(pool) };

	/* Small hosts: one part, no thread woken. */
	if (prom_model_lines(m) < 20000)
		j.n = 1;
	e->nparts = j.n;
	prom_pool_run(pool, j.n, render_job, &j);
	for (size_t i = 0; i < j.n; i++)
		if (e->part[i].failed)
			return -ENOMEM;
	return 0;
}

struct prom_buf *prom_expo_tail(struct prom_expo *e)
{
	return &e->part[e->nparts];
}

size_t prom_expo_len(const struct prom_expo *e, bool gz)
{
	size_t n = gz ? sizeof(e->gz_head) + sizeof(e->gz_tail) : 0;

	if (gz && !e->gz_ready)
		return 0;

	for (size_t i = 0; i <= e->nparts; i++)
		n += gz ? e->zpart[i].len : e->part[i].len;
	return n;
}

/*
 * One gzip member from independently deflated parts, as pigz does it:
 * each part is a raw deflate stream of its own; all but the last end with
 * a sync flush (an empty stored block, which leaves the stream byte
 * aligned and open), the last with the final block. Concatenated they are
 * one valid deflate stream, since no part refers back past its own start;
 * the CRC-32 of the whole is combined from the parts' (crc32_combine).
 */
struct gz_job {
	struct prom_pool *pool;
	const struct prom_expo *src;
	struct prom_expo *dst;
	int level;
	uint32_t crc[PROM_MAX_PARTS + 1];
	int err[PROM_MAX_PARTS + 1];
};

/* A raw deflate stream for part @i: the pool keeps one per part, so that
 * a scrape allocates nothing (a stream is about 270 KiB at level 1). */
static z_stream *get_stream(struct prom_pool *p, size_t i, int level,
			    z_stream *local)
{
	z_stream *z = p ? p->z[i] : NULL;

	if (z && p->zlevel[i] == level && deflateReset(z) == Z_OK)
		return z;
	if (z) {
		deflateEnd(z);
		free(z);
		p->z[i] = NULL;
	}
	z = p ? calloc(1, sizeof(*z)) : local;
	if (!z)
		return NULL;
	memset(z, 0, sizeof(*z));
	if (deflateInit2(z, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
		if (p)
			free(z);
		return NULL;
	}
	if (p) {
		p->z[i] = z;
		p->zlevel[i] = level;
	}
	return z;
}

static int deflate_part(z_stream *z, const struct prom_buf *in,
			struct prom_buf *out, bool last)
{
	size_t left = in->len;
	int ret;

	out->len = 0;
	if (!prom_buf_reserve(out, deflateBound(z, in->len) + 16))
		return -ENOMEM;
	z->next_in = (unsigned char *)in->p;
	z->avail_in = 0;
	z->next_out = (unsigned char *)out->p;
	z->avail_out = (uInt)(out->cap > UINT32_MAX ? UINT32_MAX : out->cap);
	do {
		/* avail_in is 32 bits: feed a huge part in pieces. */
		if (!z->avail_in && left) {
			z->avail_in = left > (1u << 30) ? 1u << 30 : (uInt)left;
			left -= z->avail_in;
		}
		ret = deflate(z, left ? Z_NO_FLUSH : last ? Z_FINISH : Z_SYNC_FLUSH);
	} while (ret == Z_OK && (left || z->avail_in || last));
	out->len = z->total_out;
	if (left || z->avail_in)
		return -EIO;
	return ret == (last ? Z_STREAM_END : Z_OK) ? 0 : -EIO;
}

static void gz_job(void *arg, size_t i)
{
	struct gz_job *j = arg;
	const struct prom_buf *in = &j->src->part[i];

	j->crc[i] = (uint32_t)crc32(0, (const unsigned char *)in->p, (uInt)0);
	for (size_t o = 0; o < in->len;) {
		size_t n = in->len - o > (1u << 30) ? 1u << 30 : in->len - o;

		j->crc[i] = (uint32_t)crc32(j->crc[i], (const unsigned char *)in->p + o,
					    (uInt)n);
		o += n;
	}
	{
		z_stream local, *z = get_stream(j->pool, i, j->level, &local);

		j->err[i] = z ? deflate_part(z, in, &j->dst->zpart[i], i == j->src->nparts)
			      : -ENOMEM;
		if (z == &local)
			deflateEnd(z);
	}
}

int prom_expo_gzip(struct prom_pool *pool, const struct prom_expo *src,
		   struct prom_expo *dst, int level)
{
	struct gz_job j = { .pool = pool, .src = src, .dst = dst, .level = level };
	uint32_t crc = 0;
	uint64_t total = 0;

	if (dst->gz_ready)
		return 0;
	dst->nparts = src->nparts;
	prom_pool_run(pool, src->nparts + 1, gz_job, &j);
	for (size_t i = 0; i <= src->nparts; i++) {
		if (j.err[i])
			return j.err[i];
		crc = (uint32_t)crc32_combine(crc, j.crc[i], (z_off_t)src->part[i].len);
		total += src->part[i].len;
	}
	/* RFC 1952: magic, deflate, no flags, no mtime, no extra flags, Unix. */
	memcpy(dst->gz_head, "\x1f\x8b\x08\0\0\0\0\0\0\x03", 10);
	for (int b = 0; b < 4; b++) {
		dst->gz_tail[b] = (unsigned char)(crc >> (8 * b));
		dst->gz_tail[4 + b] = (unsigned char)(total >> (8 * b));
	}
	dst->gz_ready = true;
	return 0;
}

size_t prom_expo_iov(const struct prom_expo *e, bool gz, struct iovec *iov,
		     size_t max)
{
	size_t n = 0;

	if (gz && n < max)
		iov[n++] = (struct iovec){ (void *)e->gz_head, sizeof(e->gz_head) };
	for (size_t i = 0; i <= e->nparts && n < max; i++) {
		const struct prom_buf *b = gz ? &e->zpart[i] : &e->part[i];

		if (b->len)
			iov[n++] = (struct iovec){ b->p, b->len };
	}
	if (gz && n < max)
		iov[n++] = (struct iovec){ (void *)e->gz_tail, sizeof(e->gz_tail) };
	return n;
}

