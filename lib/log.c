// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The statistics log: an append-only file of CRC-checked records (see
 * kvmstats_log.h for the records, kvmstats-record(1) for the bytes).
 *
 * Cost. A pread of a vCPU stats fd moves about 1.1 KiB; checksumming and
 * writing those bytes again costs more than the pread itself. So a
 * target's first entry in a file is its whole data block (a key entry),
 * and the next ones are deltas against the previous entry: a bitmap of
 * the u64 words that changed, then those words (nothing at all when no
 * word changed). Between two samples most counters of most vCPUs do not
 * move, and a delta is a few dozen bytes. For a reader's target the
 * previous entry is the reader's previous sample, still in memory, so
 * that no second copy of every block is kept (and kept warm). A key entry
 * is written again every keyframe_interval samples and after any sample
 * that could not be written, so that a damaged record costs at most that
 * many samples of one target and never a wrong value: a delta names the
 * sample it applies to.
 *
 * Damage. Every record starts with a sync word at an 8-byte aligned
 * offset and ends its CRC'd payload on one; a reader that meets a bad
 * record scans forward for the next sync word whose record checks. A
 * write that fails half way (ENOSPC) is cut back with ftruncate, so the
 * file holds only complete records unless the writer was killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "internal.h"
#include "kvmstats_log.h"

/* ---- the bytes on disk (host byte order; see endian) ---------------- */

#define LOG_MAGIC "KVMSTLOG"
#define LOG_ENDIAN 0x01020304u
#define REC_SYNC 0xa55a4b52u
#define REC_MAX_LEN (256u << 20)
#define MAX_ID (1u << 24)	/* schema and target ids a reader accepts */

struct log_file_hdr {
	char magic[8];
	uint32_t version;
	uint32_t hdr_size;
	uint32_t endian;
	uint32_t flags;
	uint32_t reserved;
	uint32_t crc;		/* of the bytes before it */
};

enum rec_type {
	REC_BEGIN = 1,
	REC_SCHEMA = 2,
	REC_TARGET = 3,
	REC_GONE = 4,
	REC_SAMPLE = 5,
};

struct log_rec {
	uint32_t sync;
	uint16_t type;
	uint16_t flags;
	uint32_t len;		/* payload bytes, a multiple of 8 */
	uint32_t crc;		/* of type, flags, len, then the payload */
};

enum begin_reason {
	BEGIN_OPEN,
	BEGIN_ROTATE,
	BEGIN_REOPEN,
};

struct log_begin {
	uint64_t time_ns;
	uint64_t realtime_ns;
	uint32_t pid;
	uint32_t reason;	/* enum begin_reason */
	char host[64];
	char version[16];
};

struct log_schema {
	uint32_t sid;
	uint32_t data_size;
	uint32_t key_len;	/* bytes of header + descriptors that follow */
	uint32_t reserved;
};

struct log_target {
	uint32_t tid;
	uint32_t sid;
	int32_t pid;
	int32_t vm;
	int32_t vcpu;
	uint32_t flags;
	uint64_t uid;
	uint16_t name_len;	/* each with its NUL; the strings follow */
	uint16_t id_len;
	uint16_t source_len;
	uint16_t reserved;
};

struct log_gone {
	uint32_t tid;
	uint32_t reserved;
};

struct log_sample {
	uint64_t seq;		/* per writer session, never 0 */
	uint64_t time_ns;	/* CLOCK_MONOTONIC */
	uint64_t realtime_ns;	/* CLOCK_REALTIME */
	uint32_t count;
	uint32_t reserved;
};

enum {
	ENTRY_KEY = 1u << 0,	/* the whole data block follows */
	ENTRY_DELTA = 1u << 1,	/* changed-word bitmap, then those words */
	ENTRY_MISSING = 1u << 2,	/* a missing-stats bitmap ends the entry */
	ENTRY_SAME = 1u << 3,	/* a delta with no change: no body */
};

struct log_entry {
	uint32_t tid;
	uint32_t len;		/* bytes after this header */
	int32_t error;		/* 0, or -errno: no data follows */
	uint32_t flags;
	uint64_t base;		/* delta: seq of the sample it applies to */
};

_Static_assert(sizeof(struct log_file_hdr) == 32, "file header layout");
_Static_assert(sizeof(struct log_rec) == 16, "record header layout");
_Static_assert(sizeof(struct log_target) == 40, "target layout");
_Static_assert(sizeof(struct log_sample) == 32, "sample layout");
_Static_assert(sizeof(struct log_entry) == 24, "entry layout");

static inline size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

static uint32_t rec_crc(const struct log_rec *h, const void *payload)
{
	uLong c = crc32(0L, Z_NULL, 0);

	c = crc32(c, (const Bytef *)&h->type, 8);
	return (uint32_t)crc32(c, payload, h->len);
}

static uint32_t hdr_crc(const struct log_file_hdr *h)
{
	return (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)h,
			       offsetof(struct log_file_hdr, crc));
}

