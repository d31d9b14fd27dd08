/* virtio-net (virtio 1.2, 5.1): queue 0 receive, queue 1 transmit, queue 2
 * control; features VERSION_1, MAC, STATUS, CTRL_VQ and GUEST_ANNOUNCE, no
 * checksum or segmentation offload (every frame is whole and checksummed
 * by the guest, so its virtio_net_hdr is all zero but num_buffers = 1).
 *
 * The device has no tap of its own: machine/ is below net/. A frame the
 * guest sends goes to the owner through ops.net_tx, on the thread that
 * serves the transmit queue (the I/O thread, never while a pause is
 * requested, or the vCPU thread whose notify exited), with machine.lock
 * held (the owner holds it until the checkpoint that produced it is
 * acknowledged: output commit). A
 * frame for the guest comes in by machine_net_input, which refuses while a
 * pause is requested: the device writes guest RAM only while the vCPUs may
 * run, so a capture (all vCPUs parked, pause_req set) never races it, and
 * every byte it writes is marked in the VMM's dirty set before the lock is
 * dropped. It refuses too while post-copy pages are missing: its caller
 * is the loop that places them, which must never wait on one (the frame
 * is dropped and counted, as with a full ring; TCP retransmits). Checkpointed state: the transport (m->pci.net) and the ANNOUNCE
 * request in its dev_flags; the MAC comes from the configuration. */
#include "machine/virtio.h"
#include "machine/machine_int.h"
#include "kmod/mutant.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TAG "vnet"

#define NET_F_MAC            (1ull << 5)
#define NET_F_STATUS         (1ull << 16)
#define NET_F_CTRL_VQ        (1ull << 17)
#define NET_F_GUEST_ANNOUNCE (1ull << 21)

#define NET_S_LINK_UP  1
#define NET_S_ANNOUNCE 2

#define NET_Q_RX   0
#define NET_Q_TX   1
#define NET_Q_CTRL 2

#define NET_CTRL_ANNOUNCE     3
#define NET_CTRL_ANNOUNCE_ACK 0
#define NET_OK  0
#define NET_ERR 1

static struct virtio_net *to_net(struct virtio_dev *d)
{
	return (struct virtio_net *)d;
}

void machine_net_mac(const struct machine_config *cfg, uint8_t mac[6])
{
	static const uint8_t zero[6];
	uint64_t h;

	if (memcmp(cfg->net_mac, zero, 6)) {
		memcpy(mac, cfg->net_mac, 6);
		return;
	}
	/* Locally administered, unicast: 52:54:00 then three bytes of the
	 * digest (which covers the NIC, not this MAC). */
	h = machine_config_digest(cfg);
	mac[0] = 0x52;
	mac[1] = 0x54;
	mac[2] = 0x00;
	mac[3] = (uint8_t)(h >> 16);
	mac[4] = (uint8_t)(h >> 8);
	mac[5] = (uint8_t)h;
}

/* struct virtio_net_config: mac[6], status (le16); the rest is for
 * features not offered. */
static void net_cfg_read(struct virtio_dev *d, uint32_t off, uint8_t *data, uint32_t len)
{
	struct virtio_net *n = to_net(d);
	uint8_t cfg[VIRTIO_DEVCFG_BYTES] = { 0 };
	uint16_t status = NET_S_LINK_UP;

	if (d->st->dev_flags & VNET_FLAG_ANNOUNCE)
		status |= NET_S_ANNOUNCE;
	memcpy(cfg, n->mac, 6);
	memcpy(cfg + 6, &status, 2);
	memcpy(data, cfg + off, len);
}

static int net_tx(struct virtio_net *n, struct virtq_chain *c, uint32_t *written)
{
	struct machine *m = n->dev.m;
	uint64_t len;

	/* The header, then the frame; nothing for the device to write. */
	if (c->read_bytes < VNET_HDR_BYTES || c->read_bytes > sizeof(n->frame))
		return -EBADMSG;
	len = c->read_bytes - VNET_HDR_BYTES;
	*written = 0;
	if (len < 14 || len > VNET_FRAME_MAX) {
		n->tx_dropped++;      /* not an Ethernet frame this link carries */
		return 0;
	}
	virtq_chain_read(m, c, 0, n->frame, c->read_bytes);
	n->tx_frames++;
	if (m->ops.net_tx)
		m->ops.net_tx(m->ops.ctx, n->frame + VNET_HDR_BYTES, (size_t)len);
	return 0;
}

