/* The virtio-pci modern transport (virtio 1.2, 4.1) and split virtqueues
 * (2.7): common configuration, ISR, notification, MSI-X, and the walk of
 * the rings in guest RAM.
 *
 * Everything the guest hands over (ring addresses, descriptor addresses,
 * lengths, indices) is checked against guest RAM before use; a request the
 * device cannot make sense of sets DEVICE_NEEDS_RESET (the driver must
 * reset the device) and the VMM carries on. A queue is served whole, under
 * machine.lock, either on the vCPU thread whose notify write exited to
 * userspace or, when the notify address is an ioeventfd (ioevent.c), on
 * the machine's I/O thread, and then only while the machine may run (no
 * pause requested, not stopping). So no request is ever in flight when the
 * machine pauses: the device state in a checkpoint is complete, a capture
 * with every vCPU parked and pause_req set never races a device writing
 * guest RAM, and every byte a device writes is marked with
 * machine_mark_dirty before the lock is dropped. A kick that reached an
 * eventfd but was not served is not in a checkpoint: a machine whose state
 * was loaded serves every queue once when it resumes (serving is
 * idempotent: it takes what the avail index shows beyond last_avail).
 * While post-copy pages are missing, a notify that exits is not served on
 * the vCPU thread but left to the I/O thread (virtio_dev.held), which
 * serves it when the last page is in: no thread waits on a missing page
 * with machine.lock held. A
 * passive queue (virtio-net's receive queue) is not served at
 * a notification: the device fills its next buffer when it has something
 * for the guest (virtio_queue_fill). Called with machine.lock held. */
#include "machine/virtio.h"
#include "machine/machine_int.h"
#include "kmod/mutant.h"

#include <errno.h>
#include <string.h>

#define TAG "virtio"

uint64_t virtq_chain_read(struct machine *m, const struct virtq_chain *c, uint64_t off,
			  void *buf, uint64_t len)
{
	uint64_t done = 0;

	(void)m;
	for (int i = 0; i < c->nread && done < len; i++) {
		const struct virtq_seg *s = &c->seg[i];
		uint64_t n;

		if (off >= s->len) {
			off -= s->len;
			continue;
		}
		n = s->len - off < len - done ? s->len - off : len - done;
		memcpy((uint8_t *)buf + done, s->hva + off, n);
		done += n;
		off = 0;
	}
	return done;
}

uint64_t virtq_chain_write(struct machine *m, const struct virtq_chain *c, uint64_t off,
			   const void *buf, uint64_t len)
{
	uint64_t done = 0;

	for (int i = c->nread; i < c->nseg && done < len; i++) {
		const struct virtq_seg *s = &c->seg[i];
		uint64_t n;

		if (off >= s->len) {
			off -= s->len;
			continue;
		}
		n = s->len - off < len - done ? s->len - off : len - done;
		memcpy(s->hva + off, (const uint8_t *)buf + done, n);
		machine_mark_dirty(m, s->ram_off + off, n);
		done += n;
		off = 0;
	}
	return done;
}

/* ---- interrupts ----------------------------------------------------------- */

static uint8_t msix_ctrl(const struct virtio_dev *d)
{
	return d->cfg[VIRTIO_CAP_MSIX + 3];
}

static void msix_send(struct virtio_dev *d, uint16_t v)
{
	struct virtio_msix_entry *e = &d->st->msix[v];

	d->st->msix_pending &= ~(1u << v);
	if (kvm_vm_signal_msi(&d->m->vm, e->addr, e->data) < 0)
		log_warn(TAG, "MSI-X vector %u: KVM_SIGNAL_MSI failed", v);
}

/* Interrupt on vector v: sent at once, or left pending while masked. With
 * MSI-X off there is no interrupt (the function has no INTx pin): the
 * driver polls the used ring and the ISR. */
static void notify_guest(struct virtio_dev *d, uint16_t v)
{
	uint8_t ctrl = msix_ctrl(d);

	if (!(ctrl & 0x80) || v >= VIRTIO_MSIX_VECTORS)
		return;
	if ((ctrl & 0x40) || (d->st->msix[v].ctrl & 1))
		d->st->msix_pending |= 1u << v;
	else
		msix_send(d, v);
}

