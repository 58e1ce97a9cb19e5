// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats serve: the migration planner (--plan-interval); see serve.h. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "plan_args.h"
#include "serve.h"

/* ---- the migration planner (--plan-interval) ------------------------------ */

/*
 * Every --plan-interval seconds (start to start; a round that overran is
 * followed by the next one at once, never by two at a time), one thread
 * plans every exported VMM as `kvmstats plan` would: its guest RAM (QEMU's
 * RAM blocks over one short QMP exchange), its zero pages by
 * --plan-method, its dirty rate over --plan-dirty-interval (every VMM in
 * the same interval, up to two more for a VMM whose verdict is uncertain:
 * plan_measure()) and the migration model. The figures are rendered in
 * both formats and published; a scrape copies the latest ones and says how
 * old they are. So a scrape never waits for a plan, and a slow plan (a
 * scan of a large VM) never holds the lock scrapes take: only the list of
 * VMMs and, for the stats method, KVM's counters are read under it, for
 * microseconds. The thread runs at nice 10 (the scan's workers inherit
 * it), below the scrapes and the guests' vCPU threads, and a scan keeps
 * to --plan-max-cpu and --plan-rate. A VMM that exits mid-plan is left out
 * of that round.
 */
#define PLAN_NICE 10
/* How soon a round that found no VMM (discovery under way) is tried again. */
#define PLAN_EMPTY_RETRY_NS 1000000000ull

/* The per-VM gauges: the figures of `kvmstats plan --json`, their names
 * and values the library's (kvmstats_plan_vm__gauge()), in this order. */
static const struct {
	enum kvmstats_plan_gauge g;
	const char *unit, *help;
} plan_gauges[] = {
	{KVMSTATS_PLAN_GAUGE_MEMORY, "bytes", "Guest RAM found in the VMM"},
	{KVMSTATS_PLAN_GAUGE_ZERO, NULL,
	 "Guest pages (4 KiB) that are zero, by the method in the label"},
	{KVMSTATS_PLAN_GAUGE_NONZERO, NULL,
	 "Guest pages (4 KiB) that are not zero, by the method in the label"},
	{KVMSTATS_PLAN_GAUGE_UNKNOWN, NULL,
	 "Guest pages (4 KiB) of unknown content (swapped), sent as "
	 "normal pages by the model"},
	{KVMSTATS_PLAN_GAUGE_MISSING, NULL,
	 "Guest pages (4 KiB) the VMM took away while the plan read them "
	 "(unknown; estimated where the plan sampled)"},
	{KVMSTATS_PLAN_GAUGE_RATIO, NULL,
	 "Share of the guest pages that are zero"},
	{KVMSTATS_PLAN_GAUGE_DIRTY, NULL,
	 "Guest pages dirtied per second (absent when not measured, as with "
	 "--plan-dirty-interval 0: the model then assumed a clean guest)"},
	{KVMSTATS_PLAN_GAUGE_BYTES, "bytes",
	 "Predicted bytes of RAM a QEMU live migration sends (absent when "
	 "the point prediction does not converge)"},
	{KVMSTATS_PLAN_GAUGE_SECONDS, "seconds",
	 "Predicted duration of a QEMU live migration (absent when the "
	 "point prediction does not converge)"},
	{KVMSTATS_PLAN_GAUGE_CONVERGES, NULL,
	 "1 when the migration is predicted to complete, 0 when not; "
	 "absent when uncertain (see kvmstats_plan_verdict)"},
	{KVMSTATS_PLAN_GAUGE_SECONDS_LO, "seconds",
	 "Predicted duration at the inputs' low bound"},
	{KVMSTATS_PLAN_GAUGE_SECONDS_HI, "seconds",
	 "Predicted duration at the inputs' high bound (absent when "
	 "it does not complete)"},
	{KVMSTATS_PLAN_GAUGE_BYTES_LO, "bytes",
	 "Predicted bytes sent at the inputs' low bound"},
	{KVMSTATS_PLAN_GAUGE_BYTES_HI, "bytes",
	 "Predicted bytes sent at the inputs' high bound (absent when "
	 "it does not complete)"},
	{KVMSTATS_PLAN_GAUGE_DIRTY_SAMPLES, NULL,
	 "Dirty-rate intervals measured (more where the verdict "
	 "was uncertain)"},
	{KVMSTATS_PLAN_GAUGE_POSTCOPY, "seconds",
	 "Predicted post-copy phase (the guest runs on the destination, "
	 "faulting pages in); absent without post-copy"},
	{KVMSTATS_PLAN_GAUGE_ELAPSED, "seconds",
	 "Wall time this VM's plan took, the dirty-rate interval included"},
	{KVMSTATS_PLAN_GAUGE_RANK, NULL,
	 "Position by predicted migration cost, 1 = cheapest"},
};

