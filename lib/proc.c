// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * What a process holds: its KVM fds, as /proc/PID/fd shows them, and its
 * name.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static const struct {
	const char *prefix;
	enum kvmstats_fd_kind kind;
	bool indexed;
} fd_kinds[] = {
	/* Longest first: "kvm-vm" is a prefix of "kvm-vm-stats". */
	{ "anon_inode:kvm-vcpu-stats:", KVMSTATS_FD_VCPU_STATS, true },
	{ "anon_inode:kvm-vm-stats", KVMSTATS_FD_VM_STATS, false },
	{ "anon_inode:kvm-vcpu:", KVMSTATS_FD_VCPU, true },
	{ "anon_inode:kvm-vm", KVMSTATS_FD_VM, false },
};

enum kvmstats_fd_kind kvmstats_fd_kind(const char *link, int *index)
{
	for (size_t i = 0; i < ARRAY_SIZE(fd_kinds); i++) {
		size_t n = strlen(fd_kinds[i].prefix);
		const char *rest = link + n;
		char *end;
		long v;

		if (strncmp(link, fd_kinds[i].prefix, n))
			continue;
		if (!fd_kinds[i].indexed) {
			if (*rest)
				continue;
			if (index)
				*index = -1;
			return fd_kinds[i].kind;
		}
		errno = 0;
		v = strtol(rest, &end, 10);
		if (end == rest || *end || errno || v < 0 || v > INT_MAX)
			return KVMSTATS_FD_OTHER;
		if (index)
			*index = (int)v;
		return fd_kinds[i].kind;
	}
	return KVMSTATS_FD_OTHER;
}

static int cmp_fd(const void *a, const void *b)
{
	const struct kvmstats_proc_fd *x = a, *y = b;

	return (x->fd > y->fd) - (x->fd < y->fd);
}

static int add_fd(struct kvmstats_proc_fd **arr, size_t *n, size_t *cap,
		  const struct kvmstats_proc_fd *f)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		void *p = realloc(*arr, c * sizeof(**arr));

		if (!p)
			return -ENOMEM;
		*arr = p;
		*cap = c;
	}
	(*arr)[(*n)++] = *f;
	return 0;
}

int kvmstats_proc__kvm_fds(pid_t pid, struct kvmstats_proc_fd **out)
{
	struct kvmstats_proc_fd *arr = NULL;
	size_t n = 0, cap = 0;
	char path[64];
	struct dirent *de;
	DIR *dir;
	int dfd, err = 0;

	*out = NULL;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return errno == ENOENT ? -ESRCH : -errno;
	dfd = dirfd(dir);
	while ((de = readdir(dir))) {
		struct kvmstats_proc_fd f = { .index = -1 };
		char link[128];
		ssize_t len;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		len = readlinkat(dfd, de->d_name, link, sizeof(link) - 1);
		if (len < 0)
			continue;	/* closed since readdir */
		link[len] = 0;
		f.kind = kvmstats_fd_kind(link, &f.index);
		if (f.kind == KVMSTATS_FD_OTHER)
			continue;
		f.fd = atoi(de->d_name);
		err = add_fd(&arr, &n, &cap, &f);
		if (err)
			break;
	}
	closedir(dir);
	if (err) {
		free(arr);
		return err;
	}
	if (n)
		qsort(arr, n, sizeof(*arr), cmp_fd);
	*out = arr;
	return (int)n;
}

ssize_t ks_read_small(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0)
		n = -errno;
	else
		buf[n] = 0;
	close(fd);
	return n;
}

/* One value of a QEMU option string, up to a lone ',' (",," is a
 * literal comma), into @buf (truncated; NULL: skipped). Returns where the
 * next parameter starts. */
static const char *opt_value(const char *p, char *buf, size_t len)
{
	size_t n = 0;

	for (; *p; p++) {
		if (*p == ',' && p[1] != ',')
			break;
		if (*p == ',')
			p++;	/* ",,": one comma */
		if (buf && n + 1 < len)
			buf[n++] = *p;
	}
	if (buf && len)
		buf[n] = 0;
	return *p ? p + 1 : p;
}

/*
 * QEMU's -name, read as QEMU's option parser reads it: parameters split
 * at a lone ',', ",," a comma inside a value; the first parameter without
 * '=' is the implied "guest" ("-name NAME[,opts]"), "guest=NAME" anywhere
 * else, the last one winning; a later parameter without '=' is a flag.
 */
