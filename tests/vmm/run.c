// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Running the guests: one thread per vCPU, a KVM_RUN loop, and the three
 * workloads, which differ only in how they refill the guest's mailbox.
 *
 *   halt   one program (K exits, P pages, H halts), then the vCPU stops.
 *   dirty  the same program forever, a different byte on every pass.
 *   demo   a new program every tick, following phases that differ per VM.
 */
#define _GNU_SOURCE	/* POSIX and Linux interfaces, even with -std=c11 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "tinyvmm.h"

#define NSEC_PER_MSEC		1000000ull
#define DEMO_TICK_NS		(20 * NSEC_PER_MSEC)
/* Without an irqchip a demo hlt exits to us; this is how long it "halts". */
#define DEMO_HLT_NS		(2 * NSEC_PER_MSEC)
#define VCPU_THREAD_STACK	(64 * 1024)

/* The vCPU this thread runs, for the kick signal handler. */
static __thread struct kvm_run *self_run;

/*
 * A stop request is a signal to the vCPU thread.  Setting immediate_exit
 * here closes the race with a thread that checked the stop flag but has
 * not entered KVM_RUN yet: KVM_RUN then returns EINTR at once.
 */
static void kick_handler(int sig)
{
	(void)sig;
	if (self_run)
		self_run->immediate_exit = 1;
}

static void notify_main(void)
{
	kill(getpid(), SIGUSR2);
}

static void reach_ready(struct tinyvmm *t, struct vcpu *v)
{
	if (v->reached_ready)
		return;
	v->reached_ready = true;
	if (atomic_fetch_sub(&t->pending, 1) == 1)
		notify_main();
}

static void sleep_until(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = ns / 1000000000ull,
		.tv_nsec = ns % 1000000000ull,
	};

	/* EINTR is a kick: the caller's loop sees the stop flag. */
	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

/* Sleep until the vCPU's next period; a late vCPU does not catch up. */
static void pace(struct vcpu *v, uint64_t period)
{
	uint64_t now = now_ns();

	v->next_tick_ns += period;
	if (v->next_tick_ns < now)
		v->next_tick_ns = now;
	sleep_until(v->next_tick_ns);
}

static uint32_t next_value(struct vcpu *v)
{
	/* Never 0: a written page must not look like a zero page. */
	v->value = v->value % 255 + 1;
	return v->value;
}

static uint32_t halt_timer(const struct opts *o)
{
	return o->irqchip ? o->halt_us * 1000u : 0;
}

static void program_fixed(struct tinyvmm *t, struct vcpu *v, uint32_t stop)
{
	struct guest_mbox *mb = guest_mbox(v);

	memset(mb, 0, sizeof(*mb));
	mb->exits = t->o.exits;
	mb->pages = t->o.pages;
	mb->base = guest_page_base(&t->o, v, 0);
	mb->value = next_value(v);
	mb->halts = t->o.halts;
	mb->stop = stop;
	mb->timer = halt_timer(&t->o);
}

enum demo_phase { PH_BURST, PH_IDLE, PH_MEMORY, PH_MIXED, PH_QUIET, PH_COUNT };

/* Halt lengths for the irqchip demo: some end within the poll window. */
static const uint32_t demo_timer_ns[] = { 20000, 80000, 300000, 1200000 };

static uint32_t demo_pages(struct tinyvmm *t, struct vcpu *v,
			   struct guest_mbox *mb, uint32_t want)
{
	uint32_t n = want < t->o.pages ? want : t->o.pages;

	if (!n)
		return 0;
	if (v->page_off + n > t->o.pages)
		v->page_off = 0;
	mb->base = guest_page_base(&t->o, v, v->page_off);
	mb->value = next_value(v);
	v->page_off += n;
	return n;
}

/*
 * One tick of the demo.  Each VM cycles through the phases with its own
 * phase length and intensity, and its vCPUs are offset from each other,
 * so a live view shows rates that differ per VM and change every few
 * seconds.  Every tick is paced, which keeps a handful of demo VMs well
 * under one host core.
 */
