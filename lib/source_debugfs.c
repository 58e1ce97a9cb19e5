// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The debugfs source: /sys/kernel/debug/kvm/PID-FD/, one directory per VM
 * (PID: the thread that created the VM, FD: the VM's fd number in it).
 *
 * It is the last resort, and it shows: one value per file in text, the
 * vCPU stats summed over every vCPU of the VM, a histogram reduced to its
 * bucket 0 (the file reads the first u64 of the stat), and, on a kernel
 * that is locked down, every file that is writable (cumulative, peak and
 * histogram stats: writing 0 resets them) refused with EPERM. So:
 *
 *  - a VM gets two readers: the VM stats, with this kernel's own VM
 *    descriptors (so the schema is the one an fd of the VM has), and one
 *    pseudo-vCPU of index -1 and id "kvm-PID/vcpu-sum" with the vCPU
 *    stats summed over the vCPUs;
 *  - in the sum, booleans become counts (how many vCPUs are blocking),
 *    histograms are always unavailable, and bucket 0 of each is a stat of
 *    its own, NAME_bucket0, so that it is never mistaken for the whole;
 *  - a stat without a file, or whose file the kernel refuses, is missing
 *    (kvmstats_reader__missing()), never 0.
 *
 * The names are all debugfs knows. Types, units and which stats are VM or
 * vCPU stats come from this kernel's binary descriptors, read once from a
 * VM and vCPU this process creates and closes at once. Without /dev/kvm the
 * VM reader gets every file, as instant (mode 0444, which the kernel gives
 * only to instant stats) or of unknown type, and there is no vCPU sum.
 *
 * Mounting debugfs is the administrator's choice: this source never does.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "internal.h"

#define DEBUGFS_MAGIC 0x64626720
#define DEBUGFS_PATH "/sys/kernel/debug"
#define KVMIO 0xAE
#define KS_KVM_CREATE_VM _IO(KVMIO, 0x01)
#define KS_KVM_CREATE_VCPU _IO(KVMIO, 0x41)
#define KS_KVM_GET_STATS_FD _IO(KVMIO, 0xce)

/* A type value no kernel uses: "unknown" for files we cannot place. */
#define TYPE_UNKNOWN 0xf
#define BUCKET0 "_bucket0"

/* ---- this kernel's descriptors, from a throwaway VM ---- */

/* Parse the image of a fresh stats fd of @fd (a VM or vCPU). */
static struct kvmstats_schema *schema_of(struct kvmstats_ctx *ctx, int fd,
					 int *err)
{
	struct kvmstats_schema *s = NULL;
	unsigned char *img = NULL;
	size_t len;
	int sfd = ioctl(fd, KS_KVM_GET_STATS_FD, NULL);

	if (sfd < 0) {
		*err = -errno;
		return NULL;
	}
	*err = ks_read_all_fd(sfd, &img, &len);
	close(sfd);
	if (*err)
		return NULL;
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	if (!s)
		*err = -errno;
	free(img);
	return s;
}

static int learn_kernel(struct kvmstats_ctx *ctx, struct kvmstats_schema *out[2])
{
	int kvm, vm = -1, vcpu = -1, err = 0;

	kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0)
		return -errno;
	vm = ioctl(kvm, KS_KVM_CREATE_VM, 0);
	if (vm < 0) {
		err = -errno;
		goto out;
	}
	vcpu = ioctl(vm, KS_KVM_CREATE_VCPU, 0);
	if (vcpu < 0) {
		err = -errno;
		goto out;
	}
	out[0] = schema_of(ctx, vm, &err);
	if (out[0])
		out[1] = schema_of(ctx, vcpu, &err);
	if (!out[1]) {
		kvmstats_schema__put(out[0]);
		out[0] = NULL;
	}
out:
	if (vcpu >= 0)
		close(vcpu);
	if (vm >= 0)
		close(vm);
	close(kvm);
	return err;
}

