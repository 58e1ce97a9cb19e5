/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * tinyvmm: the smallest VMM that gives kvmstats real VMs to read.
 *
 * It creates VMs and vCPUs on /dev/kvm, optionally holds their binary stats
 * fds the way QEMU 8.1+ does, and runs a few bytes of hand-assembled guest
 * code whose exits, halts and page writes are known in advance, so tests can
 * assert on the counters KVM reports.
 */
#ifndef TINYVMM_H
#define TINYVMM_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/kvm.h>

/* Ports the guest talks to; all of them exit to user space. */
#define EXIT_PORT	0xe0	/* out: one counted exit */
#define CMD_PORT	0xe1	/* in: program done, VMM refills the mailbox */
#define DONE_PORT	0xe2	/* out: guest finished (used with an irqchip) */

/*
 * Guest physical layout, identical in real and protected mode so one VM
 * layout serves both; everything below GUEST_PAGES fits in the first
 * 64 KiB, the smallest VM the --no-run benchmarks create.
 */
#define GUEST_IDT	0x0000	/* 256 gates of 8 bytes (protected mode) */
#define GUEST_GDT	0x0800	/* null, flat code, flat data */
#define GUEST_CODE	0x1000	/* the guest program */
#define GUEST_MBOX	0x2000	/* one struct guest_mbox per vCPU */
#define GUEST_STACK	0x4000	/* STACK_SIZE bytes per vCPU, up to 0x8000 */
#define GUEST_PAGES	0x10000	/* pages the guest writes, per vCPU */
#define GUEST_BASE_SIZE	0x10000

#define PAGE_SIZE	4096u
#define STACK_SIZE	256u
#define MAX_VCPUS	64u	/* (0x8000 - GUEST_STACK) / STACK_SIZE */
#define REAL_MODE_TOP	0x100000u	/* real mode reaches 1 MiB */
#define PROT_MODE_TOP	0xc0000000u	/* stay clear of the LAPIC page */

#define SEL_CODE	0x08
#define SEL_DATA	0x10
#define TIMER_VECTOR	0x20
#define SPURIOUS_VECTOR	0xff

/* What the guest does after its program (guest_mbox.stop). */
enum guest_stop {
	STOP_ASK = 0,	/* in CMD_PORT, then run the refilled mailbox */
	STOP_HLT = 1,	/* hlt forever: the last hlt exit ends the vCPU */
	STOP_DONE = 2,	/* out DONE_PORT, then hlt (in-kernel halts never exit) */
};

/*
 * The guest program is fixed; this mailbox in guest memory says how many
 * times each of its loops runs.  The guest reads it after every CMD_PORT
 * exit, so the VMM may rewrite it while the vCPU sits in that exit.
 */
struct guest_mbox {
	uint32_t exits;		/* +0:  out instructions to EXIT_PORT */
	uint32_t pages;		/* +4:  pages to write one byte to */
	uint32_t base;		/* +8:  first page: address, or segment in real mode */
	uint32_t value;		/* +12: the byte written (low 8 bits) */
	uint32_t halts;		/* +16: hlt instructions */
	uint32_t stop;		/* +20: enum guest_stop */
	uint32_t timer;		/* +24: LAPIC one-shot count armed before each hlt */
	uint32_t early;		/* +28: set by the guest: interrupts taken before
				 * their hlt ran (that hlt made no exit) */
	uint32_t pad[8];
};

enum guest_mode { MODE_REAL, MODE_PROT };
enum workload { WL_HALT, WL_DEMO, WL_DIRTY };

struct vm;

struct vcpu {
	struct vm *vm;
	unsigned int index;
	int fd;
	int stats_fd;
	struct kvm_run *run;
	pthread_t thread;
	bool started;
	bool reached_ready;
	/* Counted by the VMM itself, to cross-check KVM's counters. */
	uint64_t port_exits;
	uint64_t hlt_exits;
	uint64_t early_wakes;	/* the guest's guest_mbox.early, summed */
	uint64_t passes;
	/* Demo state. */
	uint64_t next_tick_ns;
	uint32_t page_off;
	uint32_t value;
};

struct vm {
	unsigned int index;
	int fd;
	int stats_fd;
	uint8_t *mem;
	size_t mem_size;
	int memfd;		/* --memfd: the file behind mem, else -1 */
	uint8_t *saved;		/* --churn-ms: mem as it was at ready */
	struct vcpu *vcpus;
};

struct opts {
	unsigned int vms;
	unsigned int vcpus;
	uint32_t exits;
	uint32_t pages;
	bool pages_set;
	uint32_t halts;
	uint32_t halt_us;
	uint32_t pass_hz;
	enum guest_mode mode;
	enum workload workload;
	bool hold_stats;
	bool no_run;
	bool irqchip;
	bool verbose;
	bool memfd;
	uint32_t churn_ms;
	const char *ready;
	const char *save;
	unsigned int timeout;
};

struct tinyvmm {
	struct opts o;
	int kvm_fd;
	int run_size;
	struct vm *vms;
	unsigned int nr_vms;		/* created so far */
	uint64_t start_ns;
	atomic_bool stopping;
	atomic_uint pending;		/* vCPUs not yet at their ready point */
	atomic_bool failed;
};

/* tinyvmm.c */
int tv_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * A guest that left its program: it ran code we never gave it (an exit no
 * program makes, at a rip outside it).  Under nested emulation (the lab)
 * this was seen to happen to a guest state the emulator corrupted; the
 * test runner there names such a file in KVMSTATS_TEST_ASTRAY, tinyvmm
 * appends its error to it, and the runner voids the item.
 */
int tv_astray(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t now_ns(void);
extern struct tinyvmm tv;

/* vm.c */
int kvm_open(struct tinyvmm *t);
int vm_create(struct tinyvmm *t, struct vm *vm);
void vm_destroy(struct tinyvmm *t, struct vm *vm);
size_t vm_mem_size(const struct opts *o);
int vm_churn_save(struct vm *vm);
int vm_churn(struct vm *vm, bool away);

/* guest.c */
void guest_load(const struct opts *o, struct vm *vm);
int guest_setup_vcpu(const struct opts *o, struct vcpu *v);
struct guest_mbox *guest_mbox(struct vcpu *v);
uint32_t guest_page_base(const struct opts *o, struct vcpu *v, uint32_t page);

/* run.c */
int vcpus_start(struct tinyvmm *t);
void vcpus_stop(struct tinyvmm *t);

#endif /* TINYVMM_H */
