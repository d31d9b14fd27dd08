/* A digest of a machine's complete state, part by part, for comparing two
 * machines that should be equal: the primary at a pause and the standby
 * after it applied that epoch (UNDERSTUDY_VERIFY), or a restore in a test.
 *
 * Computed from the structs field by field (never padding or reserved
 * bytes), read straight from KVM, so it does not depend on the checkpoint
 * encoding it is meant to check. Fields that KVM legitimately changes on a
 * set/get round trip are left out or compared by order; each exception is
 * listed where it is made, and tests/test_digest.c proves that each is
 * needed and that nothing else differs:
 *   - IA32_TSC (MSR 0x10): the guest TSC runs on after KVM_SET_MSRS; the
 *     standby's reads later, so it is only required not to go backward;
 *   - kvmclock (KVM_GET_CLOCK): clock runs on likewise (order only);
 *     realtime, host_tsc and flags describe the host at the reading and are
 *     not restored (kvm_vm_set_state sets the clock value alone);
 *   - LAPIC timer current count (TMCCT, 0x390): computed from the time left
 *     at the reading; and the processor priority (PPR, 0xa0), derived by
 *     KVM from TPR and ISR and recomputed on KVM_SET_LAPIC (seen with the
 *     stress guest: captured 0x20 mid-interrupt, 0 on the standby, ISR and
 *     TPR equal);
 *   - PIT count_load_time: a host ktime stamp, re-stamped by KVM_SET_PIT2;
 *   - SYSENTER_CS/ESP/EIP (MSRs 0x174-0x176): the low 32 bits only (KVM on
 *     AMD holds no more of a restore; msr_is_sysenter says why);
 *   - in RAM, each vCPU's steal-time "preempted" byte, which KVM sets from
 *     a host's vCPU ioctl (digest_ram_skipping says when).
 * (KVM also writes guest RAM on a restore, the paravirtual wall clock's 12
 * bytes; the machine puts them back, machine/platform.c. And a standby's
 * PIT would tick into its LAPIC's IRR while it waits; the machine holds
 * the PIT's timer until it resumes, machine_set_state.)
 * The digest travels as the "verify" section; proto/meta.c lays it out. */
#include "checkpoint/checkpoint.h"
#include "proto/proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSR_IA32_TSC 0x10u
#define APIC_TMCCT 0x390u
#define APIC_PPR 0xa0u

static const char *const vcpu_part_names[PROTO_VERIFY_VCPU_PARTS] = {
	"regs", "sregs", "xsave", "xcrs", "msrs", "lapic", "events", "mp_state", "debugregs",
};
static const char *const vm_part_names[PROTO_VERIFY_VM_PARTS] = {
	"pic-master", "pic-slave", "ioapic", "pit", "uart", "pci", "platform",
};

/* The register page without the timer's current count and without the
 * processor priority, which KVM derives from TPR and ISR (on KVM_SET_LAPIC
 * it recomputes it; the value read on the primary may be one it had not
 * brought up to date yet). */
static uint32_t digest_lapic(const struct kvm_lapic_state *l)
{
	uint8_t regs[sizeof(l->regs)];

	memcpy(regs, l->regs, sizeof(regs));
	memset(regs + APIC_TMCCT, 0, 4);
	memset(regs + APIC_PPR, 0, 4);
	return proto_crc32c(0, regs, sizeof(regs));
}

#define MIX(crc, field) ((crc) = proto_crc32c((crc), &(field), sizeof(field)))

static uint32_t digest_segment(uint32_t c, const struct kvm_segment *s)
{
	MIX(c, s->base);
	MIX(c, s->limit);
	MIX(c, s->selector);
	MIX(c, s->type);
	MIX(c, s->present);
	MIX(c, s->dpl);
	MIX(c, s->db);
	MIX(c, s->s);
	MIX(c, s->l);
	MIX(c, s->g);
	MIX(c, s->avl);
	return MIX(c, s->unusable);
}

