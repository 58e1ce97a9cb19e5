// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Schemas: the descriptors of a stats file, parsed once.
 *
 * All vCPUs of a host (and all VMs) normally have byte-identical
 * descriptor blocks; the context keeps one schema per distinct block so
 * that a host with 5000 stats fds holds two schemas, not 5000.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifndef KVMSTATS_VERSION
#define KVMSTATS_VERSION "0.0.0"
#endif

const char *kvmstats_version_string(void)
{
	return KVMSTATS_VERSION;
}

void ks_err(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!buf || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

void ks_log(const struct kvmstats_ctx *ctx, enum kvmstats_log_level level,
	    const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (!ctx || !ctx->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ctx->log(level, msg, ctx->log_arg);
}

int ks_opts_copy(void *out, size_t max, const void *opts)
{
	size_t sz;

	memset(out, 0, max);
	if (!opts)
		return 0;
	memcpy(&sz, opts, sizeof(sz));
	if (sz < sizeof(size_t))
		return -EINVAL;
	for (size_t i = max; i < sz; i++)
		if (((const unsigned char *)opts)[i])
			return -EINVAL;
	memcpy(out, opts, sz < max ? sz : max);
	return 0;
}

/* FNV-1a: only used to skip memcmp of blocks that differ. */
uint64_t ks_hash(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

struct kvmstats_ctx *kvmstats_ctx__new(const struct kvmstats_ctx_opts *opts)
{
	struct kvmstats_ctx_opts o;
	struct kvmstats_ctx *ctx;
	int err = ks_opts_copy(&o, sizeof(o), opts);

	if (err) {
		errno = -err;
		return NULL;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return NULL;
	ctx->log = o.log;
	ctx->log_arg = o.log_arg;
	ks_mutex_init_pi(&ctx->lock);
	return ctx;
}

void ks_mutex_init_pi(pthread_mutex_t *mu)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	if (pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT) ||
	    pthread_mutex_init(mu, &a))
		pthread_mutex_init(mu, NULL);
	pthread_mutexattr_destroy(&a);
}

void ks_ctx_lock(struct kvmstats_ctx *ctx)
{
	if (ctx)
		pthread_mutex_lock(&ctx->lock);
}

void ks_ctx_unlock(struct kvmstats_ctx *ctx)
{
	if (ctx)
		pthread_mutex_unlock(&ctx->lock);
}

/* Schemas still referenced keep working after the context is freed; they
 * are simply no longer shared. */
void kvmstats_ctx__free(struct kvmstats_ctx *ctx)
{
	struct kvmstats_schema *s, *next;

	if (!ctx)
		return;
	kvmstats_schema__put(ctx->kernel_schema[0]);
	kvmstats_schema__put(ctx->kernel_schema[1]);
	for (s = ctx->schemas; s; s = next) {
		next = s->next;
		s->ctx = NULL;
		s->next = NULL;
	}
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

size_t kvmstats_ctx__schema_count(const struct kvmstats_ctx *ctx)
{
	return ctx->nschemas;
}

static void schema_free(struct kvmstats_schema *s)
{
	free(s->key);
	free(s->stats);
	free(s->by_name);
	free(s->names);
	free(s);
}

/* Sorting by name needs the schema; qsort_r is a GNU extension, and the
 * sort runs once per distinct schema, so a small insertion sort does. */
static void sort_by_name(struct kvmstats_schema *s)
{
	for (uint32_t i = 0; i < s->num; i++)
		s->by_name[i] = i;
	for (uint32_t i = 1; i < s->num; i++) {
		uint32_t v = s->by_name[i], j = i;

		while (j > 0 && strcmp(s->stats[s->by_name[j - 1]].name,
				       s->stats[v].name) > 0) {
			s->by_name[j] = s->by_name[j - 1];
			j--;
		}
		s->by_name[j] = v;
	}
}

/* Build a schema from an image that passed every check. */
static struct kvmstats_schema *schema_build(const unsigned char *buf,
					    const unsigned char *key,
					    size_t key_len, uint64_t hash)
{
	struct kvmstats_schema *s = calloc(1, sizeof(*s));
	size_t dsz, nsz;

	if (!s)
		return NULL;
	memcpy(&s->hdr, buf, sizeof(s->hdr));
	s->num = s->hdr.num_desc;
	dsz = sizeof(struct kvmstats_abi_desc) + s->hdr.name_size;
	nsz = s->hdr.name_size;
	s->key = malloc(key_len);
	s->stats = calloc(s->num ? s->num : 1, sizeof(*s->stats));
	s->by_name = calloc(s->num ? s->num : 1, sizeof(*s->by_name));
	s->names = calloc(s->num ? s->num : 1, nsz);
	if (!s->key || !s->stats || !s->by_name || !s->names)
		goto err;
	memcpy(s->key, key, key_len);
	s->key_len = key_len;
	s->hash = hash;
	for (uint32_t i = 0; i < s->num; i++) {
		const unsigned char *p = buf + s->hdr.desc_offset + i * dsz;
		struct kvmstats_abi_desc d;
		struct kvmstats_stat *st = &s->stats[i];
		uint64_t end;

		memcpy(&d, p, sizeof(d));
		memcpy(s->names + i * nsz, p + sizeof(d), nsz);
		st->index = i;
		st->flags = d.flags;
		st->exponent = d.exponent;
		st->size = d.size;
		st->offset = d.offset;
		st->bucket_size = d.bucket_size;
		st->name = s->names + i * nsz;
		end = d.offset + (uint64_t)d.size * 8;
		if (end > s->data_size)
			s->data_size = end;
	}
	sort_by_name(s);
	atomic_init(&s->refs, 1);
	return s;
err:
	schema_free(s);
	errno = ENOMEM;
	return NULL;
}

/* The cache key: the header (its id_offset included, so that the id
 * string's place matches) followed by the descriptor block. */
static unsigned char *make_key(const unsigned char *buf, size_t *len)
{
	struct kvmstats_abi_header h;
	size_t dlen;
	unsigned char *key;

	memcpy(&h, buf, sizeof(h));
	dlen = (size_t)h.num_desc *
	       (sizeof(struct kvmstats_abi_desc) + h.name_size);
	key = malloc(sizeof(h) + dlen);
	if (!key)
		return NULL;
	memcpy(key, &h, sizeof(h));
	memcpy(key + sizeof(h), buf + h.desc_offset, dlen);
	*len = sizeof(h) + dlen;
	return key;
}

/* A new reference to @ctx's schema of this key, or NULL. One whose last
 * reference is being dropped on another thread (refs at 0, not yet out
 * of the list) is not taken: it is about to be freed. Under ctx->lock. */
static struct kvmstats_schema *cached(struct kvmstats_ctx *ctx,
				      const unsigned char *key, size_t key_len,
				      uint64_t hash)
{
	for (struct kvmstats_schema *s = ctx ? ctx->schemas : NULL; s; s = s->next) {
		int refs = atomic_load(&s->refs);

		if (s->hash != hash || s->key_len != key_len ||
		    memcmp(s->key, key, key_len))
			continue;
		while (refs > 0)
			if (atomic_compare_exchange_weak(&s->refs, &refs, refs + 1))
				return s;
	}
	return NULL;
}

struct kvmstats_schema *kvmstats_schema__parse(struct kvmstats_ctx *ctx,
					       const void *buf, size_t len,
					       char *errbuf, size_t errbuf_sz)
{
	struct kvmstats_report *r = kvmstats_report__new();
	const struct kvmstats_finding *f;
	struct kvmstats_schema *s = NULL;
	unsigned char *key = NULL;
	size_t key_len;
	uint64_t hash;
	int err;

	if (!r) {
		errno = ENOMEM;
		return NULL;
	}
	err = ks_check_image(buf, len, r);
	if (err < 0) {
		ks_err(errbuf, errbuf_sz, "out of memory while checking");
		errno = -err;
		goto out;
	}
	f = ks_report_first_error(r);
	if (f || err) {
		ks_err(errbuf, errbuf_sz, "%s: %s", f ? f->rule : "image",
		       f ? f->msg : "invalid");
		errno = EBADMSG;
		goto out;
	}
	for (size_t i = 0; i < kvmstats_report__count(r); i++) {
		f = kvmstats_report__finding(r, i);
		ks_log(ctx, KVMSTATS_LOG_WARN, "%s: %s", f->rule, f->msg);
	}
	key = make_key(buf, &key_len);
	if (!key) {
		errno = ENOMEM;
		goto out;
	}
	hash = ks_hash(key, key_len);
	ks_ctx_lock(ctx);
	s = cached(ctx, key, key_len, hash);
	if (!s)
		s = schema_build(buf, key, key_len, hash);
	if (s && ctx && !s->ctx) {
		s->ctx = ctx;
		s->next = ctx->schemas;
		ctx->schemas = s;
		ctx->nschemas++;
	}
	ks_ctx_unlock(ctx);
out:
	free(key);
	kvmstats_report__free(r);
	return s;
}

struct kvmstats_schema *kvmstats_schema__get(struct kvmstats_schema *s)
{
	if (s)
		atomic_fetch_add(&s->refs, 1);
	return s;
}

void kvmstats_schema__put(struct kvmstats_schema *s)
{
	struct kvmstats_schema **pp;

	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	if (s->ctx) {
		struct kvmstats_ctx *ctx = s->ctx;

		ks_ctx_lock(ctx);
		for (pp = &ctx->schemas; *pp; pp = &(*pp)->next)
			if (*pp == s) {
				*pp = s->next;
				ctx->nschemas--;
				break;
			}
		ks_ctx_unlock(ctx);
	}
	schema_free(s);
}

uint32_t kvmstats_schema__num_stats(const struct kvmstats_schema *s)
{
	return s->num;
}

size_t kvmstats_schema__data_size(const struct kvmstats_schema *s)
{
	return s->data_size;
}

uint32_t kvmstats_schema__data_offset(const struct kvmstats_schema *s)
{
	return s->hdr.data_offset;
}

const struct kvmstats_stat *kvmstats_schema__stat(const struct kvmstats_schema *s,
						  uint32_t idx)
{
	if (idx >= s->num) {
		errno = ENOENT;
		return NULL;
	}
	return &s->stats[idx];
}

const struct kvmstats_stat *kvmstats_schema__find(const struct kvmstats_schema *s,
						  const char *name)
{
	uint32_t lo = 0, hi = s->num;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const struct kvmstats_stat *st = &s->stats[s->by_name[mid]];
		int c = strcmp(st->name, name);

		if (!c)
			return st;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	errno = ENOENT;
	return NULL;
}

const struct kvmstats_stat *kvmstats_schema__next(const struct kvmstats_schema *s,
						  const struct kvmstats_stat *prev)
{
	uint32_t i = prev ? prev->index + 1 : 0;

	return i < s->num ? &s->stats[i] : NULL;
}

const char *kvmstats_stat__name(const struct kvmstats_stat *st)
{
	return st->name;
}

uint32_t kvmstats_stat__index(const struct kvmstats_stat *st)
{
	return st->index;
}

uint32_t kvmstats_stat__flags(const struct kvmstats_stat *st)
{
	return st->flags;
}

unsigned int kvmstats_stat__type(const struct kvmstats_stat *st)
{
	return KVMSTATS_FLAG_TYPE(st->flags);
}

unsigned int kvmstats_stat__unit(const struct kvmstats_stat *st)
{
	return KVMSTATS_FLAG_UNIT(st->flags);
}

unsigned int kvmstats_stat__base(const struct kvmstats_stat *st)
{
	return KVMSTATS_FLAG_BASE(st->flags);
}

int kvmstats_stat__exponent(const struct kvmstats_stat *st)
{
	return st->exponent;
}

uint32_t kvmstats_stat__size(const struct kvmstats_stat *st)
{
	return st->size;
}

uint32_t kvmstats_stat__offset(const struct kvmstats_stat *st)
{
	return st->offset;
}

uint32_t kvmstats_stat__bucket_size(const struct kvmstats_stat *st)
{
	return st->bucket_size;
}

bool kvmstats_stat__known(const struct kvmstats_stat *st)
{
	return kvmstats_stat__type(st) <= KVMSTATS_TYPE_LOG_HIST &&
	       kvmstats_stat__unit(st) <= KVMSTATS_UNIT_BOOLEAN &&
	       kvmstats_stat__base(st) <= KVMSTATS_BASE_POW2;
}

const uint64_t *kvmstats_stat__values(const struct kvmstats_stat *st,
				      const void *data)
{
	/* Offsets are checked to be 8-byte aligned and inside the block. */
	return (const uint64_t *)((const unsigned char *)data + st->offset);
}
