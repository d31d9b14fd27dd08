/* proto: the only code that knows the byte layout on the wire.
 *
 * Frame = 16-byte header + payload, all integers little-endian:
 *   u32 magic 'USTD' | u16 version | u16 type | u32 payload length | u32 crc32c(payload)
 * Control frames carry one protobuf-c message (proto/understudy.proto);
 * PROTO_T_PAGES frames carry a page batch (layout below), not protobuf.
 *
 * Page batch payload:
 *   u32 count | u32 flags (0) | count x { u64 gfn | u8 encoding | u32 length | length bytes }
 * Encodings per 4 KiB page: ZERO (length 0), RAW (4096), LZ4 (lz4 block of
 * the page), XOR (lz4 block of page XOR the last copy of that gfn the sender
 * sent on this connection; the receiver supplies that copy as the base).
 *
 * Machine state (vCPUs, VM, devices) is not protobuf either: a blob of named,
 * versioned sections carried as the data of a Section message (layout in
 * "machine state" below). The machine configuration is a MachineConfig.
 */
#ifndef US_PROTO_H
#define US_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <protobuf-c/protobuf-c.h>

#include "kmod/kmod.h"
#include "kmod/le.h"
#include "kmod/log.h"
#include "proto/understudy.pb-c.h"

#define PROTO_MAGIC       0x44545355u /* "USTD" little-endian */
#define PROTO_VERSION     1
#define PROTO_HDR_BYTES   16
#define PROTO_PAGE_BYTES  4096
/* Default payload limit of a decoder: a batch of 1024 raw pages + headers. */
#define PROTO_MAX_PAYLOAD_DEFAULT (1024u * (PROTO_PAGE_BYTES + 13) + 8)
/* Hard limit on the entries of one page batch. */
#define PROTO_PAGES_MAX_COUNT 65536u

/* Capability bits carried in Hello.capabilities. Every peer of this
 * version sends PROTO_CAPS_REQUIRED and refuses a peer without them. */
#define PROTO_CAP_LZ4   (1ull << 0)
#define PROTO_CAP_XOR   (1ull << 1)
#define PROTO_CAPS_REQUIRED (PROTO_CAP_LZ4 | PROTO_CAP_XOR)
/* Optional: the sender answers drill Sections (DrillRequest in
 * understudy.proto); a secondary runs no drill with a primary without it. */
#define PROTO_CAP_DRILL (1ull << 2)
/* Optional: the sender applies EpochEnd.reboot (a secondary clears its
 * standby's RAM for a guest's reboot epoch). A primary reboots a protected
 * guest in place only with a secondary that says so: one without it would
 * apply that epoch over the old RAM. */
#define PROTO_CAP_REBOOT (1ull << 3)
#define PROTO_CAPS_KNOWN (PROTO_CAPS_REQUIRED | PROTO_CAP_DRILL | PROTO_CAP_REBOOT)

/* Frame types. Message types carry the protobuf message of that name;
 * 3, 4, 10 and 11 are retired (never sent) and refused as unknown. */
enum proto_type {
	PROTO_T_HELLO = 1,
	PROTO_T_EPOCH_BEGIN = 2,
	PROTO_T_EPOCH_END = 5,
	PROTO_T_ACK = 6,
	PROTO_T_HEARTBEAT = 7,
	PROTO_T_FENCE = 8,
	PROTO_T_ERROR = 9,
	PROTO_T_SECTION = 12,
	PROTO_T_POSTCOPY_BEGIN = 13,
	PROTO_T_PAGE_REQUEST = 14,
	PROTO_T_POSTCOPY_DONE = 15,
	PROTO_T_MSG_LAST = PROTO_T_POSTCOPY_DONE,
	PROTO_T_PAGES = 32,
};

enum proto_page_encoding {
	PROTO_PAGE_ZERO = 0,
	PROTO_PAGE_RAW = 1,
	PROTO_PAGE_LZ4 = 2,
	PROTO_PAGE_XOR = 3,
};

