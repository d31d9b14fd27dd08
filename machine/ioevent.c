/* The machine's I/O thread: virtio queue notifications without a KVM exit.
 *
 * Each queue's notify address (BAR0 + VIRTIO_NOTIFY_OFF + 4 * queue: one
 * address a queue, so no datamatch) is an ioeventfd: the guest's write is
 * taken by KVM, which signals the queue's eventfd, and the vCPU goes on in
 * the guest. One thread a machine polls the eventfds and serves the queues
 * that were kicked, under machine.lock and only while the machine may run
 * (no pause requested, not stopping), as machine_net_input does: a kick
 * read during a pause stays pending and is served when the machine
 * resumes. At a post-copy destination it also waits until no page is
 * missing (uffd.c says why): the kicks, and the resume's pass over every
 * queue, are served when the last page is in; a notify that exits to a
 * vCPU thread meanwhile is left to it the same way (the device's held
 * queues, taken here into the pending ones). So the transport's invariant (virtio_pci.c) holds as on the
 * vCPU thread: nothing is in flight when every vCPU is parked, a capture
 * never races a device write, and what a device writes is marked dirty
 * before the lock is dropped. A kick that reached an eventfd after a
 * capture is in no checkpoint: when device state is loaded every queue
 * becomes pending, and is served at the resume (idempotent: the device
 * takes what the avail index shows beyond its last_avail).
 *
 * Interrupts stay KVM_SIGNAL_MSI from this thread: one system call an
 * interrupt, as a write to an irqfd would be (docs/design.md says why).
 * On by default for a Linux guest, off for the built-in (polling) guests;
 * UNDERSTUDY_IOEVENTFD=1 or 0 turns it on or off for any. Off, or on a KVM
 * without KVM_IOEVENTFD, every notification is a KVM exit served on the
 * vCPU thread; the thread then only serves the queues left pending by a
 * load or held during post-copy. */
#include "machine/ioevent.h"
#include "machine/machine_int.h"
#include "kmod/mutant.h"
#include "machine/devices.h"
#include "machine/virtio.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define TAG "ioevent"
#define IOEV_NQ (PCI_NSLOTS * VIRTIO_MAX_QUEUES)

struct ioev_queue {
	int fd;             /* eventfd; -1: the slot's device has no such queue */
	uint64_t gpa;       /* where it is assigned in KVM; 0: nowhere */
	uint32_t len;       /* its length there (0: any) */
};

struct machine_ioevent {
	struct machine *m;
	pthread_t thread;
	bool started;
	bool enabled;       /* KVM_IOEVENTFD wanted (not turned off by IOEVENT_ENV) */
	bool warned;        /* a KVM_IOEVENTFD failure was logged */
	bool quit;          /* under machine.lock */
	int wake_fd;
	uint32_t pending;   /* queues to serve, bit slot * VIRTIO_MAX_QUEUES + queue; under lock */
	uint64_t kicks, served;
	struct ioev_queue q[IOEV_NQ];
};

/* ---- the notify addresses in KVM ------------------------------------------ */

static bool assign(struct machine_ioevent *io, struct ioev_queue *q, uint64_t gpa)
{
	/* Any length first (the fast MMIO path, no instruction decoding);
	 * a KVM without KVM_CAP_IOEVENTFD_NO_LENGTH takes the driver's
	 * 16-bit write (virtio 1.2, 4.1.5.2). */
	static const uint32_t lens[] = { 0, 2 };
	int r = -EINVAL;

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		r = kvm_vm_ioeventfd(&io->m->vm, gpa, lens[i], q->fd, true);
		if (r == 0) {
			q->gpa = gpa;
			q->len = lens[i];
			return true;
		}
		if (r != -EINVAL)
			break;
	}
	if (!io->warned)
		log_warn(TAG, "KVM_IOEVENTFD at 0x%llx: %s; notifications exit to the VMM instead",
			 (unsigned long long)gpa, strerror(-r));
	io->warned = true;
	return false;
}

static void deassign(struct machine_ioevent *io, struct ioev_queue *q)
{
	if (!q->gpa)
		return;
	if (kvm_vm_ioeventfd(&io->m->vm, q->gpa, q->len, q->fd, false) < 0)
		log_debug(TAG, "KVM_IOEVENTFD deassign at 0x%llx failed", (unsigned long long)q->gpa);
	q->gpa = 0;
}

