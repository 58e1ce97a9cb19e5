// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats serve: the migration follower (--follow-interval); see serve.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "follow.h"
#include "serve.h"

/*
 * Every --follow-interval seconds one thread asks each exported VMM's
 * monitor query-migrate (the library's follower: read only, one short
 * exchange on a fresh connection, bounded by --qmp-timeout, the monitor
 * never held between polls). A migration is the VM's when its status is
 * under way, or has ended with another status or other figures than at
 * the follower's first look (QEMU keeps the figures of its last migration
 * until the next one starts). When one is first seen, the prediction of
 * the planner's last round published before it started (QEMU's
 * total-time tells when) is kept for it; when it ends, QEMU's figures,
 * that prediction and the error of each, (real - predicted) / real as
 * `kvmstats follow` computes it, become the VM's last_* gauges, rendered
 * in both formats and published as the planner publishes its own. A VMM
 * that exits keeps them FOLLOW_KEEP_S seconds (a source QEMU is usually
 * quit as soon as its migration completed); one whose monitor cannot be
 * read is said once and has none. The VMs libvirt runs are read from
 * libvirt's job info (--libvirt-uri), all through one guard: a hung
 * libvirtd costs the follower one waiting thread, not one per VM.
 */
#define FOLLOW_KEEP_S 600
/* Failed polls in a row before a VM is said to be unreadable. */
#define FOLLOW_SAY_AFTER 3

struct follow_vm {
	pid_t pid;
	char name[128];
	struct kvmstats_follow *f; /* NULL: not followed (or exited) */
	bool listed; /* exported at this round */
	bool said; /* why it is not read, said once */
	int fails; /* failed polls in a row */
	bool answered; /* the last poll was answered */
	struct kvmstats_migbase base; /* the figures of a migration not ours */
	bool running; /* one of ours under way */
	double pred_s, pred_bytes; /* its prediction; NAN: none */
	bool have_last; /* an ended one: the last_* gauges */
	struct kvmstats_migration last;
	double last_pred_s, last_pred_bytes;
	double last_end; /* seen ended, Unix time */
	uint64_t gone_ns; /* the VMM exited (0: runs) */
};

static void vm_close(struct follow_vm *v)
{
	kvmstats_follow__free(v->f);
	v->f = NULL;
}

/* ---- the gauges -------------------------------------------------------------
 */

enum {
	FG_SECONDS,
	FG_BYTES,
	FG_DOWNTIME,
	FG_PRED_SECONDS,
	FG_PRED_BYTES,
	FG_END,
	FG_NR,
};

static const struct {
	const char *name, *unit, *help;
} follow_gauges[FG_NR] = {
	[FG_SECONDS] =
		{"kvmstats_migration_last_seconds", "seconds",
		 "Duration of the VM's last migration, QEMU's total-time "
		 "(through libvirt: its job less its phases before QEMU "
		 "sent a byte)"},
	[FG_BYTES] = {"kvmstats_migration_last_transferred_bytes", "bytes",
		      "RAM bytes the VM's last migration sent, QEMU's "
		      "ram.transferred"},
	[FG_DOWNTIME] = {"kvmstats_migration_last_downtime_seconds", "seconds",
			 "Downtime of the VM's last migration, QEMU's (once "
			 "completed)"},
	[FG_PRED_SECONDS] =
		{"kvmstats_migration_last_predicted_seconds", "seconds",
		 "Duration the planner predicted for it: its last round "
		 "published before the migration started (absent where "
		 "that round's prediction did not converge)"},
	[FG_PRED_BYTES] = {"kvmstats_migration_last_predicted_transfer_bytes",
			   "bytes",
			   "RAM bytes the planner predicted it would send "
			   "(absent where it did not converge)"},
	[FG_END] = {"kvmstats_migration_last_end_timestamp_seconds", "seconds",
		    "When the follower saw it end (Unix time)"},
};

static double ms_field(const struct kvmstats_migration *m, unsigned int bit,
		       uint64_t ms)
{
	return m->have & bit ? (double)ms / 1e3 : NAN;
}

static double real_bytes(const struct kvmstats_migration *m)
{
	return m->have & KVMSTATS_MIGF_TRANSFERRED ? (double)m->transferred
						   : NAN;
}

