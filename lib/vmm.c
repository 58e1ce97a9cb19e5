// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * VMM processes and their VMs.
 *
 * A VMM that holds stats fds (QEMU 8.1+, our tiny VMM) lends them to us:
 * pidfd_getfd() duplicates each into this process, and from then on a
 * reading is a pread of our own fd, with no contact with the VMM. A stats
 * fd holds a reference on its VM, so the copies must be closed once the
 * VMM exits (the pidfd becomes readable) or the dead VM's memory stays
 * allocated in the kernel.
 */
#include <errno.h>
#include <linux/kcmp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif


struct kvmstats_vmm *kvmstats_vmm__new(pid_t pid, const char *name)
{
	struct kvmstats_vmm *v = calloc(1, sizeof(*v));

	if (!v)
		return NULL;
	v->pid = pid;
	v->pidfd = -1;
	v->source = "fd";
	snprintf(v->name, sizeof(v->name), "%s", name ? name : "");
	return v;
}

struct kvmstats_vm *kvmstats_vmm__add_vm(struct kvmstats_vmm *v,
					 struct kvmstats_reader *r)
{
	struct kvmstats_vm *vm;
	void *p = realloc(v->vms, (v->nvms + 1) * sizeof(*v->vms));

	if (!p)
		return NULL;
	v->vms = p;
	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return NULL;
	vm->vmm = v;
	vm->r = r;
	vm->remote_fd = -1;
	vm->vm_fd = -1;
	v->vms[v->nvms++] = vm;
	ks_host_changed(v->host);
	return vm;
}

int ks_vm_add_vcpu(struct kvmstats_vm *vm, int index, int remote_fd,
		   struct kvmstats_reader *r)
{
	/* Grown geometrically: a VM of thousands of vCPUs is built in
	 * linear time. */
	if (vm->nvcpus == vm->cap) {
		size_t cap = vm->cap ? vm->cap * 2 : 4;
		void *p = realloc(vm->vcpus, cap * sizeof(*vm->vcpus));

		if (!p)
			return -ENOMEM;
		vm->vcpus = p;
		vm->cap = cap;
	}
	vm->vcpus[vm->nvcpus++] = (struct ks_vcpu_slot){
		.index = index, .remote_fd = remote_fd, .r = r };
	ks_host_changed(vm->vmm ? vm->vmm->host : NULL);
	return 0;
}

int kvmstats_vm__add_vcpu(struct kvmstats_vm *vm, int index,
			  struct kvmstats_reader *r)
{
	return ks_vm_add_vcpu(vm, index, -1, r);
}

/* Has this VMM's fd number @fd already been taken? */
static bool taken(const struct kvmstats_vmm *v, int fd)
{
	for (size_t i = 0; i < v->nvms; i++) {
		const struct kvmstats_vm *vm = v->vms[i];

		if (vm->remote_fd == fd)
			return true;
		for (size_t j = 0; j < vm->nvcpus; j++)
			if (vm->vcpus[j].remote_fd == fd)
				return true;
	}
	return false;
}

void ks_vmm_set_priv(struct kvmstats_vmm *v, bool vm_only, void *priv,
		     void (*priv_free)(void *priv))
{
	if (vm_only) {
		v->vm_priv = priv;
		v->vm_priv_free = priv_free;
	} else {
		v->priv = priv;
		v->priv_free = priv_free;
	}
}

void ks_vm_free(struct kvmstats_vm *vm)
{
	kvmstats_reader__close(vm->r);
	for (size_t i = 0; i < vm->nvcpus; i++)
		kvmstats_reader__close(vm->vcpus[i].r);
	free(vm->vcpus);
	free(vm);
}

void kvmstats_vmm__close(struct kvmstats_vmm *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->nvms; i++)
		ks_vm_free(v->vms[i]);
	free(v->vms);
	if (v->pidfd >= 0)
		close(v->pidfd);
	if (v->priv_free)
		v->priv_free(v->priv);
	if (v->vm_priv_free)
		v->vm_priv_free(v->vm_priv);
	free(v);
}

