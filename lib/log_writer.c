// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The statistics log's writer (see kvmstats_log.h for the records,
 * log_format.h for the bytes, log_file.c for the file itself).
 *
 * Cost. A pread of a vCPU stats fd moves about 1.1 KiB; checksumming and
 * writing those bytes again costs more than the pread itself. So a
 * target's first entry in a file is its whole data block (a key entry),
 * and the next ones are deltas against the previous entry: a bitmap of
 * the u64 words that changed, then those words (nothing at all when no
 * word changed). Between two samples most counters of most vCPUs do not
 * move, and a delta is a few dozen bytes. Each target keeps a copy of
 * the block it last wrote, in its own allocation, which the deltas of
 * sweep_host() (log_sweep.c) compare with; add_vmm() compares a reader's
 * two latest readings instead, when the older is the one last written. A key entry
 * is written again every keyframe_interval samples and after any sample
 * that could not be written, so that a damaged record costs at most that
 * many samples of one target and never a wrong value: a delta names the
 * sample it applies to.
 *
 * A write that fails half way (ENOSPC) is cut back with ftruncate, so the
 * file holds only complete records unless the writer was killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"
#include "kvmstats_log.h"
#include "log_file.h"
#include "log_format.h"
#include "log_writer_int.h"

struct wschema {
	struct kvmstats_schema *s;
	uint32_t sid;
	uint32_t mark;		/* write attempt whose defs hold it */
	bool emitted;		/* defined in the current file */
};

struct wtarget {
	struct kvmstats_log_target t;	/* strings owned */
	uint32_t si;			/* index in w->schemas */
	size_t data_size;
	size_t words;			/* data_size / 8 */
	size_t missing_words;
	/* The data last written, for the next delta: our own copy (base,
	 * when base_own), or a reader's sample still holding it (base_smp,
	 * which must still carry the time it had then). */
	uint64_t *base;			/* in the same allocation */
	bool base_own;
	const struct kvmstats_sample *base_smp;
	uint64_t base_time;
	uint64_t base_seq;		/* its sample; 0: write a key entry */
	uint64_t seen;			/* seq of the last sample it was in */
	uint32_t deltas_left; /* before the next key entry */
	size_t index;			/* in w->targets */
	bool emitted;			/* TARGET record in the current file */
	bool gone;			/* GONE record still to write */
};

struct kvmstats_log_writer {
	struct kvmstats_ctx *ctx;
	char *path;
	struct kvmstats_log_writer_opts o;
	struct log_file f;		/* f.path is path */
	bool need_begin;
	enum begin_reason reason;

	struct wschema *schemas;
	size_t nschemas;
	struct wtarget **targets;
	size_t ntargets;
	uint32_t *hash;			/* index + 1 into targets; 0 empty */
	size_t hcap;
	size_t cursor;			/* where the next target probably is */
	size_t nlive;			/* targets not gone */
	size_t nseen;			/* targets added to this sample */
	bool dirty;			/* records to write before the sample */
	uint32_t next_tid;
	uint64_t freed;			/* moves when a target is freed */

	struct lw_sweep sweep;		/* sweep_host()'s (log_sweep.c) */

	struct log_buf defs;		/* records the sample needs first */
	struct log_buf smp;			/* the sample record */
	uint64_t seq;
	uint32_t attempt;
	bool in_sample;
	bool skip;			/* this sample is dropped unwritten */
	uint32_t count;

	int err;			/* last write error, 0 when writing */
	uint64_t retry_at;
	uint64_t samples, dropped;
	unsigned int rotations;
};

static uint64_t target_hash(const struct kvmstats_log_target *t,
			    const struct kvmstats_schema *s)
{
	uint64_t h = t->uid * 0x9e3779b97f4a7c15ull;

	h ^= ((uint64_t)(uint32_t)t->pid << 32 | (uint32_t)t->vm) * 0xbf58476d1ce4e5b9ull;
	h ^= (uint64_t)(uint32_t)t->vcpu * 0x94d049bb133111ebull;
	h ^= (uint64_t)(uintptr_t)s;
	return h ^ (h >> 29);
}