/* kvmstats_plan_verdict{...,verdict="converges"} 1: one series a VM. */
static void render_verdict(struct prom_buf *b, enum prom_format f,
			   const struct kvmstats_plan_vm *const *vms, size_t n)
{
	char name[4 * sizeof(vms[0]->name) + 1], lab[sizeof(name) + 128];

	if (!n)
		return;
	prom_family(b, f, "kvmstats_plan_verdict", "gauge", NULL,
		    "1 for the verdict of the migration model: converges, uncertain "
		    "(the dirty-rate sample decides) or does-not-converge");
	for (size_t i = 0; i < n; i++) {
		prom_escape_label(vms[i]->name, name, sizeof(name));
		snprintf(lab, sizeof(lab),
			 "pid=\"%d\",name=\"%s\",method=\"%s\",verdict=\"%s\"",
			 (int)vms[i]->pid, name, kvmstats_method_str(vms[i]->method),
			 kvmstats_verdict_str(vms[i]->pred.verdict));
		prom_sample(b, "kvmstats_plan_verdict", lab, 1);
	}
}

/* The per-VM gauges of @n planned VMs, ranked (cheapest first). */
static void render_plan(struct prom_buf *b, enum prom_format f,
			const struct kvmstats_plan_vm *const *vms, size_t n)
{
	char name[4 * sizeof(vms[0]->name) + 1], lab[sizeof(name) + 96];
	const char *gname;
	double val;

	b->len = 0;
	b->failed = false;
	for (size_t g = 0;
	     n && g < sizeof(plan_gauges) / sizeof(plan_gauges[0]); g++) {
		gname = kvmstats_plan_gauge_str(plan_gauges[g].g);
		prom_family(b, f, gname, "gauge", plan_gauges[g].unit,
			    plan_gauges[g].help);
		for (size_t i = 0; i < n; i++) {
			prom_escape_label(vms[i]->name, name, sizeof(name));
			snprintf(lab, sizeof(lab), "pid=\"%d\",name=\"%s\",method=\"%s\"",
				 (int)vms[i]->pid, name, kvmstats_method_str(vms[i]->method));
			/* unknown or not applicable: no sample, never NaN */
			val = kvmstats_plan_vm__gauge(vms[i], plan_gauges[g].g,
						      i + 1);
			if (!isnan(val))
				prom_sample(b, gname, lab, val);
		}
	}
	render_verdict(b, f, vms, n);
}

/* A scrape's part: called under the server's lock, takes the planner's
 * only to copy what the last round published. */
