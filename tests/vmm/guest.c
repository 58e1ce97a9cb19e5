// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The guest side of tinyvmm: two hand-assembled programs (16-bit real mode
 * and flat 32-bit protected mode), the tables protected mode needs, and the
 * register state each vCPU starts with.
 *
 * Both programs run the same loops, with counts taken from the vCPU's
 * struct guest_mbox (address in EBX/BX):
 *
 *	for (n = exits; n; n--)	out EXIT_PORT
 *	for (n = pages; n; n--)	write value at the next page
 *	for (n = halts; n; n--)	[arm LAPIC one-shot timer] hlt
 *	stop == ASK:		in CMD_PORT; start over
 *	stop == DONE:		out DONE_PORT; hlt forever
 *	else:			hlt forever
 *
 * Machine code rather than an assembler file so that the whole VMM builds
 * with one cc command line.
 */
#define _GNU_SOURCE	/* POSIX and Linux interfaces, even with -std=c11 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>

#include "tinyvmm.h"

/* 16-bit code; pages are addressed as ES:0 with ES stepping by 0x100. */
static const uint8_t real_code[] = {
	/* body: */
	0x66, 0x8b, 0x0f,		/* 00 mov    (%bx),%ecx	exits */
	0xba, EXIT_PORT, 0x00,		/* 03 mov    $EXIT_PORT,%dx */
	0x66, 0x85, 0xc9,		/* 06 test   %ecx,%ecx */
	0x74, 0x05,			/* 09 je     10 */
	0xee,				/* 0b out    %al,(%dx) */
	0x66, 0x49,			/* 0c dec    %ecx */
	0xeb, 0xf6,			/* 0e jmp    06 */
	0x66, 0x8b, 0x4f, 0x04,		/* 10 mov    4(%bx),%ecx	pages */
	0x8b, 0x77, 0x08,		/* 14 mov    8(%bx),%si	base segment */
	0x8a, 0x47, 0x0c,		/* 17 mov    12(%bx),%al	value */
	0x66, 0x85, 0xc9,		/* 1a test   %ecx,%ecx */
	0x74, 0x0e,			/* 1d je     2d */
	0x8e, 0xc6,			/* 1f mov    %si,%es */
	0x26, 0xa2, 0x00, 0x00,		/* 21 mov    %al,%es:0 */
	0x81, 0xc6, 0x00, 0x01,		/* 25 add    $0x100,%si */
	0x66, 0x49,			/* 29 dec    %ecx */
	0xeb, 0xed,			/* 2b jmp    1a */
	0x66, 0x8b, 0x4f, 0x10,		/* 2d mov    16(%bx),%ecx	halts */
	0x66, 0x85, 0xc9,		/* 31 test   %ecx,%ecx */
	0x74, 0x05,			/* 34 je     3b */
	0xf4,				/* 36 hlt */
	0x66, 0x49,			/* 37 dec    %ecx */
	0xeb, 0xf6,			/* 39 jmp    31 */
	0x66, 0x8b, 0x47, 0x14,		/* 3b mov    20(%bx),%eax	stop */
	0x66, 0x85, 0xc0,		/* 3f test   %eax,%eax */
	0x74, 0x0b,			/* 42 je     4f */
	0x66, 0x48,			/* 44 dec    %eax */
	0x74, 0x04,			/* 46 je     4c */
	0xba, DONE_PORT, 0x00,		/* 48 mov    $DONE_PORT,%dx */
	0xee,				/* 4b out    %al,(%dx) */
	0xf4,				/* 4c hlt */
	0xeb, 0xfd,			/* 4d jmp    4c */
	0xba, CMD_PORT, 0x00,		/* 4f mov    $CMD_PORT,%dx */
	0xec,				/* 52 in     (%dx),%al */
	0xeb, 0xab,			/* 53 jmp    00 */
};

/* The four little-endian bytes of LAPIC register address 0xfee00000 + off. */
#define APIC_B(off)	((off) & 0xff), ((off) >> 8), 0xe0, 0xfe

