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
 * leaves, so it would only wait for its deadline. A QEMU that is free
 * greets at once, so a connection is tried first; only when no greeting
 * comes quickly do we look why. The kernel tells (sock_diag) whether
 * QEMU accepted our connection: if it did, the monitor is slow or hung.
 * If it is still queued, /proc/net/unix lists the connection QEMU
 * accepted instead (connected, with the socket's path, unlike one still
 * queued): another client holds the monitor, and it is reported busy
 * at once rather than taken for a hung one; unless that client has
 * closed its end (sock_diag: its peer is gone), which leaves QEMU's end
 * listed until its main loop gets to it: QEMU is slow then, not held, and
 * is waited for up to the deadline. That file lists every Unix
 * socket of the host, so it is read only then, or before connecting
 * when the caller expects a busy monitor.
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
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "qmp.h"

/* A reply bigger than this is not QMP talking (query-stats of 1000 vCPUs
 * is about 1.5 MiB). */
#define QMP_MAX_MSG (64u << 20)
#define QMP_CHUNK 65536u
/* json-c builds about 50 bytes for each byte of "[[],[],...]", and a
 * byte budget does not see it: what a message will cost json-c is
 * estimated from its raw bytes before they are handed over, and a
 * message past its budget is refused. Measured with json-c 0.16 on
 * x86-64, in glibc's chunks: an empty object takes 790 bytes, an array
 * 150, a number 72, a string 88 and its bytes, a double 104 and its
 * text; each key of an object past its tenth up to 182 for json-c's
 * table (old and new while it grows), 128 beyond its string's; once
 * per message, three times its longest string or number (json-c's
 * token buffer, old and new while it doubles), 16 bytes per element of
 * its widest array (old and new list while json-c grows it), 272 per
 * level of nesting (an open array's list of 32) and 480 for json-c's
 * own (a locale, each call). fuzz/fuzz_qmp_cost.c holds the
 * estimate to what json-c takes. No more than QMP_MAX_COST whatever the
 * caller asks: a real query-stats of 1024 x86 vCPUs takes 55 MB (60.6
 * MiB estimated). */
#define QMP_COST_OBJECT 800u
#define QMP_COST_ARRAY 160u
#define QMP_COST_SCALAR 80u
#define QMP_COST_STRING 88u
#define QMP_COST_DOUBLE 32u	/* beyond a scalar's */
#define QMP_COST_KEY 128u	/* each past the first QMP_SMALL_OBJECT */
#define QMP_SMALL_OBJECT 10u
#define QMP_COST_SLOT 16u	/* each element of the widest array */
#define QMP_COST_OPEN 272u	/* each level of nesting */
#define QMP_COST_PARSE 512u	/* json-c's own, each time it is called */
#define QMP_MAX_COST (64u << 20)
#define QMP_DEFAULT_COST (8u << 20)
/* QMP nests 6 deep (query-stats: return, results, result, stats, stat,
 * histogram); json-c's default is 32. */
#define QMP_MAX_DEPTH 16
/* A free monitor greets within a millisecond or two; past this we look
 * why it does not. */
#define QMP_QUICK_NS (20 * 1000000ull)
/* How long another client may hold the monitor before it is busy: a
 * client that just left (one of our own polls, another kvmstats) is gone
 * once QEMU read its EOF, a matter of milliseconds. */
#define QMP_GRACE_STEP_NS (20 * 1000000ull)
#define QMP_GRACE_STEPS 5
/* Cancelled with commands under way, how long their answers are awaited
 * (a poll's answers take a few milliseconds). */
#define QMP_DRAIN_NS (50 * 1000000ull)

struct qmp_scan {
	size_t cost;		/* of the message under way */
	size_t most;		/* of the messages before it */
	size_t token;		/* bytes of the string or word under way */
	size_t longest;		/* of the message's strings and words */
	size_t widest;		/* of the message's arrays */
	int depth, deepest;
	uint32_t arrays;	/* bit d: the container at depth d is one */
	uint32_t items[QMP_MAX_DEPTH + 1];	/* keys or elements, per depth */
	char quote;		/* that ends the string under way */
	bool in_str, esc, in_word, is_num, is_double;
};