static bool target_same(const struct wtarget *wt,
			const struct kvmstats_log_target *t,
			const struct kvmstats_schema *s)
{
	return wt->t.uid == t->uid && wt->t.pid == t->pid && wt->t.vm == t->vm &&
	       wt->t.vcpu == t->vcpu && wt->t.schema == s;
}

static void hash_insert(struct kvmstats_log_writer *w, size_t idx)
{
	const struct wtarget *wt = w->targets[idx];
	size_t i = target_hash(&wt->t, wt->t.schema) & (w->hcap - 1);

	while (w->hash[i])
		i = (i + 1) & (w->hcap - 1);
	w->hash[i] = (uint32_t)idx + 1;
}

/* Rebuild the table for the live targets, at most half full. */
static int hash_rebuild(struct kvmstats_log_writer *w)
{
	size_t cap = 64;

	while (cap < w->ntargets * 2 + 2)
		cap *= 2;
	if (cap != w->hcap) {
		uint32_t *h = calloc(cap, sizeof(*h));

		if (!h)
			return -ENOMEM;
		free(w->hash);
		w->hash = h;
		w->hcap = cap;
	} else {
		memset(w->hash, 0, cap * sizeof(*w->hash));
	}
	for (size_t i = 0; i < w->ntargets; i++) {
		w->targets[i]->index = i;
		if (!w->targets[i]->gone)
			hash_insert(w, i);
	}
	return 0;
}

static struct wtarget *target_find(const struct kvmstats_log_writer *w,
				   const struct kvmstats_log_target *t,
				   const struct kvmstats_schema *s)
{
	size_t i;

	if (!w->hcap)
		return NULL;
	for (i = target_hash(t, s) & (w->hcap - 1); w->hash[i];
	     i = (i + 1) & (w->hcap - 1)) {
		struct wtarget *wt = w->targets[w->hash[i] - 1];

		if (target_same(wt, t, s))
			return wt;
	}
	return NULL;
}

static void target_free(struct wtarget *wt)
{
	if (!wt)
		return;
	free((char *)wt->t.name);
	free((char *)wt->t.id);
	free((char *)wt->t.source);
	free(wt);
}

/* Free a target of the list: pointers to targets kept elsewhere
 * (sweep_host()'s list) are stale from now on. */
static void target_drop(struct kvmstats_log_writer *w, struct wtarget *wt)
{
	target_free(wt);
	w->freed++;
}

static int schema_index(struct kvmstats_log_writer *w, struct kvmstats_schema *s)
{
	void *p;

	for (size_t i = 0; i < w->nschemas; i++)
		if (w->schemas[i].s == s)
			return (int)i;
	if (s->data_size > KS_MAX_DATA || s->key_len > REC_MAX_LEN / 2)
		return -E2BIG;
	p = realloc(w->schemas, (w->nschemas + 1) * sizeof(*w->schemas));
	if (!p)
		return -ENOMEM;
	w->schemas = p;
	w->schemas[w->nschemas] = (struct wschema){
		.s = kvmstats_schema__get(s), .sid = (uint32_t)w->nschemas + 1 };
	return (int)w->nschemas++;
}

static char *dup_or_empty(const char *s)
{
	return strdup(s ? s : "");
}

/* A target and, in the same allocation, its copy of the block last
 * written: the delta of sweep_host() reads the struct and the copy one
 * after the other, and each page is a TLB miss after a pread. */
static struct wtarget *wtarget_alloc(size_t data_size)
{
	size_t head = (sizeof(struct wtarget) + 63) & ~(size_t)63;
	size_t size = head + (data_size % 8 ? 0 : data_size);
	struct wtarget *wt = aligned_alloc(64, (size + 63) & ~(size_t)63);

	if (!wt)
		return NULL;
	memset(wt, 0, sizeof(*wt));
	if (!(data_size % 8) && data_size)
		wt->base = (uint64_t *)((char *)wt + head);
	return wt;
}

static struct wtarget *target_new(struct kvmstats_log_writer *w,
				  const struct kvmstats_log_target *t,
				  struct kvmstats_schema *s)
{
	int si = schema_index(w, s);
	struct wtarget *wt = si < 0 ? NULL : wtarget_alloc(s->data_size);
	void *p;

