// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The migration speed of a domain whose QEMU monitor libvirt keeps for
 * itself (virsh migrate-getspeed), for the plan (migrate_plan.c).
 *
 * libvirt sets QEMU's max-bandwidth itself when a migration starts: to
 * the speed the domain was given (migrate-setspeed, or the --bandwidth
 * of that migration), else to its "unlimited" (LLONG_MAX bytes/s, in
 * MiB/s); QEMU's own value before then says nothing. The call needs a
 * read-write connection (libvirt checks; root has one). The downtime
 * limit is not asked: libvirt asks QEMU's monitor for it, and a VMM that
 * stops answering held virsh migrate-getmaxdowntime over 70 s in the lab
 * (the speed is libvirt's own: 0.5-0.7 s there, the VMM stopped).
 *
 * The call is made on a thread of its own: a daemon that hangs costs the
 * caller its timeout; the thread ends when libvirt answers, holding
 * nothing of the caller. Callers that share a guard (a planning loop)
 * keep one such thread at most: while it waits, they are told so at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"

#ifdef HAVE_LIBVIRT

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "libvirt_int.h"

#define DEFAULT_URI KS_LIBVIRT_DEFAULT_URI

/* Shared by the caller and the thread; freed by the last. */
struct lv_query {
	atomic_int refs;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Set before the thread starts. */
	char uri[256];
	char uuid[VIR_UUID_STRING_BUFLEN];
	long dom_id;
	pid_t pid;
	enum ks_lv_find how;
	ks_lv_work_fn work;
	size_t res_sz;
	/* The thread's until done, then the caller's (under lock). */
	bool done;
	int err;
	char why[192];
	unsigned char res[];	/* res_sz bytes: the work's answer */
};

static void query_put(struct lv_query *q)
{
	if (atomic_fetch_sub(&q->refs, 1) != 1)
		return;
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->lock);
	free(q);
}

/* The domain of the pid's -uuid, and only while it runs that instance
 * (the ID of its command line's domain-ID-NAME directory, and the pid
 * file libvirt keeps): a VMM names any UUID it likes. KS_LV_SEEN: the
 * instance was found so before, and may have ended since (then the
 * domain by its UUID alone, which is libvirt's word, not the VMM's);
 * one running under another ID is a later instance, not ours. */
static virDomainPtr find(struct lv_query *q, virConnectPtr conn, char *why,
			 size_t len)
{
	virDomainPtr dom = virDomainLookupByUUIDString(conn, q->uuid);
	bool active, other_instance;
	const char *name;
	pid_t other;

	if (!dom) {
		snprintf(why, len, "libvirt knows no domain with UUID %s", q->uuid);
		return NULL;
	}
	name = virDomainGetName(dom);
	active = virDomainIsActive(dom) == 1;
	other_instance = active && q->dom_id >= 0 &&
			 (long)virDomainGetID(dom) != q->dom_id;
	if (q->how == KS_LV_SEEN ? other_instance
	    : !active || other_instance ||
	      (name && ks_libvirt_pid_disagrees(q->uri, name, q->pid, &other))) {
		snprintf(why, len, "the process is not libvirt's running "
			 "instance of domain %s", q->uuid);
		virDomainFree(dom);
		return NULL;
	}
	return dom;
}

static void *query_thread(void *arg)
{
	struct lv_query *q = arg;
	virConnectPtr conn = virConnectOpen(q->uri);
	virDomainPtr dom = NULL;
	char why[192] = "";
	int err = 0;

	if (!conn) {
		snprintf(why, sizeof(why), "libvirt %.100s: %.80s", q->uri,
			 ks_libvirt_error());
		err = -ECONNREFUSED;
	} else {
		virConnSetErrorFunc(conn, NULL, ks_libvirt_quiet);
		dom = find(q, conn, why, sizeof(why));
		err = dom ? 0 : -ENOENT;
	}
	/* res is the thread's alone until done is set (under lock). */
	if (dom) {
		err = q->work(dom, q->res, why, sizeof(why));
		virDomainFree(dom);
	}
	if (conn)
		virConnectClose(conn);
	pthread_mutex_lock(&q->lock);
	q->done = true;
	q->err = err;
	snprintf(q->why, sizeof(q->why), "%s", why);
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	query_put(q);
	return NULL;
}

