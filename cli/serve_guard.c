// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats serve: keeping slow and hostile clients from the others.
 *
 * Any local user reaches the exporter's port, from any of 2^24 loopback
 * addresses. libmicrohttpd limits connections in number, per address and
 * in idle time, but a client that sends one header line every few
 * seconds is never idle: 16 of them from one address, or 64 from four,
 * held every slot for as long as they liked. So:
 *
 * - A request head (and the TLS handshake before it) must be complete
 *   within HEAD_DEADLINE_S of the connection's start, or of the end of
 *   the previous response on a kept-alive connection; a reaper thread
 *   shuts down those that are late.
 * - Slots are ours to hand out (libmicrohttpd's own limits are set above
 *   ours): when a new connection finds its address at
 *   --max-connections-per-ip, or every slot taken, the oldest connection
 *   that is still waiting for its head, or has been answering one request
 *   for more than SLOW_ANSWER_S (a slow reader), goes first: for a full
 *   house, one of the address holding the most connections. None goes
 *   before it is EVICT_GRACE_MS old, unless the newcomer's whole request
 *   head has arrived already (a scraper writes it as it connects; a slow
 *   client never has): a flood of slow connections, even from the
 *   scraper's own address, churns only through its own. When none can
 *   go, the new one is on probation: it is refused unless its head
 *   arrives within PROBATION_MS.
 * - A wrong password costs a bcrypt check (0.2 s of CPU): after a few
 *   failures an address waits, doubling up to AUTH_MAX_WAIT_S, before its
 *   next check, all addresses together get AUTH_CHECKS_PER_S checks a
 *   second (AUTH_BURST at once), one at a time; a password that passed
 *   is checked again against webconfig.c's cheap digest of it only.
 *
 * A connection is shut down (shutdown(2)) and libmicrohttpd closes it in
 * its own thread; it tells us (NOTIFY_CLOSED) before it closes the
 * socket, and both happen under the guard's lock, so the fd shut down is
 * always the connection's own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "serve.h"

#define HEAD_DEADLINE_S 5
#define SLOW_ANSWER_S 10
/* A connection younger than this is never let go for a newcomer: a client
 * that sends its request at once has sent it by then, and a flood of new
 * connections cannot churn through the others. */
#define EVICT_GRACE_MS 1000
/* A newcomer with no room is given this long to send its request head
 * (it may be arriving) before it is refused; at most PROBATION_MAX at a
 * time. */
#define PROBATION_MS 300
#define PROBATION_MAX 8
/* Above our own limit: connections on probation, or shut down and not
 * closed yet. */
#define MHD_SLACK 32
#define REAP_EVERY_MS 100
/* Failures an address may have checked at once (typos), before it waits
 * AUTH_FIRST_WAIT_MS, doubling at each failure up to AUTH_MAX_WAIT_S. */
#define AUTH_FREE_FAILURES 4
#define AUTH_MAX_WAIT_S 30
#define AUTH_FIRST_WAIT_MS 250
#define AUTH_CHECKS_PER_S 2
#define AUTH_BURST 8

#define NS_PER_S 1000000000ull

/* One connection, from libmicrohttpd's start notice to its close notice. */
struct gconn {
	struct gconn *prev, *next;
	int fd;
	struct sockaddr_storage addr;
	uint64_t since;		/* waiting for a head, or answering, since */
	bool answering;		/* its request head is complete */
	bool probation;		/* admitted beyond the limits, for its head */
	bool gone;		/* shut down by us, not closed yet */
};

static bool same_addr(const struct sockaddr_storage *a,
		      const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	return false;
}

/* Live connections from @addr (all of them when NULL). */
static unsigned int count_from(const struct guard *g,
			       const struct sockaddr_storage *addr)
{
	unsigned int n = 0;

	for (const struct gconn *c = g->conns; c; c = c->next)
		n += !c->gone && !c->probation && (!addr || same_addr(&c->addr, addr));
	return n;
}

static unsigned int on_probation(const struct guard *g)
{
	unsigned int n = 0;

	for (const struct gconn *c = g->conns; c; c = c->next)
		n += !c->gone && c->probation;
	return n;
}

/* May @c be let go for a newcomer (whose request head is all there:
 * @ready)? */
static bool evictable(const struct gconn *c, uint64_t now, bool ready)
{
	if (c->gone || c->probation ||
	    (!ready && now - c->since < EVICT_GRACE_MS * 1000000ull))
		return false;
	return !c->answering || now - c->since > SLOW_ANSWER_S * NS_PER_S;
}

/* The oldest evictable connection from @addr, or, when NULL, from the
 * address that holds the most connections. */