struct ks_qmp {
	int fd;
	int cancel_fd;		/* readable: give up at once, or -1 */
	struct json_tokener *tok;
	char *buf;		/* bytes read and not yet given to the tokener */
	size_t len;
	size_t msg_bytes;	/* bytes of the object being parsed */
	int64_t next_id;	/* from a random base: see qmp_new() */
	bool caps_pending;	/* qmp_capabilities goes with the first batch */
	char version[32];	/* from the greeting */
	size_t max_msg;		/* bytes one message may take */
	size_t max_cost;	/* what json-c may build for one, estimated */
	struct qmp_scan scan;	/* of the bytes the tokener is yet to see */
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

/* Wait for @events on @fd (-1: none, a nap) until @deadline; 0,
 * -ETIMEDOUT, -ECANCELED (the cancel fd turned readable) or -errno. */
static int wait_fd(const struct ks_qmp *q, int fd, short events,
		   uint64_t deadline)
{
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = fd, .events = events },
			{ .fd = q->cancel_fd, .events = POLLIN },
		};
		uint64_t now = now_ns();
		int ms, n;

		if (now >= deadline)
			return -ETIMEDOUT;
		/* Round up: a 0 ms poll would spin until the deadline. */
		ms = (int)((deadline - now + 999999) / 1000000);
		n = poll(p, 2, ms);
		if (n > 0 && p[1].revents)
			return -ECANCELED;
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
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

/* A connection QEMU accepted whose client has closed its end: QEMU has
 * not read the EOF yet, because its main loop is busy (a device_add, a
 * long command on another monitor). Nobody holds the monitor then; it is
 * slow, and waited for like any slow monitor. sock_diag names the peer of
 * a live client; one that closed has no inode left. */
static bool client_left(unsigned long ino)
{
	struct ks_unix_diag d;

	return ino <= UINT32_MAX && !ks_unix_diag((uint32_t)ino, &d) &&
	       d.has_peer && !d.peer;
}

/* QEMU serves one client at a time: past a few finished connections
 * left open, the VMM is making them (sock_diag is asked for each), and
 * the monitor counts as busy. */
#define QMP_MAX_LEFT 8

static bool busy_stat(const struct stat *st, pid_t pid)
{
	char line[PATH_MAX + 128];
	bool busy = false;
	int left = 0;
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
		if (!same_file(path, pid, st))
			continue;
		busy = left++ >= QMP_MAX_LEFT || !client_left(inode);
	}
	fclose(f);
	return busy;
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
		err = wait_fd(q, q->fd, POLLOUT, deadline);
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
	return q->msg_bytes > q->max_msg ? -EMSGSIZE : 0;
}

static bool json_blank(char ch)
{
	return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t' ||
	       ch == ',' || ch == ':';
}

/* One byte of a string's or a number's text: json-c copies it into its
 * token buffer, which grows by doubling (the old and the new buffer at
 * once: three times the longest token), and strings and doubles keep a
 * copy. */
static void scan_text(struct qmp_scan *c, bool kept)
{
	c->cost += kept;
	if (++c->token > c->longest) {
		c->longest = c->token;
		c->cost += 3;
	}
}

/* A word (number, true, false, null) begins or goes on with @ch. A
 * double also keeps its text, which json-c prints it back from. */
static void scan_word(struct qmp_scan *c, char ch)
{
	if (!c->in_word) {
		c->cost += QMP_COST_SCALAR;
		c->token = 0;
		c->is_num = ch == '-' || (ch >= '0' && ch <= '9');
		c->is_double = false;
	} else if (c->is_num && !c->is_double &&
		   (ch == '.' || ch == 'e' || ch == 'E')) {
		c->is_double = true;
		c->cost += QMP_COST_DOUBLE + c->token;
	}
	scan_text(c, c->is_double);
}

/* Is the container at c->depth an array (else an object, or none)? */
static bool in_array(const struct qmp_scan *c)
{
	return c->arrays >> c->depth & 1;
}

/* A value begins in the container at c->depth. An array's elements are
 * slots of json-c's list, which it doubles: the widest list of a message
 * has its old and its new copy at once. */
static void scan_value(struct qmp_scan *c)
{
	if (!in_array(c))
		return;
	if (++c->items[c->depth] > c->widest) {
		c->widest = c->items[c->depth];
		c->cost += QMP_COST_SLOT;
	}
}

/* A key's ':'. json-c's table of a big object's keys has up to three
 * entries per key; a small one's is the object's own. */
static void scan_key(struct qmp_scan *c)
{
	if (!in_array(c) && ++c->items[c->depth] > QMP_SMALL_OBJECT)
		c->cost += QMP_COST_KEY;
}

