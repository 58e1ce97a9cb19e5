// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * QEMU's version from its executable, for a VMM whose monitor the plan
 * does not read (libvirt holds it, or it has none): the model differs by
 * version (migrate_model.c's rate limit, migrate_multifd.c, the
 * defaults), and libvirt's own answer (virConnectGetVersion) is the
 * default emulator's, which a fresh libvirtd probed for 6.3 s here.
 *
 * Every QEMU prints "QEMU emulator version X.Y.Z (...)" for --version,
 * and the string sits whole in its read-only data. The executable is
 * read, never run. /proc/PID/exe is the file the process was started
 * from, which it cannot change without CAP_SYS_RESOURCE: a compromised
 * QEMU names its own version only, a wrong one at worst, for its own
 * plan. The file is read only when the administrator installed it (a
 * regular file of root's that no one else may write) on a filesystem
 * whose server is not a user's (not FUSE, which could stall the read),
 * at most KS_EXE_MAX bytes, in chunks, until the deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "mem_internal.h"

#define KS_EXE_MAX (512ull << 20)
#define CHUNK (1u << 20)
#define FUSE_MAGIC 0x65735546
#define PREFIX "QEMU emulator version "
/* "X.Y" after the prefix: room for the digits of both. */
#define TAIL 16

/* A number of at most 4 digits at @p (QEMU's are 1-2): its value, or -1. */
static int small_number(const char *p, const char *end, const char **next)
{
	int v = 0, n = 0;

	while (p < end && *p >= '0' && *p <= '9' && n < 5)
		v = v * 10 + (*p++ - '0'), n++;
	*next = p;
	return n && n < 5 ? v : -1;
}

int ks_version_in(const char *buf, size_t len, unsigned int *major,
		  unsigned int *minor)
{
	const char *end = buf + len, *p = buf, *q;
	int maj, min;

	while ((p = memmem(p, (size_t)(end - p), PREFIX, sizeof(PREFIX) - 1))) {
		p += sizeof(PREFIX) - 1;
		maj = small_number(p, end, &q);
		if (maj <= 0 || q >= end || *q != '.')
			continue;
		/* Its end in the buffer: not "10.1" of a "10.12" cut short. */
		min = small_number(q + 1, end, &q);
		if (min < 0 || q >= end)
			continue;
		*major = (unsigned int)maj;
		*minor = (unsigned int)min;
		return 0;
	}
	return -ENOENT;
}

/* The administrator's file, on a filesystem no user serves. */
static int exe_trusted(int fd, char *why, size_t len)
{
	struct statfs sfs;
	struct stat st;

	if (fstat(fd, &st) || fstatfs(fd, &sfs))
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_uid ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(why, len, "its executable is not root's alone");
		return -EPERM;
	}
	if (sfs.f_type == FUSE_MAGIC) {
		snprintf(why, len, "its executable is on FUSE");
		return -EPERM;
	}
	if ((unsigned long long)st.st_size > KS_EXE_MAX) {
		snprintf(why, len, "its executable is over %llu MiB",
			 KS_EXE_MAX >> 20);
		return -EFBIG;
	}
	return 0;
}

/* Chunk by chunk, each starting with the previous one's last TAIL +
 * prefix bytes, so that a string across two chunks is found whole. */
int ks_exe_version_scan(int fd, uint64_t deadline, unsigned int *major,
			unsigned int *minor)
{
	const size_t keep = sizeof(PREFIX) - 1 + TAIL;
	char *buf = malloc(CHUNK + keep);
	size_t have = 0;
	off_t off = 0;
	int err = -ENOENT;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n = pread(fd, buf + have, CHUNK, off);

		if (n <= 0) {
			err = n ? -errno : -ENOENT;
			break;
		}
		if (!ks_version_in(buf, have + (size_t)n, major, minor)) {
			err = 0;
			break;
		}
		off += n;
		have += (size_t)n;
		if (have > keep) {
			memmove(buf, buf + have - keep, keep);
			have = keep;
		}
		if ((uint64_t)off >= KS_EXE_MAX || ks_now_ns() > deadline) {
			err = (uint64_t)off >= KS_EXE_MAX ? -EFBIG : -ETIMEDOUT;
			break;
		}
	}
	free(buf);
	return err;
}

int ks_qemu_exe_version(pid_t pid, uint64_t deadline,
			struct kvmstats_migrate_settings *s, char *why,
			size_t len)
{
	unsigned int maj = 0, min = 0;
	char path[64];
	int fd, err;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	err = exe_trusted(fd, why, len);
	if (!err)
		err = ks_exe_version_scan(fd, deadline, &maj, &min);
	close(fd);
	if (err == -ENOENT)
		snprintf(why, len, "its executable names no QEMU version");
	else if (err == -ETIMEDOUT)
		snprintf(why, len, "its executable was not read in time");
	if (err)
		return err;
	s->qemu_major = maj;
	s->qemu_minor = min;
	s->version_src = KVMSTATS_MIG_SRC_EXECUTABLE;
	return 0;
}