/*
 * 32-bit code.  With a LAPIC timer count in the mailbox the entry enables
 * the in-kernel LAPIC and every hlt is preceded by arming a one-shot timer.
 * IF is set only by the sti right before a hlt (sti delays interrupts by
 * one instruction, so sti;hlt cannot miss a timer that already fired), so
 * the timer interrupt can only ever interrupt that hlt.
 */
static const uint8_t prot_code[] = {
	/* entry: */
	0x8b, 0x43, 0x18,		/* 00 mov    24(%ebx),%eax	timer */
	0x85, 0xc0,			/* 03 test   %eax,%eax */
	0x74, 0x1e,			/* 05 je     25 */
	0xc7, 0x05, APIC_B(0x0f0),	/* 07 movl   $0x1ff,APIC_SVR	enable */
	0xff, 0x01, 0x00, 0x00,
	0xc7, 0x05, APIC_B(0x3e0),	/* 11 movl   $0xb,APIC_TDCR	divide by 1 */
	0x0b, 0x00, 0x00, 0x00,
	0xc7, 0x05, APIC_B(0x320),	/* 1b movl   $0x20,APIC_LVTT	one-shot */
	TIMER_VECTOR, 0x00, 0x00, 0x00,
	/* body: */
	0x8b, 0x0b,			/* 25 mov    (%ebx),%ecx	exits */
	0x66, 0xba, EXIT_PORT, 0x00,	/* 27 mov    $EXIT_PORT,%dx */
	0x85, 0xc9,			/* 2b test   %ecx,%ecx */
	0x74, 0x04,			/* 2d je     33 */
	0xee,				/* 2f out    %al,(%dx) */
	0x49,				/* 30 dec    %ecx */
	0xeb, 0xf8,			/* 31 jmp    2b */
	0x8b, 0x4b, 0x04,		/* 33 mov    4(%ebx),%ecx	pages */
	0x8b, 0x7b, 0x08,		/* 36 mov    8(%ebx),%edi	base */
	0x8a, 0x43, 0x0c,		/* 39 mov    12(%ebx),%al	value */
	0x85, 0xc9,			/* 3c test   %ecx,%ecx */
	0x74, 0x0b,			/* 3e je     4b */
	0x88, 0x07,			/* 40 mov    %al,(%edi) */
	0x81, 0xc7, 0x00, 0x10, 0x00, 0x00, /* 42 add $0x1000,%edi */
	0x49,				/* 48 dec    %ecx */
	0xeb, 0xf1,			/* 49 jmp    3c */
	0x8b, 0x4b, 0x10,		/* 4b mov    16(%ebx),%ecx	halts */
	0x85, 0xc9,			/* 4e test   %ecx,%ecx */
	0x74, 0x12,			/* 50 je     64 */
	0x8b, 0x43, 0x18,		/* 52 mov    24(%ebx),%eax	timer */
	0x85, 0xc0,			/* 55 test   %eax,%eax */
	0x74, 0x06,			/* 57 je     5f */
	0xa3, APIC_B(0x380),		/* 59 mov    %eax,APIC_TMICT	arm */
	0xfb,				/* 5e sti */
	0xf4,				/* 5f hlt */
	/* resume: the interrupt handlers come back here */
	0xfa,				/* 60 cli */
	0x49,				/* 61 dec    %ecx */
	0xeb, 0xea,			/* 62 jmp    4e */
	0x8b, 0x43, 0x14,		/* 64 mov    20(%ebx),%eax	stop */
	0x85, 0xc0,			/* 67 test   %eax,%eax */
	0x74, 0x0b,			/* 69 je     76 */
	0x48,				/* 6b dec    %eax */
	0x74, 0x05,			/* 6c je     73 */
	0x66, 0xba, DONE_PORT, 0x00,	/* 6e mov    $DONE_PORT,%dx */
	0xee,				/* 72 out    %al,(%dx) */
	0xf4,				/* 73 hlt */
	0xeb, 0xfd,			/* 74 jmp    73 */
	0x66, 0xba, CMD_PORT, 0x00,	/* 76 mov    $CMD_PORT,%dx */
	0xec,				/* 7a in     (%dx),%al */
	0xeb, 0xa8,			/* 7b jmp    25 */
};