	if (!wt)
		goto err;
	wt->t = *t;
	wt->t.tid = ++w->next_tid;
	wt->t.schema = s;
	wt->t.name = dup_or_empty(t->name);
	wt->t.id = dup_or_empty(t->id);
	wt->t.source = dup_or_empty(t->source);
	wt->si = (uint32_t)si;
	wt->data_size = s->data_size;
	wt->words = s->data_size % 8 ? 0 : s->data_size / 8;
	wt->missing_words = (s->num + 63) / 64;
	if (!wt->t.name || !wt->t.id || !wt->t.source)
		goto err;
	if (strlen(wt->t.name) >= UINT16_MAX || strlen(wt->t.id) >= UINT16_MAX ||
	    strlen(wt->t.source) >= UINT16_MAX)
		goto err;
	p = realloc(w->targets, (w->ntargets + 1) * sizeof(*w->targets));
	if (!p)
		goto err;
	w->targets = p;
	wt->index = w->ntargets;
	w->targets[w->ntargets++] = wt;
	w->nlive++;
	w->dirty = true;
	if (w->ntargets * 2 + 2 > w->hcap) {
		if (hash_rebuild(w)) {
			w->ntargets--;
			goto err;
		}
	} else {
		hash_insert(w, w->ntargets - 1);
	}
	return wt;
err:
	target_free(wt);
	errno = si < 0 ? -si : ENOMEM;
	return NULL;
}

/* Forget what the file holds: a new file or a reopened one gets every
 * schema and target again, and key entries. */
static void file_forget(struct kvmstats_log_writer *w, enum begin_reason why)
{
	size_t j = 0;

	w->need_begin = true;
	w->reason = why;
	w->dirty = true;
	for (size_t i = 0; i < w->nschemas; i++)
		w->schemas[i].emitted = false;
	for (size_t i = 0; i < w->ntargets; i++) {
		struct wtarget *wt = w->targets[i];

		/* A target gone before the new file began is not in it. */
		if (wt->gone) {
			target_drop(w, wt);
			continue;
		}
		wt->emitted = false;
		wt->base_seq = 0;
		w->targets[j++] = wt;
	}
	if (j != w->ntargets) {
		w->ntargets = j;
		hash_rebuild(w);
	}
}

struct kvmstats_log_writer *
kvmstats_log_writer__open(struct kvmstats_ctx *ctx, const char *path,
			  const struct kvmstats_log_writer_opts *opts)
{
	struct kvmstats_log_writer *w;
	int err;

	w = calloc(1, sizeof(*w));
	if (!w) {
		errno = ENOMEM;
		return NULL;
	}
	err = ks_opts_copy(&w->o, sizeof(w->o), opts);
	if (err)
		goto err;
	w->ctx = ctx;
	w->f.fd = -1;
	if (!w->o.rotate_keep)
		w->o.rotate_keep = 1;
	if (!w->o.retry_ms)
		w->o.retry_ms = 1000;
	w->path = strdup(path);
	err = -ENOMEM;
	if (!w->path)
		goto err;
	w->f.path = w->path;
	if (w->o.errbuf && w->o.errbuf_sz)
		w->o.errbuf[0] = '\0';
	err = log_file_open(&w->f, w->o.flags & KVMSTATS_LOG_TRUNCATE,
			    w->o.errbuf, w->o.errbuf_sz);
	if (err)
		goto err;
	/* The caller's buffer served the open only. */
	w->o.errbuf = NULL;
	w->o.errbuf_sz = 0;
	w->need_begin = true;
	w->reason = BEGIN_OPEN;
	return w;
err:
	free(w->path);
	free(w);
	errno = -err;
	return NULL;
}

int kvmstats_log_writer__close(struct kvmstats_log_writer *w)
{
	int err = 0;

	if (!w)
		return 0;
	if (w->f.fd >= 0 && close(w->f.fd))
		err = -errno;
	for (size_t i = 0; i < w->ntargets; i++)
		target_free(w->targets[i]);
	for (size_t i = 0; i < w->nschemas; i++)
		kvmstats_schema__put(w->schemas[i].s);
	free(w->schemas);
	free(w->targets);
	free(w->hash);
	free(w->sweep.items);
	free(w->sweep.scratch);
	free(w->defs.p);
	free(w->smp.p);
	free(w->path);
	free(w);
	return err;
}