static uint32_t digest_dtable(uint32_t c, const struct kvm_dtable *t)
{
	MIX(c, t->base);
	return MIX(c, t->limit);
}

static uint32_t digest_sregs(const struct kvm_sregs *s)
{
	uint32_t c = 0;

	c = digest_segment(c, &s->cs);
	c = digest_segment(c, &s->ds);
	c = digest_segment(c, &s->es);
	c = digest_segment(c, &s->fs);
	c = digest_segment(c, &s->gs);
	c = digest_segment(c, &s->ss);
	c = digest_segment(c, &s->tr);
	c = digest_segment(c, &s->ldt);
	c = digest_dtable(c, &s->gdt);
	c = digest_dtable(c, &s->idt);
	MIX(c, s->cr0);
	MIX(c, s->cr2);
	MIX(c, s->cr3);
	MIX(c, s->cr4);
	MIX(c, s->cr8);
	MIX(c, s->efer);
	MIX(c, s->apic_base);
	return MIX(c, s->interrupt_bitmap);
}

static uint32_t digest_events(const struct kvm_vcpu_events *e)
{
	uint32_t c = 0;

	MIX(c, e->exception.injected);
	MIX(c, e->exception.nr);
	MIX(c, e->exception.has_error_code);
	MIX(c, e->exception.pending);
	MIX(c, e->exception.error_code);
	MIX(c, e->interrupt.injected);
	MIX(c, e->interrupt.nr);
	MIX(c, e->interrupt.soft);
	MIX(c, e->interrupt.shadow);
	MIX(c, e->nmi.injected);
	MIX(c, e->nmi.pending);
	MIX(c, e->nmi.masked);
	MIX(c, e->sipi_vector);
	MIX(c, e->flags);
	MIX(c, e->smi.smm);
	MIX(c, e->smi.pending);
	MIX(c, e->smi.smm_inside_nmi);
	MIX(c, e->smi.latched_init);
	MIX(c, e->triple_fault.pending);
	MIX(c, e->exception_has_payload);
	return MIX(c, e->exception_payload);
}

static uint32_t digest_xcrs(const struct kvm_xcrs *x)
{
	uint32_t c = 0, n = x->nr_xcrs < KVM_MAX_XCRS ? x->nr_xcrs : KVM_MAX_XCRS;

	MIX(c, x->nr_xcrs);
	MIX(c, x->flags);
	for (uint32_t i = 0; i < n; i++) {
		MIX(c, x->xcrs[i].xcr);
		MIX(c, x->xcrs[i].value);
	}
	return c;
}

static uint32_t digest_debugregs(const struct kvm_debugregs *d)
{
	uint32_t c = 0;

	MIX(c, d->db);
	MIX(c, d->dr6);
	MIX(c, d->dr7);
	return MIX(c, d->flags);
}

/* Hyper-V's reference time count and virtual processor run time: clocks
 * KVM keeps running (listed by kvm_amd on Linux 6.1, not by PVM), so they
 * never read back as set, as the TSC does not. */
static bool msr_is_clock(uint32_t index)
{
	return index == 0x40000020 || index == 0x40000010;
}

/* SYSENTER_CS/ESP/EIP: KVM on AMD keeps the low 32 bits of a host's write
 * (svm_set_msr), as AMD CPUs themselves do (SYSENTER is a legacy-mode
 * instruction there); QEMU's emulated SVM keeps a guest's own write whole.
 * So under it a primary reads back Linux's 64-bit SYSENTER_ESP
 * (0xfffffe0000003000) and its standby the low half (0x3000): seen in the
 * nested VM with a Linux guest. Only the low halves are compared. */
static bool msr_is_sysenter(uint32_t index)
{
	return index >= 0x174 && index <= 0x176;
}

