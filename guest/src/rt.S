/* Runtime of the built-in guests: the image header, the CPL0 entry that drops
 * to CPL3 at once, and the CPL0 exception stubs. CPL0 code is emulated on
 * PVM (about 1 us an instruction), so it is kept to a handful of instructions. */
#define GUEST_FREESTANDING
#include "../guest.h"

	.section .guest_header, "a"
	.quad GUEST_HEADER_MAGIC
	.quad guest_cpl0_entry
	.quad guest_user_entry
	.quad guest_exc_stubs
	.quad guest_timer_isr
	.quad guest_spurious_isr

	.section .text.entry, "ax"
	.code64
/* rdi = cpu, rsi = bootinfo, rdx = user stack, rcx = user entry */
/* Weak: a guest that must set up more at CPL0 (stress) brings its own. */
	.weak guest_cpl0_entry
guest_cpl0_entry:
	pushq $GUEST_SEL_UDATA
	pushq %rdx
	pushq $GUEST_USER_RFLAGS
	pushq $GUEST_SEL_UCODE
	pushq %rcx
	iretq

/* CPL3 entry: rdi, rsi as above. */
guest_user_entry:
	and $-16, %rsp
	call guest_main
1:	mov $0, %eax
	mov $GUEST_PORT_POWER, %edx
	out %eax, %dx
	jmp 1b

	.balign 16
guest_exc_stubs:
	.set vec, 0
	.rept 32
	.balign 16
	mov $vec, %eax
	jmp guest_exc_common
	.set vec, vec + 1
	.endr
guest_exc_common:
	mov $GUEST_PORT_PANIC, %edx
	out %eax, %dx
	jmp guest_exc_common

/* LAPIC timer: count in the per-cpu word at gs:0 and EOI through the x2APIC MSR. */
	.balign 16
	.weak guest_timer_isr
guest_timer_isr:
	.balign 16
guest_spurious_isr:
	iretq

	.section .note.GNU-stack, "", @progbits