/* Enter the failing state: drop samples until retry_at. */
static int writer_fail(struct kvmstats_log_writer *w, int err)
{
	if (w->err != err)
		ks_log(w->ctx, KVMSTATS_LOG_WARN, "%s: %s: dropping samples",
		       w->path, strerror(-err));
	w->err = err;
	w->retry_at = ks_now_ns() + (uint64_t)w->o.retry_ms * 1000000ull;
	for (size_t i = 0; i < w->ntargets; i++)
		w->targets[i]->base_seq = 0;
	return err;
}

/* Open the file again (after a failure, a rotation, a reopen); the
 * reason is said once. */
static int file_open(struct kvmstats_log_writer *w)
{
	char why[320] = "";
	int err = log_file_open(&w->f, false, why, sizeof(why));

	if (err && w->err != err)
		ks_log(w->ctx, KVMSTATS_LOG_WARN, "%s", why);
	return err;
}

int kvmstats_log_writer__reopen(struct kvmstats_log_writer *w)
{
	int err;

	if (w->in_sample)
		return -EBUSY;
	log_file_close(&w->f);
	file_forget(w, BEGIN_REOPEN);
	err = file_open(w);
	return err ? writer_fail(w, err) : 0;
}

static int rotate(struct kvmstats_log_writer *w)
{
	dev_t dev = w->f.dev;
	ino_t ino = w->f.ino;
	int err = log_file_rotate(&w->f, w->o.rotate_keep, w->ctx);

	/* A new file began, or begins at the next open. */
	if (w->f.fd < 0 || w->f.dev != dev || w->f.ino != ino) {
		w->rotations++;
		file_forget(w, BEGIN_ROTATE);
	}
	return err;
}

int kvmstats_log_writer__begin(struct kvmstats_log_writer *w, uint64_t time_ns,
			       uint64_t rt_ns)
{
	struct log_sample s = { 0 };
	ssize_t at;
	int err = 0;

	if (w->in_sample)
		return -EBUSY;
	w->skip = false;
	if (w->err && ks_now_ns() < w->retry_at) {
		w->skip = true;
	} else if (w->f.fd < 0) {
		err = file_open(w);
	} else if (w->o.rotate_size && w->f.size >= w->o.rotate_size) {
		/* Here, before any entry is encoded: a new file starts with
		 * whole blocks, never with deltas against the old one. */
		err = rotate(w);
	}
	if (err) {
		writer_fail(w, err);
		w->skip = true;
	}
	w->seq++;
	w->count = 0;
	w->nseen = 0;
	w->cursor = 0;
	w->smp.len = 0;
	at = log_rec_open(&w->smp, REC_SAMPLE, sizeof(s));
	if (at < 0)
		return (int)at;
	s.seq = w->seq;
	s.time_ns = time_ns ? time_ns : ks_now_ns();
	s.realtime_ns = rt_ns ? rt_ns : log_realtime_ns();
	memcpy(w->smp.p + sizeof(struct log_rec), &s, sizeof(s));
	w->in_sample = true;
	return 0;
}

/* True when the 8 words at @a and @b are equal: a branch-free check in
 * vector registers (GCC generic vectors: SSE2 on any x86-64). */
static inline bool block_same(const uint64_t *a, const uint64_t *b)
{
	typedef uint64_t v4 __attribute__((vector_size(32)));
	v4 a0, a1, b0, b1, d;

	memcpy(&a0, a, 32);
	memcpy(&a1, a + 4, 32);
	memcpy(&b0, b, 32);
	memcpy(&b1, b + 4, 32);
	d = (a0 ^ b0) | (a1 ^ b1);
	return !(d[0] | d[1] | d[2] | d[3]);
}

/* Delta of @cur against @base, written at @out (room for the bitmap and
 * every word); with @update, @base becomes @cur. Returns bytes written.
 * Most blocks of 8 words of most targets do not change between two
 * samples: those cost one block_same(). */