/* Duplicate the VMM's fd @fd and open a reader on it; logs and skips an fd
 * that vanished or cannot be read. */
static struct kvmstats_reader *grab(struct kvmstats_ctx *ctx,
				    struct kvmstats_vmm *v, int fd, int vcpu)
{
	struct kvmstats_reader *r;
	char why[200] = "";
	int myfd = (int)syscall(__NR_pidfd_getfd, v->pidfd, fd, 0);

	if (myfd < 0) {
		ks_log(ctx, KVMSTATS_LOG_WARN, "pid %d fd %d: pidfd_getfd: %s",
		       (int)v->pid, fd, strerror(errno));
		return NULL;
	}
	/* Its other threads may have put another file there since. */
	if (ks_verify_stats_fd(myfd, vcpu, why, sizeof(why))) {
		ks_log(ctx, KVMSTATS_LOG_WARN, "pid %d fd %d: %s: not read",
		       (int)v->pid, fd, why);
		ks_drop_fd(myfd);
		return NULL;
	}
	r = kvmstats_reader__open_fd(ctx, myfd,
		&(struct kvmstats_reader_opts){
			.sz = sizeof(struct kvmstats_reader_opts),
			.flags = KVMSTATS_READER_OWN_FD,
			.errbuf = why, .errbuf_sz = sizeof(why) });
	if (!r) {
		ks_log(ctx, KVMSTATS_LOG_WARN, "pid %d fd %d: %s", (int)v->pid,
		       fd, why);
		close(myfd);
	}
	return r;
}

struct kvmstats_vm *ks_vmm_owner_vm(struct kvmstats_vmm *v, int fd)
{
	struct kvmstats_vm *best = NULL;

	for (size_t i = 0; i < v->nvms; i++)
		if (v->vms[i]->vm_fd >= 0 && v->vms[i]->vm_fd < fd &&
		    (!best || v->vms[i]->vm_fd > best->vm_fd))
			best = v->vms[i];
	if (!best && v->nvms)
		best = v->vms[0];
	return best;
}

struct kvmstats_vm *ks_vmm_vm_of_fd(const struct kvmstats_vmm *v, int vm_fd)
{
	for (size_t i = 0; i < v->nvms; i++)
		if (vm_fd >= 0 && v->vms[i]->vm_fd == vm_fd)
			return v->vms[i];
	return NULL;
}

/* The KVM VM fd a stats fd @fd belongs to: the last one before it in fd
 * order (a VMM creates the VM, then asks for its stats), else the first;
 * -1 when the VMM holds none. */
static int vm_fd_of(const struct kvmstats_proc_fd *fds, int n, int fd)
{
	int best = -1, first = -1;

	for (int i = 0; i < n; i++) {
		if (fds[i].kind != KVMSTATS_FD_VM)
			continue;
		if (first < 0)
			first = fds[i].fd;
		if (fds[i].fd < fd)
			best = fds[i].fd;
	}
	return best >= 0 ? best : first;
}

/* The VM of KVM VM fd @vm_fd, added (without a reader) when new. */
static struct kvmstats_vm *vm_slot(struct kvmstats_vmm *v, int vm_fd)
{
	struct kvmstats_vm *vm = ks_vmm_vm_of_fd(v, vm_fd);

	if (vm)
		return vm;
	/* No VM fd known: the VMM's one VM. */
	if (vm_fd < 0 && v->nvms)
		return v->vms[0];
	vm = kvmstats_vmm__add_vm(v, NULL);
	if (vm)
		vm->vm_fd = vm_fd;
	return vm;
}

/* Take the stats fds of @fds not taken yet: at open, every one; on a
 * refresh, those of hot-added vCPUs (and VMs). Each goes to the VM of
 * the KVM VM fd before it. Returns how many. */