void ckpt_digest_vcpu(const struct kvm_vcpu_state *v, struct proto_verify_vcpu *d)
{
	uint32_t c = 0, n = v->nmsrs < KVM_MAX_MSRS ? v->nmsrs : KVM_MAX_MSRS;
	uint32_t xs = v->xsave_size < KVM_XSAVE_MAX ? v->xsave_size : KVM_XSAVE_MAX;

	memset(d, 0, sizeof(*d));
	d->part[PROTO_VERIFY_REGS] = proto_crc32c(0, &v->regs, sizeof(v->regs));  /* all u64 */
	d->part[PROTO_VERIFY_SREGS] = digest_sregs(&v->sregs);
	MIX(c, v->xsave_size);
	d->part[PROTO_VERIFY_XSAVE] = proto_crc32c(c, v->xsave, xs);
	d->part[PROTO_VERIFY_XCRS] = digest_xcrs(&v->xcrs);
	c = 0;
	MIX(c, v->nmsrs);
	for (uint32_t i = 0; i < n; i++) {
		MIX(c, v->msrs[i].index);
		if (v->msrs[i].index == MSR_IA32_TSC)
			d->tsc = v->msrs[i].data;        /* runs on: order only */
		else if (msr_is_sysenter(v->msrs[i].index)) {
			uint32_t lo = (uint32_t)v->msrs[i].data;

			MIX(c, lo);
		} else if (!msr_is_clock(v->msrs[i].index)) {
			MIX(c, v->msrs[i].data);
		}
	}
	d->part[PROTO_VERIFY_MSRS] = c;
	d->part[PROTO_VERIFY_LAPIC] = digest_lapic(&v->lapic);
	d->part[PROTO_VERIFY_EVENTS] = digest_events(&v->events);
	d->part[PROTO_VERIFY_MP_STATE] = proto_crc32c(0, &v->mp_state.mp_state,
						     sizeof(v->mp_state.mp_state));
	d->part[PROTO_VERIFY_DEBUGREGS] = digest_debugregs(&v->debugregs);
}

static uint32_t digest_pic(const struct kvm_pic_state *p)
{
	uint32_t c = 0;

	MIX(c, p->last_irr);
	MIX(c, p->irr);
	MIX(c, p->imr);
	MIX(c, p->isr);
	MIX(c, p->priority_add);
	MIX(c, p->irq_base);
	MIX(c, p->read_reg_select);
	MIX(c, p->poll);
	MIX(c, p->special_mask);
	MIX(c, p->init_state);
	MIX(c, p->auto_eoi);
	MIX(c, p->rotate_on_auto_eoi);
	MIX(c, p->special_fully_nested_mode);
	MIX(c, p->init4);
	MIX(c, p->elcr);
	return MIX(c, p->elcr_mask);
}

static uint32_t digest_ioapic(const struct kvm_ioapic_state *io)
{
	uint32_t c = 0;

	MIX(c, io->base_address);
	MIX(c, io->ioregsel);
	MIX(c, io->id);
	MIX(c, io->irr);
	for (int i = 0; i < KVM_IOAPIC_NUM_PINS; i++)
		MIX(c, io->redirtbl[i].bits);
	return c;
}

static uint32_t digest_pit(const struct kvm_pit_state2 *p)
{
	uint32_t c = 0;

	for (int i = 0; i < 3; i++) {
		const struct kvm_pit_channel_state *ch = &p->channels[i];

		/* count_load_time left out: a host timestamp (see the top). */
		MIX(c, ch->count);
		MIX(c, ch->latched_count);
		MIX(c, ch->count_latched);
		MIX(c, ch->status_latched);
		MIX(c, ch->status);
		MIX(c, ch->read_state);
		MIX(c, ch->write_state);
		MIX(c, ch->write_latch);
		MIX(c, ch->rw_mode);
		MIX(c, ch->mode);
		MIX(c, ch->bcd);
		MIX(c, ch->gate);
	}
	return MIX(c, p->flags);
}