static size_t delta_encode(const struct wtarget *wt, const uint64_t *cur,
			   uint64_t *base, bool update, unsigned char *out)
{
	size_t nbits = (wt->words + 63) / 64, full = wt->words & ~(size_t)7;
	uint64_t *bits = (uint64_t *)out, *val = bits + nbits;
	size_t n = 0;

	/* Nothing moved, the common case: libc's memcmp compares a block
	 * in the widest vectors the CPU has. */
	if (!memcmp(cur, base, wt->words * 8))
		return nbits * 8;
	memset(bits, 0, nbits * 8);
	for (size_t b = 0; b < wt->words; b += 8) {
		size_t end = b + 8 < wt->words ? b + 8 : wt->words;

		if (b < full && block_same(cur + b, base + b))
			continue;
		for (size_t i = b; i < end; i++) {
			if (cur[i] == base[i])
				continue;
			if (update)
				base[i] = cur[i];
			bits[i / 64] |= 1ull << (i % 64);
			val[n++] = cur[i];
		}
	}
	return (nbits + n) * 8;
}

static bool key_due(const struct wtarget *wt)
{
	return !wt->base_seq || !wt->words || !wt->deltas_left;
}

/* What the next delta of @wt is taken against, or NULL for a key entry.
 * A reader's target (@cur set) compares with the reader's previous
 * sample when that is the very one last written: no second copy of its
 * data to keep warm in the cache. */
static uint64_t *delta_base(const struct wtarget *wt,
			    const struct kvmstats_sample *cur,
			    const struct kvmstats_sample *prev)
{
	if (key_due(wt))
		return NULL;
	if (!cur)
		return wt->base_own ? wt->base : NULL;
	if (!wt->base_own && prev && prev == wt->base_smp &&
	    prev->time_ns == wt->base_time)
		return prev->data;
	return NULL;
}

/* A key entry: the whole block. A generic target keeps its own copy.
 * After a target's first key entry (in a file, or after a gap) the next
 * comes sooner by its tid: targets that began together spread their key
 * entries over the interval instead of all writing one in one sample. */
static int put_key(const struct kvmstats_log_writer *w, struct wtarget *wt,
		   const void *data, unsigned char *p,
		   const struct kvmstats_sample *cur)
{
	unsigned int every =
		w->o.keyframe_interval ? w->o.keyframe_interval : 256;

	memcpy(p, data, wt->data_size);
	memset(p + wt->data_size, 0, pad8(wt->data_size) - wt->data_size);
	wt->deltas_left = every - 1 - (wt->base_seq ? 0 : wt->t.tid % every);
	/* base is there whenever words is (wtarget_alloc()). */
	if (cur || !wt->words || !wt->base)
		return 0;
	memcpy(wt->base, data, wt->data_size);
	wt->base_own = true;
	return 0;
}

/* Can @wt's delta against @base go with a short header (version 2)? */
static bool short_ok(const struct kvmstats_log_writer *w,
		     const struct wtarget *wt, const uint64_t *base,
		     const uint64_t *missing)
{
	return base && !missing && w->f.version >= 2 &&
	       wt->base_seq + 1 == w->seq && wt->t.tid <= ENTRY_SHORT_TID_MAX;
}

/* A delta, its bitmap and words written at @p: the header's flags, and
 * where the body ends. */
static unsigned char *put_delta(struct wtarget *wt, const void *data,
				uint64_t *base, unsigned char *p,
				uint32_t *flags)
{
	size_t len = delta_encode(wt, data, base, base == wt->base, p);

	wt->deltas_left--;
	*flags = len > (wt->words + 63) / 64 * 8 ? ENTRY_DELTA : ENTRY_SAME;
	return *flags == ENTRY_DELTA ? p + len : p;
}

/* The short header of a delta (version 2). */
static void put_short(struct kvmstats_log_writer *w, const struct wtarget *wt,
		      size_t at, const unsigned char *end, uint32_t flags)
{
	struct log_entry_short e = {
		.tid = wt->t.tid | ENTRY_SHORT |
		       (flags == ENTRY_DELTA ? ENTRY_SHORT_DELTA : 0),
		.len = (uint32_t)(end - (w->smp.p + at + sizeof(e))),
	};

	memcpy(w->smp.p + at, &e, sizeof(e));
	w->smp.len = at + sizeof(e) + e.len;
}