void virtio_msix_update(struct virtio_dev *d)
{
	uint8_t ctrl = msix_ctrl(d);

	if (!(ctrl & 0x80) || (ctrl & 0x40))
		return;
	for (uint16_t v = 0; v < VIRTIO_MSIX_VECTORS; v++)
		if ((d->st->msix_pending >> v & 1) && !(d->st->msix[v].ctrl & 1))
			msix_send(d, v);
}

/* The device cannot go on: DEVICE_NEEDS_RESET and a configuration-change
 * interrupt (virtio 1.2, 2.1.2). */
static void set_broken(struct virtio_dev *d, int q, const char *why)
{
	struct virtio_state *st = d->st;

	if (st->status & VIRTIO_S_NEEDS_RESET)
		return;
	log_warn(TAG, "device %u queue %d: %s; the device needs a reset", d->type, q, why);
	st->status |= VIRTIO_S_NEEDS_RESET;
	if (st->status & VIRTIO_S_DRIVER_OK) {
		st->isr |= 2;
		notify_guest(d, st->msix_config);
	}
}

/* ---- split virtqueue -------------------------------------------------------- */

struct vring_desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags;
	uint16_t next;
};

/* Builds the chain starting at head; NULL on success, else what is wrong. */
static const char *chain_build(struct virtio_dev *d, const uint8_t *table, uint16_t size,
			       uint16_t head)
{
	struct virtq_chain *c = &d->chain;
	uint16_t idx = head;

	c->head = head;
	c->nseg = 0;
	c->nread = 0;
	c->read_bytes = 0;
	c->write_bytes = 0;
	for (;;) {
		struct virtq_seg *s;
		struct vring_desc desc;

		if (idx >= size)
			return "descriptor index out of the table";
		if (c->nseg >= size)
			return "descriptor chain loops or is longer than the queue";
		memcpy(&desc, table + 16 * (size_t)idx, sizeof(desc));
		if (desc.flags & VIRTQ_DESC_F_INDIRECT)
			return "indirect descriptor (not offered)";
		s = &c->seg[c->nseg];
		s->hva = machine_gpa_ram(d->m, desc.addr, desc.len, &s->ram_off);
		if (!s->hva)
			return "descriptor buffer outside guest RAM";
		s->len = desc.len;
		s->write = desc.flags & VIRTQ_DESC_F_WRITE;
		if (s->write) {
			c->write_bytes += desc.len;
		} else {
			if (c->nseg != c->nread)
				return "device-readable descriptor after a writable one";
			c->nread++;
			c->read_bytes += desc.len;
		}
		c->nseg++;
		if (!(desc.flags & VIRTQ_DESC_F_NEXT))
			return NULL;
		idx = desc.next;
	}
}

/* The rings of live queue qi, checked against guest RAM; false (with the
 * device broken when the rings are bad) if it cannot be served now. */
struct rings {
	uint8_t *desc, *avail, *used;
	uint64_t used_off;
};

static bool rings_map(struct virtio_dev *d, int qi, struct rings *r)
{
	struct virtio_state *st = d->st;
	struct virtq_state *q = &st->q[qi];
	uint16_t size = q->size;

	if (!(st->status & VIRTIO_S_DRIVER_OK) || (st->status & VIRTIO_S_NEEDS_RESET) ||
	    !q->enable)
		return false;
	if (!size) {
		set_broken(d, qi, "enabled with no size");
		return false;
	}
	r->desc = machine_gpa_ram(d->m, q->desc, 16ull * size, NULL);
	r->avail = machine_gpa_ram(d->m, q->avail, 6 + 2ull * size, NULL);
	r->used = machine_gpa_ram(d->m, q->used, 6 + 8ull * size, &r->used_off);
	if (!r->desc || !r->avail || !r->used || (q->desc & 15) || (q->avail & 1) || (q->used & 3)) {
		set_broken(d, qi, "rings misaligned or outside guest RAM");
		return false;
	}
	return true;
}

