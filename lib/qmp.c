// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A small QMP client, bounded in time.
 *
 * QMP is a stream of JSON objects over a Unix socket: a greeting
 * {"QMP": ...}, then one reply per command ({"return": ...} or
 * {"error": ...}), with asynchronous {"event": ...} objects in between.
 * Replies are matched to commands by an "id" we choose, so that a late
 * reply to a command given up on is never taken for the next one. Objects
 * are cut from the stream by json-c's incremental tokener rather than by
 * lines, because a monitor started with pretty=on spreads them over many.
 *
 * QEMU serves one client per monitor socket; a second connection is
 * queued in the socket's backlog and greeted only once the first client
 * leaves, so it would only wait for its deadline. The kernel lists the
 * connection QEMU accepted in /proc/net/unix (connected, with the
 * socket's path, unlike one still queued), so a busy monitor is told
 * before connecting, at once, rather than taken for a hung one.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "qmp.h"

/* A reply bigger than this is not QMP talking (query-stats of 1000 vCPUs
 * is about 1.5 MiB). */
#define QMP_MAX_MSG (64u << 20)
#define QMP_CHUNK 65536u

struct ks_qmp {
	int fd;
	int cancel_fd;		/* readable: give up at once, or -1 */
	struct json_tokener *tok;
	char *buf;		/* bytes read and not yet given to the tokener */
	size_t len;
	size_t msg_bytes;	/* bytes of the object being parsed */
	unsigned int next_id;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ks_qmp_deadline(unsigned int ms)
{
	return now_ns() + (uint64_t)ms * 1000000ull;
}

static void set_err(char *err, size_t errsz, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errsz)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

/* Wait for @events on the socket until @deadline; 0, -ETIMEDOUT,
 * -ECANCELED (the cancel fd turned readable) or -errno. */
static int wait_fd(const struct ks_qmp *q, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = q->fd, .events = events },
			{ .fd = q->cancel_fd, .events = POLLIN },
		};
		uint64_t now = now_ns();
		int ms, n;

		if (now >= deadline)
			return -ETIMEDOUT;
		/* Round up: a 0 ms poll would spin until the deadline. */
		ms = (int)((deadline - now + 999999) / 1000000);
		n = poll(p, q->cancel_fd >= 0 ? 2 : 1, ms);
		if (n > 0 && p[1].revents)
			return -ECANCELED;
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* Where @path is for us: a path on @pid's command line is relative to
 * its working directory and lives in its mount namespace. */
static void resolve(const char *path, pid_t pid, char *out, size_t len)
{
	if (pid <= 0)
		snprintf(out, len, "%s", path);
	else if (path[0] == '/')
		snprintf(out, len, "/proc/%d/root%s", (int)pid, path);
	else
		snprintf(out, len, "/proc/%d/cwd/%s", (int)pid, path);
}

/* An O_PATH fd on the socket file; -errno when it is not one. */
static int open_sock_path(const char *path, pid_t pid, struct stat *st)
{
	char full[PATH_MAX + 64];
	int fd;

	resolve(path, pid, full, sizeof(full));
	fd = open(full, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, st)) {
		int err = -errno;

		close(fd);
		return err;
	}
	if (!S_ISSOCK(st->st_mode)) {
		close(fd);
		return -ENOTSOCK;
	}
	return fd;
}

/* Is the /proc/net/unix entry's path the socket file @st? */
static bool same_file(const char *entry, pid_t pid, const struct stat *st)
{
	char full[PATH_MAX + 64];
	struct stat es;

	if (entry[0] != '/' && pid <= 0)
		return false;	/* relative to a directory we do not know */
	resolve(entry, entry[0] == '/' ? 0 : pid, full, sizeof(full));
	return !stat(full, &es) && es.st_dev == st->st_dev &&
	       es.st_ino == st->st_ino;
}

#define SS_CONNECTED_STATE 3u
#define SO_ACCEPTCON_FLAG 0x10000u

