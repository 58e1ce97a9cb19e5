// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A VMM's migration as QEMU counts it: query-migrate, polled.
 *
 * The monitor is found and checked as the planner's (mem_regions.c) and
 * the qmp source's: the sockets QEMU's command line names, each taken
 * only if the VMM could use it itself (ks_qmp_sock_open(), qmp_trust.c),
 * and kept as an O_PATH fd so that what is renamed over the path later is
 * never connected to. Each poll connects, asks query-migrate and leaves:
 * QEMU serves one client per monitor, and one held between polls would
 * lock out whoever starts the migration. A monitor another client holds
 * is reported busy. A VMM libvirt started (its command line says so and
 * the daemon is here) is not asked at all: libvirt holds its monitors for
 * good, and its migration is read from libvirt's job info instead
 * (follow_libvirt.c).
 *
 * Fields (QEMU's qapi/migration.json, MigrationInfo and MigrationStats,
 * read for facts only): status, total-time, expected-downtime (while
 * active), downtime (once completed), setup-time, error-desc (failed),
 * cpu-throttle-percentage (auto-converge); ram.transferred, remaining,
 * total, duplicate, normal, dirty-sync-count, dirty-pages-rate and mbps
 * (a number) since long before 7.2; ram.precopy-bytes, downtime-bytes and
 * postcopy-bytes since 7.0. Any of them may be absent: a field not given
 * stays unknown. Nothing is sent that changes a migration.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "follow_libvirt.h"
#include "internal.h"
#include "kvmstats_follow.h"
#include "source_qmp.h"

/* query-migrate answers in well under a KiB; a monitor that sends more
 * is not answering us. */
#define FOLLOW_MAX_ANSWER (64u << 10)

struct follow_sock {
	int pathfd;
	struct stat st;
	char path[PATH_MAX];
};

struct kvmstats_follow {
	pid_t pid;
	pid_t as; /* whose word the paths are (0: the caller's) */
	int pidfd; /* readable once the VMM exited */
	unsigned int timeout_ms;
	int nsocks;
	struct follow_sock socks[KS_QMP_MAX_SOCKS];
	struct ks_follow_lv *lv;	/* libvirt's VM: asked instead */
};

static const struct {
	const char *name;
	enum kvmstats_migst st;
} status_names[] = {
	{"none", KVMSTATS_MIGST_NONE},
	{"setup", KVMSTATS_MIGST_SETUP},
	{"active", KVMSTATS_MIGST_ACTIVE},
	{"wait-unplug", KVMSTATS_MIGST_ACTIVE},
	{"postcopy-active", KVMSTATS_MIGST_POSTCOPY},
	{"postcopy-paused", KVMSTATS_MIGST_POSTCOPY},
	{"postcopy-recover-setup", KVMSTATS_MIGST_POSTCOPY},
	{"postcopy-recover", KVMSTATS_MIGST_POSTCOPY},
	{"pre-switchover", KVMSTATS_MIGST_SWITCHOVER},
	{"device", KVMSTATS_MIGST_SWITCHOVER},
	{"cancelling", KVMSTATS_MIGST_CANCELLING},
	{"completed", KVMSTATS_MIGST_COMPLETED},
	{"failed", KVMSTATS_MIGST_FAILED},
	{"cancelled", KVMSTATS_MIGST_CANCELLED},
};

bool kvmstats_migst_ended(enum kvmstats_migst s)
{
	return s == KVMSTATS_MIGST_COMPLETED || s == KVMSTATS_MIGST_FAILED ||
	       s == KVMSTATS_MIGST_CANCELLED;
}

void kvmstats_migbase__set(struct kvmstats_migbase *b,
			   const struct kvmstats_migration *m)
{
	bool ended = kvmstats_migst_ended(m->status);

	b->set = true;
	b->status = m->status;
	b->total_time_ms = ended ? m->total_time_ms : UINT64_MAX;
	b->transferred = ended ? m->transferred : UINT64_MAX;
}

