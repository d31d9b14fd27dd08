/* The machine: RAM, vCPU threads and their exits, pause/resume, its
 * construction and end, its state; the dirty pages are dirty.c's. */
#include "machine/machine.h"
#include "machine/machine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "guest/guest.h"
#include "machine/bus.h"
#include "machine/ioevent.h"
#include "machine/linux.h"

#define TAG "machine"
#define KICK_SIGNAL SIGUSR1

static void on_kick(int sig)
{
	(void)sig;
}

/* ---- stopping, parking, idling --------------------------------------- */

static void kick_all(struct machine *m, pthread_t self)
{
	for (int i = 0; i < m->ncpus; i++) {
		struct machine_vcpu *vc = &m->vcpus[i];

		if (!vc->kvm.run)
			continue;     /* never created (machine_new failing part-way) */
		vc->kvm.run->immediate_exit = 1;
		/* An idle vCPU is out of KVM_RUN with its I/O completed: it
		 * counts as parked already and is not woken (idle_park). */
		if (vc->thread_started && !vc->idle && !pthread_equal(vc->thread, self))
			pthread_kill(vc->thread, KICK_SIGNAL);
	}
}

void machine_stop(struct machine *m, int status)
{
	bool first;

	pthread_mutex_lock(&m->lock);
	first = !m->stopping;
	if (first) {
		m->stopping = true;
		m->stop_status = status;
		kick_all(m, pthread_self());
		pthread_cond_broadcast(&m->cond);
	}
	pthread_mutex_unlock(&m->lock);
	if (first && m->ops.stopped)
		m->ops.stopped(m->ops.ctx, status);
}

bool machine_stopped(struct machine *m, int *status)
{
	bool s;

	pthread_mutex_lock(&m->lock);
	s = m->stopping;
	if (status)
		*status = m->stop_status;
	pthread_mutex_unlock(&m->lock);
	return s;
}

/* Called with the lock held by whoever made parked reach ncpus during a
 * pause: reads the KVM state of the VM and of every vCPU into the snapshot,
 * the lock dropped meanwhile. The caller of machine_pause is woken first
 * and goes on with the harvest and the copy while this thread reads (each
 * vCPU ioctl costs ~9 us here: ~90 us a vCPU). The order is the one of a
 * direct read: VM state first, so an interrupt moving from a device into a
 * vCPU in between is seen in the vCPU. */
static void snap_take(struct machine *m)
{
	int r;

	/* Only for a machine_pause: at start the loader may still be setting. */
	if (!m->snap_vm || m->snap != MACHINE_SNAP_NONE || !m->pause_gen)
		return;
	m->snap = MACHINE_SNAP_BUSY;
	pthread_cond_broadcast(&m->parked_cond);
	pthread_mutex_unlock(&m->lock);
	r = kvm_vm_get_state(&m->vm, m->snap_vm);
	for (int i = 0; i < m->ncpus && r == 0; i++)
		r = kvm_vcpu_get_state(&m->vcpus[i].kvm, &m->snap_vcpus[i]);
	pthread_mutex_lock(&m->lock);
	m->snap_r = r;
	m->snap = MACHINE_SNAP_READY;
	pthread_cond_broadcast(&m->parked_cond);
}

/* Parks the calling vCPU thread while a pause is requested. A vCPU gets here
 * only from a KVM_RUN that returned -EINTR, so no I/O is pending and its
 * state is consistent. Returns true when the thread must end (it then stays
 * counted as parked). */
static bool park(struct machine_vcpu *vc)
{
	struct machine *m = vc->m;

	pthread_mutex_lock(&m->lock);
	m->parked++;
	pthread_cond_broadcast(&m->parked_cond);
	if (m->parked == m->ncpus && m->pause_req && !m->stopping)
		snap_take(m);
	while (m->pause_req && !m->stopping)
		pthread_cond_wait(&m->cond, &m->lock);
	if (m->stopping) {
		pthread_mutex_unlock(&m->lock);
		return true;
	}
	m->parked--;
	vc->kvm.run->immediate_exit = 0;
	pthread_mutex_unlock(&m->lock);
	return false;
}

/* The guest on vc asked to idle for usec (an OUT to the idle port). Its OUT
 * is completed first (KVM_RUN with immediate_exit), so while it waits here
 * its state is settled and readable: it counts as parked, and a pause does
 * not have to wake it (waking a sleeping thread costs ~50 us here). The
 * wait ends at the timeout, on console input, when the I/O thread served
 * a queue or when the machine stops;
 * if a pause is on by then, the vCPU stays parked until it ends. */
