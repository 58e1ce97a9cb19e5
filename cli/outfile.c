// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Files the CLI writes as root (record --log-file, serve --ready), maybe
 * in a directory others can write to: never opened through a symbolic
 * link, created only where no file is (O_EXCL), and an existing one
 * written only when it is a regular file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static int open_regular(const char *path, bool append)
{
	int flags = O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW;
	struct stat st;
	int fd = -1;

	if (append)
		fd = open(path, flags | O_APPEND);
	else if (unlink(path) && errno != ENOENT)
		return -1;
	if (fd < 0 && (!append || errno == ENOENT))
		fd = open(path, flags | O_APPEND | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	return fd;
}

FILE *open_output(const char *path, bool append)
{
	int fd = open_regular(path, append);
	FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;

	if (fd >= 0 && !f)
		close(fd);
	return f;
}
