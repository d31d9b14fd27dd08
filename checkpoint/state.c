/* The state part of a checkpoint: named, versioned sections with a CRC32C
 * each, behind a header carrying the config digest.
 *
 *   header  { magic, version, digest, nsections, ncpus, total_len, hdr_crc }
 *   section { name[16], version, instance, len, crc, pad } data (padded to 8)
 * The header CRC covers the header; a section's CRC covers its header (crc
 * taken as zero), data and padding; pad fields must be zero: every byte of
 * the blob is checked.
 *
 * Sections are described by the table below; a device adds one entry. */
#include "checkpoint/checkpoint.h"
#include "proto/proto.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define TAG "ckpt"
#define STATE_MAGIC 0x31534b43u   /* "CKS1" */
#define NAME_LEN 16

struct state_hdr {
	uint32_t magic;
	uint32_t version;
	uint64_t digest;
	uint32_t nsections;
	uint32_t ncpus;
	uint64_t total_len;
	uint32_t hdr_crc;      /* over the fields above */
	uint32_t pad;
};

struct section_hdr {
	char name[NAME_LEN];
	uint32_t version;
	uint32_t instance;
	uint64_t len;
	uint32_t crc;
	uint32_t pad;
};

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* ---- vcpu: every piece of one vCPU, field by field ---------------------- */

struct vcpu_fixed {
	struct kvm_regs regs;
	struct kvm_sregs sregs;
	struct kvm_xcrs xcrs;
	struct kvm_lapic_state lapic;
	struct kvm_vcpu_events events;
	struct kvm_mp_state mp_state;
	struct kvm_debugregs debugregs;
	uint32_t nmsrs;
	uint32_t xsave_size;
};

static int vcpu_count(const struct ckpt_image *img)
{
	return img->ncpus;
}

static size_t vcpu_size(const struct ckpt_image *img, int i)
{
	const struct kvm_vcpu_state *v = &img->vcpus[i];

	return sizeof(struct vcpu_fixed) + v->nmsrs * sizeof(struct kvm_msr_entry) + v->xsave_size;
}

static void vcpu_save(const struct ckpt_image *img, int i, uint8_t *out)
{
	const struct kvm_vcpu_state *v = &img->vcpus[i];
	struct vcpu_fixed f;

	memset(&f, 0, sizeof(f));
	f.regs = v->regs;
	f.sregs = v->sregs;
	f.xcrs = v->xcrs;
#ifndef UNDERSTUDY_MUTANT_drop_state_section   /* make check-mutants: the LAPIC is not sent */
	f.lapic = v->lapic;
#endif
	f.events = v->events;
	f.mp_state = v->mp_state;
	f.debugregs = v->debugregs;
	f.nmsrs = v->nmsrs;
	f.xsave_size = v->xsave_size;
	memcpy(out, &f, sizeof(f));
	out += sizeof(f);
	memcpy(out, v->msrs, v->nmsrs * sizeof(struct kvm_msr_entry));
	out += v->nmsrs * sizeof(struct kvm_msr_entry);
	memcpy(out, v->xsave, v->xsave_size);
}

/* What KVM would refuse half-way through an apply is refused here, before
 * anything is written: reserved flags, impossible vectors and states. */
static bool vcpu_fields_valid(const struct vcpu_fixed *f)
{
	const uint32_t event_flags = KVM_VCPUEVENT_VALID_NMI_PENDING |
		KVM_VCPUEVENT_VALID_SIPI_VECTOR | KVM_VCPUEVENT_VALID_SHADOW |
		KVM_VCPUEVENT_VALID_SMM | KVM_VCPUEVENT_VALID_PAYLOAD |
		KVM_VCPUEVENT_VALID_TRIPLE_FAULT;

	if (f->debugregs.flags || f->xcrs.flags || f->xcrs.nr_xcrs > KVM_MAX_XCRS)
		return false;
	if (f->events.flags & ~event_flags)
		return false;
	if (f->events.exception.injected &&
	    (f->events.exception.nr > 31 || f->events.exception.nr == 2))
		return false;
	return f->mp_state.mp_state <= KVM_MP_STATE_AP_RESET_HOLD;
}

static int vcpu_load(struct ckpt_image *img, int i, const uint8_t *in, size_t len)
{
	struct kvm_vcpu_state *v = &img->vcpus[i];
	struct vcpu_fixed f;

	if (len < sizeof(f))
		return -EBADMSG;
	memcpy(&f, in, sizeof(f));
	if (f.nmsrs > KVM_MAX_MSRS || f.xsave_size > KVM_XSAVE_MAX || f.xsave_size < 512 ||
	    len != sizeof(f) + f.nmsrs * sizeof(struct kvm_msr_entry) + f.xsave_size)
		return -EBADMSG;
	if (!vcpu_fields_valid(&f))
		return -EBADMSG;
	v->regs = f.regs;
	v->sregs = f.sregs;
	v->xcrs = f.xcrs;
	v->lapic = f.lapic;
	v->events = f.events;
	v->mp_state = f.mp_state;
	v->debugregs = f.debugregs;
	v->nmsrs = f.nmsrs;
	v->xsave_size = f.xsave_size;
	in += sizeof(f);
	memcpy(v->msrs, in, f.nmsrs * sizeof(struct kvm_msr_entry));
	in += f.nmsrs * sizeof(struct kvm_msr_entry);
	memset(v->xsave, 0, sizeof(v->xsave));
	memcpy(v->xsave, in, f.xsave_size);
	return 0;
}

