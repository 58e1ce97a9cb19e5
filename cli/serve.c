// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats serve: a Prometheus exporter of every VM's KVM stats.
 *
 *   GET /metrics   Prometheus text format 0.0.4, or OpenMetrics 1.0 when
 *                  the Accept header asks for it; gzip when accepted
 *   GET /          a small landing page
 *
 * HTTP is libmicrohttpd's (a thread per connection, bounded in number,
 * per client address, in header size and in idle time); TLS is its
 * GnuTLS support; basic auth and TLS come from a web config file in the
 * format of the Prometheus exporters (webconfig.c).
 *
 * A scrape: one sweep of every stats fd (kvmstats_host__sweep_parallel,
 * a thread per core on large hosts), then the model (prom.c) renders the
 * readings in parts, one per core, into buffers that are reused. Scrapes
 * run one at a time; requests that arrive while one runs take the result
 * of the next, so ten scrapers cost about one scrape. A result stays alive
 * while responses still send it; at most MAX_RESULTS exist, so a slow
 * client cannot make the exporter grow: past that a request gets 503.
 *
 * The host is rescanned for new VMMs every --refresh seconds by the main
 * thread. Sources that talk to a VMM (QMP, libvirt) refresh their readings
 * in the background, so a scrape reads them without waiting; their data's
 * age is exported. Nothing is ever written to a VM.
 *
 * With --plan-interval, a thread of its own runs the migration planner
 * (kvmstats plan's library) over the exported VMMs every interval and
 * publishes the figures; a scrape only copies the last published ones
 * (see "the migration planner" below).
 *
 * After start-up the process keeps only the capabilities reading other
 * processes' stats fds needs, and the planner's when it is on (see
 * drop_caps()).
 */
#include <arpa/inet.h>
#include <cap-ng.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvmstats_mem.h"
#include "prom.h"
#include "prom_process.h"
#include "webconfig.h"

static const char serve_usage[] =
	"[--listen ADDR:PORT] [--web-config FILE] [--path PATH]\n"
	"       [--threads N] [--refresh SECONDS] [--no-histograms] [--gzip-level N]\n"
	"       [--max-connections N] [--max-connections-per-ip N] [--timeout SECONDS]\n"
	"       [--ready FILE] [--plan-interval SECONDS [--plan-method stats|pagemap|sample|scan]\n"
	"       [--plan-dirty-interval SECONDS] [--plan-max-cpu N] [--plan-rate MIB/S]\n"
	"       [--plan-bandwidth BYTES/S] [--plan-downtime MS]]\n"
	"       " CLI_TARGET_USAGE "\n"
	"   or: serve --hash-password  (reads a password on stdin, prints a bcrypt hash)";

/* Expositions alive at once (being built, or still being sent). */
#define MAX_RESULTS 4
/* A request body is never expected: a client sending more is dropped. */
#define MAX_BODY 4096

enum {
	OPT_LISTEN = OPT_CMD_BASE,
	OPT_WEB_CONFIG,
	OPT_PATH,
	OPT_THREADS,
	OPT_REFRESH,
	OPT_NO_HIST,
	OPT_GZIP_LEVEL,
	OPT_MAX_CONN,
	OPT_MAX_CONN_IP,
	OPT_TIMEOUT,
	OPT_READY,
	OPT_HASH,
	OPT_PLAN_INTERVAL,
	OPT_PLAN_METHOD,
	OPT_PLAN_DIRTY,
	OPT_PLAN_MAX_CPU,
	OPT_PLAN_RATE,
	OPT_PLAN_BANDWIDTH,
	OPT_PLAN_DOWNTIME,
};

/* The planner's options: `kvmstats plan`'s own, under --plan-*. */
struct plan_cfg {
	unsigned int interval_s;	/* 0: no planner */
	enum kvmstats_method method;
	double dirty_s;			/* dirty rate over; 0: assume clean */
	double max_cpu;			/* scan's CPU budget, cores; 0: 1 */
	double rate;			/* scan's read budget, bytes/s; 0: none */
	double bandwidth;		/* bytes/s; 0: QEMU's or default */
	double downtime_ms;		/* 0: QEMU's or default */
	bool given;			/* a --plan-* option other than the interval */
};

struct serve_opts {
	const char *listen;
	const char *web_config;
	const char *path;
	const char *ready;
	unsigned int threads;
	unsigned int refresh_s;
	int gzip_level;
	unsigned int max_conn, max_conn_ip, timeout_s;
	bool no_hist;
	struct plan_cfg plan;
};

/* The planner thread and what it last published. A scrape takes @lock
 * (after the server's) only to copy the published text; the thread takes
 * it only to publish or to sleep, never while it plans, and never holds
 * it while taking the server's lock. */
struct planner {
	pthread_t thread;
	bool started;
	atomic_bool cancel;		/* stop now: read in the scan's progress */
	pthread_mutex_t lock;
	pthread_cond_t wake;		/* stop, or the next round is due */
	/* Under @lock. */
	bool stop;
	bool running;			/* a round is under way */
	struct prom_buf text[2];	/* per format: the per-VM gauges */
	uint64_t rounds;
	uint64_t done_ns;		/* when the published round ended */
	double round_s;			/* how long it took */
	size_t planned, failed;		/* VMMs in it */
	/* The thread's own. */
	struct prom_buf next[2];
	pid_t *failing;			/* failed in the previous round */
	size_t nfailing;
};

/* One exposition, shared by the responses that send it. A result made
 * for a gzip scraper holds only the gzip bytes: the text was rendered into
 * the server's scratch buffers, which every scrape reuses. */
struct result {
	struct prom_expo e;
	bool plain;		/* e's text parts hold the exposition */
	atomic_int refs;	/* the server's "latest" + responses */
	uint64_t start_ns;	/* when its scrape began */
};

struct server {
	struct cli *cli;
	struct serve_opts o;
	struct target_args *targs;
	struct web_config web;
	bool have_web;
	int listen_fd;
	char addr[INET6_ADDRSTRLEN + 16];
	struct MHD_Daemon *d;

	/* Everything below is used under @lock, one scrape at a time. */
	pthread_mutex_t lock;
	struct kvmstats_host *host;
	struct prom_model *model;
	struct prom_pool *pool;
	struct prom_expo scratch;
	struct result results[MAX_RESULTS];
	struct result *latest[2];	/* per format */
	uint64_t scrapes[2];		/* per format */
	char last_errors[1024];		/* of the last refresh, said once */
	uint64_t read_errors[PROM_NSRC];
	uint64_t render_ns, refresh_ns;
	uint64_t rebuilds;		/* of the model: VMs came or went */
	atomic_uint_fast64_t busy;	/* requests refused: results all in use */
	uint64_t stale;			/* requests given the previous result */
	atomic_uint_fast64_t denied;	/* requests refused: authentication */
	char *landing;
	struct planner plan;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the migration planner (--plan-interval) ------------------------------ */

/*
 * Every --plan-interval seconds (start to start; a round that overran is
 * followed by the next one at once, never by two at a time), one thread
 * plans every exported VMM as `kvmstats plan` would: its guest RAM (QEMU's
 * RAM blocks over one short QMP exchange), its zero pages by
 * --plan-method, its dirty rate over --plan-dirty-interval (every VMM in
 * the same interval) and the migration model. The figures are rendered in
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
#define PLAN_DIRTY_POINTS 4

enum {
	PG_MEMORY,
	PG_ZERO,
	PG_NONZERO,
	PG_UNKNOWN,
	PG_RATIO,
	PG_DIRTY,
	PG_BYTES,
	PG_SECONDS,
	PG_CONVERGES,
	PG_ELAPSED,
	PG_RANK,
	PG_NR,
};

/* The per-VM gauges: the figures of `kvmstats plan --json`. */
static const struct {
	const char *name, *unit, *help;
} plan_gauges[PG_NR] = {
	[PG_MEMORY] = { "kvmstats_plan_memory_bytes", "bytes",
			"Guest RAM found in the VMM" },
	[PG_ZERO] = { "kvmstats_plan_zero_pages", NULL,
		      "Guest pages (4 KiB) that are zero, by the method in the label" },
	[PG_NONZERO] = { "kvmstats_plan_nonzero_pages", NULL,
			 "Guest pages (4 KiB) that are not zero, by the method in the label" },
	[PG_UNKNOWN] = { "kvmstats_plan_unknown_pages", NULL,
			 "Guest pages (4 KiB) of unknown content (swapped), sent as "
			 "normal pages by the model" },
	[PG_RATIO] = { "kvmstats_plan_zero_ratio", NULL,
		       "Share of the guest pages that are zero" },
	[PG_DIRTY] = { "kvmstats_plan_dirty_pages_per_second", NULL,
		       "Guest pages dirtied per second (0 with --plan-dirty-interval 0: "
		       "a clean guest was assumed)" },
	[PG_BYTES] = { "kvmstats_plan_predicted_transfer_bytes", "bytes",
		       "Predicted bytes of RAM a QEMU live migration sends" },
	[PG_SECONDS] = { "kvmstats_plan_predicted_seconds", "seconds",
			 "Predicted duration of a QEMU live migration" },
	[PG_CONVERGES] = { "kvmstats_plan_converges", NULL,
			   "1 when pre-copy is predicted to converge" },
	[PG_ELAPSED] = { "kvmstats_plan_elapsed_seconds", "seconds",
			 "Wall time this VM's plan took, the dirty-rate interval included" },
	[PG_RANK] = { "kvmstats_plan_rank", NULL,
		      "Position by predicted migration cost, 1 = cheapest" },
};

static double plan_value(const struct kvmstats_plan_vm *v, int which, size_t rank)
{
	const struct kvmstats_estimate *e = &v->est[v->method];

	switch (which) {
	case PG_MEMORY: return (double)v->memory_bytes;
	case PG_ZERO: return (double)e->zero_pages;
	case PG_NONZERO: return (double)e->nonzero_pages;
	case PG_UNKNOWN: return (double)e->unknown_pages;
	case PG_RATIO: return e->pages ? (double)e->zero_pages / (double)e->pages : 0;
	case PG_DIRTY: return v->dirty_measured ? v->dirty.pages_per_second : 0;
	case PG_BYTES: return (double)v->pred.bytes;
	case PG_SECONDS: return v->pred.seconds;
	case PG_CONVERGES: return v->pred.converges;
	case PG_ELAPSED: return v->elapsed_s;
	default: return (double)rank;
	}
}

/* The per-VM gauges of @n planned VMs, ranked (cheapest first). */
static void render_plan(struct prom_buf *b, enum prom_format f,
			const struct kvmstats_plan_vm *const *vms, size_t n)
{
	char name[4 * sizeof(vms[0]->name) + 1], lab[sizeof(name) + 96];

	b->len = 0;
	b->failed = false;
	for (int g = 0; n && g < PG_NR; g++) {
		prom_family(b, f, plan_gauges[g].name, "gauge", plan_gauges[g].unit,
			    plan_gauges[g].help);
		for (size_t i = 0; i < n; i++) {
			prom_escape_label(vms[i]->name, name, sizeof(name));
			snprintf(lab, sizeof(lab), "pid=\"%d\",name=\"%s\",method=\"%s\"",
				 (int)vms[i]->pid, name, kvmstats_method_str(vms[i]->method));
			prom_sample(b, plan_gauges[g].name, lab, plan_value(vms[i], g, i + 1));
		}
	}
}

/* A scrape's part: called under the server's lock, takes the planner's
 * only to copy what the last round published. */
static void plan_metrics(struct server *s, struct prom_buf *b, enum prom_format f)
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
	struct timespec ts = { .tv_sec = (time_t)(deadline / 1000000000ull),
			       .tv_nsec = (long)(deadline % 1000000000ull) };
	bool stop;

	pthread_mutex_lock(&pl->lock);
	while (!pl->stop && now_ns() < deadline)
		if (pthread_cond_timedwait(&pl->wake, &pl->lock, &ts) == ETIMEDOUT)
			break;
	stop = pl->stop;
	pthread_mutex_unlock(&pl->lock);
	return stop;
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
	};
	struct kvmstats_plan_opts po = {
		.sz = sizeof(po), .methods = 1u << c->method,
		.flags = c->dirty_s > 0 ? 0 : KVMSTATS_PLAN_ASSUME_CLEAN,
		.interval_s = c->dirty_s, .dirty_points = PLAN_DIRTY_POINTS,
		.bandwidth = c->bandwidth, .downtime_ms = c->downtime_ms,
		.ram = &ro, .scan = &so,
	};

	row->p = kvmstats_plan__new(row->pid, &po, row->error, sizeof(row->error));
	if (!row->p) {
		row->err = -errno;
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

/* The dirty rate of every VMM over the same interval, as `kvmstats plan`
 * measures it: baselines, then points at 1/8, 1/4, 1/2 and the whole
 * interval. True when a stop cut it short. */
static bool plan_dirty(struct server *s, struct plan_row *rows, size_t n)
{
	uint64_t span = (uint64_t)(s->o.plan.dirty_s * 1e9), t0;

	if (!span)
		return false;
	for (size_t i = 0; i < n; i++)
		if (plan_ok(&rows[i]))
			kvmstats_plan__dirty_begin(rows[i].p);
	t0 = now_ns();
	for (unsigned int k = 0; k < PLAN_DIRTY_POINTS; k++) {
		if (plan_sleep(&s->plan, t0 + (span >> (PLAN_DIRTY_POINTS - 1 - k))))
			return true;
		for (size_t i = 0; i < n; i++)
			if (plan_ok(&rows[i]))
				kvmstats_plan__dirty_point(rows[i].p);
	}
	return false;
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
			cli_warn(s->cli, "plan: pid %d: %s", (int)rows[i].pid, r->error_msg);
		else
			cli_warn(s->cli, "plan: %s", rows[i].error);	/* names the pid */
	}
	free(pl->failing);
	pl->failing = failing;
	pl->nfailing = failing ? k : 0;
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
	size_t nok = 0;

	if (!ok) {
		cli_warn(s->cli, "plan: out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (plan_ok(&rows[i]) && kvmstats_plan__result(rows[i].p)->predicted)
			ok[nok++] = kvmstats_plan__result(rows[i].p);
	qsort(ok, nok, sizeof(*ok), cmp_planned);
	render_plan(&pl->next[PROM_TEXT], PROM_TEXT, ok, nok);
	render_plan(&pl->next[PROM_OPENMETRICS], PROM_OPENMETRICS, ok, nok);
	free(ok);
	if (pl->next[PROM_TEXT].failed || pl->next[PROM_OPENMETRICS].failed) {
		cli_warn(s->cli, "plan: out of memory");
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
	pthread_mutex_unlock(&pl->lock);
}

static void plan_running(struct planner *pl, bool running)
{
	pthread_mutex_lock(&pl->lock);
	pl->running = running;
	pthread_mutex_unlock(&pl->lock);
}

/* One round over every exported VMM; nothing is published when a stop
 * cut it short. */
static void plan_round(struct server *s)
{
	struct planner *pl = &s->plan;
	struct plan_row *rows = NULL;
	uint64_t t0 = now_ns();
	pid_t *pids = NULL;
	size_t n;

	plan_running(pl, true);
	n = plan_pids(s, &pids);
	rows = pids ? calloc(n + 1, sizeof(*rows)) : NULL;
	if (!rows) {
		cli_warn(s->cli, "plan: out of memory");
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
	if (atomic_load(&pl->cancel) || plan_dirty(s, rows, n))
		goto out;
	for (size_t i = 0; i < n; i++)
		if (rows[i].p)
			kvmstats_plan__predict(rows[i].p);
	plan_report(s, rows, n);
	plan_publish(s, rows, n, t0);
out:
	for (size_t i = 0; rows && i < n; i++)
		kvmstats_plan__free(rows[i].p);
	free(rows);
	free(pids);
	plan_running(pl, false);
}

static void *plan_main(void *arg)
{
	struct server *s = arg;
	uint64_t period = s->o.plan.interval_s * 1000000000ull, next = now_ns();

	/* Below the scrapes and the guests' vCPUs; the scan's workers,
	 * created by this thread, inherit it. Lowering needs no privilege. */
	setpriority(PRIO_PROCESS, (id_t)gettid(), PLAN_NICE);
	do {
		plan_round(s);
		next += period;
		if (next < now_ns())
			next = now_ns();	/* it overran: the next one now */
	} while (!plan_sleep(&s->plan, next));
	return NULL;
}

static void planner_init(struct planner *pl)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&pl->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pl->wake, &ca);
	pthread_condattr_destroy(&ca);
}

static int planner_start(struct server *s)
{
	int err;

	if (!s->o.plan.interval_s)
		return 0;
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

static void planner_free(struct planner *pl)
{
	planner_stop(pl);
	for (int f = 0; f < 2; f++) {
		prom_buf_free(&pl->text[f]);
		prom_buf_free(&pl->next[f]);
	}
	free(pl->failing);
	pthread_cond_destroy(&pl->wake);
	pthread_mutex_destroy(&pl->lock);
}

/* ---- the exporter's own metrics ------------------------------------------ */

/* The families with a sample per source. */
static void source_metrics(struct server *s, struct prom_buf *b,
			   enum prom_format f, const struct prom_model_stats *st)
{
	const char *const *names = kvmstats_sources();
	char lab[64];

	prom_family(b, f, "kvmstats_source_read_seconds", "gauge", "seconds",
		    "Time this scrape spent reading each source's VMs, summed over "
		    "the reading threads");
	for (unsigned int i = 0; names[i]; i++) {
		snprintf(lab, sizeof(lab), "source=\"%s\"", names[i]);
		prom_sample(b, "kvmstats_source_read_seconds", lab,
			    kvmstats_host__sweep_ns(s->host, names[i]) / 1e9);
	}
	prom_family(b, f, "kvmstats_source_vms", "gauge", NULL,
		    "VMs read through each source");
	for (unsigned int i = 0; names[i]; i++) {
		snprintf(lab, sizeof(lab), "source=\"%s\"", names[i]);
		prom_sample_u64(b, "kvmstats_source_vms", lab,
				st->src_vms[prom_source_index(names[i])]);
	}
	prom_family(b, f, "kvmstats_source_read_errors", "counter", NULL,
		    "Readings of a VM or vCPU that failed (its series were left "
		    "out of that scrape)");
	for (unsigned int i = 0; names[i]; i++) {
		snprintf(lab, sizeof(lab), "source=\"%s\"", names[i]);
		prom_sample_u64(b, "kvmstats_source_read_errors_total", lab,
				s->read_errors[prom_source_index(names[i])]);
	}
	prom_family(b, f, "kvmstats_source_data_age_seconds", "gauge", "seconds",
		    "Age of the oldest reading a background source (QMP, libvirt) "
		    "served to this scrape; 0 for sources read on the spot");
	for (unsigned int i = 0; names[i]; i++) {
		snprintf(lab, sizeof(lab), "source=\"%s\"", names[i]);
		prom_sample(b, "kvmstats_source_data_age_seconds", lab,
			    st->src_age_ns[prom_source_index(names[i])] / 1e9);
	}
}

static void own_metrics(struct server *s, struct prom_buf *b, enum prom_format f,
			uint64_t read_ns)
{
	struct prom_model_stats st;

	prom_model_stats(s->model, &st);
	prom_model_render_info(s->model, f, b);
	prom_process_metrics(b, f);
	prom_family(b, f, "kvmstats_scrape_read_seconds", "gauge", "seconds",
		    "Wall time this scrape took to read every VM (one sweep)");
	prom_sample(b, "kvmstats_scrape_read_seconds", NULL, read_ns / 1e9);
	prom_family(b, f, "kvmstats_scrape_render_seconds", "gauge", "seconds",
		    "Wall time the previous scrape took to render its exposition");
	prom_sample(b, "kvmstats_scrape_render_seconds", NULL, s->render_ns / 1e9);
	source_metrics(s, b, f, &st);
	prom_family(b, f, "kvmstats_vmms", "gauge", NULL, "VMM processes exported");
	prom_sample_u64(b, "kvmstats_vmms", NULL, st.vmms);
	prom_family(b, f, "kvmstats_vms", "gauge", NULL, "VMs exported");
	prom_sample_u64(b, "kvmstats_vms", NULL, st.vms);
	prom_family(b, f, "kvmstats_vcpus", "gauge", NULL, "vCPUs exported");
	prom_sample_u64(b, "kvmstats_vcpus", NULL, st.vcpus);
	prom_family(b, f, "kvmstats_skipped_stats", "gauge", NULL,
		    "Stats left out: of a type or unit this version does not know, "
		    "clashing with another stat's name, or histograms left out "
		    "by --no-histograms");
	prom_sample_u64(b, "kvmstats_skipped_stats", NULL, st.skipped_stats);
	prom_family(b, f, "kvmstats_scrapes", "counter", NULL,
		    "Scrapes served per format (requests that shared one count once)");
	prom_sample_u64(b, "kvmstats_scrapes_total", "format=\"text\"",
			s->scrapes[PROM_TEXT]);
	prom_sample_u64(b, "kvmstats_scrapes_total", "format=\"openmetrics\"",
			s->scrapes[PROM_OPENMETRICS]);
	prom_family(b, f, "kvmstats_requests_refused", "counter", NULL,
		    "Requests refused: busy (every exposition buffer in use) or "
		    "unauthorized");
	prom_sample_u64(b, "kvmstats_requests_refused_total", "reason=\"busy\"",
			atomic_load(&s->busy));
	prom_sample_u64(b, "kvmstats_requests_refused_total", "reason=\"unauthorized\"",
			atomic_load(&s->denied));
	prom_family(b, f, "kvmstats_stale_responses", "counter", NULL,
		    "Requests given the previous exposition (at most --timeout "
		    "seconds old) because every exposition buffer was being sent");
	prom_sample_u64(b, "kvmstats_stale_responses_total", NULL, s->stale);
	prom_family(b, f, "kvmstats_read_threads", "gauge", NULL,
		    "Threads that read and render a scrape");
	prom_sample_u64(b, "kvmstats_read_threads", NULL, prom_pool_threads(s->pool));
	prom_family(b, f, "kvmstats_model_rebuilds", "counter", NULL,
		    "Times the metric families and label strings were rebuilt "
		    "because VMs or vCPUs came or went");
	prom_sample_u64(b, "kvmstats_model_rebuilds_total", NULL, s->rebuilds);
	prom_family(b, f, "kvmstats_host_refresh_seconds", "gauge", "seconds",
		    "Wall time of the last rescan of the host for VMMs");
	prom_sample(b, "kvmstats_host_refresh_seconds", NULL, s->refresh_ns / 1e9);
	plan_metrics(s, b, f);
	prom_end(b, f);
}

/* ---- scrapes ---------------------------------------------------------------- */

static void result_put(struct result *r)
{
	atomic_fetch_sub(&r->refs, 1);
}

static struct result *free_result(struct server *s)
{
	for (int i = 0; i < MAX_RESULTS; i++)
		if (atomic_load(&s->results[i].refs) == 0)
			return &s->results[i];
	return NULL;
}

/* Read every VM and render: called under s->lock. NULL when every result
 * buffer is still being sent (errno EBUSY) or memory ran out. */
static struct result *collect(struct server *s, enum prom_format f, bool gz)
{
	struct result *r = free_result(s);
	struct prom_expo *out;
	uint64_t t0 = now_ns(), t1;
	int changed;

	if (!r) {
		errno = EBUSY;
		return NULL;
	}
	kvmstats_host__sweep_parallel(s->host, s->o.threads);
	t1 = now_ns();
	changed = prom_model_update(s->model, s->host);
	if (changed < 0) {
		errno = -changed;
		return NULL;
	}
	s->rebuilds += changed;
	prom_model_prepare(s->model);
	{
		struct prom_model_stats st;

		prom_model_stats(s->model, &st);
		for (int i = 0; i < PROM_NSRC; i++)
			s->read_errors[i] += st.src_errors[i];
	}
	/* A gzip scraper's text is only needed until it is compressed. */
	out = gz ? &s->scratch : &r->e;
	prom_expo_reset(out, f);
	prom_expo_reset(&r->e, f);
	errno = ENOMEM;
	if (prom_expo_render(s->pool, s->model, out))
		return NULL;
	s->scrapes[f]++;
	own_metrics(s, prom_expo_tail(out), f, t1 - t0);
	if (prom_expo_tail(out)->failed)
		return NULL;
	r->plain = !gz;
	if (gz && prom_expo_gzip(s->pool, out, &r->e, s->o.gzip_level))
		return NULL;
	s->render_ns = now_ns() - t1;
	r->start_ns = t0;
	atomic_store(&r->refs, 1);	/* the server's, as latest */
	if (s->latest[f])
		result_put(s->latest[f]);
	s->latest[f] = r;
	return r;
}

/* Can @r be sent as asked (text, or gzip made from its text)? */
static bool fits(const struct result *r, bool gz)
{
	return r && (r->plain || (gz && r->e.gz_ready));
}

/* The exposition for a request that arrived at @arrived: the latest one if
 * its scrape began after that (another request's scrape, which this one
 * waited for), else a new one. When every buffer is still being sent, the
 * latest one all the same if it is younger than the connection timeout:
 * slightly older readings rather than an error or more memory. Returns it
 * with a reference taken, or NULL (errno EBUSY or ENOMEM). */
static struct result *scrape(struct server *s, enum prom_format f, bool gz,
			     uint64_t arrived)
{
	struct result *r, *last;

	pthread_mutex_lock(&s->lock);
	last = s->latest[f];
	r = fits(last, gz) && last->start_ns >= arrived ? last : collect(s, f, gz);
	if (!r && errno == EBUSY && fits(last, gz) &&
	    now_ns() - last->start_ns < s->o.timeout_s * 1000000000ull) {
		r = last;
		s->stale++;
	}
	if (r && gz && !r->e.gz_ready &&
	    prom_expo_gzip(s->pool, &r->e, &r->e, s->o.gzip_level)) {
		errno = ENOMEM;
		r = NULL;
	}
	if (r)
		atomic_fetch_add(&r->refs, 1);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* ---- HTTP -------------------------------------------------------------------- */

/* The q-value a header list (Accept, Accept-Encoding) gives @token: 1 when
 * it names it without one, -1 when it does not name it. */
static double qvalue(const char *list, const char *token)
{
	size_t n = strlen(token);
	double best = -1;

	while (list && *list) {
		const char *end = strchr(list, ','), *q;
		size_t len;

		while (*list == ' ' || *list == '\t')
			list++;
		len = end ? (size_t)(end - list) : strlen(list);
		if (len >= n && !strncasecmp(list, token, n) &&
		    (len == n || list[n] == ';' || list[n] == ' ')) {
			double v = 1;

			q = strstr(list + n, "q=");
			if (q && q < list + len && (q[-1] == ';' || q[-1] == ' '))
				v = strtod(q + 2, NULL);
			if (v > best)
				best = v;
		}
		list = end ? end + 1 : NULL;
	}
	return best;
}

/* OpenMetrics when the scraper prefers it to the text format (Prometheus
 * asks for it first); the text format otherwise. */
static enum prom_format negotiate(const char *accept)
{
	double om = qvalue(accept, "application/openmetrics-text");
	double text = qvalue(accept, "text/plain");

	return om > 0 && om >= text ? PROM_OPENMETRICS : PROM_TEXT;
}

static void add_headers(struct server *s, struct MHD_Response *resp)
{
	for (size_t i = 0; s->have_web && i < s->web.nheaders; i++)
		MHD_add_response_header(resp, s->web.headers[i].name,
					s->web.headers[i].value);
}

static enum MHD_Result reply_text(struct server *s, struct MHD_Connection *c,
				  unsigned int code, const char *text)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; charset=utf-8");
	add_headers(s, resp);
	ret = MHD_queue_response(c, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void release(void *cls)
{
	result_put(cls);
}

static enum MHD_Result serve_metrics(struct server *s, struct MHD_Connection *c,
				     uint64_t arrived)
{
	const char *acc = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						      MHD_HTTP_HEADER_ACCEPT);
	const char *enc = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						      MHD_HTTP_HEADER_ACCEPT_ENCODING);
	enum prom_format f = negotiate(acc);
	bool gz = qvalue(enc, "gzip") > 0;
	struct iovec iov[PROM_MAX_PARTS + 4];
	struct MHD_IoVec miov[PROM_MAX_PARTS + 4];
	struct MHD_Response *resp;
	struct result *r;
	enum MHD_Result ret;
	size_t n;

	r = scrape(s, f, gz, arrived);
	if (!r) {
		if (errno == EBUSY) {
			atomic_fetch_add(&s->busy, 1);
			return reply_text(s, c, MHD_HTTP_SERVICE_UNAVAILABLE,
					  "busy: every exposition buffer is still being "
					  "sent to other clients\n");
		}
		return reply_text(s, c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				  "scrape failed: out of memory\n");
	}
	n = prom_expo_iov(&r->e, gz, iov, PROM_MAX_PARTS + 4);
	for (size_t i = 0; i < n; i++)
		miov[i] = (struct MHD_IoVec){ iov[i].iov_base, iov[i].iov_len };
	resp = MHD_create_response_from_iovec(miov, (unsigned int)n, release, r);
	if (!resp) {
		result_put(r);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				f == PROM_OPENMETRICS ? PROM_OM_CTYPE : PROM_TEXT_CTYPE);
	if (gz)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Accept, Accept-Encoding");
	add_headers(s, resp);
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result serve_landing(struct server *s, struct MHD_Connection *c)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		strlen(s->landing), s->landing, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/html; charset=utf-8");
	add_headers(s, resp);
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Basic auth, when the web config lists users. */
static bool authorized(struct server *s, struct MHD_Connection *c)
{
	char *user, *pass = NULL;
	bool ok;

	if (!s->have_web || !web_config_auth(&s->web))
		return true;
	user = MHD_basic_auth_get_username_password(c, &pass);
	ok = user && pass && web_auth_check(&s->web, user, pass);
	if (pass) {
		explicit_bzero(pass, strlen(pass));
		MHD_free(pass);
	}
	if (user)
		MHD_free(user);
	return ok;
}

static enum MHD_Result deny(struct server *s, struct MHD_Connection *c)
{
	static const char text[] = "unauthorized\n";
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		sizeof(text) - 1, (void *)text, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	atomic_fetch_add(&s->denied, 1);
	if (!resp)
		return MHD_NO;
	add_headers(s, resp);
	ret = MHD_queue_basic_auth_fail_response(c, "kvmstats", resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Per request: when it arrived and how much body it sent. */
struct request {
	uint64_t arrived;
	size_t body;
};

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct server *s = cls;
	struct request *rq = *con_cls;

	(void)version;
	(void)upload;
	if (!rq) {
		/* First call: headers only. Anything but GET/HEAD is refused
		 * before a body is read. */
		if (strcmp(method, MHD_HTTP_METHOD_GET) &&
		    strcmp(method, MHD_HTTP_METHOD_HEAD))
			return reply_text(s, c, MHD_HTTP_METHOD_NOT_ALLOWED,
					  "only GET and HEAD\n");
		rq = calloc(1, sizeof(*rq));
		if (!rq)
			return MHD_NO;
		rq->arrived = now_ns();
		*con_cls = rq;
		return MHD_YES;
	}
	if (*upload_size) {
		rq->body += *upload_size;
		*upload_size = 0;
		/* A GET with a body is odd; a big one is an attack. */
		return rq->body > MAX_BODY ? MHD_NO : MHD_YES;
	}
	if (!authorized(s, c))
		return deny(s, c);
	if (!strcmp(url, s->o.path))
		return serve_metrics(s, c, rq->arrived);
	if (!strcmp(url, "/"))
		return serve_landing(s, c);
	return reply_text(s, c, MHD_HTTP_NOT_FOUND, "not found: see /\n");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode code)
{
	(void)cls;
	(void)c;
	(void)code;
	free(*con_cls);
	*con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct server *s = cls;
	char msg[512];
	size_t n;

	if (s->cli->verbose <= 0)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = 0;
	cli_warn(s->cli, "http: %s", msg);
}

/* ---- start-up ------------------------------------------------------------------ */

/* "ADDR:PORT" or "[ADDR]:PORT" of a bound socket (port 0 picks one). */
static void addr_text(int fd, char *out, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char a[INET6_ADDRSTRLEN] = "?";

	memset(&ss, 0, sizeof(ss));
	if (getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		snprintf(out, len, "?");
		return;
	}
	if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		snprintf(out, len, "[%s]:%d", a, ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		snprintf(out, len, "%s:%d", a, ntohs(s4->sin_port));
	}
}

/* ADDR:PORT, [V6ADDR]:PORT, HOST:PORT or :PORT (every address). */
static int open_listener(struct server *s)
{
	char host[256], port[16];
	const char *l = s->o.listen, *colon = strrchr(l, ':');
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai;
	int fd, one = 1, err;
	size_t hl;

	if (!colon || !colon[1] || strlen(colon + 1) >= sizeof(port)) {
		cli_err(s->cli, "--listen: '%s' is not ADDR:PORT", l);
		return -1;
	}
	hl = (size_t)(colon - l);
	if (hl >= 2 && l[0] == '[' && l[hl - 1] == ']')
		l++, hl -= 2;
	if (hl >= sizeof(host)) {
		cli_err(s->cli, "--listen: address too long");
		return -1;
	}
	memcpy(host, l, hl);
	host[hl] = 0;
	snprintf(port, sizeof(port), "%s", colon + 1);
	err = getaddrinfo(hl ? host : NULL, port, &hints, &ai);
	if (err) {
		cli_err(s->cli, "--listen %s: %s", s->o.listen, gai_strerror(err));
		return -1;
	}
	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
			err = errno;
			close(fd);
			fd = -1;
			errno = err;
		}
	}
	if (fd < 0) {
		cli_err(s->cli, "--listen %s: %s", s->o.listen, strerror(errno));
		freeaddrinfo(ai);
		return -1;
	}
	addr_text(fd, s->addr, sizeof(s->addr));
	freeaddrinfo(ai);
	s->listen_fd = fd;
	return 0;
}

/*
 * Capabilities. Reading another process's stats fds takes listing
 * /proc/PID/fd and pidfd_getfd(), both ptrace access checks: the same
 * uid, or CAP_SYS_PTRACE (which also covers Yama and non-dumpable VMMs,
 * and the opt-in attach source's ptrace). A VMM running as another user
 * (libvirt's qemu) keeps /proc/PID/fd at mode 0500 for its owner, which
 * only CAP_DAC_READ_SEARCH lets us list.
 *
 * The planner (--plan-interval) reads /proc/PID/maps and opens
 * /proc/PID/pagemap (ptrace read checks, as above) and copies guest pages
 * with process_vm_readv (a ptrace attach check on the real uid: the same
 * uid and a dumpable VMM that Yama lets us attach to, or CAP_SYS_PTRACE):
 * all covered. PAGEMAP_SCAN (Linux 6.7) tells the pages mapping the
 * shared zero page without showing any PFN, so it needs nothing more. The
 * PFN bits of /proc/PID/pagemap entries, the older kernels' way to tell
 * them (and THP membership, through /proc/kpageflags), need CAP_SYS_ADMIN
 * of whoever opened the file: far too much to keep for an exporter, so
 * there such pages count as non-zero for the pagemap method (sample and
 * scan test their content and get them right). Guest RAM in shared memory
 * (memfd, hugetlbfs, a memory-backend-file) is reached through
 * /proc/PID/map_files, which needs CAP_CHECKPOINT_RESTORE (Linux 5.9+)
 * or CAP_SYS_ADMIN: without it every page the VMM does not map is unknown.
 * So with --plan-interval, and only then, CAP_CHECKPOINT_RESTORE is kept
 * too.
 *
 * Nothing else is needed after the socket is bound and the TLS files are
 * read: every other capability is dropped, from the bounding set too, and
 * no exec can regain one.
 */
static void drop_caps(struct server *s)
{
	static const int keep[] = { CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH,
				    CAP_CHECKPOINT_RESTORE };
	int nkeep = s->o.plan.interval_s ? 3 : 2;
	bool setpcap;

	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	capng_get_caps_process();
	setpcap = capng_have_capability(CAPNG_EFFECTIVE, CAP_SETPCAP);
	if (capng_have_capabilities(CAPNG_SELECT_CAPS) == CAPNG_NONE && !setpcap)
		return;	/* an unprivileged run: nothing to give up */
	{
		bool had[3];

		for (int i = 0; i < nkeep; i++)
			had[i] = capng_have_capability(CAPNG_PERMITTED, keep[i]);
		capng_clear(CAPNG_SELECT_BOTH);
		for (int i = 0; i < nkeep; i++)
			if (had[i])
				capng_update(CAPNG_ADD, CAPNG_EFFECTIVE | CAPNG_PERMITTED,
					     keep[i]);
		for (int i = 0; i < nkeep; i++)
			if (had[i])
				capng_update(CAPNG_ADD, CAPNG_BOUNDING_SET, keep[i]);
	}
	if (capng_apply(setpcap ? CAPNG_SELECT_BOTH : CAPNG_SELECT_CAPS))
		cli_warn(s->cli, "could not drop capabilities");
}

static void raise_nofile(void)
{
	struct rlimit rl;

	/* One fd per VM and vCPU: thousands on a large host. */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static bool select_vmm(void *arg, struct kvmstats_vmm *v)
{
	return target_selected(arg, v);
}

static int make_landing(struct server *s)
{
	const char *scheme = s->have_web && web_config_tls(&s->web) ? "https" : "http";
	int n = asprintf(&s->landing,
		"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
		"<title>kvmstats exporter</title></head>\n<body>\n"
		"<h1>kvmstats exporter</h1>\n"
		"<p>KVM statistics of every VM on this host, for Prometheus.</p>\n"
		"<ul><li><a href=\"%s\">%s</a> (Prometheus text format, OpenMetrics "
		"when asked, gzip when accepted)</li></ul>\n"
		"<p>Version %s, serving %s://%s.</p>\n</body></html>\n",
		s->o.path, s->o.path, kvmstats_version_string(), scheme, s->addr);

	return n < 0 ? -1 : 0;
}

static int start_http(struct server *s)
{
	unsigned int flags = MHD_USE_THREAD_PER_CONNECTION |
			     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
			     MHD_USE_ERROR_LOG;
	bool tls = s->have_web && web_config_tls(&s->web);
	struct MHD_OptionItem topts[] = {
		{ MHD_OPTION_HTTPS_MEM_CERT, 0, tls ? s->web.cert_pem : NULL },
		{ MHD_OPTION_HTTPS_MEM_KEY, 0, tls ? s->web.key_pem : NULL },
		{ MHD_OPTION_HTTPS_PRIORITIES, 0, tls ? s->web.priorities : NULL },
		{ MHD_OPTION_END, 0, NULL },
	};
	struct sockaddr_storage ss = { 0 };
	socklen_t sl = sizeof(ss);

	if (tls) {
		if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
			cli_err(s->cli, "this libmicrohttpd was built without TLS");
			return -1;
		}
		flags |= MHD_USE_TLS;
	}
	if (!getsockname(s->listen_fd, (struct sockaddr *)&ss, &sl) &&
	    ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->d = MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, s,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
		MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
		MHD_OPTION_CONNECTION_LIMIT, s->o.max_conn,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->o.max_conn_ip,
		MHD_OPTION_CONNECTION_TIMEOUT, s->o.timeout_s,
		/* Request line and headers must fit in 16 KiB (a
		 * Prometheus scrape sends well under 1 KiB). */
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16384,
		MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512 * 1024),
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_ARRAY, tls ? topts : &topts[3],
		MHD_OPTION_END);
	if (!s->d) {
		cli_err(s->cli, "cannot start the HTTP server on %s%s", s->addr,
			tls ? " (is the TLS certificate or key valid?)" : "");
		return -1;
	}
	return 0;
}

static void write_ready(struct server *s)
{
	char tmp[4096];
	FILE *f;

	if (!s->o.ready)
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", s->o.ready);
	f = fopen(tmp, "we");
	if (!f) {
		cli_warn(s->cli, "--ready %s: %s", s->o.ready, strerror(errno));
		return;
	}
	fprintf(f, "%s\n", s->addr);
	if (fclose(f) || rename(tmp, s->o.ready))
		cli_warn(s->cli, "--ready %s: %s", s->o.ready, strerror(errno));
}

static void refresh(struct server *s)
{
	uint64_t t0 = now_ns();
	int n;

	pthread_mutex_lock(&s->lock);
	n = kvmstats_host__refresh(s->host);
	s->refresh_ns = now_ns() - t0;
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		cli_warn(s->cli, "scanning the host: %s", strerror(-n));
	/* A --pid VMM that cannot be read is said once, not every refresh. */
	if (strcmp(s->last_errors, kvmstats_host__errors(s->host))) {
		snprintf(s->last_errors, sizeof(s->last_errors), "%s",
			 kvmstats_host__errors(s->host));
		target_report_errors(s->cli, s->host);
	}
}

/* Until SIGINT or SIGTERM: rescan the host every refresh_s seconds. */
static void main_loop(struct server *s, const sigset_t *set)
{
	struct timespec ts = { .tv_sec = s->o.refresh_s };

	for (;;) {
		int sig = sigtimedwait(set, NULL, &ts);

		if (sig == SIGINT || sig == SIGTERM)
			return;
		if (sig < 0 && errno == EINTR)
			continue;
		refresh(s);
	}
}

static int hash_password(struct cli *cli)
{
	char pass[1024], hash[128];
	struct termios t, quiet;
	bool tty = isatty(STDIN_FILENO) && !tcgetattr(STDIN_FILENO, &t);
	size_t n;
	int err;

	if (tty) {
		fprintf(stderr, "password: ");
		quiet = t;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(STDIN_FILENO, TCSANOW, &quiet);
	}
	if (!fgets(pass, sizeof(pass), stdin))
		pass[0] = 0;
	if (tty) {
		tcsetattr(STDIN_FILENO, TCSANOW, &t);
		fputc('\n', stderr);
	}
	n = strcspn(pass, "\r\n");
	pass[n] = 0;
	if (!n) {
		cli_err(cli, "serve --hash-password: no password on stdin");
		return EXIT_USAGE;
	}
	err = web_hash_password(pass, hash, sizeof(hash));
	explicit_bzero(pass, sizeof(pass));
	if (err) {
		cli_err(cli, "cannot hash: %s", strerror(-err));
		return EXIT_FAIL;
	}
	printf("%s\n", hash);
	return EXIT_OK;
}

/* A number in [min, max]: 0, or -1 (reported). */
static int parse_num(const struct cli *cli, const char *opt, const char *arg,
		     double min, double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !isfinite(v) || v < min || v > max) {
		cli_err(cli, "%s: '%s' is not a number from %g to %g", opt, arg, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

/* BYTES/S with an optional K, M or G (powers of 1024), as plan takes it. */
static int parse_bandwidth(const struct cli *cli, const char *arg, double *out)
{
	static const char units[] = "KMG";
	const char *u;
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
	if (u) {
		v *= (double)(1ull << (10 * (u - units + 1)));
		end++;
	}
	end += strspn(end, "iB");
	if (!strcmp(end, "/s"))
		end += 2;
	if (errno || end == arg || *end || !isfinite(v) || v <= 0) {
		cli_err(cli, "--plan-bandwidth: '%s' is not a rate in bytes/s (e.g. 1G)",
			arg);
		return -1;
	}
	*out = v;
	return 0;
}

/* 1: a --plan-* option (used), 0: not one, -1: a bad value (reported). */
static int plan_opt(struct cli *cli, struct plan_cfg *p, int c, const char *arg)
{
	long v;
	int m;

	/* The options after --plan-interval in the enum tune the planner. */
	if (c > OPT_PLAN_INTERVAL && c <= OPT_PLAN_DOWNTIME)
		p->given = true;
	switch (c) {
	case OPT_PLAN_INTERVAL:
		v = cli_parse_long(cli, "--plan-interval", arg, 0, 86400);
		p->interval_s = (unsigned int)v;
		return v < 0 ? -1 : 1;
	case OPT_PLAN_METHOD:
		m = kvmstats_method_parse(arg);
		if (m < 0 || m >= KVMSTATS_METHOD_NR) {
			cli_err(cli, "--plan-method: what is '%s'? (stats, pagemap, "
				"sample, scan)", arg);
			return -1;
		}
		p->method = (enum kvmstats_method)m;
		return 1;
	case OPT_PLAN_DIRTY:
		return parse_num(cli, "--plan-dirty-interval", arg, 0, 3600,
				 &p->dirty_s) ? -1 : 1;
	case OPT_PLAN_MAX_CPU:
		return parse_num(cli, "--plan-max-cpu", arg, 0.01, 1024,
				 &p->max_cpu) ? -1 : 1;
	case OPT_PLAN_RATE:
		if (parse_num(cli, "--plan-rate", arg, 0.001, 1e9, &p->rate))
			return -1;
		p->rate *= 1048576;
		return 1;
	case OPT_PLAN_BANDWIDTH:
		return parse_bandwidth(cli, arg, &p->bandwidth) ? -1 : 1;
	case OPT_PLAN_DOWNTIME:
		return parse_num(cli, "--plan-downtime", arg, 1, 3600000,
				 &p->downtime_ms) ? -1 : 1;
	}
	return 0;
}

static int parse_opts(struct cli *cli, struct serve_opts *o, struct target_args *a,
		      int argc, char **argv, bool *hash)
{
	static const struct option opts[] = {
		CLI_TARGET_LONGOPTS,
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "web-config", required_argument, NULL, OPT_WEB_CONFIG },
		{ "web.config.file", required_argument, NULL, OPT_WEB_CONFIG },
		{ "path", required_argument, NULL, OPT_PATH },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "refresh", required_argument, NULL, OPT_REFRESH },
		{ "no-histograms", no_argument, NULL, OPT_NO_HIST },
		{ "gzip-level", required_argument, NULL, OPT_GZIP_LEVEL },
		{ "max-connections", required_argument, NULL, OPT_MAX_CONN },
		{ "max-connections-per-ip", required_argument, NULL, OPT_MAX_CONN_IP },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "ready", required_argument, NULL, OPT_READY },
		{ "hash-password", no_argument, NULL, OPT_HASH },
		{ "plan-interval", required_argument, NULL, OPT_PLAN_INTERVAL },
		{ "plan-method", required_argument, NULL, OPT_PLAN_METHOD },
		{ "plan-dirty-interval", required_argument, NULL, OPT_PLAN_DIRTY },
		{ "plan-max-cpu", required_argument, NULL, OPT_PLAN_MAX_CPU },
		{ "plan-rate", required_argument, NULL, OPT_PLAN_RATE },
		{ "plan-bandwidth", required_argument, NULL, OPT_PLAN_BANDWIDTH },
		{ "plan-downtime", required_argument, NULL, OPT_PLAN_DOWNTIME },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	long v;
	int c;

	while ((c = getopt_long(argc, argv, CLI_TARGET_SHORTOPTS "l:h", opts,
				NULL)) != -1) {
		int used = cli_target_opt(cli, a, c, optarg);

		if (!used)
			used = plan_opt(cli, &o->plan, c, optarg);

		if (used < 0)
			return EXIT_USAGE;
		if (used)
			continue;
		v = 0;
		switch (c) {
		case 'l':
		case OPT_LISTEN:
			o->listen = optarg;
			break;
		case OPT_WEB_CONFIG:
			o->web_config = optarg;
			break;
		case OPT_PATH:
			if (optarg[0] != '/' || !strcmp(optarg, "/")) {
				cli_err(cli, "--path: '%s' must start with / and not be /",
					optarg);
				return EXIT_USAGE;
			}
			o->path = optarg;
			break;
		case OPT_READY:
			o->ready = optarg;
			break;
		case OPT_NO_HIST:
			o->no_hist = true;
			break;
		case OPT_HASH:
			*hash = true;
			break;
		case OPT_THREADS:
			v = cli_parse_long(cli, "--threads", optarg, 0, PROM_MAX_PARTS);
			o->threads = (unsigned int)v;
			break;
		case OPT_REFRESH:
			v = cli_parse_long(cli, "--refresh", optarg, 1, 86400);
			o->refresh_s = (unsigned int)v;
			break;
		case OPT_GZIP_LEVEL:
			v = cli_parse_long(cli, "--gzip-level", optarg, 1, 9);
			o->gzip_level = (int)v;
			break;
		case OPT_MAX_CONN:
			v = cli_parse_long(cli, "--max-connections", optarg, 1, 4096);
			o->max_conn = (unsigned int)v;
			break;
		case OPT_MAX_CONN_IP:
			v = cli_parse_long(cli, "--max-connections-per-ip", optarg, 1, 4096);
			o->max_conn_ip = (unsigned int)v;
			break;
		case OPT_TIMEOUT:
			v = cli_parse_long(cli, "--timeout", optarg, 1, 3600);
			o->timeout_s = (unsigned int)v;
			break;
		case 'h':
			printf("usage: %s serve %s\n", cli->prog, serve_usage);
			return -1;
		default:
			return cli_usage(cli, "serve", serve_usage);
		}
		if (v < 0)
			return EXIT_USAGE;
	}
	if (optind < argc) {
		cli_err(cli, "serve: unexpected argument '%s'", argv[optind]);
		return cli_usage(cli, "serve", serve_usage);
	}
	if (a->nfiles) {
		cli_err(cli, "serve: --file is not served (image files do not change)");
		return EXIT_USAGE;
	}
	if (o->plan.given && !o->plan.interval_s) {
		cli_err(cli, "serve: the --plan-* options need --plan-interval SECONDS");
		return EXIT_USAGE;
	}
	return 0;
}

static void server_free(struct server *s)
{
	/* First: the planner takes the scrape lock and reads the host. */
	planner_free(&s->plan);
	if (s->d)
		MHD_stop_daemon(s->d);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	/* Every response is gone with the daemon: the results are free. */
	for (int i = 0; i < MAX_RESULTS; i++)
		prom_expo_free(&s->results[i].e);
	prom_expo_free(&s->scratch);
	prom_pool_free(s->pool);
	prom_model_free(s->model);
	kvmstats_host__free(s->host);
	if (s->have_web)
		web_config_free(&s->web);
	free(s->landing);
	pthread_mutex_destroy(&s->lock);
}

static int run(struct server *s)
{
	sigset_t set;
	char why[512];
	size_t nvmms;

	if (s->o.web_config) {
		if (web_config_load(&s->web, s->o.web_config, why, sizeof(why))) {
			cli_err(s->cli, "%s", why);
			return EXIT_FAIL;
		}
		s->have_web = true;
	}
	if (open_listener(s))
		return EXIT_FAIL;
	/* A thread per connection: glibc would give each its own arena and
	 * keep what it freed there; two arenas keep the footprint flat. */
	mallopt(M_ARENA_MAX, 2);
	raise_nofile();
	drop_caps(s);
	/* Every thread started from here on inherits this mask: the
	 * signals wait for the main thread's sigtimedwait(). */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	s->host = target_host_new(s->cli, s->targs);
	s->model = prom_model_new(&(struct prom_opts){
		.no_histograms = s->o.no_hist,
		.select = s->targs->name_set ? select_vmm : NULL,
		.select_arg = s->targs });
	s->pool = prom_pool_new(s->o.threads);
	if (!s->host || !s->model || !s->pool || make_landing(s)) {
		cli_err(s->cli, "serve: out of memory");
		return EXIT_FAIL;
	}
	refresh(s);
	/* Counted now: once serving, the host is the scrapes' (under the lock). */
	nvmms = kvmstats_host__num_vmms(s->host);
	if (start_http(s) || planner_start(s))
		return EXIT_FAIL;
	if (s->cli->verbose >= 0)
		fprintf(stderr, "%s: serving %s://%s%s (%zu VMMs)\n", s->cli->prog,
			s->have_web && web_config_tls(&s->web) ? "https" : "http",
			s->addr, s->o.path, nvmms);
	write_ready(s);
	main_loop(s, &set);
	return EXIT_OK;
}

int cmd_serve(struct cli *cli, int argc, char **argv)
{
	struct target_args a;
	struct server s = {
		.cli = cli, .listen_fd = -1, .targs = &a,
		.o = { .listen = "127.0.0.1:9938", .path = "/metrics",
		       .refresh_s = 5, .gzip_level = 1, .max_conn = 64,
		       .max_conn_ip = 16, .timeout_s = 10,
		       .plan = { .method = KVMSTATS_METHOD_PAGEMAP, .dirty_s = 1 } },
	};
	bool hash = false;
	int ret;

	if (target_args_init(&a, argc))
		return EXIT_FAIL;
	pthread_mutex_init(&s.lock, NULL);
	planner_init(&s.plan);
	ret = parse_opts(cli, &s.o, &a, argc, argv, &hash);
	if (ret == -1)
		ret = EXIT_OK;
	else if (!ret && hash)
		ret = hash_password(cli);
	else if (!ret)
		ret = run(&s);
	server_free(&s);
	target_args_free(&a);
	return ret;
}
