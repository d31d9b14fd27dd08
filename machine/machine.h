/* machine: the guest machine model. Guest RAM (memfd, MAP_SHARED), one
 * thread per vCPU running KVM_RUN, a bus on which the devices (listed in
 * machine/devices.c) claim port and MMIO ranges, the paravirtual ports of
 * the built-in guests, pause/resume of all vCPUs at any instant, and the
 * dirty-page harvest.
 *
 * Pages are named by their index in guest RAM ("page", offset / 4096);
 * machine_page_gfn() gives the guest frame number (RAM above 3 GiB sits
 * above the 4 GiB boundary). */
#ifndef US_MACHINE_H
#define US_MACHINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kmod/kmod.h"

#define MACHINE_LOW_RAM_MAX (3ull << 30)
#define MACHINE_HIGH_RAM_GPA (4ull << 30)
#define MACHINE_MIN_MEM (8ull << 20)
#define MACHINE_MAX_MEM (60ull << 30)
#define MACHINE_MEM_ALIGN (2ull << 20)

struct machine_config {
	uint64_t mem_bytes;
	int ncpus;
	char guest[32];        /* built-in guest name */
	char guest_args[256];  /* "k=v,k=v" passed to the guest */
	uint32_t ndisks;       /* 0, or 1: a virtio-blk device (part of the digest) */
	char disk[256];        /* its raw image (not part of the digest: each host has its own) */
	uint32_t nnets;        /* 0, or 1: a virtio-net device (part of the digest) */
	uint8_t net_mac[6];    /* its MAC (part of the digest); all zero: derived from the digest */
	char net_tap[16];      /* its tap device (not part of the digest: each host has its own) */
	uint64_t disk_bytes;   /* the image's size, set when it is opened (not part of the
				* digest: the secondary compares it, with a clear refusal) */
	/* A Linux guest (guest is then MACHINE_LINUX_GUEST): its bzImage, initrd
	 * ("" for none) and command line, read at machine_boot. */
	char kernel[256];
	char initrd[256];
	char append[2048];
};

/* Parses "--guest NAME[:ARGS]" and "--mem SIZE" style values into cfg;
 * errors are messages for the user in err. */
int machine_parse_guest(struct machine_config *cfg, const char *spec, char *err, size_t errlen);
int machine_parse_size(const char *s, uint64_t *bytes);
/* 0 if mem_bytes is a RAM size a machine can have (a multiple of 2 MiB
 * between 8 MiB and 60 GiB), else -EINVAL. */
int machine_check_mem(uint64_t mem_bytes) US_MUST_CHECK;
/* This host's MemAvailable (/proc/meminfo) in bytes; 0 when unknown. */
uint64_t machine_host_mem_available(void);
/* A 64-bit digest of everything that must match for a checkpoint of one
 * machine to apply to another: memory size, vCPUs, devices, guest. */
uint64_t machine_config_digest(const struct machine_config *cfg);

/* The 16550 UART's checkpointed state: plain data, no pointers. */
#define UART_RX_SIZE 4096
struct uart_state {
	uint8_t ier, lcr, mcr, lsr_err, msr, scr, dll, dlm, fcr;
	uint8_t thr_irq;       /* THR-empty interrupt pending */
	uint8_t irq_level;     /* level last driven on the IRQ line */
	uint8_t pad;
	uint32_t rx_head, rx_count;
	uint8_t rx[UART_RX_SIZE];
};

/* The PC platform devices (platform.c): the CMOS RTC, the ACPI PM1a
 * registers, the reset control register; plain data, checkpointed whole
 * (the "platform" section) but for stop_req, a request machine.c acts on
 * before the vCPU that made it runs again. The RTC's clock is the host's
 * UTC clock plus rtc_offset, the seconds by which the guest set it off
 * (0 until it writes the time): after a takeover or a restore the guest's
 * wall clock goes on from the same offset. Its update cycles (at the host
 * clock's second boundaries, shifted by rtc_phase_ns once the guest
 * restarted the divider), periodic ticks and alarm have been run into
 * register C's flags up to rtc_sync_ns, so a machine that takes the state
 * over runs the ones due since (an alarm that fell in a failover's gap
 * included). */