static void idle_park(struct machine_vcpu *vc, uint32_t usec)
{
	struct machine *m = vc->m;
	struct timespec until;
	uint64_t t, served;

	/* A string OUT to the idle port (count > 1) is not completed by one
	 * settle: such a guest just does not idle. */
	if (vc->kvm.run->io.count != 1 || kvm_vcpu_settle(&vc->kvm) < 0)
		return;
	if (usec > 1000000)
		usec = 1000000;
	t = now_ns() + (uint64_t)usec * 1000;
	until.tv_sec = (time_t)(t / 1000000000ull);
	until.tv_nsec = (long)(t % 1000000000ull);
	pthread_mutex_lock(&m->lock);
	vc->idle = true;
	m->parked++;
	pthread_cond_broadcast(&m->parked_cond);
	if (m->parked == m->ncpus && m->pause_req && !m->stopping)
		snap_take(m);
	/* A polling guest waits for a request the I/O thread serves. */
	served = m->io_served;
	while (!m->stopping && !machine_devices_wake(m) && m->io_served == served)
		if (pthread_cond_timedwait(&m->cond, &m->lock, &until) == ETIMEDOUT)
			break;
	while (m->pause_req && !m->stopping)
		pthread_cond_wait(&m->cond, &m->lock);
	vc->idle = false;
	m->parked--;
	/* Stopping: immediate_exit stays set (the settle above left it so),
	 * the next KVM_RUN parks for good. The settle used to restore the
	 * value it found, undoing a machine_stop's kick that came during it:
	 * the vCPU then ran on with nothing to stop it, and whoever waited
	 * for it to park waited for ever (sys_slowlink's reference run hung
	 * at the guest's power-off). */
	vc->kvm.run->immediate_exit = m->stopping;
	pthread_mutex_unlock(&m->lock);
}

static void snap_drop_locked(struct machine *m);

void machine_pause(struct machine *m)
{
	uint64_t t0 = now_ns(), dt;

	pthread_mutex_lock(&m->lock);
	/* A snapshot is of this pause only (none if every vCPU is parked already). */
	snap_drop_locked(m);
	m->pause_gen++;
	m->pause_req = true;
	/* Idle and parked vCPUs wait for the pause to end without being woken. */
	kick_all(m, pthread_self());
	/* Sleep, do not poll: a thread that polled (~50 us of CPU) loses its
	 * CPU to the vCPU thread that machine_resume wakes, for milliseconds
	 * under load (measured: resume p50 1.6-2.5 ms with a 300 us poll). */
	while (m->parked < m->ncpus)
		pthread_cond_wait(&m->parked_cond, &m->lock);
	pthread_mutex_unlock(&m->lock);
	dt = now_ns() - t0;
	m->stats.pauses++;
	m->stats.pause_ns_last = dt;
	if (dt > m->stats.pause_ns_max)
		m->stats.pause_ns_max = dt;
}

/* Waits for a snapshot being taken and forgets it. Under the lock. */
static void snap_drop_locked(struct machine *m)
{
	while (m->snap == MACHINE_SNAP_BUSY)
		pthread_cond_wait(&m->parked_cond, &m->lock);
	m->snap = MACHINE_SNAP_NONE;
}

void machine_snap_drop(struct machine *m)
{
	pthread_mutex_lock(&m->lock);
	snap_drop_locked(m);
	pthread_mutex_unlock(&m->lock);
}

void machine_resume(struct machine *m)
{
	pthread_mutex_lock(&m->lock);
	snap_drop_locked(m);
	if (m->pit_held) {
		int r = kvm_vm_set_pit(&m->vm, &m->pit_state, false);

		if (r < 0)
			log_error(TAG, "cannot start the PIT's timer (%s): the guest gets no PIT ticks",
				  strerror(-r));
		m->pit_held = false;
	}
	m->pause_req = false;
	pthread_cond_broadcast(&m->cond);
	ioevent_resume(m);
	pthread_mutex_unlock(&m->lock);
}

/* ---- exits ------------------------------------------------------------ */

