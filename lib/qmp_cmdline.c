// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * QEMU's QMP sockets, as its command line names them.
 *
 * What this finds is the VMM's word only: a path that a less trusted
 * process wrote. It is used only through ks_qmp_sock_open(), which takes
 * it only if the VMM could use it itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source_qmp.h"

/* One key to look for in a QemuOpts string: gets the raw value of its
 * first item. */
struct opt {
	const char *key;	/* "": the first item, when it has no "=" */
	const char *v;		/* raw: ",," still doubled; NULL when absent */
	size_t len;
};

/* One pass over a QemuOpts string "a,key=value,b" (",," is a comma),
 * filling every @o[] asked for; a bare "key" reads as "on". Nothing is
 * copied: a command line of a million bytes is read once, whatever it
 * holds. */
static void opt_scan(const char *s, struct opt *o, size_t n)
{
	size_t klen_of[8];

	for (size_t i = 0; i < n && i < ARRAY_SIZE(klen_of); i++)
		klen_of[i] = strlen(o[i].key);
	n = n < ARRAY_SIZE(klen_of) ? n : ARRAY_SIZE(klen_of);
	for (bool first = true; *s; first = false) {
		const char *start = s, *eq = NULL;
		size_t klen;

		for (; *s && !(*s == ',' && s[1] != ','); s++) {
			if (*s == ',')
				s++;	/* ",," */
			else if (*s == '=' && !eq)
				eq = s;
		}
		klen = (size_t)((eq ? eq : s) - start);
		for (size_t i = 0; i < n; i++) {
			if (o[i].v)
				continue;
			if (!*o[i].key && first && !eq) {
				o[i].v = start;
				o[i].len = (size_t)(s - start);
			} else if (klen_of[i] && klen_of[i] == klen &&
				   !memcmp(start, o[i].key, klen)) {
				o[i].v = eq ? eq + 1 : "on";
				o[i].len = eq ? (size_t)(s - eq - 1) : 2;
			}
		}
		if (*s)
			s++;
	}
}

/* @o's value, ",," read as ","; false when absent or longer than @len
 * allows (never cut: a cut path would be another file). */
static bool opt_copy(const struct opt *o, char *out, size_t len)
{
	size_t n = 0;

	if (!o->v)
		return false;
	for (size_t i = 0; i < o->len; i++) {
		if (n + 1 >= len)
			return false;
		out[n++] = o->v[i];
		if (o->v[i] == ',' && i + 1 < o->len && o->v[i + 1] == ',')
			i++;
	}
	out[n] = 0;
	return true;
}

static bool opt_is(const struct opt *o, const char *word)
{
	char v[32];

	return opt_copy(o, v, sizeof(v)) && !strcmp(v, word);
}

static bool opt_on(const struct opt *o)
{
	return opt_is(o, "on") || opt_is(o, "yes") || opt_is(o, "true");
}

/* "-opt" or "--opt". */
static bool is_opt(const char *arg, const char *name)
{
	if (arg[0] != '-')
		return false;
	arg += arg[1] == '-' ? 2 : 1;
	return !strcmp(arg, name);
}

/* A command line's arguments, pointing into the bytes it was split
 * from (/proc/PID/cmdline: each ends with a NUL). */
struct cmdline {
	const char *argv[4096];
	int argc;
};

/* The arguments of the @len bytes at @buf, at most ARRAY_SIZE(argv);
 * NULL on -ENOMEM. */
static struct cmdline *split_cmdline(const char *buf, size_t len)
{
	struct cmdline *c = calloc(1, sizeof(*c));

	for (size_t i = 0; c && i < len && c->argc < (int)ARRAY_SIZE(c->argv);) {
		/* The last argument may lack its NUL if the file was cut. */
		const char *end = memchr(buf + i, 0, len - i);

		if (!end)
			break;
		c->argv[c->argc++] = buf + i;
		i = (size_t)(end - buf) + 1;
	}
	return c;
}

static int read_cmdline(pid_t pid, unsigned char **buf, size_t *len)
{
	char path[64];
	int fd, err;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	err = ks_read_all_fd(fd, buf, len);
	close(fd);
	return err;
}

static bool looks_like_qemu(const struct cmdline *c, pid_t pid)
{
	char path[64], exe[PATH_MAX];
	const char *base;
	ssize_t n;

	if (c->argc) {
		base = strrchr(c->argv[0], '/');
		if (strstr(base ? base + 1 : c->argv[0], "qemu"))
			return true;
	}
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	if (n <= 0)
		return false;
	exe[n] = 0;
	base = strrchr(exe, '/');
	return strstr(base ? base + 1 : exe, "qemu") != NULL;
}

/* "unix:PATH[,server=on,wait=off]" of -qmp: a socket QEMU listens on. */
static bool legacy_unix(const char *val, char *path, size_t len)
{
	struct opt o[] = { { "" }, { "server" } };

	if (strncmp(val, "unix:", 5))
		return false;	/* tcp:... and others are not supported */
	opt_scan(val + 5, o, ARRAY_SIZE(o));
	if (!opt_copy(&o[0], path, len) || !*path)
		return false;
	/* Without server=on QEMU is the one that connects. */
	return opt_on(&o[1]);
}

/* The file the unix socket behind @pid's fd @fd is bound to, from
 * /proc/PID/net/unix (the path as bound, in @pid's view). */