static void file_hdr_init(struct log_file_hdr *h)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, LOG_MAGIC, sizeof(h->magic));
	h->version = KVMSTATS_LOG_VERSION;
	h->hdr_size = sizeof(*h);
	h->endian = LOG_ENDIAN;
	h->crc = hdr_crc(h);
}

/* 0, -EINVAL (not a log), -EPROTONOSUPPORT (newer or foreign). */
static int file_hdr_check(const struct log_file_hdr *h)
{
	if (memcmp(h->magic, LOG_MAGIC, sizeof(h->magic)) || h->crc != hdr_crc(h))
		return -EINVAL;
	if (h->endian != LOG_ENDIAN || h->version != KVMSTATS_LOG_VERSION ||
	    h->hdr_size != sizeof(*h))
		return -EPROTONOSUPPORT;
	return 0;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A growable byte buffer; grows only when a sample is bigger than any
 * before it. */
struct buf {
	unsigned char *p;
	size_t len, cap;
};

static int buf_reserve(struct buf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 4096;
	void *p;

	if (b->len + more <= b->cap)
		return 0;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* Append a record header and payload (padded to 8); the CRC is filled
 * in by rec_seal(). Returns the header's offset in @b or -ENOMEM. */
static ssize_t rec_open(struct buf *b, enum rec_type type, size_t payload)
{
	struct log_rec h = { .sync = REC_SYNC, .type = type };
	size_t at = b->len;

	if (buf_reserve(b, sizeof(h) + pad8(payload)))
		return -ENOMEM;
	memcpy(b->p + at, &h, sizeof(h));
	memset(b->p + at + sizeof(h), 0, pad8(payload));
	b->len += sizeof(h) + pad8(payload);
	return (ssize_t)at;
}

static void rec_seal(struct buf *b, size_t at)
{
	struct log_rec *h = (struct log_rec *)(b->p + at);

	h->len = (uint32_t)(b->len - at - sizeof(*h));
	h->crc = rec_crc(h, h + 1);
}

/* ---- writer ---------------------------------------------------------- */

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
	uint64_t *base;
	bool base_own;
	const struct kvmstats_sample *base_smp;
	uint64_t base_time;
	uint64_t base_seq;		/* its sample; 0: write a key entry */
	uint64_t seen;			/* seq of the last sample it was in */
	uint32_t since_key;
	size_t index;			/* in w->targets */
	bool emitted;			/* TARGET record in the current file */
	bool gone;			/* GONE record still to write */
};

struct kvmstats_log_writer {
	struct kvmstats_ctx *ctx;
	char *path;
	struct kvmstats_log_writer_opts o;
	int fd;
	uint64_t size;			/* of the current file */
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

	struct buf defs;		/* records the sample needs first */
	struct buf smp;			/* the sample record */
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
	free(wt->base);
	free(wt);
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

static struct wtarget *target_new(struct kvmstats_log_writer *w,
				  const struct kvmstats_log_target *t,
				  struct kvmstats_schema *s)
{
	struct wtarget *wt = calloc(1, sizeof(*wt));
	int si = schema_index(w, s);
	void *p;

	if (!wt || si < 0)
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
	/* Spread key entries over the interval instead of all at once. */
	wt->since_key = wt->t.tid;
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
			target_free(wt);
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

static int write_all(int fd, const void *p, size_t len)
{
	ssize_t n = write(fd, p, len);

	if (n == (ssize_t)len)
		return 0;
	return n < 0 ? -errno : -ENOSPC;
}

/* Check an existing file (or start an empty one) before appending. */
static int file_prepare(struct kvmstats_log_writer *w, char *errbuf, size_t errsz)
{
	struct log_file_hdr h;
	struct stat st;
	ssize_t n;
	int err;

	if (fstat(w->fd, &st))
		return -errno;
	w->size = (uint64_t)st.st_size;
	if (w->size) {
		n = pread(w->fd, &h, sizeof(h), 0);
		if (n < 0)
			return -errno;
		/* A header cut short by a crash while creating: start over. */
		if ((size_t)n < sizeof(h) &&
		    !memcmp(&h, LOG_MAGIC, (size_t)n < 8 ? (size_t)n : 8)) {
			if (ftruncate(w->fd, 0))
				return -errno;
			w->size = 0;
		} else if ((err = file_hdr_check(&h))) {
			ks_err(errbuf, errsz, "%s: %s", w->path,
			       err == -EINVAL ? "exists and is not a kvmstats log"
					      : "is a log of another version or byte order");
			return err;
		}
	}
	if (!w->size) {
		file_hdr_init(&h);
		err = write_all(w->fd, &h, sizeof(h));
		if (err) {
			/* Leave no half header behind (best effort: the
			 * next open starts over from a short header). */
			(void)!ftruncate(w->fd, 0);
			return err;
		}
		w->size = sizeof(h);
	}
	/* Records start 8-aligned; a writer killed mid-record may have left
	 * the end anywhere. */
	if (w->size % 8) {
		static const char zero[8];
		size_t pad = 8 - w->size % 8;

		err = write_all(w->fd, zero, pad);
		if (err)
			return err;
		w->size += pad;
	}
	return 0;
}

static int file_open(struct kvmstats_log_writer *w, bool truncate,
		     char *errbuf, size_t errsz)
{
	int flags = O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY;
	int err;

	w->fd = open(w->path, flags | (truncate ? O_TRUNC : 0), 0644);
	if (w->fd < 0) {
		err = -errno;
		ks_err(errbuf, errsz, "%s: %s", w->path, strerror(errno));
		return err;
	}
	if (flock(w->fd, LOCK_EX | LOCK_NB)) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		ks_err(errbuf, errsz, "%s: %s", w->path,
		       err == -EBUSY ? "another recorder is writing to it"
				     : strerror(-err));
		goto err;
	}
	err = file_prepare(w, errbuf, errsz);
	if (err) {
		if (errbuf && !*errbuf)
			ks_err(errbuf, errsz, "%s: %s", w->path, strerror(-err));
		goto err;
	}
	return 0;
err:
	close(w->fd);
	w->fd = -1;
	return err;
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
	w->fd = -1;
	if (!w->o.rotate_keep)
		w->o.rotate_keep = 1;
	if (!w->o.retry_ms)
		w->o.retry_ms = 1000;
	w->path = strdup(path);
	err = -ENOMEM;
	if (!w->path)
		goto err;
	if (w->o.errbuf && w->o.errbuf_sz)
		w->o.errbuf[0] = '\0';
	err = file_open(w, w->o.flags & KVMSTATS_LOG_TRUNCATE, w->o.errbuf,
			w->o.errbuf_sz);
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
	if (w->fd >= 0 && close(w->fd))
		err = -errno;
	for (size_t i = 0; i < w->ntargets; i++)
		target_free(w->targets[i]);
	for (size_t i = 0; i < w->nschemas; i++)
		kvmstats_schema__put(w->schemas[i].s);
	free(w->schemas);
	free(w->targets);
	free(w->hash);
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

int kvmstats_log_writer__reopen(struct kvmstats_log_writer *w)
{
	int err;

	if (w->in_sample)
		return -EBUSY;
	if (w->fd >= 0)
		close(w->fd);
	file_forget(w, BEGIN_REOPEN);
	err = file_open(w, false, NULL, 0);
	return err ? writer_fail(w, err) : 0;
}

static int rotate(struct kvmstats_log_writer *w)
{
	size_t len = strlen(w->path) + 16;
	char *from = malloc(len), *to = malloc(len);
	int err = -ENOMEM;

	if (!from || !to)
		goto out;
	for (unsigned int i = w->o.rotate_keep; i > 1; i--) {
		snprintf(from, len, "%s.%u", w->path, i - 1);
		snprintf(to, len, "%s.%u", w->path, i);
		if (rename(from, to) && errno != ENOENT)
			ks_log(w->ctx, KVMSTATS_LOG_WARN, "rename %s: %s", from,
			       strerror(errno));
	}
	snprintf(to, len, "%s.1", w->path);
	if (rename(w->path, to)) {
		err = -errno;
		goto out;
	}
	close(w->fd);
	w->fd = -1;
	w->rotations++;
	file_forget(w, BEGIN_ROTATE);
	err = file_open(w, false, NULL, 0);
out:
	free(from);
	free(to);
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
	} else if (w->fd < 0) {
		err = file_open(w, false, NULL, 0);
	} else if (w->o.rotate_size && w->size >= w->o.rotate_size) {
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
	at = rec_open(&w->smp, REC_SAMPLE, sizeof(s));
	if (at < 0)
		return (int)at;
	s.seq = w->seq;
	s.time_ns = time_ns ? time_ns : ks_now_ns();
	s.realtime_ns = rt_ns ? rt_ns : realtime_ns();
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

static bool key_due(const struct kvmstats_log_writer *w, const struct wtarget *wt)
{
	unsigned int every = w->o.keyframe_interval ? w->o.keyframe_interval : 256;

	return !wt->base_seq || !wt->words || wt->since_key % every == 0;
}

/* What the next delta of @wt is taken against, or NULL for a key entry.
 * A reader's target (@cur set) compares with the reader's previous
 * sample when that is the very one last written: no second copy of its
 * data to keep warm in the cache. */
static uint64_t *delta_base(const struct kvmstats_log_writer *w,
			    const struct wtarget *wt,
			    const struct kvmstats_sample *cur,
			    const struct kvmstats_sample *prev)
{
	if (key_due(w, wt))
		return NULL;
	if (!cur)
		return wt->base_own ? wt->base : NULL;
	if (!wt->base_own && prev && prev == wt->base_smp &&
	    prev->time_ns == wt->base_time)
		return prev->data;
	return NULL;
}

/* A key entry: the whole block. A generic target keeps its own copy. */
static int put_key(struct wtarget *wt, const void *data, unsigned char *p,
		   const struct kvmstats_sample *cur)
{
	memcpy(p, data, wt->data_size);
	memset(p + wt->data_size, 0, pad8(wt->data_size) - wt->data_size);
	wt->since_key = 1;
	if (cur || !wt->words)
		return 0;
	if (!wt->base) {
		wt->base = malloc(pad8(wt->data_size));
		if (!wt->base)
			return -ENOMEM;
	}
	memcpy(wt->base, data, wt->data_size);
	wt->base_own = true;
	return 0;
}

static int add_entry(struct kvmstats_log_writer *w, struct wtarget *wt,
		     const void *data, const uint64_t *missing, int error,
		     const struct kvmstats_sample *cur,
		     const struct kvmstats_sample *prev)
{
	size_t room = sizeof(struct log_entry) + pad8(wt->data_size) +
		      ((wt->words + 63) / 64 + wt->missing_words) * 8;
	struct log_entry e = { .tid = wt->t.tid, .error = error };
	uint64_t *base;
	unsigned char *p;
	size_t at;

	if (buf_reserve(&w->smp, room))
		return -ENOMEM;
	at = w->smp.len;
	p = w->smp.p + at + sizeof(e);
	if (error || !data) {
		e.error = error ? error : -ENODATA;
	} else if (!(base = delta_base(w, wt, cur, prev))) {
		e.flags = ENTRY_KEY;
		if (put_key(wt, data, p, cur))
			return -ENOMEM;
		p += pad8(wt->data_size);
	} else {
		size_t len = delta_encode(wt, data, base, base == wt->base, p);

		e.base = wt->base_seq;
		e.flags = len > (wt->words + 63) / 64 * 8 ? ENTRY_DELTA : ENTRY_SAME;
		if (e.flags == ENTRY_DELTA)
			p += len;
		wt->since_key++;
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
	e.len = (uint32_t)(p - (w->smp.p + at + sizeof(e)));
	memcpy(w->smp.p + at, &e, sizeof(e));
	w->smp.len = at + sizeof(e) + e.len;
	w->count++;
	return 0;
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
	/* Targets come in the same order every sample: try the one after
	 * the last before hashing. */
	wt = w->cursor < w->ntargets ? w->targets[w->cursor] : NULL;
	if (!wt || wt->gone || !target_same(wt, t, schema))
		wt = target_find(w, t, schema);
	if (!wt) {
		wt = target_new(w, t, schema);
		if (!wt)
			return -errno;
	}
	if (wt->seen == w->seq)
		return -EEXIST;
	wt->seen = w->seq;
	w->nseen++;
	w->cursor = wt->index + 1;
	if (w->skip)
		return 0;
	return add_entry(w, wt, data, missing, error, cur, prev);
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
	struct log_schema s = {
		.sid = ws->sid,
		.data_size = (uint32_t)ws->s->data_size,
		.key_len = (uint32_t)ws->s->key_len,
	};
	ssize_t at = rec_open(&w->defs, REC_SCHEMA, sizeof(s) + s.key_len);

	if (at < 0)
		return (int)at;
	memcpy(w->defs.p + at + sizeof(struct log_rec), &s, sizeof(s));
	memcpy(w->defs.p + at + sizeof(struct log_rec) + sizeof(s), ws->s->key,
	       s.key_len);
	rec_seal(&w->defs, (size_t)at);
	ws->mark = w->attempt;
	return 0;
}

static int def_target(struct kvmstats_log_writer *w, const struct wtarget *wt)
{
	struct log_target t = {
		.tid = wt->t.tid,
		.sid = w->schemas[wt->si].sid,
		.pid = wt->t.pid,
		.vm = wt->t.vm,
		.vcpu = wt->t.vcpu,
		.uid = wt->t.uid,
		.name_len = (uint16_t)(strlen(wt->t.name) + 1),
		.id_len = (uint16_t)(strlen(wt->t.id) + 1),
		.source_len = (uint16_t)(strlen(wt->t.source) + 1),
	};
	size_t len = sizeof(t) + t.name_len + t.id_len + t.source_len;
	ssize_t at = rec_open(&w->defs, REC_TARGET, len);
	unsigned char *p;

	if (at < 0)
		return (int)at;
	p = w->defs.p + at + sizeof(struct log_rec);
	memcpy(p, &t, sizeof(t));
	p += sizeof(t);
	memcpy(p, wt->t.name, t.name_len);
	memcpy(p + t.name_len, wt->t.id, t.id_len);
	memcpy(p + t.name_len + t.id_len, wt->t.source, t.source_len);
	rec_seal(&w->defs, (size_t)at);
	return 0;
}

static int def_gone(struct kvmstats_log_writer *w, const struct wtarget *wt)
{
	struct log_gone g = { .tid = wt->t.tid };
	ssize_t at = rec_open(&w->defs, REC_GONE, sizeof(g));

	if (at < 0)
		return (int)at;
	memcpy(w->defs.p + at + sizeof(struct log_rec), &g, sizeof(g));
	rec_seal(&w->defs, (size_t)at);
	return 0;
}

static int def_begin(struct kvmstats_log_writer *w)
{
	struct log_begin b = {
		.time_ns = ks_now_ns(),
		.realtime_ns = realtime_ns(),
		.pid = (uint32_t)getpid(),
		.reason = w->reason,
	};
	struct utsname u;
	ssize_t at = rec_open(&w->defs, REC_BEGIN, sizeof(b));

	if (at < 0)
		return (int)at;
	if (!uname(&u))
		snprintf(b.host, sizeof(b.host), "%.63s", u.nodename);
	snprintf(b.version, sizeof(b.version), "%s", kvmstats_version_string());
	memcpy(w->defs.p + at + sizeof(struct log_rec), &b, sizeof(b));
	rec_seal(&w->defs, (size_t)at);
	return 0;
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
		err = def_begin(w);
	for (size_t i = 0; i < w->ntargets && !err; i++) {
		struct wtarget *wt = w->targets[i];
		struct wschema *ws = &w->schemas[wt->si];

		if (wt->gone) {
			if (wt->emitted)
				err = def_gone(w, wt);
			continue;
		}
		if (wt->emitted)
			continue;
		if (!ws->emitted && ws->mark != w->attempt)
			err = def_schema(w, ws);
		if (!err)
			err = def_target(w, wt);
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
			target_free(wt);
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
	w->size += total;
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
			target_free(wt);
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
	rec_seal(&w->smp, 0);
	iov[0] = (struct iovec){ w->defs.p, w->defs.len };
	iov[1] = (struct iovec){ w->smp.p, w->smp.len };
	total = w->defs.len + w->smp.len;
	n = writev(w->fd, iov, 2);
	if (n == (ssize_t)total) {
		commit_done(w, total);
		if ((w->o.flags & KVMSTATS_LOG_SYNC) && fdatasync(w->fd))
			return writer_fail(w, -errno);
		return 0;
	}
	err = n < 0 ? -errno : -ENOSPC;
	/* Cut a partial record off, so that the file holds only whole ones. */
	if (n > 0 && ftruncate(w->fd, (off_t)w->size))
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
	return w->size;
}

unsigned int kvmstats_log_writer__rotations(const struct kvmstats_log_writer *w)
{
	return w->rotations;
}

/* ---- reader ------------------------------------------------------------ */

struct rtarget {
	struct kvmstats_log_target t;
	char *strings;
	uint64_t *data;		/* the data block as of sample seq */
	size_t data_size;
	uint64_t seq;		/* 0: no data yet */
	struct rtarget *next;	/* every target, for close */
};

struct kvmstats_log_reader {
	struct kvmstats_ctx *ctx;
	int fd;
	uint64_t off;		/* next record */
	uint64_t end;		/* file size when last looked */
	bool done;
	struct buf rec;		/* payload of the current record */
	struct kvmstats_schema **schemas;	/* by sid */
	size_t nschemas;
	struct rtarget **by_tid;
	size_t ntids;
	struct rtarget *all;
	struct kvmstats_log_entry *entries;
	size_t nentries, centries;
	uint64_t time_ns, realtime_ns;
	bool session, new_session;
	int64_t torn, corrupt_off;
	uint64_t corrupt;
};

struct kvmstats_log_reader *
kvmstats_log_reader__open(struct kvmstats_ctx *ctx, const char *path,
			  const struct kvmstats_log_reader_opts *opts)
{
	struct kvmstats_log_reader_opts o;
	struct kvmstats_log_reader *r = NULL;
	struct log_file_hdr h;
	ssize_t n;
	int err;

	err = ks_opts_copy(&o, sizeof(o), opts);
	if (err)
		goto fail;
	r = calloc(1, sizeof(*r));
	err = -ENOMEM;
	if (!r)
		goto fail;
	r->ctx = ctx;
	r->torn = r->corrupt_off = -1;
	r->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0) {
		err = -errno;
		ks_err(o.errbuf, o.errbuf_sz, "%s: %s", path, strerror(errno));
		goto fail;
	}
	n = pread(r->fd, &h, sizeof(h), 0);
	if (n < 0) {
		err = -errno;
		ks_err(o.errbuf, o.errbuf_sz, "%s: %s", path, strerror(errno));
		goto fail;
	}
	err = (size_t)n < sizeof(h) ? -EINVAL : file_hdr_check(&h);
	if (err) {
		ks_err(o.errbuf, o.errbuf_sz, "%s: %s", path,
		       err == -EINVAL ? "not a kvmstats log"
				      : "a kvmstats log of another version or byte order");
		goto fail;
	}
	r->off = sizeof(h);
	return r;
fail:
	kvmstats_log_reader__close(r);
	errno = -err;
	return NULL;
}

static void reader_forget(struct kvmstats_log_reader *r)
{
	for (size_t i = 0; i < r->nschemas; i++) {
		kvmstats_schema__put(r->schemas[i]);
		r->schemas[i] = NULL;
	}
	if (r->by_tid)
		memset(r->by_tid, 0, r->ntids * sizeof(*r->by_tid));
	r->new_session = true;
}

void kvmstats_log_reader__close(struct kvmstats_log_reader *r)
{
	struct rtarget *t, *next;

	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	reader_forget(r);
	for (t = r->all; t; t = next) {
		next = t->next;
		kvmstats_schema__put(t->t.schema);
		free(t->strings);
		free(t->data);
		free(t);
	}
	free(r->schemas);
	free(r->by_tid);
	free(r->entries);
	free(r->rec.p);
	free(r);
}

int kvmstats_log_reader__rewind(struct kvmstats_log_reader *r)
{
	reader_forget(r);
	r->off = sizeof(struct log_file_hdr);
	r->done = false;
	r->nentries = 0;
	r->torn = r->corrupt_off = -1;
	r->corrupt = 0;
	return 0;
}

/* Read the record at @off: 1 when whole and sound (payload in r->rec),
 * 0 at the end of the file, -EBADMSG when damaged, -ENODATA when the file
 * ends inside it, another -errno when the file cannot be read. */
static int read_rec(struct kvmstats_log_reader *r, uint64_t off,
		    struct log_rec *h)
{
	ssize_t n;

	n = pread(r->fd, h, sizeof(*h), (off_t)off);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	if ((size_t)n < sizeof(*h))
		return -ENODATA;
	if (h->sync != REC_SYNC || h->len % 8 || h->len > REC_MAX_LEN)
		return -EBADMSG;
	if (off + sizeof(*h) + h->len > r->end) {
		struct stat st;

		if (fstat(r->fd, &st))
			return -errno;
		r->end = (uint64_t)st.st_size;
		if (off + sizeof(*h) + h->len > r->end)
			return -ENODATA;
	}
	r->rec.len = 0;
	if (buf_reserve(&r->rec, h->len + 8))
		return -ENOMEM;
	n = pread(r->fd, r->rec.p, h->len, (off_t)(off + sizeof(*h)));
	if (n < 0)
		return -errno;
	if ((size_t)n < h->len)
		return -ENODATA;
	r->rec.len = h->len;
	return rec_crc(h, r->rec.p) == h->crc ? 1 : -EBADMSG;
}

/* The offset of the next sound record after @off (8-aligned sync words),
 * or -1 when none follows. */
static int64_t resync(struct kvmstats_log_reader *r, uint64_t off)
{
	uint64_t chunk[512];
	struct log_rec h;

	off = (off + 8) & ~7ull;
	for (;;) {
		ssize_t n = pread(r->fd, chunk, sizeof(chunk), (off_t)off);

		if (n <= 0)
			return -1;
		for (size_t i = 0; i < (size_t)n / 8; i++) {
			uint64_t at = off + i * 8;

			if ((uint32_t)chunk[i] != REC_SYNC)
				continue;
			if (read_rec(r, at, &h) == 1)
				return (int64_t)at;
		}
		if ((size_t)n < sizeof(chunk))
			return -1;
		off += (uint64_t)n;
	}
}

/* Grow a zeroed array of @elem-sized slots to hold index @want - 1.
 * Returns the (maybe moved) array, or NULL; *err is set either way. */
static void *grow_zeroed(void *arr, size_t *n, size_t want, size_t elem,
			 int *err)
{
	size_t cap = *n ? *n : 16;
	unsigned char *p;

	*err = -EBADMSG;
	if (want <= *n)
		return arr;
	if (want > MAX_ID)
		return NULL;
	while (cap < want)
		cap *= 2;
	*err = -ENOMEM;
	p = realloc(arr, cap * elem);
	if (!p)
		return NULL;
	memset(p + *n * elem, 0, (cap - *n) * elem);
	*n = cap;
	return p;
}

/* Build an image around a stored header + descriptor block so that the
 * library parses (and validates) it as it would a stats fd. */
static int on_schema(struct kvmstats_log_reader *r)
{
	const struct log_schema *s = (const void *)r->rec.p;
	struct kvmstats_abi_header h;
	struct kvmstats_schema *sch;
	unsigned char *img;
	size_t dlen, end;
	char why[160] = "";
	void *p;
	int err;

	if (r->rec.len < sizeof(*s) + sizeof(h) ||
	    s->key_len > r->rec.len - sizeof(*s) || s->key_len < sizeof(h) ||
	    !s->sid || s->sid >= MAX_ID || s->data_size > KS_MAX_DATA)
		return -EBADMSG;
	memcpy(&h, s + 1, sizeof(h));
	dlen = s->key_len - sizeof(h);
	if (h.name_size > KS_MAX_NAME_SIZE || h.name_size < 4 ||
	    (uint64_t)h.num_desc * (sizeof(struct kvmstats_abi_desc) + h.name_size) != dlen)
		return -EBADMSG;
	end = sizeof(h);
	if ((size_t)h.id_offset + h.name_size > end)
		end = (size_t)h.id_offset + h.name_size;
	if ((size_t)h.desc_offset + dlen > end)
		end = (size_t)h.desc_offset + dlen;
	if ((size_t)h.data_offset + s->data_size > end)
		end = (size_t)h.data_offset + s->data_size;
	if (end > KS_MAX_IMAGE)
		return -EBADMSG;
	img = calloc(1, end);
	if (!img)
		return -ENOMEM;
	memcpy(img, &h, sizeof(h));
	memcpy(img + h.id_offset, "kvm", 4);
	memcpy(img + h.desc_offset, (const unsigned char *)(s + 1) + sizeof(h), dlen);
	sch = kvmstats_schema__parse(r->ctx, img, end, why, sizeof(why));
	free(img);
	if (!sch) {
		ks_log(r->ctx, KVMSTATS_LOG_WARN, "log schema %u: %s", s->sid, why);
		return -EBADMSG;
	}
	p = grow_zeroed(r->schemas, &r->nschemas, s->sid + 1,
			sizeof(*r->schemas), &err);
	if (!p) {
		kvmstats_schema__put(sch);
		return err;
	}
	r->schemas = p;
	kvmstats_schema__put(r->schemas[s->sid]);
	r->schemas[s->sid] = sch;
	return 0;
}

static int on_target(struct kvmstats_log_reader *r)
{
	const struct log_target *lt = (const void *)r->rec.p;
	const char *str = (const char *)(lt + 1);
	size_t slen;
	struct rtarget *t;
	void *p;
	int err;

	if (r->rec.len < sizeof(*lt) || !lt->tid || lt->tid >= MAX_ID)
		return -EBADMSG;
	slen = (size_t)lt->name_len + lt->id_len + lt->source_len;
	if (slen > r->rec.len - sizeof(*lt) || !lt->name_len || !lt->id_len ||
	    !lt->source_len || str[lt->name_len - 1] ||
	    str[lt->name_len + lt->id_len - 1] || str[slen - 1])
		return -EBADMSG;
	if (lt->sid >= r->nschemas || !r->schemas[lt->sid]) {
		ks_log(r->ctx, KVMSTATS_LOG_WARN,
		       "log target %u names unknown schema %u", lt->tid, lt->sid);
		return 0;
	}
	p = grow_zeroed(r->by_tid, &r->ntids, lt->tid + 1, sizeof(*r->by_tid),
			&err);
	if (!p)
		return err;
	r->by_tid = p;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->strings = malloc(slen);
	t->data_size = r->schemas[lt->sid]->data_size;
	t->data = calloc(pad8(t->data_size) / 8 + 1, 8);
	if (!t->strings || !t->data) {
		free(t->strings);
		free(t->data);
		free(t);
		return -ENOMEM;
	}
	memcpy(t->strings, str, slen);
	t->t = (struct kvmstats_log_target){
		.tid = lt->tid, .pid = lt->pid, .uid = lt->uid, .vm = lt->vm,
		.vcpu = lt->vcpu, .name = t->strings,
		.id = t->strings + lt->name_len,
		.source = t->strings + lt->name_len + lt->id_len,
		.schema = kvmstats_schema__get(r->schemas[lt->sid]),
	};
	t->next = r->all;
	r->all = t;
	r->by_tid[lt->tid] = t;
	return 0;
}

static int on_gone(struct kvmstats_log_reader *r)
{
	const struct log_gone *g = (const void *)r->rec.p;

	if (r->rec.len < sizeof(*g))
		return -EBADMSG;
	if (g->tid < r->ntids)
		r->by_tid[g->tid] = NULL;
	return 0;
}

/* Decode one entry's body into t->data; fills @e. */
static int decode_entry(const struct log_entry *le, const unsigned char *p,
			uint64_t seq, struct rtarget *t,
			struct kvmstats_log_entry *e)
{
	size_t words = t->data_size / 8, nbits = (words + 63) / 64, used;
	size_t mwords = (kvmstats_schema__num_stats(t->t.schema) + 63) / 64;

	*e = (struct kvmstats_log_entry){ .target = &t->t, .schema = t->t.schema,
					  .error = le->error };
	if (le->error)
		return le->error < 0 && le->error > -4096 ? 0 : -EBADMSG;
	if (le->flags & ENTRY_KEY) {
		used = pad8(t->data_size);
		if (le->len < used)
			return -EBADMSG;
		memcpy(t->data, p, t->data_size);
	} else if (le->flags & (ENTRY_DELTA | ENTRY_SAME)) {
		const uint64_t *bits = (const uint64_t *)p, *val = bits + nbits;
		size_t n = 0;

		used = 0;
		if (le->flags & ENTRY_DELTA) {
			if (t->data_size % 8 || le->len < nbits * 8)
				return -EBADMSG;
			for (size_t i = 0; i < nbits; i++)
				n += (size_t)__builtin_popcountll(bits[i]);
			used = (nbits + n) * 8;
			if (le->len < used)
				return -EBADMSG;
		}
		if (!t->seq || t->seq != le->base) {
			/* The sample it applies to was lost: no value at all
			 * rather than a wrong one, until the next key entry. */
			t->seq = 0;
			e->error = -ENODATA;
			return 0;
		}
		n = 0;
		for (size_t i = 0; used && i < words; i++)
			if (bits[i / 64] >> (i % 64) & 1)
				t->data[i] = val[n++];
	} else {
		return -EBADMSG;
	}
	t->seq = seq;
	e->data = t->data;
	if (le->flags & ENTRY_MISSING) {
		if (le->len < used + mwords * 8)
			return -EBADMSG;
		e->missing = (const uint64_t *)(p + used);
	}
	return 0;
}

static int on_sample(struct kvmstats_log_reader *r)
{
	const struct log_sample *s = (const void *)r->rec.p;
	const unsigned char *p = r->rec.p + sizeof(*s);
	const unsigned char *end = r->rec.p + r->rec.len;
	size_t k = 0;

	if (r->rec.len < sizeof(*s) || s->count > r->rec.len / sizeof(struct log_entry))
		return -EBADMSG;
	if (s->count > r->centries) {
		void *e = realloc(r->entries, s->count * sizeof(*r->entries));

		if (!e)
			return -ENOMEM;
		r->entries = e;
		r->centries = s->count;
	}
	for (uint32_t i = 0; i < s->count; i++) {
		const struct log_entry *le = (const void *)p;
		struct rtarget *t;
		int err;

		if ((size_t)(end - p) < sizeof(*le) ||
		    le->len > (size_t)(end - p) - sizeof(*le) || le->len % 8)
			return -EBADMSG;
		p += sizeof(*le);
		t = le->tid < r->ntids ? r->by_tid[le->tid] : NULL;
		if (t) {
			err = decode_entry(le, p, s->seq, t, &r->entries[k]);
			if (err)
				return err;
			k++;
		}
		p += le->len;
	}
	r->nentries = k;
	r->time_ns = s->time_ns;
	r->realtime_ns = s->realtime_ns;
	r->session = r->new_session;
	r->new_session = false;
	return 1;
}

static int on_record(struct kvmstats_log_reader *r, const struct log_rec *h)
{
	switch (h->type) {
	case REC_BEGIN:
		reader_forget(r);
		return 0;
	case REC_SCHEMA:
		return on_schema(r);
	case REC_TARGET:
		return on_target(r);
	case REC_GONE:
		return on_gone(r);
	case REC_SAMPLE:
		return on_sample(r);
	}
	return 0;	/* a record type of a later version */
}

/* Skip a damaged record: resume at the next sound one, or end here. */
static void skip_damage(struct kvmstats_log_reader *r, int why)
{
	int64_t next = resync(r, r->off);

	if (next < 0) {
		r->torn = (int64_t)r->off;
		ks_log(r->ctx, KVMSTATS_LOG_WARN,
		       "log ends with a torn record at offset %llu: skipped",
		       (unsigned long long)r->off);
		r->done = true;
		return;
	}
	if (r->corrupt_off < 0)
		r->corrupt_off = (int64_t)r->off;
	r->corrupt++;
	ks_log(r->ctx, KVMSTATS_LOG_WARN,
	       "log record at offset %llu is %s: %llu bytes skipped",
	       (unsigned long long)r->off, why == -ENODATA ? "cut short" : "damaged",
	       (unsigned long long)(next - (int64_t)r->off));
	/* A delta after a gap must not apply to a state from before it. */
	for (struct rtarget *t = r->all; t; t = t->next)
		t->seq = 0;
	r->off = (uint64_t)next;
}

int kvmstats_log_reader__next(struct kvmstats_log_reader *r)
{
	struct log_rec h;
	int ret;

	r->nentries = 0;
	while (!r->done) {
		ret = read_rec(r, r->off, &h);
		if (ret == 0) {
			r->done = true;
			break;
		}
		if (ret == -EBADMSG || ret == -ENODATA) {
			skip_damage(r, ret);
			continue;
		}
		if (ret < 0)
			return ret;
		ret = on_record(r, &h);
		if (ret == -EBADMSG) {
			/* Sound CRC, nonsense inside: a writer bug or a
			 * forged file. Skip the record, keep reading. */
			if (r->corrupt_off < 0)
				r->corrupt_off = (int64_t)r->off;
			r->corrupt++;
			ks_log(r->ctx, KVMSTATS_LOG_WARN,
			       "log record at offset %llu is malformed: skipped",
			       (unsigned long long)r->off);
			r->nentries = 0;
			ret = 0;
		}
		r->off += sizeof(h) + h.len;
		if (ret)
			return ret;
	}
	return 0;
}

uint64_t kvmstats_log_reader__time_ns(const struct kvmstats_log_reader *r)
{
	return r->time_ns;
}

uint64_t kvmstats_log_reader__realtime_ns(const struct kvmstats_log_reader *r)
{
	return r->realtime_ns;
}

size_t kvmstats_log_reader__num_entries(const struct kvmstats_log_reader *r)
{
	return r->nentries;
}

const struct kvmstats_log_entry *
kvmstats_log_reader__entry(const struct kvmstats_log_reader *r, size_t i)
{
	if (i >= r->nentries) {
		errno = ENOENT;
		return NULL;
	}
	return &r->entries[i];
}

bool kvmstats_log_reader__session_start(const struct kvmstats_log_reader *r)
{
	return r->session;
}

int64_t kvmstats_log_reader__torn_offset(const struct kvmstats_log_reader *r)
{
	return r->torn;
}

uint64_t kvmstats_log_reader__corrupt(const struct kvmstats_log_reader *r)
{
	return r->corrupt;
}

int64_t kvmstats_log_reader__corrupt_offset(const struct kvmstats_log_reader *r)
{
	return r->corrupt_off;
}