void plan_metrics(struct server *s, struct prom_buf *b, enum prom_format f)
{
	struct planner *pl = &s->plan;

	if (!s->o.plan.interval_s)
		return;
	pthread_mutex_lock(&pl->lock);
	prom_family(b, f, "kvmstats_plan_rounds", "counter", NULL,
		    "Planning rounds completed (every --plan-interval seconds)");
	prom_sample_u64(b, "kvmstats_plan_rounds_total", NULL, pl->rounds);
	prom_family(b, f, "kvmstats_plan_running", "gauge", NULL,
		    "1 while a planning round is under way");
	prom_sample_u64(b, "kvmstats_plan_running", NULL, pl->running);
	if (pl->rounds) {
		prom_family(b, f, "kvmstats_plan_age_seconds", "gauge", "seconds",
			    "Time since the planning round whose figures are served "
			    "here ended");
		prom_sample(b, "kvmstats_plan_age_seconds", NULL,
			    (double)(now_ns() - pl->done_ns) / 1e9);
		prom_family(b, f, "kvmstats_plan_round_seconds", "gauge", "seconds",
			    "Wall time of that round, the dirty-rate interval included");
		prom_sample(b, "kvmstats_plan_round_seconds", NULL, pl->round_s);
		prom_family(b, f, "kvmstats_plan_vmms", "gauge", NULL,
			    "VMMs in that round by result; a failed one (a VM that "
			    "exited, no guest RAM found) has no per-VM gauges");
		prom_sample_u64(b, "kvmstats_plan_vmms", "result=\"planned\"", pl->planned);
		prom_sample_u64(b, "kvmstats_plan_vmms", "result=\"failed\"", pl->failed);
		if (pl->text[f].len)
			prom_buf_put(b, pl->text[f].p, pl->text[f].len);
	}
	pthread_mutex_unlock(&pl->lock);
}

/* One VMM of a round. */
struct plan_row {
	pid_t pid;
	int err;			/* of kvmstats_plan__new */
	struct kvmstats_plan *p;
	char error[256];
};

static int plan_cancelled(void *arg, uint64_t done, uint64_t total)
{
	struct planner *pl = arg;

	(void)done;
	(void)total;
	return atomic_load(&pl->cancel);
}

/* Sleep until @deadline (CLOCK_MONOTONIC, ns) or a stop; true on a stop. */
static bool plan_sleep(struct planner *pl, uint64_t deadline)
{
	return serve_sleep(&pl->lock, &pl->wake, &pl->stop, deadline);
}

/* plan_measure()'s sleep: until @t (CLOCK_MONOTONIC, s) or a stop. */
static bool plan_sleep_s(void *arg, double t)
{
	return plan_sleep(arg, (uint64_t)(t * 1e9));
}

static bool plan_ok(const struct plan_row *r)
{
	return r->p && !kvmstats_plan__result(r->p)->error;
}

/* The exported VMMs, read under the scrape lock. */
static size_t plan_pids(struct server *s, pid_t **out)
{
	size_t n = 0, max;
	pid_t *pids;

	pthread_mutex_lock(&s->lock);
	max = kvmstats_host__num_vmms(s->host);
	pids = calloc(max + 1, sizeof(*pids));
	for (size_t i = 0; pids && i < max; i++) {
		struct kvmstats_vmm *v = kvmstats_host__vmm(s->host, i);

		if (!s->targs->name_set || target_selected(s->targs, v))
			pids[n++] = kvmstats_vmm__pid(v);
	}
	pthread_mutex_unlock(&s->lock);
	*out = pids;
	return n;
}

