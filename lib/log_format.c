// SPDX-License-Identifier: LGPL-2.1-or-later
/* The statistics log's file header and record framing (log_format.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

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
	if (h->endian != LOG_ENDIAN || h->version != KVMSTATS_LOG_VERSION ||
	    h->hdr_size != sizeof(*h))
		return -EPROTONOSUPPORT;
	return 0;
}

uint64_t log_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int log_buf_reserve(struct log_buf *b, size_t more)
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
