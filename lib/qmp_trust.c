// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Sockets a VMM names are used only if the VMM could use them itself.
 *
 * kvmstats runs as root beside VMMs that a guest may own, and a socket
 * path read from a VMM's command line is that VMM's word: connecting to it
 * as root on that word would make us its deputy (a VMM of uid 65534 naming
 * a root-only socket would have root talk to it, and print another
 * monitor's answers as its own). So a named socket is taken only when
 *
 *  - the VMM itself listens on it: the file is bound to a listening socket
 *    in the VMM's fd table (sock_diag gives each socket's file), or
 *  - the VMM's own credentials (fsuid, fsgid, groups, and capabilities
 *    when it lives in our user namespace, from /proc/PID/status) let it
 *    search every directory on the way, from its own root or working
 *    directory, and write to the socket, which is what connect(2) asks.
 *
 * The path is walked by hand, one component at a time with O_PATH fds,
 * symbolic links followed in the VMM's root, never ours. The fd the walk
 * ends on is what the caller connects through (/proc/self/fd/N): the file
 * that was checked is the file that is used, whatever is renamed after.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"
#include "qmp.h"

#define KS_MAX_LINKS 40		/* as the kernel's MAXSYMLINKS */
#define MAX_DEPTH 128		/* directories deep */
#define MAX_GROUPS 256
#define TCP_LISTEN_STATE 10	/* unix sockets reuse TCP's state numbers */
#define CAP_DAC_OVERRIDE_BIT 1
#define CAP_DAC_READ_SEARCH_BIT 2

struct creds {
	uid_t uid;		/* fsuid: what file access is checked with */
	gid_t gid;
	gid_t groups[MAX_GROUPS];
	int ngroups;
	bool dac_override, dac_read_search;
};

/* ---- sock_diag ------------------------------------------------------- */

int ks_unix_diag(uint32_t ino, struct ks_unix_diag *out)
{
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req req;
	} msg = {
		.nlh = { .nlmsg_len = sizeof(msg),
			 .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			 .nlmsg_flags = NLM_F_REQUEST },
		/* ~0: any cookie (INET_DIAG_NOCOOKIE). */
		.req = { .sdiag_family = AF_UNIX, .udiag_ino = ino,
			 .udiag_show = UDIAG_SHOW_PEER | UDIAG_SHOW_VFS,
			 .udiag_cookie = { ~0u, ~0u } },
	};
	union {
		struct nlmsghdr h;
		unsigned char b[1024];
	} buf;
	struct unix_diag_msg *m;
	struct rtattr *rta;
	ssize_t n;
	int len, nl, e = 0;

	memset(out, 0, sizeof(*out));
	nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -errno;
	/* The kernel answers within send(): nothing to wait for. */
	n = send(nl, &msg, sizeof(msg), 0);
	if (n == (ssize_t)sizeof(msg))
		n = recv(nl, &buf, sizeof(buf), MSG_DONTWAIT);
	else if (n >= 0)
		n = -1;		/* a short datagram: never; then nothing to parse */
	if (n < 0)
		e = errno > 0 ? -errno : -EIO;
	else if (!NLMSG_OK(&buf.h, (size_t)n) ||
		 buf.h.nlmsg_type != SOCK_DIAG_BY_FAMILY)
		e = -EPROTO;	/* NLMSG_ERROR: no such socket, no diag */
	close(nl);
	if (e)
		return e;
	m = NLMSG_DATA(&buf.h);
	out->state = m->udiag_state;
	len = (int)buf.h.nlmsg_len - NLMSG_LENGTH(sizeof(*m));
	for (rta = (struct rtattr *)((char *)m + NLMSG_ALIGN(sizeof(*m)));
	     RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
		if (rta->rta_type == UNIX_DIAG_PEER &&
		    RTA_PAYLOAD(rta) >= sizeof(uint32_t)) {
			out->peer = *(uint32_t *)RTA_DATA(rta);
			out->has_peer = true;
		} else if (rta->rta_type == UNIX_DIAG_VFS &&
			   RTA_PAYLOAD(rta) >= sizeof(struct unix_diag_vfs)) {
			const struct unix_diag_vfs *v = RTA_DATA(rta);

			out->vfs_ino = v->udiag_vfs_ino;
			out->vfs_dev = v->udiag_vfs_dev;
			out->has_vfs = true;
		}
	}
	return 0;
}