/* The available index, or -1 (device broken) when it ran ahead. */
static int avail_index(struct virtio_dev *d, int qi, const struct rings *r)
{
	struct virtq_state *q = &d->st->q[qi];
	uint16_t avail_idx = __atomic_load_n((uint16_t *)(r->avail + 2), __ATOMIC_ACQUIRE);

	if ((uint16_t)(avail_idx - q->last_avail) > q->size) {
		set_broken(d, qi, "available index ran ahead of the queue size");
		return -1;
	}
	return avail_idx;
}

static void used_push(struct virtio_dev *d, int qi, const struct rings *r, uint32_t id,
		      uint32_t written)
{
	struct virtq_state *q = &d->st->q[qi];

	memcpy(r->used + 4 + 8 * (size_t)(q->used_idx % q->size), &id, 4);
	memcpy(r->used + 8 + 8 * (size_t)(q->used_idx % q->size), &written, 4);
	q->used_idx++;
	q->last_avail++;
	/* The entry before the index that publishes it. */
	__atomic_store_n((uint16_t *)(r->used + 2), q->used_idx, __ATOMIC_RELEASE);
	d->requests++;
}

static void used_notify(struct virtio_dev *d, int qi, const struct rings *r)
{
	uint16_t avail_flags;

	machine_mark_dirty(d->m, r->used_off, 6 + 8ull * d->st->q[qi].size);
	memcpy(&avail_flags, r->avail, 2);
	if (!(avail_flags & VIRTQ_AVAIL_F_NO_INTERRUPT)) {
		d->st->isr |= 1;
		notify_guest(d, d->st->q[qi].msix_vector);
	}
}

static void queue_process(struct virtio_dev *d, int qi)
{
	struct virtq_state *q = &d->st->q[qi];
	struct rings r;
	unsigned served = 0;
	int avail_idx;

	if ((d->passive_queues >> qi & 1) || !rings_map(d, qi, &r) ||
	    (avail_idx = avail_index(d, qi, &r)) < 0)
		return;
	while (q->last_avail != (uint16_t)avail_idx) {
		uint16_t head;
		uint32_t written = 0;
		const char *why;

		memcpy(&head, r.avail + 4 + 2 * (size_t)(q->last_avail % q->size), 2);
		if ((why = chain_build(d, r.desc, q->size, head))) {
			set_broken(d, qi, why);
			break;
		}
		if (d->ops->request(d, qi, &d->chain, &written) < 0) {
			set_broken(d, qi, "malformed request");
			break;
		}
		used_push(d, qi, &r, head, written);
		served++;
	}
	if (served)
		used_notify(d, qi, &r);
}

void virtio_queue_notify(struct virtio_dev *d, int qi)
{
	if (qi >= 0 && qi < d->nqueues)
		queue_process(d, qi);
}

/* A notification that reached the transport (a notify write that exited,
 * the PCI_CFG window, DRIVER_OK): served now, or, while post-copy pages
 * are missing, left to the I/O thread for when the last one is in. */
static void queue_kick(struct virtio_dev *d, int qi)
{
	/* make check-mutants: a notify that exits is served with pages missing */
	if (d->m->pages_missing && !MUTANT(notify_while_missing)) {
		d->held |= 1u << qi;
		d->held_notifies++;
		return;
	}
	queue_process(d, qi);
}

