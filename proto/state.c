/* Machine state on the wire: the state blob (header + named, versioned,
 * checksummed sections) and the data of each section, every integer
 * little-endian at a fixed place, whatever the host and its struct padding.
 * Layouts are in proto/proto.h; the field lists below are the single
 * description both the encoder and the decoder expand. */
#include "proto/proto.h"

#include "kmod/kmod.h"
#include "kmod/mutant.h"
#include "machine/machine.h" /* struct uart_state, pci_state, platform_state: plain device data */

#include <errno.h>
#include <string.h>

/* ---- little-endian cursors ------------------------------------------------ */

static inline void put8(uint8_t **p, uint8_t v)
{
	*(*p)++ = v;
}

static inline void put16(uint8_t **p, uint16_t v)
{
	le_put16(*p, v);
	*p += 2;
}

static inline void put32(uint8_t **p, uint32_t v)
{
	le_put32(*p, v);
	*p += 4;
}

static inline void put64(uint8_t **p, uint64_t v)
{
	le_put64(*p, v);
	*p += 8;
}

static inline uint8_t get8(const uint8_t **p)
{
	return *(*p)++;
}

static inline uint16_t get16(const uint8_t **p)
{
	*p += 2;
	return le_get16(*p - 2);
}

static inline uint32_t get32(const uint8_t **p)
{
	*p += 4;
	return le_get32(*p - 4);
}

static inline uint64_t get64(const uint8_t **p)
{
	*p += 8;
	return le_get64(*p - 8);
}

static void put_bytes(uint8_t **p, const void *src, size_t n)
{
	memcpy(*p, src, n);
	*p += n;
}

static void get_bytes(const uint8_t **p, void *dst, size_t n)
{
	memcpy(dst, *p, n);
	*p += n;
}

/* Field lists: F(bits, lvalue). PUT and GET expand them into the encoder
 * and the decoder, so the two cannot disagree on order or width. */
#define PUT(bits, x) put##bits(&p, (x));
#define GET(bits, x) (x) = get##bits(&p);

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* ---- blob header and section headers -------------------------------------- */

#define STATE_HDR_FIELDS(F, x)                                                   \
	F(32, (x).magic) F(32, (x).version) F(64, (x).digest) F(32, (x).nsections) \
	F(32, (x).ncpus) F(64, (x).total_len)
#define STATE_HDR_CRC_OFF 32

struct hdr_raw {
	uint32_t magic, version, nsections, ncpus;
	uint64_t digest, total_len;
};

void proto_state_hdr_encode(uint8_t out[PROTO_STATE_HDR_BYTES], const struct proto_state_hdr *h)
{
	struct hdr_raw r = { PROTO_STATE_MAGIC, PROTO_STATE_VERSION, h->nsections, h->ncpus,
			     h->digest, h->total_len };
	uint8_t *p = out;

	STATE_HDR_FIELDS(PUT, r)
	put32(&p, proto_crc32c(0, out, STATE_HDR_CRC_OFF));
	put32(&p, 0);
}

int proto_state_hdr_decode(const void *blob, size_t len, struct proto_state_hdr *h)
{
	const uint8_t *p = blob;
	struct hdr_raw r;
	uint32_t crc, pad;

	if (!blob || len < PROTO_STATE_HDR_BYTES)
		return -EBADMSG;
	STATE_HDR_FIELDS(GET, r)
	crc = get32(&p);
	pad = get32(&p);
	if (r.magic != PROTO_STATE_MAGIC || pad || crc != proto_crc32c(0, blob, STATE_HDR_CRC_OFF))
		return -EBADMSG;
	if (r.version != PROTO_STATE_VERSION)
		return -EPROTONOSUPPORT;
	if (r.total_len != len)
		return -EBADMSG;
	h->digest = r.digest;
	h->nsections = r.nsections;
	h->ncpus = r.ncpus;
	h->total_len = r.total_len;
	return 0;
}

size_t proto_section_bytes(size_t len)
{
	return PROTO_SECTION_HDR_BYTES + pad8(len);
}

