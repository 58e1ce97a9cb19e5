// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The log writer's file: opening, checking, truncating and rotating it.
 *
 * The recorder runs as root, often in a directory other users can write
 * to (/tmp) or read. So a file is never opened through a symbolic link
 * (O_NOFOLLOW), a new file is created only where none is (O_EXCL), an
 * existing one is written to only when it is a regular file that is a
 * kvmstats log (or empty), and in a sticky world-writable directory only
 * when it is our own with no other name: a planted file or link never
 * makes us write, or truncate, what its planter cannot. Truncation
 * (KVMSTATS_LOG_TRUNCATE) comes after those checks and the lock, never in
 * open(). Rotation renames by name (rename never follows a link) and only
 * the file the writer holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "log_file.h"
#include "log_format.h"

/* Races with someone creating and removing the file: give up after. */
#define OPEN_TRIES 8

static int write_all(int fd, const void *p, size_t len)
{
	ssize_t n = write(fd, p, len);

	if (n == (ssize_t)len)
		return 0;
	return n < 0 ? -errno : -ENOSPC;
}

/* The existing file, or a new one (O_EXCL); never through a link. */
static int open_or_create(const char *path, bool *created)
{
	int flags = O_RDWR | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW;

	for (int i = 0; i < OPEN_TRIES; i++) {
		int fd = open(path, flags);

		if (fd >= 0) {
			*created = false;
			return fd;
		}
		if (errno != ENOENT)
			return -errno;
		fd = open(path, flags | O_CREAT | O_EXCL, 0644);
		if (fd >= 0) {
			*created = true;
			return fd;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EAGAIN;
}

/* Is the directory of @path writable by others, with the sticky bit
 * (/tmp): where anyone may have planted a file for us? */
static bool in_shared_dir(const char *path)
{
	char *copy = strdup(path);
	struct stat st;
	bool shared;

	if (!copy)
		return true;	/* cannot tell: assume the worst */
	shared = stat(dirname(copy), &st) ||
		 ((st.st_mode & S_ISVTX) && (st.st_mode & S_IWOTH));
	free(copy);
	return shared;
}

/* May we write to the file we opened at @path? */
static int check_file(struct log_file *f, bool created, char *errbuf,
		      size_t errsz)
{
	struct stat st;

	if (fstat(f->fd, &st))
		return -errno;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	if (!S_ISREG(st.st_mode)) {
		ks_err(errbuf, errsz, "%s: not a regular file", f->path);
		return -EINVAL;
	}
	if (created || !in_shared_dir(f->path))
		return 0;
	if (st.st_uid != geteuid() || st.st_nlink != 1) {
		ks_err(errbuf, errsz, "%s: %s in a directory anyone can write to: "
		       "refusing to write to it", f->path,
		       st.st_nlink != 1 ? "has other names" : "belongs to another user");
		return -EPERM;
	}
	return 0;
}

/* Check an existing file (or start an empty one) before appending. */
static int prepare(struct log_file *f, bool truncate, char *errbuf, size_t errsz)
{
	struct log_file_hdr h;
	struct stat st;
	ssize_t n;
	int err;

	if (fstat(f->fd, &st))
		return -errno;
	f->size = (uint64_t)st.st_size;
	if (f->size) {
		n = pread(f->fd, &h, sizeof(h), 0);
		if (n < 0)
			return -errno;
		/* A header cut short by a crash while creating: start over. */
		if ((size_t)n < sizeof(h) &&
		    !memcmp(&h, LOG_MAGIC, (size_t)n < 8 ? (size_t)n : 8)) {
			truncate = true;
		} else if ((err = log_file_hdr_check(&h))) {
			ks_err(errbuf, errsz, "%s: %s", f->path,
			       err == -EINVAL ? "exists and is not a kvmstats log"
					      : "is a log of another version or byte order");
			return err;
		}
		/* (a short header is made again below) */
		f->version = h.version;
	}
	if (truncate && f->size) {
		if (ftruncate(f->fd, 0))
			return -errno;
		f->size = 0;
	}
	if (!f->size) {
		log_file_hdr_init(&h);
		err = write_all(f->fd, &h, sizeof(h));
		if (err) {
			/* Leave no half header behind (best effort: the
			 * next open starts over from a short header). */
			(void)!ftruncate(f->fd, 0);
			return err;
		}
		f->size = sizeof(h);
		f->version = h.version;
	}
	/* Records start 8-aligned; a writer killed mid-record may have left
	 * the end anywhere. */
	if (f->size % 8) {
		static const char zero[8];
		size_t pad = 8 - f->size % 8;

		err = write_all(f->fd, zero, pad);
		if (err)
			return err;
		f->size += pad;
	}
	return 0;
}

/* Does @path still name the file we hold (not moved away, not replaced)? */
static bool still_ours(const struct log_file *f)
{
	struct stat st;

	return !lstat(f->path, &st) && st.st_dev == f->dev && st.st_ino == f->ino;
}

static const char *open_error(int err)
{
	if (err == -ELOOP)
		return "is a symbolic link: refusing to write through it";
	if (err == -EAGAIN)
		return "keeps being created and removed by someone else";
	return strerror(-err);
}

int log_file_open(struct log_file *f, bool truncate, char *errbuf, size_t errsz)
{
	bool created = false;
	int err;

	f->fd = open_or_create(f->path, &created);
	if (f->fd < 0) {
		err = f->fd;
		ks_err(errbuf, errsz, "%s: %s", f->path, open_error(err));
		return err;
	}
	err = check_file(f, created, errbuf, errsz);
	if (err)
		goto err;
	if (flock(f->fd, LOCK_EX | LOCK_NB)) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		ks_err(errbuf, errsz, "%s: %s", f->path,
		       err == -EBUSY ? "another recorder is writing to it"
				     : strerror(-err));
		goto err;
	}
	err = prepare(f, truncate, errbuf, errsz);
	if (err)
		goto err;
	return 0;
err:
	if (errbuf && !*errbuf)
		ks_err(errbuf, errsz, "%s: %s", f->path, strerror(-err));
	/* Only what we created is removed: it is empty, or holds a header. */
	if (created && still_ours(f))
		unlink(f->path);
	close(f->fd);
	f->fd = -1;
	return err;
}

void log_file_close(struct log_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

int log_file_rotate(struct log_file *f, unsigned int keep,
		    const struct kvmstats_ctx *ctx)
{
	size_t len = strlen(f->path) + 16;
	char *from = malloc(len), *to = malloc(len);
	int err = -ENOMEM;

	if (!from || !to)
		goto out;
	/* Moved away already (logrotate): the next file starts here. */
	if (!still_ours(f))
		goto reopen;
	for (unsigned int i = keep; i > 1; i--) {
		snprintf(from, len, "%s.%u", f->path, i - 1);
		snprintf(to, len, "%s.%u", f->path, i);
		if (rename(from, to) && errno != ENOENT)
			ks_log(ctx, KVMSTATS_LOG_WARN, "rename %s: %s", from,
			       strerror(errno));
	}
	snprintf(to, len, "%s.1", f->path);
	if (rename(f->path, to)) {
		err = -errno;
		goto out;
	}
reopen:
	log_file_close(f);
	err = log_file_open(f, false, NULL, 0);
out:
	free(from);
	free(to);
	return err;
}