static bool busy_stat(const struct stat *st, pid_t pid)
{
	char line[PATH_MAX + 128];
	bool busy = false;
	FILE *f = fopen("/proc/net/unix", "re");

	if (!f)
		return false;
	while (!busy && fgets(line, sizeof(line), f)) {
		unsigned int flags, type, state;
		unsigned long inode;
		int pos = 0;
		char *path;

		if (sscanf(line, "%*s %*x %*x %x %x %x %lu %n", &flags, &type,
			   &state, &inode, &pos) != 4 || !pos)
			continue;
		path = line + pos;
		path[strcspn(path, "\n")] = 0;
		/* A connection QEMU accepted: connected, has an inode and the
		 * listener's path. One still in the backlog has no inode. */
		if (state != SS_CONNECTED_STATE || (flags & SO_ACCEPTCON_FLAG) ||
		    !inode || !*path || *path == '@')
			continue;
		busy = same_file(path, pid, st);
	}
	fclose(f);
	return busy;
}

/* Busy now, and still after a short grace: a client that just left is
 * gone once QEMU read its EOF, a matter of milliseconds. */
static bool wait_free(const struct stat *st, pid_t pid, uint64_t deadline)
{
	for (int i = 0; i < 5; i++) {
		if (!busy_stat(st, pid))
			return false;
		if (now_ns() + 20000000ull >= deadline)
			break;
		usleep(20000);
	}
	return true;
}

