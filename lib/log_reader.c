// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The statistics log's reader (see kvmstats_log.h for the records,
 * log_format.h for the bytes, log_scan.c for damaged and forged files).
 *
 * A log comes from elsewhere (bug reports, other hosts): nothing it
 * claims is trusted. What the reader keeps is bounded by what the file
 * holds: ids are looked up in hash tables, never used as array indexes;
 * a target's data block is allocated at its first whole block, which the
 * file pays for byte by byte; the same TARGET record read again (after a
 * rewind) is the same target.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "kvmstats_log.h"
#include "log_format.h"
#include "log_scan.h"

/* Damage reported one record at a time, then only counted. */
#define MAX_DAMAGE_WARNINGS 16

/* ---- a table of ids ---------------------------------------------------- */

/* Open addressing, key -> pointer; a NULL value is a deleted slot. */
struct idmap {
	uint64_t *keys;
	void **vals;
	size_t cap, used;	/* used: slots ever filled, deleted included */
};

static size_t slot_of(uint64_t key, size_t cap)
{
	key *= 0x9e3779b97f4a7c15ull;
	return (size_t)(key ^ (key >> 29)) & (cap - 1);
}

static void **map_slot(const struct idmap *m, uint64_t key, bool *found)
{
	size_t i = slot_of(key, m->cap);

	for (; m->keys[i]; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key) {
			*found = true;
			return &m->vals[i];
		}
	}
	*found = false;
	return &m->vals[i];
}

/* The value of @key (never 0), or NULL. */
static void *map_get(const struct idmap *m, uint64_t key)
{
	bool found;

	if (!m->cap)
		return NULL;
	return *map_slot(m, key, &found);
}

/* Rebuild at twice the live entries, at least 16 slots. */
static int map_grow(struct idmap *m)
{
	struct idmap n = { 0 };
	size_t live = 0;

	for (size_t i = 0; i < m->cap; i++)
		live += m->vals[i] != NULL;
	n.cap = 16;
	while (n.cap < (live + 1) * 4)
		n.cap *= 2;
	n.keys = calloc(n.cap, sizeof(*n.keys));
	n.vals = calloc(n.cap, sizeof(*n.vals));
	if (!n.keys || !n.vals) {
		free(n.keys);
		free(n.vals);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		void **v;
		bool found;

		if (!m->vals[i])
			continue;
		v = map_slot(&n, m->keys[i], &found);
		n.keys[v - n.vals] = m->keys[i];
		*v = m->vals[i];
		n.used++;
	}
	free(m->keys);
	free(m->vals);
	*m = n;
	return 0;
}

/* Set @key (never 0) to @val (NULL: delete). */
static int map_set(struct idmap *m, uint64_t key, void *val)
{
	void **v;
	bool found;

	if ((m->used + 1) * 2 > m->cap && map_grow(m))
		return -ENOMEM;
	v = map_slot(m, key, &found);
	if (!found) {
		m->keys[v - m->vals] = key;
		m->used++;
	}
	*v = val;
	return 0;
}

