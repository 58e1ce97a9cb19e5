// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Reading the records of a log that may be damaged or forged.
 *
 * A record is sound when its header's CRC matches its payload. After a
 * damaged one the reader looks for the next sound record: any 8-aligned
 * sync word may start one, and each claims a length of up to 256 MiB.
 * Checking each candidate by reading and checksumming what it claims
 * costs, on a forged file of sync words, the file's size at every 8
 * bytes: a 1 MiB file took 12 s, a 4 MiB one 189 s. So the scan reads
 * the bytes once, keeps the running CRC of everything from where it
 * started, and checks a candidate when the scan reaches its end: the CRC
 * of its payload follows from the running CRCs at its start and its end
 * (CRC-32 is linear; zlib's crc32_combine does the arithmetic). The scan
 * stops at the first candidate that checks, so every byte is scanned
 * once per resync and resyncs never overlap what the reader has read.
 *
 * What the scan cannot make linear, a forged file alternating small
 * sound records with damaged ones that each claim the rest of the file,
 * is bounded by a budget: the bytes checked for nothing may reach a few
 * times the file's size, then the reader gives up (-E2BIG), saying so.
 * A damaged real log (a torn tail, a bad sector) wastes about twice the
 * damaged bytes, far below it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "log_scan.h"

/* Reads grow from SCAN_FIRST to SCAN_CHUNK: the next record is usually
 * near. */
#define SCAN_FIRST 4096u
#define SCAN_CHUNK (64u << 10)
/* Candidates awaiting their end; a real log has one or two at a time. */
#define SCAN_MAX_PENDING 65536u

static uint64_t budget(const struct log_source *s)
{
	return 4 * s->end + (64ull << 20);
}

static bool over_budget(struct log_source *s, uint64_t more)
{
	s->wasted += more;
	return s->wasted > budget(s);
}

static int refresh_end(struct log_source *s)
{
	struct stat st;

	if (fstat(s->fd, &st))
		return -errno;
	s->end = (uint64_t)st.st_size;
	return 0;
}

int log_read_rec(struct log_source *s, uint64_t off, struct log_rec *h)
{
	ssize_t n;
	int err;

	n = pread(s->fd, h, sizeof(*h), (off_t)off);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	if ((size_t)n < sizeof(*h))
		return -ENODATA;
	if (h->sync != REC_SYNC || h->len % 8 || h->len > REC_MAX_LEN)
		return -EBADMSG;
	/* The file may have grown since (a log still being written). */
	if (off + sizeof(*h) + h->len > s->end) {
		err = refresh_end(s);
		if (err)
			return err;
		if (off + sizeof(*h) + h->len > s->end)
			return -ENODATA;
	}
	s->rec.len = 0;
	if (log_buf_reserve(&s->rec, h->len + 8))
		return -ENOMEM;
	n = pread(s->fd, s->rec.p, h->len, (off_t)(off + sizeof(*h)));
	if (n < 0)
		return -errno;
	if ((size_t)n < h->len)
		return -ENODATA;
	s->rec.len = h->len;
	if (log_rec_crc(h, s->rec.p) == h->crc)
		return 1;
	return over_budget(s, h->len) ? -E2BIG : -EBADMSG;
}

/* ---- the resync scan ------------------------------------------------- */

/* A sync word whose record the scan has not reached the end of yet. */
struct cand {
	uint64_t at;		/* its header */
	uint64_t end;		/* of its payload */
	uint32_t pre;		/* running CRC at its payload's start */
	uint32_t hcrc;		/* CRC of its type, flags and len */
	uint32_t crc;		/* what its header says */
};

struct scan {
	struct log_source *s;
	unsigned char *buf;	/* bytes [c0, c0 + blen) of the file */
	uint64_t c0;
	size_t blen;
	uint64_t pos;		/* the running CRC covers [start, pos) */
	uLong crc;
	struct cand *heap;	/* pending, a min-heap by end */
	size_t n, cap;
};

/* Add a pending candidate; past SCAN_MAX_PENDING (only a forged file
 * gets there) new ones are not checked. */
static void heap_push(struct scan *sc, const struct cand *c)
{
	size_t i;

	if (sc->n == sc->cap) {
		size_t cap = sc->cap ? sc->cap * 2 : 64;
		void *p;

		if (cap > SCAN_MAX_PENDING)
			return;
		p = realloc(sc->heap, cap * sizeof(*sc->heap));
		if (!p)
			return;
		sc->heap = p;
		sc->cap = cap;
	}
	i = sc->n++;

	while (i && sc->heap[(i - 1) / 2].end > c->end) {
		sc->heap[i] = sc->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	sc->heap[i] = *c;
}

static void heap_pop(struct scan *sc)
{
	struct cand last = sc->heap[--sc->n];
	size_t i = 0;

	for (;;) {
		size_t k = 2 * i + 1;

		if (k >= sc->n)
			break;
		if (k + 1 < sc->n && sc->heap[k + 1].end < sc->heap[k].end)
			k++;
		if (sc->heap[k].end >= last.end)
			break;
		sc->heap[i] = sc->heap[k];
		i = k;
	}
	if (sc->n)
		sc->heap[i] = last;
}

/* Extend the running CRC to @to, which lies within the buffer. */
static void advance(struct scan *sc, uint64_t to)
{
	if (to <= sc->pos)
		return;
	sc->crc = crc32(sc->crc, sc->buf + (sc->pos - sc->c0), (uInt)(to - sc->pos));
	sc->pos = to;
}

/* Does candidate @c check, the running CRC being at its end? */
static bool sound(const struct scan *sc, const struct cand *c)
{
	uint64_t len = c->end - (c->at + sizeof(struct log_rec));
	uLong op = crc32_combine_gen((z_off_t)len);
	uLong payload = sc->crc ^ crc32_combine_op(c->pre, 0, op);

	return (uint32_t)crc32_combine_op(c->hcrc, payload, op) == c->crc;
}

/* Check the candidates that end at or before @to; the offset of the
 * first that is sound, or -1. */
static int64_t settle(struct scan *sc, uint64_t to)
{
	while (sc->n && sc->heap[0].end <= to) {
		struct cand c = sc->heap[0];

		heap_pop(sc);
		advance(sc, c.end);
		if (sound(sc, &c))
			return (int64_t)c.at;
	}
	return -1;
}

/* A sync word at @at (its header in the buffer): a candidate when what
 * it claims fits in the file. */
static int64_t consider(struct scan *sc, uint64_t at)
{
	struct log_rec h;
	struct cand c;
	int64_t found;

	memcpy(&h, sc->buf + (at - sc->c0), sizeof(h));
	if (h.len % 8 || h.len > REC_MAX_LEN ||
	    at + sizeof(h) + h.len > sc->s->end)
		return -1;
	c = (struct cand){ .at = at, .end = at + sizeof(h) + h.len, .crc = h.crc };
	/* Ends before this payload starts come first: the CRC only goes on. */
	found = settle(sc, at + sizeof(h));
	if (found >= 0)
		return found;
	advance(sc, at + sizeof(h));
	c.pre = (uint32_t)sc->crc;
	c.hcrc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)&h.type, 8);
	if (c.end == sc->pos)
		return sound(sc, &c) ? (int64_t)at : -1;
	heap_push(sc, &c);
	return -1;
}

