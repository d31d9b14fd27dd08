/* The built-in guests, as flat images made at build time (see Makefile). */
	.section .rodata.guest_images, "a"
	.balign 4096
	.globl guest_counter_start, guest_counter_end
guest_counter_start:
	.incbin "counter.bin"
guest_counter_end:
	.balign 4096
	.globl guest_dirty_start, guest_dirty_end
guest_dirty_start:
	.incbin "dirty.bin"
guest_dirty_end:
	.balign 4096
	.globl guest_stress_start, guest_stress_end
guest_stress_start:
	.incbin "stress.bin"
guest_stress_end:
	.balign 4096
	.globl guest_blk_start, guest_blk_end
guest_blk_start:
	.incbin "blk.bin"
guest_blk_end:
	.balign 4096
	.globl guest_udpecho_start, guest_udpecho_end
guest_udpecho_start:
	.incbin "udpecho.bin"
guest_udpecho_end:
	.balign 4096
	.globl guest_kv_start, guest_kv_end
guest_kv_start:
	.incbin "kv.bin"
guest_kv_end:
	.section .note.GNU-stack, "", @progbits