bool kvmstats_migbase__is_new(const struct kvmstats_migbase *b,
			      const struct kvmstats_migration *m)
{
	if (m->status == KVMSTATS_MIGST_NONE)
		return false;
	if (!kvmstats_migst_ended(m->status))
		return true;
	/* (a migration that failed or was cancelled between two polls may
	 * show no figures at all: its status alone tells it) */
	return !b->set || m->status != b->status ||
	       m->total_time_ms != b->total_time_ms ||
	       m->transferred != b->transferred;
}

const char *kvmstats_migst_str(enum kvmstats_migst s)
{
	static const char *const names[] = {
		[KVMSTATS_MIGST_NONE] = "none",
		[KVMSTATS_MIGST_SETUP] = "setup",
		[KVMSTATS_MIGST_ACTIVE] = "active",
		[KVMSTATS_MIGST_POSTCOPY] = "postcopy",
		[KVMSTATS_MIGST_SWITCHOVER] = "switchover",
		[KVMSTATS_MIGST_CANCELLING] = "cancelling",
		[KVMSTATS_MIGST_COMPLETED] = "completed",
		[KVMSTATS_MIGST_FAILED] = "failed",
		[KVMSTATS_MIGST_CANCELLED] = "cancelled",
		[KVMSTATS_MIGST_OTHER] = "other",
	};

	return s <= KVMSTATS_MIGST_OTHER ? names[s] : "unknown";
}

pid_t kvmstats_follow__pid(const struct kvmstats_follow *f)
{
	return f->pid;
}

const char *kvmstats_follow__source(const struct kvmstats_follow *f)
{
	return f->lv ? "libvirt" : "qmp";
}

void kvmstats_follow__free(struct kvmstats_follow *f)
{
	if (!f)
		return;
	ks_follow_lv_free(f->lv);
	for (int i = 0; i < f->nsocks; i++)
		close(f->socks[i].pathfd);
	if (f->pidfd >= 0)
		close(f->pidfd);
	free(f);
}

/* The sockets to try: the caller's, else those on QEMU's command line
 * (libvirt's fd-passed one included, to say it is held). */
static int find_socks(struct kvmstats_follow *f, const char *qmp_path,
		      char *err, size_t errsz)
{
	char(*names)[PATH_MAX] = NULL;
	int n = 1, e = -ENOENT;

	f->as = 0;
	if (!qmp_path) {
		names = calloc(KS_QMP_MAX_SOCKS, PATH_MAX);
		if (!names)
			return -ENOMEM;
		f->as = f->pid;
		n = ks_qmp_find_sockets(f->pid, KS_QMP_FIND_FD, names,
					KS_QMP_MAX_SOCKS);
		if (n <= 0) {
			ks_err(err, errsz,
			       n == -ENOTSUP
				       ? "not QEMU"
				       : "no QMP socket on its command line");
			free(names);
			return n < 0 ? n : -ENOENT;
		}
	}
	for (int i = 0; i < n && f->nsocks < KS_QMP_MAX_SOCKS; i++) {
		struct follow_sock *s = &f->socks[f->nsocks];
		const char *p = names ? names[i] : qmp_path;

		s->pathfd = ks_qmp_sock_open(p, f->as, &s->st, err, errsz);
		if (s->pathfd < 0) {
			e = s->pathfd;
			continue;
		}
		snprintf(s->path, sizeof(s->path), "%s", p);
		f->nsocks++;
	}
	free(names);
	return f->nsocks ? 0 : e;
}

int kvmstats_follow__open(struct kvmstats_follow **out, pid_t pid,
			  const struct kvmstats_follow_opts *opts, char *err,
			  size_t errsz)
{
	struct kvmstats_follow_opts o;
	struct kvmstats_follow *f;
	int e;

	*out = NULL;
	e = ks_opts_copy(&o, sizeof(o), opts);
	if (e || pid <= 0)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->pid = pid;
	f->timeout_ms = o.timeout_ms ? o.timeout_ms : 1000;
	f->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (f->pidfd < 0) {
		e = -errno;
		ks_err(err, errsz, "pid %d: %s", (int)pid, strerror(errno));
		free(f);
		return e;
	}
	/* libvirt's VM, unless the caller names a monitor of its own. */
	e = o.qmp_path ? -ENOENT
		       : ks_follow_lv_open(&f->lv, pid, o.libvirt_uri,
					   f->timeout_ms, o.libvirt_guard);
	if (e == -ENOENT)
		e = find_socks(f, o.qmp_path, err, errsz);
	else if (e)
		ks_err(err, errsz, "libvirt: %s", strerror(-e));
	if (e) {
		kvmstats_follow__free(f);
		return e;
	}
	*out = f;
	return 0;
}