/* A container opens. json-c gives an array a list of 32 slots, and
 * shrinks it only once it closes: while open, one per depth. */
static int scan_open(struct qmp_scan *c, char ch)
{
	c->cost += ch == '{' ? QMP_COST_OBJECT : QMP_COST_ARRAY;
	if (++c->depth > QMP_MAX_DEPTH)
		return -EMSGSIZE;
	if (c->depth > c->deepest) {
		c->deepest = c->depth;
		c->cost += QMP_COST_OPEN;
	}
	c->items[c->depth] = 0;
	if (ch == '[')
		c->arrays |= 1u << c->depth;
	else
		c->arrays &= ~(1u << c->depth);
	return 0;
}

/* A byte outside strings that is not blank: a message, a value, or the
 * end of a container begins, or a word goes on. */
static int scan_token(struct qmp_scan *c, char ch)
{
	bool closing = ch == '}' || ch == ']';

	if (!c->depth && !c->in_word) {
		/* A message begins: its own budget. */
		c->most = c->cost > c->most ? c->cost : c->most;
		c->cost = QMP_COST_PARSE;
		c->longest = 0;
		c->widest = 0;
		c->deepest = 0;
	}
	if (!c->in_word && !closing)
		scan_value(c);
	if (ch != '"' && ch != '\'' && ch != '{' && ch != '[' && !closing) {
		scan_word(c, ch);
		c->in_word = true;
		return 0;
	}
	c->in_word = false;
	if (closing) {
		c->depth -= c->depth > 0;
	} else if (ch == '"' || ch == '\'') {
		/* json-c takes 'keys' even when strict. */
		c->in_str = true;
		c->quote = ch;
		c->token = 0;
		c->cost += QMP_COST_STRING;
	} else {
		return scan_open(c, ch);
	}
	return 0;
}

/* Scan @n bytes before the tokener sees them: the message under way may
 * cost json-c at most @max_cost (estimated per element, strings and
 * numbers by their length too) and nest QMP_MAX_DEPTH deep. Linear, no
 * allocation: a hostile reply is refused before it is built. */
static int prescan(struct qmp_scan *c, size_t max_cost, const char *s,
		   size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		int err = 0;

		if (c->in_str) {
			scan_text(c, true);
			if (c->esc)
				c->esc = false;
			else if (ch == '\\')
				c->esc = true;
			else if (ch == c->quote)
				c->in_str = false;
		} else if (json_blank(ch)) {
			c->in_word = false;
			if (ch == ':')
				scan_key(c);
		} else {
			err = scan_token(c, ch);
		}
		if (err || c->cost > max_cost)
			return -EMSGSIZE;
	}
	return 0;
}

struct json_tokener *ks_qmp_tokener(void)
{
	struct json_tokener *tok = json_tokener_new_ex(QMP_MAX_DEPTH);

	/* Strict: json-c's own leniencies (comments, 'strings', trailing
	 * commas) would hide from prescan() what it builds: a quote in a
	 * comment would make it count the rest as a string, a byte each.
	 * Trailing characters are the stream's next message. */
	if (tok)
		json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
					    JSON_TOKENER_ALLOW_TRAILING_CHARS);
	return tok;
}