static int net_ctrl(struct virtio_net *n, struct virtq_chain *c, uint32_t *written)
{
	struct machine *m = n->dev.m;
	uint8_t cmd[2], ack = NET_ERR;

	if (c->read_bytes < 2 || c->write_bytes < 1)
		return -EBADMSG;
	virtq_chain_read(m, c, 0, cmd, 2);
	if (cmd[0] == NET_CTRL_ANNOUNCE && cmd[1] == NET_CTRL_ANNOUNCE_ACK &&
	    (n->dev.st->driver_features & NET_F_GUEST_ANNOUNCE)) {
		n->dev.st->dev_flags &= ~VNET_FLAG_ANNOUNCE;
		ack = NET_OK;
	}
	virtq_chain_write(m, c, c->write_bytes - 1, &ack, 1);
	*written = 1;
	return 0;
}

static int net_request(struct virtio_dev *d, int q, struct virtq_chain *c, uint32_t *written)
{
	if (q == NET_Q_TX)
		return net_tx(to_net(d), c, written);
	if (q == NET_Q_CTRL)
		return net_ctrl(to_net(d), c, written);
	return -EBADMSG;
}

static const struct virtio_dev_ops net_ops = {
	.cfg_read = net_cfg_read,
	.request = net_request,
};

int machine_net_input(struct machine *m, const uint8_t *frame, size_t len)
{
	uint8_t hdr[VNET_HDR_BYTES] = { 0 };
	struct virtio_net *n = m->vnet;
	uint16_t nbuf = 1;   /* num_buffers: one buffer a frame (no MRG_RXBUF) */
	int r;

	if (!n)
		return -ENODEV;
	if (len < 14 || len > VNET_FRAME_MAX)
		return -EMSGSIZE;
	memcpy(hdr + 10, &nbuf, 2);
	pthread_mutex_lock(&m->lock);
	/* Post-copy: the receive ring and buffers may be missing pages, and
	 * this is the loop that places them (uffd.c): dropped instead. */
	if (m->pause_req || m->stopping ||
	    (m->pages_missing && !MUTANT(rx_while_missing)))   /* make check-mutants: a frame written with pages missing */
		r = -EAGAIN;
	else
		r = virtio_queue_fill(&n->dev, NET_Q_RX, hdr, sizeof(hdr), frame, (uint32_t)len);
	if (r == 0) {
		n->rx_frames++;
		pthread_cond_broadcast(&m->cond);   /* an idle vCPU wakes for it */
	} else {
		n->rx_dropped++;
	}
	pthread_mutex_unlock(&m->lock);
	return r;
}

bool machine_net_announce(struct machine *m)
{
	struct virtio_net *n = m->vnet;
	bool asked = false;

	if (!n)
		return false;
	pthread_mutex_lock(&m->lock);
	if ((n->dev.st->status & VIRTIO_S_DRIVER_OK) &&
	    (n->dev.st->driver_features & NET_F_GUEST_ANNOUNCE)) {
		n->dev.st->dev_flags |= VNET_FLAG_ANNOUNCE;
		virtio_config_changed(&n->dev);
		pthread_cond_broadcast(&m->cond);
		asked = true;
	}
	pthread_mutex_unlock(&m->lock);
	return asked;
}

uint64_t machine_net_rx_dropped(struct machine *m)
{
	uint64_t v;

	if (!m->vnet)
		return 0;
	pthread_mutex_lock(&m->lock);
	v = m->vnet->rx_dropped;
	pthread_mutex_unlock(&m->lock);
	return v;
}

int virtio_net_open(struct machine *m)
{
	struct virtio_net *n;

	m->vnet = NULL;
	if (!m->cfg.nnets)
		return 0;
	if (m->cfg.nnets != 1) {
		log_error(TAG, "at most one virtio-net device");
		return -EINVAL;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	machine_net_mac(&m->cfg, n->mac);
	n->dev.m = m;
	n->dev.st = &m->pci.net;
	n->dev.cfg = m->pci.cfg[PCI_SLOT_NET];
	n->dev.type = VIRTIO_TYPE_NET;
	n->dev.nqueues = 3;
	n->dev.features = VIRTIO_F_VERSION_1 | NET_F_MAC | NET_F_STATUS | NET_F_CTRL_VQ |
			  NET_F_GUEST_ANNOUNCE;
	n->dev.ops = &net_ops;
	n->dev.passive_queues = 1u << NET_Q_RX;
	m->vnet = n;
	log_info(TAG, "virtio-net %02x:%02x:%02x:%02x:%02x:%02x", n->mac[0], n->mac[1], n->mac[2],
		 n->mac[3], n->mac[4], n->mac[5]);
	return 0;
}

void virtio_net_close(struct machine *m)
{
	free(m->vnet);
	m->vnet = NULL;
}