static bool gone(const struct kvmstats_follow *f)
{
	struct pollfd p = {.fd = f->pidfd, .events = POLLIN};

	return poll(&p, 1, 0) > 0;
}

static bool get_u64(struct json_object *o, const char *k, uint64_t *v)
{
	struct json_object *j;
	int64_t x;

	if (!json_object_object_get_ex(o, k, &j) ||
	    !json_object_is_type(j, json_type_int))
		return false;
	x = json_object_get_int64(j);
	if (x < 0)
		return false;
	*v = (uint64_t)x;
	return true;
}

static void take_status(struct kvmstats_migration *m, struct json_object *r)
{
	const char *s = ks_json_str(r, "status");

	/* QEMU answers {} before its first migration. */
	m->status = s ? KVMSTATS_MIGST_OTHER : KVMSTATS_MIGST_NONE;
	snprintf(m->status_name, sizeof(m->status_name), "%s", s ? s : "none");
	for (size_t i = 0; s && i < ARRAY_SIZE(status_names); i++)
		if (!strcmp(s, status_names[i].name))
			m->status = status_names[i].st;
	s = ks_json_str(r, "error-desc");
	snprintf(m->error, sizeof(m->error), "%s", s ? s : "");
}

/* Is QEMU's "completed" not yet the end of a migration of its own? */
static bool completed_too_soon(const struct kvmstats_migration *m)
{
	if (m->status != KVMSTATS_MIGST_COMPLETED)
		return false;
	/* A VM that came in by migration answers its incoming migration's
	 * status, "completed", over that of a migration of its own under
	 * way (qmp_query_migrate fills the destination's state last); only
	 * an active migration of its own gives an expected downtime. */
	if ((m->have & KVMSTATS_MIGF_EXPECTED_DOWNTIME) &&
	    !(m->have & KVMSTATS_MIGF_DOWNTIME))
		return true;
	/* QEMU 7.2's migration thread says "completed" before it works out
	 * total-time and downtime (migration_calculate_complete runs next,
	 * under the BQL; later QEMUs set all three at once): in between
	 * they read 0. The figures are not there yet; the next poll has them
	 * (seen in the lab: a 1.7 s migration "completed" in 0 s). */
	return (m->have & KVMSTATS_MIGF_TOTAL_TIME) && !m->total_time_ms &&
	       !m->downtime_ms;
}

static void take_ram(struct kvmstats_migration *m, struct json_object *ram)
{
	static const struct {
		const char *key;
		unsigned int bit;
		size_t off;
	} f[] = {
		{"transferred", KVMSTATS_MIGF_TRANSFERRED,
		 offsetof(struct kvmstats_migration, transferred)},
		{"remaining", KVMSTATS_MIGF_REMAINING,
		 offsetof(struct kvmstats_migration, remaining)},
		{"total", KVMSTATS_MIGF_TOTAL,
		 offsetof(struct kvmstats_migration, total)},
		{"duplicate", KVMSTATS_MIGF_DUPLICATE,
		 offsetof(struct kvmstats_migration, duplicate)},
		{"normal", KVMSTATS_MIGF_NORMAL,
		 offsetof(struct kvmstats_migration, normal)},
		{"dirty-sync-count", KVMSTATS_MIGF_SYNC_COUNT,
		 offsetof(struct kvmstats_migration, dirty_sync_count)},
		{"dirty-pages-rate", KVMSTATS_MIGF_DIRTY_RATE,
		 offsetof(struct kvmstats_migration, dirty_pages_rate)},
		{"precopy-bytes", KVMSTATS_MIGF_PRECOPY_BYTES,
		 offsetof(struct kvmstats_migration, precopy_bytes)},
		{"postcopy-bytes", KVMSTATS_MIGF_POSTCOPY_BYTES,
		 offsetof(struct kvmstats_migration, postcopy_bytes)},
	};
	struct json_object *j;

	for (size_t i = 0; i < ARRAY_SIZE(f); i++)
		if (get_u64(ram, f[i].key, (uint64_t *)((char *)m + f[i].off)))
			m->have |= f[i].bit;
	/* mbps is a number: a double, or an int when it is whole. */
	if (json_object_object_get_ex(ram, "mbps", &j) &&
	    (json_object_is_type(j, json_type_double) ||
	     json_object_is_type(j, json_type_int)) &&
	    json_object_get_double(j) >= 0) {
		m->mbps = json_object_get_double(j);
		m->have |= KVMSTATS_MIGF_MBPS;
	}
}