static bool fd_socket_path(pid_t pid, const char *fd, char *out, size_t len)
{
	char path[64], link[64], line[PATH_MAX + 128];
	unsigned long inode, ino;
	bool found = false;
	ssize_t n;
	FILE *f;

	if (strspn(fd, "0123456789") != strlen(fd) || strlen(fd) > 9)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)pid, fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return false;
	link[n] = 0;
	if (sscanf(link, "socket:[%lu]", &inode) != 1)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/net/unix", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		int pos = 0;

		if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu %n", &ino, &pos) != 1 ||
		    !pos || ino != inode || line[pos] != '/')
			continue;
		line[pos + strcspn(line + pos, "\n")] = 0;
		snprintf(out, len, "%s", line + pos);
		found = true;
	}
	fclose(f);
	return found;
}

/* A -chardev socket, read once: every -mon naming it looks it up by id
 * (log n), never by reading the command line again. */
struct chardev {
	char id[256];
	int order;		/* on the command line: the first of an id wins */
	struct opt o[3];	/* server, path, fd */
};

static int cmp_chardev(const void *a, const void *b)
{
	const struct chardev *x = a, *y = b;
	int c = strcmp(x->id, y->id);

	return c ? c : (x->order > y->order) - (x->order < y->order);
}

/* The socket chardevs of @c, sorted by id; NULL on -ENOMEM. */
static struct chardev *index_chardevs(const struct cmdline *c, size_t *n)
{
	struct chardev *v = calloc((size_t)c->argc / 2 + 1, sizeof(*v));

	*n = 0;
	for (int i = 0; v && i + 1 < c->argc; i++) {
		struct opt o[] = { { "" }, { "id" }, { "server" }, { "path" },
				   { "fd" } };
		struct chardev *d = &v[*n];

		if (!is_opt(c->argv[i], "chardev"))
			continue;
		opt_scan(c->argv[i + 1], o, ARRAY_SIZE(o));
		if (!opt_is(&o[0], "socket") || !opt_copy(&o[1], d->id, sizeof(d->id)))
			continue;
		d->order = i;
		memcpy(d->o, &o[2], sizeof(d->o));
		(*n)++;
	}
	if (v)
		qsort(v, *n, sizeof(*v), cmp_chardev);
	return v;
}

/* The path of the listening socket chardev @id, if any. */
static bool chardev_path(const struct chardev *v, size_t nv, pid_t pid,
			 unsigned int flags, const char *id, char *path,
			 size_t len)
{
	size_t lo = 0, hi = nv;
	const struct chardev *d;
	char fd[16];

	while (lo < hi) {	/* the first of @id */
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(v[mid].id, id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == nv || strcmp(v[lo].id, id))
		return false;
	d = &v[lo];
	if (!opt_on(&d->o[0]))
		return false;
	if (opt_copy(&d->o[1], path, len) && *path)
		return true;
	/* A socket passed by whoever started QEMU (libvirt). */
	return (flags & KS_QMP_FIND_FD) && opt_copy(&d->o[2], fd, sizeof(fd)) &&
	       fd_socket_path(pid, fd, path, len);
}

/* The QMP sockets on QEMU's command line, in order: -qmp/-qmp-pretty
 * unix:PATH,server=on, then -chardev socket,id=X,path=PATH,server=on
 * used by -mon chardev=X,mode=control. Each argument is read once: the
 * work is linear in the command line (a VMM may write a megabyte of
 * -mon and -chardev). */
static int find_sockets(const struct cmdline *c, pid_t pid, unsigned int flags,
			char (*out)[PATH_MAX], int max)
{
	struct chardev *devs = NULL;
	size_t ndevs = 0;
	int n = 0;

	for (int i = 0; i + 1 < c->argc && n < max; i++) {
		const char *arg = c->argv[i], *val = c->argv[i + 1];

		if ((is_opt(arg, "qmp") || is_opt(arg, "qmp-pretty")) &&
		    legacy_unix(val, out[n], sizeof(out[n])))
			n++;
	}
	for (int i = 0; i + 1 < c->argc && n < max; i++) {
		struct opt o[] = { { "mode" }, { "chardev" }, { "" } };
		char id[256];

		if (!is_opt(c->argv[i], "mon"))
			continue;
		opt_scan(c->argv[i + 1], o, ARRAY_SIZE(o));
		if (!opt_is(&o[0], "control"))
			continue;
		if (!opt_copy(&o[1], id, sizeof(id)) &&
		    !opt_copy(&o[2], id, sizeof(id)))
			continue;
		if (!devs) {
			devs = index_chardevs(c, &ndevs);
			if (!devs)
				return -ENOMEM;
		}
		if (chardev_path(devs, ndevs, pid, flags, id, out[n],
				 sizeof(out[n])))
			n++;
	}
	free(devs);
	return n;
}

int ks_qmp_find_sockets(pid_t pid, unsigned int flags, char (*out)[PATH_MAX],
			int max)
{
	struct cmdline *c;
	unsigned char *buf = NULL;
	size_t len = 0;
	int n = read_cmdline(pid, &buf, &len);

	if (n)
		return n;
	c = split_cmdline((const char *)buf, len);
	if (!c)
		n = -ENOMEM;
	else
		n = looks_like_qemu(c, pid) ? find_sockets(c, pid, flags, out, max)
					    : -ENOTSUP;
	free(c);
	free(buf);
	return n;
}

int ks_qmp_cmdline_sockets(const char *buf, size_t len, char (*out)[PATH_MAX],
			   int max)
{
	struct cmdline *c = split_cmdline(buf, len);
	int n = c ? find_sockets(c, 0, 0, out, max) : -ENOMEM;

	free(c);
	return n;
}