static int add_entry(struct kvmstats_log_writer *w, struct wtarget *wt,
		     const void *data, const uint64_t *missing, int error,
		     const struct kvmstats_sample *cur,
		     const struct kvmstats_sample *prev)
{
	size_t room = sizeof(struct log_entry) + pad8(wt->data_size) +
		      ((wt->words + 63) / 64 + wt->missing_words) * 8;
	struct log_entry e = { .tid = wt->t.tid, .error = error };
	uint64_t *base = error || !data ? NULL : delta_base(wt, cur, prev);
	bool is_short = short_ok(w, wt, base, missing);
	unsigned char *p;
	size_t at;

	if (log_buf_reserve(&w->smp, room))
		return -ENOMEM;
	at = w->smp.len;
	p = w->smp.p + at +
	    (is_short ? sizeof(struct log_entry_short) : sizeof(e));
	if (error || !data) {
		e.error = error ? error : -ENODATA;
	} else if (!base) {
		e.flags = ENTRY_KEY;
		if (put_key(w, wt, data, p, cur))
			return -ENOMEM;
		p += pad8(wt->data_size);
	} else {
		e.base = wt->base_seq;
		p = put_delta(wt, data, base, p, &e.flags);
	}
	if (!e.error) {
		wt->base_seq = w->seq;
		if (cur) {
			wt->base_own = false;
			wt->base_smp = cur;
			wt->base_time = cur->time_ns;
		}
		if (missing) {
			e.flags |= ENTRY_MISSING;
			memcpy(p, missing, wt->missing_words * 8);
			p += wt->missing_words * 8;
		}
	}
	w->count++;
	if (is_short) {
		put_short(w, wt, at, p, e.flags);
		return 0;
	}
	e.len = (uint32_t)(p - (w->smp.p + at + sizeof(e)));
	memcpy(w->smp.p + at, &e, sizeof(e));
	w->smp.len = at + sizeof(e) + e.len;
	return 0;
}

/* The target of @t, found or made. */
static struct wtarget *target_get(struct kvmstats_log_writer *w,
				  const struct kvmstats_log_target *t,
				  struct kvmstats_schema *schema)
{
	struct wtarget *wt;

	/* Targets come in the same order every sample: try the one after
	 * the last before hashing. */
	wt = w->cursor < w->ntargets ? w->targets[w->cursor] : NULL;
	if (!wt || wt->gone || !target_same(wt, t, schema))
		wt = target_find(w, t, schema);
	return wt ? wt : target_new(w, t, schema);
}

/* Mark @wt seen and add its entry. */
static int add_to(struct kvmstats_log_writer *w, struct wtarget *wt,
		  const void *data, const uint64_t *missing, int error,
		  const struct kvmstats_sample *cur,
		  const struct kvmstats_sample *prev)
{
	if (wt->seen == w->seq)
		return -EEXIST;
	wt->seen = w->seq;
	w->nseen++;
	w->cursor = wt->index + 1;
	if (w->skip)
		return 0;
	return add_entry(w, wt, data, missing, error, cur, prev);
}

/* Find or make the target, mark it seen, and add its entry. */
static int add_one(struct kvmstats_log_writer *w,
		   const struct kvmstats_log_target *t,
		   struct kvmstats_schema *schema, const void *data,
		   const uint64_t *missing, int error,
		   const struct kvmstats_sample *cur,
		   const struct kvmstats_sample *prev)
{
	struct wtarget *wt;

	if (!w->in_sample || !t || !schema)
		return -EINVAL;
	wt = target_get(w, t, schema);
	if (!wt)
		return -errno;
	return add_to(w, wt, data, missing, error, cur, prev);
}

int kvmstats_log_writer__add(struct kvmstats_log_writer *w,
			     const struct kvmstats_log_target *t,
			     struct kvmstats_schema *schema, const void *data,
			     const uint64_t *missing, int error)
{
	return add_one(w, t, schema, data, missing, error, NULL, NULL);
}

static int add_reader(struct kvmstats_log_writer *w,
		      struct kvmstats_log_target *t, struct kvmstats_reader *r)
{
	const struct kvmstats_sample *cur = kvmstats_reader__cur(r);
	int err = kvmstats_reader__error(r);

	t->id = kvmstats_reader__id(r);
	if (!cur && !err)
		err = -ENODATA;
	err = add_one(w, t, kvmstats_reader__schema(r), err ? NULL : cur->data,
		      kvmstats_reader__missing(r), err, err ? NULL : cur,
		      kvmstats_reader__prev(r));
	/* Two vCPUs of one VM with one index (a confused VMM): log the first. */
	return err == -EEXIST ? 0 : err;
}