/* ---- crc32c (Castagnoli) ------------------------------------------------ */

/* SSE4.2 crc32 + PCLMUL when the CPU has them (checked at run time),
 * table otherwise. crc is the running value: start with 0. */
uint32_t proto_crc32c(uint32_t crc, const void *data, size_t len);
/* The table path whatever the CPU (tests compare both). */
uint32_t proto_crc32c_sw(uint32_t crc, const void *data, size_t len);

/* ---- growable byte buffer ---------------------------------------------- */

struct proto_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

void proto_buf_init(struct proto_buf *b);
void proto_buf_fini(struct proto_buf *b);
int proto_buf_append(struct proto_buf *b, const void *data, size_t len) US_MUST_CHECK;
static inline void proto_buf_reset(struct proto_buf *b) { b->len = 0; }

/* ---- frames ------------------------------------------------------------- */

struct proto_frame {
	uint16_t type;
	uint32_t len;
	const uint8_t *payload; /* valid only during the callback */
};

const char *proto_type_name(uint16_t type);
bool proto_type_known(uint16_t type);

/* Appends a complete frame (header + copy of payload) to out. */
int proto_frame_append(struct proto_buf *out, uint16_t type, const void *payload,
		       size_t len) US_MUST_CHECK;
/* Writes a header for a payload the caller holds elsewhere (scatter send). */
void proto_frame_header(uint8_t hdr[PROTO_HDR_BYTES], uint16_t type, const void *payload,
			uint32_t len);

/* Appends a frame holding one protobuf-c message of the given type. */
int proto_msg_pack(struct proto_buf *out, uint16_t type, const ProtobufCMessage *msg) US_MUST_CHECK;
/* Unpacks the payload of a verified frame; -EBADMSG if it is not a valid
 * message of that type, -EPROTOTYPE if type is not a message type.
 * Free *msg with proto_msg_free(). */
int proto_msg_unpack(uint16_t type, const void *payload, size_t len,
		     ProtobufCMessage **msg) US_MUST_CHECK;
void proto_msg_free(ProtobufCMessage *msg);

/* Incremental decoder: feed byte chunks as they arrive, complete verified
 * frames come out of the callback. A frame is delivered only after its magic,
 * version, type, length limit and crc32c have been checked; nothing of a bad
 * frame is delivered. The first error is sticky: every later feed returns it
 * (the connection must be closed). Errors:
 *   -EPROTO bad magic, -EPROTONOSUPPORT wrong version, -EPROTOTYPE unknown
 *   type, -EMSGSIZE length over max_payload, -EBADMSG crc mismatch,
 *   or what the callback returned (non-zero stops decoding). */
typedef int (*proto_frame_fn)(void *ctx, const struct proto_frame *f);

struct proto_dec {
	uint8_t hdr[PROTO_HDR_BYTES];
	size_t hdr_have;
	uint8_t *payload;
	size_t payload_cap;
	size_t payload_have;
	uint32_t max_payload;
	int err;
	uint64_t nframes;
};

void proto_dec_init(struct proto_dec *d, uint32_t max_payload);
void proto_dec_fini(struct proto_dec *d);
int proto_dec_feed(struct proto_dec *d, const void *data, size_t len, proto_frame_fn fn,
		   void *ctx) US_MUST_CHECK;
/* Read-in-place: when the decoder is inside a payload with at least
 * min_bytes still missing, returns where the next *len (the rest of that
 * payload) bytes belong; NULL otherwise (read into any buffer and feed it).
 * Bytes read there are then passed to proto_dec_feed() with data pointing at
 * that same place, which skips the copy. Nothing is delivered or checked
 * before the feed; the buffer is valid until the next feed. */
void *proto_dec_rbuf(struct proto_dec *d, size_t min_bytes, size_t *len);
/* True when the decoder holds part of a frame (a stream ending here is truncated). */
bool proto_dec_partial(const struct proto_dec *d);
const char *proto_strerror(int err);