/* name[16] | u32 version | u32 instance | u64 len | u32 crc | u32 pad (0) */
static void section_hdr_put(uint8_t *out, const char *name, uint32_t version, uint32_t instance,
			    uint64_t len, uint32_t crc)
{
	uint8_t *p = out + PROTO_SECTION_NAME_BYTES;

	memset(out, 0, PROTO_SECTION_NAME_BYTES);
	strncpy((char *)out, name, PROTO_SECTION_NAME_BYTES - 1);
	put32(&p, version);
	put32(&p, instance);
	put64(&p, len);
	put32(&p, crc);
	put32(&p, 0);
}

#define SECTION_CRC_OFF 32

/* Covers the section header (crc field as zero), the data and its padding. */
static uint32_t section_crc(const uint8_t *sec, size_t len)
{
	uint8_t h[PROTO_SECTION_HDR_BYTES];

	memcpy(h, sec, sizeof(h));
	memset(h + SECTION_CRC_OFF, 0, 4);
	return proto_crc32c(proto_crc32c(0, h, sizeof(h)), sec + sizeof(h), pad8(len));
}

void proto_section_seal(uint8_t *out, const char *name, uint32_t version, uint32_t instance,
			size_t len)
{
	uint8_t *data = out + PROTO_SECTION_HDR_BYTES;

	memset(data + len, 0, pad8(len) - len);
	section_hdr_put(out, name, version, instance, len, 0);
	section_hdr_put(out, name, version, instance, len, section_crc(out, len));
}

int proto_section_next(const void *blob, size_t len, size_t *off, struct proto_section *s)
{
	const uint8_t *sec = (const uint8_t *)blob + *off;
	const uint8_t *p = sec + PROTO_SECTION_NAME_BYTES;
	size_t room;
	uint32_t crc;

	if (*off > len || len - *off < PROTO_SECTION_HDR_BYTES)
		return -EBADMSG;
	room = len - *off - PROTO_SECTION_HDR_BYTES;
	memcpy(s->name, sec, PROTO_SECTION_NAME_BYTES);
	if (s->name[PROTO_SECTION_NAME_BYTES - 1])
		return -EBADMSG;
	s->version = get32(&p);
	s->instance = get32(&p);
	s->len = get64(&p);
	crc = get32(&p);
	if (get32(&p) || s->len > room || pad8(s->len) > room)
		return -EBADMSG;
	if (section_crc(sec, s->len) != crc)
		return -EBADMSG;
	s->data = sec + PROTO_SECTION_HDR_BYTES;
	*off += proto_section_bytes(s->len);
	return 0;
}

/* ---- vcpu -------------------------------------------------------------------- */

#define REGS_FIELDS(F, x)                                                               \
	F(64, (x).rax) F(64, (x).rbx) F(64, (x).rcx) F(64, (x).rdx) F(64, (x).rsi)      \
	F(64, (x).rdi) F(64, (x).rsp) F(64, (x).rbp) F(64, (x).r8) F(64, (x).r9)        \
	F(64, (x).r10) F(64, (x).r11) F(64, (x).r12) F(64, (x).r13) F(64, (x).r14)      \
	F(64, (x).r15) F(64, (x).rip) F(64, (x).rflags)
#define SEG_FIELDS(F, x)                                                                \
	F(64, (x).base) F(32, (x).limit) F(16, (x).selector) F(8, (x).type)             \
	F(8, (x).present) F(8, (x).dpl) F(8, (x).db) F(8, (x).s) F(8, (x).l) F(8, (x).g) \
	F(8, (x).avl) F(8, (x).unusable)
#define DT_FIELDS(F, x) F(64, (x).base) F(16, (x).limit)
#define SREGS_FIELDS(F, x)                                                              \
	SEG_FIELDS(F, (x).cs) SEG_FIELDS(F, (x).ds) SEG_FIELDS(F, (x).es)               \
	SEG_FIELDS(F, (x).fs) SEG_FIELDS(F, (x).gs) SEG_FIELDS(F, (x).ss)               \
	SEG_FIELDS(F, (x).tr) SEG_FIELDS(F, (x).ldt) DT_FIELDS(F, (x).gdt)              \
	DT_FIELDS(F, (x).idt) F(64, (x).cr0) F(64, (x).cr2) F(64, (x).cr3)              \
	F(64, (x).cr4) F(64, (x).cr8) F(64, (x).efer) F(64, (x).apic_base)              \
	F(64, (x).interrupt_bitmap[0]) F(64, (x).interrupt_bitmap[1])                   \
	F(64, (x).interrupt_bitmap[2]) F(64, (x).interrupt_bitmap[3])
