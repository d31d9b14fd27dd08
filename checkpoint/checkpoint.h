/* checkpoint: whole-machine checkpoints, full and incremental, and snapshot
 * files.
 *
 * A checkpoint is the unit everything else moves: memory pages (every page,
 * or exactly the pages dirtied since the previous capture), each with its
 * guest frame number, plus the serialized state of every vCPU, of the VM
 * (PIC, IOAPIC, PIT, kvmclock) and of every device (UART, PCI and virtio,
 * the platform devices: CMOS RTC, ACPI PM1a, reset), tagged with the
 * digest of the machine configuration.
 *
 * The state is a sequence of named, versioned sections, each with its own
 * CRC32C, laid out by proto/ (proto/proto.h); the section table lives in
 * checkpoint/state.c, so adding a device adds a table entry (and its
 * encoder in proto/state.c) and leaves this core alone.
 *
 * Capture happens on a paused machine and costs: harvest (get + clear the
 * dirty log, clear before copy), copy of the dirty pages into the epoch
 * buffer (reused, never allocated per page), reading the state. Apply
 * validates everything first and touches the target only once the whole
 * checkpoint is known good. */
#ifndef US_CHECKPOINT_H
#define US_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "machine/machine.h"

#define CKPT_PAGE_SIZE 4096u

struct ckpt_image;

struct ckpt_stats {
	uint64_t harvest_ns;   /* get + clear of the dirty log */
	uint64_t copy_ns;      /* copy of the dirty pages */
	uint64_t state_ns;     /* reading and serializing vCPU, VM, device state */
	uint64_t pause_ns;     /* ckpt_take: pause .. resume, all of it */
	uint64_t stop_ns;      /* ckpt_take: time to stop the vCPUs */
};

struct ckpt {
	uint64_t config_digest;
	bool full;
	size_t npages;
	uint64_t *gfns;
	uint8_t *pages;          /* npages * CKPT_PAGE_SIZE, contiguous */
	uint8_t *state;          /* serialized sections: vCPUs, VM, devices */
	size_t state_len;

	/* Capacities, kept across ckpt_reset so epochs reuse the buffers. */
	size_t cap_pages;        /* pages (and gfns) allocated */
	size_t cap_state;

	/* The last harvest (one bit per RAM page), for ckpt_requeue. */
	uint64_t *harvest;
	size_t harvest_words;

	struct ckpt_image *image;  /* scratch for capture, allocated once */

	struct ckpt_stats stats;
};

void ckpt_init(struct ckpt *c);
void ckpt_fini(struct ckpt *c);
/* Empties the checkpoint, keeps its buffers. */
void ckpt_reset(struct ckpt *c);
/* Makes room for npages pages, the memory prefaulted (so the first copy into
 * it does not pay page faults inside the pause). */
int ckpt_reserve(struct ckpt *c, size_t npages) US_MUST_CHECK;

/* On a paused machine: harvests the dirty log (clearing it), copies the
 * dirty pages (all pages if full) and captures the state. Replaces c. */
int ckpt_capture(struct machine *m, struct ckpt *c, bool full) US_MUST_CHECK;
/* While the guest runs (pre-copy): harvests what the guest wrote so far
 * (machine_harvest_running) and copies it, no state. A page written during
 * or after its copy is in the next harvest. Replaces c; c->harvest holds
 * what was taken (ckpt_requeue gives it back). */
int ckpt_precopy(struct machine *m, struct ckpt *c) US_MUST_CHECK;
/* machine_pause + ckpt_capture + machine_resume, timed into c->stats.
 * The machine must be running (or parked by its owner in a resumable way). */
int ckpt_take(struct machine *m, struct ckpt *c, bool full) US_MUST_CHECK;
/* After a capture that could not be delivered (e.g. a snapshot write that
 * failed): marks the harvested pages dirty again, so the next incremental
 * checkpoint still carries them. */
void ckpt_requeue(struct machine *m, const struct ckpt *c);

/* Receiver side: builds a checkpoint from parts. */
int ckpt_add_page(struct ckpt *c, uint64_t gfn, const void *data) US_MUST_CHECK;
int ckpt_set_state(struct ckpt *c, const void *blob, size_t len) US_MUST_CHECK;

/* Full check of c against m: config digest, every gfn within RAM, every
 * section present, sized, versioned and checksummed right. Touches nothing. */
int ckpt_validate(struct machine *m, const struct ckpt *c) US_MUST_CHECK;
/* On a paused machine of the same configuration: validates, then writes
 * memory, then VM and device state, then every vCPU (kvm_vcpu_set_state
 * documents the order inside a vCPU). A checkpoint that fails validation
 * leaves m as it was; after validation only a KVM refusal can fail (-EIO
 * then, and the target must be discarded). */
int ckpt_apply(struct machine *m, const struct ckpt *c) US_MUST_CHECK;