/* ---- machine state (state.c) --------------------------------------------
 *
 * The state of a checkpoint travels as one blob (inside the "state" Section
 * message of an epoch, and in snapshot files): a header, then sections.
 * All integers little-endian.
 *
 *   header (40 bytes, version PROTO_STATE_VERSION):
 *     u32 magic "CKS1" | u32 version | u64 config digest | u32 nsections |
 *     u32 ncpus | u64 total length of the blob | u32 crc32c of the 32 bytes
 *     before it | u32 zero
 *   section (40-byte header, then len bytes of data, zero-padded to 8):
 *     char name[16] (NUL-terminated) | u32 version | u32 instance | u64 len |
 *     u32 crc32c of header (crc as 0), data and padding | u32 zero
 *
 * Section data, by name (each version fixes its layout; a reader refuses a
 * version it does not know):
 *   "vcpu" v2, one per vCPU (instance = vCPU index):
 *     regs: rax rbx rcx rdx rsi rdi rsp rbp r8..r15 rip rflags   18 x u64
 *     sregs: cs ds es fs gs ss tr ldt, each { u64 base | u32 limit |
 *       u16 selector | u8 type present dpl db s l g avl unusable },
 *       gdt idt { u64 base | u16 limit }, u64 cr0 cr2 cr3 cr4 cr8 efer
 *       apic_base, u64 interrupt_bitmap[4]
 *     events: u8 exception.{injected nr has_error_code pending} |
 *       u32 exception.error_code | u8 interrupt.{injected nr soft shadow} |
 *       u8 nmi.{injected pending masked} | u32 sipi_vector | u32 flags |
 *       u8 smi.{smm pending smm_inside_nmi latched_init} |
 *       u8 triple_fault.pending | u8 exception_has_payload |
 *       u64 exception_payload
 *     u32 mp_state | u64 db0 db1 db2 db3 dr6 dr7 | u32 nxcrs (<= 16) |
 *     u32 nmsrs (<= 256) | u32 xsave_size (512 .. 16384)
 *     lapic: the 1024-byte APIC register page as the hardware lays it out
 *     nxcrs x { u32 xcr | u64 value }, nmsrs x { u32 index | u64 data },
 *     xsave_size bytes of XSAVE area (hardware layout)
 *   "vm" v2, one (PROTO_VM_STATE_BYTES):
 *     PIC master, PIC slave: 16 x u8 each (last_irr irr imr isr priority_add
 *       irq_base read_reg_select poll special_mask init_state auto_eoi
 *       rotate_on_auto_eoi special_fully_nested_mode init4 elcr elcr_mask)
 *     IOAPIC: u64 base_address | u32 ioregsel | u32 id | u32 irr
 *     PIT: 3 x { u32 count | u16 latched_count | u8 count_latched
 *       status_latched status read_state write_state write_latch rw_mode
 *       mode bcd gate | s64 count_load_time } | u32 flags
 *     kvmclock: u64 clock | u32 flags | u64 realtime | u64 host_tsc
 *     IOAPIC redirection table: 24 x u64
 *   "uart" v2, one (PROTO_UART_STATE_BYTES): u8 ier lcr mcr lsr_err msr scr
 *     dll dlm fcr thr_irq irq_level (0|1) | u32 rx_head (< 4096) |
 *     u32 rx_count (<= 4096) | 4096 bytes of receive FIFO
 *   "pci" v2, one (PROTO_PCI_STATE_BYTES): u32 config address (0xCF8) |
 *     PROTO_PCI_NSLOTS x 256 bytes of config space (00:00.0 bridge, 00:01.0
 *     virtio-blk, 00:02.0 virtio-net) | two virtio transports, virtio-blk's
 *     then virtio-net's, each: u64 driver_features | u32 device_feature_select |
 *     u32 driver_feature_select | u16 queue_select | u16 msix_config |
 *     u8 status isr (<= 3) config_generation | u32 msix_pending (4 bits) |
 *     u32 dev_flags (0|1: virtio-net's ANNOUNCE request) |
 *     3 x queue { u64 desc avail used | u16 size (0 or a power of 2 <= 256,
 *     > 0 if enabled)
 *     enable (0|1) msix_vector (< 4 or 0xffff) last_avail used_idx } |
 *     4 x MSI-X entry { u64 addr | u32 data | u32 ctrl (0|1) }
 *   "platform" v3, one (PROTO_PLATFORM_STATE_BYTES): the PC platform
 *     devices (machine/platform.c): u8 CMOS index (< 128) | u8 0xCF9 reset
 *     control (bits 1 and 3 only) | u16 ACPI PM1a enable | u16 PM1a control
 *     (SCI_EN set, SLP_EN clear) | u16 zero | s64 RTC offset from the
 *     host's UTC clock in seconds (|x| <= 2^34) | 128 bytes of CMOS
 *     (register A without UIP; C's low nibble 0 and IRQF set exactly when
 *     a flag of C and its enable in B are; D 0x80 and a day alarm in bits
 *     0-5) | s64 the host UTC time
 *     in ns (>= 0; 0: none yet) up to which the RTC's update cycles,
 *     periodic ticks and alarm are in register C | s64 where in the host's
 *     second the guest's begins, in ns (0..1e9-1; a divider restart sets
 *     it). Version 2 (read too): without the last field (phase 0);
 *     version 1: without the last two, register C 0. Absent from blobs
 *     written before it existed: such a blob reads as the devices'
 *     power-on state (what a restore of it gave then).
 *
 * Decoders check every length, count and version before use and never read
 * outside what they were given: -EBADMSG for a malformed blob or section,
 * -EPROTONOSUPPORT for an unknown blob version. */