/* What @ctx knows of the kernel's schemas: 0 (*err set: the schemas,
 * or why they could not be learnt) or -ENOENT (not looked for yet). */
static int kernel_cached(struct kvmstats_ctx *ctx, struct kvmstats_schema **vm,
			 struct kvmstats_schema **vcpu, int *err)
{
	int ret = 0;

	if (!ctx)
		return -ENOENT;
	ks_ctx_lock(ctx);
	*err = ctx->kernel_err;
	if (!*err && ctx->kernel_schema[0]) {
		*vm = kvmstats_schema__get(ctx->kernel_schema[0]);
		*vcpu = kvmstats_schema__get(ctx->kernel_schema[1]);
	} else if (!*err) {
		ret = -ENOENT;
	}
	ks_ctx_unlock(ctx);
	return ret;
}

int ks_kernel_schemas(struct kvmstats_ctx *ctx, struct kvmstats_schema **vm,
		      struct kvmstats_schema **vcpu)
{
	struct kvmstats_schema *s[2] = { NULL, NULL };
	int err;

	if (!kernel_cached(ctx, vm, vcpu, &err))
		return err;
	/* Learnt outside the lock: two threads may both learn, the first
	 * to finish is cached. */
	err = learn_kernel(ctx, s);
	ks_ctx_lock(ctx);
	if (ctx && err && !ctx->kernel_err)
		ctx->kernel_err = err;
	if (ctx && !err && !ctx->kernel_schema[0]) {
		ctx->kernel_schema[0] = kvmstats_schema__get(s[0]);
		ctx->kernel_schema[1] = kvmstats_schema__get(s[1]);
	}
	ks_ctx_unlock(ctx);
	if (err)
		return err;
	*vm = s[0];
	*vcpu = s[1];
	return 0;
}

/* ---- where debugfs is, and each VM's directory in it ---- */

/* The "kvm" directory of debugfs, wherever it is mounted (usually
 * /sys/kernel/debug). -ENODEV when debugfs is not mounted. */
static int kvm_dir_path(char *buf, size_t len)
{
	struct mntent ent, *m;
	char line[1024];
	struct statfs sf;
	FILE *f;
	int err = -ENODEV;

	if (!statfs(DEBUGFS_PATH, &sf) && sf.f_type == DEBUGFS_MAGIC) {
		snprintf(buf, len, "%s/kvm", DEBUGFS_PATH);
		return 0;
	}
	f = setmntent("/proc/self/mounts", "re");
	if (!f)
		return -ENODEV;
	while ((m = getmntent_r(f, &ent, line, sizeof(line)))) {
		if (strcmp(m->mnt_type, "debugfs"))
			continue;
		snprintf(buf, len, "%s/kvm", m->mnt_dir);
		err = 0;
		break;
	}
	endmntent(f);
	return err;
}

static int open_kvm_dir(char *why, size_t why_sz)
{
	char path[512];
	int fd, err = kvm_dir_path(path, sizeof(path));

	if (err) {
		ks_err(why, why_sz, "debugfs is not mounted (mounting it is the "
		       "administrator's choice: mount -t debugfs none %s)",
		       DEBUGFS_PATH);
		return err;
	}
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		ks_err(why, why_sz, "%s: %s%s", path, strerror(-err),
		       err == -ENOENT ? " (is the kvm module loaded?)" :
		       err == -EACCES ? " (debugfs is readable by root only)" : "");
	}
	return fd < 0 ? err : fd;
}

/* The directory of the VM that @pid holds as fd @fd: "PID-FD" when the
 * main thread created the VM (QEMU, most VMMs), else "TID-FD" for the
 * thread that did. Returns a directory fd and the creator in *tid. */