static int take_fds(struct kvmstats_ctx *ctx, struct kvmstats_vmm *v,
		    const struct kvmstats_proc_fd *fds, int n)
{
	struct kvmstats_reader *r = NULL;
	struct kvmstats_vm *vm;
	int added = 0;

	for (int kind = 0; kind < 2; kind++) {
		for (int i = 0; i < n; i++) {
			const struct kvmstats_proc_fd *f = &fds[i];
			bool is_vm = f->kind == KVMSTATS_FD_VM_STATS;

			if ((!is_vm && f->kind != KVMSTATS_FD_VCPU_STATS) ||
			    is_vm != (kind == 0) || taken(v, f->fd))
				continue;
			vm = vm_slot(v, vm_fd_of(fds, n, f->fd));
			if (!vm)
				return -ENOMEM;
			/* A second VM stats fd of one VM: keep the first. */
			if (is_vm && vm->r)
				continue;
			r = grab(ctx, v, f->fd, is_vm ? -1 : f->index);
			if (!r)
				continue;
			if (is_vm) {
				vm->r = r;
				vm->remote_fd = f->fd;
			} else if (ks_vm_add_vcpu(vm, f->index, f->fd, r)) {
				kvmstats_reader__close(r);
				return -ENOMEM;
			} else {
				vm->vcpus[vm->nvcpus - 1].held = true;
			}
			added++;
		}
	}
	return added;
}

/* Is our copy @fd still the VMM's fd @remote, the same open file? kcmp
 * says so exactly (anon inodes all share one inode number); when it
 * cannot tell (no kcmp in this kernel), the copy is kept. */
static bool still_held(const struct kvmstats_vmm *v, int fd, int remote)
{
	long r = syscall(SYS_kcmp, getpid(), v->pid, KCMP_FILE, fd, remote);

	return r == 0 || (r < 0 && errno != EBADF);
}

/* Does the VMM still hold a KVM VM fd as @fd? */
static bool vm_fd_open(const struct kvmstats_vmm *v, int fd)
{
	char path[64], link[64];
	ssize_t n;

	if (fd < 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)v->pid, fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return false;
	link[n] = 0;
	return kvmstats_fd_kind(link, NULL) == KVMSTATS_FD_VM;
}

/* Drop our copies of stats fds the VMM closed: a VM it destroyed must not
 * be kept alive by us, and a new stats fd under a reused number must be
 * taken. A VM left without readers goes. */
static void drop_closed(struct kvmstats_vmm *v)
{
	size_t keep = 0;

	for (size_t i = 0; i < v->nvms; i++) {
		struct kvmstats_vm *vm = v->vms[i];
		size_t k = 0;

		for (size_t j = 0; j < vm->nvcpus; j++) {
			struct ks_vcpu_slot *c = &vm->vcpus[j];

			if (!c->held ||
			    still_held(v, kvmstats_reader__fd(c->r), c->remote_fd))
				vm->vcpus[k++] = *c;
			else
				kvmstats_reader__close(c->r);
		}
		vm->nvcpus = k;
		if (vm->r && vm->remote_fd >= 0 &&
		    !still_held(v, kvmstats_reader__fd(vm->r), vm->remote_fd)) {
			kvmstats_reader__close(vm->r);
			vm->r = NULL;
			vm->remote_fd = -1;
		}
		/* A VM whose KVM VM fd is still there stays, even without a
		 * reader: its VM stats may come from another source. */
		if (vm->r || vm->nvcpus || vm_fd_open(v, vm->vm_fd))
			v->vms[keep++] = vm;
		else
			ks_vm_free(vm);
	}
	v->nvms = keep;
}

int ks_vmm_take_held_fds(struct kvmstats_ctx *ctx, struct kvmstats_vmm *v)
{
	struct kvmstats_proc_fd *fds = NULL;
	int n;

	drop_closed(v);
	n = kvmstats_proc__kvm_fds(v->pid, &fds);
	if (n < 0)
		return n;
	n = take_fds(ctx, v, fds, n);
	free(fds);
	return n;
}

int ks_vmm_pidfd_open(struct kvmstats_vmm *v)
{
	v->pidfd = (int)syscall(__NR_pidfd_open, v->pid, 0);
	return v->pidfd < 0 ? -errno : 0;
}