#define EVENTS_FIELDS(F, x)                                                             \
	F(8, (x).exception.injected) F(8, (x).exception.nr)                             \
	F(8, (x).exception.has_error_code) F(8, (x).exception.pending)                  \
	F(32, (x).exception.error_code) F(8, (x).interrupt.injected)                    \
	F(8, (x).interrupt.nr) F(8, (x).interrupt.soft) F(8, (x).interrupt.shadow)      \
	F(8, (x).nmi.injected) F(8, (x).nmi.pending) F(8, (x).nmi.masked)               \
	F(32, (x).sipi_vector) F(32, (x).flags) F(8, (x).smi.smm) F(8, (x).smi.pending) \
	F(8, (x).smi.smm_inside_nmi) F(8, (x).smi.latched_init)                         \
	F(8, (x).triple_fault.pending) F(8, (x).exception_has_payload)                  \
	F(64, (x).exception_payload)
#define DEBUGREGS_FIELDS(F, x)                                                          \
	F(64, (x).db[0]) F(64, (x).db[1]) F(64, (x).db[2]) F(64, (x).db[3])             \
	F(64, (x).dr6) F(64, (x).dr7)
#define VCPU_FIELDS(F, x)                                                               \
	REGS_FIELDS(F, (x).regs) SREGS_FIELDS(F, (x).sregs) EVENTS_FIELDS(F, (x).events) \
	F(32, (x).mp_state.mp_state) DEBUGREGS_FIELDS(F, (x).debugregs)                 \
	F(32, (x).xcrs.nr_xcrs) F(32, (x).nmsrs) F(32, (x).xsave_size)

/* regs 144, sregs 292, events 37, mp_state 4, debugregs 48, counts 12 */
#define VCPU_FIELDS_BYTES 537u
#define VCPU_FIXED_BYTES (VCPU_FIELDS_BYTES + KVM_APIC_REG_SIZE)
#define VCPU_ENTRY_BYTES 12u /* xcr: u32 index, u64 value; msr: u32 index, u64 data */

size_t proto_vcpu_state_size(const struct kvm_vcpu_state *v)
{
	return VCPU_FIXED_BYTES + (size_t)(v->xcrs.nr_xcrs + v->nmsrs) * VCPU_ENTRY_BYTES +
	       v->xsave_size;
}

size_t proto_vcpu_state_encode(const struct kvm_vcpu_state *v, uint8_t *out)
{
	uint8_t *p = out;

	VCPU_FIELDS(PUT, *v)
	put_bytes(&p, v->lapic.regs, KVM_APIC_REG_SIZE);
	if (MUTANT(drop_state_section))   /* make check-mutants: the LAPIC is not sent */
		memset(p - KVM_APIC_REG_SIZE, 0, KVM_APIC_REG_SIZE);
	/* A count KVM never gives is written as it is (the decoder refuses
	 * it); entries past the array go out as zeros, never read from beyond. */
	for (uint32_t i = 0; i < v->xcrs.nr_xcrs; i++) {
		put32(&p, i < KVM_MAX_XCRS ? v->xcrs.xcrs[i].xcr : 0);
		put64(&p, i < KVM_MAX_XCRS ? v->xcrs.xcrs[i].value : 0);
	}
	for (uint32_t i = 0; i < v->nmsrs; i++) {
		put32(&p, v->msrs[i].index);
		put64(&p, v->msrs[i].data);
	}
	put_bytes(&p, v->xsave, v->xsave_size);
	return (size_t)(p - out);
}

/* The fixed part, lengths and counts first: nothing variable is read
 * before its count has been checked against len. */