#define PROTO_STATE_MAGIC         0x31534b43u /* "CKS1" little-endian */
#define PROTO_STATE_VERSION       1u
#define PROTO_STATE_HDR_BYTES     40
#define PROTO_SECTION_HDR_BYTES   40
#define PROTO_SECTION_NAME_BYTES  16

#define PROTO_STATE_VCPU          "vcpu"
#define PROTO_STATE_VCPU_VERSION  2u
#define PROTO_STATE_VM            "vm"
#define PROTO_STATE_VM_VERSION    2u
#define PROTO_STATE_UART          "uart"
#define PROTO_STATE_UART_VERSION  2u
#define PROTO_STATE_PCI           "pci"
#define PROTO_STATE_PCI_VERSION   2u
#define PROTO_STATE_PLATFORM      "platform"
#define PROTO_STATE_PLATFORM_VERSION 3u

#define PROTO_VM_STATE_BYTES      348u
#define PROTO_UART_RX_BYTES       4096u
#define PROTO_UART_STATE_BYTES    (19u + PROTO_UART_RX_BYTES)
#define PROTO_PCI_NSLOTS          3u
#define PROTO_PCI_STATE_BYTES     (4u + PROTO_PCI_NSLOTS * 256u + 2u * (31u + 3u * 34u + 4u * 16u))
#define PROTO_PLATFORM_STATE_V1_BYTES (16u + 128u)
#define PROTO_PLATFORM_STATE_V2_BYTES (PROTO_PLATFORM_STATE_V1_BYTES + 8u)
#define PROTO_PLATFORM_STATE_BYTES (PROTO_PLATFORM_STATE_V2_BYTES + 8u)

/* Names of the Section messages of the replication stream (Section.name). */
#define PROTO_SECTION_MACHINE_CONFIG "machine-config" /* a packed MachineConfig */
#define PROTO_SECTION_STATE          "state"          /* a state blob, as above */
#define PROTO_SECTION_RELEASED       "released"       /* proto_released_encode() */
#define PROTO_SECTION_VERIFY         "verify"         /* proto_verify_encode() */
#define PROTO_SECTION_CONSOLE        "console"        /* guest output bytes, as is */
#define PROTO_SECTION_DISK           "disk"           /* proto_blocks_encode() */