/* Is the file @st bound to a socket @pid listens on (one of its fds)? */
static bool held_by(pid_t pid, const struct stat *st)
{
	char path[64], link[64];
	struct dirent *de;
	bool held = false;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return false;
	while (!held && (de = readdir(dir))) {
		struct ks_unix_diag d;
		unsigned long ino;
		ssize_t len;

		len = readlinkat(dirfd(dir), de->d_name, link, sizeof(link) - 1);
		if (len < 0)
			continue;
		link[len] = 0;
		if (sscanf(link, "socket:[%lu]", &ino) != 1 || ino > UINT32_MAX)
			continue;
		if (ks_unix_diag((uint32_t)ino, &d) || !d.has_vfs ||
		    d.state != TCP_LISTEN_STATE)
			continue;
		/* The kernel's dev_t: 12 bits of major, 20 of minor. */
		held = d.vfs_ino == st->st_ino &&
		       d.vfs_dev >> 20 == major(st->st_dev) &&
		       (d.vfs_dev & 0xfffff) == minor(st->st_dev);
	}
	closedir(dir);
	return held;
}

/* ---- credentials ------------------------------------------------------ */

/* The 4th (fs) id of a "Uid:" or "Gid:" line. */
static bool fs_id(const char *status, const char *key, unsigned int *id)
{
	const char *p = strstr(status, key);

	return p && sscanf(p + strlen(key), "%*u %*u %*u %u", id) == 1;
}

