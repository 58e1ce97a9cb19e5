// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Is an fd taken from a VMM (pidfd_getfd) the stats fd it was named as?
 * A VMM's other threads can put any file at that number between the
 * moment we look at its fd table and the moment we take the fd: a memfd
 * of forged stats, a FUSE file whose reads (and flushes) never end. So a
 * taken fd is read only when it is a file of the anon inode file system
 * named as KVM names stats fds, and one that is not is closed where a
 * flush cannot hold up the caller.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "internal.h"

#define ANON_INODE_FS_MAGIC 0x09041934

/* "anon_inode:kvm-vm-stats" for a VM (@vcpu < 0), else
 * "anon_inode:kvm-vcpu-stats:VCPU": what KVM names them. */
static bool stats_name(const char *link, int vcpu)
{
	char want[64];

	if (vcpu < 0)
		return !strcmp(link, "anon_inode:kvm-vm-stats");
	snprintf(want, sizeof(want), "anon_inode:kvm-vcpu-stats:%d", vcpu);
	return !strcmp(link, want);
}

static ssize_t link_of(const char *path, char *buf, size_t len)
{
	ssize_t n = readlink(path, buf, len - 1);

	if (n >= 0)
		buf[n] = 0;
	return n;
}

int ks_verify_stats_fd(int fd, int vcpu, char *why, size_t why_sz)
{
	char path[64], link[256];
	struct statfs sf;
	struct stat st;

	if (fstat(fd, &st) || fstatfs(fd, &sf)) {
		ks_err(why, why_sz, "cannot look at it: %s", strerror(errno));
		return -errno;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (link_of(path, link, sizeof(link)) < 0)
		snprintf(link, sizeof(link), "?");
	/* KVM's stats fds are files of the anon inode file system, named
	 * after what they read; nothing else can be named so. */
	if ((st.st_mode & S_IFMT) || sf.f_type != ANON_INODE_FS_MAGIC ||
	    !stats_name(link, vcpu)) {
		ks_err(why, why_sz, "it is not a KVM %s stats fd but \"%.120s\"",
		       vcpu < 0 ? "VM" : "vCPU", link);
		return -EBADF;
	}
	return 0;
}

bool ks_remote_is_stats(pid_t pid, int fd, int vcpu)
{
	char path[64], link[256];

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	return link_of(path, link, sizeof(link)) > 0 && stats_name(link, vcpu);
}

static bool anon_inode(int fd)
{
	struct statfs sf;

	return !fstatfs(fd, &sf) && sf.f_type == ANON_INODE_FS_MAGIC;
}

static void *closer(void *arg)
{
	close((int)(intptr_t)arg);
	return NULL;
}

void ks_drop_fd(int fd)
{
	pthread_attr_t attr;
	pthread_t t;

	/* An anon inode has no flush to wait in. Anything else (a FUSE file
	 * a hostile VMM put there) is closed by a thread of its own: close()
	 * flushes, and a FUSE daemon may never answer. */
	if (anon_inode(fd) || pthread_attr_init(&attr)) {
		close(fd);
		return;
	}
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	if (pthread_create(&t, &attr, closer, (void *)(intptr_t)fd))
		close(fd);
	pthread_attr_destroy(&attr);
}
