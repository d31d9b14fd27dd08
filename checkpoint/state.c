/* The state part of a checkpoint: named, versioned sections with a CRC32C
 * each, behind a header carrying the config digest. proto/ owns every byte
 * of it (layout in proto/proto.h); this file says which sections a
 * checkpoint has, reads them from the machine and checks what they hold.
 *
 * Sections are described by the table below; a device adds one entry (and
 * its encoder in proto/state.c). */
#include "checkpoint/checkpoint.h"
#include "proto/proto.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define TAG "ckpt"

/* ---- vcpu ----------------------------------------------------------------- */

static int vcpu_count(const struct ckpt_image *img)
{
	return img->ncpus;
}

static size_t vcpu_size(const struct ckpt_image *img, int i)
{
	return proto_vcpu_state_size(&img->vcpus[i]);
}

static void vcpu_save(const struct ckpt_image *img, int i, uint8_t *out)
{
	proto_vcpu_state_encode(&img->vcpus[i], out);
}

/* What KVM would refuse half-way through an apply is refused here, before
 * anything is written: impossible event flags, vectors and states. */
static bool vcpu_fields_valid(const struct kvm_vcpu_state *v)
{
	const uint32_t event_flags = KVM_VCPUEVENT_VALID_NMI_PENDING |
		KVM_VCPUEVENT_VALID_SIPI_VECTOR | KVM_VCPUEVENT_VALID_SHADOW |
		KVM_VCPUEVENT_VALID_SMM | KVM_VCPUEVENT_VALID_PAYLOAD |
		KVM_VCPUEVENT_VALID_TRIPLE_FAULT;

	if (v->events.flags & ~event_flags)
		return false;
	if (v->events.exception.injected &&
	    (v->events.exception.nr > 31 || v->events.exception.nr == 2))
		return false;
	return v->mp_state.mp_state <= KVM_MP_STATE_AP_RESET_HOLD;
}

static int vcpu_load(struct ckpt_image *img, int i, uint32_t version, const uint8_t *in,
                     size_t len)
{
	int r = proto_vcpu_state_decode(in, len, &img->vcpus[i]);

	(void)version;
	if (r < 0)
		return r;
	return vcpu_fields_valid(&img->vcpus[i]) ? 0 : -EBADMSG;
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
	return PROTO_VM_STATE_BYTES;
}

static void vm_save(const struct ckpt_image *img, int i, uint8_t *out)
{
	(void)i;
	proto_vm_state_encode(&img->ms.vm, out);
}

static int vm_load(struct ckpt_image *img, int i, uint32_t version, const uint8_t *in,
                   size_t len)
{
	(void)version;
	(void)i;
	return proto_vm_state_decode(in, len, &img->ms.vm);
}

/* ---- uart: the 16550 ------------------------------------------------------- */

static size_t uart_size(const struct ckpt_image *img, int i)
{
	(void)img;
	(void)i;
	return PROTO_UART_STATE_BYTES;
}

static void uart_save(const struct ckpt_image *img, int i, uint8_t *out)
{
	(void)i;
	proto_uart_state_encode(&img->ms.uart, out);
}

static int uart_load(struct ckpt_image *img, int i, uint32_t version, const uint8_t *in,
                     size_t len)
{
	(void)version;
	(void)i;
	return proto_uart_state_decode(in, len, &img->ms.uart);
}

/* ---- pci: config spaces and the virtio transport ----------------------------- */

static size_t pci_size(const struct ckpt_image *img, int i)
{
	(void)img;
	(void)i;
	return PROTO_PCI_STATE_BYTES;
}

static void pci_save(const struct ckpt_image *img, int i, uint8_t *out)
{
	(void)i;
	proto_pci_state_encode(&img->ms.pci, out);
}

static int pci_load(struct ckpt_image *img, int i, uint32_t version, const uint8_t *in,
                    size_t len)
{
	(void)version;
	(void)i;
	return proto_pci_state_decode(in, len, &img->ms.pci);
}

/* ---- platform: CMOS RTC, ACPI PM1a, reset control ------------------------------- */

static size_t platform_size(const struct ckpt_image *img, int i)
{
	(void)img;
	(void)i;
	return PROTO_PLATFORM_STATE_BYTES;
}

static void platform_save(const struct ckpt_image *img, int i, uint8_t *out)
{
	(void)i;
	proto_platform_state_encode(&img->ms.platform, out);
}

static int platform_load(struct ckpt_image *img, int i, uint32_t version, const uint8_t *in,
                         size_t len)
{
	(void)i;
	return proto_platform_state_decode(in, len, version, &img->ms.platform);
}

/* A blob of a build before the section: the restore of it then left the
 * devices in their power-on state, and so does this one. */
static void platform_absent(struct ckpt_image *img)
{
	platform_reset(&img->ms.platform);
}