/*
 * Interrupt handlers, placed after the program.  They do not iret: KVM's
 * instruction emulator, which runs this guest under kvm_pvm, implements
 * iret only in real mode (protected-mode iret is an emulation failure).
 * An interrupt can only arrive on the hlt at 0x5f, so the handler knows
 * where to go back to: it drops the 12-byte frame and jumps to resume,
 * with IF clear, as the interrupt gate left it.
 *
 * Before it does, it looks at the saved EIP: the hlt's own address means
 * the interrupt came before the hlt ran (nested under emulated SVM this
 * was seen, sti's shadow notwithstanding), so that hlt never exited; the
 * mailbox counts these for the VMM (guest_mbox.early).
 */
#define TIMER_ISR	0x80
#define SPURIOUS_ISR	0x8a
#define RESUME		0x60
#define LE32(x)		((x) & 0xff), (((x) >> 8) & 0xff), \
			(((x) >> 16) & 0xff), ((x) >> 24)
static const uint8_t isr_code[] = {
	/* timer_isr: */
	0xc7, 0x05, APIC_B(0x0b0),	/* 80 movl   $0,APIC_EOI */
	0x00, 0x00, 0x00, 0x00,
	/* spurious_isr: spurious vectors take no EOI */
	0x81, 0x3c, 0x24,		/* 8a cmpl   $resume,(%esp) */
	LE32(GUEST_CODE + RESUME),
	0x74, 0x03,			/* 91 je     96 */
	0xff, 0x43, 0x1c,		/* 93 incl   28(%ebx)	early */
	0x83, 0xc4, 0x0c,		/* 96 add    $12,%esp */
	0xeb, 0xc5,			/* 99 jmp    60 */
};

_Static_assert(sizeof(prot_code) <= TIMER_ISR, "prot_code overlaps the ISR");
_Static_assert(offsetof(struct guest_mbox, early) == 28, "isr_code's early");
_Static_assert(sizeof(struct guest_mbox) == 64, "mailbox is 64 bytes");
_Static_assert(GUEST_STACK + MAX_VCPUS * STACK_SIZE <= 0x8000, "stacks");
_Static_assert(GUEST_MBOX + MAX_VCPUS * sizeof(struct guest_mbox) <=
	       GUEST_STACK, "mailboxes");

/* A flat descriptor: base 0, limit 4 GiB, 32-bit, the given access byte. */
static uint64_t flat_desc(uint8_t access)
{
	return 0x00cf00000000ffffull | (uint64_t)access << 40;
}

/* A 32-bit interrupt gate to a handler in the flat code segment. */
static uint64_t int_gate(uint32_t handler)
{
	return (uint64_t)(handler & 0xffff) | (uint64_t)SEL_CODE << 16 |
	       (uint64_t)0x8e << 40 | (uint64_t)(handler >> 16) << 48;
}

void guest_load(const struct opts *o, struct vm *vm)
{
	uint64_t *gdt = (uint64_t *)(vm->mem + GUEST_GDT);
	uint64_t *idt = (uint64_t *)(vm->mem + GUEST_IDT);

	if (o->mode == MODE_REAL) {
		memcpy(vm->mem + GUEST_CODE, real_code, sizeof(real_code));
		return;
	}
	memcpy(vm->mem + GUEST_CODE, prot_code, sizeof(prot_code));
	memcpy(vm->mem + GUEST_CODE + TIMER_ISR, isr_code, sizeof(isr_code));

	/*
	 * The segment caches come from KVM_SET_SREGS, but delivering an
	 * interrupt loads CS from the gate's selector through the GDT, so
	 * both tables must exist in memory.  Other vectors stay not-present:
	 * a stray exception then ends in a triple fault the VMM reports.
	 */
	gdt[0] = 0;
	gdt[SEL_CODE / 8] = flat_desc(0x9b);
	gdt[SEL_DATA / 8] = flat_desc(0x93);
	idt[TIMER_VECTOR] = int_gate(GUEST_CODE + TIMER_ISR);
	idt[SPURIOUS_VECTOR] = int_gate(GUEST_CODE + SPURIOUS_ISR);
}