static int vm_dirfd(int kvmdir, pid_t pid, int fd, pid_t *tid)
{
	char name[64], path[64];
	struct dirent *de;
	DIR *tasks;
	int dfd;

	snprintf(name, sizeof(name), "%d-%d", (int)pid, fd);
	dfd = openat(kvmdir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0 || errno != ENOENT) {
		*tid = pid;
		return dfd < 0 ? -errno : dfd;
	}
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	tasks = opendir(path);
	if (!tasks)
		return -ENOENT;
	dfd = -ENOENT;
	while ((de = readdir(tasks)) && dfd < 0) {
		int t = atoi(de->d_name);

		if (t <= 0 || t == pid)
			continue;
		snprintf(name, sizeof(name), "%d-%d", t, fd);
		dfd = openat(kvmdir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0)
			*tid = t;
		else
			dfd = -errno;
	}
	closedir(tasks);
	return dfd;
}

/* ---- reading one value ---- */

static int read_u64(int dirfd, const char *name, uint64_t *val)
{
	char buf[32], *end;
	ssize_t n;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	errno = 0;
	*val = strtoull(buf, &end, 10);
	if (end == buf || errno || (*end && *end != '\n'))
		return -EINVAL;
	return 0;
}

/* ---- readers ---- */

/* One file that fills one u64 of the data block. */
struct dfs_file {
	uint32_t word;		/* index of the u64 in the data block */
	uint32_t stat;		/* the stat it fills (missing bitmap) */
	char name[KS_ABI_NAME_SIZE];
};

struct dfs_reader {
	int dirfd;
	size_t mask_words;
	uint64_t *absent;	/* stats no file gives: missing at every read */
	size_t nfiles, cap;
	struct dfs_file *files;
};

static void set_bit64(uint64_t *map, uint32_t i)
{
	map[i / 64] |= 1ull << (i % 64);
}

static int dfs_read(void *priv, struct kvmstats_sample *smp, uint64_t *missing)
{
	struct dfs_reader *d = priv;
	size_t gone = 0;

	memset(smp->data, 0, smp->size);
	memcpy(missing, d->absent, d->mask_words * 8);
	for (size_t i = 0; i < d->nfiles; i++) {
		const struct dfs_file *f = &d->files[i];
		int err = read_u64(d->dirfd, f->name, &smp->data[f->word]);

		if (!err)
			continue;
		smp->data[f->word] = 0;
		set_bit64(missing, f->stat);
		gone += err == -ENOENT;
	}
	/* Every file gone: the VM was destroyed. */
	return d->nfiles && gone == d->nfiles ? -ENOENT : 0;
}

static void dfs_close(void *priv)
{
	struct dfs_reader *d = priv;

	if (!d)
		return;
	if (d->dirfd >= 0)
		close(d->dirfd);
	free(d->absent);
	free(d->files);
	free(d);
}

static const struct kvmstats_reader_ops dfs_ops = {
	.source = "debugfs",
	.read = dfs_read,
	.close = dfs_close,
};

static struct dfs_reader *dfs_new(int dirfd, const struct kvmstats_schema *s)
{
	struct dfs_reader *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	d->mask_words = (kvmstats_schema__num_stats(s) + 63) / 64;
	d->absent = calloc(d->mask_words ? d->mask_words : 1, 8);
	if (d->dirfd < 0 || !d->absent) {
		dfs_close(d);
		return NULL;
	}
	return d;
}

/* Stat @st is filled from file @name when the kernel lets us read it now;
 * a refused or absent file makes it missing for good (lockdown is never
 * lifted while the system runs). */
static int dfs_map(struct dfs_reader *d, const struct kvmstats_stat *st,
		   const char *name)
{
	uint32_t idx = kvmstats_stat__index(st);
	uint64_t val;
	void *p;

	if (strlen(name) >= KS_ABI_NAME_SIZE || read_u64(d->dirfd, name, &val)) {
		set_bit64(d->absent, idx);
		return 0;
	}
	if (d->nfiles == d->cap) {
		d->cap = d->cap ? 2 * d->cap : 16;
		p = realloc(d->files, d->cap * sizeof(*d->files));
		if (!p)
			return -ENOMEM;
		d->files = p;
	}
	d->files[d->nfiles].word = kvmstats_stat__offset(st) / 8;
	d->files[d->nfiles].stat = idx;
	strcpy(d->files[d->nfiles].name, name);
	d->nfiles++;
	return 0;
}