#define LINUX_ACPI_PM1_EVT 0x600   /* ACPI PM1a status (2 bytes) and enable (2 bytes) */
#define LINUX_ACPI_PM1_CNT 0x604   /* ACPI PM1a control (2 bytes) */
#define LINUX_RESET_PORT   0xcf9   /* reset control register */
#define PLATFORM_RTC_OFFSET_MAX (1ll << 34)   /* |rtc_offset|: ~544 years */
struct platform_state {
	uint8_t cmos_index;           /* 0..127 (the NMI mask bit is not kept) */
	uint8_t reset_ctl;            /* 0xCF9: bits 1 and 3 only */
	uint8_t stop_req;             /* the guest asked for: 1 a power-off, 2 a reset */
	uint8_t pad;
	uint16_t pm1_en, pm1_cnt;     /* ACPI PM1a enable and control (status stays 0) */
	int64_t rtc_offset;           /* guest RTC time - host UTC time, seconds */
	int64_t rtc_sync_ns;          /* host UTC time (ns since 1970) register C is
				       * up to date for; 0: none yet (the first access) */
	int64_t rtc_phase_ns;         /* 0..1e9-1: where in the host's second the guest's
				       * second begins (set by a divider restart) */
	uint8_t cmos[128];            /* CMOS RAM; the time registers hold the last
				       * time read or set (the clock runs outside) */
};

/* ---- PCI and virtio: checkpointed state (machine/pci.c, virtio_pci.c) --- */

/* Bus 0: 00:00.0 host bridge, 00:01.0 virtio-blk (with --disk), 00:02.0
 * virtio-net (with --net). */
#define PCI_NSLOTS 3
#define PCI_SLOT_BLK 1
#define PCI_SLOT_NET 2
#define PCI_CFG_BYTES 256
#define VIRTIO_MAX_QUEUES 3       /* virtio-net: receive, transmit, control */
#define VIRTIO_MSIX_VECTORS 4
#define VIRTIO_QUEUE_MAX 256      /* largest queue size a device offers */

struct virtq_state {
	uint64_t desc, avail, used;   /* guest-physical addresses */
	uint16_t size, enable, msix_vector;
	uint16_t last_avail;          /* next avail ring entry the device takes */
	uint16_t used_idx;            /* the used ring's idx as the device last wrote it */
	uint16_t pad[3];
};

struct virtio_msix_entry {
	uint64_t addr;
	uint32_t data;
	uint32_t ctrl;                /* bit 0: masked */
};

/* One virtio-pci function's transport state. */
struct virtio_state {
	uint64_t driver_features;
	uint32_t device_feature_select, driver_feature_select;
	uint16_t queue_select, msix_config;
	uint8_t status, isr, config_generation, pad;
	uint32_t msix_pending;        /* pending bit array: one bit a vector */
	uint32_t dev_flags;           /* the device's own: virtio-net's ANNOUNCE request */
	struct virtq_state q[VIRTIO_MAX_QUEUES];
	struct virtio_msix_entry msix[VIRTIO_MSIX_VECTORS];
};

struct pci_state {
	uint32_t addr;                /* the 0xCF8 address register */
	uint32_t pad;
	uint8_t cfg[PCI_NSLOTS][PCI_CFG_BYTES];
	struct virtio_state blk;
	struct virtio_state net;
};

/* The stop status of a guest that asked for a reset (a reboot): not a
 * power-off status (those are 0..255), not a failure (those are < 0). */
#define MACHINE_STATUS_REBOOT 0x10000

/* What the owner of the machine hears from it. Called on vCPU threads and
 * (net_tx) on the machine's I/O thread. */