int kvmstats_log_writer__add_vmm(struct kvmstats_log_writer *w,
				 const struct kvmstats_vmm *v)
{
	struct kvmstats_log_target t = {
		.pid = kvmstats_vmm__pid(v),
		.uid = kvmstats_vmm__uid(v),
		.name = kvmstats_vmm__name(v),
		.source = kvmstats_vmm__source(v),
	};
	int err;

	for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++) {
		struct kvmstats_vm *vm = kvmstats_vmm__vm(v, j);
		struct kvmstats_reader *r = kvmstats_vm__reader(vm);

		t.vm = (int32_t)j;
		t.vcpu = -1;
		if (r && (err = add_reader(w, &t, r)))
			return err;
		for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++) {
			int index;

			r = kvmstats_vm__vcpu(vm, k, &index);
			t.vcpu = index;
			if (r && (err = add_reader(w, &t, r)))
				return err;
		}
	}
	return 0;
}

static int def_schema(struct kvmstats_log_writer *w, struct wschema *ws)
{
	int err = log_put_schema(&w->defs, ws->sid, ws->s->data_size, ws->s->key,
				 ws->s->key_len);

	if (!err)
		ws->mark = w->attempt;
	return err;
}

/* The records the sample needs before it, in w->defs. */
static int build_defs(struct kvmstats_log_writer *w)
{
	int err = 0;

	w->defs.len = 0;
	w->attempt++;
	if (!w->dirty && !w->need_begin)
		return 0;
	if (w->need_begin)
		err = log_put_begin(&w->defs, w->reason, kvmstats_version_string());
	for (size_t i = 0; i < w->ntargets && !err; i++) {
		struct wtarget *wt = w->targets[i];
		struct wschema *ws = &w->schemas[wt->si];

		if (wt->gone) {
			if (wt->emitted)
				err = log_put_gone(&w->defs, wt->t.tid);
			continue;
		}
		if (wt->emitted)
			continue;
		if (!ws->emitted && ws->mark != w->attempt)
			err = def_schema(w, ws);
		if (!err)
			err = log_put_target(&w->defs, &wt->t, ws->sid);
	}
	return err;
}

/* Targets not added to this sample are gone. */
static void sweep_gone(struct kvmstats_log_writer *w)
{
	bool changed = false;
	size_t j = 0;

	/* Every live target was added: nobody left (the common case). */
	if (w->nseen == w->nlive)
		return;
	for (size_t i = 0; i < w->ntargets; i++) {
		struct wtarget *wt = w->targets[i];

		if (!wt->gone && wt->seen != w->seq) {
			wt->gone = true;
			w->nlive--;
			w->dirty |= wt->emitted;
			changed = true;
		}
		if (wt->gone && !wt->emitted) {
			target_drop(w, wt);
			continue;
		}
		w->targets[j++] = wt;
	}
	if (changed || j != w->ntargets) {
		w->ntargets = j;
		hash_rebuild(w);
	}
}

static void commit_done(struct kvmstats_log_writer *w, size_t total)
{
	size_t j = 0;

	w->need_begin = false;
	w->f.size += total;
	w->samples++;
	w->err = 0;
	if (!w->dirty)
		return;
	w->dirty = false;
	for (size_t i = 0; i < w->nschemas; i++)
		if (w->schemas[i].mark == w->attempt)
			w->schemas[i].emitted = true;
	for (size_t i = 0; i < w->ntargets; i++) {
		struct wtarget *wt = w->targets[i];

		if (wt->gone) {
			target_drop(w, wt);
			continue;
		}
		wt->emitted = true;
		w->targets[j++] = wt;
	}
	if (j != w->ntargets) {
		w->ntargets = j;
		hash_rebuild(w);
	}
}