static double known(double v)
{
	return isfinite(v) ? v : NAN;
}

static double follow_value(const struct follow_vm *v, int which)
{
	const struct kvmstats_migration *m = &v->last;

	switch (which) {
	case FG_SECONDS:
		return ms_field(m, KVMSTATS_MIGF_TOTAL_TIME, m->total_time_ms);
	case FG_BYTES:
		return real_bytes(m);
	case FG_DOWNTIME:
		return ms_field(m, KVMSTATS_MIGF_DOWNTIME, m->downtime_ms);
	case FG_PRED_SECONDS:
		return known(v->last_pred_s);
	case FG_PRED_BYTES:
		return known(v->last_pred_bytes);
	default:
		return v->last_end;
	}
}

/* The error of a completed migration's prediction; NAN when unknown. */
static double follow_err(const struct follow_vm *v, bool bytes)
{
	const struct kvmstats_migration *m = &v->last;

	if (m->status != KVMSTATS_MIGST_COMPLETED)
		return NAN;
	if (bytes)
		return known(
			follow_error(real_bytes(m), known(v->last_pred_bytes)));
	return known(follow_error(
		ms_field(m, KVMSTATS_MIGF_TOTAL_TIME, m->total_time_ms),
		known(v->last_pred_s)));
}

static void vm_labels(const struct follow_vm *v, char *lab, size_t len)
{
	char name[4 * sizeof(v->name) + 1];

	prom_escape_label(v->name, name, sizeof(name));
	snprintf(lab, len, "pid=\"%d\",name=\"%s\"", (int)v->pid, name);
}

/* The gauges of one kind, for every VM whose last migration ended. */
static void render_last(struct prom_buf *b, enum prom_format f,
			const struct follower *fl, int g)
{
	char lab[4 * sizeof(fl->vms[0].name) + 64];
	bool family = false;

	for (size_t i = 0; i < fl->nvms; i++) {
		const struct follow_vm *v = &fl->vms[i];

		if (!v->have_last || isnan(follow_value(v, g)))
			continue;
		if (!family)
			prom_family(b, f, follow_gauges[g].name, "gauge",
				    follow_gauges[g].unit,
				    follow_gauges[g].help);
		family = true;
		vm_labels(v, lab, sizeof(lab));
		if (g == FG_BYTES) /* QEMU's count, every digit */
			prom_sample_u64(b, follow_gauges[g].name, lab,
					v->last.transferred);
		else
			prom_sample(b, follow_gauges[g].name, lab,
				    follow_value(v, g));
	}
}

static void render_error(struct prom_buf *b, enum prom_format f,
			 const struct follower *fl)
{
	static const char *const what[] = {"seconds", "bytes"};
	char lab[4 * sizeof(fl->vms[0].name) + 96];
	size_t len;
	bool family = false;

	for (size_t i = 0; i < fl->nvms; i++) {
		const struct follow_vm *v = &fl->vms[i];

		for (int k = 0; v->have_last && k < 2; k++) {
			if (isnan(follow_err(v, k)))
				continue;
			if (!family)
				prom_family(
					b, f,
					"kvmstats_migration_last_error_ratio",
					"gauge", NULL,
					"(real - predicted) / real of the VM's "
					"last "
					"completed migration, of its duration "
					"or of "
					"its bytes sent (label what)");
			family = true;
			vm_labels(v, lab, sizeof(lab));
			len = strlen(lab);
			snprintf(lab + len, sizeof(lab) - len, ",what=\"%s\"",
				 what[k]);
			prom_sample(b, "kvmstats_migration_last_error_ratio",
				    lab, follow_err(v, k));
		}
	}
}

static void render_status(struct prom_buf *b, enum prom_format f,
			  const struct follower *fl)
{
	char lab[4 * sizeof(fl->vms[0].name) + 192], st[4 * 32 + 1];
	size_t len;
	bool family = false;

	for (size_t i = 0; i < fl->nvms; i++) {
		const struct follow_vm *v = &fl->vms[i];

		if (!v->have_last)
			continue;
		if (!family)
			prom_family(b, f, "kvmstats_migration_last_status",
				    "gauge", NULL,
				    "1 with the status QEMU gave the VM's last "
				    "migration "
				    "(completed, failed, cancelled)");
		family = true;
		vm_labels(v, lab, sizeof(lab));
		prom_escape_label(v->last.status_name, st, sizeof(st));
		len = strlen(lab);
		snprintf(lab + len, sizeof(lab) - len, ",status=\"%s\"", st);
		prom_sample(b, "kvmstats_migration_last_status", lab, 1);
	}
}