static bool is_hist(unsigned int type)
{
	return type == KVMSTATS_TYPE_LOG_HIST || type == KVMSTATS_TYPE_LINEAR_HIST;
}

/* Map every stat of @s to its file; NAME_bucket0 reads NAME's file and
 * histograms have none. */
static int dfs_map_all(struct dfs_reader *d, const struct kvmstats_schema *s)
{
	const struct kvmstats_stat *st;
	char file[KS_ABI_NAME_SIZE];
	int err = 0;

	kvmstats_schema__for_each(st, s) {
		const char *name = kvmstats_stat__name(st);
		size_t len = strlen(name), blen = strlen(BUCKET0);

		if (is_hist(kvmstats_stat__type(st))) {
			set_bit64(d->absent, kvmstats_stat__index(st));
			continue;
		}
		snprintf(file, sizeof(file), "%s", name);
		if (len > blen && !strcmp(name + len - blen, BUCKET0))
			file[len - blen] = 0;
		err = dfs_map(d, st, file);
		if (err)
			break;
	}
	return err;
}

static struct kvmstats_reader *open_reader(struct kvmstats_schema *s,
					   int dirfd, const char *id)
{
	struct dfs_reader *d = dfs_new(dirfd, s);
	struct kvmstats_reader *r = NULL;

	if (!d || dfs_map_all(d, s))
		goto err;
	r = kvmstats_reader__open_ops(s, &dfs_ops, d);
	if (!r)
		goto err;
	if (ks_reader_set_id(r, id)) {
		kvmstats_reader__close(r);	/* closes d */
		return NULL;
	}
	return r;
err:
	dfs_close(d);
	return NULL;
}

/* ---- schemas ---- */

static struct kvmstats_schema *encode_parse(struct kvmstats_ctx *ctx,
					    const struct kvmstats_encode_desc *d,
					    size_t n)
{
	struct kvmstats_schema *s;
	size_t len;
	void *img = kvmstats_image__encode("kvm-debugfs", d, n, NULL, &len, NULL);

	if (!img)
		return NULL;
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	free(img);
	return s;
}

/* The vCPU sum: this kernel's vCPU descriptors, with booleans turned
 * into counts, and a NAME_bucket0 counter after the others for each
 * histogram (whose own stat stays, always missing). */
static struct kvmstats_schema *sum_schema(struct kvmstats_ctx *ctx,
					  const struct kvmstats_schema *vcpu)
{
	uint32_t n = kvmstats_schema__num_stats(vcpu), k = n;
	struct kvmstats_encode_desc *d = calloc(2 * (size_t)n + 1, sizeof(*d));
	char (*names)[KS_ABI_NAME_SIZE] = calloc((size_t)n + 1, sizeof(*names));
	struct kvmstats_schema *s = NULL;

	if (!d || !names)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		const struct kvmstats_stat *st = kvmstats_schema__stat(vcpu, i);
		unsigned int type = kvmstats_stat__type(st);
		unsigned int unit = kvmstats_stat__unit(st);

		if (unit == KVMSTATS_UNIT_BOOLEAN)
			unit = KVMSTATS_UNIT_NONE;
		d[i] = (struct kvmstats_encode_desc){
			.name = kvmstats_stat__name(st),
			.flags = KVMSTATS_FLAGS(type, unit, kvmstats_stat__base(st)),
			.exponent = (int16_t)kvmstats_stat__exponent(st),
			.size = (uint16_t)kvmstats_stat__size(st),
			.bucket_size = kvmstats_stat__bucket_size(st),
		};
		if (!is_hist(type) || strlen(d[i].name) + strlen(BUCKET0) >=
					      KS_ABI_NAME_SIZE)
			continue;
		snprintf(names[i], sizeof(names[i]), "%s%s", d[i].name, BUCKET0);
		d[k++] = (struct kvmstats_encode_desc){
			.name = names[i],
			.flags = KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE,
						KVMSTATS_UNIT_NONE,
						KVMSTATS_BASE_POW10),
		};
	}
	s = encode_parse(ctx, d, k);