int virtio_queue_fill(struct virtio_dev *d, int qi, const void *hdr, uint32_t hlen,
		      const void *buf, uint32_t len)
{
	struct virtq_state *q = &d->st->q[qi];
	struct virtq_chain *c = &d->chain;
	struct rings r;
	uint16_t head;
	const char *why;
	int avail_idx;

	if (qi >= d->nqueues || !rings_map(d, qi, &r))
		return (d->st->status & VIRTIO_S_NEEDS_RESET) ? -EIO : -ENODEV;
	if ((avail_idx = avail_index(d, qi, &r)) < 0)
		return -EIO;
	if (q->last_avail == (uint16_t)avail_idx)
		return -ENOBUFS;
	memcpy(&head, r.avail + 4 + 2 * (size_t)(q->last_avail % q->size), 2);
	if ((why = chain_build(d, r.desc, q->size, head)) ||
	    (c->nread && (why = "device-readable descriptor in a receive buffer"))) {
		set_broken(d, qi, why);
		return -EIO;
	}
	if (c->write_bytes < (uint64_t)hlen + len)
		return -EMSGSIZE;
	virtq_chain_write(d->m, c, 0, hdr, hlen);
	virtq_chain_write(d->m, c, hlen, buf, len);
	used_push(d, qi, &r, head, hlen + len);
	used_notify(d, qi, &r);
	return 0;
}

void virtio_config_changed(struct virtio_dev *d)
{
	struct virtio_state *st = d->st;

	st->config_generation++;
	if (st->status & VIRTIO_S_DRIVER_OK) {
		st->isr |= 2;
		notify_guest(d, st->msix_config);
	}
}

/* ---- registers ---------------------------------------------------------------- */

void virtio_reset(struct virtio_dev *d)
{
	struct virtio_state *st = d->st;
	struct virtio_msix_entry msix[VIRTIO_MSIX_VECTORS];

	memcpy(msix, st->msix, sizeof(msix));
	memset(st, 0, sizeof(*st));
	memcpy(st->msix, msix, sizeof(msix));
	st->msix_config = VIRTIO_NO_VECTOR;
	for (int i = 0; i < VIRTIO_MAX_QUEUES; i++) {
		st->q[i].size = i < d->nqueues ? VIRTQ_MAX_SIZE : 0;
		st->q[i].msix_vector = VIRTIO_NO_VECTOR;
	}
}

static void status_write(struct virtio_dev *d, uint8_t v)
{
	struct virtio_state *st = d->st;
	uint64_t f = st->driver_features;

	if (v == 0) {
		virtio_reset(d);
		return;
	}
	/* FEATURES_OK sticks only for a subset of what is offered that has
	 * VERSION_1 (a legacy driver is refused, 3.1.1). */
	if ((v & VIRTIO_S_FEATURES_OK) && !(st->status & VIRTIO_S_FEATURES_OK) &&
	    ((f & ~d->features) || !(f & VIRTIO_F_VERSION_1)))
		v &= (uint8_t)~VIRTIO_S_FEATURES_OK;
	/* DRIVER_OK without FEATURES_OK is a driver bug: keep the device off. */
	if ((v & VIRTIO_S_DRIVER_OK) && !(v & VIRTIO_S_FEATURES_OK))
		v &= (uint8_t)~VIRTIO_S_DRIVER_OK;
	st->status = (uint8_t)((v & ~VIRTIO_S_NEEDS_RESET) | (st->status & VIRTIO_S_NEEDS_RESET));
	if (st->status & VIRTIO_S_DRIVER_OK)
		for (int i = 0; i < d->nqueues; i++)
			queue_kick(d, i);   /* buffers made available before DRIVER_OK */
}

static uint16_t vector_ok(uint16_t v)
{
	return v < VIRTIO_MSIX_VECTORS ? v : VIRTIO_NO_VECTOR;
}