static void demo_plan(struct tinyvmm *t, struct vcpu *v)
{
	struct guest_mbox *mb = guest_mbox(v);
	unsigned int vmi = v->vm->index;
	uint64_t ms = (now_ns() - t->start_ns) / NSEC_PER_MSEC;
	uint64_t len = 3000 + 1000 * (vmi % 3);
	uint32_t pos = (uint32_t)(ms % len * 10 / len);	/* 0..9 within the phase */
	uint32_t scale = 1 + vmi % 4;
	unsigned int phase = (ms / len + vmi + v->index) % PH_COUNT;

	memset(mb, 0, sizeof(*mb));
	mb->stop = STOP_ASK;
	if (t->o.irqchip)
		mb->timer = demo_timer_ns[v->passes % 4];

	switch (phase) {
	case PH_BURST:		/* exits ramp up through the phase */
		mb->exits = 10 * scale * (1 + pos);
		break;
	case PH_IDLE:		/* mostly halted */
		mb->exits = 2;
		mb->halts = 4;
		break;
	case PH_MEMORY:		/* touch a moving window of pages */
		mb->exits = 5;
		mb->pages = demo_pages(t, v, mb, 16 * scale);
		break;
	case PH_MIXED:
		mb->exits = 10 * scale;
		mb->halts = 1;
		mb->pages = demo_pages(t, v, mb, 4);
		break;
	default:		/* quiet: only the tick's own exit */
		break;
	}
}

/* The guest wrote the first byte of each of its pages; check it did. */
static int check_pages(struct tinyvmm *t, struct vcpu *v)
{
	uint32_t value = guest_mbox(v)->value & 0xff;
	uint8_t *p = v->vm->mem + GUEST_PAGES +
		     (size_t)v->index * t->o.pages * PAGE_SIZE;
	uint32_t i;

	for (i = 0; i < t->o.pages; i++, p += PAGE_SIZE) {
		if (*p != value)
			return tv_fail("vm %u vcpu %u: page %u holds %#x, expected %#x",
				       v->vm->index, v->index, i, *p, value);
	}
	return 0;
}

static int guest_done(struct tinyvmm *t, struct vcpu *v)
{
	if (check_pages(t, v) < 0)
		return -1;
	if (v->port_exits != t->o.exits)
		return tv_fail("vm %u vcpu %u: guest made %llu port exits, expected %u",
			       v->vm->index, v->index,
			       (unsigned long long)v->port_exits, t->o.exits);
	v->early_wakes = guest_mbox(v)->early;
	tv_log("vm %u vcpu %u: done, %llu port exits, %llu hlt exits, %llu early wakes",
	       v->vm->index, v->index, (unsigned long long)v->port_exits,
	       (unsigned long long)v->hlt_exits,
	       (unsigned long long)v->early_wakes);
	reach_ready(t, v);
	return 0;
}

/* The guest finished its program and asks for the next one. */
static int on_cmd(struct tinyvmm *t, struct vcpu *v)
{
	v->passes++;
	switch (t->o.workload) {
	case WL_HALT:
		break;
	case WL_DIRTY:
		reach_ready(t, v);
		program_fixed(t, v, STOP_ASK);
		if (t->o.pass_hz)
			pace(v, 1000000000ull / t->o.pass_hz);
		return 1;
	case WL_DEMO:
		reach_ready(t, v);
		demo_plan(t, v);
		pace(v, DEMO_TICK_NS);
		return 1;
	}
	return tv_fail("vm %u vcpu %u: guest asked for a program in the halt workload",
		       v->vm->index, v->index);
}

static int on_io(struct tinyvmm *t, struct vcpu *v)
{
	struct kvm_run *run = v->run;
	bool out = run->io.direction == KVM_EXIT_IO_OUT;

	if (run->io.port == EXIT_PORT && out) {
		v->port_exits += run->io.count;
		return 1;
	}
	if (run->io.port == CMD_PORT && !out) {
		memset((uint8_t *)run + run->io.data_offset, 0,
		       (size_t)run->io.size * run->io.count);
		return on_cmd(t, v);
	}
	if (run->io.port == DONE_PORT && out && t->o.workload == WL_HALT)
		return guest_done(t, v);
	return tv_astray("vm %u vcpu %u: unexpected %s port %#x", v->vm->index,
		       v->index, out ? "out to" : "in from", run->io.port);
}

static int on_hlt(struct tinyvmm *t, struct vcpu *v)
{
	v->hlt_exits++;
	switch (t->o.workload) {
	case WL_HALT:
		/* The hlt after the program's halts is the final one. */
		if (v->hlt_exits > t->o.halts)
			return guest_done(t, v);
		return 1;
	case WL_DEMO:
		sleep_until(now_ns() + DEMO_HLT_NS);
		return 1;
	case WL_DIRTY:
		return 1;
	}
	return 1;
}