/* Scan the buffer's 8-aligned words in [from, to). */
static int64_t scan_words(struct scan *sc, uint64_t from, uint64_t to)
{
	for (uint64_t at = from; at < to; at += 8) {
		uint32_t sync;
		int64_t found = settle(sc, at);

		if (found >= 0)
			return found;
		memcpy(&sync, sc->buf + (at - sc->c0), 4);
		if (sync != REC_SYNC || at + sizeof(struct log_rec) > sc->c0 + sc->blen)
			continue;
		found = consider(sc, at);
		if (found >= 0)
			return found;
	}
	return -1;
}

int64_t log_resync(struct log_source *s, uint64_t off)
{
	struct scan sc = { .s = s };
	uint64_t from = (off + 8) & ~7ull, own;
	int64_t found = -1;

	if (refresh_end(s))
		return -1;
	sc.buf = malloc(SCAN_CHUNK + sizeof(struct log_rec));
	if (!sc.buf)
		goto out;
	sc.crc = crc32(0L, Z_NULL, 0);
	sc.pos = from;
	/* Chunks overlap by a header, so that one read sees every header
	 * that starts in it. */
	for (uint64_t c0 = from, step = SCAN_FIRST; found == -1 && c0 < s->end;
	     c0 += step, step = step < SCAN_CHUNK ? step * 2 : step) {
		ssize_t n = pread(s->fd, sc.buf, step + sizeof(struct log_rec),
				  (off_t)c0);

		if (n <= 0)
			break;
		sc.c0 = c0;
		sc.blen = (size_t)n;
		if (over_budget(s, sc.blen)) {
			found = -E2BIG;
			break;
		}
		own = sc.blen < step ? sc.blen : step;
		found = scan_words(&sc, c0, c0 + own);
		/* The next read starts there: the CRC must have got there. */
		advance(&sc, c0 + own);
	}
	/* Whatever ends with the file's last word. */
	if (found == -1 && sc.blen)
		found = settle(&sc, s->end);
out:
	free(sc.buf);
	free(sc.heap);
	return found;
}
