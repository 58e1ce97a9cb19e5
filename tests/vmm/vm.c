// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Creating and destroying tinyvmm's VMs and vCPUs.
 *
 * File descriptors are opened in a fixed order, VM fd, VM stats fd, then
 * for each vCPU its fd and its stats fd, so that a reader of /proc/PID/fd
 * sees them grouped per VM exactly as QEMU 8.1+ leaves them.  Nothing here
 * opens any other fd (guest memory is anonymous) to keep that grouping
 * intact; with --memfd the RAM's memfd comes just before its VM's fd, as
 * QEMU opens its memory backends before its accelerator.
 */
#define _GNU_SOURCE	/* POSIX and Linux interfaces, even with -std=c11 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tinyvmm.h"

int kvm_open(struct tinyvmm *t)
{
	int r;

	t->kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (t->kvm_fd < 0)
		return tv_fail("open /dev/kvm: %m");

	r = ioctl(t->kvm_fd, KVM_GET_API_VERSION, 0);
	if (r != KVM_API_VERSION)
		return tv_fail("KVM_GET_API_VERSION: got %d, want %d", r,
			       KVM_API_VERSION);

	if (t->o.hold_stats &&
	    ioctl(t->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_BINARY_STATS_FD) <= 0)
		return tv_fail("KVM_CAP_BINARY_STATS_FD missing: this kernel has no stats fds");

	if (t->o.irqchip &&
	    ioctl(t->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_IRQCHIP) <= 0)
		return tv_fail("KVM_CAP_IRQCHIP missing: no in-kernel irqchip");

	t->run_size = ioctl(t->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (t->run_size < (int)sizeof(struct kvm_run))
		return tv_fail("KVM_GET_VCPU_MMAP_SIZE: %d: %m", t->run_size);
	return 0;
}

size_t vm_mem_size(const struct opts *o)
{
	return GUEST_BASE_SIZE + (size_t)o->vcpus * o->pages * PAGE_SIZE;
}

static int stats_fd_get(int fd, const char *what, unsigned int vm,
			unsigned int vcpu)
{
	int sfd = ioctl(fd, KVM_GET_STATS_FD, 0);

	if (sfd < 0)
		return tv_fail("KVM_GET_STATS_FD on %s (vm %u vcpu %u): %m",
			       what, vm, vcpu);
	return sfd;
}

static int vcpu_create(struct tinyvmm *t, struct vm *vm, struct vcpu *v)
{
	void *run;

	v->fd = ioctl(vm->fd, KVM_CREATE_VCPU, (unsigned long)v->index);
	if (v->fd < 0)
		return tv_fail("KVM_CREATE_VCPU (vm %u vcpu %u): %m",
			       vm->index, v->index);

	/* Before any KVM_RUN: the ioctl takes the vCPU mutex KVM_RUN holds. */
	if (t->o.hold_stats) {
		v->stats_fd = stats_fd_get(v->fd, "vcpu", vm->index, v->index);
		if (v->stats_fd < 0)
			return -1;
	}

	run = mmap(NULL, t->run_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		   v->fd, 0);
	if (run == MAP_FAILED)
		return tv_fail("mmap kvm_run (vm %u vcpu %u): %m", vm->index,
			       v->index);
	v->run = run;

	return guest_setup_vcpu(&t->o, v);
}

static int vm_memory(struct tinyvmm *t, struct vm *vm)
{
	struct kvm_userspace_memory_region region;
	void *mem;

	vm->mem_size = vm_mem_size(&t->o);
	if (vm->memfd >= 0 && ftruncate(vm->memfd, (off_t)vm->mem_size) < 0)
		return tv_fail("ftruncate memfd (vm %u): %m", vm->index);
	/* NORESERVE: a thousand idle VMs should cost only the pages they touch. */
	if (vm->memfd >= 0)
		mem = mmap(NULL, vm->mem_size, PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_NORESERVE, vm->memfd, 0);
	else
		mem = mmap(NULL, vm->mem_size, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem == MAP_FAILED)
		return tv_fail("mmap %zu bytes of guest memory (vm %u): %m",
			       vm->mem_size, vm->index);
	vm->mem = mem;

	memset(&region, 0, sizeof(region));
	region.slot = 0;
	region.guest_phys_addr = 0;
	region.memory_size = vm->mem_size;
	region.userspace_addr = (uintptr_t)mem;
	if (ioctl(vm->fd, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		return tv_fail("KVM_SET_USER_MEMORY_REGION (vm %u): %m",
			       vm->index);

	guest_load(&t->o, vm);
	return 0;
}

/*
 * Create one VM with its vCPUs.  On failure the caller still owns what
 * was created and releases it with vm_destroy().
 */
int vm_create(struct tinyvmm *t, struct vm *vm)
{
	unsigned int i;

	vm->fd = -1;
	vm->stats_fd = -1;
	vm->memfd = -1;
	vm->vcpus = calloc(t->o.vcpus, sizeof(*vm->vcpus));
	if (!vm->vcpus)
		return tv_fail("out of memory");
	for (i = 0; i < t->o.vcpus; i++) {
		vm->vcpus[i].vm = vm;
		vm->vcpus[i].index = i;
		vm->vcpus[i].fd = -1;
		vm->vcpus[i].stats_fd = -1;
	}

	if (t->o.memfd) {
		vm->memfd = memfd_create("tinyvmm-ram", MFD_CLOEXEC);
		if (vm->memfd < 0)
			return tv_fail("memfd_create (vm %u): %m", vm->index);
	}

	vm->fd = ioctl(t->kvm_fd, KVM_CREATE_VM, 0);
	if (vm->fd < 0)
		return tv_fail("KVM_CREATE_VM (vm %u): %m", vm->index);

	if (t->o.hold_stats) {
		vm->stats_fd = stats_fd_get(vm->fd, "vm", vm->index, 0);
		if (vm->stats_fd < 0)
			return -1;
	}

	/* The irqchip has to exist before the vCPUs that get a LAPIC. */
	if (t->o.irqchip && ioctl(vm->fd, KVM_CREATE_IRQCHIP, 0) < 0)
		return tv_fail("KVM_CREATE_IRQCHIP (vm %u): %m", vm->index);

	if (vm_memory(t, vm) < 0)
		return -1;

	for (i = 0; i < t->o.vcpus; i++) {
		if (vcpu_create(t, vm, &vm->vcpus[i]) < 0)
			return -1;
	}
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void vm_destroy(struct tinyvmm *t, struct vm *vm)
{
	unsigned int i;

	for (i = 0; vm->vcpus && i < t->o.vcpus; i++) {
		struct vcpu *v = &vm->vcpus[i];

		if (v->run)
			munmap(v->run, t->run_size);
		v->run = NULL;
		close_fd(&v->stats_fd);
		close_fd(&v->fd);
	}
	free(vm->vcpus);
	vm->vcpus = NULL;
	close_fd(&vm->stats_fd);
	close_fd(&vm->fd);
	if (vm->mem)
		munmap(vm->mem, vm->mem_size);
	vm->mem = NULL;
	close_fd(&vm->memfd);
	free(vm->saved);
	vm->saved = NULL;
}

/* --churn-ms: keep the RAM as it is now, to give it back each time. */
int vm_churn_save(struct vm *vm)
{
	vm->saved = malloc(vm->mem_size);
	if (!vm->saved)
		return tv_fail("out of memory");
	memcpy(vm->saved, vm->mem, vm->mem_size);
	return 0;
}

static bool page_is_zero(const uint8_t *p)
{
	for (size_t i = 0; i < PAGE_SIZE; i++)
		if (p[i])
			return false;
	return true;
}

/*
 * Take the RAM away as a VMM that shrinks its memfd does: every page
 * goes, and a reader that loads from a mapping of the file past its end
 * gets SIGBUS. Giving it back writes the data pages again (zero pages
 * stay holes), so that a reader finds the same data each time it is
 * there.
 */
int vm_churn(struct vm *vm, bool away)
{
	if (away) {
		if (ftruncate(vm->memfd, 0) < 0)
			return tv_fail("ftruncate memfd to 0 (vm %u): %m", vm->index);
		return 0;
	}
	if (ftruncate(vm->memfd, (off_t)vm->mem_size) < 0)
		return tv_fail("ftruncate memfd back (vm %u): %m", vm->index);
	for (size_t off = 0; off < vm->mem_size; off += PAGE_SIZE)
		if (!page_is_zero(vm->saved + off))
			memcpy(vm->mem + off, vm->saved + off, PAGE_SIZE);
	return 0;
}