out:
	free(d);
	free(names);
	return s;
}

/* Files the kernel puts in a VM's directory that are not stats. */
static bool not_a_stat(const char *name)
{
	return !strcmp(name, "mmu_rmaps_stat");
}

/* Without the kernel's descriptors: every file of the VM's directory, as
 * an instant stat when the kernel made it read-only, else of unknown type.
 * VM and vCPU stats cannot be told apart, so all go to the VM. */
static struct kvmstats_schema *fallback_schema(int dirfd)
{
	struct kvmstats_encode_desc *d = NULL;
	char (*names)[KS_ABI_NAME_SIZE] = NULL;
	struct kvmstats_schema *s = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	struct stat sb;
	int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while ((de = readdir(dir))) {
		if (fstatat(dirfd, de->d_name, &sb, 0) || !S_ISREG(sb.st_mode) ||
		    not_a_stat(de->d_name) || strlen(de->d_name) >= KS_ABI_NAME_SIZE)
			continue;
		if (n == cap) {
			void *p1, *p2;

			cap = cap ? 2 * cap : 64;
			p1 = realloc(d, cap * sizeof(*d));
			if (p1)
				d = p1;
			p2 = realloc(names, cap * sizeof(*names));
			if (p2)
				names = p2;
			if (!p1 || !p2)
				goto out;
		}
		strcpy(names[n], de->d_name);	/* length checked above */
		d[n].flags = KVMSTATS_FLAGS((sb.st_mode & 0222) ? TYPE_UNKNOWN :
					    KVMSTATS_TYPE_INSTANT,
					    KVMSTATS_UNIT_NONE, KVMSTATS_BASE_POW10);
		d[n].exponent = 0;
		d[n].size = 1;
		d[n].bucket_size = 0;
		n++;
	}
	for (size_t i = 0; i < n; i++)
		d[i].name = names[i];
	/* Parsed outside the context, whose log would get one "unknown
	 * type" warning per file, which tells the user nothing; the cost is
	 * a schema per VM instead of one shared. */
	if (n)
		s = encode_parse(NULL, d, n);
out:
	closedir(dir);
	free(d);
	free(names);
	return s;
}

/* ---- the source ---- */

static bool debugfs_probe(const struct ks_source_args *a, pid_t pid)
{
	struct kvmstats_proc_fd *fds = NULL;
	int kvmdir = open_kvm_dir(NULL, 0), n;
	bool found = false;

	(void)a;
	if (kvmdir < 0)
		return false;
	n = kvmstats_proc__kvm_fds(pid, &fds);
	for (int i = 0; i < n && !found; i++) {
		pid_t tid;
		int dfd;

		if (fds[i].kind != KVMSTATS_FD_VM)
			continue;
		dfd = vm_dirfd(kvmdir, pid, fds[i].fd, &tid);
		found = dfd >= 0;
		if (found)
			close(dfd);
	}
	free(fds);
	close(kvmdir);
	return found;
}

