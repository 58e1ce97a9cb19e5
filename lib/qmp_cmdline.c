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

/* Value of @key in a QemuOpts string "a,key=value,b" (",," is a comma);
 * key "" asks for the first element when it has no "=". A bare "key"
 * reads as "on". */
static bool opt_get(const char *s, const char *key, char *out, size_t len)
{
	bool first = true;

	while (*s) {
		char item[PATH_MAX];
		size_t n = 0;
		const char *eq;

		for (; *s && n + 1 < sizeof(item); s++) {
			if (*s == ',' && s[1] != ',')
				break;
			if (*s == ',')
				s++;	/* ",," */
			item[n++] = *s;
		}
		item[n] = 0;
		if (*s == ',')
			s++;
		eq = strchr(item, '=');
		if (!*key && first && !eq) {
			snprintf(out, len, "%s", item);
			return true;
		}
		first = false;
		if (!*key)
			continue;
		if (!eq && !strcmp(item, key)) {
			snprintf(out, len, "on");
			return true;
		}
		if (eq && (size_t)(eq - item) == strlen(key) &&
		    !strncmp(item, key, strlen(key))) {
			snprintf(out, len, "%s", eq + 1);
			return true;
		}
	}
	return false;
}

static bool opt_on(const char *s, const char *key)
{
	char v[16];

	return opt_get(s, key, v, sizeof(v)) &&
	       (!strcmp(v, "on") || !strcmp(v, "yes") || !strcmp(v, "true"));
}

/* "-opt" or "--opt". */
static bool is_opt(const char *arg, const char *name)
{
	if (arg[0] != '-')
		return false;
	arg += arg[1] == '-' ? 2 : 1;
	return !strcmp(arg, name);
}

struct cmdline {
	char *buf;
	size_t len;
	const char *argv[4096];
	int argc;
};

static int read_cmdline(pid_t pid, struct cmdline *c)
{
	char path[64];
	unsigned char *buf;
	size_t len;
	int fd, err;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	err = ks_read_all_fd(fd, &buf, &len);
	close(fd);
	if (err)
		return err;
	c->buf = (char *)buf;
	c->len = len;
	c->argc = 0;
	for (size_t i = 0; i < len && c->argc < (int)ARRAY_SIZE(c->argv);) {
		/* The last argument may lack its NUL if the file was cut. */
		if (!memchr(c->buf + i, 0, len - i))
			break;
		c->argv[c->argc++] = c->buf + i;
		i += strlen(c->buf + i) + 1;
	}
	return 0;
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
	if (strncmp(val, "unix:", 5))
		return false;	/* tcp:... and others are not supported */
	if (!opt_get(val + 5, "", path, len) || !*path)
		return false;
	/* Without server=on QEMU is the one that connects. */
	return opt_on(val + 5, "server");
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

/* The path of the listening socket chardev @id, if any. */
static bool chardev_path(const struct cmdline *c, pid_t pid, unsigned int flags,
			 const char *id, char *path, size_t len)
{
	char v[256];

	for (int i = 0; i + 1 < c->argc; i++) {
		const char *val = c->argv[i + 1];

		if (!is_opt(c->argv[i], "chardev"))
			continue;
		if (!opt_get(val, "", v, sizeof(v)) || strcmp(v, "socket"))
			continue;
		if (!opt_get(val, "id", v, sizeof(v)) || strcmp(v, id))
			continue;
		if (!opt_on(val, "server"))
			return false;
		if (opt_get(val, "path", path, len) && *path)
			return true;
		/* A socket passed by whoever started QEMU (libvirt). */
		return (flags & KS_QMP_FIND_FD) && opt_get(val, "fd", v, sizeof(v)) &&
		       fd_socket_path(pid, v, path, len);
	}
	return false;
}

/* The QMP sockets on QEMU's command line, in order: -qmp/-qmp-pretty
 * unix:PATH,server=on, then -chardev socket,id=X,path=PATH,server=on
 * used by -mon chardev=X,mode=control. */
static int find_sockets(const struct cmdline *c, pid_t pid, unsigned int flags,
			char (*out)[PATH_MAX], int max)
{
	char id[256], mode[32];
	int n = 0;

	for (int i = 0; i + 1 < c->argc && n < max; i++) {
		const char *arg = c->argv[i], *val = c->argv[i + 1];

		if ((is_opt(arg, "qmp") || is_opt(arg, "qmp-pretty")) &&
		    legacy_unix(val, out[n], sizeof(out[n])))
			n++;
	}
	for (int i = 0; i + 1 < c->argc && n < max; i++) {
		const char *val = c->argv[i + 1];

		if (!is_opt(c->argv[i], "mon"))
			continue;
		if (!opt_get(val, "mode", mode, sizeof(mode)) ||
		    strcmp(mode, "control"))
			continue;
		if (!opt_get(val, "chardev", id, sizeof(id)) &&
		    !opt_get(val, "", id, sizeof(id)))
			continue;
		if (chardev_path(c, pid, flags, id, out[n], sizeof(out[n])))
			n++;
	}
	return n;
}

int ks_qmp_find_sockets(pid_t pid, unsigned int flags, char (*out)[PATH_MAX],
			int max)
{
	struct cmdline *c = calloc(1, sizeof(*c));
	int n;

	if (!c)
		return -ENOMEM;
	n = read_cmdline(pid, c);
	if (!n)
		n = looks_like_qemu(c, pid) ? find_sockets(c, pid, flags, out, max)
					    : -ENOTSUP;
	free(c->buf);
	free(c);
	return n;
}