struct kvm_vcpu_state;
struct kvm_vm_state;
struct uart_state;
struct pci_state;
struct platform_state;

struct proto_state_hdr {
	uint64_t digest;
	uint32_t nsections;
	uint32_t ncpus;
	uint64_t total_len;
};

/* Writes the header (magic, version and crc filled in). */
void proto_state_hdr_encode(uint8_t out[PROTO_STATE_HDR_BYTES], const struct proto_state_hdr *h);
/* Checks magic, crc, version and that total_len is len. */
int proto_state_hdr_decode(const void *blob, size_t len, struct proto_state_hdr *h) US_MUST_CHECK;

struct proto_section {
	char name[PROTO_SECTION_NAME_BYTES];
	uint32_t version;
	uint32_t instance;
	uint64_t len;
	const uint8_t *data;  /* len bytes inside the blob */
};

/* Bytes a section of len data bytes takes in the blob, header and padding included. */
size_t proto_section_bytes(size_t len);
/* The caller wrote len bytes of data at out + PROTO_SECTION_HDR_BYTES;
 * this pads them and writes the header in front (proto_section_bytes(len) in all). */
void proto_section_seal(uint8_t *out, const char *name, uint32_t version, uint32_t instance,
			size_t len);
/* Reads the section at *off of a blob of len bytes and moves *off past it.
 * Checks the name, that it fits, its padding and its crc; not its version. */
int proto_section_next(const void *blob, size_t len, size_t *off, struct proto_section *s)
	US_MUST_CHECK;

/* Section data. Encoders write exactly the size (returned) and cannot fail:
 * the caller holds a state that came from KVM (or a decoder). */
size_t proto_vcpu_state_size(const struct kvm_vcpu_state *v);
size_t proto_vcpu_state_encode(const struct kvm_vcpu_state *v, uint8_t *out);
int proto_vcpu_state_decode(const void *in, size_t len, struct kvm_vcpu_state *v) US_MUST_CHECK;
size_t proto_vm_state_encode(const struct kvm_vm_state *s, uint8_t out[PROTO_VM_STATE_BYTES]);
int proto_vm_state_decode(const void *in, size_t len, struct kvm_vm_state *s) US_MUST_CHECK;
size_t proto_uart_state_encode(const struct uart_state *u, uint8_t out[PROTO_UART_STATE_BYTES]);
int proto_uart_state_decode(const void *in, size_t len, struct uart_state *u) US_MUST_CHECK;
size_t proto_pci_state_encode(const struct pci_state *s, uint8_t out[PROTO_PCI_STATE_BYTES]);
int proto_pci_state_decode(const void *in, size_t len, struct pci_state *s) US_MUST_CHECK;
size_t proto_platform_state_encode(const struct platform_state *s,
				   uint8_t out[PROTO_PLATFORM_STATE_BYTES]);
/* version: the section's, 1 or 2 (-EPROTONOSUPPORT otherwise). */
int proto_platform_state_decode(const void *in, size_t len, uint32_t version,
				struct platform_state *s) US_MUST_CHECK;

/* ---- page batches -------------------------------------------------------- */

#define PROTO_PAGE_NO_COMPRESS 0x1u /* raw and zero pages only, no cache */

struct proto_page_stats {
	uint64_t npages;
	uint64_t nzero, nraw, nlz4, nxor;
	uint64_t bytes_in;  /* npages * 4096 */
	uint64_t bytes_out; /* payload bytes produced, headers included */
	/* bytes_out by encoding (entry headers included), indexed by enum
	 * proto_page_encoding: what the metrics call bytes by encoding */
	uint64_t enc_bytes[4];
};

/* Sender state. The cache of sent pages is direct-mapped by gfn:
 * cache_mb MiB of page copies plus 8 bytes of tag per 4 KiB slot (0.2%).
 * Two gfns that share a slot evict each other; a miss costs only ratio
 * (the page is sent LZ4 or raw). Each encoded page costs one 4 KiB copy into
 * the cache. cache_mb = 0 disables XOR delta. */
