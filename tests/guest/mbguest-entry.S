/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Multiboot (v1) entry of mbguest.  The loader (QEMU's -kernel) enters in
 * flat 32-bit protected mode with EAX = 0x2BADB002 and EBX = the
 * multiboot info; there is no usable stack, so set one up first.
 */
	.section .multiboot, "a"
	.align 4
	/* magic, flags (bit 0: align modules, bit 1: memory info), checksum */
	.long 0x1BADB002, 3, -(0x1BADB002 + 3)

	.text
	.globl _start
_start:
	cli
	movl $stack_top, %esp
	pushl %ebx
	pushl %eax
	call mb_main
1:	cli
	hlt
	jmp 1b

	.bss
	.align 16
	.skip 16384
stack_top:

	.section .note.GNU-stack, "", @progbits
