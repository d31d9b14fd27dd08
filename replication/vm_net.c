/* The VM's NIC on the agent's loop: its tap, read at once into the guest,
 * and network output commit for what the guest sends.
 *
 * A frame the guest sends in epoch N is appended, on the vCPU thread, to
 * the held records (struct repl_net_held, under out_lock like the console
 * bytes); the capture that ends epoch N notes how many frames were sent by
 * then (repl_vm_net_mark, with the guest paused); when ACK(N) arrives the
 * frames up to that mark are written to the tap, in the order the guest sent
 * them (repl_vm_net_release from the epoch's commit). Ungated (unprotected
 * run, after a takeover, after the standby is given up) every frame leaves
 * as soon as the loop wakes. Frames are not carried to the standby: a frame
 * of an acknowledged epoch that the primary had not written when it died is
 * lost, as on any network (the peer retransmits), never sent twice by two
 * hosts.
 *
 * Inbound frames go to the guest at once, on the loop thread, which is also
 * the thread that pauses the guest for a capture: a frame is never written
 * into guest RAM while a capture runs (machine_net_input refuses while any
 * pause is requested, for pauses from elsewhere). A standby reads its tap
 * and drops what it reads: its guest is not running. */
#include "replication/replication_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kmod/le.h"

#define TAG "vnet"
#define RX_BATCH 64          /* frames read from the tap a wake-up */

static void wake(struct repl_vm *v)
{
	ev_async_send(v->loop, &v->wake);
}

void repl_vm_net_tx(void *ctx, const uint8_t *frame, size_t len)
{
	struct repl_vm *v = ctx;
	struct repl_net_held *h = &v->net;
	bool first, fresh;

	if (!v->tap)
		return;
	pthread_mutex_lock(&v->out_lock);
	if (h->frames >= REPL_NET_HELD_FRAMES || len > UINT16_MAX ||
	    h->len + 2 + len > REPL_NET_HELD_BYTES) {
		h->dropped++;
		if (!h->drop_logged)
			log_warn(TAG, "%u frames (%zu bytes) held for output commit: dropping what the "
				 "guest sends until some leave", h->frames, h->len);
		h->drop_logged = true;
		pthread_mutex_unlock(&v->out_lock);
		return;
	}
	le_put16(h->buf + h->len, (uint16_t)len);
	memcpy(h->buf + h->len + 2, frame, len);
	first = h->frames == 0;
	fresh = h->produced == h->epoch_mark;
	h->len += 2 + len;
	h->frames++;
	h->produced++;
	pthread_mutex_unlock(&v->out_lock);
	if (first && !v->gated) {
		wake(v);
	} else if (fresh && v->gated) {
		/* An output-triggered epoch may end now (as for console output). */
		atomic_store(&v->out_new, true);
		wake(v);
	}
}

uint64_t repl_vm_net_mark(struct repl_vm *v)
{
	uint64_t mark;

	pthread_mutex_lock(&v->out_lock);
	mark = v->net.produced;
	pthread_mutex_unlock(&v->out_lock);
	return mark;
}

void repl_vm_net_release(struct repl_vm *v, uint64_t epoch, uint64_t mark)
{
	struct repl_net_held *h = &v->net;
	uint64_t from, n = 0;
	size_t off = 0;

	if (!v->tap)
		return;
	/* The console's rule: nothing leaves unless the witness lease is
	 * provably valid (repl_vm_release logs it). */
	if (v->witness && !repl_witness_valid(v->witness))
		return;
	pthread_mutex_lock(&v->out_lock);
	from = h->released;
	while (h->frames && h->released + n < mark) {
		size_t len = le_get16(h->buf + off);

		if (net_tap_write(v->tap, h->buf + off + 2, len) < 0)
			h->tap_errors++;     /* a full tap queue drops it, as a wire would */
		off += 2 + len;
		h->frames--;
		n++;
	}
	if (off) {
		memmove(h->buf, h->buf + off, h->len - off);
		h->len -= off;
		h->released += n;
		h->drop_logged = false;
	}
	pthread_mutex_unlock(&v->out_lock);
	if (n && epoch && repl_event_log_on())
		repl_event_log("netrel %llu %llu %llu", (unsigned long long)epoch,
			       (unsigned long long)from, (unsigned long long)(from + n));
	else if (n && !epoch && repl_event_log_on())
		repl_event_log("netout %llu %llu", (unsigned long long)from,
			       (unsigned long long)(from + n));
}