struct proto_page_enc;

struct proto_page_enc *proto_page_enc_new(size_t cache_mb, unsigned flags);
void proto_page_enc_free(struct proto_page_enc *e);
/* Forget every cached page: call at each new connection (the new receiver
 * knows nothing about what was sent before). */
void proto_page_enc_reset(struct proto_page_enc *e);
/* Forget the cached copy of gfn: its next encoding is not an XOR delta.
 * For a page sent twice in one epoch (a pre-copy, then the pause): the
 * receiver decodes a delta against its last complete checkpoint, which
 * does not hold the first copy yet. */
void proto_page_enc_forget(struct proto_page_enc *e, uint64_t gfn);
/* Off: pages encoded from now on are not kept for XOR (and a kept copy of
 * their gfn is forgotten). A bulk copy, where most pages travel once (the
 * initial sync), then costs no copy into the cache, nor the faults of a
 * cache touched for the first time. On by default. */
void proto_page_enc_cache(struct proto_page_enc *e, bool on);

/* Appends one complete PROTO_T_PAGES frame holding n pages to out.
 * st (may be NULL) is accumulated into. */
int proto_pages_encode(struct proto_page_enc *e, const uint64_t *gfns, const void *const *pages,
		       size_t n, struct proto_buf *out, struct proto_page_stats *st) US_MUST_CHECK;

/* The same frame without copying RAW pages: the frame goes out as iov[0..
 * *iovcnt), pieces of out (headers, compressed pages) alternating with the
 * caller's own page memory for RAW pages. iov needs proto_pages_iov_max(n)
 * entries. out is reset by the caller; it must not be touched and the raw
 * pages must not change until the iovecs have been sent (the crc covers
 * them as they are now). Same bytes on the wire as proto_pages_encode(). */
size_t proto_pages_iov_max(size_t n);
int proto_pages_encode_iov(struct proto_page_enc *e, const uint64_t *gfns,
			   const void *const *pages, size_t n, struct proto_buf *out,
			   struct iovec *iov, int *iovcnt, struct proto_page_stats *st) US_MUST_CHECK;

/* Disk blocks (the "disk" Section of an epoch or of the initial sync):
 * the payload of a page batch, without its frame header, the gfn field
 * holding the block number (4 KiB blocks of the image, the last one
 * zero-padded) and the encodings ZERO, RAW or LZ4 (e made with cache_mb 0:
 * never XOR). Decoded by proto_pages_decode() with max_gfn the image's
 * block count and a base() that returns NULL. */
int proto_blocks_encode(struct proto_page_enc *e, const uint64_t *blocks, const void *const *data,
			size_t n, struct proto_buf *out, struct proto_page_stats *st) US_MUST_CHECK;

/* Receiver side. base() returns the receiver's latest copy of gfn (what it
 * last received for it, including earlier pages of this batch), or NULL if it
 * has none (the batch is then invalid). page() gets each decoded page, in
 * order; a non-zero return stops decoding and is returned. */
struct proto_page_sink {
	const void *(*base)(void *ctx, uint64_t gfn);
	int (*page)(void *ctx, uint64_t gfn, const void *data);
	/* May be NULL; else the decoded entries are counted into it
	 * (npages, n<encoding>, enc_bytes, bytes_in, bytes_out). */
	struct proto_page_stats *st;
};

/* Decodes the payload of a PROTO_T_PAGES frame. Checks the count, every
 * length, every gfn (< max_gfn) and that each page decompresses to exactly
 * 4096 bytes. The structure of the whole batch is checked before the first
 * page is delivered; a decompression error can still stop it part-way, so on
 * any error (-EBADMSG) the caller discards the whole batch. *npages (may be
 * NULL) gets the entry count. */
int proto_pages_decode(const void *payload, size_t len, uint64_t max_gfn,
		       const struct proto_page_sink *sink, void *ctx, size_t *npages) US_MUST_CHECK;