int proto_vcpu_state_decode(const void *in, size_t len, struct kvm_vcpu_state *v)
{
	const uint8_t *p = in;

	if (len < VCPU_FIXED_BYTES)
		return -EBADMSG;
	memset(v, 0, offsetof(struct kvm_vcpu_state, msrs));
	VCPU_FIELDS(GET, *v)
	if (v->xcrs.nr_xcrs > KVM_MAX_XCRS || v->nmsrs > KVM_MAX_MSRS ||
	    v->xsave_size > KVM_XSAVE_MAX || v->xsave_size < 512)
		return -EBADMSG;
	if (len != proto_vcpu_state_size(v))
		return -EBADMSG;
	get_bytes(&p, v->lapic.regs, KVM_APIC_REG_SIZE);
	for (uint32_t i = 0; i < v->xcrs.nr_xcrs; i++) {
		v->xcrs.xcrs[i].xcr = get32(&p);
		v->xcrs.xcrs[i].value = get64(&p);
	}
	for (uint32_t i = 0; i < v->nmsrs; i++) {
		v->msrs[i].index = get32(&p);
		v->msrs[i].reserved = 0;
		v->msrs[i].data = get64(&p);
	}
	get_bytes(&p, v->xsave, v->xsave_size);
	memset(v->xsave + v->xsave_size, 0, KVM_XSAVE_MAX - v->xsave_size);
	return 0;
}

/* ---- vm: PIC master, PIC slave, IOAPIC, PIT, kvmclock -------------------------- */

#define PIC_FIELDS(F, x)                                                                \
	F(8, (x).last_irr) F(8, (x).irr) F(8, (x).imr) F(8, (x).isr)                    \
	F(8, (x).priority_add) F(8, (x).irq_base) F(8, (x).read_reg_select)             \
	F(8, (x).poll) F(8, (x).special_mask) F(8, (x).init_state) F(8, (x).auto_eoi)   \
	F(8, (x).rotate_on_auto_eoi) F(8, (x).special_fully_nested_mode)                \
	F(8, (x).init4) F(8, (x).elcr) F(8, (x).elcr_mask)
#define IOAPIC_FIELDS(F, x)                                                             \
	F(64, (x).base_address) F(32, (x).ioregsel) F(32, (x).id) F(32, (x).irr)
#define PIT_CHANNEL_FIELDS(F, x)                                                        \
	F(32, (x).count) F(16, (x).latched_count) F(8, (x).count_latched)               \
	F(8, (x).status_latched) F(8, (x).status) F(8, (x).read_state)                  \
	F(8, (x).write_state) F(8, (x).write_latch) F(8, (x).rw_mode) F(8, (x).mode)    \
	F(8, (x).bcd) F(8, (x).gate) F(64, (x).count_load_time)
#define CLOCK_FIELDS(F, x) F(64, (x).clock) F(32, (x).flags) F(64, (x).realtime) F(64, (x).host_tsc)
#define VM_FIELDS(F, x)                                                                 \
	PIC_FIELDS(F, (x).pic_master.chip.pic) PIC_FIELDS(F, (x).pic_slave.chip.pic)    \
	IOAPIC_FIELDS(F, (x).ioapic.chip.ioapic)                                        \
	PIT_CHANNEL_FIELDS(F, (x).pit.channels[0]) PIT_CHANNEL_FIELDS(F, (x).pit.channels[1]) \
	PIT_CHANNEL_FIELDS(F, (x).pit.channels[2]) F(32, (x).pit.flags) CLOCK_FIELDS(F, (x).clock)

size_t proto_vm_state_encode(const struct kvm_vm_state *s, uint8_t out[PROTO_VM_STATE_BYTES])
{
	uint8_t *p = out;

	VM_FIELDS(PUT, *s)
	for (int i = 0; i < KVM_IOAPIC_NUM_PINS; i++)
		put64(&p, s->ioapic.chip.ioapic.redirtbl[i].bits);
	return (size_t)(p - out);
}

int proto_vm_state_decode(const void *in, size_t len, struct kvm_vm_state *s)
{
	const uint8_t *p = in;

	if (len != PROTO_VM_STATE_BYTES)
		return -EBADMSG;
	memset(s, 0, sizeof(*s));
	s->pic_master.chip_id = KVM_IRQCHIP_PIC_MASTER;
	s->pic_slave.chip_id = KVM_IRQCHIP_PIC_SLAVE;
	s->ioapic.chip_id = KVM_IRQCHIP_IOAPIC;
	VM_FIELDS(GET, *s)
	for (int i = 0; i < KVM_IOAPIC_NUM_PINS; i++)
		s->ioapic.chip.ioapic.redirtbl[i].bits = get64(&p);
	return 0;
}