struct machine_ops {
	/* Bytes the guest wrote to the console. */
	void (*console_out)(void *ctx, const uint8_t *buf, size_t len);
	/* Room appeared in the console input FIFO. */
	void (*console_room)(void *ctx);
	/* The guest powered off (status >= 0) or failed (status < 0). */
	void (*stopped)(void *ctx, int status);
	/* An Ethernet frame the guest sent on its virtio-net device (called
	 * with the machine's lock held: hand it over, do not block). */
	void (*net_tx)(void *ctx, const uint8_t *frame, size_t len);
	void *ctx;
};

struct machine;

/* One range of port or MMIO addresses a device claims on the bus (bus.c):
 * its handler serves an access of size bytes at addr, with machine.lock
 * held, and returns 0 (done), -ENOENT (not its access after all: the bus
 * asks the next range), or MACHINE_IO_POWEROFF / MACHINE_IO_RESET (done,
 * and the guest asked the machine to stop). */
enum machine_space { MACHINE_PIO, MACHINE_MMIO };
#define MACHINE_IO_POWEROFF 1
#define MACHINE_IO_RESET 2
#define MACHINE_MAX_RANGES 16
struct machine_io_range {
	enum machine_space space;
	uint64_t base, len;
	int (*io)(struct machine *m, uint64_t addr, int size, bool write, uint8_t *data);
};

struct machine_vcpu {
	struct machine *m;
	struct kvm_vcpu kvm;
	pthread_t thread;
	bool thread_started;
	bool idle;             /* waiting in idle_park, counted as parked (under lock) */
	uint64_t exits;
};

/* The state read at a pause by the vCPU thread that parked last (see
 * machine_get_state): none, being read, read (r its result). */
enum machine_snap { MACHINE_SNAP_NONE, MACHINE_SNAP_BUSY, MACHINE_SNAP_READY };

struct machine_stats {
	uint64_t pauses;
	uint64_t snap_used;          /* state reads answered from the pause's snapshot */
	uint64_t pause_ns_last;
	uint64_t pause_ns_max;
	uint64_t rtc_irqs;           /* IRQ 8 edges the RTC raised */
	uint64_t reprotected;        /* pages harvests re-protected in KVM (hot pages not) */
};

struct machine {
	struct machine_config cfg;
	struct machine_ops ops;
	struct kvm_sys sys;
	struct kvm_vm vm;

	int memfd;
	bool ram_private;            /* a clone: MAP_PRIVATE over another's memfd */
	uint8_t *ram;
	uint64_t ram_pages;
	uint64_t low_pages;          /* pages mapped below 4 GiB */

	int ncpus;
	bool linux_guest;            /* a --kernel machine: the PC platform devices */
	struct machine_vcpu vcpus[KVM_MAX_VCPUS];

	/* Pause handshake and device state, under lock. */
	pthread_mutex_t lock;
	pthread_cond_t cond;         /* vCPUs wait here when parked or idle */
	pthread_cond_t parked_cond;  /* machine_pause waits here */
	bool pause_req;
	int parked;
	/* State set while the vCPUs were parked: the PIT's timer is held
	 * (kvm_vm_set_pit) until machine_resume arms it with this state. */
	bool pit_held;
	struct kvm_pit_state2 pit_state;
	enum machine_snap snap;
	int snap_r;
	uint64_t pause_gen;          /* machine_pause calls: a snapshot needs one */
	struct kvm_vm_state *snap_vm;        /* heap */
	struct kvm_vcpu_state *snap_vcpus;   /* heap, ncpus */
	bool stopping;
	int stop_status;
	struct uart_state uart;
	struct platform_state platform;
	struct pci_state pci;        /* PCI config spaces and virtio transports */
	struct machine_io_range ranges[MACHINE_MAX_RANGES];   /* the bus (bus.c) */
	int nranges;
	struct virtio_blk *blk;      /* the disk's runtime part, NULL without --disk */
	struct virtio_net *vnet;     /* the NIC's runtime part, NULL without --net */
	struct rtc_timer *rtc;       /* the RTC's timer thread, NULL but on a --kernel machine */
	struct machine_ioevent *ioev;   /* the I/O thread (ioevent.c), NULL without virtio */
	uint64_t io_served;          /* its rounds of serving queues (an idle vCPU wakes), under lock */
	/* Post-copy: RAM is registered with userfaultfd (uffd.c), pages may be
	 * missing; no queue is served (a notify that exits is left to the I/O
	 * thread) and no frame received meanwhile. Under lock. */
	bool pages_missing;