/* 1 while a migration runs, 0 when none does; absent for a VM whose
 * monitor did not answer the last poll. */
static void render_running(struct prom_buf *b, enum prom_format f,
			   const struct follower *fl)
{
	char lab[4 * sizeof(fl->vms[0].name) + 64];
	bool family = false;

	for (size_t i = 0; i < fl->nvms; i++) {
		const struct follow_vm *v = &fl->vms[i];

		if (!v->f || !v->answered)
			continue;
		if (!family)
			prom_family(
				b, f, "kvmstats_migration_running", "gauge",
				NULL,
				"1 while a migration of the VM runs, 0 when "
				"none "
				"does (absent: its monitor did not answer)");
		family = true;
		vm_labels(v, lab, sizeof(lab));
		prom_sample(b, "kvmstats_migration_running", lab, v->running);
	}
}

static void render_follow(struct prom_buf *b, enum prom_format f,
			  const struct follower *fl)
{
	b->len = 0;
	b->failed = false;
	render_running(b, f, fl);
	for (int g = 0; g < FG_NR; g++)
		render_last(b, f, fl, g);
	render_error(b, f, fl);
	render_status(b, f, fl);
}

void follow_metrics(struct server *s, struct prom_buf *b, enum prom_format f)
{
	struct follower *fl = &s->follow;

	if (!s->o.follow_s)
		return;
	pthread_mutex_lock(&fl->lock);
	prom_family(b, f, "kvmstats_migrations_followed", "counter", NULL,
		    "Migrations the follower saw end (completed, failed or "
		    "cancelled) since serve started");
	prom_sample_u64(b, "kvmstats_migrations_followed_total", NULL,
			fl->followed);
	if (fl->text[f].len)
		prom_buf_put(b, fl->text[f].p, fl->text[f].len);
	pthread_mutex_unlock(&fl->lock);
}

static void follow_publish(struct server *s)
{
	struct follower *fl = &s->follow;

	render_follow(&fl->next[PROM_TEXT], PROM_TEXT, fl);
	render_follow(&fl->next[PROM_OPENMETRICS], PROM_OPENMETRICS, fl);
	if (fl->next[PROM_TEXT].failed || fl->next[PROM_OPENMETRICS].failed) {
		cli_warn(s->cli, "follower: out of memory");
		return;
	}
	pthread_mutex_lock(&fl->lock);
	for (int f = 0; f < 2; f++) {
		struct prom_buf t = fl->text[f];

		fl->text[f] = fl->next[f];
		fl->next[f] = t;
	}
	fl->followed = fl->ended;
	pthread_mutex_unlock(&fl->lock);
}

/* ---- following --------------------------------------------------------------
 */

static struct follow_vm *vm_find(struct follower *fl, pid_t pid)
{
	for (size_t i = 0; i < fl->nvms; i++)
		if (fl->vms[i].pid == pid)
			return &fl->vms[i];
	return NULL;
}

static void vm_open(struct server *s, struct follow_vm *v)
{
	struct kvmstats_follow_opts o = {
		.sz = sizeof(o),
		.timeout_ms = s->targs->timeout_ms,
		.qmp_path = s->targs->npids == 1 ? s->targs->qmp : NULL,
		.libvirt_uri = s->targs->libvirt_uri,
		.libvirt_guard = s->follow.libvirt_guard,
	};
	char why[512] = "";
	int e = kvmstats_follow__open(&v->f, v->pid, &o, why, sizeof(why));

	/* Not QEMU, no monitor on its command line, gone: nothing to say. */
	if (!e || e == -ENOTSUP || e == -ENOENT || e == -ESRCH)
		return;
	v->said = true;
	cli_warn(s->cli, "follower: pid %d: %s", (int)v->pid,
		 why[0] ? why : strerror(-e));
}