static void map_free(struct idmap *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

/* ---- the reader ---------------------------------------------------------- */

struct rtarget {
	struct kvmstats_log_target t;
	char *strings;
	uint64_t *data;		/* the data block as of sample seq; NULL
				 * until the first whole block */
	size_t data_size;
	uint64_t seq;		/* 0: no data yet */
	struct rtarget *next;	/* every target, for close */
};

struct kvmstats_log_reader {
	struct kvmstats_ctx *ctx;
	struct log_source src;
	uint64_t off;		/* next record */
	bool done;
	struct idmap schemas;	/* sid -> schema (a reference each) */
	struct idmap by_tid;	/* tid -> rtarget, live in this session */
	struct idmap by_off;	/* TARGET record offset + 1 -> rtarget */
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
	r->src.fd = -1;
	r->src.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (r->src.fd < 0) {
		err = -errno;
		ks_err(o.errbuf, o.errbuf_sz, "%s: %s", path, strerror(errno));
		goto fail;
	}
	n = pread(r->src.fd, &h, sizeof(h), 0);
	if (n < 0) {
		err = -errno;
		ks_err(o.errbuf, o.errbuf_sz, "%s: %s", path, strerror(errno));
		goto fail;
	}
	err = (size_t)n < sizeof(h) ? -EINVAL : log_file_hdr_check(&h);
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

/* A new writer session: its schema and target ids mean something new. */
static void reader_forget(struct kvmstats_log_reader *r)
{
	for (size_t i = 0; i < r->schemas.cap; i++)
		kvmstats_schema__put(r->schemas.vals[i]);
	map_free(&r->schemas);
	map_free(&r->by_tid);
	r->new_session = true;
}

void kvmstats_log_reader__close(struct kvmstats_log_reader *r)
{
	struct rtarget *t, *next;

	if (!r)
		return;
	if (r->src.fd >= 0)
		close(r->src.fd);
	reader_forget(r);
	map_free(&r->by_off);
	for (t = r->all; t; t = next) {
		next = t->next;
		kvmstats_schema__put(t->t.schema);
		free(t->strings);
		free(t->data);
		free(t);
	}
	free(r->entries);
	free(r->src.rec.p);
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
	r->src.wasted = 0;
	return 0;
}

/* Build an image around a stored header + descriptor block so that the
 * library parses (and validates) it as it would a stats fd. */
static int on_schema(struct kvmstats_log_reader *r)
{
	const struct log_schema *s = (const void *)r->src.rec.p;
	size_t len = r->src.rec.len;
	struct kvmstats_abi_header h;
	struct kvmstats_schema *sch, *old;
	unsigned char *img;
	size_t dlen, end;
	char why[160] = "";
	int err;

	if (len < sizeof(*s) + sizeof(h) || s->key_len > len - sizeof(*s) ||
	    s->key_len < sizeof(h) || !s->sid || s->data_size > KS_MAX_DATA)
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
	/* A kernel lays the parts out back to back: holes bigger than a
	 * page are a forged layout asking for memory. */
	if (end > sizeof(h) + h.name_size + dlen + s->data_size + 4096)
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
	old = map_get(&r->schemas, s->sid);
	err = map_set(&r->schemas, s->sid, sch);
	kvmstats_schema__put(err ? sch : old);
	return err;
}

/* The target of the TARGET record at r->off: the one made when it was
 * read before (a rewind), else a new one. */
static struct rtarget *target_of_record(struct kvmstats_log_reader *r,
					const struct log_target *lt,
					struct kvmstats_schema *sch, size_t slen)
{
	struct rtarget *t = map_get(&r->by_off, r->off + 1);

	if (t)
		return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->strings = malloc(slen);
	if (!t->strings || map_set(&r->by_off, r->off + 1, t)) {
		free(t->strings);
		free(t);
		return NULL;
	}
	memcpy(t->strings, lt + 1, slen);
	t->data_size = sch->data_size;
	t->t = (struct kvmstats_log_target){
		.tid = lt->tid, .pid = lt->pid, .uid = lt->uid, .vm = lt->vm,
		.vcpu = lt->vcpu, .name = t->strings,
		.id = t->strings + lt->name_len,
		.source = t->strings + lt->name_len + lt->id_len,
		.schema = kvmstats_schema__get(sch),
	};
	t->next = r->all;
	r->all = t;
	return t;
}

static int on_target(struct kvmstats_log_reader *r)
{
	const struct log_target *lt = (const void *)r->src.rec.p;
	const char *str = (const char *)(lt + 1);
	struct kvmstats_schema *sch;
	struct rtarget *t;
	size_t slen;

	if (r->src.rec.len < sizeof(*lt) || !lt->tid)
		return -EBADMSG;
	slen = (size_t)lt->name_len + lt->id_len + lt->source_len;
	if (slen > r->src.rec.len - sizeof(*lt) || !lt->name_len || !lt->id_len ||
	    !lt->source_len || str[lt->name_len - 1] ||
	    str[lt->name_len + lt->id_len - 1] || str[slen - 1])
		return -EBADMSG;
	sch = map_get(&r->schemas, lt->sid);
	if (!sch) {
		ks_log(r->ctx, KVMSTATS_LOG_WARN,
		       "log target %u names unknown schema %u", lt->tid, lt->sid);
		return 0;
	}
	t = target_of_record(r, lt, sch, slen);
	if (!t)
		return -ENOMEM;
	t->seq = 0;
	return map_set(&r->by_tid, lt->tid, t);
}

static int on_gone(struct kvmstats_log_reader *r)
{
	const struct log_gone *g = (const void *)r->src.rec.p;

	if (r->src.rec.len < sizeof(*g))
		return -EBADMSG;
	if (map_get(&r->by_tid, g->tid))
		return map_set(&r->by_tid, g->tid, NULL);
	return 0;
}

/* A whole block: its target's memory comes with the first one. */
static int decode_key(const struct log_entry *le, const unsigned char *p,
		      struct rtarget *t, size_t *used)
{
	*used = pad8(t->data_size);
	if (le->len < *used)
		return -EBADMSG;
	if (!t->data) {
		t->data = calloc(pad8(t->data_size) / 8 + 1, 8);
		if (!t->data)
			return -ENOMEM;
	}
	memcpy(t->data, p, t->data_size);
	return 0;
}

/* The changed words; 1 when the block they apply to was lost. */
static int decode_delta(const struct log_entry *le, const unsigned char *p,
			struct rtarget *t, size_t *used)
{
	size_t words = t->data_size / 8, nbits = (words + 63) / 64, n = 0;
	const uint64_t *bits = (const uint64_t *)p, *val = bits + nbits;

	*used = 0;
	if (le->flags & ENTRY_DELTA) {
		if (t->data_size % 8 || le->len < nbits * 8)
			return -EBADMSG;
		for (size_t i = 0; i < nbits; i++)
			n += (size_t)__builtin_popcountll(bits[i]);
		*used = (nbits + n) * 8;
		if (le->len < *used)
			return -EBADMSG;
	}
	if (!t->seq || t->seq != le->base || !t->data)
		return 1;
	n = 0;
	for (size_t i = 0; *used && i < words; i++)
		if (bits[i / 64] >> (i % 64) & 1)
			t->data[i] = val[n++];
	return 0;
}

/* Decode one entry's body into t->data; fills @e. */
static int decode_entry(const struct log_entry *le, const unsigned char *p,
			uint64_t seq, struct rtarget *t,
			struct kvmstats_log_entry *e)
{
	size_t mwords = (kvmstats_schema__num_stats(t->t.schema) + 63) / 64, used;
	int err;

	*e = (struct kvmstats_log_entry){ .target = &t->t, .schema = t->t.schema,
					  .error = le->error };
	if (le->error)
		return le->error < 0 && le->error > -4096 ? 0 : -EBADMSG;
	if (le->flags & ENTRY_KEY)
		err = decode_key(le, p, t, &used);
	else if (le->flags & (ENTRY_DELTA | ENTRY_SAME))
		err = decode_delta(le, p, t, &used);
	else
		err = -EBADMSG;
	if (err < 0)
		return err;
	if (err) {
		/* The sample it applies to was lost: no value at all rather
		 * than a wrong one, until the next key entry. */
		t->seq = 0;
		e->error = -ENODATA;
		return 0;
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

/* The entry header at @p (@avail bytes to the record's end), long or
 * short (version 2: its base the sample before @seq), as a long one in
 * @le; its size, or 0 when it does not fit or is malformed. */
static size_t entry_header(const unsigned char *p, size_t avail, uint64_t seq,
			   struct log_entry *le)
{
	struct log_entry_short se;

	if (avail < sizeof(se))
		return 0;
	memcpy(&se, p, sizeof(se));
	if (!(se.tid & ENTRY_SHORT)) {
		if (avail < sizeof(*le))
			return 0;
		memcpy(le, p, sizeof(*le));
		avail -= sizeof(*le);
		return le->len > avail || le->len % 8 ? 0 : sizeof(*le);
	}
	*le = (struct log_entry){
		.tid = se.tid & ENTRY_SHORT_TID_MAX,
		.len = se.len,
		.flags = se.tid & ENTRY_SHORT_DELTA ? ENTRY_DELTA : ENTRY_SAME,
		.base = seq - 1,
	};
	avail -= sizeof(se);
	if (le->len > avail || le->len % 8 ||
	    (le->flags == ENTRY_SAME && le->len))
		return 0;
	return sizeof(se);
}

static int on_sample(struct kvmstats_log_reader *r)
{
	const struct log_sample *s = (const void *)r->src.rec.p;
	const unsigned char *p = r->src.rec.p + sizeof(*s);
	const unsigned char *end = r->src.rec.p + r->src.rec.len;
	struct log_entry le;
	size_t k = 0;

	if (r->src.rec.len < sizeof(*s) ||
	    s->count > r->src.rec.len / sizeof(struct log_entry_short))
		return -EBADMSG;
	if (s->count > r->centries) {
		void *e = realloc(r->entries, s->count * sizeof(*r->entries));

		if (!e)
			return -ENOMEM;
		r->entries = e;
		r->centries = s->count;
	}
	for (uint32_t i = 0; i < s->count; i++) {
		size_t hdr = entry_header(p, (size_t)(end - p), s->seq, &le);
		struct rtarget *t;
		int err;

		if (!hdr)
			return -EBADMSG;
		p += hdr;
		t = map_get(&r->by_tid, le.tid);
		if (t) {
			err = decode_entry(&le, p, s->seq, t, &r->entries[k]);
			if (err)
				return err;
			k++;
		}
		p += le.len;
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

/* Damage is said record by record, up to a point. */
static bool say_damage(struct kvmstats_log_reader *r)
{
	return r->corrupt <= MAX_DAMAGE_WARNINGS;
}

static void count_damage(struct kvmstats_log_reader *r)
{
	if (r->corrupt_off < 0)
		r->corrupt_off = (int64_t)r->off;
	r->corrupt++;
	if (r->corrupt == MAX_DAMAGE_WARNINGS + 1)
		ks_log(r->ctx, KVMSTATS_LOG_WARN, "log: more damaged records "
		       "follow; they are skipped without a word");
}

static int give_up(struct kvmstats_log_reader *r)
{
	ks_log(r->ctx, KVMSTATS_LOG_WARN,
	       "log: gave up at offset %llu: its damaged records claim more "
	       "bytes than a few passes over the file (%llu bytes) justify; "
	       "a forged file?", (unsigned long long)r->off,
	       (unsigned long long)r->src.end);
	r->done = true;
	return -EBADMSG;
}

/* Skip a damaged record: resume at the next sound one, or end here. */
static int skip_damage(struct kvmstats_log_reader *r, int why)
{
	int64_t next = log_resync(&r->src, r->off);

	if (next == -E2BIG)
		return give_up(r);
	if (next < 0) {
		r->torn = (int64_t)r->off;
		ks_log(r->ctx, KVMSTATS_LOG_WARN,
		       "log ends with a torn record at offset %llu: skipped",
		       (unsigned long long)r->off);
		r->done = true;
		return 0;
	}
	count_damage(r);
	if (say_damage(r))
		ks_log(r->ctx, KVMSTATS_LOG_WARN,
		       "log record at offset %llu is %s: %llu bytes skipped",
		       (unsigned long long)r->off,
		       why == -ENODATA ? "cut short" : "damaged",
		       (unsigned long long)(next - (int64_t)r->off));
	/* A delta after a gap must not apply to a state from before it. */
	for (struct rtarget *t = r->all; t; t = t->next)
		t->seq = 0;
	r->off = (uint64_t)next;
	return 0;
}

/* Sound CRC, nonsense inside: a writer bug or a forged file. */
static void malformed(struct kvmstats_log_reader *r)
{
	count_damage(r);
	if (say_damage(r))
		ks_log(r->ctx, KVMSTATS_LOG_WARN,
		       "log record at offset %llu is malformed: skipped",
		       (unsigned long long)r->off);
	r->nentries = 0;
}

int kvmstats_log_reader__next(struct kvmstats_log_reader *r)
{
	struct log_rec h;
	int ret;

	r->nentries = 0;
	while (!r->done) {
		ret = log_read_rec(&r->src, r->off, &h);
		if (ret == 0) {
			r->done = true;
			break;
		}
		if (ret == -E2BIG)
			return give_up(r);
		if (ret == -EBADMSG || ret == -ENODATA) {
			ret = skip_damage(r, ret);
			if (ret)
				return ret;
			continue;
		}
		if (ret < 0)
			return ret;
		ret = on_record(r, &h);
		if (ret == -EBADMSG) {
			malformed(r);
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