/* Broadcasts from this host with the guest's MAC as their source, as QEMU
 * sends after a migration (RARP, ethertype 0x8035, "reverse request" for
 * the MAC itself): every bridge and switch on the way learns the MAC's new
 * port at once, whether or not the guest's driver takes GUEST_ANNOUNCE or
 * has anything to send. Without them a silent guest stays unreachable:
 * frames for it go on to the old host's port until it next transmits or
 * the bridge forgets (300 s). They hold no guest state, so output commit
 * does not apply; the witness rule does (no traffic drawn here without
 * the lease). */
#define RARP_COPIES 3
void repl_vm_net_announce(struct repl_vm *v)
{
	uint8_t f[60] = { 0 }, mac[6];
	int sent = 0;

	if (!v->tap || (v->witness && !repl_witness_valid(v->witness)))
		return;
	machine_net_mac(&v->m->cfg, mac);
	memset(f, 0xff, 6);                 /* to everyone */
	memcpy(f + 6, mac, 6);              /* from the guest's MAC */
	le_put16(f + 12, 0x3580);           /* 0x8035, big-endian on the wire */
	f[15] = 1;                          /* hardware: Ethernet */
	f[16] = 0x08;                       /* protocol: IPv4 */
	f[18] = 6;
	f[19] = 4;
	f[21] = 3;                          /* reverse request */
	memcpy(f + 22, mac, 6);             /* sender's hardware address */
	memcpy(f + 32, mac, 6);             /* target's hardware address */
	for (int i = 0; i < RARP_COPIES; i++)
		sent += net_tap_write(v->tap, f, sizeof(f)) == 0;
	log_info(TAG, "%d of %d RARP announcements of %02x:%02x:%02x:%02x:%02x:%02x sent on this "
		 "host's tap", sent, RARP_COPIES, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]);
}

void repl_vm_net_forget(struct repl_vm *v)
{
	pthread_mutex_lock(&v->out_lock);
	v->net.released += v->net.frames;
	v->net.frames = 0;
	v->net.len = 0;
	pthread_mutex_unlock(&v->out_lock);
}

static void on_tap(struct ev_loop *loop, ev_io *w, int revents)
{
	struct repl_vm *v = w->data;
	uint8_t frame[65536];       /* a tap frame is at most its MTU plus 14 */

	(void)loop;
	(void)revents;
	for (int i = 0; i < RX_BATCH; i++) {
		ssize_t n = net_tap_read(v->tap, frame, sizeof(frame));

		if (n == -EAGAIN)
			return;
		if (n < 0) {
			log_warn(TAG, "reading the tap: %s; no more input", strerror((int)-n));
			ev_io_stop(v->loop, &v->tap_w);
			return;
		}
		/* Dropped when the guest has no buffer, is paused or may miss
		 * pages (post-copy: this loop places them; counted by the
		 * machine): a NIC with a full ring does the same. */
		if (machine_net_input(v->m, frame, (size_t)n) == 0)
			v->net.rx_frames++;
	}
}

int repl_vm_net_open(struct repl_vm *v)
{
	const struct machine_config *cfg = &v->m->cfg;
	int r;

	if (!cfg->nnets)
		return 0;
	v->net.buf = malloc(REPL_NET_HELD_BYTES);
	if (!v->net.buf)
		return -ENOMEM;
	if ((r = net_tap_open(cfg->net_tap, &v->tap)) < 0) {
		free(v->net.buf);
		v->net.buf = NULL;
		return r;
	}
	ev_io_init(&v->tap_w, on_tap, net_tap_fd(v->tap), EV_READ);
	v->tap_w.data = v;
	ev_io_start(v->loop, &v->tap_w);
	return 0;
}

void repl_vm_net_close(struct repl_vm *v)
{
	if (!v->tap)
		return;
	ev_io_stop(v->loop, &v->tap_w);
	if (v->net.dropped || v->net.tap_errors)
		log_info(TAG, "frames dropped: %llu at the held bound, %llu refused by the tap",
			 (unsigned long long)v->net.dropped, (unsigned long long)v->net.tap_errors);
	net_tap_close(v->tap);
	v->tap = NULL;
	free(v->net.buf);
	v->net.buf = NULL;
}
