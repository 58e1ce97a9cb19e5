/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The bytes of the statistics log (kvmstats_log.h tells the records,
 * kvmstats-record(1) the layout), shared by the writer (log_writer.c),
 * the reader (log_reader.c) and its damage scanner (log_scan.c).
 * Internal to libkvmstats; never installed.
 *
 * Every record starts with a sync word at an 8-byte aligned offset and
 * ends its CRC'd payload on one. Host byte order throughout (see
 * LOG_ENDIAN).
 */
#ifndef KVMSTATS_LOG_FORMAT_H
#define KVMSTATS_LOG_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define LOG_MAGIC "KVMSTLOG"
#define LOG_ENDIAN 0x01020304u
#define REC_SYNC 0xa55a4b52u
#define REC_MAX_LEN (256u << 20)

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

/* Version 2: an entry whose base is the sample just before, with no
 * error and no missing-stats bitmap (most of them), has a short header
 * instead: u32 tid | ENTRY_SHORT (| ENTRY_SHORT_DELTA: a delta, else no
 * change), u32 body length. An unchanged target costs 8 bytes a sample,
 * not 24 (writing a byte costs about a third of a ns here). */
#define ENTRY_SHORT (1u << 31)
#define ENTRY_SHORT_DELTA (1u << 30)
#define ENTRY_SHORT_TID_MAX (ENTRY_SHORT_DELTA - 1)
#define LOG_VERSION_MIN 1
struct log_entry_short {
	uint32_t tid;
	uint32_t len;
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
_Static_assert(sizeof(struct log_entry_short) == 8, "short entry layout");

static inline size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* CRC of a record: its type, flags and len, then @payload (h->len). */
uint32_t log_rec_crc(const struct log_rec *h, const void *payload);
void log_file_hdr_init(struct log_file_hdr *h);
/* 0, -EINVAL (not a log), -EPROTONOSUPPORT (newer or foreign). */
int log_file_hdr_check(const struct log_file_hdr *h);
uint64_t log_realtime_ns(void);

/* A growable byte buffer; grows only when a record is bigger than any
 * before it. */
struct log_buf {
	unsigned char *p;
	size_t len, cap;
};

int log_buf_grow(struct log_buf *b, size_t more);
/* Room for @more bytes: inline, since the writer asks once per entry. */
static inline int log_buf_reserve(struct log_buf *b, size_t more)
{
	return b->len + more <= b->cap ? 0 : log_buf_grow(b, more);
}
/* Append a record header and a zeroed payload (padded to 8); the CRC is
 * filled in by log_rec_seal(). Returns the header's offset in @b or
 * -ENOMEM. */
ssize_t log_rec_open(struct log_buf *b, enum rec_type type, size_t payload);
void log_rec_seal(struct log_buf *b, size_t at);

struct kvmstats_log_target;

/* The definition records, appended to @b sealed: 0 or -ENOMEM. */
int log_put_begin(struct log_buf *b, uint32_t reason, const char *version);
int log_put_schema(struct log_buf *b, uint32_t sid, size_t data_size,
		   const void *key, size_t key_len);
int log_put_target(struct log_buf *b, const struct kvmstats_log_target *t,
		   uint32_t sid);
int log_put_gone(struct log_buf *b, uint32_t tid);

#endif