int kvmstats_log_writer__commit(struct kvmstats_log_writer *w)
{
	struct log_sample *s;
	struct iovec iov[2];
	size_t total;
	ssize_t n;
	int err;

	if (!w->in_sample)
		return -EINVAL;
	w->in_sample = false;
	sweep_gone(w);
	if (w->skip) {
		w->dropped++;
		return -EAGAIN;
	}
	err = build_defs(w);
	if (err) {
		w->dropped++;
		return writer_fail(w, err);
	}
	s = (struct log_sample *)(w->smp.p + sizeof(struct log_rec));
	s->count = w->count;
	log_rec_seal(&w->smp, 0);
	iov[0] = (struct iovec){ w->defs.p, w->defs.len };
	iov[1] = (struct iovec){ w->smp.p, w->smp.len };
	total = w->defs.len + w->smp.len;
	n = writev(w->f.fd, iov, 2);
	if (n == (ssize_t)total) {
		commit_done(w, total);
		if ((w->o.flags & KVMSTATS_LOG_SYNC) && fdatasync(w->f.fd))
			return writer_fail(w, -errno);
		return 0;
	}
	err = n < 0 ? -errno : -ENOSPC;
	/* Cut a partial record off, so that the file holds only whole ones. */
	if (n > 0 && ftruncate(w->f.fd, (off_t)w->f.size))
		ks_log(w->ctx, KVMSTATS_LOG_WARN, "%s: cannot cut a partial record: %s",
		       w->path, strerror(errno));
	w->dropped++;
	return writer_fail(w, err);
}

int kvmstats_log_writer__write_host(struct kvmstats_log_writer *w,
				    const struct kvmstats_host *h)
{
	int err = kvmstats_log_writer__begin(w, kvmstats_host__time_ns(h), 0);

	for (size_t i = 0; !err && i < kvmstats_host__num_vmms(h); i++)
		err = kvmstats_log_writer__add_vmm(w, kvmstats_host__vmm(h, i));
	if (err && w->in_sample) {
		/* Keep the file consistent: drop the half-built sample. */
		w->skip = true;
		kvmstats_log_writer__commit(w);
		return err;
	}
	return err ? err : kvmstats_log_writer__commit(w);
}

/* ---- for log_sweep.c (log_writer_int.h) ---- */

int lw_add_reader(struct kvmstats_log_writer *w, struct kvmstats_log_target *t,
		  struct kvmstats_reader *r)
{
	return add_reader(w, t, r);
}

struct wtarget *lw_target(struct kvmstats_log_writer *w,
			  const struct kvmstats_log_target *t,
			  struct kvmstats_schema *schema)
{
	if (!w->in_sample || !t || !schema) {
		errno = EINVAL;
		return NULL;
	}
	return target_get(w, t, schema);
}

int lw_add_target(struct kvmstats_log_writer *w, struct wtarget *wt,
		  const void *data, int error)
{
	return add_to(w, wt, data, NULL, error, NULL, NULL);
}

uint64_t lw_freed(const struct kvmstats_log_writer *w)
{
	return w->freed;
}

/* @wt's struct and, in the same allocation, its copy of the block last
 * written: known from the address alone (wtarget_alloc()), without
 * waiting for the struct. */
void lw_prefetch_target(const struct wtarget *wt, size_t data_size, bool block)
{
	size_t head = (sizeof(struct wtarget) + 63) & ~(size_t)63;
	const char *p = (const char *)wt;

	if (!block) {
		for (size_t i = 0; i < sizeof(*wt); i += 64)
			__builtin_prefetch(p + i, 1);
		return;
	}
	if (data_size % 8)
		return;
	for (size_t i = 0; i < data_size; i += 64)
		__builtin_prefetch(p + head + i, 1);
}

struct lw_sweep *lw_sweep(struct kvmstats_log_writer *w)
{
	return &w->sweep;
}

struct kvmstats_ctx *lw_ctx(const struct kvmstats_log_writer *w)
{
	return w->ctx;
}

const char *lw_path(const struct kvmstats_log_writer *w)
{
	return w->path;
}

uint64_t kvmstats_log_writer__samples(const struct kvmstats_log_writer *w)
{
	return w->samples;
}

uint64_t kvmstats_log_writer__dropped(const struct kvmstats_log_writer *w)
{
	return w->dropped;
}

uint64_t kvmstats_log_writer__size(const struct kvmstats_log_writer *w)
{
	return w->f.size;
}

unsigned int kvmstats_log_writer__rotations(const struct kvmstats_log_writer *w)
{
	return w->rotations;
}