static uint32_t digest_uart(const struct uart_state *u)
{
	uint32_t c = 0;

	MIX(c, u->ier);
	MIX(c, u->lcr);
	MIX(c, u->mcr);
	MIX(c, u->lsr_err);
	MIX(c, u->msr);
	MIX(c, u->scr);
	MIX(c, u->dll);
	MIX(c, u->dlm);
	MIX(c, u->fcr);
	MIX(c, u->thr_irq);
	MIX(c, u->irq_level);
	MIX(c, u->rx_head);
	MIX(c, u->rx_count);
	/* The FIFO's live bytes; the rest of the ring is not state. */
	for (uint32_t i = 0; i < u->rx_count && i < UART_RX_SIZE; i++)
		MIX(c, u->rx[(u->rx_head + i) % UART_RX_SIZE]);
	return c;
}

static uint32_t digest_virtio(uint32_t c, const struct virtio_state *v)
{
	MIX(c, v->driver_features);
	MIX(c, v->device_feature_select);
	MIX(c, v->driver_feature_select);
	MIX(c, v->queue_select);
	MIX(c, v->msix_config);
	MIX(c, v->status);
	MIX(c, v->isr);
	MIX(c, v->config_generation);
	MIX(c, v->msix_pending);
	MIX(c, v->dev_flags);
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
		const struct virtq_state *q = &v->q[i];

		MIX(c, q->desc);
		MIX(c, q->avail);
		MIX(c, q->used);
		MIX(c, q->size);
		MIX(c, q->enable);
		MIX(c, q->msix_vector);
		MIX(c, q->last_avail);
		MIX(c, q->used_idx);
	}
	for (int i = 0; i < VIRTIO_MSIX_VECTORS; i++) {
		MIX(c, v->msix[i].addr);
		MIX(c, v->msix[i].data);
		MIX(c, v->msix[i].ctrl);
	}
	return c;
}

/* Config spaces whole (no reserved bytes: all of it is register state or
 * zeros the model keeps), the config address, both virtio transports. */
static uint32_t digest_pci(const struct pci_state *p)
{
	uint32_t c = 0;

	MIX(c, p->addr);
	c = proto_crc32c(c, p->cfg, sizeof(p->cfg));
	c = digest_virtio(c, &p->blk);
	return digest_virtio(c, &p->net);
}

/* The platform devices but for stop_req (a request acted on at once, not
 * carried). CMOS whole: the time registers hold the last time read or set,
 * register C the RTC's flags as of rtc_sync_ns. */
static uint32_t digest_platform(const struct platform_state *p)
{
	uint32_t c = 0;

	MIX(c, p->cmos_index);
	MIX(c, p->reset_ctl);
	MIX(c, p->pm1_en);
	MIX(c, p->pm1_cnt);
	MIX(c, p->rtc_offset);
	MIX(c, p->rtc_sync_ns);
	MIX(c, p->rtc_phase_ns);
	return proto_crc32c(c, p->cmos, sizeof(p->cmos));
}

void ckpt_digest_vm(const struct machine_state *ms, struct proto_verify *d)
{
	d->vm[PROTO_VERIFY_PIC_MASTER] = digest_pic(&ms->vm.pic_master.chip.pic);
	d->vm[PROTO_VERIFY_PIC_SLAVE] = digest_pic(&ms->vm.pic_slave.chip.pic);
	d->vm[PROTO_VERIFY_IOAPIC] = digest_ioapic(&ms->vm.ioapic.chip.ioapic);
	d->vm[PROTO_VERIFY_PIT] = digest_pit(&ms->vm.pit);
	d->vm[PROTO_VERIFY_UART] = digest_uart(&ms->uart);
	d->vm[PROTO_VERIFY_PCI] = digest_pci(&ms->pci);
	d->vm[PROTO_VERIFY_PLATFORM] = digest_platform(&ms->platform);
	d->clock_ns = ms->vm.clock.clock;         /* runs on: order only */
}

