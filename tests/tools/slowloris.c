// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * slowloris ADDR:PORT FROM-LAST CONNS EVERY SECONDS: a slow-header client
 * for the exporter's tests. It keeps CONNS connections open from the
 * loopback addresses FROM..LAST (e.g. 127.0.0.2-5, round robin), each
 * sending a request line at once and then one header line every EVERY
 * seconds, never finishing the head; the connections the server closed
 * are opened again at each of those rounds, as the classic slowloris
 * tool does. It stops after SECONDS and prints "opened N
 * closed-by-server M longest-life L" (L in s).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 1024

struct conn {
	int fd;
	double opened, last_line;
};

static struct sockaddr_in server;
static unsigned int from[4], last_octet;
static unsigned long opened, closed;
static double longest;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int open_one(struct conn *c, unsigned int i)
{
	static const char head[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
	struct sockaddr_in src = { .sin_family = AF_INET };
	unsigned int span = last_octet - from[3] + 1;
	char ip[32];

	snprintf(ip, sizeof(ip), "%u.%u.%u.%u", from[0], from[1], from[2],
		 from[3] + i % span);
	inet_pton(AF_INET, ip, &src.sin_addr);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -1;
	if (bind(c->fd, (struct sockaddr *)&src, sizeof(src)) ||
	    connect(c->fd, (struct sockaddr *)&server, sizeof(server)) ||
	    send(c->fd, head, sizeof(head) - 1, MSG_NOSIGNAL) < 0) {
		close(c->fd);
		c->fd = -1;
		return -1;
	}
	c->opened = c->last_line = now();
	opened++;
	return 0;
}

/* The server closed it (or reset it): note how long it lived. */
static void lost(struct conn *c)
{
	double life = now() - c->opened;

	if (life > longest)
		longest = life;
	closed++;
	close(c->fd);
	c->fd = -1;
}

static int parse(int argc, char **argv, unsigned int *n, double *every,
		 double *secs)
{
	char host[64];
	unsigned int port;

	if (argc != 6 || sscanf(argv[1], "%63[^:]:%u", host, &port) != 2 ||
	    sscanf(argv[2], "%u.%u.%u.%u-%u", &from[0], &from[1], &from[2],
		   &from[3], &last_octet) != 5 || last_octet < from[3])
		return -1;
	*n = (unsigned int)atoi(argv[3]);
	*every = atof(argv[4]);
	*secs = atof(argv[5]);
	server.sin_family = AF_INET;
	server.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &server.sin_addr) != 1 || !*n ||
	    *n > MAX_CONNS || *every <= 0 || *secs <= 0)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	static struct conn c[MAX_CONNS];
	struct pollfd pfd[MAX_CONNS];
	double every, secs, end, round;
	unsigned int n;
	char buf[4096];

	if (parse(argc, argv, &n, &every, &secs)) {
		fprintf(stderr, "usage: slowloris ADDR:PORT A.B.C.D-E CONNS EVERY SECONDS\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	end = now() + secs;
	round = 0;
	for (unsigned int i = 0; i < n; i++)
		c[i].fd = -1;
	while (now() < end) {
		bool top_up = now() >= round;

		if (top_up)
			round = now() + every;
		for (unsigned int i = 0; i < n; i++) {
			if (c[i].fd < 0 && top_up)
				open_one(&c[i], i);
			pfd[i] = (struct pollfd){ .fd = c[i].fd, .events = POLLIN };
		}
		poll(pfd, n, 100);
		for (unsigned int i = 0; i < n; i++) {
			if (c[i].fd < 0)
				continue;
			/* Anything readable is the server giving up on us. */
			if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
			    recv(c[i].fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0) {
				lost(&c[i]);
				continue;
			}
			if (now() - c[i].last_line >= every) {
				if (send(c[i].fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL) < 0)
					lost(&c[i]);
				else
					c[i].last_line = now();
			}
		}
	}
	for (unsigned int i = 0; i < n; i++) {
		if (c[i].fd >= 0 && now() - c[i].opened > longest)
			longest = now() - c[i].opened;
		if (c[i].fd >= 0)
			close(c[i].fd);
	}
	printf("opened %lu closed-by-server %lu longest-life %.1f\n", opened, closed,
	       longest);
	return 0;
}