/* ---- uart: the 16550 ------------------------------------------------------------ */

#define UART_FIELDS(F, x)                                                               \
	F(8, (x).ier) F(8, (x).lcr) F(8, (x).mcr) F(8, (x).lsr_err) F(8, (x).msr)       \
	F(8, (x).scr) F(8, (x).dll) F(8, (x).dlm) F(8, (x).fcr) F(8, (x).thr_irq)       \
	F(8, (x).irq_level) F(32, (x).rx_head) F(32, (x).rx_count)

size_t proto_uart_state_encode(const struct uart_state *u, uint8_t out[PROTO_UART_STATE_BYTES])
{
	uint8_t *p = out;

	UART_FIELDS(PUT, *u)
	put_bytes(&p, u->rx, PROTO_UART_RX_BYTES);
	return (size_t)(p - out);
}

int proto_uart_state_decode(const void *in, size_t len, struct uart_state *u)
{
	const uint8_t *p = in;

	_Static_assert(PROTO_UART_RX_BYTES == UART_RX_SIZE, "the UART FIFO is part of the layout");
	if (len != PROTO_UART_STATE_BYTES)
		return -EBADMSG;
	memset(u, 0, offsetof(struct uart_state, rx));
	UART_FIELDS(GET, *u)
	if (u->rx_head >= UART_RX_SIZE || u->rx_count > UART_RX_SIZE || u->irq_level > 1)
		return -EBADMSG;
	get_bytes(&p, u->rx, PROTO_UART_RX_BYTES);
	return 0;
}

/* ---- pci: config spaces and the virtio transport ------------------------------- */

#define VIRTQ_FIELDS(F, x)                                                              \
	F(64, (x).desc) F(64, (x).avail) F(64, (x).used) F(16, (x).size) F(16, (x).enable) \
	F(16, (x).msix_vector) F(16, (x).last_avail) F(16, (x).used_idx)
#define MSIX_FIELDS(F, x) F(64, (x).addr) F(32, (x).data) F(32, (x).ctrl)
#define VIRTIO_FIELDS(F, x)                                                             \
	F(64, (x).driver_features) F(32, (x).device_feature_select)                     \
	F(32, (x).driver_feature_select) F(16, (x).queue_select) F(16, (x).msix_config) \
	F(8, (x).status) F(8, (x).isr) F(8, (x).config_generation) F(32, (x).msix_pending) \
	F(32, (x).dev_flags)

static void put_virtio(uint8_t **pp, const struct virtio_state *v)
{
	uint8_t *p = *pp;

	VIRTIO_FIELDS(PUT, *v)
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
		VIRTQ_FIELDS(PUT, v->q[i])
	}
	for (int i = 0; i < VIRTIO_MSIX_VECTORS; i++) {
		MSIX_FIELDS(PUT, v->msix[i])
	}
	*pp = p;
}

size_t proto_pci_state_encode(const struct pci_state *s, uint8_t out[PROTO_PCI_STATE_BYTES])
{
	uint8_t *p = out;

	put32(&p, s->addr);
	put_bytes(&p, s->cfg, sizeof(s->cfg));
	put_virtio(&p, &s->blk);
	put_virtio(&p, &s->net);
	return (size_t)(p - out);
}

static bool vector_valid(uint16_t v)
{
	return v < VIRTIO_MSIX_VECTORS || v == 0xffff;
}

static void get_virtio(const uint8_t **pp, struct virtio_state *v)
{
	const uint8_t *p = *pp;

	VIRTIO_FIELDS(GET, *v)
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
		VIRTQ_FIELDS(GET, v->q[i])
	}
	for (int i = 0; i < VIRTIO_MSIX_VECTORS; i++) {
		MSIX_FIELDS(GET, v->msix[i])
	}
	*pp = p;
}

/* What the device model relies on: sizes it divides by, vectors it
 * indexes with, flags that are single bits. */