static void report_exception(struct machine_vcpu *vc, uint32_t vector)
{
	struct kvm_regs r;
	uint64_t frame[3] = { 0, 0, 0 };
	/* Exceptions that push an error code: #DF #TS #NP #SS #GP #PF #AC. */
	bool errcode = vector == 8 || (vector >= 10 && vector <= 14) || vector == 17;

	if (kvm_vcpu_get_regs(&vc->kvm, &r) == 0) {
		uint64_t sp = r.rsp + (errcode ? 8 : 0);

		if (sp + sizeof(frame) <= vc->m->low_pages * KVM_PAGE_SIZE)
			memcpy(frame, vc->m->ram + sp, sizeof(frame));
	}
	log_error(TAG, "guest exception %u on vCPU %d at rip 0x%llx (cs 0x%llx)", vector,
		  vc->kvm.index, (unsigned long long)frame[0], (unsigned long long)frame[1]);
}

/* One port access: a device's on the bus, or one of the built-in guests'
 * paravirtual ports. Returns 0, or 1 when the vCPU must stop. */
static int port_io(struct machine_vcpu *vc, uint16_t port, int size, bool out, uint8_t *data)
{
	struct machine *m = vc->m;
	uint32_t value = 0;
	int r = machine_bus_io(m, MACHINE_PIO, port, size, out, data);

	if (r == MACHINE_IO_POWEROFF || r == MACHINE_IO_RESET) {
		machine_stop(m, r == MACHINE_IO_RESET ? MACHINE_STATUS_REBOOT : 0);
		return 1;
	}
	if (r == 0)
		return 0;
	if (!out) {
		memset(data, 0xff, (size_t)size);
		return 0;
	}
	if (m->linux_guest)
		return 0;             /* the built-in guests' ports are not a kernel's */
	memcpy(&value, data, (size_t)(size < 4 ? size : 4));
	switch (port) {
	case GUEST_PORT_IDLE:
		idle_park(vc, value);
		return 0;
	case GUEST_PORT_POWER:
		log_info(TAG, "guest powered off (status %u)", value);
		machine_stop(m, (int)value);
		return 1;
	case GUEST_PORT_PANIC:
		report_exception(vc, value);
		machine_stop(m, -EFAULT);
		return 1;
	default:
		return 0;
	}
}

/* An MMIO access a device claims (a virtio notification whose address is
 * not an ioeventfd is served here, synchronously); -ENOENT when none does. */
static int mmio(struct machine *m, struct kvm_run *run)
{
	return machine_bus_io(m, MACHINE_MMIO, run->mmio.phys_addr, (int)run->mmio.len,
			      run->mmio.is_write, run->mmio.data);
}

static int handle_exit(struct machine_vcpu *vc)
{
	struct kvm_run *run = vc->kvm.run;

	vc->exits++;
	switch (run->exit_reason) {
	case KVM_EXIT_IO: {
		uint8_t *data = (uint8_t *)run + run->io.data_offset;

		for (uint32_t i = 0; i < run->io.count; i++, data += run->io.size)
			if (port_io(vc, run->io.port, run->io.size,
				    run->io.direction == KVM_EXIT_IO_OUT, data))
				return 1;
		return 0;
	}
	case KVM_EXIT_MMIO:
		if (mmio(vc->m, run) == 0)
			return 0;
		if (!run->mmio.is_write)
			memset(run->mmio.data, 0xff, sizeof(run->mmio.data));
		log_debug(TAG, "unclaimed MMIO %s at 0x%llx", run->mmio.is_write ? "write" : "read",
			  (unsigned long long)run->mmio.phys_addr);
		return 0;
	case KVM_EXIT_INTR:
		return 0;
	case KVM_EXIT_SHUTDOWN:
		log_error(TAG, "vCPU %d: guest shut down (triple fault)", vc->kvm.index);
		break;
	case KVM_EXIT_INTERNAL_ERROR: {
		struct kvm_regs regs = { 0 };
		struct kvm_sregs sregs = { 0 };

		/* Where the guest was: enough to tell a guest's bug from KVM's. */
		if (kvm_vcpu_get_regs(&vc->kvm, &regs) < 0 || kvm_vcpu_get_sregs(&vc->kvm, &sregs) < 0)
			regs.rip = sregs.cs.selector = 0;
		log_error(TAG, "vCPU %d: KVM internal error, suberror %u (data %u: %llx %llx %llx %llx) "
			  "at rip 0x%llx cs 0x%x", vc->kvm.index, run->internal.suberror,
			  run->internal.ndata, (unsigned long long)run->internal.data[0],
			  (unsigned long long)run->internal.data[1], (unsigned long long)run->internal.data[2],
			  (unsigned long long)run->internal.data[3], (unsigned long long)regs.rip,
			  sregs.cs.selector);
		break;
	}
	case KVM_EXIT_FAIL_ENTRY:
		log_error(TAG, "vCPU %d: entry failed, reason 0x%llx", vc->kvm.index,
			  (unsigned long long)run->fail_entry.hardware_entry_failure_reason);
		break;
	default:
		log_error(TAG, "vCPU %d: unexpected exit %u", vc->kvm.index, run->exit_reason);
		break;
	}
	machine_stop(vc->m, -EIO);
	return 1;
}

