/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvmstats, migrations as they run: QEMU's own counters of a VMM's
 * migration (QMP query-migrate), read from the monitor the planner reads
 * its settings from, with the same trust checks and time bounds; for a
 * VM libvirt runs (libvirtd holds its monitor for good), the same
 * counters from libvirt's job info (virDomainGetJobStats).
 *
 * Read only: nothing here sends a command that changes a migration. Each
 * poll is one short exchange on a fresh connection (QEMU serves one client
 * per monitor socket: a connection held between polls would lock out the
 * operator's own tools), bounded by the timeout.
 *
 * Same conventions as kvmstats.h: 0/-errno, *_opts with sz, no printing,
 * no global state; one object used by one thread at a time.
 */
#ifndef KVMSTATS_FOLLOW_H
#define KVMSTATS_FOLLOW_H

#include "kvmstats.h"

struct kvmstats_libvirt_guard;

#ifdef __cplusplus
extern "C" {
#endif

/* QEMU's MigrationStatus (qapi/migration.json), the ones a follower
 * tells apart; any other is KVMSTATS_MIGST_OTHER (its name kept). */
enum kvmstats_migst {
	KVMSTATS_MIGST_NONE,		/* no migration since QEMU started */
	KVMSTATS_MIGST_SETUP,
	KVMSTATS_MIGST_ACTIVE,		/* pre-copy running */
	KVMSTATS_MIGST_POSTCOPY,	/* postcopy-active and its pauses */
	KVMSTATS_MIGST_SWITCHOVER,	/* pre-switchover, device */
	KVMSTATS_MIGST_CANCELLING,
	KVMSTATS_MIGST_COMPLETED,
	KVMSTATS_MIGST_FAILED,
	KVMSTATS_MIGST_CANCELLED,
	KVMSTATS_MIGST_OTHER,
};

/* Which fields of struct kvmstats_migration QEMU gave (its version and
 * the migration's state decide: expected-downtime only while active,
 * downtime only once completed, precopy-bytes from QEMU 7.0). */
enum kvmstats_mig_field {
	KVMSTATS_MIGF_TOTAL_TIME = 1u << 0,
	KVMSTATS_MIGF_EXPECTED_DOWNTIME = 1u << 1,
	KVMSTATS_MIGF_DOWNTIME = 1u << 2,
	KVMSTATS_MIGF_SETUP_TIME = 1u << 3,
	KVMSTATS_MIGF_TRANSFERRED = 1u << 4,
	KVMSTATS_MIGF_REMAINING = 1u << 5,
	KVMSTATS_MIGF_TOTAL = 1u << 6,
	KVMSTATS_MIGF_DUPLICATE = 1u << 7,
	KVMSTATS_MIGF_NORMAL = 1u << 8,
	KVMSTATS_MIGF_SYNC_COUNT = 1u << 9,
	KVMSTATS_MIGF_DIRTY_RATE = 1u << 10,
	KVMSTATS_MIGF_MBPS = 1u << 11,
	KVMSTATS_MIGF_PRECOPY_BYTES = 1u << 12,
	KVMSTATS_MIGF_POSTCOPY_BYTES = 1u << 13,
	KVMSTATS_MIGF_THROTTLE = 1u << 14,
	KVMSTATS_MIGF_JOB_TIME = 1u << 15,
};

/* One answer of query-migrate. A field whose bit is not in @have was not
 * given: it is unknown, not 0.
 *
 * Through libvirt, total_time_ms is derived: libvirt's job time
 * (job_time_ms) includes its own phases before QEMU's migration (the
 * destination's QEMU starting: seconds with no byte sent), so the follower
 * takes QEMU's start as the midpoint between the last poll of the job
 * with no byte sent and the first with some, and total_time_ms is known
 * only when it saw both. */
struct kvmstats_migration {
	enum kvmstats_migst status;
	char status_name[32];		/* QEMU's word */
	unsigned int have;		/* KVMSTATS_MIGF_* */
	uint64_t total_time_ms;		/* QEMU's: since it started (or its total) */
	uint64_t job_time_ms;		/* libvirt's job, its phases included */
	uint64_t expected_downtime_ms, downtime_ms, setup_time_ms;
	uint64_t transferred;		/* ram.transferred: bytes sent */
	uint64_t remaining, total;	/* ram.remaining, ram.total (bytes) */
	uint64_t duplicate, normal;	/* pages: zero, sent whole */
	uint64_t dirty_sync_count;	/* bitmap syncs: the passes */
	uint64_t dirty_pages_rate;	/* pages/s, as QEMU measures it */
	double mbps;			/* QEMU's rate, megabits per second */
	uint64_t precopy_bytes, postcopy_bytes;
	unsigned int throttle_percent;	/* cpu-throttle-percentage */
	char error[160];		/* error-desc of a failed one */
};

/* Has a migration of this status ended (completed, failed, cancelled)? */
KVMSTATS_API bool kvmstats_migst_ended(enum kvmstats_migst s);
KVMSTATS_API const char *kvmstats_migst_str(enum kvmstats_migst s);

/* What a follower first saw of a VMM's migrations: QEMU (and libvirt)
 * keep showing the last migration's status and figures until the next
 * one starts, so an ended migration is a new one only when its status,
 * total time or bytes differ from the base's. "None" (the first look was
 * not at an ended migration): the figures are UINT64_MAX and every ended
 * migration is new. Zeroed: no base yet. */
struct kvmstats_migbase {
	bool set;
	enum kvmstats_migst status;
	uint64_t total_time_ms, transferred;
};

/* Make @m the base: its status and figures when it ended, else "none". */
KVMSTATS_API void kvmstats_migbase__set(struct kvmstats_migbase *b,
					const struct kvmstats_migration *m);
/* Is @m a migration other than the base's: one under way, or one that
 * ended with another status, total time or bytes? Never one of status
 * none. */
KVMSTATS_API bool kvmstats_migbase__is_new(const struct kvmstats_migbase *b,
					   const struct kvmstats_migration *m);

struct kvmstats_follow_opts {
	size_t sz;
	const char *qmp_path;	/* NULL: the monitors on QEMU's command line */
	unsigned int timeout_ms;	/* one poll, connection included; 0: 1000 */
	/* A VMM libvirt started is followed through libvirt (unless
	 * qmp_path is given): its daemon (NULL: qemu:///system), and the
	 * guard that keeps one question to it outstanding at most (NULL:
	 * the follower's own; kvmstats_mem.h). */
	const char *libvirt_uri;
	struct kvmstats_libvirt_guard *libvirt_guard;
};

struct kvmstats_follow;

/* Follow VMM @pid's migrations: its monitor sockets are found (as the
 * planner finds them) but not connected to yet; a VMM libvirt started
 * (its command line, and the daemon's socket here) is followed through
 * libvirt instead, asked nothing yet. -ESRCH (gone), -ENOTSUP
 * (not QEMU), -ENOENT (no QMP monitor on its command line), -ENOMEM;
 * @err (may be NULL) gets one line. */
KVMSTATS_API int kvmstats_follow__open(struct kvmstats_follow **out, pid_t pid,
				       const struct kvmstats_follow_opts *opts,
				       char *err, size_t errsz);
/* One query-migrate into *@m, through the first monitor that answers
 * (each checked as the planner checks it, every time). -EBUSY: every
 * monitor is held by another client, -ETIMEDOUT, -EACCES (not a socket
 * the VMM may use), -ESRCH (the VMM is gone), -EPROTO.
 * Through libvirt: its running migration-out job, else its last completed
 * one (kept for other readers), on a thread within the timeout; -ENOENT
 * (not libvirt's running instance of its domain), -ETIMEDOUT, -EBUSY (the
 * last question is not answered yet: asked again only once it is),
 * -EAGAIN (the VMM exited, libvirt has not told the end yet), -EIO. Once
 * the VMM exited its completed job is read once more, then -ESRCH. */
KVMSTATS_API int kvmstats_follow__poll(struct kvmstats_follow *f,
				       struct kvmstats_migration *m, char *err,
				       size_t errsz);
KVMSTATS_API pid_t kvmstats_follow__pid(const struct kvmstats_follow *f);
/* Where the readings come from: "qmp" or "libvirt". */
KVMSTATS_API const char *
kvmstats_follow__source(const struct kvmstats_follow *f);
KVMSTATS_API void kvmstats_follow__free(struct kvmstats_follow *f);

#ifdef __cplusplus
}
#endif

#endif