static bool virtio_valid(const struct virtio_state *v)
{
	if (v->isr > 3 || !vector_valid(v->msix_config) || v->msix_pending >> VIRTIO_MSIX_VECTORS ||
	    v->dev_flags > 1)
		return false;
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
		const struct virtq_state *q = &v->q[i];

		if (q->size > VIRTIO_QUEUE_MAX || (q->size & (q->size - 1)) || q->enable > 1 ||
		    (q->enable && !q->size) || !vector_valid(q->msix_vector))
			return false;
	}
	for (int i = 0; i < VIRTIO_MSIX_VECTORS; i++)
		if (v->msix[i].ctrl > 1)
			return false;
	return true;
}

int proto_pci_state_decode(const void *in, size_t len, struct pci_state *s)
{
	const uint8_t *p = in;

	_Static_assert(sizeof(s->cfg) == PROTO_PCI_NSLOTS * 256, "config spaces are part of the layout");
	_Static_assert(VIRTIO_MAX_QUEUES == 3 && VIRTIO_MSIX_VECTORS == 4,
		       "queues and vectors are part of the layout");
	if (len != PROTO_PCI_STATE_BYTES)
		return -EBADMSG;
	memset(s, 0, sizeof(*s));
	s->addr = get32(&p);
	get_bytes(&p, s->cfg, sizeof(s->cfg));
	get_virtio(&p, &s->blk);
	get_virtio(&p, &s->net);
	if ((s->addr & ~0x80fffffcu) || !virtio_valid(&s->blk) || !virtio_valid(&s->net))
		return -EBADMSG;
	return 0;
}

/* ---- platform: CMOS RTC, ACPI PM1a, reset control -------------------------------- */

#define PLATFORM_FIELDS(F, x)                                                           \
	F(8, (x).cmos_index) F(8, (x).reset_ctl) F(16, (x).pm1_en) F(16, (x).pm1_cnt)   \
	F(16, pad16) F(64, rtc_offset)

size_t proto_platform_state_encode(const struct platform_state *s,
				   uint8_t out[PROTO_PLATFORM_STATE_BYTES])
{
	uint8_t *p = out;
	uint16_t pad16 = 0;
	uint64_t rtc_offset = (uint64_t)s->rtc_offset;

	PLATFORM_FIELDS(PUT, *s)
	put_bytes(&p, s->cmos, sizeof(s->cmos));
	put64(&p, (uint64_t)s->rtc_sync_ns);
	put64(&p, (uint64_t)s->rtc_phase_ns);
	return (size_t)(p - out);
}

/* What the device model relies on is platform_check's (machine/platform.c).
 * Version 1 (a build before the RTC's interrupts) has no rtc_sync_ns and
 * register C at 0: it reads with rtc_sync_ns 0, the RTC's events running
 * from the first access on, as they did then. Version 2 (before the
 * divider's restart) has no rtc_phase_ns: 0, the host's seconds. */
int proto_platform_state_decode(const void *in, size_t len, uint32_t version,
				struct platform_state *s)
{
	const uint8_t *p = in;
	uint16_t pad16;
	uint64_t rtc_offset;

	_Static_assert(sizeof(s->cmos) == 128, "CMOS RAM is part of the layout");
	if (version < 1 || version > PROTO_STATE_PLATFORM_VERSION)
		return -EPROTONOSUPPORT;
	if (len != (version == 1 ? PROTO_PLATFORM_STATE_V1_BYTES :
		    version == 2 ? PROTO_PLATFORM_STATE_V2_BYTES : PROTO_PLATFORM_STATE_BYTES))
		return -EBADMSG;
	memset(s, 0, sizeof(*s));
	PLATFORM_FIELDS(GET, *s)
	get_bytes(&p, s->cmos, sizeof(s->cmos));
	s->rtc_offset = (int64_t)rtc_offset;
	if (version >= 2)
		s->rtc_sync_ns = (int64_t)get64(&p);
	if (version >= 3)
		s->rtc_phase_ns = (int64_t)get64(&p);
	if (pad16 || platform_check(s) < 0 || (version == 1 && s->cmos[0x0c]))
		return -EBADMSG;
	return 0;
}