struct guest_mbox *guest_mbox(struct vcpu *v)
{
	return (struct guest_mbox *)(v->vm->mem + GUEST_MBOX) + v->index;
}

/* Address of one of this vCPU's pages, as the guest's base field wants it. */
uint32_t guest_page_base(const struct opts *o, struct vcpu *v, uint32_t page)
{
	uint32_t addr = GUEST_PAGES + (v->index * o->pages + page) * PAGE_SIZE;

	return o->mode == MODE_REAL ? addr >> 4 : addr;
}

static void seg_flat(struct kvm_segment *s, uint16_t sel, uint8_t type)
{
	memset(s, 0, sizeof(*s));
	s->base = 0;
	s->limit = 0xffffffff;
	s->selector = sel;
	s->type = type;
	s->present = 1;
	s->dpl = 0;
	s->db = 1;
	s->s = 1;
	s->g = 1;
}

static void seg_real(struct kvm_segment *s, uint8_t type)
{
	memset(s, 0, sizeof(*s));
	s->limit = 0xffff;
	s->type = type;
	s->present = 1;
	s->s = 1;
}

#define CR0_PE	(1ull << 0)
#define CR0_NW	(1ull << 29)
#define CR0_CD	(1ull << 30)

static void sregs_prot(struct kvm_sregs *sr)
{
	seg_flat(&sr->cs, SEL_CODE, 0xb);
	seg_flat(&sr->ds, SEL_DATA, 0x3);
	sr->es = sr->fs = sr->gs = sr->ss = sr->ds;
	sr->gdt.base = GUEST_GDT;
	sr->gdt.limit = 3 * 8 - 1;
	sr->idt.base = GUEST_IDT;
	sr->idt.limit = 256 * 8 - 1;
	sr->cr0 = (sr->cr0 & ~(CR0_CD | CR0_NW)) | CR0_PE;
}

static void sregs_real(struct kvm_sregs *sr)
{
	seg_real(&sr->cs, 0xb);
	seg_real(&sr->ds, 0x3);
	sr->es = sr->fs = sr->gs = sr->ss = sr->ds;
	sr->cr0 &= ~(CR0_CD | CR0_NW | CR0_PE);
}

int guest_setup_vcpu(const struct opts *o, struct vcpu *v)
{
	struct kvm_mp_state runnable = { .mp_state = KVM_MP_STATE_RUNNABLE };
	struct kvm_sregs sr;
	struct kvm_regs regs;

	if (ioctl(v->fd, KVM_GET_SREGS, &sr) < 0)
		return tv_fail("KVM_GET_SREGS (vm %u vcpu %u): %m",
			       v->vm->index, v->index);
	if (o->mode == MODE_PROT)
		sregs_prot(&sr);
	else
		sregs_real(&sr);
	if (ioctl(v->fd, KVM_SET_SREGS, &sr) < 0)
		return tv_fail("KVM_SET_SREGS (vm %u vcpu %u): %m",
			       v->vm->index, v->index);

	/*
	 * With an in-kernel LAPIC every vCPU but the first starts waiting
	 * for INIT/SIPI and KVM_RUN would just block; make them all runnable.
	 */
	if (o->irqchip && v->index &&
	    ioctl(v->fd, KVM_SET_MP_STATE, &runnable) < 0)
		return tv_fail("KVM_SET_MP_STATE (vm %u vcpu %u): %m",
			       v->vm->index, v->index);

	memset(&regs, 0, sizeof(regs));
	regs.rflags = 0x2;	/* bit 1 is reserved-one; IF stays clear */
	regs.rip = GUEST_CODE;
	regs.rbx = GUEST_MBOX + v->index * sizeof(struct guest_mbox);
	regs.rsp = GUEST_STACK + (v->index + 1) * STACK_SIZE;
	if (ioctl(v->fd, KVM_SET_REGS, &regs) < 0)
		return tv_fail("KVM_SET_REGS (vm %u vcpu %u): %m",
			       v->vm->index, v->index);
	return 0;
}