/* The common configuration structure (4.1.4.3), accessed at its natural widths. */
static uint64_t common_read(struct virtio_dev *d, uint32_t off)
{
	struct virtio_state *st = d->st;
	struct virtq_state *q = st->queue_select < d->nqueues ? &st->q[st->queue_select] : NULL;

	switch (off) {
	case 0x00: return st->device_feature_select;
	case 0x04: return st->device_feature_select < 2 ?
			(uint32_t)(d->features >> (32 * st->device_feature_select)) : 0;
	case 0x08: return st->driver_feature_select;
	case 0x0c: return st->driver_feature_select < 2 ?
			(uint32_t)(st->driver_features >> (32 * st->driver_feature_select)) : 0;
	case 0x10: return st->msix_config;
	case 0x12: return d->nqueues;
	case 0x14: return st->status;
	case 0x15: return st->config_generation;
	case 0x16: return st->queue_select;
	case 0x18: return q ? q->size : 0;
	case 0x1a: return q ? q->msix_vector : VIRTIO_NO_VECTOR;
	case 0x1c: return q ? q->enable : 0;
	case 0x1e: return q ? st->queue_select : 0;
	case 0x20: return q ? (uint32_t)q->desc : 0;
	case 0x24: return q ? (uint32_t)(q->desc >> 32) : 0;
	case 0x28: return q ? (uint32_t)q->avail : 0;
	case 0x2c: return q ? (uint32_t)(q->avail >> 32) : 0;
	case 0x30: return q ? (uint32_t)q->used : 0;
	case 0x34: return q ? (uint32_t)(q->used >> 32) : 0;
	default: return 0;
	}
}

static void set_half(uint64_t *x, bool high, uint32_t v)
{
	*x = high ? (*x & 0xffffffffull) | (uint64_t)v << 32 : (*x & ~0xffffffffull) | v;
}

static void common_write(struct virtio_dev *d, uint32_t off, uint64_t v)
{
	struct virtio_state *st = d->st;
	struct virtq_state *q = st->queue_select < d->nqueues ? &st->q[st->queue_select] : NULL;
	bool features_fixed = st->status & VIRTIO_S_FEATURES_OK;

	switch (off) {
	case 0x00: st->device_feature_select = (uint32_t)v; return;
	case 0x08: st->driver_feature_select = (uint32_t)v; return;
	case 0x0c:
		if (!features_fixed && st->driver_feature_select < 2)
			set_half(&st->driver_features, st->driver_feature_select, (uint32_t)v);
		return;
	case 0x10: st->msix_config = vector_ok((uint16_t)v); return;
	case 0x14: status_write(d, (uint8_t)v); return;
	case 0x16: st->queue_select = (uint16_t)v; return;
	default: break;
	}
	/* Queue fields: the selected queue, configured before it is enabled. */
	if (!q)
		return;
	if (off == 0x1a) {
		q->msix_vector = vector_ok((uint16_t)v);
		return;
	}
	if (q->enable)
		return;
	switch (off) {
	case 0x18:
		/* A split ring's size is a power of 2 (2.7): its indices wrap at 2^16. */
		if (v >= 1 && v <= VIRTQ_MAX_SIZE && !(v & (v - 1)))
			q->size = (uint16_t)v;
		return;
	case 0x1c:
		if (v == 1) {
			q->enable = 1;
			q->last_avail = 0;
			q->used_idx = 0;
		}
		return;
	case 0x20: case 0x24: set_half(&q->desc, off == 0x24, (uint32_t)v); return;
	case 0x28: case 0x2c: set_half(&q->avail, off == 0x2c, (uint32_t)v); return;
	case 0x30: case 0x34: set_half(&q->used, off == 0x34, (uint32_t)v); return;
	default: return;
	}
}

/* Width of a common configuration field at off: accesses of another width
 * or alignment are ignored (reads return 0). */
static uint32_t common_width(uint32_t off)
{
	if (off == 0x14 || off == 0x15)
		return 1;
	if (off >= 0x10 && off < 0x20)
		return (off & 1) ? 0 : 2;
	return (off & 3) ? 0 : 4;
}