void ioevent_sync(struct machine *m)
{
	struct machine_ioevent *io = m->ioev;

	if (!io || !io->enabled)
		return;
	for (int slot = 1; slot < PCI_NSLOTS; slot++) {
		struct virtio_dev *d = pci_slot_virtio(m, slot);
		uint64_t base = d ? pci_bar0_base(m, slot) : 0;

		for (int qi = 0; qi < VIRTIO_MAX_QUEUES; qi++) {
			struct ioev_queue *q = &io->q[slot * VIRTIO_MAX_QUEUES + qi];
			uint64_t want = base && qi < d->nqueues ?
				base + VIRTIO_NOTIFY_OFF + VIRTIO_NOTIFY_MULT * (uint64_t)qi : 0;

			if (q->fd < 0 || q->gpa == want)
				continue;
			deassign(io, q);
			if (want)
				assign(io, q, want);
		}
	}
}

bool ioevent_active(struct machine *m)
{
	struct machine_ioevent *io = m->ioev;

	for (int i = 0; io && i < IOEV_NQ; i++)
		if (io->q[i].gpa)
			return true;
	return false;
}

/* ---- the thread --------------------------------------------------------------- */

/* Under the lock: the queues whose notify exited while pages were missing
 * (virtio_pci.c left them to this thread) become pending. True if any. */
static bool take_held(struct machine *m, struct machine_ioevent *io)
{
	bool any = false;

	for (int slot = 1; slot < PCI_NSLOTS; slot++) {
		struct virtio_dev *d = pci_slot_virtio(m, slot);

		if (!d || !d->held)
			continue;
		io->pending |= d->held << (slot * VIRTIO_MAX_QUEUES);
		d->held = 0;
		any = true;
	}
	return any;
}

/* Under the lock, the machine free to run: every pending queue served. */
static void serve(struct machine *m, struct machine_ioevent *io)
{
	uint32_t p = io->pending;

	io->pending = 0;
	while (p) {
		int b = __builtin_ctz(p);
		struct virtio_dev *d = pci_slot_virtio(m, b / VIRTIO_MAX_QUEUES);

		p &= p - 1;
		if (d)
			virtio_queue_notify(d, b % VIRTIO_MAX_QUEUES);
		io->served++;
	}
	/* A vCPU idling on the idle port wakes for the ISR (pci_isr_pending)
	 * or, polling the used ring, for the round itself. */
	m->io_served++;
	pthread_cond_broadcast(&m->cond);
}