/* The RAM's digest: four lanes of a rotate-multiply hash over 64-bit words,
 * folded and mixed. Each step is a bijection of the lane for a given word
 * (xor, rotate, multiply by an odd constant), so one word that differs
 * always changes its lane. Not crc32c: verify mode runs where the Linux
 * tests run, under QEMU's emulator, whose crc32 instruction is a helper
 * call per 8 bytes: 64 MiB took 1.5-1.8 s there against 0.11 s for this
 * function (qemu-x86_64 -cpu max on a 2-core host); natively both took
 * 0.035 s. Fed in pieces of whole 32-byte blocks (the last may be short). */
#define DIGEST_K 0x9e3779b97f4a7c15ull

struct ram_hash {
	uint64_t h[4], len;
};

static uint64_t rotl64(uint64_t x, int r)
{
	return x << r | x >> (64 - r);
}

static void ram_hash_add(struct ram_hash *rh, const uint8_t *p, uint64_t len)
{
	uint64_t i = 0, w;

	for (; i + 32 <= len; i += 32)
		for (int k = 0; k < 4; k++) {
			memcpy(&w, p + i + 8 * k, 8);
			rh->h[k] = rotl64(rh->h[k] ^ w, 31) * DIGEST_K;
		}
	for (; i < len; i++)
		rh->h[0] = rotl64(rh->h[0] ^ p[i], 31) * DIGEST_K;
	rh->len += len;
}

static uint32_t ram_hash_end(const struct ram_hash *rh)
{
	uint64_t x = rh->h[0] ^ rotl64(rh->h[1], 16) ^ rotl64(rh->h[2], 32) ^
		     rotl64(rh->h[3], 48) ^ rh->len;

	x ^= x >> 33;                 /* a 64-bit finalizer: every bit moves all */
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return (uint32_t)(x ^ x >> 32);
}

static const struct ram_hash ram_hash_start = { .h = { 1, 2, 3, 4 } };

uint32_t ckpt_digest_ram(const uint8_t *p, uint64_t len)
{
	struct ram_hash rh = ram_hash_start;

	ram_hash_add(&rh, p, len);
	return ram_hash_end(&rh);
}

/* KVM writes one byte of guest RAM from any vCPU ioctl: the steal-time
 * record's "preempted" flag (struct kvm_steal_time, offset 16), set by
 * kvm_arch_vcpu_put when the thread was preempted during the ioctl, for a
 * vCPU whose last exit was at an instruction boundary (one that has run).
 * So a standby that once ran as a primary (after a switchover) got it set
 * by an apply or a digest read under load, and a primary by its capture's
 * reads after its copy of the page. The guest's next entry rewrites the
 * record (KVM's record_steal_time), so the byte says nothing about the
 * guest; the RAM is digested as if it were 0. Found in the nested VM:
 * one epoch of 153 differing in RAM alone after a switchover. */
#define MSR_KVM_STEAL_TIME 0x4b564d03u
#define STEAL_PREEMPTED 16