	/* Pages written by the VMM itself (loader, devices): KVM does not see them. */
	_Atomic uint64_t *vmm_dirty;
	uint64_t *kvm_dirty;         /* scratch for the slot harvest */

	/* Hot pages (machine_set_hot_budget): a page rewritten within a few
	 * harvests of its re-protection keeps its dirty bit in KVM (not re-protected: no write
	 * fault, which costs ~25 us a page on this software KVM) and so is
	 * reported by every harvest until it leaves the set. */
	uint64_t *hot;               /* bitmap of the set */
	uint32_t *seen;              /* per page: harvest it was last written / promoted */
	uint32_t harvests;
	uint64_t hot_pages, hot_budget;

	struct machine_stats stats;
};

/* Builds the machine: RAM, slots, vCPUs (created, threads parked). */
int machine_new(const struct machine_config *cfg, const struct machine_ops *ops,
		struct machine **out) US_MUST_CHECK;
/* A machine of src's configuration whose RAM is a private (copy-on-write)
 * mapping of src's memfd: it reads src's pages until it writes them, and its
 * writes never reach src. A page it has not written yet shows later writes
 * to src's memfd: whoever writes src while the clone runs must first make
 * the clone's copy of that page private (touch it through the clone's
 * mapping with an atomic read-modify-write that changes nothing). vCPUs are
 * created parked with no state set: the caller sets it (drills). */
int machine_new_clone(const struct machine *src, const struct machine_ops *ops,
		      struct machine **out) US_MUST_CHECK;
void machine_free(struct machine *m);
/* Loads cfg->guest (or cfg->kernel) into RAM and sets the boot state of
 * every vCPU. */
int machine_boot(struct machine *m) US_MUST_CHECK;

/* ---- Linux guests (linux.c, linux_tables.c) ------------------------------ */

#define MACHINE_LINUX_GUEST "linux"   /* cfg->guest of a --kernel machine */

/* What the loader needs from a bzImage's setup header (x86 boot protocol). */
struct linux_image {
	uint16_t version;             /* boot protocol, 0x20a = 2.10 */
	uint8_t loadflags;
	uint8_t relocatable;
	uint16_t xloadflags;
	uint32_t initrd_addr_max;     /* highest byte address the initrd may reach */
	uint32_t cmdline_size;        /* longest command line, without its NUL */
	uint32_t kernel_alignment;
	uint32_t init_size;           /* bytes the kernel needs from its load address */
	uint64_t pref_address;
	uint64_t setup_bytes;         /* real-mode part: the protected-mode kernel starts here */
	uint64_t kernel_bytes;        /* protected-mode kernel */
	uint32_t header_end;          /* the setup header is [0x1f1, header_end) of the file */
	/* An ELF vmlinux instead of a bzImage: its PT_LOAD segments go to
	 * their physical addresses [load_lo, load_end), vCPU 0 starts at entry
	 * (the kernel's own startup_64) with a setup header the loader writes. */
	uint8_t elf;
	uint64_t entry, load_lo, load_end;
};

/* Reads a bzImage's setup header, or an ELF vmlinux's header and program
 * headers, from buf (the first len bytes of a file of file_bytes): 0, or
 * -ENOEXEC with the reason in err. */
int machine_linux_probe(const uint8_t *buf, size_t len, uint64_t file_bytes,
			struct linux_image *img, char *err, size_t errlen) US_MUST_CHECK;