static void plan_open(struct server *s, struct plan_row *row)
{
	const struct plan_cfg *c = &s->o.plan;
	struct kvmstats_scan_opts so = {
		.sz = sizeof(so), .max_cpu = c->max_cpu, .rate = (uint64_t)c->rate,
	};
	struct kvmstats_ram_opts ro = {
		.sz = sizeof(ro),
		.qmp_path = s->targs->npids == 1 ? s->targs->qmp : NULL,
		.timeout_ms = s->targs->timeout_ms,
	};
	struct kvmstats_plan_opts po = {
		.sz = sizeof(po), .methods = 1u << c->method,
		.flags = c->dirty_s > 0 ? 0 : KVMSTATS_PLAN_ASSUME_CLEAN,
		.interval_s = c->dirty_s, .dirty_points = PLAN_DIRTY_POINTS,
		.bandwidth = c->bandwidth, .downtime_ms = c->downtime_ms,
		.ram = &ro, .scan = &so, .libvirt_uri = s->targs->libvirt_uri,
		.libvirt_guard = s->plan.libvirt_guard,
	};

	pthread_mutex_lock(&s->qmp_lock);	/* its RAM blocks and settings */
	row->p = kvmstats_plan__new(row->pid, &po, row->error, sizeof(row->error));
	row->err = row->p ? 0 : -errno;
	pthread_mutex_unlock(&s->qmp_lock);
	if (!row->p) {
		if (!row->error[0])
			snprintf(row->error, sizeof(row->error), "pid %d: %s",
				 (int)row->pid, strerror(-row->err));
		return;
	}
	kvmstats_plan__set_progress(row->p, plan_cancelled, &s->plan);
}

/* KVM's pages_4k/2m/1g from the exporter's own readers, which belong to
 * the scrapes: read under their lock (a pread or a copy per VM). */
static void plan_stats(struct server *s, struct plan_row *rows, size_t n)
{
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		struct kvmstats_vmm *v = NULL;

		for (size_t k = 0; rows[i].p && !v &&
				   k < kvmstats_host__num_vmms(s->host); k++)
			if (kvmstats_vmm__pid(kvmstats_host__vmm(s->host, k)) == rows[i].pid)
				v = kvmstats_host__vmm(s->host, k);
		if (rows[i].p)
			kvmstats_plan__stats(rows[i].p, v);
	}
	pthread_mutex_unlock(&s->lock);
}

/* Has @pid exited (gone, or a zombie whose memory is gone already)? */
static bool vmm_gone(pid_t pid)
{
	char path[32], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = 0;
	/* The state follows the command, which may hold ')' itself. */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Say why a VMM cannot be planned once, when it starts failing, not at
 * every round; a VMM that exited needs no word. */
static void plan_report(struct server *s, const struct plan_row *rows, size_t n)
{
	struct planner *pl = &s->plan;
	pid_t *failing = calloc(n + 1, sizeof(*failing));
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		const struct kvmstats_plan_vm *r = rows[i].p ?
			kvmstats_plan__result(rows[i].p) : NULL;
		int err = r ? r->error : rows[i].err;
		bool known = false;

		if ((r && !err) || err == -ESRCH || vmm_gone(rows[i].pid))
			continue;
		for (size_t j = 0; j < pl->nfailing; j++)
			known |= pl->failing[j] == rows[i].pid;
		if (failing)
			failing[k++] = rows[i].pid;
		if (known)
			continue;
		if (r)
			cli_warn(s->cli, "planner: pid %d: %s", (int)rows[i].pid, r->error_msg);
		else
			cli_warn(s->cli, "planner: %s", rows[i].error);	/* names the pid */
	}
	free(pl->failing);
	pl->failing = failing;
	pl->nfailing = failing ? k : 0;
}

static int cmp_pred(const void *x, const void *y)
{
	const struct plan_pred *a = x, *b = y;

	return (a->pid > b->pid) - (a->pid < b->pid);
}

/* The round's predictions, for the follower (serve_follow.c); NULL when
 * out of memory (then the follower finds none). */
static struct plan_pred *plan_preds(const struct kvmstats_plan_vm *const *vms,
				    size_t n)
{
	struct plan_pred *p = calloc(n + 1, sizeof(*p));

	/* (NAN where the point prediction does not converge: the gauges') */
	for (size_t i = 0; p && i < n; i++) {
		p[i].pid = vms[i]->pid;
		p[i].seconds = kvmstats_plan_vm__gauge(
			vms[i], KVMSTATS_PLAN_GAUGE_SECONDS, i + 1);
		p[i].bytes = kvmstats_plan_vm__gauge(
			vms[i], KVMSTATS_PLAN_GAUGE_BYTES, i + 1);
	}
	if (p)
		qsort(p, n, sizeof(*p), cmp_pred);
	return p;
}