static void *vcpu_thread(void *arg)
{
	struct machine_vcpu *vc = arg;
	sigset_t set;

	/* Only the kick reaches vCPU threads; the agent's loop takes the rest. */
	sigfillset(&set);
	sigdelset(&set, KICK_SIGNAL);
	pthread_sigmask(SIG_SETMASK, &set, NULL);
	for (;;) {
		int r = kvm_vcpu_run(&vc->kvm);

		if (r == -EINTR) {
			if (park(vc))
				break;
			continue;
		}
		/* A vCPU waiting for INIT/SIPI was woken without becoming runnable. */
		if (r == -EAGAIN)
			continue;
		if (r < 0) {
			log_error(TAG, "vCPU %d: KVM_RUN: %s", vc->kvm.index, strerror(-r));
			machine_stop(vc->m, r);
		} else if (!handle_exit(vc)) {
			continue;
		}
		/* Stopping: leave KVM_RUN settled and count as parked. */
		if (kvm_vcpu_settle(&vc->kvm) < 0)
			log_warn(TAG, "vCPU %d: could not complete pending I/O", vc->kvm.index);
		if (park(vc))
			break;
	}
	return NULL;
}

/* ---- construction ----------------------------------------------------- */

/* src_memfd >= 0: a clone's RAM, a private (copy-on-write) mapping of
 * another machine's memfd (machine_new_clone). */
static int map_ram(struct machine *m, int src_memfd)
{
	uint64_t bytes = m->cfg.mem_bytes;
	uint64_t low = bytes < MACHINE_LOW_RAM_MAX ? bytes : MACHINE_LOW_RAM_MAX;
	int r;

	if (src_memfd >= 0) {
		m->memfd = fcntl(src_memfd, F_DUPFD_CLOEXEC, 0);
		if (m->memfd < 0)
			return -errno;
	} else {
		m->memfd = memfd_create("understudy-ram", MFD_CLOEXEC);
		if (m->memfd < 0)
			return -errno;
		if (ftruncate(m->memfd, (off_t)bytes) < 0)
			return -errno;
	}
	m->ram_private = src_memfd >= 0;
	m->ram = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		      (src_memfd >= 0 ? MAP_PRIVATE : MAP_SHARED) | MAP_NORESERVE, m->memfd, 0);
	if (m->ram == MAP_FAILED) {
		m->ram = NULL;
		return -errno;
	}
	m->ram_pages = bytes / KVM_PAGE_SIZE;
	m->low_pages = low / KVM_PAGE_SIZE;
	if ((r = kvm_vm_add_slot(&m->vm, 0, low, m->ram)) < 0)
		return r;
	if (bytes > low && (r = kvm_vm_add_slot(&m->vm, MACHINE_HIGH_RAM_GPA, bytes - low,
						 m->ram + low)) < 0)
		return r;
	m->vmm_dirty = calloc(machine_bitmap_words(m), sizeof(uint64_t));
	m->kvm_dirty = calloc(machine_bitmap_words(m), sizeof(uint64_t));
	return m->vmm_dirty && m->kvm_dirty ? 0 : -ENOMEM;
}

void machine_fill_page(struct machine *m, uint64_t page, const void *data)
{
	off_t off = (off_t)(page * KVM_PAGE_SIZE);

	if (!m->ram_private && pwrite(m->memfd, data, KVM_PAGE_SIZE, off) == KVM_PAGE_SIZE)
		return;
	memcpy(machine_page_hva(m, page), data, KVM_PAGE_SIZE);
}

static int init_sync(struct machine *m)
{
	pthread_condattr_t ca;
	int r;

	if ((r = -pthread_mutex_init(&m->lock, NULL)) < 0)
		return r;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	r = -pthread_cond_init(&m->cond, &ca);
	if (!r)
		r = -pthread_cond_init(&m->parked_cond, NULL);
	pthread_condattr_destroy(&ca);
	return r;
}