void ks_follow_take_info(struct kvmstats_migration *m, struct json_object *r)
{
	struct json_object *ram;
	uint64_t v;

	memset(m, 0, sizeof(*m));
	take_status(m, r);
	if (get_u64(r, "total-time", &m->total_time_ms))
		m->have |= KVMSTATS_MIGF_TOTAL_TIME;
	if (get_u64(r, "expected-downtime", &m->expected_downtime_ms))
		m->have |= KVMSTATS_MIGF_EXPECTED_DOWNTIME;
	if (get_u64(r, "downtime", &m->downtime_ms))
		m->have |= KVMSTATS_MIGF_DOWNTIME;
	if (get_u64(r, "setup-time", &m->setup_time_ms))
		m->have |= KVMSTATS_MIGF_SETUP_TIME;
	if (get_u64(r, "cpu-throttle-percentage", &v) && v <= 100) {
		m->throttle_percent = (unsigned int)v;
		m->have |= KVMSTATS_MIGF_THROTTLE;
	}
	if (json_object_object_get_ex(r, "ram", &ram) &&
	    json_object_is_type(ram, json_type_object))
		take_ram(m, ram);
	if (completed_too_soon(m)) {
		m->status = KVMSTATS_MIGST_ACTIVE;
		snprintf(m->status_name, sizeof(m->status_name), "active");
	}
}

/* One exchange on one socket. */
static int ask(struct kvmstats_follow *f, struct follow_sock *s,
	       uint64_t deadline, struct kvmstats_migration *m, char *err,
	       size_t errsz)
{
	struct json_object *r = NULL;
	struct ks_qmp *q;
	int e;

	e = ks_qmp_connect_fd(&q, s->pathfd, &s->st, s->path, f->as, -1,
			      KS_QMP_LAZY_CAPS, deadline, err, errsz);
	if (e)
		return e;
	ks_qmp_set_max_msg(q, FOLLOW_MAX_ANSWER);
	e = ks_qmp_call(q, "query-migrate", NULL, deadline, &r, err, errsz);
	ks_qmp_close(q);
	if (!e && !json_object_is_type(r, json_type_object)) {
		ks_err(err, errsz,
		       "QMP socket %s: query-migrate: not an "
		       "object",
		       s->path);
		e = -EPROTO;
	}
	if (!e)
		ks_follow_take_info(m, r);
	json_object_put(r);
	return e;
}

int kvmstats_follow__poll(struct kvmstats_follow *f,
			  struct kvmstats_migration *m, char *err, size_t errsz)
{
	uint64_t deadline = ks_qmp_deadline(f->timeout_ms);
	int e = -ENOENT;

	if (f->lv)
		return ks_follow_lv_poll(f->lv, gone(f), m, err, errsz);
	if (gone(f)) {
		ks_err(err, errsz, "pid %d exited", (int)f->pid);
		return -ESRCH;
	}
	/* Until one answers: every monitor of a QEMU tells the same. */
	for (int i = 0; i < f->nsocks; i++) {
		e = ask(f, &f->socks[i], deadline, m, err, errsz);
		if (!e)
			return 0;
		if (e == -ETIMEDOUT || e == -ECANCELED)
			break;
	}
	if (e == -EBUSY)
		ks_err(err, errsz,
		       "QMP: every monitor of pid %d is held by "
		       "another client (libvirt holds its VMs' monitors for "
		       "good; its job info is read instead only with its "
		       "daemon here and kvmstats built with libvirt)",
		       (int)f->pid);
	else if (gone(f))
		e = -ESRCH;
	return e;
}