bool plan_prediction(struct server *s, pid_t pid, uint64_t before,
		     struct plan_pred *out)
{
	struct planner *pl = &s->plan;
	struct plan_pred key = { .pid = pid }, *hit = NULL;

	if (!s->o.plan.interval_s)
		return false;
	pthread_mutex_lock(&pl->lock);
	for (int g = 0; g < 2; g++) {
		const struct plan_preds *t = &pl->preds[g];

		if (!t->v || t->done_ns > before)
			continue;
		hit = bsearch(&key, t->v, t->n, sizeof(key), cmp_pred);
		break;
	}
	if (hit)
		*out = *hit;
	pthread_mutex_unlock(&pl->lock);
	return hit;
}

static int cmp_planned(const void *x, const void *y)
{
	return kvmstats_plan_vm__compare(*(const struct kvmstats_plan_vm *const *)x,
					 *(const struct kvmstats_plan_vm *const *)y);
}

/* Render the round's figures in both formats and make them the served
 * ones. */
static void plan_publish(struct server *s, const struct plan_row *rows, size_t n,
			 uint64_t t0)
{
	struct planner *pl = &s->plan;
	const struct kvmstats_plan_vm **ok = calloc(n + 1, sizeof(*ok));
	struct kvmstats_plan **plans = calloc(n + 1, sizeof(*plans));
	struct kvmstats_drain *drain;
	struct plan_pred *preds;
	size_t nok = 0;

	if (!ok || !plans) {
		cli_warn(s->cli, "planner: out of memory");
		free(ok);
		free(plans);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (plan_ok(&rows[i]) && kvmstats_plan__result(rows[i].p)->predicted)
			plans[nok++] = rows[i].p;
	drain = s->o.plan.drain_link > 0 ? serve_drain(&s->o.plan, plans, nok) : NULL;
	for (size_t i = 0; i < nok; i++)
		ok[i] = kvmstats_plan__result(plans[i]);
	qsort(ok, nok, sizeof(*ok), cmp_planned);
	for (int f = 0; f < 2; f++) {
		render_plan(&pl->next[f], (enum prom_format)f, ok, nok);
		render_drain(&pl->next[f], (enum prom_format)f, drain);
	}
	kvmstats_drain__free(drain);
	preds = plan_preds(ok, nok);
	free(ok);
	free(plans);
	if (pl->next[PROM_TEXT].failed || pl->next[PROM_OPENMETRICS].failed) {
		cli_warn(s->cli, "planner: out of memory");
		free(preds);
		return;
	}
	pthread_mutex_lock(&pl->lock);
	for (int f = 0; f < 2; f++) {
		struct prom_buf t = pl->text[f];

		pl->text[f] = pl->next[f];
		pl->next[f] = t;
	}
	pl->rounds++;
	pl->done_ns = now_ns();
	pl->round_s = (double)(pl->done_ns - t0) / 1e9;
	pl->planned = nok;
	pl->failed = n - nok;
	free(pl->preds[1].v);
	pl->preds[1] = pl->preds[0];
	pl->preds[0] = (struct plan_preds){ .v = preds, .n = preds ? nok : 0,
					    .done_ns = pl->done_ns };
	pthread_mutex_unlock(&pl->lock);
}

static void plan_running(struct planner *pl, bool running)
{
	pthread_mutex_lock(&pl->lock);
	pl->running = running;
	pthread_mutex_unlock(&pl->lock);
}

/* One round over every exported VMM; nothing is published when a stop
 * cut it short. Returns how many VMMs it took. */
static size_t plan_round(struct server *s)
{
	struct planner *pl = &s->plan;
	struct plan_row *rows = NULL;
	struct kvmstats_plan **plans = NULL;
	uint64_t t0 = now_ns();
	pid_t *pids = NULL;
	size_t n;

	plan_running(pl, true);
	n = plan_pids(s, &pids);
	rows = pids ? calloc(n + 1, sizeof(*rows)) : NULL;
	plans = rows ? calloc(n + 1, sizeof(*plans)) : NULL;
	if (!plans) {
		cli_warn(s->cli, "planner: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && !atomic_load(&pl->cancel); i++) {
		rows[i].pid = pids[i];
		plan_open(s, &rows[i]);
	}
	if (s->o.plan.method == KVMSTATS_METHOD_STATS)
		plan_stats(s, rows, n);
	for (size_t i = 0; i < n && !atomic_load(&pl->cancel); i++)
		if (rows[i].p)
			kvmstats_plan__estimate(rows[i].p);
	for (size_t i = 0; i < n; i++)
		plans[i] = rows[i].p;
	if (atomic_load(&pl->cancel) ||
	    !plan_measure(plans, n, s->o.plan.dirty_s, plan_sleep_s, pl))
		goto out;
	plan_report(s, rows, n);
	plan_publish(s, rows, n, t0);
out:
	for (size_t i = 0; rows && i < n; i++)
		kvmstats_plan__free(rows[i].p);
	free(plans);
	free(rows);
	free(pids);
	plan_running(pl, false);
	return n;
}

static void *plan_main(void *arg)
{
	struct server *s = arg;
	uint64_t period = s->o.plan.interval_s * 1000000000ull, next = now_ns();

	/* Below the scrapes and the guests' vCPUs; the scan's workers,
	 * created by this thread, inherit it. Lowering needs no privilege. */
	setpriority(PRIO_PROCESS, (id_t)gettid(), PLAN_NICE);
	do {
		/* A round before discovery found a VMM (serve just started)
		 * is tried again in a second, not a --plan-interval later. */
		uint64_t gap = plan_round(s) ? period : PLAN_EMPTY_RETRY_NS;

		next = gap < period ? now_ns() + gap : next + period;
		if (next < now_ns())
			next = now_ns();	/* it overran: the next one now */
	} while (!plan_sleep(&s->plan, next));
	return NULL;
}

void planner_init(struct planner *pl)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&pl->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pl->wake, &ca);
	pthread_condattr_destroy(&ca);
}