/* Add the VM whose directory is @dirfd (created by thread @tid). */
static int add_vm(const struct ks_source_args *a, struct kvmstats_vmm *v,
		  int dirfd, pid_t tid, int vm_fd)
{
	struct kvmstats_schema *kvm = NULL, *vcpu = NULL, *sum = NULL, *vms;
	struct kvmstats_reader *r = NULL, *rs = NULL;
	struct kvmstats_vm *vm;
	char id[KS_ABI_NAME_SIZE];
	int err = -ENOMEM;

	if (ks_kernel_schemas(a->ctx, &kvm, &vcpu)) {
		ks_log(a->ctx, KVMSTATS_LOG_INFO, "debugfs: no /dev/kvm to learn "
		       "the stats' types from: all files go to the VM, untyped");
		vms = fallback_schema(dirfd);
	} else {
		vms = kvm;
		sum = sum_schema(a->ctx, vcpu);
		if (!sum)
			goto out;
	}
	if (!vms)
		goto out;
	snprintf(id, sizeof(id), "kvm-%d", (int)tid);
	r = open_reader(vms, dirfd, id);
	if (!r)
		goto out;
	/* The VM stats only: another source reads the vCPUs. */
	if (sum && !a->vm_only) {
		snprintf(id, sizeof(id), "kvm-%d/vcpu-sum", (int)tid);
		rs = open_reader(sum, dirfd, id);
		if (!rs)
			goto out;
	}
	vm = ks_vmm_vm_of_fd(v, vm_fd);
	if (vm)
		vm->r = r;
	else
		vm = kvmstats_vmm__add_vm(v, r);
	if (!vm)
		goto out;
	r = NULL;
	vm->vm_fd = vm_fd;
	if (rs && ks_vm_add_vcpu(vm, -1, -1, rs))
		goto out;
	rs = NULL;
	err = 0;
out:
	kvmstats_reader__close(r);
	kvmstats_reader__close(rs);
	if (vms != kvm)
		kvmstats_schema__put(vms);
	kvmstats_schema__put(kvm);
	kvmstats_schema__put(vcpu);
	kvmstats_schema__put(sum);
	return err;
}

/* Is the VM of KVM VM fd @vm_fd read already? */
static bool have_vm(const struct kvmstats_vmm *v, int vm_fd)
{
	const struct kvmstats_vm *vm = ks_vmm_vm_of_fd(v, vm_fd);

	return vm && vm->r;
}

/* Add the VMs of @v that have a directory and no reader yet; returns how
 * many, or -errno with a reason. */
static int add_vms(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	struct kvmstats_proc_fd *fds = NULL;
	int kvmdir, n, added = 0, err = 0;

	kvmdir = open_kvm_dir(a->errbuf, a->errbuf_sz);
	if (kvmdir < 0)
		return kvmdir;
	n = kvmstats_proc__kvm_fds(v->pid, &fds);
	if (n < 0) {
		ks_err(a->errbuf, a->errbuf_sz, "%s", strerror(-n));
		close(kvmdir);
		return n;
	}
	for (int i = 0; i < n && !err; i++) {
		pid_t tid = v->pid;
		int dfd;

		if (fds[i].kind != KVMSTATS_FD_VM || have_vm(v, fds[i].fd))
			continue;
		dfd = vm_dirfd(kvmdir, v->pid, fds[i].fd, &tid);
		if (dfd < 0)
			continue;	/* closed since we listed it */
		err = add_vm(a, v, dfd, tid, fds[i].fd);
		close(dfd);
		added += !err;
	}
	free(fds);
	close(kvmdir);
	if (err) {
		ks_err(a->errbuf, a->errbuf_sz, "debugfs: %s", strerror(-err));
		return err;
	}
	return added;
}

static int debugfs_open(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	int n = add_vms(a, v);

	if (n < 0)
		return n;
	if (!n) {
		ks_err(a->errbuf, a->errbuf_sz, "no VM of pid %d has a directory "
		       "in debugfs's kvm/ (not a KVM VMM?)", (int)v->pid);
		return -ENOENT;
	}
	return 0;
}

/* New VMs of the VMM; hot-added vCPUs are in the sum already. */
static int debugfs_refresh(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	return add_vms(a, v);
}

const struct ks_source ks_source_debugfs = {
	.name = "debugfs",
	.probe = debugfs_probe,
	.open = debugfs_open,
	.refresh = debugfs_refresh,
	.vm_level = true,
};