static bool qemu_name(const char *arg, char *buf, size_t len)
{
	bool found = false;

	for (const char *p = arg; *p;) {
		size_t key = strcspn(p, "=,");
		bool guest;

		if (p[key] != '=') {
			guest = p == arg;	/* the implied key, first only */
			if (!guest) {
				p += key + (p[key] == ',');	/* a flag */
				continue;
			}
		} else {
			guest = key == 5 && !strncmp(p, "guest", 5);
			p += key + 1;
		}
		p = opt_value(p, guest ? buf : NULL, len);
		found = guest ? buf[0] != 0 : found;
	}
	return found;
}

int kvmstats_proc__name(pid_t pid, char *buf, size_t len)
{
	char path[64], cmd[8192];
	ssize_t n;

	if (!len)
		return -EINVAL;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	n = ks_read_small(path, cmd, sizeof(cmd));
	for (ssize_t i = 0; n > 0 && i < n;) {
		const char *arg = cmd + i;
		size_t alen = strlen(arg);

		i += (ssize_t)alen + 1;
		if ((strcmp(arg, "-name") && strcmp(arg, "--name")) || i >= n)
			continue;
		if (qemu_name(cmd + i, buf, len))
			return 0;
	}
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	n = ks_read_small(path, cmd, sizeof(cmd));
	if (n < 0)
		return n == -ENOENT ? -ESRCH : (int)n;
	cmd[strcspn(cmd, "\n")] = 0;
	snprintf(buf, len, "%s", cmd);
	return 0;
}

static int cmp_pid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return (x > y) - (x < y);
}

/* A VMM holds a VM fd; a process that holds only stats fds (another
 * reader, like us) is not one. 1, 0 or -errno. */
static int holds_vm(pid_t pid)
{
	struct kvmstats_proc_fd *fds;
	bool vm = false;
	int n = kvmstats_proc__kvm_fds(pid, &fds);

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++)
		vm |= fds[i].kind == KVMSTATS_FD_VM;
	free(fds);
	return vm;
}

int ks_proc_vmm_check(pid_t pid, char *why, size_t why_sz)
{
	int vm = holds_vm(pid);

	if (vm < 0) {
		ks_err(why, why_sz, "%s", vm == -ESRCH ? "no such process" :
		       strerror(-vm));
		return vm;
	}
	if (vm)
		return 0;
	ks_err(why, why_sz, "not a VMM (it holds no KVM VM fd)");
	return -ENOENT;
}

int kvmstats_proc__vmm_pids(pid_t **out)
{
	pid_t *pids = NULL, self = getpid();
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d = opendir("/proc");

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		pid_t pid = (pid_t)atoi(de->d_name);

		if (pid <= 0 || pid == self || holds_vm(pid) <= 0)
			continue;
		if (n == cap) {
			size_t c = cap ? cap * 2 : 16;
			void *p = realloc(pids, c * sizeof(*pids));

			if (!p) {
				free(pids);
				closedir(d);
				return -ENOMEM;
			}
			pids = p;
			cap = c;
		}
		pids[n++] = pid;
	}
	closedir(d);
	if (n)
		qsort(pids, n, sizeof(*pids), cmp_pid);
	*out = pids;
	return (int)n;
}

/* The CPUs @pid may run on, from its affinity mask (a cpuset narrows
 * it): the mask is grown until the kernel's fits, up to 64k CPUs. */
int ks_proc_cpus(pid_t pid)
{
	for (int n = 1024; n <= 65536; n *= 2) {
		cpu_set_t *set = CPU_ALLOC(n);
		size_t sz = CPU_ALLOC_SIZE(n);
		int cpus, err;

		if (!set)
			return -ENOMEM;
		err = sched_getaffinity(pid, sz, set) ? -errno : 0;
		cpus = err ? 0 : CPU_COUNT_S(sz, set);
		CPU_FREE(set);
		if (err != -EINVAL)
			return err ? err : cpus;
	}
	return -EINVAL;
}

/* CPU time @pid's threads have used (utime + stime of /proc/PID/stat),
 * in ns. The fields are read after the last ')': the VMM names its
 * command, which may hold anything. */
int ks_proc_cpu_ns(pid_t pid, uint64_t *ns)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	long tck = sysconf(_SC_CLK_TCK);
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	n = ks_read_small(path, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	p = strrchr(buf, ')');
	/* state, then 10 fields to utime and stime (proc(5): 14 and 15). */
	if (!p || tck <= 0 ||
	    sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
		   &ut, &st) != 2)
		return -EINVAL;
	*ns = (uint64_t)(ut + st) * (1000000000ull / (uint64_t)tck);
	return 0;
}
