// SPDX-License-Identifier: LGPL-2.1-or-later
/* The statistics log's file header, record framing and definition
 * records (log_format.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "internal.h"
#include "kvmstats_log.h"
#include "log_format.h"

uint32_t log_rec_crc(const struct log_rec *h, const void *payload)
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

void log_file_hdr_init(struct log_file_hdr *h)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, LOG_MAGIC, sizeof(h->magic));
	h->version = KVMSTATS_LOG_VERSION;
	h->hdr_size = sizeof(*h);
	h->endian = LOG_ENDIAN;
	h->crc = hdr_crc(h);
}

int log_file_hdr_check(const struct log_file_hdr *h)
{
	if (memcmp(h->magic, LOG_MAGIC, sizeof(h->magic)) || h->crc != hdr_crc(h))
		return -EINVAL;
	if (h->endian != LOG_ENDIAN || h->version < LOG_VERSION_MIN ||
	    h->version > KVMSTATS_LOG_VERSION || h->hdr_size != sizeof(*h))
		return -EPROTONOSUPPORT;
	return 0;
}

uint64_t log_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int log_buf_grow(struct log_buf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 4096;
	void *p;

	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

ssize_t log_rec_open(struct log_buf *b, enum rec_type type, size_t payload)
{
	struct log_rec h = { .sync = REC_SYNC, .type = type };
	size_t at = b->len;

	if (log_buf_reserve(b, sizeof(h) + pad8(payload)))
		return -ENOMEM;
	memcpy(b->p + at, &h, sizeof(h));
	memset(b->p + at + sizeof(h), 0, pad8(payload));
	b->len += sizeof(h) + pad8(payload);
	return (ssize_t)at;
}

void log_rec_seal(struct log_buf *b, size_t at)
{
	struct log_rec *h = (struct log_rec *)(b->p + at);

	h->len = (uint32_t)(b->len - at - sizeof(*h));
	h->crc = log_rec_crc(h, h + 1);
}

/* A record of @fixed then each of @parts (@lens bytes each), sealed. */
static int put_record(struct log_buf *b, enum rec_type type, const void *fixed,
		      size_t fixed_len, const void *const *parts,
		      const size_t *lens, size_t nparts)
{
	size_t len = fixed_len;
	unsigned char *p;
	ssize_t at;

	for (size_t i = 0; i < nparts; i++)
		len += lens[i];
	at = log_rec_open(b, type, len);
	if (at < 0)
		return (int)at;
	p = b->p + at + sizeof(struct log_rec);
	memcpy(p, fixed, fixed_len);
	p += fixed_len;
	for (size_t i = 0; i < nparts; i++) {
		memcpy(p, parts[i], lens[i]);
		p += lens[i];
	}
	log_rec_seal(b, (size_t)at);
	return 0;
}

int log_put_begin(struct log_buf *b, uint32_t reason, const char *version)
{
	struct log_begin r = {
		.time_ns = ks_now_ns(),
		.realtime_ns = log_realtime_ns(),
		.pid = (uint32_t)getpid(),
		.reason = reason,
	};
	struct utsname u;

	if (!uname(&u))
		snprintf(r.host, sizeof(r.host), "%.63s", u.nodename);
	snprintf(r.version, sizeof(r.version), "%s", version);
	return put_record(b, REC_BEGIN, &r, sizeof(r), NULL, NULL, 0);
}

int log_put_schema(struct log_buf *b, uint32_t sid, size_t data_size,
		   const void *key, size_t key_len)
{
	struct log_schema r = {
		.sid = sid,
		.data_size = (uint32_t)data_size,
		.key_len = (uint32_t)key_len,
	};
	const void *parts[] = { key };
	const size_t lens[] = { key_len };

	return put_record(b, REC_SCHEMA, &r, sizeof(r), parts, lens, 1);
}

int log_put_target(struct log_buf *b, const struct kvmstats_log_target *t,
		   uint32_t sid)
{
	struct log_target r = {
		.tid = t->tid,
		.sid = sid,
		.pid = t->pid,
		.vm = t->vm,
		.vcpu = t->vcpu,
		.uid = t->uid,
		.name_len = (uint16_t)(strlen(t->name) + 1),
		.id_len = (uint16_t)(strlen(t->id) + 1),
		.source_len = (uint16_t)(strlen(t->source) + 1),
	};
	const void *parts[] = { t->name, t->id, t->source };
	const size_t lens[] = { r.name_len, r.id_len, r.source_len };

	return put_record(b, REC_TARGET, &r, sizeof(r), parts, lens, 3);
}

int log_put_gone(struct log_buf *b, uint32_t tid)
{
	struct log_gone r = { .tid = tid };

	return put_record(b, REC_GONE, &r, sizeof(r), NULL, NULL, 0);
}
