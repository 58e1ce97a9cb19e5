// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The file behind a VMM's shared mapping: which we may open, and how.
 *
 * The planner opens it, as root, through /proc/PID/map_files, to learn
 * its file system (statfs), to find its holes (SEEK_DATA/SEEK_HOLE) and
 * to read its pages. On a file system a process serves (FUSE: fuse,
 * fuse.*, fuseblk, virtiofs) or a server answers for (nfs, cifs, 9p,
 * ceph), each of those is a request that may never be answered, and we
 * would wait in uninterruptible sleep: a VMM can run a FUSE daemon
 * (allow_other) and map its file. So the link is opened with O_PATH (no
 * file system's open), its mount taken from the attributes the kernel
 * holds (statx with AT_STATX_DONT_SYNC; fstatfs is a request), and the
 * file is read only on a file system the kernel serves alone, from
 * memory or a local block device (mounting one takes the host's
 * CAP_SYS_ADMIN: a VMM that has it needs no stall to hurt us), then
 * opened again through our O_PATH fd, so that the file checked is the
 * file read.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "mem_internal.h"

/* What of the VMM's mountinfo is read, once per RAM object: a VMM in a
 * user namespace of its own can mount tmpfs up to fs.mount-max (100000)
 * times, with long paths. A device past these is not known: refused. */
#define KS_MOUNTS_MAX 4096
#define KS_MOUNTINFO_MAX_BYTES (4u << 20)

/* File systems the kernel serves alone. */
static const char *const kernel_fs[] = {
	"tmpfs", "hugetlbfs", "ramfs", "ext2", "ext3", "ext4", "xfs", "btrfs",
	"f2fs",
};

/* The devices of our own memfds: the internal shmem mount (memfd, SysV
 * shm, shared /dev/zero) and the hugetlbfs ones (one per huge page
 * size), which no mountinfo lists. Creating a hugetlb memfd takes no
 * page; without huge pages configured it fails and matches nothing. */
static void probe_memfd_devs(struct kvmstats_ram *ram)
{
	static const unsigned int flags[KS_MEMFD_DEVS] = {
		0, MFD_HUGETLB, MFD_HUGETLB | (21u << 26),	/* MFD_HUGE_2MB */
		MFD_HUGETLB | (30u << 26),			/* MFD_HUGE_1GB */
	};
	struct stat st;

	for (int i = 0; i < KS_MEMFD_DEVS; i++) {
		int fd = memfd_create("kvmstats-probe", MFD_CLOEXEC | flags[i]);

		if (fd < 0)
			continue;
		if (!fstat(fd, &st))
			ram->memfd_dev[i] = st.st_dev;
		close(fd);
	}
}

/* One line of mountinfo: its mount ID, device and file system type. */
static bool parse_mount(const char *line, struct ks_mount *m)
{
	const char *sep = strstr(line, " - ");
	unsigned int maj, min;

	if (!sep || sscanf(line, "%" SCNu64 " %*d %u:%u", &m->id, &maj, &min) != 3)
		return false;
	m->dev = makedev(maj, min);
	snprintf(m->type, sizeof(m->type), "%.*s",
		 (int)strcspn(sep + 3, " \n"), sep + 3);
	return true;
}

/* The VMM's mounts (the paths it mapped are its own), bounded; none
 * where its mountinfo cannot be read. */
static void read_mounts(struct kvmstats_ram *ram)
{
	char path[64], *line = NULL;
	size_t cap = 0, bytes = 0;
	ssize_t got;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)ram->pid);
	f = fopen(path, "re");
	if (!f)
		return;
	ram->mounts = calloc(KS_MOUNTS_MAX, sizeof(*ram->mounts));
	while (ram->mounts && ram->nmounts < KS_MOUNTS_MAX &&
	       bytes < KS_MOUNTINFO_MAX_BYTES &&
	       (got = getline(&line, &cap, f)) > 0) {
		bytes += (size_t)got;
		ram->nmounts += parse_mount(line, &ram->mounts[ram->nmounts]);
	}
	free(line);
	fclose(f);
}

void ks_file_probe(struct kvmstats_ram *ram)
{
	probe_memfd_devs(ram);
	read_mounts(ram);
}

static bool kernel_served(const char *type)
{
	for (size_t i = 0; i < sizeof(kernel_fs) / sizeof(kernel_fs[0]); i++)
		if (!strcmp(type, kernel_fs[i]))
			return true;
	return false;
}

/* The file's mount is found by its ID where the kernel gives it (5.8+):
 * a btrfs subvolume's files have a device of their own, which no
 * mountinfo line names; by its device otherwise. */
static bool same_mount(const struct ks_mount *m, const struct statx *stx, dev_t dev)
{
	if (stx->stx_mask & STATX_MNT_ID)
		return m->id == stx->stx_mnt_id;
	return m->dev == dev;
}

int ks_file_readable(const struct kvmstats_ram *ram, int fd, char *type,
		     size_t len)
{
	struct statx stx;
	dev_t dev;

	snprintf(type, len, "?");
	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC,
		  STATX_TYPE | STATX_INO | STATX_MNT_ID, &stx))
		return -errno;
	if (!S_ISREG(stx.stx_mode))
		return -EINVAL;
	dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
	for (int i = 0; i < KS_MEMFD_DEVS; i++)
		if (ram->memfd_dev[i] && ram->memfd_dev[i] == dev)
			return 0;
	for (size_t i = 0; i < ram->nmounts; i++) {
		if (!same_mount(&ram->mounts[i], &stx, dev))
			continue;
		snprintf(type, len, "%s", ram->mounts[i].type);
		return kernel_served(type) ? 0 : -EREMOTE;
	}
	snprintf(type, len, "%u:%u", stx.stx_dev_major, stx.stx_dev_minor);
	return -EREMOTE;
}

int ks_map_file_path(pid_t pid, uint64_t start, uint64_t end)
{
	char path[96];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64,
		 (int)pid, start, end);
	fd = open(path, O_PATH | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int ks_region_open(const struct kvmstats_ram *ram,
		   const struct kvmstats_ram_region *r)
{
	int pfd = ks_map_file_path(ram->pid, r->vma_start,
				   r->start + r->map_len);
	char type[64], path[64];
	int fd;

	if (pfd < 0)
		return pfd;
	fd = ks_file_readable(ram, pfd, type, sizeof(type));
	if (!fd) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", pfd);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		fd = fd < 0 ? -errno : fd;
	}
	close(pfd);
	return fd;
}
