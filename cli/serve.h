/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * kvmstats serve: what its parts share. serve.c starts and stops the
 * exporter (options, the listening socket, capabilities, the main loop),
 * serve_http.c answers requests (scrapes, the exporter's own metrics),
 * serve_guard.c keeps slow and hostile clients from the others (request
 * head deadline, fair connection slots, throttled authentication),
 * serve_plan.c runs the migration planner (--plan-interval),
 * serve_follow.c follows the VMs' migrations (--follow-interval).
 */
#ifndef KVMSTATS_SERVE_H
#define KVMSTATS_SERVE_H

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "cli.h"
#include "kvmstats_drain.h"
#include "kvmstats_mem.h"
#include "prom.h"
#include "webconfig.h"

/* Expositions alive at once (being built, or still being sent). */
#define MAX_RESULTS 4
/* A request body is never expected: a client sending more is dropped. */
#define MAX_BODY 4096


/* The planner's options: `kvmstats plan`'s own, under --plan-*. */
struct plan_cfg {
	unsigned int interval_s;	/* 0: no planner */
	enum kvmstats_method method;
	double dirty_s;			/* dirty rate over; 0: assume clean */
	double max_cpu;			/* scan's CPU budget, cores; 0: 1 */
	double rate;			/* scan's read budget, bytes/s; 0: none */
	double bandwidth;		/* bytes/s; 0: QEMU's or default */
	double downtime_ms;		/* 0: QEMU's or default */
	double drain_link;		/* bytes/s; 0: no drain schedule */
	uint32_t parallel;		/* the drain's migrations at a time */
	bool parallel_given;
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
	unsigned int follow_s;		/* 0: no follower */
	bool follow_given;		/* else: on (1 s) with the planner */
};

/* A VM's prediction as a planning round published it. */
struct plan_pred {
	pid_t pid;
	double seconds, bytes;		/* NAN or inf: none */
};

/* One round's predictions, sorted by pid. */
struct plan_preds {
	struct plan_pred *v;
	size_t n;
	uint64_t done_ns;		/* when the round published them */
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
	struct plan_preds preds[2];	/* that round's, the one before's */
	/* The thread's own. */
	struct prom_buf next[2];
	pid_t *failing;			/* failed in the previous round */
	size_t nfailing;
	/* One question to libvirt outstanding across rounds (a hung
	 * libvirtd must not cost a thread per VM per round). */
	struct kvmstats_libvirt_guard *libvirt_guard;
};

/* The migration follower (serve_follow.c) and what it last published;
 * locked as the planner is. It takes the server's lock, then the
 * planner's, never while it holds its own. */
struct follow_vm;

struct follower {
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t wake;		/* stop */
	/* Under @lock. */
	bool stop;
	struct prom_buf text[2];	/* per format: the per-VM gauges */
	uint64_t followed;		/* migrations seen ending */
	/* The thread's own. */
	struct prom_buf next[2];
	struct follow_vm *vms;
	size_t nvms, cap;
	uint64_t ended;			/* published as @followed */
	/* One question to libvirt outstanding for all the VMs it runs. */
	struct kvmstats_libvirt_guard *libvirt_guard;
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

/* serve_guard.c: connection slots, the request head deadline, throttled
 * authentication. */
#define AUTH_PEERS 256

struct gconn;

struct auth_peer {
	struct sockaddr_storage addr;
	unsigned int failures;
	uint64_t until;			/* no check before */
	uint64_t last;			/* failed last at */
};

struct guard {
	pthread_mutex_t lock;		/* everything below */
	pthread_cond_t wake;
	pthread_t reaper;
	bool started, stop;
	struct gconn *conns;
	atomic_uint_fast64_t late;	/* shut down: no request head in time */
	atomic_uint_fast64_t evicted;	/* shut down for a newcomer */
	atomic_uint_fast64_t refused;	/* newcomers shut down: no room */
	atomic_uint_fast64_t throttled;	/* authentication not even tried */
	pthread_mutex_t check_lock;	/* one bcrypt check at a time */
	struct auth_peer peers[AUTH_PEERS];
	uint64_t budget_at;		/* of the host-wide check budget */
};

enum auth_result {
	AUTH_OK,
	AUTH_DENIED,
	AUTH_THROTTLED,
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
	struct discover *disc;		/* opens new VMMs off the lock */
	struct prom_model *model;
	struct prom_pool *pool;
	struct prom_expo scratch;
	struct result results[MAX_RESULTS];
	struct result *latest[2];	/* per format */
	uint64_t scrapes[2];		/* per format */
	char last_errors[1024];		/* of the last refresh, said once */
	uint64_t read_errors[PROM_NSRC];
	uint64_t render_ns, refresh_ns;
	/* Other users' processes out of sight, at the last refresh. */
	_Atomic int hidden_procs, hidden_vmms;
	uint64_t rebuilds;		/* of the model: VMs came or went */
	atomic_uint_fast64_t busy;	/* requests refused: results all in use */
	uint64_t stale;			/* requests given the previous result */
	atomic_uint_fast64_t denied;	/* requests refused: authentication */
	char *landing;
	struct planner plan;
	struct follower follow;
	/* The planner's and the follower's QMP exchanges, one at a time:
	 * QEMU serves one client per monitor, and a planner that finds it
	 * busy plans with QEMU's default settings. Taken alone. */
	pthread_mutex_t qmp_lock;
	struct guard guard;
};

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Wait on @wake (CLOCK_MONOTONIC) under @lock until @deadline (ns) or
 * *@stop; true on a stop. */
static inline bool serve_sleep(pthread_mutex_t *lock, pthread_cond_t *wake,
			       const bool *stop, uint64_t deadline)
{
	struct timespec ts = { .tv_sec = (time_t)(deadline / 1000000000ull),
			       .tv_nsec = (long)(deadline % 1000000000ull) };
	bool stopped;

	pthread_mutex_lock(lock);
	while (!*stop && now_ns() < deadline)
		if (pthread_cond_timedwait(wake, lock, &ts) == ETIMEDOUT)
			break;
	stopped = *stop;
	pthread_mutex_unlock(lock);
	return stopped;
}

/* serve_plan.c */
void planner_init(struct planner *pl);
int planner_start(struct server *s);
void planner_free(struct planner *pl);
/* The planner's gauges, for a scrape (under the server's lock). */
void plan_metrics(struct server *s, struct prom_buf *b, enum prom_format f);
/* VMM @pid's prediction of the last round published by @before (ns):
 * false when there is none (no planner, no such round, not planned). */
bool plan_prediction(struct server *s, pid_t pid, uint64_t before,
		     struct plan_pred *out);

/* serve_drain.c: the drain of the round's @n predicted plans
 * (--drain-link), NULL when none; its gauges. */
struct kvmstats_drain *serve_drain(const struct plan_cfg *c,
				   struct kvmstats_plan *const *plans, size_t n);
void render_drain(struct prom_buf *b, enum prom_format f,
		  const struct kvmstats_drain *d);

/* serve_follow.c */
void follower_init(struct follower *fl);
int follower_start(struct server *s);
void follower_free(struct follower *fl);
/* The follower's gauges, for a scrape (under the server's lock). */
void follow_metrics(struct server *s, struct prom_buf *b, enum prom_format f);

/* serve_http.c */
int start_http(struct server *s);

/* serve_guard.c */
void guard_init(struct guard *g);
int guard_start(struct server *s);
void guard_free(struct guard *g);
unsigned int guard_mhd_limit(const struct server *s);
/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls: server). */
void guard_notify(void *cls, struct MHD_Connection *conn, void **ctx,
		  enum MHD_ConnectionNotificationCode what);
/* A request head is complete (@answering), or its answer is done. */
void guard_request(struct server *s, struct MHD_Connection *conn, bool answering);
/* Basic auth of @user:@pass, throttled; *wait_s when AUTH_THROTTLED. */
enum auth_result guard_auth(struct server *s, struct MHD_Connection *conn,
			    const char *user, const char *pass, unsigned int *wait_s);

#endif
