/* Post-copy support: guest RAM pages the machine does not hold yet. Pages
 * are punched out of the memfd (they read as "missing" again) and the RAM
 * is registered with userfaultfd in missing-page mode, so that any access
 * to such a page (a vCPU, KVM itself while emulating, the VMM) waits until
 * the owner fills it (UFFDIO_COPY) or declares it zero (UFFDIO_ZEROPAGE).
 * The owner reads the faults from the fd on its own loop.
 *
 * The owner's loop may take machine.lock (a tap's frame, a status), so no
 * thread may wait on a missing page holding it, and the loop itself must
 * never touch one. While pages are missing (pages_missing) no queue is
 * served (a queue's ring, descriptors and buffers may be any page): the
 * I/O thread's kicks stay pending, a notify that exits to a vCPU thread is
 * left pending to it (virtio_dev.held), and the resume's pass over every
 * queue after a load waits too; all are served when the fd is closed,
 * every page in (or the guest stopped). A frame from the tap, which
 * arrives on the loop itself, is dropped (machine_net_input). */
#include "machine/ioevent.h"
#include "machine/machine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TAG "uffd"

int machine_punch_pages(struct machine *m, const uint64_t *bitmap)
{
	uint64_t pg = 0;

	while (pg < m->ram_pages) {
		uint64_t end;

		if (!(bitmap[pg / 64] >> (pg % 64) & 1)) {
			pg++;
			continue;
		}
		for (end = pg + 1; end < m->ram_pages && (bitmap[end / 64] >> (end % 64) & 1); end++)
			;
		if (fallocate(m->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)(pg * KVM_PAGE_SIZE), (off_t)((end - pg) * KVM_PAGE_SIZE)) < 0)
			return -errno;
		pg = end;
	}
	return 0;
}

/* The I/O thread holds or lets go the queues (ioevent.c): let go, it
 * serves what was kicked meanwhile. */
static void set_missing(struct machine *m, bool missing)
{
	pthread_mutex_lock(&m->lock);
	m->pages_missing = missing;
	if (!missing) {
		pthread_cond_broadcast(&m->cond);
		ioevent_resume(m);
	}
	pthread_mutex_unlock(&m->lock);
}

int machine_uffd_open(struct machine *m, int *fd_out)
{
	struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_MISSING_SHMEM };
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)m->ram, .len = m->cfg.mem_bytes },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK), r;

	if (fd < 0)
		return -errno;
	set_missing(m, true);     /* before a page can be missing */
	if (ioctl(fd, UFFDIO_API, &api) < 0 || ioctl(fd, UFFDIO_REGISTER, &reg) < 0) {
		r = -errno;
		goto err;
	}
	if (!(reg.ioctls & (1ull << _UFFDIO_COPY))) {
		r = -EOPNOTSUPP;
		goto err;
	}
	*fd_out = fd;
	return 0;

err:
	close(fd);
	set_missing(m, false);
	return r;
}

void machine_uffd_close(struct machine *m, int fd)
{
	struct uffdio_range range = { .start = (uintptr_t)m->ram, .len = m->cfg.mem_bytes };

	if (fd < 0)
		return;
	/* Unregistering wakes every waiter: the range faults normally again. */
	if (ioctl(fd, UFFDIO_UNREGISTER, &range) < 0)
		log_warn(TAG, "UFFDIO_UNREGISTER: %s", strerror(errno));
	close(fd);
	/* After the waiters woke: one of them may hold machine.lock. */
	set_missing(m, false);
}

int machine_uffd_read(struct machine *m, int fd, uint64_t *pages, size_t max)
{
	struct uffd_msg msg[64];
	size_t n = 0;
	ssize_t got;

	if (max > 64)
		max = 64;
	got = read(fd, msg, max * sizeof(msg[0]));
	if (got < 0)
		return errno == EAGAIN ? 0 : -errno;
	for (size_t i = 0; i < (size_t)got / sizeof(msg[0]); i++) {
		uint64_t addr = msg[i].arg.pagefault.address;

		if (msg[i].event != UFFD_EVENT_PAGEFAULT || addr < (uintptr_t)m->ram ||
		    addr >= (uintptr_t)m->ram + m->cfg.mem_bytes)
			continue;
		pages[n++] = (addr - (uintptr_t)m->ram) / KVM_PAGE_SIZE;
	}
	return (int)n;
}

int machine_uffd_fill(struct machine *m, int fd, uint64_t page, const void *data)
{
	uintptr_t dst = (uintptr_t)machine_page_hva(m, page);
	struct uffdio_copy cp = { .dst = dst, .src = (uintptr_t)data, .len = KVM_PAGE_SIZE };
	struct uffdio_zeropage zp = { .range = { .start = dst, .len = KVM_PAGE_SIZE } };
	int r;

	static const uint8_t zero[KVM_PAGE_SIZE];

	do {
		r = data ? ioctl(fd, UFFDIO_COPY, &cp) : ioctl(fd, UFFDIO_ZEROPAGE, &zp);
	} while (r < 0 && errno == EAGAIN);
	/* A kernel without zero-page support for shared memory: copy zeros. */
	if (r < 0 && errno == EINVAL && !data) {
		cp.src = (uintptr_t)zero;
		do {
			r = ioctl(fd, UFFDIO_COPY, &cp);
		} while (r < 0 && errno == EAGAIN);
	}
	if (r < 0 && errno == EEXIST) {
		/* Filled already: make sure no waiter on it sleeps on. */
		struct uffdio_range range = { .start = dst, .len = KVM_PAGE_SIZE };

		(void)ioctl(fd, UFFDIO_WAKE, &range);
		return -EEXIST;
	}
	return r < 0 ? -errno : 0;
}