/* ---- replication metadata (meta.c) ---- */

/* Integers that replication puts on the wire outside protobuf fields:
 * explicit little-endian, whatever the host. Decoders check the length
 * (-EBADMSG when it is not exactly the encoded size). */
#define PROTO_META_U64_BYTES 8
#define PROTO_META_U32_BYTES 4

/* "released" section: total guest output bytes the primary has released. */
void proto_released_encode(uint64_t released, uint8_t out[PROTO_META_U64_BYTES]);
int proto_released_decode(const void *data, size_t len, uint64_t *released) US_MUST_CHECK;
/* "verify" section (test mode): a digest of a machine's complete state, part
 * by part, each part a crc32c (checkpoint/digest.c computes them from KVM).
 * Time that runs on (guest TSC, kvmclock) travels as the reading itself.
 *   u32 version (PROTO_VERIFY_VERSION) | u32 ncpus (1 .. KVM_MAX_VCPUS) |
 *   u32 mem | u32 vm[PROTO_VERIFY_VM_PARTS] | u64 clock_ns |
 *   ncpus x { u32 part[PROTO_VERIFY_VCPU_PARTS] | u64 tsc } */
enum { PROTO_VERIFY_REGS, PROTO_VERIFY_SREGS, PROTO_VERIFY_XSAVE, PROTO_VERIFY_XCRS,
       PROTO_VERIFY_MSRS, PROTO_VERIFY_LAPIC, PROTO_VERIFY_EVENTS, PROTO_VERIFY_MP_STATE,
       PROTO_VERIFY_DEBUGREGS, PROTO_VERIFY_VCPU_PARTS };
enum { PROTO_VERIFY_PIC_MASTER, PROTO_VERIFY_PIC_SLAVE, PROTO_VERIFY_IOAPIC, PROTO_VERIFY_PIT,
       PROTO_VERIFY_UART, PROTO_VERIFY_PCI, PROTO_VERIFY_PLATFORM, PROTO_VERIFY_VM_PARTS };
#define PROTO_VERIFY_VERSION   3u
#define PROTO_VERIFY_MAX_BYTES (48 + KVM_MAX_VCPUS * (PROTO_VERIFY_VCPU_PARTS * 4 + 8))

struct proto_verify_vcpu {
	uint32_t part[PROTO_VERIFY_VCPU_PARTS];  /* crc32c of each part */
	uint64_t tsc;                            /* IA32_TSC */
};

struct proto_verify {
	uint32_t ncpus;
	uint32_t mem;                            /* crc32c of all guest RAM */
	uint32_t vm[PROTO_VERIFY_VM_PARTS];
	uint64_t clock_ns;                       /* kvmclock */
	struct proto_verify_vcpu vcpu[KVM_MAX_VCPUS];
};

/* encode returns the bytes written (0 if len is too small or ncpus too
 * large); decode checks version, ncpus and that len is exactly the size. */
size_t proto_verify_encode(const struct proto_verify *d, uint8_t *out, size_t len);
int proto_verify_decode(const void *data, size_t len, struct proto_verify *d) US_MUST_CHECK;
/* EpochEnd.digest: crc32c over every page of the epoch, each as its gfn
 * (u64 little-endian) followed by its 4096 bytes; start with crc 0. */
uint32_t proto_digest_page(uint32_t crc, uint64_t gfn, const void *page);
void proto_digest_encode(uint32_t crc, uint8_t out[PROTO_META_U32_BYTES]);
int proto_digest_decode(const void *data, size_t len, uint32_t *crc) US_MUST_CHECK;
/* Hello.config_digest: the machine configuration digest as bytes (readers
 * use Hello.config_digest64). */
void proto_config_digest_encode(uint64_t digest, uint8_t out[PROTO_META_U64_BYTES]);