int ks_qmp_estimate(const char *s, size_t n, size_t max_cost, size_t *cost)
{
	struct qmp_scan c = { .cost = QMP_COST_PARSE };
	int err = prescan(&c, max_cost, s, n);

	*cost = c.cost > c.most ? c.cost : c.most;
	return err;
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
			err = prescan(&q->scan, q->max_cost, q->buf, q->len);
			if (err)
				return err;
			continue;
		}
		if (!n)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		err = wait_fd(q, q->fd, POLLIN, deadline);
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
static int await_reply(struct ks_qmp *q, int64_t id, uint64_t deadline,
		       struct json_object **ret, char *err, size_t errsz)
{
	for (;;) {
		struct json_object *msg = NULL, *v;
		int e = read_msg(q, deadline, &msg);

		if (e)
			return e;
		if (!json_object_is_type(msg, json_type_object) ||
		    !json_object_object_get_ex(msg, "id", &v) ||
		    !json_object_is_type(v, json_type_int) ||
		    json_object_get_int64(v) != id) {
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

static int send_cmd(struct ks_qmp *q, const struct ks_qmp_cmd *c,
		    int64_t id, uint64_t deadline)
{
	struct json_object *req = json_object_new_object();
	const char *s;
	int e;

	if (!req)
		return -ENOMEM;
	json_object_object_add(req, "execute", json_object_new_string(c->cmd));
	if (c->args)
		json_object_object_add(req, "arguments", json_object_get(c->args));
	json_object_object_add(req, "id", json_object_new_int64(id));
	s = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	e = s ? send_all(q, s, strlen(s), deadline) : -ENOMEM;
	if (!e)
		e = send_all(q, "\n", 1, deadline);
	json_object_put(req);
	return e;
}

/* Cancelled while the commands @from to @last are under way: QEMU runs
 * them anyway, and an answer ready after we left could go to the next
 * client, the operator's tool. Take the answers, for a short while. */
static void drain(struct ks_qmp *q, int64_t from, int64_t last,
		  uint64_t deadline)
{
	int cancel_fd = q->cancel_fd;

	deadline = min_u64(deadline, now_ns() + QMP_DRAIN_NS);
	q->cancel_fd = -1;
	for (int64_t id = from; id <= last; id++) {
		int e = await_reply(q, id, deadline, NULL, NULL, 0);

		if (e && e != -EREMOTEIO)
			break;
	}
	q->cancel_fd = cancel_fd;
}

int ks_qmp_batch(struct ks_qmp *q, struct ks_qmp_cmd *cmds, size_t n,
		 uint64_t deadline_ns, char *err, size_t errsz)
{
	const struct ks_qmp_cmd caps = { .cmd = "qmp_capabilities" };
	int64_t caps_id = 0, first, id = 0;
	const char *what = caps.cmd;
	size_t i;
	int e = 0;

	for (i = 0; i < n; i++)
		cmds[i].ret = NULL;
	/* All sent in one go: QEMU runs them in order. */
	if (q->caps_pending) {
		caps_id = ++q->next_id;
		e = send_cmd(q, &caps, caps_id, deadline_ns);
		q->caps_pending = false;
	}
	first = q->next_id + 1;
	for (i = 0; i < n && !e; i++) {
		what = cmds[i].cmd;
		e = send_cmd(q, &cmds[i], ++q->next_id, deadline_ns);
	}
	if (e)
		goto out;
	if (caps_id) {
		id = caps_id;
		what = caps.cmd;
		e = await_reply(q, id, deadline_ns, NULL, err, errsz);
	}
	for (i = 0; i < n && !e; i++) {
		id = first + (int64_t)i;
		what = cmds[i].cmd;
		e = await_reply(q, id, deadline_ns, &cmds[i].ret, err, errsz);
	}
	if (e == -ECANCELED)
		drain(q, id, q->next_id, deadline_ns);
out:
	if (e && e != -EREMOTEIO)
		set_err(err, errsz, "%s: %s", what,
			e == -ETIMEDOUT ? "no reply in time (hung monitor?)" :
			e == -EPROTO	? "an answer that is not JSON (refused)" :
					  strerror(-e));
	return e;
}

int ks_qmp_call(struct ks_qmp *q, const char *cmd, struct json_object *args,
		uint64_t deadline_ns, struct json_object **ret, char *err,
		size_t errsz)
{
	struct ks_qmp_cmd c = { .cmd = cmd, .args = args };
	int e = ks_qmp_batch(q, &c, 1, deadline_ns, err, errsz);

	if (ret)
		*ret = c.ret;
	else
		json_object_put(c.ret);
	return e;
}

/* {"QMP": {"version": {"qemu": {"major": 10, "minor": 0, "micro": 2}}}} */
static void take_version(struct ks_qmp *q, struct json_object *msg)
{
	struct json_object *v = msg;
	static const char *const path[] = { "QMP", "version", "qemu" };
	int n[3] = { -1, -1, -1 };
	static const char *const keys[] = { "major", "minor", "micro" };

	for (size_t i = 0; i < 3 && v; i++)
		if (!json_object_object_get_ex(v, path[i], &v))
			v = NULL;
	for (size_t i = 0; i < 3 && v; i++) {
		struct json_object *x;

		if (json_object_object_get_ex(v, keys[i], &x) &&
		    json_object_is_type(x, json_type_int) &&
		    json_object_get_int64(x) <= 9999)
			n[i] = json_object_get_int(x);
	}
	q->version[0] = 0;
	if (n[0] >= 0 && n[1] >= 0 && n[2] >= 0)
		snprintf(q->version, sizeof(q->version), "%d.%d.%d", n[0] % 10000,
			 n[1] % 10000, n[2] % 10000);
}

const char *ks_qmp_version(const struct ks_qmp *q)
{
	return q->version;
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

void ks_qmp_set_max_msg(struct ks_qmp *q, size_t bytes)
{
	q->max_msg = min_size(bytes, QMP_MAX_MSG);
	/* Sixteen times the bytes: what a reply of strings and numbers
	 * takes, not one of empty arrays. */
	q->max_cost = min_size(q->max_msg * 16, QMP_MAX_COST);
}

void ks_qmp_set_max_cost(struct ks_qmp *q, size_t bytes)
{
	q->max_cost = min_size(bytes, QMP_MAX_COST);
}

/* The greeting. An answer or event before it is skipped: QEMU sends the
 * answer to a command still running when its client left to the next
 * client. */
static int greeting(struct ks_qmp *q, uint64_t deadline)
{
	for (;;) {
		struct json_object *msg = NULL;
		int err = read_msg(q, deadline, &msg);
		bool stale;

		if (err)
			return err;
		err = json_object_object_get_ex(msg, "QMP", NULL) ? 0 : -EPROTO;
		if (!err)
			take_version(q, msg);
		stale = json_object_object_get_ex(msg, "return", NULL) ||
			json_object_object_get_ex(msg, "error", NULL) ||
			json_object_object_get_ex(msg, "event", NULL);
		json_object_put(msg);
		if (!stale)
			return err;
	}
}

static struct ks_qmp *qmp_new(void)
{
	struct ks_qmp *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->fd = -1;
	q->cancel_fd = -1;
	ks_qmp_set_max_msg(q, QMP_MAX_MSG);
	/* The greeting and qmp_capabilities are small; callers set what
	 * their commands' answers may take. */
	q->max_cost = QMP_DEFAULT_COST;
	/* Ids nobody else uses: an answer meant for another client (one
	 * that left while its command ran) is never taken for ours. */
	if (getrandom(&q->next_id, sizeof(q->next_id), GRND_NONBLOCK) !=
	    sizeof(q->next_id))
		q->next_id = (int64_t)now_ns();
	/* Positive, with room to count up. */
	q->next_id = (int64_t)((uint64_t)q->next_id >> 2);
	q->buf = malloc(QMP_CHUNK);
	q->tok = ks_qmp_tokener();
	if (!q->buf || !q->tok) {
		ks_qmp_close(q);
		return NULL;
	}
	return q;
}

/* Free, or busy even after a short grace (a client that just left). */
static int wait_free(const struct ks_qmp *q, const struct stat *st, pid_t pid,
		     uint64_t deadline)
{
	for (int i = 0; i < QMP_GRACE_STEPS; i++) {
		int e;

		if (!busy_stat(st, pid))
			return 0;
		e = wait_fd(q, -1, 0, min_u64(now_ns() + QMP_GRACE_STEP_NS,
					      deadline));
		if (e != -ETIMEDOUT)
			return e;
		if (now_ns() >= deadline)
			break;
	}
	return -EBUSY;
}

/* Is the other end of our connection accepted, or still queued in the
 * listener's backlog? 1 or 0; -errno when the kernel cannot tell (no
 * sock_diag). The peer of a queued connection has no inode until
 * accept() gives it one. */
static int peer_accepted(int fd)
{
	struct ks_unix_diag d;
	struct stat st;
	int e;

	if (fstat(fd, &st))
		return -errno;
	e = ks_unix_diag((uint32_t)st.st_ino, &d);
	if (e)
		return e;
	return d.has_peer ? d.peer != 0 : -ENOENT;
}

static int sock_connect(struct ks_qmp *q, int pathfd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (q->fd >= 0)
		close(q->fd);
	/* Through /proc/self/fd: works for paths longer than sun_path. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", pathfd);
	q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (q->fd < 0)
		return -errno;
	if (connect(q->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return -errno;
	return 0;
}

/* Connect; a full backlog (EAGAIN) is tried again until @deadline. QEMU
 * takes no connection while it serves a client, so a full backlog is a
 * busy monitor, or one that accepts nothing: -EAGAIN then. */
static int connect_sock(struct ks_qmp *q, int pathfd, const struct stat *st,
			pid_t pid, uint64_t deadline)
{
	bool looked = false;

	for (;;) {
		int e = sock_connect(q, pathfd);

		if (e != -EAGAIN)
			return e;
		if (!looked && busy_stat(st, pid))
			return -EBUSY;
		looked = true;
		if (now_ns() >= deadline)
			return -EAGAIN;
		e = wait_fd(q, -1, 0, min_u64(now_ns() + QMP_GRACE_STEP_NS,
					      deadline));
		if (e != -ETIMEDOUT)
			return e;
	}
}

/* The greeting; when it is slow to come, why: a queued connection behind
 * another client is -EBUSY, at once rather than at the deadline. (The
 * connection we then close stays queued until that client leaves; QEMU
 * greets it, reads its end and drops it: nothing stays behind.) */
static int await_greeting(struct ks_qmp *q, const struct stat *st, pid_t pid,
			  unsigned int flags, uint64_t deadline)
{
	int e = greeting(q, min_u64(now_ns() + QMP_QUICK_NS, deadline));
	int acc;

	if (e != -ETIMEDOUT || now_ns() >= deadline)
		return e;
	acc = peer_accepted(q->fd);
	/* Cannot tell: the monitor was free when we looked just before
	 * connecting, so the connection it serves is most likely ours. */
	if (acc < 0)
		acc = flags & KS_QMP_CHECK_FIRST ? 1 : 0;
	/* Accepted: QEMU itself is slow, or hung. */
	if (acc)
		return greeting(q, deadline);
	for (int i = 0; i < QMP_GRACE_STEPS; i++) {
		/* Queued, and nobody served: QEMU accepts nothing. */
		if (!busy_stat(st, pid))
			return greeting(q, deadline);
		e = greeting(q, min_u64(now_ns() + QMP_GRACE_STEP_NS,
					deadline));
		if (e != -ETIMEDOUT || now_ns() >= deadline)
			return e;
	}
	return -EBUSY;
}

static void connect_err(int e, const char *path, char *err, size_t errsz)
{
	const char *why = strerror(-e);

	if (e == -EBUSY) {
		set_err(err, errsz, "QMP socket %s is busy: another client "
			"(libvirt?) holds the monitor", path);
		return;
	}
	if (e == -ETIMEDOUT)
		why = "no greeting in time (hung monitor?)";
	else if (e == -EAGAIN)
		why = "accepts no connection (hung monitor?)";
	else if (e == -EPROTO)
		why = "not a QMP monitor";
	set_err(err, errsz, "QMP socket %s: %s", path, why);
}

int ks_qmp_connect_fd(struct ks_qmp **out, int pathfd, const struct stat *st,
		      const char *path, pid_t pid, int cancel_fd,
		      unsigned int flags, uint64_t deadline_ns, char *err,
		      size_t errsz)
{
	char why[200] = "";
	struct ks_qmp *q;
	int e;

	*out = NULL;
	q = qmp_new();
	if (!q)
		return -ENOMEM;
	q->cancel_fd = cancel_fd;
	e = 0;
	if (flags & KS_QMP_CHECK_FIRST)
		e = wait_free(q, st, pid, deadline_ns);
	if (!e)
		e = connect_sock(q, pathfd, st, pid, deadline_ns);
	if (!e)
		e = await_greeting(q, st, pid, flags, deadline_ns);
	if (e) {
		connect_err(e, path, err, errsz);
		if (e == -EAGAIN)
			e = -ETIMEDOUT;
		goto out;
	}
	if (flags & KS_QMP_LAZY_CAPS) {
		q->caps_pending = true;
		goto out;
	}
	e = ks_qmp_call(q, "qmp_capabilities", NULL, deadline_ns, NULL, why,
			sizeof(why));
	if (e)
		set_err(err, errsz, "QMP socket %s: %s", path, why);
out:
	if (e) {
		ks_qmp_close(q);
		return e;
	}
	*out = q;
	return 0;
}

int ks_qmp_connect(struct ks_qmp **out, const char *path, pid_t pid,
		   int cancel_fd, unsigned int flags, uint64_t deadline_ns,
		   char *err, size_t errsz)
{
	struct stat st;
	int pathfd, e;

	*out = NULL;
	pathfd = ks_qmp_sock_open(path, pid, &st, err, errsz);
	if (pathfd < 0)
		return pathfd;
	e = ks_qmp_connect_fd(out, pathfd, &st, path, pid, cancel_fd, flags,
			      deadline_ns, err, errsz);
	close(pathfd);
	return e;
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