/* Everything a --kernel machine needs before it is built: the kernel is a
 * bzImage of boot protocol 2.10 or later with a 64-bit entry (or an x86-64
 * ELF vmlinux whose segments load at 1 MiB or above), the command
 * line fits cmdline_size, the initrd fits below initrd_addr_max and RAM
 * holds kernel and initrd. 0, or -errno with a message naming the option
 * and file in err. */
int machine_linux_check(const struct machine_config *cfg, char *err, size_t errlen) US_MUST_CHECK;

/* Lets the vCPUs run (they start parked). */
void machine_resume(struct machine *m);
/* Returns once every vCPU is parked outside KVM_RUN with any pending I/O
 * completed, so its state is readable and writable. */
void machine_pause(struct machine *m);
/* Asks the vCPU threads to end (the machine stays paused). */
void machine_stop(struct machine *m, int status);
bool machine_stopped(struct machine *m, int *status);
/* After machine_stop, for a reset served in place (a protected guest's
 * reboot): new vCPU threads, the machine paused and no longer stopping;
 * the VM, its vCPUs, their state and the RAM stay as they were. -EBUSY if
 * the machine was not stopped. */
int machine_restart(struct machine *m) US_MUST_CHECK;
/* On a paused machine: every page of RAM zero again, its memory handed back
 * to the host. Neither KVM's dirty log nor the VMM's bitmap sees it: a copy
 * of this RAM elsewhere is the caller's to clear too, or to send every page. */
int machine_ram_clear(struct machine *m) US_MUST_CHECK;

/* Console input into the UART receive FIFO; returns bytes taken. */
size_t machine_console_input(struct machine *m, const uint8_t *buf, size_t len);

/* An Ethernet frame for the guest's virtio-net receive queue, written into
 * guest RAM (marked dirty) at once. Never while a pause is requested (so a
 * capture never races a device write) nor while post-copy pages are
 * missing (the caller may be the loop that places them): then -EAGAIN and
 * nothing is written.
 * -ENOBUFS: no receive buffer; -ENODEV: no NIC or the driver is not ready;
 * -EMSGSIZE: the buffer is too small. The frame is dropped in every error. */
int machine_net_input(struct machine *m, const uint8_t *frame, size_t len) US_MUST_CHECK;
/* Asks the guest to announce itself (VIRTIO_NET_S_ANNOUNCE and a
 * configuration interrupt), after a takeover or a restore; false when the
 * driver did not negotiate VIRTIO_NET_F_GUEST_ANNOUNCE. */
bool machine_net_announce(struct machine *m);
/* The MAC the NIC presents (cfg->net_mac, or the one derived from the
 * configuration's digest: the same on every host). */
void machine_net_mac(const struct machine_config *cfg, uint8_t mac[6]);
/* Frames the NIC dropped on the way in (no buffer, not ready, paused). */
uint64_t machine_net_rx_dropped(struct machine *m);

static inline uint64_t machine_page_gfn(const struct machine *m, uint64_t page)
{
	return page < m->low_pages ? page : page - m->low_pages + (MACHINE_HIGH_RAM_GPA >> 12);
}

static inline void *machine_page_hva(const struct machine *m, uint64_t page)
{
	return m->ram + page * KVM_PAGE_SIZE;
}

/* Writes a whole page of RAM from outside the guest (a standby's initial
 * sync). Through the memfd: a page written for the first time then skips
 * the zeroing a first touch of the mapping costs (write(2) into a hole of
 * shmem fills a new page, it does not clear it first). */
void machine_fill_page(struct machine *m, uint64_t page, const void *data);

/* Page index of a gfn, or -1 if no RAM is there. */
int64_t machine_gfn_page(const struct machine *m, uint64_t gfn);

/* Host pointer to [gpa, gpa + len) of guest RAM, NULL if any byte of it is
 * not RAM (the PCI hole, past the end); *ram_off (if given) is its offset
 * in RAM. */