static struct lv_query *query_new(const struct ks_lv_question *qn)
{
	struct lv_query *q = calloc(1, sizeof(*q) + qn->res_sz);
	pthread_condattr_t ca;

	if (!q)
		return NULL;
	atomic_init(&q->refs, 1);
	pthread_mutex_init(&q->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cond, &ca);
	pthread_condattr_destroy(&ca);
	snprintf(q->uri, sizeof(q->uri), "%s", qn->uri ? qn->uri : DEFAULT_URI);
	snprintf(q->uuid, sizeof(q->uuid), "%s", qn->uuid);
	q->dom_id = qn->dom_id;
	q->pid = qn->pid;
	q->how = qn->how;
	q->work = qn->work;
	q->res_sz = qn->res_sz;
	return q;
}

/* Start the thread, detached; 0 or -errno. */
static int query_start(struct lv_query *q)
{
	pthread_attr_t a;
	pthread_t t;
	sigset_t all, old;
	int err;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	atomic_fetch_add(&q->refs, 1);		/* the thread's */
	/* The caller's thread takes the signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, &a, query_thread, q);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (err)
		atomic_fetch_sub(&q->refs, 1);
	return -err;
}

/* Wait for the thread's answer, at most @timeout_ms; lock held. */
static bool query_wait(struct lv_query *q, unsigned int timeout_ms)
{
	uint64_t end = ks_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	struct timespec ts = { .tv_sec = (time_t)(end / 1000000000ull),
			       .tv_nsec = (long)(end % 1000000000ull) };

	while (!q->done)
		if (pthread_cond_timedwait(&q->cond, &q->lock, &ts) == ETIMEDOUT)
			break;
	return q->done;
}

/* At most one question outstanding per guard (kvmstats_mem.h). */
struct kvmstats_libvirt_guard {
	pthread_mutex_t lock;
	struct lv_query *pending;	/* unanswered when last seen */
	uint64_t pending_since;		/* ns */
};

struct kvmstats_libvirt_guard *kvmstats_libvirt_guard__new(void)
{
	struct kvmstats_libvirt_guard *g = calloc(1, sizeof(*g));

	if (g)
		pthread_mutex_init(&g->lock, NULL);
	return g;
}

void kvmstats_libvirt_guard__free(struct kvmstats_libvirt_guard *g)
{
	if (!g)
		return;
	if (g->pending)
		query_put(g->pending);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

static bool query_done(struct lv_query *q)
{
	bool done;

	pthread_mutex_lock(&q->lock);
	done = q->done;
	pthread_mutex_unlock(&q->lock);
	return done;
}

/* -EBUSY with @why while the guard's last question is unanswered;
 * guard locked. */
static int guard_check(struct kvmstats_libvirt_guard *g, char *why,
		       size_t len)
{
	if (!g->pending)
		return 0;
	if (!query_done(g->pending)) {
		snprintf(why, len, "libvirt %.100s has not "
			 "answered a question asked %.1f s ago", g->pending->uri,
			 (double)(ks_now_ns() - g->pending_since) / 1e9);
		return -EBUSY;
	}
	query_put(g->pending);
	g->pending = NULL;
	return 0;
}

/* Ask, and wait at most @timeout_ms; a question left unanswered is the
 * guard's to watch. */
static int query_ask(struct lv_query *q, unsigned int timeout_ms,
		     struct kvmstats_libvirt_guard *g, void *res, char *why,
		     size_t len)
{
	uint64_t t0 = ks_now_ns();
	int err = query_start(q);

	if (err)
		return err;
	if (!timeout_ms)
		timeout_ms = 1000;
	pthread_mutex_lock(&q->lock);
	if (!query_wait(q, timeout_ms)) {
		snprintf(why, len, "libvirt %.100s did not "
			 "answer within %u ms", q->uri, timeout_ms);
		err = -ETIMEDOUT;
	} else {
		err = q->err;
		memcpy(res, q->res, q->res_sz);
		snprintf(why, len, "%s", q->why);
	}
	pthread_mutex_unlock(&q->lock);
	if (err == -ETIMEDOUT && g) {
		atomic_fetch_add(&q->refs, 1);
		g->pending = q;
		g->pending_since = t0;
	}
	return err;
}

int ks_libvirt_ask(const struct ks_lv_question *qn,
		   struct kvmstats_libvirt_guard *g, void *res, char *why,
		   size_t len)
{
	struct lv_query *q;
	int err = 0;

	why[0] = 0;
	/* No system daemon to ask (a QEMU given -uuid by hand): not
	 * libvirt's, and nothing to connect to. */
	if (!ks_libvirt_daemon_here(qn->uri ? qn->uri : DEFAULT_URI, true))
		return -ENOENT;
	q = query_new(qn);
	if (!q)
		return -ENOMEM;
	if (g) {
		pthread_mutex_lock(&g->lock);
		err = guard_check(g, why, len);
	}
	if (!err)
		err = query_ask(q, qn->timeout_ms, g, res, why, len);
	if (g)
		pthread_mutex_unlock(&g->lock);
	query_put(q);
	return err;
}

/* The planner's question: the domain's migration speed. */
struct lv_speed {
	unsigned long mib;
	bool have;
};

static int speed_work(virDomainPtr dom, void *res, char *why, size_t len)
{
	struct lv_speed *sp = res;

	sp->have = !virDomainMigrateGetMaxSpeed(dom, &sp->mib, 0);
	if (sp->have)
		return 0;
	snprintf(why, len, "migrate-getspeed: %.150s", ks_libvirt_error());
	return -EPERM;
}

int ks_migrate_libvirt(pid_t pid, const char *uri, unsigned int timeout_ms,
		       struct kvmstats_libvirt_guard *g,
		       struct kvmstats_migrate_settings *s,
		       struct ks_libvirt_mig *out)
{
	struct ks_lv_question qn = {
		.uri = uri, .pid = pid, .how = KS_LV_RUNNING,
		.work = speed_work, .res_sz = sizeof(struct lv_speed),
		.timeout_ms = timeout_ms,
	};
	struct lv_speed sp = {0};
	char uuid[VIR_UUID_STRING_BUFLEN];
	int err;

	memset(out, 0, sizeof(*out));
	err = ks_libvirt_cmdline(pid, uuid, sizeof(uuid), &qn.dom_id);
	if (err)
		return err;
	qn.uuid = uuid;
	err = ks_libvirt_ask(&qn, g, &sp, out->why, sizeof(out->why));
	out->speed_unlimited = sp.have &&
			       sp.mib >= KS_LIBVIRT_SPEED_UNLIMITED_MIB;
	if (sp.have && !out->speed_unlimited && sp.mib) {
		s->bandwidth = (double)sp.mib * 1048576.0;
		s->src[KVMSTATS_MIG_BANDWIDTH] = KVMSTATS_MIG_SRC_LIBVIRT;
	}
	return err;
}

#else /* !HAVE_LIBVIRT */

struct kvmstats_libvirt_guard {
	int unused;
};

struct kvmstats_libvirt_guard *kvmstats_libvirt_guard__new(void)
{
	return calloc(1, sizeof(struct kvmstats_libvirt_guard));
}

void kvmstats_libvirt_guard__free(struct kvmstats_libvirt_guard *g)
{
	free(g);
}

int ks_migrate_libvirt(pid_t pid, const char *uri, unsigned int timeout_ms,
		       struct kvmstats_libvirt_guard *g,
		       struct kvmstats_migrate_settings *s,
		       struct ks_libvirt_mig *out)
{
	(void)pid;
	(void)uri;
	(void)timeout_ms;
	(void)g;
	(void)s;
	memset(out, 0, sizeof(*out));
	snprintf(out->why, sizeof(out->why), "kvmstats was built without libvirt");
	return -EOPNOTSUPP;
}

#endif
