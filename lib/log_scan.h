/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Reading records of a log that may be damaged or forged (log_scan.c).
 * Internal to libkvmstats; never installed.
 */
#ifndef KVMSTATS_LOG_SCAN_H
#define KVMSTATS_LOG_SCAN_H

#include <stdint.h>

#include "log_format.h"

struct kvmstats_ctx;

/* The file a reader reads, and what checking it has cost so far. */
struct log_source {
	int fd;
	uint64_t end;		/* file size when last looked */
	struct log_buf rec;	/* payload of the record last read */
	/* Bytes checksummed or scanned for nothing (records that failed
	 * their CRC, resync scans): bounded by what the file's size
	 * justifies, so that no forged file costs more than a few passes
	 * over itself. */
	uint64_t wasted;
};

/* Read the record at @off: 1 when whole and sound (payload in s->rec),
 * 0 at the end of the file, -EBADMSG when damaged, -ENODATA when the
 * file ends inside it, -E2BIG when checking it would pass the file's
 * budget, another -errno when the file cannot be read. */
int log_read_rec(struct log_source *s, uint64_t off, struct log_rec *h);

/* The offset of the first sound record that ends after @off (records
 * start at 8-aligned sync words), -1 when none does, -E2BIG past the
 * budget. One pass over the bytes, whatever they claim. */
int64_t log_resync(struct log_source *s, uint64_t off);

#endif