static inline void *machine_gpa_ram(const struct machine *m, uint64_t gpa, uint64_t len,
				    uint64_t *ram_off)
{
	uint64_t low = m->low_pages * KVM_PAGE_SIZE;
	uint64_t high = (m->ram_pages - m->low_pages) * KVM_PAGE_SIZE;
	uint64_t off;

	if (gpa <= low && len <= low - gpa) {
		off = gpa;
	} else if (gpa >= MACHINE_HIGH_RAM_GPA && gpa - MACHINE_HIGH_RAM_GPA <= high &&
		   len <= high - (gpa - MACHINE_HIGH_RAM_GPA)) {
		off = low + (gpa - MACHINE_HIGH_RAM_GPA);
	} else {
		return NULL;
	}
	if (ram_off)
		*ram_off = off;
	return m->ram + off;
}

/* ---- page bitmaps: one bit a page of RAM, in 64-bit words ---------------- */

/* Words in a bitmap with a bit for every page of m. */
size_t machine_bitmap_words(const struct machine *m);
/* Bits set in the first words of bm. */
uint64_t machine_bitmap_count(const uint64_t *bm, size_t words);
/* Sets the bit of every page of m, and none beyond. */
void machine_bitmap_fill(const struct machine *m, uint64_t *bm);

/* Records that the VMM wrote [offset, offset + len) of guest RAM. Inline:
 * the device models call it, and machine.c calls them. */
static inline void machine_mark_dirty(struct machine *m, uint64_t ram_offset, uint64_t len)
{
	if (!len)
		return;
	for (uint64_t p = ram_offset / KVM_PAGE_SIZE; p <= (ram_offset + len - 1) / KVM_PAGE_SIZE &&
						     p < m->ram_pages; p++)
		atomic_fetch_or_explicit(&m->vmm_dirty[p / 64], 1ull << (p % 64),
					 memory_order_relaxed);
}
/* On a paused machine: the pages written since the last harvest, one bit a
 * page (ram_pages bits). Re-protects them in KVM before returning, so every
 * later write is seen by the next harvest. */
int machine_harvest_dirty(struct machine *m, uint64_t *bitmap) US_MUST_CHECK;
/* The same while the guest runs (a pre-copy inside an epoch): the guest's
 * writes reported so far, re-protected before returning (a write after
 * that is in the next harvest), less the hot pages (a page rewritten
 * since its re-protection may join the set here) and the VMM's own writes,
 * which the next machine_harvest_dirty reports. Never concurrent with
 * another harvest (one thread harvests). */
int machine_harvest_running(struct machine *m, uint64_t *bitmap) US_MUST_CHECK;
/* At most pages hot pages from the next harvest on (0: none, the default:
 * every harvest re-protects all it reports). A page joins when it is
 * written again within MACHINE_HOT_WINDOW harvests of the last time, and
 * leaves after MACHINE_HOT_TERM harvests or when the budget shrinks (to
 * come back only when rewritten again). -ENOMEM if the bookkeeping
 * cannot be allocated (the set then stays off). */
#define MACHINE_HOT_TERM 64
#define MACHINE_HOT_WINDOW 8
int machine_set_hot_budget(struct machine *m, uint64_t pages) US_MUST_CHECK;
/* Marks the pages set in bitmap dirty again, so the next harvest returns
 * them: for a harvest whose pages could not be delivered. */
void machine_requeue_dirty(struct machine *m, const uint64_t *bitmap);

/* One bit for every page of RAM that was ever written (the rest reads as
 * zero and takes no memory): what an initial copy must send to a fresh VM. */
int machine_ram_populated(struct machine *m, uint64_t *bitmap) US_MUST_CHECK;

/* Whole-machine device state: plain data. On a paused machine. The KVM part
 * (VM and vCPUs) was read at the pause by the vCPU thread that parked last,
 * while the caller of machine_pause went on (harvest, copy): these return
 * that read, waiting for it if need be, unless anything was set since. */
