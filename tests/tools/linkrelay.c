// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * linkrelay RATE LPORT:DPORT...: one shared link of RATE bytes/s on
 * loopback, for the drain test. Each LPORT on 127.0.0.1 accepts
 * connections and relays each to 127.0.0.1:DPORT; every byte towards the
 * DPORTs, of all connections together, takes a token from one bucket
 * refilled at RATE (holding at most 20 ms of it), shared fairly among the
 * connections that have data to send: so two migrations through it get
 * half of RATE each, or what the other leaves. The way back (QEMU's
 * return path, a few bytes) is not limited.
 *
 * What a sender believes it sent is close to what crossed the link only
 * while little waits between them: the relay's receive buffer is 20 ms
 * of RATE (at least 64 KiB, at most 1 MiB; it was 1 MiB at every rate,
 * a sixth of a second of a 6 MiB/s link), and the sender's own send
 * buffer is the sender's to keep small (drain.sh fixes it at 20 ms too).
 * Prints "ready" once listening; runs until killed (SIGTERM).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 16
#define MAX_CONNS 64
#define BUF (256 * 1024)
#define RCVBUF_MIN (64 * 1024)
#define RCVBUF_MAX (1024 * 1024)

struct pipe_end {
	int from, to;
	char buf[BUF];
	size_t len, off;
	bool limited, eof;
};

struct conn {
	struct pipe_end fwd, back;
	bool used;
};

static struct conn conns[MAX_CONNS];
static int lfd[MAX_PORTS], dport[MAX_PORTS], nports;
static double rate, tokens, last;
static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void refill(void)
{
	double t = now(), cap = rate / 50 > BUF ? rate / 50 : BUF;

	tokens += (t - last) * rate;
	if (tokens > cap)
		tokens = cap;
	last = t;
}

static int listen_on(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	int rcv = rate / 50 < RCVBUF_MIN ? RCVBUF_MIN :
		  rate / 50 > RCVBUF_MAX ? RCVBUF_MAX : (int)(rate / 50);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int connect_to(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

static void accept_one(int i)
{
	int c = accept(lfd[i], NULL, NULL), d;

	if (c < 0)
		return;
	d = connect_to(dport[i]);
	for (int k = 0; d >= 0 && k < MAX_CONNS; k++) {
		if (conns[k].used)
			continue;
		memset(&conns[k], 0, sizeof(conns[k]));
		conns[k].used = true;
		conns[k].fwd = (struct pipe_end){ .from = c, .to = d, .limited = true };
		conns[k].back = (struct pipe_end){ .from = d, .to = c };
		return;
	}
	close(c);
	if (d >= 0)
		close(d);
}

/* Read into an empty buffer, at most @max bytes. */
static void pull(struct pipe_end *p, size_t max)
{
	ssize_t n;

	if (p->eof || p->len || !max)
		return;
	n = recv(p->from, p->buf, max < BUF ? max : BUF, MSG_DONTWAIT);
	if (n > 0) {
		p->len = (size_t)n;
		p->off = 0;
		if (p->limited)
			tokens -= (double)n;
	} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
		p->eof = true;
		shutdown(p->to, SHUT_WR);
	}
}

static void push(struct pipe_end *p)
{
	ssize_t n;

	if (!p->len)
		return;
	n = send(p->to, p->buf + p->off, p->len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n > 0) {
		p->off += (size_t)n;
		p->len -= (size_t)n;
	} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
		p->len = 0;
		p->eof = true;
	}
}

static void close_done(struct conn *c)
{
	if (!c->fwd.eof || !c->back.eof || c->fwd.len || c->back.len)
		return;
	close(c->fwd.from);
	close(c->fwd.to);
	c->used = false;
}

/* One round: each connection waiting to send gets an equal part of the
 * tokens there are. */
static void round_robin(void)
{
	double share;
	int want = 0;

	refill();
	for (int k = 0; k < MAX_CONNS; k++)
		want += conns[k].used && !conns[k].fwd.eof && !conns[k].fwd.len;
	/* The same part for each, whatever its place in the table. */
	share = want && tokens > 0 ? tokens / want : 0;
	for (int k = 0; k < MAX_CONNS; k++) {
		struct conn *c = &conns[k];

		if (!c->used)
			continue;
		if (share > 0)
			pull(&c->fwd, (size_t)share + 1);
		pull(&c->back, BUF);
		push(&c->fwd);
		push(&c->back);
		close_done(c);
	}
}

static int wait_io(void)
{
	struct pollfd p[MAX_PORTS + 4 * MAX_CONNS];
	int n = 0;

	for (int i = 0; i < nports; i++)
		p[n++] = (struct pollfd){ .fd = lfd[i], .events = POLLIN };
	for (int k = 0; k < MAX_CONNS; k++) {
		struct conn *c = &conns[k];

		if (!c->used)
			continue;
		if (!c->fwd.eof)
			p[n++] = (struct pollfd){ .fd = c->fwd.from,
				.events = (short)(c->fwd.len || tokens <= 0 ? 0 : POLLIN) };
		p[n++] = (struct pollfd){ .fd = c->fwd.to,
			.events = (short)((c->fwd.len ? POLLOUT : 0) |
					  (c->back.len || c->back.eof ? 0 : POLLIN)) };
		if (c->back.len)
			p[n++] = (struct pollfd){ .fd = c->back.to, .events = POLLOUT };
	}
	/* Out of tokens: wake up when a chunk's worth has come back. */
	if (poll(p, (nfds_t)n, tokens <= 0 ? 1 + (int)((BUF / 4 - tokens) / rate * 1e3) : 50) < 0 &&
	    errno != EINTR)
		return -1;
	for (int i = 0; i < nports; i++)
		if (p[i].revents & POLLIN)
			accept_one(i);
	return 0;
}

int main(int argc, char **argv)
{
	char *end;

	if (argc < 3 || argc - 2 > MAX_PORTS) {
		fprintf(stderr, "usage: linkrelay RATE LPORT:DPORT...\n");
		return 2;
	}
	rate = strtod(argv[1], &end);
	if (*end || !(rate > 0))
		return 2;
	for (int i = 2; i < argc; i++) {
		int lp, dp;

		if (sscanf(argv[i], "%d:%d", &lp, &dp) != 2)
			return 2;
		lfd[nports] = listen_on(lp);
		dport[nports++] = dp;
		if (lfd[nports - 1] < 0) {
			fprintf(stderr, "linkrelay: port %d: %s\n", lp, strerror(errno));
			return 1;
		}
	}
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	last = now();
	printf("ready\n");
	fflush(stdout);
	while (!stop) {
		if (wait_io())
			return 1;
		round_robin();
	}
	return 0;
}