/* ---- vm: PIC, IOAPIC, PIT, kvmclock ---------------------------------------- */

static int one(const struct ckpt_image *img)
{
	(void)img;
	return 1;
}

static size_t vm_size(const struct ckpt_image *img, int i)
{
	(void)img;
	(void)i;
	return sizeof(struct kvm_vm_state);
}

static void vm_save(const struct ckpt_image *img, int i, uint8_t *out)
{
	(void)i;
	memcpy(out, &img->ms.vm, sizeof(img->ms.vm));
}

static int vm_load(struct ckpt_image *img, int i, const uint8_t *in, size_t len)
{
	(void)i;
	if (len != sizeof(img->ms.vm))
		return -EBADMSG;
	memcpy(&img->ms.vm, in, len);
	if (img->ms.vm.pic_master.chip_id != KVM_IRQCHIP_PIC_MASTER ||
	    img->ms.vm.pic_slave.chip_id != KVM_IRQCHIP_PIC_SLAVE ||
	    img->ms.vm.ioapic.chip_id != KVM_IRQCHIP_IOAPIC)
		return -EBADMSG;
	return 0;
}

/* ---- uart: the 16550 ------------------------------------------------------- */

static size_t uart_size(const struct ckpt_image *img, int i)
{
	(void)img;
	(void)i;
	return sizeof(struct uart_state);
}

static void uart_save(const struct ckpt_image *img, int i, uint8_t *out)
{
	(void)i;
	memcpy(out, &img->ms.uart, sizeof(img->ms.uart));
}

static int uart_load(struct ckpt_image *img, int i, const uint8_t *in, size_t len)
{
	struct uart_state *u = &img->ms.uart;

	(void)i;
	if (len != sizeof(*u))
		return -EBADMSG;
	memcpy(u, in, len);
	if (u->rx_head >= UART_RX_SIZE || u->rx_count > UART_RX_SIZE || u->irq_level > 1)
		return -EBADMSG;
	return 0;
}

static const struct ckpt_section_ops sections[] = {
	{ "vcpu", 1, vcpu_count, vcpu_size, vcpu_save, vcpu_load, NULL },
	{ "vm", 1, one, vm_size, vm_save, vm_load, NULL },
	/* the UART's IRQ line is re-driven by machine_set_state (uart_post_load) */
	{ "uart", 1, one, uart_size, uart_save, uart_load, NULL },
};
#define NSECTION_KINDS (sizeof(sections) / sizeof(sections[0]))

/* ---- encode / decode ------------------------------------------------------ */

int ckpt_image_read(struct machine *m, struct ckpt_image *img)
{
	int r;

	img->ncpus = m->ncpus;
	if ((r = machine_get_state(m, &img->ms)) < 0)
		return r;
	for (int i = 0; i < m->ncpus; i++)
		if ((r = machine_get_vcpu_state(m, i, &img->vcpus[i])) < 0)
			return r;
	return 0;
}

int ckpt_state_post_load(struct machine *m, const struct ckpt_image *img)
{
	int r;

	for (size_t k = 0; k < NSECTION_KINDS; k++)
		if (sections[k].post_load && (r = sections[k].post_load(m, img)) < 0) {
			log_error(TAG, "post-load of '%s': %s", sections[k].name, strerror(-r));
			return r;
		}
	return 0;
}

static uint32_t hdr_crc(const struct state_hdr *h)
{
	return proto_crc32c(0, h, offsetof(struct state_hdr, hdr_crc));
}

/* Covers the section header (crc field as zero), the data and its padding. */
static uint32_t section_crc(const struct section_hdr *s, const uint8_t *data)
{
	struct section_hdr h = *s;

	h.crc = 0;
	return proto_crc32c(proto_crc32c(0, &h, sizeof(h)), data, pad8(s->len));
}