struct kvmstats_vmm *kvmstats_vmm__open(struct kvmstats_ctx *ctx, pid_t pid,
					const struct kvmstats_vmm_opts *opts)
{
	struct kvmstats_vmm_opts o;
	struct kvmstats_vmm *v;
	int err = ks_opts_copy(&o, sizeof(o), opts);

	if (err) {
		errno = -err;
		return NULL;
	}
	v = kvmstats_vmm__new(pid, NULL);
	if (!v)
		return NULL;
	/* The pidfd first: it pins the process, so the fds listed after it
	 * belong to this process and not to one that reused the pid. */
	err = ks_vmm_pidfd_open(v);
	if (err) {
		ks_err(o.errbuf, o.errbuf_sz, "pid %d: pidfd_open: %s", (int)pid,
		       strerror(-err));
		goto err;
	}
	kvmstats_proc__name(pid, v->name, sizeof(v->name));
	err = ks_vmm_take_held_fds(ctx, v);
	if (err < 0) {
		ks_err(o.errbuf, o.errbuf_sz, "pid %d: %s", (int)pid, strerror(-err));
		goto err;
	}
	if (!v->nvms) {
		err = -ENOENT;
		ks_err(o.errbuf, o.errbuf_sz, "pid %d holds no readable KVM stats fd",
		       (int)pid);
		goto err;
	}
	return v;
err:
	kvmstats_vmm__close(v);
	errno = -err;
	return NULL;
}

pid_t kvmstats_vmm__pid(const struct kvmstats_vmm *v)
{
	return v->pid;
}

const char *kvmstats_vmm__name(const struct kvmstats_vmm *v)
{
	return v->name;
}

int kvmstats_vmm__pidfd(const struct kvmstats_vmm *v)
{
	return v->pidfd;
}

bool kvmstats_vmm__alive(const struct kvmstats_vmm *v)
{
	struct pollfd p = { .fd = v->pidfd, .events = POLLIN };

	if (v->pidfd < 0)
		return true;	/* not a process we watch (e.g. files) */
	return poll(&p, 1, 0) == 0;
}

size_t kvmstats_vmm__num_vms(const struct kvmstats_vmm *v)
{
	return v->nvms;
}

struct kvmstats_vm *kvmstats_vmm__vm(const struct kvmstats_vmm *v, size_t i)
{
	if (i >= v->nvms) {
		errno = ENOENT;
		return NULL;
	}
	return v->vms[i];
}

const char *kvmstats_vmm__source(const struct kvmstats_vmm *v)
{
	return v->source;
}

uint64_t kvmstats_vmm__uid(const struct kvmstats_vmm *v)
{
	return v->uid;
}

uint64_t kvmstats_vmm__memory_bytes(const struct kvmstats_vmm *v)
{
	return v->memory_bytes;
}

struct kvmstats_reader *kvmstats_vm__reader(const struct kvmstats_vm *vm)
{
	return vm->r;
}

const char *kvmstats_vm__source(const struct kvmstats_vm *vm,
				enum kvmstats_level level)
{
	bool has = level == KVMSTATS_LEVEL_VM ? vm->r != NULL : vm->nvcpus > 0;

	if ((unsigned int)level >= KS_LEVELS || !has)
		return NULL;
	if (vm->level_src[level])
		return vm->level_src[level];
	/* A VM built by the caller (kvmstats_vmm__add_vm()). */
	return vm->vmm ? vm->vmm->source : NULL;
}

const char *kvmstats_vm__why_none(const struct kvmstats_vm *vm,
				  enum kvmstats_level level)
{
	if ((unsigned int)level >= KS_LEVELS || kvmstats_vm__source(vm, level))
		return "";
	return vm->why_none[level];
}

size_t kvmstats_vm__num_vcpus(const struct kvmstats_vm *vm)
{
	return vm->nvcpus;
}

struct kvmstats_reader *kvmstats_vm__vcpu(const struct kvmstats_vm *vm,
					  size_t i, int *index)
{
	if (i >= vm->nvcpus) {
		errno = ENOENT;
		return NULL;
	}
	if (index)
		*index = vm->vcpus[i].index;
	return vm->vcpus[i].r;
}