/* The byte's offset in RAM, or UINT64_MAX (steal time off, or not RAM). */
static uint64_t steal_flag_off(const struct machine *m, const struct kvm_vcpu_state *v)
{
	uint32_t n = v->nmsrs < KVM_MAX_MSRS ? v->nmsrs : KVM_MAX_MSRS;
	uint64_t off;

	for (uint32_t i = 0; i < n; i++)
		if (v->msrs[i].index == MSR_KVM_STEAL_TIME && (v->msrs[i].data & 1) &&
		    machine_gpa_ram(m, (v->msrs[i].data & ~63ull) + STEAL_PREEMPTED, 1, &off))
			return off;
	return UINT64_MAX;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The RAM's digest with the bytes at the n offsets in skip read as 0. */
static uint32_t digest_ram_skipping(const uint8_t *ram, uint64_t len, uint64_t *skip, int n)
{
	struct ram_hash rh = ram_hash_start;
	uint8_t page[4096];
	uint64_t pos = 0;

	qsort(skip, (size_t)n, sizeof(*skip), cmp_u64);
	for (int i = 0; i < n && skip[i] < len; ) {
		uint64_t pg = skip[i] & ~4095ull, end = pg + 4096 < len ? pg + 4096 : len;

		ram_hash_add(&rh, ram + pos, pg - pos);
		memcpy(page, ram + pg, end - pg);
		for (; i < n && skip[i] < end; i++)
			page[skip[i] - pg] = 0;
		ram_hash_add(&rh, page, end - pg);
		pos = end;
	}
	ram_hash_add(&rh, ram + pos, len - pos);
	return ram_hash_end(&rh);
}

int ckpt_digest_machine(struct machine *m, struct proto_verify *d)
{
	struct kvm_vcpu_state *v = malloc(sizeof(*v));
	struct machine_state *ms = malloc(sizeof(*ms));
	uint64_t skip[KVM_MAX_VCPUS];
	int r = -ENOMEM;

	if (!v || !ms)
		goto out;
	memset(d, 0, sizeof(*d));
	d->ncpus = (uint32_t)m->ncpus;
	/* State first, RAM last: a LAPIC timer that fires while the RAM is
	 * read would otherwise show up as a difference in the IRR. */
	if ((r = machine_get_state(m, ms)) < 0)
		goto out;
	ckpt_digest_vm(ms, d);
	for (int i = 0; i < m->ncpus; i++) {
		if ((r = machine_get_vcpu_state(m, i, v)) < 0)
			goto out;
		ckpt_digest_vcpu(v, &d->vcpu[i]);
		skip[i] = steal_flag_off(m, v);
	}
	d->mem = digest_ram_skipping(m->ram, m->cfg.mem_bytes, skip, m->ncpus);
	r = 0;
out:
	free(v);
	free(ms);
	return r;
}

int ckpt_digest_capture(const struct machine *m, const struct ckpt *c, struct proto_verify *d)
{
	struct ckpt_image *img = malloc(sizeof(*img));
	uint64_t skip[KVM_MAX_VCPUS];
	int r = -ENOMEM;

	if (!img)
		return r;
	memset(d, 0, sizeof(*d));
	r = ckpt_state_decode(c->state, c->state_len, c->config_digest, m->ncpus, img);
	if (r == 0) {
		d->ncpus = (uint32_t)m->ncpus;
		ckpt_digest_vm(&img->ms, d);
		for (int i = 0; i < m->ncpus; i++) {
			ckpt_digest_vcpu(&img->vcpus[i], &d->vcpu[i]);
			skip[i] = steal_flag_off(m, &img->vcpus[i]);
		}
		d->mem = digest_ram_skipping(m->ram, m->cfg.mem_bytes, skip, m->ncpus);
	}
	free(img);
	return r;
}

int ckpt_digest_diff(const struct proto_verify *want, const struct proto_verify *got, char *buf,
		     size_t len)
{
	int n = 0;
	size_t off = 0;

#define NOTE(...) do { \
		n++; \
		if (off < len) \
			off += (size_t)snprintf(buf + off, len - off, off ? " %s" : "%s", __VA_ARGS__); \
	} while (0)
	if (len)
		buf[0] = 0;
	if (want->ncpus != got->ncpus) {
		NOTE("ncpus");
		return n;
	}
	if (want->mem != got->mem)
		NOTE("memory");
	for (int k = 0; k < PROTO_VERIFY_VM_PARTS; k++)
		if (want->vm[k] != got->vm[k])
			NOTE(vm_part_names[k]);
	if (got->clock_ns < want->clock_ns)
		NOTE("clock(backward)");
	for (uint32_t i = 0; i < want->ncpus && i < KVM_MAX_VCPUS; i++) {
		char name[48];

		for (int k = 0; k < PROTO_VERIFY_VCPU_PARTS; k++)
			if (want->vcpu[i].part[k] != got->vcpu[i].part[k]) {
				snprintf(name, sizeof(name), "vcpu%u.%s", i, vcpu_part_names[k]);
				NOTE(name);
			}
		if (got->vcpu[i].tsc < want->vcpu[i].tsc) {
			snprintf(name, sizeof(name), "vcpu%u.tsc(backward)", i);
			NOTE(name);
		}
	}
#undef NOTE
	return n;
}