/* A VMM seen for the first time. */
static struct follow_vm *vm_add(struct server *s, pid_t pid, const char *name)
{
	struct follower *fl = &s->follow;
	struct follow_vm *v;

	if (fl->nvms == fl->cap) {
		size_t cap = fl->cap ? 2 * fl->cap : 16;

		v = realloc(fl->vms, cap * sizeof(*v));
		if (!v)
			return NULL;
		fl->vms = v;
		fl->cap = cap;
	}
	v = &fl->vms[fl->nvms++];
	memset(v, 0, sizeof(*v));
	v->pid = pid;
	snprintf(v->name, sizeof(v->name), "%s", name ? name : "");
	v->pred_s = v->pred_bytes = NAN;
	vm_open(s, v);
	return v;
}

/* Mark the exported VMMs (as the planner selects them), adding new ones;
 * their names are copied under the scrape lock, the monitors opened off
 * it. */
static void follow_list(struct server *s)
{
	struct follower *fl = &s->follow;
	struct {
		pid_t pid;
		char name[128];
	} *add = NULL;
	size_t n = 0, max;

	for (size_t i = 0; i < fl->nvms; i++)
		fl->vms[i].listed = false;
	pthread_mutex_lock(&s->lock);
	max = kvmstats_host__num_vmms(s->host);
	add = calloc(max + 1, sizeof(*add));
	for (size_t i = 0; add && i < max; i++) {
		struct kvmstats_vmm *vmm = kvmstats_host__vmm(s->host, i);
		pid_t pid = kvmstats_vmm__pid(vmm);
		struct follow_vm *v;

		if (s->targs->name_set && !target_selected(s->targs, vmm))
			continue;
		v = vm_find(fl, pid);
		if (v) {
			v->listed = true;
			continue;
		}
		add[n].pid = pid;
		snprintf(add[n++].name, sizeof(add->name), "%s",
			 kvmstats_vmm__name(vmm) ? kvmstats_vmm__name(vmm)
						 : "");
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		struct follow_vm *v = vm_add(s, add[i].pid, add[i].name);

		if (v)
			v->listed = true;
	}
	if (!add)
		cli_warn(s->cli, "follower: out of memory");
	free(add);
}

/* Forget the VMMs gone from the host, those with a last migration after
 * FOLLOW_KEEP_S. */
static void follow_prune(struct follower *fl, uint64_t now)
{
	size_t k = 0;

	for (size_t i = 0; i < fl->nvms; i++) {
		struct follow_vm *v = &fl->vms[i];

		if (!v->listed && !v->gone_ns)
			v->gone_ns = now;
		if (v->gone_ns)
			vm_close(v);
		if (v->gone_ns &&
		    (!v->have_last ||
		     now - v->gone_ns > FOLLOW_KEEP_S * 1000000000ull))
			continue;
		fl->vms[k++] = *v;
	}
	fl->nvms = k;
}

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A migration of ours first seen: the plan current when it started. */
static void vm_started(struct server *s, struct follow_vm *v,
		       const struct kvmstats_migration *m)
{
	uint64_t now = now_ns(), ago = 0;
	struct plan_pred p;

	if (m->have & KVMSTATS_MIGF_TOTAL_TIME)
		ago = m->total_time_ms * 1000000ull;
	v->running = true;
	v->pred_s = v->pred_bytes = NAN;
	if (ago <= now && plan_prediction(s, v->pid, now - ago, &p)) {
		v->pred_s = p.seconds;
		v->pred_bytes = p.bytes;
	}
}

static void vm_ended(struct follower *fl, struct follow_vm *v,
		     const struct kvmstats_migration *m)
{
	v->running = false;
	v->have_last = true;
	v->last = *m;
	v->last_pred_s = v->pred_s;
	v->last_pred_bytes = v->pred_bytes;
	v->last_end = wall_s();
	kvmstats_migbase__set(&v->base, m);
	fl->ended++;
}