/* ---- messages carried as Section data (messages.c) ----
 *
 * The machine configuration ("machine-config" Section, and the digest in
 * Hello) as a packed MachineConfig: encode returns its length or -ENOSPC;
 * decode -EBADMSG for bytes that do not unpack or a configuration out of
 * range (vCPUs, memory size and alignment, string lengths, a kernel for
 * another guest than "linux", an initrd or command line without kernel).
 * PROTO_CONFIG_MAX_BYTES holds any configuration encoded. */
#define PROTO_CONFIG_MAX_BYTES 4096
struct machine_config;
int proto_config_encode(const struct machine_config *cfg, void *buf, size_t len);
int proto_config_decode(const void *data, size_t len, struct machine_config *cfg) US_MUST_CHECK;
/* The drill's Sections: DrillRequest (drill-begin, drill-end; a decoded
 * id 0 is refused) and DrillReport (drill-digest, drill-stats, plain
 * numbers). encode returns the bytes written or -ENOSPC. */
int proto_drill_request_encode(uint64_t id, uint8_t *buf, size_t len);
int proto_drill_request_decode(const void *data, size_t len, uint64_t *id) US_MUST_CHECK;
int proto_drill_report_encode(const Understudy__DrillReport *m, uint8_t *buf, size_t len);
int proto_drill_report_decode(const void *data, size_t len,
			      Understudy__DrillReport *out) US_MUST_CHECK;

/* ---- JSON documents of the control socket and the command line (json.c) ----
 *
 * `status json`, the drill's state and the commands' --json lines are built
 * with json-c and read with its tokener: any string (a peer's error text,
 * a path) is escaped, and a reader finds fields, not substrings. Numbers
 * keep the precision they are documented with: proto_json_add_fixed
 * prints v with that many decimals (a JSON number; null when v is not
 * finite). The adders do nothing when o is NULL; proto_json_line is then
 * NULL (out of memory) and the caller answers without a document. */
struct json_object;

void proto_json_add_str(struct json_object *o, const char *key, const char *v);
void proto_json_add_u64(struct json_object *o, const char *key, uint64_t v);
void proto_json_add_bool(struct json_object *o, const char *key, bool v);
void proto_json_add_fixed(struct json_object *o, const char *key, double v, int decimals);
/* The document as one line ending in a newline (malloc'd, NULL: out of
 * memory); drops the caller's reference to o. */
char *proto_json_line(struct json_object *o);
/* text holds exactly one JSON object (then at most whitespace): a new
 * reference, or NULL with what is wrong in why (may be NULL). */
struct json_object *proto_json_parse(const char *text, const char **why);
/* An optional field of o: its string ("" when absent or not a string); its
 * number (dflt when absent or not a number). Only for fields a document may
 * leave out; a field it must hold is read through a reader (below). */
const char *proto_json_str(struct json_object *o, const char *key);
double proto_json_num(struct json_object *o, const char *key, double dflt);

/* A reply read field by field, where each field read must be there with
 * its type. The first thing wrong (the text not one JSON object, a field
 * missing or of another type) is kept in why, e.g. `no field "state"` or
 * `"epoch" is a JSON string, not a number`; every read after it returns "" or
 * 0, so a caller reads what it needs and then checks why[0] once. The
 * reader owns o. */
struct proto_json_reader {
	struct json_object *o;          /* NULL when the text was not a JSON object */
	char why[160];                  /* "" while nothing is wrong */
};

/* Parses text (proto_json_parse) into r: 0, or -EPROTO with why saying
 * what is wrong and quoting the start of the text. */
int proto_json_read(struct proto_json_reader *r, const char *text) US_MUST_CHECK;
void proto_json_reader_fini(struct proto_json_reader *r);
const char *proto_json_need_str(struct proto_json_reader *r, const char *key);
double proto_json_need_num(struct proto_json_reader *r, const char *key);
/* An integer, not negative (a count, an epoch). */
uint64_t proto_json_need_u64(struct proto_json_reader *r, const char *key);
/* An object inside (r keeps owning it: valid until proto_json_reader_fini). */
struct json_object *proto_json_need_obj(struct proto_json_reader *r, const char *key);

#endif