static struct gconn *victim(const struct guard *g, const struct sockaddr_storage *addr,
			    uint64_t now, bool ready)
{
	struct gconn *best = NULL;
	unsigned int best_n = 0;

	for (struct gconn *c = g->conns; c; c = c->next) {
		unsigned int n;

		if (!evictable(c, now, ready) || (addr && !same_addr(&c->addr, addr)))
			continue;
		n = addr ? 1 : count_from(g, &c->addr);
		if (!best || n > best_n || (n == best_n && c->since < best->since)) {
			best = c;
			best_n = n;
		}
	}
	return best;
}

static void let_go(struct gconn *c)
{
	shutdown(c->fd, SHUT_RDWR);
	c->gone = true;
}

/* Has the client sent its whole request head already? Over plain HTTP a
 * scraper has (it writes its request as it connects); a slow client
 * never has. */
static bool head_arrived(int fd)
{
	char buf[4096];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_PEEK | MSG_DONTWAIT);

	if (n <= 0)
		return false;
	buf[n] = 0;
	return strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n");
}

/* A new connection: make room for it, or refuse it. */
static void admit(struct server *s, struct gconn *nc, bool ready)
{
	struct guard *g = &s->guard;
	uint64_t now = now_ns();
	struct gconn *v = NULL;
	bool full_ip, full;

	full_ip = count_from(g, &nc->addr) >= s->o.max_conn_ip;
	full = count_from(g, NULL) >= s->o.max_conn;
	if (full_ip)
		v = victim(g, &nc->addr, now, ready);
	else if (full)
		v = victim(g, NULL, now, ready);
	if (v) {
		let_go(v);
		atomic_fetch_add(&g->evicted, 1);
	} else if ((full_ip || full) && on_probation(g) < PROBATION_MAX) {
		nc->probation = true;
	} else if (full_ip || full) {
		let_go(nc);
		atomic_fetch_add(&g->refused, 1);
	}
	nc->next = g->conns;
	if (g->conns)
		g->conns->prev = nc;
	g->conns = nc;
}

void guard_notify(void *cls, struct MHD_Connection *conn, void **ctx,
		  enum MHD_ConnectionNotificationCode what)
{
	struct server *s = cls;
	struct guard *g = &s->guard;
	struct gconn *c = *ctx;
	const union MHD_ConnectionInfo *fd, *addr;
	bool ready;

	if (what == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (!c)
			return;
		pthread_mutex_lock(&g->lock);
		if (c->prev)
			c->prev->next = c->next;
		else
			g->conns = c->next;
		if (c->next)
			c->next->prev = c->prev;
		pthread_mutex_unlock(&g->lock);
		free(c);
		*ctx = NULL;
		return;
	}
	fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	addr = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	c = calloc(1, sizeof(*c));
	if (!c || !fd || !addr || !addr->client_addr) {
		/* Untracked, it would escape the deadline: not served. */
		if (fd)
			shutdown(fd->connect_fd, SHUT_RDWR);
		free(c);
		return;
	}
	c->fd = fd->connect_fd;
	memcpy(&c->addr, addr->client_addr,
	       addr->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
							: sizeof(struct sockaddr_in));
	c->since = now_ns();
	*ctx = c;
	ready = head_arrived(c->fd);
	pthread_mutex_lock(&g->lock);
	admit(s, c, ready);
	pthread_mutex_unlock(&g->lock);
}

static struct gconn *conn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *i =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return i ? i->socket_context : NULL;
}

void guard_request(struct server *s, struct MHD_Connection *conn, bool answering)
{
	struct gconn *c = conn_of(conn);

	if (!c)
		return;
	pthread_mutex_lock(&s->guard.lock);
	c->answering = answering;
	c->since = now_ns();
	pthread_mutex_unlock(&s->guard.lock);
}

/* Shut down the connections whose head is late, and those on probation
 * that did not send theirs in time. */
static void reap(struct guard *g)
{
	uint64_t now = now_ns();

	for (struct gconn *c = g->conns; c; c = c->next) {
		if (c->gone || c->answering)
			continue;
		if (c->probation && now - c->since >= PROBATION_MS * 1000000ull) {
			let_go(c);
			atomic_fetch_add(&g->refused, 1);
		} else if (now - c->since >= HEAD_DEADLINE_S * NS_PER_S) {
			let_go(c);
			atomic_fetch_add(&g->late, 1);
		}
	}
}

static void *reaper_main(void *arg)
{
	struct guard *g = arg;

	pthread_mutex_lock(&g->lock);
	while (!g->stop) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += REAP_EVERY_MS * 1000000l;
		ts.tv_sec += ts.tv_nsec / 1000000000l;
		ts.tv_nsec %= 1000000000l;
		pthread_cond_timedwait(&g->wake, &g->lock, &ts);
		reap(g);
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

void guard_init(struct guard *g)
{
	pthread_condattr_t ca;

	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->lock, NULL);
	pthread_mutex_init(&g->check_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g->wake, &ca);
	pthread_condattr_destroy(&ca);
}