static void vm_failed(struct server *s, struct follow_vm *v, int e,
		      const char *why)
{
	v->answered = false;
	if (e == -ESRCH) {
		v->gone_ns = now_ns();
		vm_close(v);
		return;
	}
	/* Busy or slow for a moment is normal (another client asks, or
	 * QEMU's main loop is slow mid-migration): said once it lasts. */
	if (++v->fails < FOLLOW_SAY_AFTER || v->said)
		return;
	v->said = true;
	cli_warn(s->cli, "follower: pid %d: %s", (int)v->pid,
		 why[0] ? why : strerror(-e));
}

static void vm_poll(struct server *s, struct follow_vm *v)
{
	struct kvmstats_migration m;
	char why[512] = "";
	bool ended;
	int e;

	pthread_mutex_lock(&s->qmp_lock);
	e = kvmstats_follow__poll(v->f, &m, why, sizeof(why));
	pthread_mutex_unlock(&s->qmp_lock);

	if (e) {
		vm_failed(s, v, e, why);
		return;
	}
	v->fails = 0;
	v->answered = true;
	ended = kvmstats_migst_ended(m.status);
	if (!v->base.set) {
		/* What the VMM shows of a migration before we looked. */
		kvmstats_migbase__set(&v->base, &m);
		if (ended)
			return;
	}
	if (m.status == KVMSTATS_MIGST_NONE)
		return;
	/* The last migration's, still shown. */
	if (!v->running && !kvmstats_migbase__is_new(&v->base, &m))
		return;
	if (!v->running)
		vm_started(s, v, &m);
	if (ended)
		vm_ended(&s->follow, v, &m);
}

static bool follow_stopping(struct follower *fl)
{
	bool stop;

	pthread_mutex_lock(&fl->lock);
	stop = fl->stop;
	pthread_mutex_unlock(&fl->lock);
	return stop;
}

static void follow_round(struct server *s)
{
	struct follower *fl = &s->follow;

	follow_list(s);
	for (size_t i = 0; i < fl->nvms && !follow_stopping(fl); i++)
		if (fl->vms[i].f && fl->vms[i].listed && !fl->vms[i].gone_ns)
			vm_poll(s, &fl->vms[i]);
	follow_prune(fl, now_ns());
	follow_publish(s);
}

static bool follow_sleep(struct follower *fl, uint64_t deadline)
{
	return serve_sleep(&fl->lock, &fl->wake, &fl->stop, deadline);
}

static void *follow_main(void *arg)
{
	struct server *s = arg;
	uint64_t period = s->o.follow_s * 1000000000ull, next = now_ns();

	do {
		follow_round(s);
		next += period;
		if (next < now_ns())
			next = now_ns(); /* it overran: the next one now */
	} while (!follow_sleep(&s->follow, next));
	return NULL;
}

void follower_init(struct follower *fl)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&fl->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&fl->wake, &ca);
	pthread_condattr_destroy(&ca);
}

int follower_start(struct server *s)
{
	int err;

	if (!s->o.follow_s)
		return 0;
	s->follow.libvirt_guard = kvmstats_libvirt_guard__new();
	if (!s->follow.libvirt_guard) {
		cli_err(s->cli, "cannot start the migration follower: %s",
			strerror(ENOMEM));
		return -1;
	}
	err = pthread_create(&s->follow.thread, NULL, follow_main, s);
	if (err) {
		cli_err(s->cli, "cannot start the migration follower: %s",
			strerror(err));
		return -1;
	}
	s->follow.started = true;
	return 0;
}

/* The poll under way ends within --qmp-timeout; no other starts. */
static void follower_stop(struct follower *fl)
{
	if (!fl->started)
		return;
	pthread_mutex_lock(&fl->lock);
	fl->stop = true;
	pthread_cond_broadcast(&fl->wake);
	pthread_mutex_unlock(&fl->lock);
	pthread_join(fl->thread, NULL);
	fl->started = false;
}

void follower_free(struct follower *fl)
{
	follower_stop(fl);
	for (size_t i = 0; i < fl->nvms; i++)
		vm_close(&fl->vms[i]);
	free(fl->vms);
	kvmstats_libvirt_guard__free(fl->libvirt_guard);
	for (int f = 0; f < 2; f++) {
		prom_buf_free(&fl->text[f]);
		prom_buf_free(&fl->next[f]);
	}
	pthread_cond_destroy(&fl->wake);
	pthread_mutex_destroy(&fl->lock);
}