static void *io_thread(void *arg)
{
	struct machine_ioevent *io = arg;
	struct machine *m = io->m;
	struct pollfd pfd[1 + IOEV_NQ];
	int bit[1 + IOEV_NQ], n = 0;
	sigset_t set;

	/* Signals are the agent's loop's. */
	sigfillset(&set);
	pthread_sigmask(SIG_SETMASK, &set, NULL);
	pfd[n] = (struct pollfd){ .fd = io->wake_fd, .events = POLLIN };
	bit[n++] = -1;
	for (int i = 0; i < IOEV_NQ; i++)
		if (io->q[i].fd >= 0) {
			pfd[n] = (struct pollfd){ .fd = io->q[i].fd, .events = POLLIN };
			bit[n++] = i;
		}
	for (;;) {
		uint32_t kicked = 0;
		uint64_t nkicks = 0;

		if (poll(pfd, (nfds_t)n, -1) < 0 && errno != EINTR) {
			/* Not with valid fds; the exit path would have served. */
			log_error(TAG, "poll: %s; the I/O thread ends", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			uint64_t v;

			if ((pfd[i].revents & POLLIN) && read(pfd[i].fd, &v, 8) == 8 && bit[i] >= 0) {
				kicked |= 1u << bit[i];
				nkicks += v;
			}
		}
		pthread_mutex_lock(&m->lock);
		io->pending |= kicked;
		io->kicks += nkicks;
		/* Post-copy: no page this serving touches may be missing
		 * while the lock is held (uffd.c says why). */
		while (!io->quit && (m->pause_req || m->stopping ||
				     (m->pages_missing && !MUTANT(serve_while_missing))))
			pthread_cond_wait(&m->cond, &m->lock);   /* make check-mutants: serves with pages missing */
		if (io->quit) {
			pthread_mutex_unlock(&m->lock);
			break;
		}
		take_held(m, io);
		if (io->pending)
			serve(m, io);
		pthread_mutex_unlock(&m->lock);
	}
	return NULL;
}

static void wake(struct machine_ioevent *io)
{
	uint64_t one = 1;

	if (write(io->wake_fd, &one, 8) != 8)
		log_debug(TAG, "wake: %s", strerror(errno));   /* the counter is full: it wakes anyway */
}

void ioevent_resume(struct machine *m)
{
	struct machine_ioevent *io = m->ioev;

	/* A thread waiting for the resume sees it by the machine's cond; one
	 * in poll with queues left pending by a load, or held while pages
	 * were missing, needs the wake. */
	if (io && (take_held(m, io) || io->pending))
		wake(io);
}

void ioevent_serve_all(struct machine *m)
{
	struct machine_ioevent *io = m->ioev;

	if (!io)
		return;
	for (int slot = 1; slot < PCI_NSLOTS; slot++) {
		struct virtio_dev *d = pci_slot_virtio(m, slot);

		for (int qi = 0; d && qi < d->nqueues; qi++)
			io->pending |= 1u << (slot * VIRTIO_MAX_QUEUES + qi);
	}
}

void ioevent_counts(struct machine *m, uint64_t *kicks, uint64_t *served)
{
	struct machine_ioevent *io = m->ioev;

	pthread_mutex_lock(&m->lock);
	if (kicks)
		*kicks = io ? io->kicks : 0;
	if (served)
		*served = io ? io->served : 0;
	pthread_mutex_unlock(&m->lock);
}

/* ---- start and stop --------------------------------------------------------------- */

int ioevent_start(struct machine *m)
{
	const char *env = getenv(IOEVENT_ENV);
	struct machine_ioevent *io;
	int r;

	if (!m->blk && !m->vnet)
		return 0;
	io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	io->m = m;
	for (int i = 0; i < IOEV_NQ; i++)
		io->q[i].fd = -1;
	/* By default for a Linux guest only: its drivers wait for an
	 * interrupt, so a notify without an exit is an exit saved. The
	 * built-in guests poll the used ring right after the notify: served
	 * at the exit they find the request done; served by this thread they
	 * idle on the idle port for it, an exit all the same, and later
	 * (bench_exits.py counts both). */
	io->enabled = env && *env ? strcmp(env, "0") != 0 : m->linux_guest;
	if (env && *env && strcmp(env, "0") && strcmp(env, "1"))
		log_warn(TAG, "%s=%s: neither 0 nor 1, taken as 1", IOEVENT_ENV, env);
	m->ioev = io;
	io->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (io->wake_fd < 0)
		goto err_errno;
	for (int slot = 1; io->enabled && slot < PCI_NSLOTS; slot++) {
		struct virtio_dev *d = pci_slot_virtio(m, slot);

		for (int qi = 0; d && qi < d->nqueues; qi++) {
			int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

			if (fd < 0)
				goto err_errno;
			io->q[slot * VIRTIO_MAX_QUEUES + qi].fd = fd;
		}
	}
	pthread_mutex_lock(&m->lock);
	ioevent_sync(m);
	pthread_mutex_unlock(&m->lock);
	if ((r = -pthread_create(&io->thread, NULL, io_thread, io)) < 0)
		goto err;
	io->started = true;
	if (io->enabled)
		log_debug(TAG, "virtio notifications through ioeventfds%s", ioevent_active(m) ? "" :
			 " (none assigned yet)");
	return 0;

err_errno:
	r = -errno;
err:
	log_error(TAG, "I/O thread: %s", strerror(-r));
	ioevent_stop(m);
	return r;
}

void ioevent_stop(struct machine *m)
{
	struct machine_ioevent *io = m->ioev;

	if (!io)
		return;
	if (io->started) {
		pthread_mutex_lock(&m->lock);
		io->quit = true;
		pthread_cond_broadcast(&m->cond);
		pthread_mutex_unlock(&m->lock);
		wake(io);
		pthread_join(io->thread, NULL);
	}
	for (int i = 0; i < IOEV_NQ; i++) {
		struct ioev_queue *q = &io->q[i];

		if (q->fd < 0)
			continue;
		deassign(io, q);
		close(q->fd);
	}
	if (io->wake_fd >= 0)
		close(io->wake_fd);
	free(io);
	m->ioev = NULL;
}
