/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The log writer's file (log_file.c). Internal; never installed. */
#ifndef KVMSTATS_LOG_FILE_H
#define KVMSTATS_LOG_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct kvmstats_ctx;

struct log_file {
	const char *path;	/* the caller's */
	int fd;			/* -1 when closed */
	uint64_t size;		/* bytes in the file */
	uint32_t version;	/* of its header: what the writer may write */
	dev_t dev;		/* of the file held */
	ino_t ino;
};

/* Open @f->path for appending and lock it: a kvmstats log or an empty
 * file is appended to (emptied first with @truncate), a missing one is
 * created; a link, a file of another kind, or a foreign file in a shared
 * directory is refused. 0, or a negative errno with the reason in
 * @errbuf (may be NULL). */
int log_file_open(struct log_file *f, bool truncate, char *errbuf, size_t errsz);
void log_file_close(struct log_file *f);
/* PATH -> PATH.1 -> ... -> PATH.@keep, then a new PATH. When PATH no
 * longer names the file held (moved away), only the new file is made. */
int log_file_rotate(struct log_file *f, unsigned int keep,
		    const struct kvmstats_ctx *ctx);

#endif