static int check_config(const struct machine_config *cfg)
{
	if (machine_check_mem(cfg->mem_bytes) < 0) {
		log_error(TAG, "memory size must be a multiple of 2 MiB between 8 MiB and 60 GiB");
		return -EINVAL;
	}
	if (cfg->ncpus < 1 || cfg->ncpus > KVM_MAX_VCPUS || cfg->ncpus > GUEST_MAX_CPUS) {
		log_error(TAG, "vCPU count must be 1..%d", KVM_MAX_VCPUS);
		return -EINVAL;
	}
	return 0;
}

/* Creates every vCPU, then starts its thread (which parks at once). */
static int start_vcpus(struct machine *m)
{
	struct sigaction sa = { .sa_handler = on_kick };
	int r;

	sigemptyset(&sa.sa_mask);
	sigaction(KICK_SIGNAL, &sa, NULL);
	for (int i = 0; i < m->ncpus; i++) {
		struct machine_vcpu *vc = &m->vcpus[i];

		vc->m = m;
		if ((r = kvm_vcpu_create(&vc->kvm, &m->vm, i)) < 0)
			return r;
		/* A Linux guest's CPUID names its vCPU and the topology: set at
		 * creation, so that a standby or a restored machine has it too. */
		if (m->linux_guest && (r = linux_cpuid_set(m, i)) < 0) {
			log_error(TAG, "CPUID of vCPU %d: %s", i, strerror(-r));
			return r;
		}
		vc->kvm.run->immediate_exit = 1;   /* first KVM_RUN parks at once */
	}
	for (int i = 0; i < m->ncpus; i++) {
		struct machine_vcpu *vc = &m->vcpus[i];

		if ((r = -pthread_create(&vc->thread, NULL, vcpu_thread, vc)) < 0)
			return r;
		vc->thread_started = true;
	}
	return 0;
}

static int machine_build(const struct machine_config *cfg, const struct machine_ops *ops,
			 int src_memfd, struct machine **out)
{
	struct machine *m;
	int r;

	if ((r = check_config(cfg)) < 0)
		return r;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	if (ops)
		m->ops = *ops;
	m->memfd = -1;
	m->ncpus = cfg->ncpus;
	/* By name, not by cfg->kernel: a standby built from the primary's
	 * configuration has no kernel file, yet the same devices. */
	m->linux_guest = !strcmp(cfg->guest, MACHINE_LINUX_GUEST);
	m->pause_req = true;             /* vCPUs start parked */
	if ((r = init_sync(m)) < 0)
		goto err;
	if ((r = machine_devices_attach(m)) < 0)
		goto err;
	if ((r = kvm_sys_open(&m->sys, NULL)) < 0)
		goto err;
	if ((r = kvm_vm_create(&m->vm, &m->sys)) < 0)
		goto err_sys;
	if ((r = map_ram(m, src_memfd)) < 0) {
		log_error(TAG, "guest RAM of %llu bytes: %s", (unsigned long long)cfg->mem_bytes,
			  strerror(-r));
		goto err_vm;
	}
	/* Without them (no memory) every state read is a direct one. */
	m->snap_vm = malloc(sizeof(*m->snap_vm));
	m->snap_vcpus = malloc((size_t)m->ncpus * sizeof(*m->snap_vcpus));
	if (!m->snap_vm || !m->snap_vcpus) {
		free(m->snap_vm);
		free(m->snap_vcpus);
		m->snap_vm = NULL;
		m->snap_vcpus = NULL;
	}
	if ((r = start_vcpus(m)) < 0 || (r = ioevent_start(m)) < 0)
		goto err_vcpus;
	*out = m;
	return 0;

err_vcpus:
	/* machine_free copes with vCPUs and threads made part-way. */
	machine_free(m);
	return r;
err_vm:
	kvm_vm_destroy(&m->vm);
err_sys:
	kvm_sys_close(&m->sys);
err:
	if (m->ram)
		munmap(m->ram, cfg->mem_bytes);
	if (m->memfd >= 0)
		close(m->memfd);
	free(m->vmm_dirty);
	free(m->kvm_dirty);
	free(m->hot);
	free(m->seen);
	machine_devices_detach(m);
	free(m->snap_vm);
	free(m->snap_vcpus);
	free(m);
	return r;
}

int machine_new(const struct machine_config *cfg, const struct machine_ops *ops,
		struct machine **out)
{
	return machine_build(cfg, ops, -1, out);
}

int machine_new_clone(const struct machine *src, const struct machine_ops *ops,
		      struct machine **out)
{
	return machine_build(&src->cfg, ops, src->memfd, out);
}