int guard_start(struct server *s)
{
	int err = pthread_create(&s->guard.reaper, NULL, reaper_main, &s->guard);

	if (err) {
		cli_err(s->cli, "cannot start a thread: %s", strerror(err));
		return -1;
	}
	s->guard.started = true;
	return 0;
}

/* libmicrohttpd's own limits, above ours: it must let every newcomer in
 * for admit() to choose. */
unsigned int guard_mhd_limit(const struct server *s)
{
	return s->o.max_conn + MHD_SLACK;
}

void guard_free(struct guard *g)
{
	if (g->started) {
		pthread_mutex_lock(&g->lock);
		g->stop = true;
		pthread_cond_signal(&g->wake);
		pthread_mutex_unlock(&g->lock);
		pthread_join(g->reaper, NULL);
	}
	pthread_cond_destroy(&g->wake);
	pthread_mutex_destroy(&g->check_lock);
	pthread_mutex_destroy(&g->lock);
}

/* ---- authentication ------------------------------------------------------- */

/* The failure record of @addr, or NULL. */
static struct auth_peer *peer_find(struct guard *g, const struct sockaddr_storage *addr)
{
	for (int i = 0; i < AUTH_PEERS; i++)
		if (g->peers[i].failures && same_addr(&g->peers[i].addr, addr))
			return &g->peers[i];
	return NULL;
}

/* The failure record of @addr: found, or the stalest one recycled. */
static struct auth_peer *peer_of(struct guard *g, const struct sockaddr_storage *addr)
{
	struct auth_peer *old = peer_find(g, addr);

	if (old)
		return old;
	old = &g->peers[0];
	for (int i = 1; i < AUTH_PEERS; i++)
		if (g->peers[i].last < old->last)
			old = &g->peers[i];
	memset(old, 0, sizeof(*old));
	old->addr = *addr;
	return old;
}

/* A bcrypt check may start now: the address is not waiting and the
 * host-wide budget allows one. */
static bool may_check(struct guard *g, struct auth_peer *p, uint64_t now,
		      unsigned int *wait_s)
{
	uint64_t step = NS_PER_S / AUTH_CHECKS_PER_S;

	if (p && now < p->until) {
		*wait_s = (unsigned int)((p->until - now) / NS_PER_S) + 1;
		return false;
	}
	/* A token bucket: one check every step, AUTH_BURST at once. */
	if (g->budget_at + AUTH_BURST * step < now)
		g->budget_at = now - AUTH_BURST * step;
	if (g->budget_at + step > now) {
		*wait_s = 1;
		return false;
	}
	g->budget_at += step;
	return true;
}

static void failed(struct auth_peer *p, uint64_t now)
{
	uint64_t wait = (uint64_t)AUTH_FIRST_WAIT_MS * 1000000ull;

	p->failures++;
	p->last = now;
	if (p->failures <= AUTH_FREE_FAILURES)
		return;
	for (unsigned int i = AUTH_FREE_FAILURES + 1;
	     i < p->failures && wait < AUTH_MAX_WAIT_S * NS_PER_S; i++)
		wait *= 2;
	if (wait > AUTH_MAX_WAIT_S * NS_PER_S)
		wait = AUTH_MAX_WAIT_S * NS_PER_S;
	p->until = now + wait;
}

enum auth_result guard_auth(struct server *s, struct MHD_Connection *conn,
			    const char *user, const char *pass, unsigned int *wait_s)
{
	struct guard *g = &s->guard;
	struct gconn *c = conn_of(conn);
	struct auth_peer *p = NULL;
	uint64_t now = now_ns();
	bool ok;

	/* A scraper's every request: its password passed already. */
	if (web_auth_cached(&s->web, user, pass))
		return AUTH_OK;
	pthread_mutex_lock(&g->lock);
	if (c)
		p = peer_find(g, &c->addr);
	if (!may_check(g, p, now, wait_s)) {
		pthread_mutex_unlock(&g->lock);
		atomic_fetch_add(&g->throttled, 1);
		return AUTH_THROTTLED;
	}
	pthread_mutex_unlock(&g->lock);
	/* One check at a time, whatever the number of addresses. */
	pthread_mutex_lock(&g->check_lock);
	ok = web_auth_check(&s->web, user, pass);
	pthread_mutex_unlock(&g->check_lock);
	pthread_mutex_lock(&g->lock);
	if (ok && c && (p = peer_find(g, &c->addr)))
		memset(p, 0, sizeof(*p));
	else if (!ok && c)
		failed(peer_of(g, &c->addr), now_ns());
	pthread_mutex_unlock(&g->lock);
	return ok ? AUTH_OK : AUTH_DENIED;
}