static void msix_access(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len,
			bool write)
{
	struct virtio_state *st = d->st;
	uint64_t v = 0;

	if (off >= VIRTIO_MSIX_PBA_OFF) {
		if (!write && off - VIRTIO_MSIX_PBA_OFF < 8) {
			uint64_t pba = (uint64_t)st->msix_pending >> (8 * (off - VIRTIO_MSIX_PBA_OFF));

			memcpy(data, &pba, len);
		}
		return;
	}
	off -= VIRTIO_MSIX_TABLE_OFF;
	if (off / 16 >= VIRTIO_MSIX_VECTORS || (len != 4 && len != 8) || (off & (len - 1))) {
		if (!write)
			memset(data, 0, len);
		return;
	}
	/* The entry as 16 bytes: address, data, vector control. */
	struct virtio_msix_entry *e = &st->msix[off / 16];
	uint8_t raw[16];

	memcpy(raw, &e->addr, 8);
	memcpy(raw + 8, &e->data, 4);
	memcpy(raw + 12, &e->ctrl, 4);
	if (!write) {
		memcpy(data, raw + off % 16, len);
		return;
	}
	memcpy(&v, data, len);
	memcpy(raw + off % 16, &v, len);
	memcpy(&e->addr, raw, 8);
	memcpy(&e->data, raw + 8, 4);
	memcpy(&e->ctrl, raw + 12, 4);
	e->ctrl &= 1;
	virtio_msix_update(d);
}

void virtio_bar_access(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len,
		       bool write)
{
	struct virtio_state *st = d->st;
	uint64_t v = 0;

	if (write)
		memcpy(&v, data, len < 8 ? len : 8);
	else
		memset(data, 0, len);
	if (off < VIRTIO_COMMON_OFF + VIRTIO_COMMON_BYTES) {
		/* The 64-bit queue addresses also whole (4.1.3.1). */
		if (len == 8 && off >= 0x20 && !(off & 7)) {
			if (write) {
				common_write(d, off, (uint32_t)v);
				common_write(d, off + 4, v >> 32);
			} else {
				v = common_read(d, off) | common_read(d, off + 4) << 32;
				memcpy(data, &v, 8);
			}
			return;
		}
		if (common_width(off) != len)
			return;
		if (write)
			common_write(d, off, v);
		else
			v = common_read(d, off), memcpy(data, &v, len);
	} else if (off >= VIRTIO_ISR_OFF && off < VIRTIO_ISR_OFF + 4) {
		if (!write && off == VIRTIO_ISR_OFF) {
			data[0] = st->isr;   /* read-to-clear (4.1.4.5) */
			st->isr = 0;
		}
	} else if (off >= VIRTIO_DEVCFG_OFF && off < VIRTIO_DEVCFG_OFF + VIRTIO_DEVCFG_BYTES) {
		if (!write && off + len <= VIRTIO_DEVCFG_OFF + VIRTIO_DEVCFG_BYTES)
			d->ops->cfg_read(d, off - VIRTIO_DEVCFG_OFF, data, len);
	} else if (off >= VIRTIO_NOTIFY_OFF &&
		   off < VIRTIO_NOTIFY_OFF + VIRTIO_NOTIFY_MULT * (uint32_t)d->nqueues) {
		if (write)
			queue_kick(d, (int)((off - VIRTIO_NOTIFY_OFF) / VIRTIO_NOTIFY_MULT));
	} else if (off >= VIRTIO_MSIX_TABLE_OFF && off < VIRTIO_MSIX_PBA_OFF + 8) {
		msix_access(d, off, data, len, write);
	}
}

bool virtio_cfg_access(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len,
		       bool write)
{
	const uint8_t *cap = d->cfg + VIRTIO_CAP_PCI_CFG;
	uint32_t boff, blen;

	if (off + len <= VIRTIO_PCI_CFG_DATA || off >= VIRTIO_PCI_CFG_DATA + 4)
		return false;
	/* The VIRTIO_PCI_CAP_PCI_CFG window (4.1.4.9): an access to pci_cfg_data
	 * is an access of cap.length bytes to cap.bar at cap.offset. */
	memcpy(&boff, cap + 8, 4);
	memcpy(&blen, cap + 12, 4);
	if (!write)
		memset(data, 0, len);
	if (off != VIRTIO_PCI_CFG_DATA || cap[4] != 0 || (blen != 1 && blen != 2 && blen != 4) ||
	    len < blen || boff >= VIRTIO_BAR_BYTES || boff + blen > VIRTIO_BAR_BYTES)
		return true;
	virtio_bar_access(d, boff, data, blen, write);
	return true;
}
