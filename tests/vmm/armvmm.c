// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * armvmm: the smallest arm64 VMM that makes KVM count something, for the
 * arm64 lab (tests/lab/kvmlab --arch arm64). One VM, 1-8 vCPUs; every
 * vCPU runs, from the same page, at EL1 with the MMU off:
 *
 *   loop: hvc #0        a PSCI call KVM answers itself: hvc_exit_stat
 *         wfi           KVM blocks the vCPU until a kick: wfi_exit_stat
 *         str x1, [x2]  x2 is in no memslot: an exit to us
 *                       (KVM_EXIT_MMIO): mmio_exit_user
 *         b loop
 *
 * With no interrupt controller nothing would end a WFI: the main thread
 * kicks every vCPU thread with SIGUSR1 every millisecond (KVM_RUN returns
 * EINTR: signal_exits), and the vCPU enters KVM_RUN again.
 * The VMM holds a KVM_GET_STATS_FD fd for the VM and each vCPU, as QEMU
 * 8.1 and later do, so that tools find them in /proc/PID/fd.
 *
 * Usage: armvmm [--vcpus N] [--loops N] [--ready FILE] [--timeout S]
 * It writes FILE (its pid) once every vCPU went round its loop N times
 * (default 100), and exits 0 after S seconds (default 600), on SIGTERM or
 * SIGINT. Plain libc and <linux/kvm.h>; arm64 only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef __aarch64__
#error "armvmm runs arm64 guests: build it for arm64"
#endif

#define MAX_VCPUS 8
#define CODE_GPA 0x40000000UL /* the guest's one memslot */
#define CODE_SIZE 0x10000UL
#define MMIO_GPA 0x10000000UL /* in no memslot: a write there exits */

static const uint32_t guest_code[] = {
	0xd4000002, /* hvc #0 */
	0xd503207f, /* wfi */
	0xf9000041, /* str x1, [x2] */
	0x17fffffd, /* b .-12 */
};

struct vcpu {
	pthread_t thread;
	int fd;
	int stats_fd;
	struct kvm_run *run;
	unsigned long loops; /* MMIO exits: one per loop */
};

static struct vcpu vcpus[MAX_VCPUS];
static volatile sig_atomic_t stop;

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "armvmm: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, ": %s\n", strerror(errno));
	va_end(ap);
	exit(1);
}

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

static void on_kick(int sig)
{
	(void)sig;
}

/* Set a 64-bit core register (x0-x30, pc) of a vCPU. */
static void set_core_reg(int fd, uint64_t off, uint64_t val)
{
	struct kvm_one_reg reg = {
		.id = KVM_REG_ARM64 | KVM_REG_SIZE_U64 | KVM_REG_ARM_CORE |
		      (off / sizeof(uint32_t)),
		.addr = (uint64_t)(uintptr_t)&val,
	};

	if (ioctl(fd, KVM_SET_ONE_REG, &reg) < 0)
		die("KVM_SET_ONE_REG");
}

static void *vcpu_loop(void *arg)
{
	struct vcpu *v = arg;

	while (!stop) {
		if (ioctl(v->fd, KVM_RUN, 0) < 0) {
			if (errno == EINTR)
				continue; /* a kick: run again */
			die("KVM_RUN");
		}
		if (v->run->exit_reason != KVM_EXIT_MMIO) {
			errno = 0;
			die("unexpected exit %u", v->run->exit_reason);
		}
		/* The write is dropped; KVM moves past the str on the next run.
		 */
		__atomic_add_fetch(&v->loops, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void add_vcpu(int kvm, int vm, unsigned int i,
		     struct kvm_vcpu_init *init)
{
	struct vcpu *v = &vcpus[i];
	int size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);

	v->fd = ioctl(vm, KVM_CREATE_VCPU, i);
	if (v->fd < 0 || size < 0)
		die("KVM_CREATE_VCPU %u", i);
	v->run = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, v->fd, 0);
	if (v->run == MAP_FAILED)
		die("mmap kvm_run");
	if (ioctl(v->fd, KVM_ARM_VCPU_INIT, init) < 0)
		die("KVM_ARM_VCPU_INIT");
	set_core_reg(v->fd, offsetof(struct kvm_regs, regs.pc), CODE_GPA);
	set_core_reg(v->fd, offsetof(struct kvm_regs, regs.regs[1]), i);
	set_core_reg(v->fd, offsetof(struct kvm_regs, regs.regs[2]), MMIO_GPA);
	v->stats_fd = ioctl(v->fd, KVM_GET_STATS_FD, 0);
	if (v->stats_fd < 0)
		die("KVM_GET_STATS_FD (vCPU %u)", i);
}

static int make_vm(int kvm)
{
	struct kvm_userspace_memory_region slot = {
		.guest_phys_addr = CODE_GPA,
		.memory_size = CODE_SIZE,
	};
	void *mem;
	int vm = ioctl(kvm, KVM_CREATE_VM, 0);

	if (vm < 0)
		die("KVM_CREATE_VM");
	mem = mmap(NULL, CODE_SIZE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		die("mmap guest memory");
	memcpy(mem, guest_code, sizeof(guest_code));
	slot.userspace_addr = (uint64_t)(uintptr_t)mem;
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &slot) < 0)
		die("KVM_SET_USER_MEMORY_REGION");
	return vm;
}