/* Access to the decoded state (tests, diagnostics, tools). */
int ckpt_get_vcpu_state(const struct ckpt *c, int cpu, struct kvm_vcpu_state *st) US_MUST_CHECK;
/* Replaces vCPU cpu's state in c, re-encoding the blob with fresh checksums. */
int ckpt_put_vcpu_state(struct ckpt *c, int cpu, const struct kvm_vcpu_state *st) US_MUST_CHECK;

/* ---- state sections (state.c) ----
 * The decoded form of a checkpoint's state: what the sections hold. */
struct ckpt_image {
	int ncpus;
	struct machine_state ms;
	struct kvm_vcpu_state vcpus[KVM_MAX_VCPUS];
};

/* One kind of section. Instances: one per vCPU, or one. save writes exactly
 * size() bytes; load decodes and checks (touching only img). The decoded
 * image goes to the machine through machine_set_state / set_vcpu_state
 * (which already re-drives the UART's IRQ line); post_load, if set, runs
 * after every section is in place, to rebuild derived state a device keeps
 * outside its plain-data state. absent, if set, makes the section optional:
 * a blob without it (written before the section existed) decodes, absent()
 * filling its part of img as the build that wrote the blob left it. oldest,
 * if set, is the oldest version load still reads (load is told which). */
struct ckpt_section_ops {
	const char *name;
	uint32_t version;
	int (*count)(const struct ckpt_image *img);
	size_t (*size)(const struct ckpt_image *img, int inst);
	void (*save)(const struct ckpt_image *img, int inst, uint8_t *out);
	int (*load)(struct ckpt_image *img, int inst, uint32_t version, const uint8_t *in,
		    size_t len);
	int (*post_load)(struct machine *m, const struct ckpt_image *img);
	void (*absent)(struct ckpt_image *img);
	uint32_t oldest;
};

/* Reads the image of a paused machine. */
int ckpt_image_read(struct machine *m, struct ckpt_image *img) US_MUST_CHECK;
/* Serializes img into c->state (growing it if needed). */
int ckpt_state_encode(struct ckpt *c, const struct ckpt_image *img) US_MUST_CHECK;
/* Runs every section's post_load on m (ckpt_apply does, last). */
int ckpt_state_post_load(struct machine *m, const struct ckpt_image *img) US_MUST_CHECK;
/* The vCPU count a state blob's header claims (1..KVM_MAX_VCPUS), or -errno. */
int ckpt_state_ncpus(const uint8_t *blob, size_t len) US_MUST_CHECK;
/* Verifies and decodes a state blob: header, digest, every section present
 * once, known version, right size, right CRC. */
int ckpt_state_decode(const uint8_t *blob, size_t len, uint64_t digest, int ncpus,
		      struct ckpt_image *img) US_MUST_CHECK;


/* ---- snapshot files (file.c) ----
 * header (magic, format version, config digest, machine config with a NIC's
 * given MAC, snapshot id, parent id; version 1 files, without the MAC, are
 * still read), sections (gfns, pages, state, config) each with a CRC32C,
 * and a trailer with the CRC32C of everything before it. The "config"
 * section (version 3; file_config.c) is the whole machine configuration as
 * the Hello carries it: read back, cfg has the Linux guest's kernel, initrd
 * and command line it was booted from (version 1 and 2 files, without it,
 * read with those empty). Written with mode 0600
 * to an unnamed file (O_TMPFILE; where unsupported, a random name created
 * with O_EXCL|O_NOFOLLOW), fsynced, linked under a random temporary name,
 * renamed, directory fsynced: a failed write leaves the previous file at
 * path untouched. A path that is a symbolic link is refused (-ELOOP) before
 * anything is written. */
struct ckpt_file_info {
	uint64_t id;         /* random, unique per file */
	uint64_t parent_id;  /* 0 for a full snapshot, else the id it is a diff against */
	/* Read only: the file carries the disk's contents (a full snapshot
	 * taken with --with-disk), an image of disk_bytes with disk_blocks
	 * non-zero blocks. */
	bool disk;
	uint64_t disk_bytes, disk_blocks;
};

/* The contents of a VM's disk for a snapshot: its non-zero blocks
 * (MACHINE_DISK_BLOCK bytes each, the last one zero-padded), in order. */
struct ckpt_disk {
	uint64_t disk_bytes;
	size_t n, cap;
	uint64_t *blocks;
	uint8_t *data;
};

void ckpt_disk_init(struct ckpt_disk *d);
void ckpt_disk_fini(struct ckpt_disk *d);
/* A full capture of m into c and its disk's non-zero blocks into d, in one
 * pause (holes are skipped unread; the blocks are read in the pause, so
 * the pause grows with the data on the disk). */