static const struct ckpt_section_ops sections[] = {
	{ PROTO_STATE_VCPU, PROTO_STATE_VCPU_VERSION, vcpu_count, vcpu_size, vcpu_save,
	  vcpu_load, NULL },
	{ PROTO_STATE_VM, PROTO_STATE_VM_VERSION, one, vm_size, vm_save, vm_load, NULL },
	/* the UART's IRQ line is re-driven by machine_set_state (uart_post_load) */
	{ PROTO_STATE_UART, PROTO_STATE_UART_VERSION, one, uart_size, uart_save, uart_load, NULL },
	/* no request is in flight at a capture (virtio_blk.c): queues go on from
	 * last_avail/used_idx as they are */
	{ PROTO_STATE_PCI, PROTO_STATE_PCI_VERSION, one, pci_size, pci_save, pci_load, NULL },
	/* stop_req is not carried: machine_set_state clears it */
	{ PROTO_STATE_PLATFORM, PROTO_STATE_PLATFORM_VERSION, one, platform_size, platform_save,
	  platform_load, NULL, platform_absent, 1 },
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

int ckpt_state_encode(struct ckpt *c, const struct ckpt_image *img)
{
	size_t total = PROTO_STATE_HDR_BYTES;
	struct proto_state_hdr h;
	uint32_t nsec = 0;
	uint8_t *p;

	for (size_t k = 0; k < NSECTION_KINDS; k++)
		for (int i = 0; i < sections[k].count(img); i++, nsec++)
			total += proto_section_bytes(sections[k].size(img, i));
	if (total > c->cap_state) {
		uint8_t *n = realloc(c->state, total);

		if (!n)
			return -ENOMEM;
		c->state = n;
		c->cap_state = total;
	}
	p = c->state + PROTO_STATE_HDR_BYTES;
	for (size_t k = 0; k < NSECTION_KINDS; k++) {
		for (int i = 0; i < sections[k].count(img); i++) {
			size_t len = sections[k].size(img, i);

			sections[k].save(img, i, p + PROTO_SECTION_HDR_BYTES);
			proto_section_seal(p, sections[k].name, sections[k].version, (uint32_t)i, len);
			p += proto_section_bytes(len);
		}
	}
	h.digest = c->config_digest;
	h.nsections = nsec;
	h.ncpus = (uint32_t)img->ncpus;
	h.total_len = total;
	proto_state_hdr_encode(c->state, &h);
	c->state_len = total;
	return 0;
}

int ckpt_state_ncpus(const uint8_t *blob, size_t len)
{
	struct proto_state_hdr h;
	int r = proto_state_hdr_decode(blob, len, &h);

	if (r < 0)
		return r;
	return h.ncpus < 1 || h.ncpus > KVM_MAX_VCPUS ? -EBADMSG : (int)h.ncpus;
}

static const struct ckpt_section_ops *find_kind(const char *name, size_t *kind)
{
	for (size_t k = 0; k < NSECTION_KINDS; k++)
		if (!strncmp(name, sections[k].name, PROTO_SECTION_NAME_BYTES)) {
			*kind = k;
			return &sections[k];
		}
	return NULL;
}

static int decode_header(const uint8_t *blob, size_t len, uint64_t digest, int ncpus,
			 uint32_t *nsections)
{
	struct proto_state_hdr h;
	int r = proto_state_hdr_decode(blob, len, &h);

	if (r == -EPROTONOSUPPORT) {
		log_error(TAG, "state: a blob version this build does not read (%u)",
			  PROTO_STATE_VERSION);
		return r;
	}
	if (r < 0) {
		log_error(TAG, "state: missing, truncated or bad header (%zu bytes)", len);
		return -EBADMSG;
	}
	if (h.digest != digest || h.ncpus != (uint32_t)ncpus) {
		log_error(TAG, "state: belongs to another machine configuration");
		return -ESTALE;
	}
	*nsections = h.nsections;
	return 0;
}

/* One section: known, of a version this build reads, an expected instance
 * seen once, data that decodes. seen[kind] is a bitmap of instances. */
static int decode_section(const struct proto_section *s, uint32_t n, uint32_t *seen,
			  struct ckpt_image *img)
{
	const struct ckpt_section_ops *ops;
	size_t kind;
	int r;

	ops = find_kind(s->name, &kind);
	if (!ops) {
		log_error(TAG, "state: unknown section '%s'", s->name);
		return -EBADMSG;
	}
	if (s->version != ops->version &&
	    !(ops->oldest && s->version >= ops->oldest && s->version < ops->version)) {
		log_error(TAG, "state: section '%s' version %u, this build reads %u%s", s->name,
			  s->version, ops->version, ops->oldest ? " and older" : "");
		return -EPROTONOSUPPORT;
	}
	if (s->instance >= (uint32_t)ops->count(img) || (seen[kind] >> s->instance) & 1) {
		log_error(TAG, "state: section %u ('%s' %u) unexpected or repeated", n, s->name,
			  s->instance);
		return -EBADMSG;
	}
	if ((r = ops->load(img, (int)s->instance, s->version, s->data, s->len)) < 0) {
		log_error(TAG, "state: section '%s' %u malformed", s->name, s->instance);
		return r;
	}
	seen[kind] |= 1u << s->instance;
	return 0;
}

int ckpt_state_decode(const uint8_t *blob, size_t len, uint64_t digest, int ncpus,
		      struct ckpt_image *img)
{
	uint32_t seen[NSECTION_KINDS] = { 0 };
	size_t off = PROTO_STATE_HDR_BYTES;
	uint32_t nsections;
	int r;

	if ((r = decode_header(blob, len, digest, ncpus, &nsections)) < 0)
		return r;
	img->ncpus = ncpus;
	for (uint32_t n = 0; n < nsections; n++) {
		struct proto_section s;

		if (proto_section_next(blob, len, &off, &s) < 0) {
			log_error(TAG, "state: section %u truncated, misnamed or checksum mismatch", n);
			return -EBADMSG;
		}
		if ((r = decode_section(&s, n, seen, img)) < 0)
			return r;
	}
	if (off != len) {
		log_error(TAG, "state: %zu bytes of trailing data", len - off);
		return -EBADMSG;
	}
	for (size_t k = 0; k < NSECTION_KINDS; k++) {
		int cnt = sections[k].count(img);

		if (!seen[k] && sections[k].absent) {
			sections[k].absent(img);
			continue;
		}
		if (seen[k] != (cnt >= 32 ? ~0u : (1u << cnt) - 1)) {
			log_error(TAG, "state: section '%s' missing", sections[k].name);
			return -EBADMSG;
		}
	}
	return 0;
}
