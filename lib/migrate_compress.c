// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * What guest pages compress to in a multifd channel: a random sample of
 * the non-zero pages, compressed with the library and level QEMU would
 * use, the way its channels do (QEMU's migration/multifd-zlib.c and
 * multifd-zstd.c, read for facts only): a channel keeps one stream,
 * feeds it the normal pages of a packet (up to 128) one after the other
 * and flushes at the packet's last page (Z_SYNC_FLUSH, ZSTD_e_flush); zero
 * pages are not compressed. Here each group of up to 128 sampled pages
 * goes through a fresh stream: sampled pages are not neighbours, so what
 * neighbours share is not found (an upper bound on the size, within a
 * stream's start-up cost).
 *
 * Bounded: at most max_pages pages read (4 KiB each, 128 at a time into
 * one buffer) and compression stops at max_s seconds. A group takes every
 * ngroups-th page of the sample (in address order), so that each spans
 * the whole guest and the groups done when time runs out are a sample of
 * all of it: in address order, a guest whose random data sat above its
 * compressible pages was sampled at 12% where it compresses to 60%, and
 * zlib, slow on what does not compress, was predicted 5x too fast.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "mem_internal.h"

#define GROUP 128u
#define GROUP_BYTES ((size_t)GROUP * KS_PAGE)

struct csample {
	struct ks_view v;
	struct ks_pageref refs[GROUP];
	uint64_t addr[GROUP];
	bool ok[GROUP];
	const unsigned char *ptr[GROUP];
	unsigned char *buf; /* GROUP pages as fetched */
	unsigned char *in; /* the group's non-zero pages, packed */
	unsigned char *out;
	size_t out_len;
	ZSTD_CCtx *zc;
};

/* A page at a time, flushed at the last, as a channel feeds its packet's
 * pages (a call per page costs too). */
static long deflate_group(const unsigned char *in, size_t len,
			  unsigned char *out, size_t out_len, int level)
{
	z_stream zs;
	long n = 0;

	memset(&zs, 0, sizeof(zs));
	if (deflateInit(&zs, level) != Z_OK)
		return -ENOMEM;
	zs.next_out = out;
	zs.avail_out = (uInt)out_len;
	for (size_t off = 0; !n && off < len; off += KS_PAGE) {
		zs.next_in = (unsigned char *)in + off;
		zs.avail_in = KS_PAGE;
		if (deflate(&zs, off + KS_PAGE < len ? Z_NO_FLUSH : Z_SYNC_FLUSH) != Z_OK ||
		    zs.avail_in)
			n = -EIO;
	}
	n = n ? n : (long)zs.total_out;
	deflateEnd(&zs);
	return n;
}

static long zstd_group(ZSTD_CCtx *zc, const unsigned char *in, size_t len,
		       unsigned char *out, size_t out_len, int level)
{
	ZSTD_outBuffer ob = {out, out_len, 0};
	size_t r;

	ZSTD_CCtx_reset(zc, ZSTD_reset_session_and_parameters);
	ZSTD_CCtx_setParameter(zc, ZSTD_c_compressionLevel, level);
	for (size_t off = 0; off < len; off += KS_PAGE) {
		ZSTD_inBuffer ib = {in + off, KS_PAGE, 0};
		ZSTD_EndDirective end = off + KS_PAGE < len ? ZSTD_e_continue : ZSTD_e_flush;

		do {
			r = ZSTD_compressStream2(zc, &ob, &ib, end);
			if (ZSTD_isError(r))
				return -EIO;
		} while ((end == ZSTD_e_flush ? r != 0 : ib.pos < ib.size) && ob.pos < ob.size);
	}
	return (long)ob.pos;
}

static int cs_open(struct csample *c, const struct kvmstats_pages *pg,
		   enum kvmstats_mig_compress m)
{
	int err;

	memset(c, 0, sizeof(*c));
	c->out_len = ZSTD_compressBound(GROUP_BYTES) + 1024;
	if (compressBound(GROUP_BYTES) + 1024 > c->out_len)
		c->out_len = compressBound(GROUP_BYTES) + 1024;
	c->buf = malloc(GROUP_BYTES);
	c->in = malloc(GROUP_BYTES);
	c->out = malloc(c->out_len);
	if (m == KVMSTATS_MIG_COMPRESS_ZSTD)
		c->zc = ZSTD_createCCtx();
	if (!c->buf || !c->in || !c->out ||
	    (m == KVMSTATS_MIG_COMPRESS_ZSTD && !c->zc))
		return -ENOMEM;
	err = ks_view_open(&c->v, pg);
	return err;
}

static void cs_close(struct csample *c)
{
	ks_view_close(&c->v);
	ZSTD_freeCCtx(c->zc);
	free(c->buf);
	free(c->in);
	free(c->out);
}

/* One group: fetch, drop zero pages, compress the rest. */
static int cs_group(struct csample *c, size_t n, enum kvmstats_mig_compress m,
		    int level, struct kvmstats_compress_estimate *e)
{
	kvmstats_zero_fn is_zero = kvmstats_zero__get(KVMSTATS_ZERO_BEST);
	long got = ks_view_fetch(&c->v, c->refs, n, c->buf, c->addr, c->ok,
				 c->ptr);
	size_t used = 0;
	double cpu0;
	long out;

	if (got < 0)
		return (int)got;
	for (size_t i = 0; i < n; i++) {
		if (!c->ptr[i] || is_zero(c->ptr[i], KS_PAGE))
			continue;
		memcpy(c->in + used, c->ptr[i], KS_PAGE);
		used += KS_PAGE;
	}
	if (!used)
		return 0;
	cpu0 = ks_thread_cpu();
	out = m == KVMSTATS_MIG_COMPRESS_ZSTD
		      ? zstd_group(c->zc, c->in, used, c->out, c->out_len,
				   level)
		      : deflate_group(c->in, used, c->out, c->out_len, level);
	e->cpu_s += ks_thread_cpu() - cpu0;
	if (out < 0)
		return (int)out;
	e->pages += used / KS_PAGE;
	e->in_bytes += used;
	e->out_bytes += (uint64_t)out;
	return 0;
}

int ks_compress_sample(const struct kvmstats_pages *pg,
		       enum kvmstats_mig_compress m, int level, uint64_t seed,
		       uint32_t max_pages, double max_s,
		       struct kvmstats_compress_estimate *e)
{
	uint64_t t0 = ks_now_ns(), n, ngroups, *idx = NULL, s = ks_seed(seed);
	struct csample c;
	int err;

	memset(e, 0, sizeof(*e));
	e->method = m;
	e->level = level;
	if (m != KVMSTATS_MIG_COMPRESS_ZLIB && m != KVMSTATS_MIG_COMPRESS_ZSTD)
		return -EOPNOTSUPP;
	n = pg->c.candidates < max_pages ? pg->c.candidates : max_pages;
	err = cs_open(&c, pg, m);
	idx = calloc(n ? n : 1, sizeof(*idx));
	if (!err && !idx)
		err = -ENOMEM;
	if (!err)
		err = ks_pick_sorted(idx, n, pg->c.candidates, &s);
	ngroups = (n + GROUP - 1) / GROUP;
	for (uint64_t g = 0; !err && g < ngroups; g++) {
		size_t k = 0;

		/* At most GROUP: ngroups * GROUP >= n. */
		for (uint64_t i = g; !err && i < n; i += ngroups, k++)
			err = ks_pages_nth(pg, idx[i], &c.refs[k].region,
					   &c.refs[k].page);
		if (!err)
			err = cs_group(&c, k, m, level, e);
		if (ks_secs(ks_now_ns() - t0) > max_s)
			break;
	}
	free(idx);
	cs_close(&c);
	e->elapsed_s = ks_secs(ks_now_ns() - t0);
	if (err)
		return err;
	e->valid = e->in_bytes > 0;
	e->ratio = e->valid ? (double)e->out_bytes / (double)e->in_bytes : 1;
	snprintf(e->note, sizeof(e->note),
		 "%s level %d: %" PRIu64 " sampled non-zero pages "
		 "compress to %.1f%%",
		 kvmstats_mig_compress_str(m), level, e->pages, 100 * e->ratio);
	return 0;
}