int ckpt_state_encode(struct ckpt *c, const struct ckpt_image *img)
{
	size_t total = sizeof(struct state_hdr);
	uint32_t nsec = 0;
	struct state_hdr h;
	uint8_t *p;

	for (size_t k = 0; k < NSECTION_KINDS; k++)
		for (int i = 0; i < sections[k].count(img); i++, nsec++)
			total += sizeof(struct section_hdr) + pad8(sections[k].size(img, i));
	if (total > c->cap_state) {
		uint8_t *n = realloc(c->state, total);

		if (!n)
			return -ENOMEM;
		c->state = n;
		c->cap_state = total;
	}
	p = c->state + sizeof(h);
	for (size_t k = 0; k < NSECTION_KINDS; k++) {
		for (int i = 0; i < sections[k].count(img); i++) {
			struct section_hdr s;
			size_t len = sections[k].size(img, i);

			memset(&s, 0, sizeof(s));
			strncpy(s.name, sections[k].name, NAME_LEN - 1);
			s.version = sections[k].version;
			s.instance = (uint32_t)i;
			s.len = len;
			memset(p + sizeof(s) + len, 0, pad8(len) - len);
			sections[k].save(img, i, p + sizeof(s));
			s.crc = section_crc(&s, p + sizeof(s));
			memcpy(p, &s, sizeof(s));
			p += sizeof(s) + pad8(len);
		}
	}
	memset(&h, 0, sizeof(h));
	h.magic = STATE_MAGIC;
	h.version = CKPT_STATE_VERSION;
	h.digest = c->config_digest;
	h.nsections = nsec;
	h.ncpus = (uint32_t)img->ncpus;
	h.total_len = total;
	h.hdr_crc = hdr_crc(&h);
	memcpy(c->state, &h, sizeof(h));
	c->state_len = total;
	return 0;
}

static const struct ckpt_section_ops *find_kind(const char *name, size_t *kind)
{
	for (size_t k = 0; k < NSECTION_KINDS; k++)
		if (!strncmp(name, sections[k].name, NAME_LEN)) {
			*kind = k;
			return &sections[k];
		}
	return NULL;
}

int ckpt_state_decode(const uint8_t *blob, size_t len, uint64_t digest, int ncpus,
		      struct ckpt_image *img)
{
	/* seen[kind] is a bitmap of instances (at most KVM_MAX_VCPUS). */
	uint32_t seen[NSECTION_KINDS] = { 0 };
	struct state_hdr h;
	size_t off = sizeof(h);
	int r;

	if (!blob || len < sizeof(h)) {
		log_error(TAG, "state: missing or truncated (%zu bytes)", len);
		return -EBADMSG;
	}
	memcpy(&h, blob, sizeof(h));
	if (h.magic != STATE_MAGIC || h.hdr_crc != hdr_crc(&h) || h.pad) {
		log_error(TAG, "state: bad header (magic or checksum)");
		return -EBADMSG;
	}
	if (h.version != CKPT_STATE_VERSION) {
		log_error(TAG, "state: version %u, this build reads %u", h.version, CKPT_STATE_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (h.digest != digest || h.ncpus != (uint32_t)ncpus) {
		log_error(TAG, "state: belongs to another machine configuration");
		return -ESTALE;
	}
	if (h.total_len != len) {
		log_error(TAG, "state: length %zu, header says %llu", len,
			  (unsigned long long)h.total_len);
		return -EBADMSG;
	}
	img->ncpus = ncpus;
	for (uint32_t n = 0; n < h.nsections; n++) {
		const struct ckpt_section_ops *ops;
		struct section_hdr s;
		size_t kind;

		if (len - off < sizeof(s)) {
			log_error(TAG, "state: truncated at section %u", n);
			return -EBADMSG;
		}
		memcpy(&s, blob + off, sizeof(s));
		off += sizeof(s);
		if (s.name[NAME_LEN - 1]) {
			log_error(TAG, "state: section %u has a malformed name", n);
			return -EBADMSG;
		}
		ops = find_kind(s.name, &kind);
		if (!ops) {
			log_error(TAG, "state: unknown section '%s'", s.name);
			return -EBADMSG;
		}
		if (s.version != ops->version) {
			log_error(TAG, "state: section '%s' version %u, this build reads %u", s.name,
				  s.version, ops->version);
			return -EPROTONOSUPPORT;
		}
		if (s.instance >= (uint32_t)ops->count(img) || (seen[kind] >> s.instance) & 1) {
			log_error(TAG, "state: section '%s' instance %u unexpected or repeated",
				  s.name, s.instance);
			return -EBADMSG;
		}
		if (s.len > len - off || pad8(s.len) > len - off) {
			log_error(TAG, "state: section '%s' runs past the end", s.name);
			return -EBADMSG;
		}
		if (section_crc(&s, blob + off) != s.crc || s.pad) {
			log_error(TAG, "state: section '%s' %u checksum mismatch", s.name, s.instance);
			return -EBADMSG;
		}
		if ((r = ops->load(img, (int)s.instance, blob + off, s.len)) < 0) {
			log_error(TAG, "state: section '%s' %u malformed", s.name, s.instance);
			return r;
		}
		seen[kind] |= 1u << s.instance;
		off += pad8(s.len);
	}
	if (off != len) {
		log_error(TAG, "state: %zu bytes of trailing data", len - off);
		return -EBADMSG;
	}
	for (size_t k = 0; k < NSECTION_KINDS; k++) {
		int cnt = sections[k].count(img);

		if (seen[k] != (cnt >= 32 ? ~0u : (1u << cnt) - 1)) {
			log_error(TAG, "state: section '%s' missing", sections[k].name);
			return -EBADMSG;
		}
	}
	return 0;
}
