// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A libvirt domain's migration, from libvirt's own job info.
 *
 * libvirtd holds a domain's QEMU monitor for good, so query-migrate is
 * not ours to ask there; libvirt answers it for us in the job's typed
 * parameters (virDomainGetJobStats; names from libvirt-domain.h): the
 * running job's while one runs, else the last completed job's, which
 * libvirt keeps (VIR_DOMAIN_JOB_STATS_COMPLETED). That read is made with
 * KEEP_COMPLETED: without it libvirt hands the stats over and forgets
 * them, and `virsh domjobinfo --completed` or another follower would find
 * nothing; a daemon older than 6.0 rejects the flag, and its completed
 * stats are then not read at all (never erased for others).
 *
 * Only a job whose operation is MIGRATION_OUT is a migration; any other
 * (a save, a dump, an incoming migration) reads as none. The parameters
 * map onto query-migrate's fields (libvirt fills them from it):
 * time_elapsed (libvirt's job, from its begin phase: QEMU's total-time
 * plus libvirt's own phases, see ks_follow_lv_lead),
 * memory_processed/remaining/total,
 * memory_constant (zero pages), memory_normal, memory_dirty_rate,
 * memory_iteration (QEMU's dirty-sync-count), memory_bps (as mbps),
 * downtime (expected while running, real once completed), setup_time,
 * auto_converge_throttle, errmsg. A parameter libvirt did not give stays
 * unknown; data_* (memory and disk together) and memory_normal_bytes
 * have no field of their own and are not shown; precopy and postcopy
 * bytes are not in libvirt's stats.
 *
 * Every call is a ks_libvirt_ask() (migrate_libvirt.c): on a thread of
 * its own, within the poll's timeout, and behind a guard, so a daemon
 * that stops answering costs one timeout and one thread, then -EBUSY at
 * once on each poll until it answers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "follow_libvirt.h"
#include "internal.h"
#include "kvmstats_follow.h"
#include "kvmstats_mem.h"

#ifdef HAVE_LIBVIRT

#include "libvirt_int.h"

/* Headers older than libvirt 6.0 lack the flag; daemons that old reject
 * it (job_work then reads no completed job). */
#if !LIBVIR_CHECK_VERSION(6, 0, 0)
#define VIR_DOMAIN_JOB_STATS_KEEP_COMPLETED (1 << 1)
#endif

/* How long after the VMM exited libvirt may still call the migration
 * running: it stops QEMU as it confirms the migration, and ends its job
 * once QEMU's exit is handled (0.6 s was seen to be too short on a real
 * KVM host, where the follower polls at 0.2 s). */
#define LV_GONE_NS (5000 * 1000000ull)

struct ks_follow_lv {
	struct ks_lv_question qn;
	char uuid[VIR_UUID_STRING_BUFLEN];
	char uri[256];
	struct kvmstats_libvirt_guard *g, *own_g;
	bool seen; /* libvirt said the pid is its instance */
	uint64_t gone_ns; /* when a poll first found the VMM exited; 0 */
	bool gone_told; /* its completed job was returned */
	struct ks_lv_lead lead;
};

static bool get_ull(virTypedParameterPtr p, int n, const char *name,
		    uint64_t *v)
{
	unsigned long long x;

	if (virTypedParamsGetULLong(p, n, name, &x) != 1)
		return false;
	*v = x;
	return true;
}

/* libvirt keeps no finer status than its job type: a running job (bounded
 * or not, postcopy too) is "active". */
static enum kvmstats_migst job_status(int type)
{
	switch (type) {
	case VIR_DOMAIN_JOB_COMPLETED:
		return KVMSTATS_MIGST_COMPLETED;
	case VIR_DOMAIN_JOB_FAILED:
		return KVMSTATS_MIGST_FAILED;
	case VIR_DOMAIN_JOB_CANCELLED:
		return KVMSTATS_MIGST_CANCELLED;
	default:
		return KVMSTATS_MIGST_ACTIVE;
	}
}

/* The parameters of a migration-out job as a reading; @type: libvirt's
 * job type (a completed job's with the COMPLETED flag). */
void ks_follow_lv_take(struct kvmstats_migration *m, int type,
		       virTypedParameterPtr p, int n)
{
	static const struct {
		const char *name;
		unsigned int bit;
		size_t off;
	} f[] = {
		{VIR_DOMAIN_JOB_TIME_ELAPSED, KVMSTATS_MIGF_JOB_TIME,
		 offsetof(struct kvmstats_migration, job_time_ms)},
		{VIR_DOMAIN_JOB_SETUP_TIME, KVMSTATS_MIGF_SETUP_TIME,
		 offsetof(struct kvmstats_migration, setup_time_ms)},
		{VIR_DOMAIN_JOB_MEMORY_PROCESSED, KVMSTATS_MIGF_TRANSFERRED,
		 offsetof(struct kvmstats_migration, transferred)},
		{VIR_DOMAIN_JOB_MEMORY_REMAINING, KVMSTATS_MIGF_REMAINING,
		 offsetof(struct kvmstats_migration, remaining)},
		{VIR_DOMAIN_JOB_MEMORY_TOTAL, KVMSTATS_MIGF_TOTAL,
		 offsetof(struct kvmstats_migration, total)},
		{VIR_DOMAIN_JOB_MEMORY_CONSTANT, KVMSTATS_MIGF_DUPLICATE,
		 offsetof(struct kvmstats_migration, duplicate)},
		{VIR_DOMAIN_JOB_MEMORY_NORMAL, KVMSTATS_MIGF_NORMAL,
		 offsetof(struct kvmstats_migration, normal)},
		{VIR_DOMAIN_JOB_MEMORY_ITERATION, KVMSTATS_MIGF_SYNC_COUNT,
		 offsetof(struct kvmstats_migration, dirty_sync_count)},
		{VIR_DOMAIN_JOB_MEMORY_DIRTY_RATE, KVMSTATS_MIGF_DIRTY_RATE,
		 offsetof(struct kvmstats_migration, dirty_pages_rate)},
	};
	const char *errmsg = NULL;
	bool ended;
	uint64_t v;
	int t, ok;

	memset(m, 0, sizeof(*m));
	m->status = job_status(type);
	ended = m->status != KVMSTATS_MIGST_ACTIVE;
	/* A completed job libvirt says did not succeed failed. */
	if (m->status == KVMSTATS_MIGST_COMPLETED &&
	    virTypedParamsGetBoolean(p, n, VIR_DOMAIN_JOB_SUCCESS, &ok) == 1 &&
	    !ok)
		m->status = KVMSTATS_MIGST_FAILED;
	snprintf(m->status_name, sizeof(m->status_name), "%s",
		 kvmstats_migst_str(m->status));
	for (size_t i = 0; i < ARRAY_SIZE(f); i++)
		if (get_ull(p, n, f[i].name,
			    (uint64_t *)((char *)m + f[i].off)))
			m->have |= f[i].bit;
	/* libvirt's downtime is the expected one until the end. */
	if (get_ull(p, n, VIR_DOMAIN_JOB_DOWNTIME, &v)) {
		*(ended ? &m->downtime_ms : &m->expected_downtime_ms) = v;
		m->have |= ended ? KVMSTATS_MIGF_DOWNTIME
				 : KVMSTATS_MIGF_EXPECTED_DOWNTIME;
	}
	/* Bytes/s, from QEMU's mbps (libvirt multiplied it by 10^6/8). */
	if (get_ull(p, n, VIR_DOMAIN_JOB_MEMORY_BPS, &v)) {
		m->mbps = (double)v * 8 / 1e6;
		m->have |= KVMSTATS_MIGF_MBPS;
	}
	if (virTypedParamsGetInt(p, n, VIR_DOMAIN_JOB_AUTO_CONVERGE_THROTTLE,
				 &t) == 1 &&
	    t >= 0 && t <= 100) {
		m->throttle_percent = (unsigned int)t;
		m->have |= KVMSTATS_MIGF_THROTTLE;
	}
	/* QEMU's words through libvirt: the VMM's, shown without its
	 * control characters. */
	if (virTypedParamsGetString(p, n, VIR_DOMAIN_JOB_ERRMSG, &errmsg) ==
		    1 &&
	    errmsg) {
		snprintf(m->error, sizeof(m->error), "%s", errmsg);
		for (char *c = m->error; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
	}
}

/* One virDomainGetJobStats; 1: a migration out (into *@m), 0: no job or
 * another, -errno. */
static int job_read(virDomainPtr dom, unsigned int flags,
		    struct kvmstats_migration *m, char *why, size_t len)
{
	virTypedParameterPtr p = NULL;
	int type = VIR_DOMAIN_JOB_NONE, n = 0, op, ret = 0;

	if (virDomainGetJobStats(dom, &type, &p, &n, flags) < 0) {
		snprintf(why, len, "job stats%s: %.150s",
			 flags ? " (completed)" : "", ks_libvirt_error());
		return -EIO;
	}
	if (type != VIR_DOMAIN_JOB_NONE &&
	    virTypedParamsGetInt(p, n, VIR_DOMAIN_JOB_OPERATION, &op) == 1 &&
	    op == VIR_DOMAIN_JOB_OPERATION_MIGRATION_OUT) {
		ks_follow_lv_take(m, type, p, n);
		ret = 1;
	}
	virTypedParamsFree(p, n);
	return ret;
}

/*
 * libvirt's job begins seconds before QEMU's migration (its begin and
 * prepare phases start the destination's QEMU: 4.8 s of a 8.9 s job on a
 * real KVM host), and libvirt does not give QEMU's total-time. QEMU's
 * start is taken as the midpoint between the job's last poll with no byte
 * sent and its first with some: within half that gap (one poll apart,
 * unless a poll failed). Without both, QEMU's time stays unknown: a
 * follower that came late has libvirt's job time only.
 */
void ks_follow_lv_lead(struct ks_lv_lead *s, struct kvmstats_migration *m)
{
	bool sent = (m->have & KVMSTATS_MIGF_TRANSFERRED) && m->transferred;

	if (!(m->have & KVMSTATS_MIGF_JOB_TIME))
		return;
	if (m->status == KVMSTATS_MIGST_ACTIVE && !sent) {
		/* A job not sending yet, maybe a new one. */
		s->zero_ms = m->job_time_ms;
		s->zero_seen = true;
		s->lead_known = false;
		return;
	}
	if (sent && s->zero_seen && !s->lead_known &&
	    m->job_time_ms >= s->zero_ms) {
		s->lead_ms = s->zero_ms + (m->job_time_ms - s->zero_ms) / 2;
		s->lead_known = true;
		s->zero_seen = false;
	}
	if (!s->lead_known || m->job_time_ms < s->lead_ms)
		return;
	m->total_time_ms = m->job_time_ms - s->lead_ms;
	m->have |= KVMSTATS_MIGF_TOTAL_TIME;
}

/* On the query's thread: the running migration, else the last one. */
static int job_work(virDomainPtr dom, void *res, char *why, size_t len)
{
	struct kvmstats_migration *m = res;
	int run = -ENOENT, e;

	/* An inactive domain has no running job (libvirt says so as an
	 * error): its completed one is what there is. */
	if (virDomainIsActive(dom) == 1)
		run = job_read(dom, 0, m, why, len);
	if (run == 1)
		return 0;
	why[0] = 0;
	e = job_read(dom,
		     VIR_DOMAIN_JOB_STATS_COMPLETED |
			     VIR_DOMAIN_JOB_STATS_KEEP_COMPLETED,
		     m, why, len);
	/* A running domain without a migration whose daemon will not keep
	 * its completed job for others (before 6.0 it rejects the flag):
	 * no migration to tell, rather than a poll that fails. */
	if (e < 0 && run == 0)
		e = 0;
	if (e == 0) {
		memset(m, 0, sizeof(*m));
		m->status = KVMSTATS_MIGST_NONE;
		snprintf(m->status_name, sizeof(m->status_name), "none");
	}
	return e < 0 ? e : 0;
}

int ks_follow_lv_open(struct ks_follow_lv **out, pid_t pid, const char *uri,
		      unsigned int timeout_ms, struct kvmstats_libvirt_guard *g)
{
	struct ks_follow_lv *l;
	int e;

	*out = NULL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	snprintf(l->uri, sizeof(l->uri), "%s",
		 uri ? uri : KS_LIBVIRT_DEFAULT_URI);
	e = ks_libvirt_cmdline(pid, l->uuid, sizeof(l->uuid), &l->qn.dom_id);
	if (!e && !ks_libvirt_daemon_here(l->uri, true))
		e = -ENOENT;
	if (!e && !g) {
		g = l->own_g = kvmstats_libvirt_guard__new();
		e = g ? 0 : -ENOMEM;
	}
	if (e) {
		free(l);
		return e;
	}
	l->g = g;
	l->qn.uri = l->uri;
	l->qn.pid = pid;
	l->qn.uuid = l->uuid;
	l->qn.how = KS_LV_RUNNING;
	l->qn.work = job_work;
	l->qn.res_sz = sizeof(struct kvmstats_migration);
	l->qn.timeout_ms = timeout_ms;
	*out = l;
	return 0;
}

int ks_follow_lv_poll(struct ks_follow_lv *l, bool gone,
		      struct kvmstats_migration *m, char *err, size_t errsz)
{
	struct kvmstats_migration r;
	char why[192];
	int e;

	/* A VMM gone before libvirt vouched for it was never ours to ask
	 * about; once its end was told, or libvirt never told it, there is
	 * no more. */
	if (gone && !l->gone_ns)
		l->gone_ns = ks_now_ns();
	if (gone && (!l->seen || l->gone_told ||
		     ks_now_ns() - l->gone_ns > LV_GONE_NS)) {
		ks_err(err, errsz, "pid %d exited", (int)l->qn.pid);
		return -ESRCH;
	}
	memset(&r, 0, sizeof(r));
	e = ks_libvirt_ask(&l->qn, l->g, &r, why, sizeof(why));
	if (e) {
		ks_err(err, errsz, "%s", why[0] ? why : strerror(-e));
		return e;
	}
	l->seen = true;
	l->qn.how = KS_LV_SEEN;
	if (gone) {
		if (!kvmstats_migst_ended(r.status)) {
			ks_err(err, errsz,
			       "pid %d exited; libvirt has not "
			       "told its migration's end yet",
			       (int)l->qn.pid);
			return -EAGAIN;
		}
		l->gone_told = true;
	}
	ks_follow_lv_lead(&l->lead, &r);
	*m = r;
	return 0;
}

void ks_follow_lv_free(struct ks_follow_lv *l)
{
	if (!l)
		return;
	kvmstats_libvirt_guard__free(l->own_g);
	free(l);
}

#else /* !HAVE_LIBVIRT */

int ks_follow_lv_open(struct ks_follow_lv **out, pid_t pid, const char *uri,
		      unsigned int timeout_ms, struct kvmstats_libvirt_guard *g)
{
	(void)pid;
	(void)uri;
	(void)timeout_ms;
	(void)g;
	*out = NULL;
	return -ENOENT;
}

int ks_follow_lv_poll(struct ks_follow_lv *l, bool gone,
		      struct kvmstats_migration *m, char *err, size_t errsz)
{
	(void)l;
	(void)gone;
	(void)m;
	ks_err(err, errsz, "kvmstats was built without libvirt");
	return -EOPNOTSUPP;
}

void ks_follow_lv_free(struct ks_follow_lv *l)
{
	(void)l;
}

#endif