static int all_looped(unsigned int n, unsigned long loops)
{
	for (unsigned int i = 0; i < n; i++)
		if (__atomic_load_n(&vcpus[i].loops, __ATOMIC_RELAXED) < loops)
			return 0;
	return 1;
}

static void write_ready(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f))
		die("cannot write %s", path);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: armvmm [--vcpus 1-%d] [--loops N] [--ready FILE] "
		"[--timeout S]\n",
		MAX_VCPUS);
	exit(2);
}

int main(int argc, char **argv)
{
	unsigned long n = 1, loops = 100, timeout = 600;
	const char *ready = NULL;
	struct kvm_vcpu_init init;
	struct timespec kick = {0, 1000000}, t0, t;
	struct sigaction sa = {.sa_handler = on_kick};
	int kvm, vm, vm_stats;

	for (int i = 1; i < argc; i++) {
		if (i + 1 == argc)
			usage();
		if (!strcmp(argv[i], "--vcpus"))
			n = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--loops"))
			loops = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--ready"))
			ready = argv[++i];
		else if (!strcmp(argv[i], "--timeout"))
			timeout = strtoul(argv[++i], NULL, 0);
		else
			usage();
	}
	if (n < 1 || n > MAX_VCPUS)
		usage();

	/* No SA_RESTART: a kick must end KVM_RUN with EINTR. */
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0)
		die("/dev/kvm");
	vm = make_vm(kvm);
	vm_stats = ioctl(vm, KVM_GET_STATS_FD, 0);
	if (vm_stats < 0)
		die("KVM_GET_STATS_FD (VM)");
	/* The host's own CPU type, with PSCI 0.2 (what QEMU asks for). */
	if (ioctl(vm, KVM_ARM_PREFERRED_TARGET, &init) < 0)
		die("KVM_ARM_PREFERRED_TARGET");
	init.features[0] |= 1u << KVM_ARM_VCPU_PSCI_0_2;
	for (unsigned int i = 0; i < n; i++)
		add_vcpu(kvm, vm, i, &init);
	for (unsigned int i = 0; i < n; i++)
		if (pthread_create(&vcpus[i].thread, NULL, vcpu_loop,
				   &vcpus[i]))
			die("pthread_create");

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (t = t0;
	     !stop && (unsigned long)(t.tv_sec - t0.tv_sec) < timeout;) {
		nanosleep(&kick, NULL);
		for (unsigned int i = 0; i < n; i++)
			pthread_kill(vcpus[i].thread, SIGUSR1);
		if (ready && all_looped(n, loops)) {
			write_ready(ready);
			ready = NULL;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	}
	stop = 1;
	for (unsigned int i = 0; i < n; i++) {
		/* Kick until it is out: a kick may come before its WFI. */
		while (pthread_tryjoin_np(vcpus[i].thread, NULL) == EBUSY) {
			pthread_kill(vcpus[i].thread, SIGUSR1);
			nanosleep(&kick, NULL);
		}
		fprintf(stderr, "armvmm: vCPU %u: %lu loops\n", i,
			vcpus[i].loops);
	}
	return 0;
}