int planner_start(struct server *s)
{
	int err;

	if (!s->o.plan.interval_s)
		return 0;
	s->plan.libvirt_guard = kvmstats_libvirt_guard__new();
	if (!s->plan.libvirt_guard) {
		cli_err(s->cli, "cannot start the planner: out of memory");
		return -1;
	}
	err = pthread_create(&s->plan.thread, NULL, plan_main, s);
	if (err) {
		cli_err(s->cli, "cannot start the planner: %s", strerror(err));
		return -1;
	}
	s->plan.started = true;
	return 0;
}

/* Cancels a scan under way (its progress callback sees it within about
 * 0.1 s) and cuts any wait short. */
static void planner_stop(struct planner *pl)
{
	if (!pl->started)
		return;
	atomic_store(&pl->cancel, true);
	pthread_mutex_lock(&pl->lock);
	pl->stop = true;
	pthread_cond_broadcast(&pl->wake);
	pthread_mutex_unlock(&pl->lock);
	pthread_join(pl->thread, NULL);
	pl->started = false;
}

void planner_free(struct planner *pl)
{
	planner_stop(pl);
	for (int f = 0; f < 2; f++) {
		prom_buf_free(&pl->text[f]);
		prom_buf_free(&pl->next[f]);
	}
	kvmstats_libvirt_guard__free(pl->libvirt_guard);
	free(pl->failing);
	free(pl->preds[0].v);
	free(pl->preds[1].v);
	pthread_cond_destroy(&pl->wake);
	pthread_mutex_destroy(&pl->lock);
}