static int on_bad_exit(struct vcpu *v)
{
	struct kvm_run *run = v->run;
	struct kvm_regs regs;
	unsigned long long rip = 0;

	if (ioctl(v->fd, KVM_GET_REGS, &regs) == 0)
		rip = regs.rip;

	switch (run->exit_reason) {
	case KVM_EXIT_SHUTDOWN:
		return tv_astray("vm %u vcpu %u: guest shut down (triple fault) near rip %#llx",
			       v->vm->index, v->index, rip);
	case KVM_EXIT_FAIL_ENTRY:
		return tv_astray("vm %u vcpu %u: KVM_RUN entry failed, reason %#llx",
			       v->vm->index, v->index, (unsigned long long)
			       run->fail_entry.hardware_entry_failure_reason);
	case KVM_EXIT_INTERNAL_ERROR:
		return tv_astray("vm %u vcpu %u: KVM internal error %u at rip %#llx",
			       v->vm->index, v->index, run->internal.suberror,
			       rip);
	case KVM_EXIT_MMIO:
		return tv_astray("vm %u vcpu %u: unexpected MMIO %s %#llx at rip %#llx",
			       v->vm->index, v->index,
			       run->mmio.is_write ? "write to" : "read from",
			       (unsigned long long)run->mmio.phys_addr, rip);
	}
	return tv_astray("vm %u vcpu %u: unexpected exit reason %u at rip %#llx",
		       v->vm->index, v->index, run->exit_reason, rip);
}

/* Returns 1 to keep running, 0 when the guest is done, -1 on error. */
static int handle_exit(struct tinyvmm *t, struct vcpu *v)
{
	switch (v->run->exit_reason) {
	case KVM_EXIT_IO:
		return on_io(t, v);
	case KVM_EXIT_HLT:
		return on_hlt(t, v);
	case KVM_EXIT_INTR:
		return 1;
	}
	return on_bad_exit(v);
}

static void *vcpu_thread(void *arg)
{
	struct vcpu *v = arg;
	struct tinyvmm *t = &tv;
	sigset_t kick;
	int r = 1;

	self_run = v->run;
	sigemptyset(&kick);
	sigaddset(&kick, SIGUSR1);
	pthread_sigmask(SIG_UNBLOCK, &kick, NULL);

	v->next_tick_ns = now_ns();
	if (t->o.workload == WL_DEMO)
		demo_plan(t, v);
	else
		program_fixed(t, v, t->o.workload == WL_DIRTY ? STOP_ASK :
				    t->o.irqchip ? STOP_DONE : STOP_HLT);

	while (r > 0 && !atomic_load(&t->stopping)) {
		if (ioctl(v->fd, KVM_RUN, 0) < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			r = tv_fail("KVM_RUN (vm %u vcpu %u): %m",
				    v->vm->index, v->index);
			break;
		}
		r = handle_exit(t, v);
	}
	if (r < 0) {
		atomic_store(&t->failed, true);
		notify_main();
	}
	return NULL;
}

int vcpus_start(struct tinyvmm *t)
{
	struct sigaction sa;
	pthread_attr_t attr;
	unsigned int i, j;
	int err;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = kick_handler;	/* no SA_RESTART: KVM_RUN must return */
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) < 0)
		return tv_fail("sigaction SIGUSR1: %m");

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, VCPU_THREAD_STACK);
	for (i = 0; i < t->nr_vms; i++) {
		for (j = 0; j < t->o.vcpus; j++) {
			struct vcpu *v = &t->vms[i].vcpus[j];

			err = pthread_create(&v->thread, &attr, vcpu_thread, v);
			if (err) {
				pthread_attr_destroy(&attr);
				errno = err;
				return tv_fail("pthread_create (vm %u vcpu %u): %m",
					       i, j);
			}
			v->started = true;
		}
	}
	pthread_attr_destroy(&attr);
	return 0;
}

void vcpus_stop(struct tinyvmm *t)
{
	unsigned int i, j;

	atomic_store(&t->stopping, true);
	for (i = 0; i < t->nr_vms; i++) {
		for (j = 0; j < t->o.vcpus; j++) {
			struct vcpu *v = &t->vms[i].vcpus[j];

			if (v->started)
				pthread_kill(v->thread, SIGUSR1);
		}
	}
	for (i = 0; i < t->nr_vms; i++) {
		for (j = 0; j < t->o.vcpus; j++) {
			struct vcpu *v = &t->vms[i].vcpus[j];

			if (v->started)
				pthread_join(v->thread, NULL);
			v->started = false;
		}
	}
}