struct machine_state {
	struct kvm_vm_state vm;
	struct uart_state uart;
	struct pci_state pci;
	struct platform_state platform;
};
int machine_get_state(struct machine *m, struct machine_state *st) US_MUST_CHECK;
int machine_set_state(struct machine *m, const struct machine_state *st) US_MUST_CHECK;
int machine_get_vcpu_state(struct machine *m, int cpu, struct kvm_vcpu_state *st) US_MUST_CHECK;
int machine_set_vcpu_state(struct machine *m, int cpu, const struct kvm_vcpu_state *st) US_MUST_CHECK;

/* loader.c: forgets the pause's snapshot before setting vCPU state. */
void machine_snap_drop(struct machine *m);

/* platform.c: the platform devices' power-on state, and whether p holds
 * values the devices can be in (what a checkpoint's "platform" section
 * must hold): 0, else -EINVAL. The device models themselves are private
 * to machine/ (machine/devices.h), behind the bus (machine/bus.h). */
void platform_reset(struct platform_state *p);
int platform_check(const struct platform_state *p) US_MUST_CHECK;

/* ---- the disk's blocks (virtio_blk.c), for disk replication -------------
 * The image in MACHINE_DISK_BLOCK blocks (the last one may be partial: it
 * reads zero-padded and writes truncated). Every guest write or discard
 * marks its blocks in a dirty-block bitmap, set when the request is served
 * (by the thread that serves it, before its used-ring entry), so a paused machine has
 * every completed write's bit set. Bitmaps: one bit a block, 64-bit words. */
#define MACHINE_DISK_BLOCK 4096u
/* Blocks of the image, 0 without a disk. */
uint64_t machine_disk_blocks(const struct machine *m);
/* Moves the dirty-block bits into bitmap (ORed in) and clears them. */
void machine_disk_harvest(struct machine *m, uint64_t *bitmap);
/* Marks the blocks set in bitmap dirty again (a capture not delivered). */
void machine_disk_requeue(struct machine *m, const uint64_t *bitmap);
/* One block of the image into buf (MACHINE_DISK_BLOCK bytes); 0 or -errno. */
int machine_disk_read(struct machine *m, uint64_t block, void *buf) US_MUST_CHECK;
/* One block from outside the guest (a standby's replication): not marked dirty. */
int machine_disk_write(struct machine *m, uint64_t block, const void *buf) US_MUST_CHECK;
/* fdatasync of the image. */
int machine_disk_sync(struct machine *m) US_MUST_CHECK;
/* The first block at or after block that may hold data (SEEK_DATA: holes
 * are skipped unread), or machine_disk_blocks() when none does. */
uint64_t machine_disk_next_data(struct machine *m, uint64_t block);

/* ---- post-copy (uffd.c) ------------------------------------------------- */

/* Drops the pages set in bitmap from the memfd: they read as missing again. */
int machine_punch_pages(struct machine *m, const uint64_t *bitmap) US_MUST_CHECK;
/* A userfaultfd (non-blocking) with all of RAM registered in missing-page
 * mode: from now on an access to a missing page waits for machine_uffd_fill.
 * Until machine_uffd_close no queue is served (pages_missing): kicks, by
 * ioeventfd or by exit, stay pending; machine_net_input drops frames.
 * Without machine.lock. */
int machine_uffd_open(struct machine *m, int *fd) US_MUST_CHECK;
/* Unregisters (waking any waiter) and closes; the queues kicked meanwhile
 * are served then. fd < 0 is a no-op. Without machine.lock. */
void machine_uffd_close(struct machine *m, int fd);
/* Up to max (<= 64) page indices that faulted; 0 when none are pending. */
int machine_uffd_read(struct machine *m, int fd, uint64_t *pages, size_t max) US_MUST_CHECK;
/* Places data (NULL: zeros) at page and wakes its waiters; -EEXIST when the
 * page is there already. */
int machine_uffd_fill(struct machine *m, int fd, uint64_t page, const void *data) US_MUST_CHECK;

#endif