void machine_free(struct machine *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stopping = true;
	kick_all(m, pthread_self());
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	for (int i = 0; i < m->ncpus; i++)
		if (m->vcpus[i].thread_started)
			pthread_join(m->vcpus[i].thread, NULL);
	ioevent_stop(m);
	for (int i = 0; i < m->ncpus; i++)
		if (m->vcpus[i].kvm.run)
			kvm_vcpu_destroy(&m->vcpus[i].kvm);
	kvm_vm_destroy(&m->vm);
	kvm_sys_close(&m->sys);
	munmap(m->ram, m->cfg.mem_bytes);
	close(m->memfd);
	free(m->vmm_dirty);
	free(m->kvm_dirty);
	free(m->hot);
	free(m->seen);
	machine_devices_detach(m);
	free(m->snap_vm);
	free(m->snap_vcpus);
	pthread_cond_destroy(&m->cond);
	pthread_cond_destroy(&m->parked_cond);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* A reset served in place (the owner reboots the guest on this machine):
 * the vCPU threads that machine_stop ended are joined and new ones started,
 * parked. KVM's VM, vCPUs, their state and the RAM are kept as they are. */
int machine_restart(struct machine *m)
{
	int r;

	if (!machine_stopped(m, NULL))
		return -EBUSY;
	for (int i = 0; i < m->ncpus; i++) {
		if (m->vcpus[i].thread_started)
			pthread_join(m->vcpus[i].thread, NULL);
		m->vcpus[i].thread_started = false;
		m->vcpus[i].idle = false;
		m->vcpus[i].kvm.run->immediate_exit = 1;   /* first KVM_RUN parks at once */
	}
	pthread_mutex_lock(&m->lock);
	snap_drop_locked(m);
	m->stopping = false;
	m->stop_status = 0;
	m->parked = 0;
	m->pause_req = true;
	pthread_mutex_unlock(&m->lock);
	for (int i = 0; i < m->ncpus; i++) {
		if ((r = -pthread_create(&m->vcpus[i].thread, NULL, vcpu_thread, &m->vcpus[i])) < 0)
			return r;     /* machine_free joins the ones that started */
		m->vcpus[i].thread_started = true;
	}
	machine_pause(m);
	return 0;
}

/* ---- state ---------------------------------------------------------------- */

/* The pause's snapshot, waited for; false when there is none to use. */
static bool snap_ready(struct machine *m)
{
	while (m->snap == MACHINE_SNAP_BUSY)
		pthread_cond_wait(&m->parked_cond, &m->lock);
	return m->snap == MACHINE_SNAP_READY && m->snap_r == 0;
}

int machine_get_state(struct machine *m, struct machine_state *st)
{
	int r = 0;

	pthread_mutex_lock(&m->lock);
	if (snap_ready(m)) {
		st->vm = *m->snap_vm;
		m->stats.snap_used++;
	} else {
		pthread_mutex_unlock(&m->lock);
		r = kvm_vm_get_state(&m->vm, &st->vm);
		pthread_mutex_lock(&m->lock);
	}
	if (m->pit_held)                 /* the flags it was given, not the hold's */
		st->vm.pit.flags = m->pit_state.flags;
	machine_devices_save(m, st);
	pthread_mutex_unlock(&m->lock);
	return r;
}

/* Into a machine whose vCPUs are parked (a standby, a restore before it
 * resumes) the PIT goes without its timer: see kvm_vm_set_pit. */
int machine_set_state(struct machine *m, const struct machine_state *st)
{
	bool hold;
	int r;

	machine_snap_drop(m);
	pthread_mutex_lock(&m->lock);
	hold = m->pause_req;
	pthread_mutex_unlock(&m->lock);
	if ((r = kvm_vm_set_state(&m->vm, &st->vm, hold)) < 0)
		return r;
	pthread_mutex_lock(&m->lock);
	m->pit_held = hold;
	m->pit_state = st->vm.pit;
	machine_devices_load(m, st);
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int machine_get_vcpu_state(struct machine *m, int cpu, struct kvm_vcpu_state *st)
{
	bool snap;

	pthread_mutex_lock(&m->lock);
	snap = snap_ready(m);
	if (snap) {
		memcpy(st, &m->snap_vcpus[cpu], sizeof(*st));
		m->stats.snap_used++;
	}
	pthread_mutex_unlock(&m->lock);
	return snap ? 0 : kvm_vcpu_get_state(&m->vcpus[cpu].kvm, st);
}

int machine_set_vcpu_state(struct machine *m, int cpu, const struct kvm_vcpu_state *st)
{
	machine_snap_drop(m);
	return platform_set_vcpu_state(m, cpu, st);
}