static int send_all(struct ks_qmp *q, const char *s, size_t len,
		    uint64_t deadline)
{
	while (len) {
		/* MSG_NOSIGNAL: a monitor that went away must not SIGPIPE the
		 * application. */
		ssize_t n = send(q->fd, s, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		int err;

		if (n > 0) {
			s += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return errno == EPIPE ? -ECONNRESET : -errno;
		err = wait_fd(q, POLLOUT, deadline);
		if (err)
			return err;
	}
	return 0;
}

/* Feed buffered bytes to the tokener; *out gets a whole object or NULL. */
static int parse_buffered(struct ks_qmp *q, struct json_object **out)
{
	enum json_tokener_error jerr;
	size_t used;

	*out = NULL;
	if (!q->len)
		return 0;
	*out = json_tokener_parse_ex(q->tok, q->buf, (int)q->len);
	used = json_tokener_get_parse_end(q->tok);
	if (used > q->len)
		used = q->len;
	memmove(q->buf, q->buf + used, q->len - used);
	q->len -= used;
	if (*out) {
		json_tokener_reset(q->tok);
		q->msg_bytes = 0;
		return 0;
	}
	jerr = json_tokener_get_error(q->tok);
	if (jerr != json_tokener_continue)
		return -EPROTO;
	q->msg_bytes += used;
	return q->msg_bytes > QMP_MAX_MSG ? -EMSGSIZE : 0;
}

/* The next JSON object of the stream. */
static int read_msg(struct ks_qmp *q, uint64_t deadline,
		    struct json_object **out)
{
	for (;;) {
		ssize_t n;
		int err = parse_buffered(q, out);

		if (err || *out)
			return err;
		n = recv(q->fd, q->buf, QMP_CHUNK, MSG_DONTWAIT);
		if (n > 0) {
			q->len = (size_t)n;
			continue;
		}
		if (!n)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		err = wait_fd(q, POLLIN, deadline);
		if (err)
			return err;
	}
}

static const char *error_desc(struct json_object *msg)
{
	struct json_object *e, *d;

	if (json_object_object_get_ex(msg, "error", &e) &&
	    json_object_object_get_ex(e, "desc", &d))
		return json_object_get_string(d);
	return "error without a description";
}

/* Wait for the reply to command @id, skipping events and stale replies. */
static int await_reply(struct ks_qmp *q, unsigned int id, uint64_t deadline,
		       struct json_object **ret, char *err, size_t errsz)
{
	for (;;) {
		struct json_object *msg = NULL, *v;
		int e = read_msg(q, deadline, &msg);

		if (e)
			return e;
		if (!json_object_is_type(msg, json_type_object) ||
		    !json_object_object_get_ex(msg, "id", &v) ||
		    (unsigned int)json_object_get_int64(v) != id) {
			json_object_put(msg);	/* an event, or a late reply */
			continue;
		}
		if (json_object_object_get_ex(msg, "return", &v)) {
			if (ret)
				*ret = json_object_get(v);
			json_object_put(msg);
			return 0;
		}
		set_err(err, errsz, "%s", error_desc(msg));
		json_object_put(msg);
		return -EREMOTEIO;
	}
}

int ks_qmp_call(struct ks_qmp *q, const char *cmd, struct json_object *args,
		uint64_t deadline_ns, struct json_object **ret, char *err,
		size_t errsz)
{
	struct json_object *req = json_object_new_object();
	unsigned int id = ++q->next_id;
	const char *s;
	int e;

	if (ret)
		*ret = NULL;
	if (!req)
		return -ENOMEM;
	json_object_object_add(req, "execute", json_object_new_string(cmd));
	if (args)
		json_object_object_add(req, "arguments", json_object_get(args));
	json_object_object_add(req, "id", json_object_new_int64(id));
	s = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	e = send_all(q, s, strlen(s), deadline_ns);
	if (!e)
		e = send_all(q, "\n", 1, deadline_ns);
	json_object_put(req);
	if (!e)
		e = await_reply(q, id, deadline_ns, ret, err, errsz);
	if (e && e != -EREMOTEIO)
		set_err(err, errsz, "%s: %s", cmd,
			e == -ETIMEDOUT ? "no reply in time (hung monitor?)"
					: strerror(-e));
	return e;
}

static int greeting(struct ks_qmp *q, uint64_t deadline)
{
	struct json_object *msg = NULL;
	int err = read_msg(q, deadline, &msg);

	if (err)
		return err;
	err = json_object_object_get_ex(msg, "QMP", NULL) ? 0 : -EPROTO;
	json_object_put(msg);
	return err;
}

static struct ks_qmp *qmp_new(void)
{
	struct ks_qmp *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->fd = -1;
	q->cancel_fd = -1;
	q->buf = malloc(QMP_CHUNK);
	q->tok = json_tokener_new();
	if (!q->buf || !q->tok) {
		ks_qmp_close(q);
		return NULL;
	}
	return q;
}

static int sock_connect(struct ks_qmp *q, int pathfd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	/* Through /proc/self/fd: works for paths longer than sun_path. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", pathfd);
	q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (q->fd < 0)
		return -errno;
	if (connect(q->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return errno == EAGAIN ? -EBUSY : -errno;
	return 0;
}

static int handshake(struct ks_qmp *q, const char *path, uint64_t deadline,
		     char *err, size_t errsz)
{
	char why[200] = "";
	int e = greeting(q, deadline);

	if (e) {
		set_err(err, errsz, "QMP socket %s: %s", path,
			e == -ETIMEDOUT ? "no greeting in time (hung monitor?)" :
			e == -EPROTO ? "not a QMP monitor" : strerror(-e));
		return e;
	}
	e = ks_qmp_call(q, "qmp_capabilities", NULL, deadline, NULL, why,
			sizeof(why));
	if (e)
		set_err(err, errsz, "QMP socket %s: %s", path, why);
	return e;
}

int ks_qmp_connect(struct ks_qmp **out, const char *path, pid_t pid,
		   int cancel_fd, uint64_t deadline_ns, char *err, size_t errsz)
{
	struct ks_qmp *q;
	struct stat st;
	int pathfd, e;

	*out = NULL;
	pathfd = open_sock_path(path, pid, &st);
	if (pathfd < 0) {
		set_err(err, errsz, "QMP socket %s: %s", path, strerror(-pathfd));
		return pathfd;
	}
	q = qmp_new();
	e = -ENOMEM;
	if (!q)
		goto out;
	q->cancel_fd = cancel_fd;
	/* Checked first: queued behind another client we would only wait
	 * for the deadline. */
	e = wait_free(&st, pid, deadline_ns) ? -EBUSY : sock_connect(q, pathfd);
	if (e == -EBUSY)
		set_err(err, errsz, "QMP socket %s is busy: another client "
			"(libvirt?) holds the monitor", path);
	else if (e)
		set_err(err, errsz, "QMP socket %s: %s", path, strerror(-e));
	else
		e = handshake(q, path, deadline_ns, err, errsz);
out:
	close(pathfd);
	if (e) {
		ks_qmp_close(q);
		return e;
	}
	*out = q;
	return 0;
}

void ks_qmp_close(struct ks_qmp *q)
{
	if (!q)
		return;
	if (q->fd >= 0)
		close(q->fd);
	if (q->tok)
		json_tokener_free(q->tok);
	free(q->buf);
	free(q);
}