static bool same_userns(pid_t pid)
{
	char path[64];
	struct stat a, b;

	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	return !stat(path, &a) && !stat("/proc/self/ns/user", &b) &&
	       a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

static int read_creds(pid_t pid, struct creds *c)
{
	char path[64], status[8192];
	unsigned long long caps = 0;
	unsigned int uid, gid;
	const char *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, status, sizeof(status) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -ESRCH;
	status[n] = 0;
	if (!fs_id(status, "\nUid:", &uid) || !fs_id(status, "\nGid:", &gid))
		return -EPROTO;
	memset(c, 0, sizeof(*c));
	c->uid = uid;
	c->gid = gid;
	p = strstr(status, "\nGroups:");
	if (p) {
		char *end;

		p += 8;
		while (c->ngroups < MAX_GROUPS) {
			unsigned long g = strtoul(p, &end, 10);

			if (end == p)
				break;
			c->groups[c->ngroups++] = (gid_t)g;
			p = end;
		}
	}
	p = strstr(status, "\nCapEff:");
	if (p)
		caps = strtoull(p + 8, NULL, 16);
	/* Capabilities of another user namespace grant nothing here. */
	if (same_userns(pid)) {
		c->dac_override = caps >> CAP_DAC_OVERRIDE_BIT & 1;
		c->dac_read_search = caps >> CAP_DAC_READ_SEARCH_BIT & 1;
	}
	return 0;
}

static bool in_groups(const struct creds *c, gid_t g)
{
	if (g == c->gid)
		return true;
	for (int i = 0; i < c->ngroups; i++)
		if (c->groups[i] == g)
			return true;
	return false;
}

/* May @c do @want (r 4, w 2, x 1) to @st? As the kernel's
 * generic_permission() without ACLs: a POSIX ACL that grants more than
 * the mode bits show is not looked at, and refuses (never grants). */
static bool may(const struct creds *c, const struct stat *st, unsigned int want)
{
	unsigned int mode = st->st_mode;

	if (c->dac_override && (S_ISDIR(mode) || !(want & 1) || mode & 0111))
		return true;
	if (c->dac_read_search && S_ISDIR(mode) && !(want & 2))
		return true;
	if (st->st_uid == c->uid)
		return ((mode >> 6) & want) == want;
	if (in_groups(c, st->st_gid))
		return ((mode >> 3) & want) == want;
	return (mode & want) == want;
}

/* ---- the walk --------------------------------------------------------- */

/* An O_PATH fd of @name in @dir, and its stat; -errno. */
static int path_open(int dir, const char *name, int flags, struct stat *st)
{
	int fd = openat(dir, name, O_PATH | O_CLOEXEC | flags);

	if (fd < 0)
		return -errno;
	if (fstat(fd, st)) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

struct walk {
	int stack[MAX_DEPTH];	/* directories from the start, fds */
	int depth;
	int rootfd;		/* the VMM's root */
	bool from_root;		/* the walk is anchored at its root */
	const struct creds *c;	/* NULL: nothing to check (our own path) */
	char denied[PATH_MAX + 64];	/* where the VMM could not pass */
	char walked[PATH_MAX];	/* the path walked so far, for messages */
};

static void pop_all(struct walk *w)
{
	while (w->depth > 0)
		close(w->stack[--w->depth]);
}

static int push(struct walk *w, int fd)
{
	if (w->depth == MAX_DEPTH) {
		close(fd);
		return -ENAMETOOLONG;
	}
	w->stack[w->depth++] = fd;
	return 0;
}

static int restart_at_root(struct walk *w)
{
	int fd = fcntl(w->rootfd, F_DUPFD_CLOEXEC, 0);

	pop_all(w);
	if (fd < 0)
		return -errno;
	w->from_root = true;
	snprintf(w->walked, sizeof(w->walked), "/");
	return push(w, fd);
}

static void note_denied(struct walk *w, const char *what)
{
	if (!w->denied[0])
		snprintf(w->denied, sizeof(w->denied), "%s", what);
}

static void walked_add(struct walk *w, const char *comp)
{
	size_t len = strlen(w->walked);

	snprintf(w->walked + len, sizeof(w->walked) - len, "%s%s",
		 len && w->walked[len - 1] != '/' ? "/" : "", comp);
}

/* One step: component @comp looked up in the current directory. Returns
 * an O_PATH fd of what it names (a symlink is not followed). */
static int step(struct walk *w, const char *comp, struct stat *st)
{
	int dir = w->stack[w->depth - 1];
	struct stat ds;
	char what[PATH_MAX + 64];

	if (fstat(dir, &ds))
		return -errno;
	if (w->c && !may(w->c, &ds, 1)) {
		snprintf(what, sizeof(what), "%s: no search permission",
			 w->walked[0] ? w->walked : ".");
		note_denied(w, what);
	}
	return path_open(dir, comp, O_NOFOLLOW, st);
}

/* Resolve @path to an O_PATH fd of the file it names, following links
 * in the VMM's root and noting in w->denied where the VMM could not pass. */
static int resolve(struct walk *w, const char *path, struct stat *st)
{
	char *rest = malloc(PATH_MAX * 2), *next = malloc(PATH_MAX * 2);
	int links = 0, fd = -ENOENT;

	if (!rest || !next) {
		fd = -ENOMEM;
		goto out;
	}
	snprintf(rest, PATH_MAX * 2, "%s", path);
	if (path[0] == '/' && (fd = restart_at_root(w)) < 0)
		goto out;
	fd = -ENOENT;
	for (;;) {
		char *comp = rest, *slash;
		bool last;

		while (*comp == '/')
			comp++;
		if (!*comp)
			break;
		slash = strchr(comp, '/');
		if (slash)
			*slash = 0;
		last = !slash || !slash[1 + strspn(slash + 1, "/")];
		if (!strcmp(comp, ".")) {
			fd = -ENOENT;
		} else if (!strcmp(comp, "..")) {
			if (w->depth > 1) {
				close(w->stack[--w->depth]);
			} else if (!w->from_root) {
				/* Above its working directory: the walk would
				 * need the directories we did not come through. */
				fd = -EXDEV;
				goto out;
			}
			walked_add(w, "..");
		} else {
			fd = step(w, comp, st);
			if (fd < 0)
				goto out;
			if (S_ISLNK(st->st_mode)) {
				char target[PATH_MAX];
				ssize_t n = readlinkat(fd, "", target, sizeof(target) - 1);

				close(fd);
				fd = -ELOOP;
				if (n <= 0 || ++links > KS_MAX_LINKS)
					goto out;
				target[n] = 0;
				snprintf(next, PATH_MAX * 2, "%s/%s", target,
					 slash ? slash + 1 : "");
				snprintf(rest, PATH_MAX * 2, "%s", next);
				if (target[0] == '/' && (fd = restart_at_root(w)) < 0)
					goto out;
				fd = -ENOENT;
				continue;
			}
			walked_add(w, comp);
			if (last)
				goto out;	/* fd: the file itself */
			if (!S_ISDIR(st->st_mode)) {
				close(fd);
				fd = -ENOTDIR;
				goto out;
			}
			fd = push(w, fd);
			if (fd < 0)
				goto out;
			fd = -ENOENT;
		}
		if (!slash)
			break;
		memmove(rest, slash + 1, strlen(slash + 1) + 1);
	}
	/* The path named a directory ("/", "a/.."): not a socket. */
	if (fd == -ENOENT && w->depth) {
		fd = fcntl(w->stack[w->depth - 1], F_DUPFD_CLOEXEC, 0);
		if (fd < 0 || fstat(fd, st)) {
			if (fd >= 0)
				close(fd);
			fd = -errno;
		}
	}
out:
	free(rest);
	free(next);
	return fd;
}

static int open_proc(pid_t pid, const char *what)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
	fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Resolve @path as @pid sees it (its root, its working directory). */
static int resolve_as(pid_t pid, const char *path, const struct creds *c,
		      struct stat *st, char *denied, size_t denied_sz)
{
	struct walk *w = calloc(1, sizeof(*w));
	int fd;

	if (!w)
		return -ENOMEM;
	w->c = c;
	w->rootfd = open_proc(pid, "root");
	fd = w->rootfd;
	if (fd >= 0 && path[0] != '/') {
		fd = open_proc(pid, "cwd");
		if (fd >= 0)
			fd = push(w, fd);
	}
	if (fd >= 0)
		fd = resolve(w, path, st);
	pop_all(w);
	if (w->rootfd >= 0)
		close(w->rootfd);
	snprintf(denied, denied_sz, "%s", w->denied);
	free(w);
	return fd;
}


int ks_qmp_sock_open(const char *path, pid_t pid, struct stat *st,
		     char *err, size_t errsz)
{
	char denied[PATH_MAX + 64] = "";
	struct creds c;
	int fd, e;

	if (pid <= 0) {
		/* The user's own word (--qmp): our view, our rights. */
		fd = path_open(AT_FDCWD, path, 0, st);
		e = fd;
	} else {
		e = read_creds(pid, &c);
		fd = e ? e : resolve_as(pid, path, &c, st, denied, sizeof(denied));
		e = fd;
	}
	if (fd < 0) {
		ks_err(err, errsz, "QMP socket %s: %s", path,
			e == -EXDEV ? "leaves its working directory (\"..\")"
				    : strerror(-e));
		return e;
	}
	if (!S_ISSOCK(st->st_mode)) {
		close(fd);
		ks_err(err, errsz, "QMP socket %s: %s", path, strerror(ENOTSOCK));
		return -ENOTSOCK;
	}
	if (pid <= 0 || held_by(pid, st))
		return fd;
	if (!denied[0] && !may(&c, st, 2))
		snprintf(denied, sizeof(denied), "%s: no write permission", path);
	if (!denied[0])
		return fd;
	close(fd);
	ks_err(err, errsz, "QMP socket %s: refused: pid %d (uid %u) neither "
		"listens on it nor could use it itself (%s)", path, (int)pid,
		(unsigned int)c.uid, denied);
	return -EACCES;
}