int ckpt_take_disk(struct machine *m, struct ckpt *c, struct ckpt_disk *d) US_MUST_CHECK;
/* ckpt_file_write_ex with the disk's contents (d NULL: none) in a "disk"
 * section after "state" (flag 8; c must be full). */
int ckpt_file_write_disk(const char *path, const struct ckpt *c, const struct machine_config *cfg,
			 const struct ckpt_file_info *info, const struct ckpt_disk *d) US_MUST_CHECK;
/* Writes the disk carried by the snapshot at path to image: created (0600)
 * if missing, never through a symbolic link, locked like a VM's image,
 * emptied and sized to the saved disk, its blocks written, fdatasynced.
 * Call after ckpt_file_read_ex verified the file (info->disk); the blocks
 * are checked again as they are written (-EBADMSG if the file changed).
 * 0 or -errno with err saying why. */
int ckpt_file_restore_disk(const char *path, const char *image, char *err, size_t errlen)
	US_MUST_CHECK;

int ckpt_file_write(const char *path, const struct ckpt *c, const struct machine_config *cfg)
	US_MUST_CHECK;
/* The same, with explicit chain ids. */
int ckpt_file_write_ex(const char *path, const struct ckpt *c, const struct machine_config *cfg,
		       const struct ckpt_file_info *info) US_MUST_CHECK;
/* Reads and verifies the whole file (every checksum) into c and cfg. */
int ckpt_file_read(const char *path, struct ckpt *c, struct machine_config *cfg) US_MUST_CHECK;
int ckpt_file_read_ex(const char *path, struct ckpt *c, struct machine_config *cfg,
		      struct ckpt_file_info *info) US_MUST_CHECK;
/* A new snapshot id: random, never 0. */
uint64_t ckpt_file_new_id(void);
/* The "config" section (file_config.c): cfg packed as a MachineConfig
 * (its length, or -errno); decoding checks data against cfg as the header
 * filled it (memory, vCPUs, guest and arguments must agree; a kernel only
 * for the "linux" guest, an initrd or command line only with a kernel) and
 * sets cfg's kernel, initrd and append. -EBADMSG for anything else. */
int ckpt_file_config_encode(const struct machine_config *cfg, uint8_t *buf, size_t len);
int ckpt_file_config_decode(const uint8_t *data, size_t len,
			    struct machine_config *cfg) US_MUST_CHECK;

/* Restoring a chain of snapshot files (file_chain.c). */
enum ckpt_chain_fault {
	CKPT_CHAIN_READ,     /* the file could not be read (the error says why) */
	CKPT_CHAIN_LINK,     /* not the diff that follows the file before (-EINVAL) */
	CKPT_CHAIN_APPLY,    /* ckpt_apply refused it */
};
struct ckpt_chain_error {
	int file;            /* index into files */
	enum ckpt_chain_fault fault;
};
/* files[0] is a full snapshot, already read into c with id base_id: applies
 * it to the paused machine m, then reads each diff of files[1..n) into c and
 * applies it, in order; each must name the file before as its parent. On
 * failure returns -errno with *err saying which file and how (m must then be
 * discarded: a diff may have applied before a later one failed). */
int ckpt_file_apply_chain(struct machine *m, struct ckpt *c, uint64_t base_id, char *const *files,
			  int n, struct ckpt_chain_error *err) US_MUST_CHECK;

/* ---- state digest (digest.c) ----
 * A digest of a machine's complete state, part by part, to compare two
 * machines that should be equal (UNDERSTUDY_VERIFY: the primary at a pause,
 * the standby after applying that epoch). Read from KVM, not from a
 * checkpoint. Time that runs on (guest TSC, kvmclock) is compared by order:
 * the second reading must not be earlier. digest.c lists what is left out. */
struct proto_verify;       /* proto/proto.h: the digest and its wire form */
struct proto_verify_vcpu;

void ckpt_digest_vcpu(const struct kvm_vcpu_state *v, struct proto_verify_vcpu *d);
/* The digest's RAM part (not crc32c: digest.c says why). */
uint32_t ckpt_digest_ram(const uint8_t *p, uint64_t len);
void ckpt_digest_vm(const struct machine_state *ms, struct proto_verify *d);
/* On a paused machine: RAM and every piece of state, read from KVM. */
int ckpt_digest_machine(struct machine *m, struct proto_verify *d) US_MUST_CHECK;
/* The same from a capture just taken (c's state, m's RAM, m still paused):
 * what the primary sends, so that nothing changes between capture and digest. */
int ckpt_digest_capture(const struct machine *m, const struct ckpt *c,
			struct proto_verify *d) US_MUST_CHECK;
/* Writes the names of the parts where got is not want ("vcpu0.lapic pit")
 * into buf; returns how many differ. */
int ckpt_digest_diff(const struct proto_verify *want, const struct proto_verify *got, char *buf,
		     size_t len);

#endif
