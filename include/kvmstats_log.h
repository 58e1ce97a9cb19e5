/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvmstats: the statistics log written by `kvmstats record` and read by
 * `kvmstats replay` and `kvmstats top --replay`.
 *
 * The log keeps the kernel's own layout: each schema (the stats header
 * and descriptor block) is stored once, and each sample holds timestamps
 * and the raw data blocks of every target, exactly as pread returned
 * them. The file is append-only:
 *
 *	file header | record | record | ...
 *
 * and every record carries its type, its length and a CRC32 (zlib's), so
 * that a record torn by kill -9 or a full disk is detected and skipped
 * while every complete record before it stays readable. Records:
 *
 *	BEGIN    a writer (re)opened the file: forget schemas and targets
 *	SCHEMA   schema id -> header + descriptor block
 *	TARGET   a target appeared: target id -> schema id, pid, VMM uid,
 *		 VM index, vCPU index (-1: the VM's own stats), VMM name,
 *		 stats id string, source
 *	GONE     a target disappeared
 *	SAMPLE   CLOCK_MONOTONIC and CLOCK_REALTIME of one sweep, then per
 *		 target: its id, a read error or its data block, and the
 *		 bitmap of stats its source could not provide
 *
 * Each file is self-contained: after a rotation or a reopen the writer
 * writes every live schema and target again. The byte layout is described
 * in kvmstats-record(1).
 *
 * Conventions are those of kvmstats.h: opaque objects, 0/-errno returns,
 * NULL + errno, no printing (warnings about skipped records go to the
 * kvmstats_ctx's log callback).
 */
#ifndef KVMSTATS_LOG_H
#define KVMSTATS_LOG_H

#include "kvmstats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version new files are written in; version 1 files are read and
 * appended to as version 1. */
#define KVMSTATS_LOG_VERSION 2

/* ---------------------------------------------------------------------
 * Targets: who a data block belongs to.
 */
struct kvmstats_log_target {
	uint32_t tid;		/* number of the target in the log */
	pid_t pid;		/* VMM process (0 for a target without one) */
	uint64_t uid;		/* VMM uid (kvmstats_vmm__uid()) at record time */
	int32_t vm;		/* index of the VM in its VMM */
	int32_t vcpu;		/* vCPU index, or -1 for the VM's own stats */
	const char *name;	/* VMM name */
	const char *id;		/* stats id string, e.g. "kvm-1234/vcpu-0" */
	const char *source;	/* "fd", "qmp", ... */
	struct kvmstats_schema *schema;
};

/* ---------------------------------------------------------------------
 * Writer.
 */
struct kvmstats_log_writer;

enum kvmstats_log_writer_flags {
	/* Start the file afresh instead of appending to an existing log. */
	KVMSTATS_LOG_TRUNCATE = 1u << 0,
	/* fdatasync() after every sample (slow; for logs that must survive a
	 * power cut, not just a crash of the recorder). */
	KVMSTATS_LOG_SYNC = 1u << 1,
};

struct kvmstats_log_writer_opts {
	size_t sz;
	unsigned int flags;		/* enum kvmstats_log_writer_flags */
	/* Once the file holds this many bytes, the next sample goes to a
	 * new file (PATH moves to PATH.1, PATH.1 to PATH.2, ...); 0: never. */
	uint64_t rotate_size;
	unsigned int rotate_keep;	/* old files kept (PATH.1 ..); 0: 1 */
	/* After a failed write (ENOSPC, EIO), samples are dropped and the
	 * write is tried again after this long; 0: 1000. */
	unsigned int retry_ms;
	/* A target's data block is written whole in its first sample of a
	 * file and every this many samples; the samples between hold only the
	 * u64 words that changed. 0: 256; 1: every sample whole. */
	unsigned int keyframe_interval;
	char *errbuf;			/* optional: one-line reason */
	size_t errbuf_sz;
};

/* Open @path for appending (creating it; an existing file must be a
 * kvmstats log, else -EINVAL) and take an exclusive lock on it (-EBUSY
 * when another recorder holds it). */
KVMSTATS_API struct kvmstats_log_writer *
kvmstats_log_writer__open(struct kvmstats_ctx *ctx, const char *path,
			  const struct kvmstats_log_writer_opts *opts);
/* Flush nothing (every sample is written at once), close. Returns 0 or
 * the -errno of the final close. */
KVMSTATS_API int kvmstats_log_writer__close(struct kvmstats_log_writer *w);
/* Close and open the path again (after logrotate moved the file away:
 * send SIGHUP and call this from the main loop). */
KVMSTATS_API int kvmstats_log_writer__reopen(struct kvmstats_log_writer *w);

/* One sample, step by step: begin, add each target's data, commit.
 * begin rotates the file first when it has reached rotate_size.
 * @time_ns is CLOCK_MONOTONIC, @realtime_ns CLOCK_REALTIME (0: now). */
KVMSTATS_API int kvmstats_log_writer__begin(struct kvmstats_log_writer *w,
					    uint64_t time_ns,
					    uint64_t realtime_ns);
/* Add one target's data block (kvmstats_schema__data_size() bytes;
 * NULL with @error < 0 for a failed read) and its missing bitmap (may be
 * NULL). @t identifies the target: a target is the same as in earlier
 * samples when its (uid, pid, vm, vcpu) are; t->tid and t->schema are
 * ignored (the schema is @schema). Allocates only when a target is new. */
KVMSTATS_API int kvmstats_log_writer__add(struct kvmstats_log_writer *w,
					  const struct kvmstats_log_target *t,
					  struct kvmstats_schema *schema,
					  const void *data,
					  const uint64_t *missing, int error);
/* Add the latest readings (kvmstats_reader__cur()) of every VM and vCPU
 * of @v, after kvmstats_host__sweep(). */
KVMSTATS_API int kvmstats_log_writer__add_vmm(struct kvmstats_log_writer *w,
					      const struct kvmstats_vmm *v);
/* Write the sample with one writev(): first the schema and target
 * records it needs that the file does not hold yet, GONE records for the
 * targets of the previous sample that were not added again, then the
 * sample.
 * Returns 0; -ENOSPC (or another write error) when the sample was
 * dropped, the file being cut back to its last complete record; -EAGAIN
 * when it was dropped without trying, within retry_ms of a failure. */
KVMSTATS_API int kvmstats_log_writer__commit(struct kvmstats_log_writer *w);
/* begin + add_vmm for every VMM of @h + commit, stamped with
 * kvmstats_host__time_ns(). */
KVMSTATS_API int kvmstats_log_writer__write_host(struct kvmstats_log_writer *w,
						 const struct kvmstats_host *h);

/* kvmstats_host__sweep() and write_host() in one pass, cheaper: each
 * reader's delta is taken as soon as it is read, while its data is in
 * the cache. Drops the VMMs that exited, sweeps every reader of @h once
 * and writes those of the VMMs @choose accepts (NULL: every VMM; the
 * others are swept, not written). @choose is asked when the host's VMMs
 * or readers changed since the last call (or @choose or @arg did), not at
 * every sample: its verdict on a VMM must not change while the VMM stays.
 * A target that cannot be added (out of memory) is left out of the
 * sample, with a warning in the context's log. Returns what begin or
 * commit returned. */
typedef bool (*kvmstats_log_choose_fn)(const struct kvmstats_vmm *v, void *arg);
KVMSTATS_API int kvmstats_log_writer__sweep_host(struct kvmstats_log_writer *w,
						 struct kvmstats_host *h,
						 kvmstats_log_choose_fn choose,
						 void *arg);

/* Samples written and dropped (failed writes) since open. */
KVMSTATS_API uint64_t
kvmstats_log_writer__samples(const struct kvmstats_log_writer *w);
KVMSTATS_API uint64_t
kvmstats_log_writer__dropped(const struct kvmstats_log_writer *w);
/* Size of the current file in bytes. */
KVMSTATS_API uint64_t
kvmstats_log_writer__size(const struct kvmstats_log_writer *w);
/* Files rotated since open. */
KVMSTATS_API unsigned int
kvmstats_log_writer__rotations(const struct kvmstats_log_writer *w);

/* ---------------------------------------------------------------------
 * Reader.
 */
struct kvmstats_log_reader;

struct kvmstats_log_reader_opts {
	size_t sz;
	char *errbuf;			/* optional: one-line reason */
	size_t errbuf_sz;
};

/* Open a log file and check its file header (-EINVAL: not a kvmstats
 * log; -EPROTONOSUPPORT: a newer version). Schemas are parsed into @ctx. */
KVMSTATS_API struct kvmstats_log_reader *
kvmstats_log_reader__open(struct kvmstats_ctx *ctx, const char *path,
			  const struct kvmstats_log_reader_opts *opts);
KVMSTATS_API void kvmstats_log_reader__close(struct kvmstats_log_reader *r);
/* Go back to the first sample. */
KVMSTATS_API int kvmstats_log_reader__rewind(struct kvmstats_log_reader *r);

/* One entry of a sample: a target and its data. */
struct kvmstats_log_entry {
	const struct kvmstats_log_target *target;
	struct kvmstats_schema *schema;	/* == target->schema */
	const uint64_t *data;		/* data block; NULL when error < 0 */
	const uint64_t *missing;	/* bitmap, one bit per stat; or NULL */
	int error;			/* 0, or -errno of the failed read */
};

/* Advance to the next complete sample, skipping records that are torn or
 * fail their CRC (each is reported once through the ctx's log callback).
 * Returns 1 when a sample was read, 0 at the end of the log, or a
 * negative errno (-ENOMEM, -EIO). Entries, data and timestamps stay
 * valid until the next call; targets and schemas until close. */
KVMSTATS_API int kvmstats_log_reader__next(struct kvmstats_log_reader *r);
/* Timestamps of the current sample. */
KVMSTATS_API uint64_t
kvmstats_log_reader__time_ns(const struct kvmstats_log_reader *r);
KVMSTATS_API uint64_t
kvmstats_log_reader__realtime_ns(const struct kvmstats_log_reader *r);
KVMSTATS_API size_t
kvmstats_log_reader__num_entries(const struct kvmstats_log_reader *r);
KVMSTATS_API const struct kvmstats_log_entry *
kvmstats_log_reader__entry(const struct kvmstats_log_reader *r, size_t i);
/* True when the current sample starts a new writer session (BEGIN) or a
 * new file: rates must not be computed across it. */
KVMSTATS_API bool
kvmstats_log_reader__session_start(const struct kvmstats_log_reader *r);

/* Damage found so far. The torn tail is what follows the last complete
 * record when the log ends inside a record (-1: none); corrupt counts
 * the records skipped before the end (bad CRC or length) and
 * corrupt_offset is the first one's offset (-1: none). */
KVMSTATS_API int64_t
kvmstats_log_reader__torn_offset(const struct kvmstats_log_reader *r);
KVMSTATS_API uint64_t
kvmstats_log_reader__corrupt(const struct kvmstats_log_reader *r);
KVMSTATS_API int64_t
kvmstats_log_reader__corrupt_offset(const struct kvmstats_log_reader *r);

#ifdef __cplusplus
}
#endif

#endif /* KVMSTATS_LOG_H */
