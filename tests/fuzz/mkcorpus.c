/* Writes the generated part of the fuzz corpora (make fuzz-corpus):
 * state/, config/, snapshot/ (but ok-v1-diff-2pages and ok-v2-diff-2pages,
 * written by the version 1 and 2 writers and kept as they are) and
 * standby/ entirely, and the
 * frame/ files named below. Each file
 * is named for the verdict its target must give (ok-* accepted, bad-*
 * rejected); replay.c asserts it. The other frame/ and pages/ files were
 * made by hand and are kept as they are. Usage: mkcorpus CORPUS_DIR */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "proto/proto.h"
#include "replication/replication.h"

static const char *root;

static void put_file(const char *dir, const char *name, const void *data, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/%s", root, dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
		perror(path);
		exit(1);
	}
}

/* ---- state ------------------------------------------------------------------- */

static void plausible_vcpu(struct kvm_vcpu_state *v, int i)
{
	memset(v, 0, sizeof(*v));
	v->regs.rip = 0x100000 + (uint64_t)i * 0x40;
	v->regs.rflags = 0x202;
	v->regs.rsp = 0x7ff000;
	v->sregs.cs.selector = 0x33;
	v->sregs.cs.present = v->sregs.cs.l = 1;
	v->sregs.cr0 = 0x80050033;
	v->sregs.efer = 0xd00;
	v->sregs.apic_base = 0xfee00900;
	v->lapic.regs[0x20 + 3] = (char)i; /* APIC id */
	v->xcrs.nr_xcrs = 1;
	v->xcrs.xcrs[0].value = 7;
	v->nmsrs = 3;
	v->msrs[0] = (struct kvm_msr_entry){ .index = 0x10, .data = 123456789 };
	v->msrs[1] = (struct kvm_msr_entry){ .index = 0xc0000080, .data = 0xd00 };
	v->msrs[2] = (struct kvm_msr_entry){ .index = 0x6e0, .data = 1ull << 40 };
	v->xsave_size = 4096;
	v->xsave[0] = 0x7f;
	v->xsave[24] = 0x80; /* mxcsr 0x1f80 */
	v->xsave[25] = 0x1f;
}

static void plausible_image(struct ckpt_image *img, int ncpus)
{
	memset(img, 0, sizeof(*img));
	img->ncpus = ncpus;
	for (int i = 0; i < ncpus; i++)
		plausible_vcpu(&img->vcpus[i], i);
	img->ms.vm.pic_master.chip.pic.imr = 0xfb;
	img->ms.vm.pic_slave.chip.pic.imr = 0xff;
	img->ms.vm.ioapic.chip.ioapic.base_address = 0xfec00000;
	img->ms.vm.pit.channels[0].count = 65536;
	img->ms.vm.clock.clock = 1000000;
	img->ms.uart.lcr = 3;
	img->ms.uart.rx_count = 2;
	memcpy(img->ms.uart.rx, "hi", 2);
	img->ms.pci.addr = 0x80000800u;   /* a virtio-blk in use: queue 0 enabled */
	img->ms.pci.cfg[1][0] = 0xf4;
	img->ms.pci.cfg[1][1] = 0x1a;
	img->ms.pci.blk.status = 0x0f;
	img->ms.pci.blk.msix_config = 0xffff;
	img->ms.pci.blk.q[0] = (struct virtq_state){ .desc = 0x200000, .avail = 0x201000,
		.used = 0x202000, .size = 16, .enable = 1, .msix_vector = 0xffff, .last_avail = 7,
		.used_idx = 7 };
	img->ms.pci.blk.q[1].msix_vector = 0xffff;
}

struct blob {
	uint8_t *buf;
	size_t len;
	uint32_t n;
};

static void blob_add(struct blob *b, const char *name, uint32_t version, uint32_t inst,
		     const void *data, size_t len)
{
	memcpy(b->buf + b->len + PROTO_SECTION_HDR_BYTES, data, len);
	proto_section_seal(b->buf + b->len, name, version, inst, len);
	b->len += proto_section_bytes(len);
	b->n++;
}

static void blob_finish(struct blob *b, uint64_t digest, uint32_t ncpus)
{
	struct proto_state_hdr h = { digest, b->n, ncpus, b->len };

	proto_state_hdr_encode(b->buf, &h);
}

/* A blob of img's sections, the vcpu ones changed by how. WHOLE has no
 * "platform" section: a blob of a build before it, still read. */
enum how { WHOLE, VCPU_V1, UNKNOWN_SECTION, NO_UART, VCPU_TWICE, TOO_MANY_MSRS, NO_PCI, BAD_QUEUE,
	   PLATFORM, BAD_PLATFORM };

static size_t build(struct blob *b, const struct ckpt_image *img, enum how how)
{
	static uint8_t data[PROTO_UART_STATE_BYTES + sizeof(struct kvm_vcpu_state) * 2];

	b->len = PROTO_STATE_HDR_BYTES;
	b->n = 0;
	for (int i = 0; i < img->ncpus; i++) {
		size_t n = proto_vcpu_state_encode(&img->vcpus[i], data);

		if (how == TOO_MANY_MSRS)    /* u32 LE nmsrs at 529 */
			for (int k = 0; k < 4; k++)
				data[529 + k] = (uint8_t)((KVM_MAX_MSRS + 1) >> (8 * k));
		blob_add(b, PROTO_STATE_VCPU, how == VCPU_V1 ? 1 : PROTO_STATE_VCPU_VERSION,
			 how == VCPU_TWICE ? 0 : (uint32_t)i, data, n);
	}
	proto_vm_state_encode(&img->ms.vm, data);
	blob_add(b, PROTO_STATE_VM, PROTO_STATE_VM_VERSION, 0, data, PROTO_VM_STATE_BYTES);
	proto_uart_state_encode(&img->ms.uart, data);
	if (how != NO_UART)
		blob_add(b, how == UNKNOWN_SECTION ? "hpet" : PROTO_STATE_UART,
			 PROTO_STATE_UART_VERSION, 0, data, PROTO_UART_STATE_BYTES);
	proto_pci_state_encode(&img->ms.pci, data);
	/* The disk's queue 0 size: after the address, the config spaces and
	 * the device's 31 bytes of common fields, 24 bytes into the queue. */
	if (how == BAD_QUEUE)
		data[4 + PROTO_PCI_NSLOTS * 256 + 31 + 24] = 0xff;   /* size low byte: 0x1ff */
	if (how == BAD_QUEUE)
		data[4 + PROTO_PCI_NSLOTS * 256 + 31 + 25] = 0x01;
	if (how != NO_PCI)
		blob_add(b, PROTO_STATE_PCI, PROTO_STATE_PCI_VERSION, 0, data, PROTO_PCI_STATE_BYTES);
	if (how == PLATFORM || how == BAD_PLATFORM) {
		struct platform_state p;

		platform_reset(&p);
		p.pm1_en = 0x0121;
		p.rtc_offset = -86400;
		p.cmos[0x40] = 0x5a;
		if (how == BAD_PLATFORM)
			p.pm1_cnt |= 0x2000;         /* SLP_EN: a power-off under way */
		proto_platform_state_encode(&p, data);
		blob_add(b, PROTO_STATE_PLATFORM, PROTO_STATE_PLATFORM_VERSION, 0, data,
			 PROTO_PLATFORM_STATE_BYTES);
	}
	blob_finish(b, 0x1234, (uint32_t)img->ncpus);
	return b->len;
}

static void state_corpus(void)
{
	static const struct { const char *name; int ncpus; enum how how; } cases[] = {
		{ "ok-1cpu", 1, WHOLE },
		{ "ok-2cpu", 2, WHOLE },
		{ "bad-vcpu-section-v1", 1, VCPU_V1 },
		{ "bad-unknown-section", 1, UNKNOWN_SECTION },
		{ "bad-missing-uart", 1, NO_UART },
		{ "bad-vcpu-repeated", 2, VCPU_TWICE },
		{ "bad-too-many-msrs", 1, TOO_MANY_MSRS },
		{ "bad-missing-pci", 1, NO_PCI },
		{ "bad-pci-queue-too-large", 1, BAD_QUEUE },
		{ "ok-platform", 1, PLATFORM },
		{ "bad-platform-slp-en", 1, BAD_PLATFORM },
	};
	struct ckpt_image *img = malloc(sizeof(*img));
	struct blob b = { malloc(1 << 20), 0, 0 };
	size_t len;

	if (!img || !b.buf)
		exit(1);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		plausible_image(img, cases[i].ncpus);
		len = build(&b, img, cases[i].how);
		put_file("state", cases[i].name, b.buf, len);
	}
	plausible_image(img, 1);
	len = build(&b, img, WHOLE);
	put_file("state", "bad-truncated", b.buf, len - 8);
	put_file("state", "bad-header-only", b.buf, PROTO_STATE_HDR_BYTES);
	put_file("state", "bad-empty", b.buf, 0);
	b.buf[len / 2] ^= 0x10;
	put_file("state", "bad-flipped-bit", b.buf, len);
	b.buf[len / 2] ^= 0x10;
	img->vcpus[0].mp_state.mp_state = 99; /* decodes, but KVM would refuse it */
	len = build(&b, img, WHOLE);
	put_file("state", "bad-impossible-mp-state", b.buf, len);
	free(b.buf);
	free(img);
}

/* ---- config ------------------------------------------------------------------ */

static void config_case(const char *name, uint64_t mem_mb, int ncpus, const char *guest,
			const char *args)
{
	struct machine_config cfg = { .mem_bytes = mem_mb << 20, .ncpus = ncpus };
	char buf[512];
	int n;

	snprintf(cfg.guest, sizeof(cfg.guest), "%s", guest);
	snprintf(cfg.guest_args, sizeof(cfg.guest_args), "%s", args);
	n = proto_config_encode(&cfg, buf, sizeof(buf));
	if (n < 0)
		exit(1);
	put_file("config", name, buf, (size_t)n);
}

static void config_corpus(void)
{
	/* 64 MiB, 1 vCPU, a guest name one byte longer than a machine_config holds */
	static const uint8_t long_guest[] = { 0x08, 0x80, 0x80, 0x80, 0x20, 0x10, 0x01, 0x1a, 0x20,
		'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a',
		'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a' };
	static const uint8_t garbage[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	static const char old_text[] = "mem=67108864;cpus=1;guest=counter;args=";

	config_case("ok-counter", 64, 1, "counter", "");
	config_case("ok-dirty-args", 256, 2, "dirty", "pages=1000,rate=50");
	config_case("ok-8cpu", 60 << 10, 8, "stress", "");
	config_case("bad-no-cpus", 64, 0, "counter", "");
	config_case("bad-9cpu", 64, 9, "counter", "");
	config_case("bad-mem-unaligned", 65, 1, "counter", "");
	config_case("bad-mem-small", 6, 1, "counter", "");
	config_case("bad-mem-huge", 61 << 10, 1, "counter", "");
	put_file("config", "bad-empty", "", 0);
	put_file("config", "bad-guest-too-long", long_guest, sizeof(long_guest));
	put_file("config", "bad-garbage", garbage, sizeof(garbage));
	put_file("config", "bad-old-text-format", old_text, sizeof(old_text) - 1);
}

/* ---- frames ------------------------------------------------------------------ */

static void frame_corpus(void)
{
	Understudy__Hello h = UNDERSTUDY__HELLO__INIT;
	struct machine_config cfg = { .mem_bytes = 64 << 20, .ncpus = 1, .guest = "counter" };
	struct proto_buf out;
	uint8_t hdr[PROTO_HDR_BYTES];
	char text[512];
	int n = proto_config_encode(&cfg, text, sizeof(text));

	proto_buf_init(&out);
	h.protocol_version = PROTO_VERSION;
	h.role = UNDERSTUDY__ROLE__ROLE_PRIMARY;
	h.config_digest64 = machine_config_digest(&cfg);
	h.capabilities = PROTO_CAPS_REQUIRED;
	if (n < 0 || proto_buf_append(&out, "\x05", 1) ||
	    proto_msg_pack(&out, PROTO_T_HELLO, &h.base) ||
	    repl_section_pack(&out, PROTO_SECTION_MACHINE_CONFIG, text, (size_t)n))
		exit(1);
	put_file("frame", "ok-hello-config", out.data, out.len);
	/* a retired type (3, once VcpuState) in a well-formed frame */
	proto_frame_header(hdr, 3, text, (uint32_t)n);
	proto_buf_reset(&out);
	if (proto_buf_append(&out, "\x00", 1) || proto_buf_append(&out, hdr, sizeof(hdr)) ||
	    proto_buf_append(&out, text, (size_t)n))
		exit(1);
	put_file("frame", "bad-retired-type", out.data, out.len);
	proto_buf_fini(&out);
}

/* ---- snapshot files --------------------------------------------------------- */

static uint8_t *slurp(const char *path, size_t *len)
{
	uint8_t *buf = malloc(1 << 20);
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (!buf || fd < 0 || (n = read(fd, buf, 1 << 20)) <= 0)
		exit(1);
	close(fd);
	*len = (size_t)n;
	return buf;
}

/* A diff snapshot of npages pages (gfns 1, 3, 5...) and a state blob, as
 * ckpt_file_write_ex() writes it, returned as bytes. With a disk: a full
 * snapshot of a 64 KiB machine with a disk of 4.125 blocks, blocks 1 and
 * 4 (the partial last one) in its "disk" section (--with-disk). With mac:
 * a VM with a NIC given that MAC. With kernel: a Linux guest booted from
 * it (an initrd and command line too), in the "config" section. */
static uint8_t *snapshot_bytes(size_t npages, bool disk, const uint8_t *mac, const char *kernel,
			       size_t *len)
{
	struct machine_config cfg = { .mem_bytes = disk ? 64 << 10 : 8 << 20, .ncpus = 1,
				      .guest = "counter", .ndisks = disk, .nnets = mac != NULL };
	struct ckpt_file_info info = { .id = 0x1122334455667788ull, .parent_id = disk ? 0 : 0x99 };
	uint64_t blocks[2] = { 1, 4 };
	uint8_t blockdata[2 * 4096];
	struct ckpt_disk d = { .disk_bytes = 4 * 4096 + 512, .n = 2, .cap = 2, .blocks = blocks,
			       .data = blockdata };
	struct ckpt_image *img = malloc(sizeof(*img));
	struct blob b = { malloc(1 << 20), 0, 0 };
	uint8_t page[CKPT_PAGE_SIZE];
	char path[4096];
	struct ckpt c;
	uint8_t *out;

	if (!img || !b.buf)
		exit(1);
	if (mac)
		memcpy(cfg.net_mac, mac, sizeof(cfg.net_mac));
	if (kernel) {
		strcpy(cfg.guest, MACHINE_LINUX_GUEST);
		snprintf(cfg.kernel, sizeof(cfg.kernel), "%s", kernel);
		strcpy(cfg.initrd, "/var/lib/understudy/initrd.img");
		strcpy(cfg.append, "console=ttyS0 quiet");
	}
	ckpt_init(&c);
	c.config_digest = machine_config_digest(&cfg);
	if (disk)
		npages = (64 << 10) / CKPT_PAGE_SIZE;
	c.full = disk;
	for (size_t i = 0; i < npages; i++) {
		memset(page, (int)(0x40 + i), sizeof(page));
		if (ckpt_add_page(&c, disk ? i : 2 * i + 1, page) < 0)
			exit(1);
	}
	memset(blockdata, 0x5e, 4096);
	memset(blockdata + 4096, 0, 4096);
	memset(blockdata + 4096, 0x61, 512);
	plausible_image(img, 1);
	if (ckpt_set_state(&c, b.buf, build(&b, img, WHOLE)) < 0)
		exit(1);
	snprintf(path, sizeof(path), "%s/snapshot/.tmp-snapshot", root);
	if (ckpt_file_write_disk(path, &c, &cfg, &info, disk ? &d : NULL) < 0)
		exit(1);
	out = slurp(path, len);
	unlink(path);
	ckpt_fini(&c);
	free(b.buf);
	free(img);
	return out;
}

static void snapshot_corpus(void)
{
	static const uint8_t mac[6] = { 0x02, 0x11, 0x22, 0x33, 0x44, 0x55 };
	static const uint8_t multicast[6] = { 0x03, 0x11, 0x22, 0x33, 0x44, 0x55 };
	/* version 2: the NIC's MAC and 2 bytes of padding before the CRC (in
	 * version 3 the "config" section's length) */
	size_t len, mac_at = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 4 + 8 + 32 + 256 + 8 + 8, hdr = mac_at + 8 + 4 + 4;
	uint32_t crc;
	uint8_t *f = snapshot_bytes(2, false, NULL, NULL, &len);

	put_file("snapshot", "ok-diff-2pages", f, len);
	put_file("snapshot", "bad-truncated", f, len - 1);
	put_file("snapshot", "bad-header-only", f, hdr);
	put_file("snapshot", "bad-empty", f, 0);
	f[0] ^= 1;                               /* magic */
	put_file("snapshot", "bad-magic", f, len);
	f[0] ^= 1;
	f[8] ^= 2;                               /* version */
	put_file("snapshot", "bad-version", f, len);
	f[8] ^= 2;
	f[60] ^= 1;                              /* guest name: header checksum */
	put_file("snapshot", "bad-header-crc", f, len);
	f[60] ^= 1;
	f[hdr + 24 + 16 + 24 + 100] ^= 1;        /* first page: section checksum */
	put_file("snapshot", "bad-page-crc", f, len);
	f[hdr + 24 + 16 + 24 + 100] ^= 1;
	f[len - 8] ^= 1;                         /* trailer file checksum */
	put_file("snapshot", "bad-trailer-crc", f, len);
	f[len - 8] ^= 1;
	f[hdr] = 'x';                            /* first section tag */
	put_file("snapshot", "bad-section-tag", f, len);
	free(f);
	f = snapshot_bytes(0, false, NULL, NULL, &len);
	put_file("snapshot", "ok-diff-no-pages", f, len);
	free(f);
	/* A NIC with a given MAC: recorded; a multicast one (no parser makes
	 * it) refused; another MAC with a valid header CRC: the digest says no. */
	f = snapshot_bytes(2, false, mac, NULL, &len);
	put_file("snapshot", "ok-diff-net-mac", f, len);
	f[mac_at + 5] ^= 0x10;
	crc = proto_crc32c(0, f, mac_at + 8);
	memcpy(f + mac_at + 8, &crc, 4);
	put_file("snapshot", "bad-net-mac-digest", f, len);
	put_file("snapshot", "bad-net-mac-header-cut", f, hdr - 2);   /* inside v2's tail */
	free(f);
	f = snapshot_bytes(2, false, multicast, NULL, &len);
	put_file("snapshot", "bad-net-mac-multicast", f, len);
	free(f);
	/* With the disk's contents: the section cut by one block (the length
	 * still whole blocks), a byte of a block flipped, a block named twice. */
	f = snapshot_bytes(0, true, NULL, NULL, &len);
	put_file("snapshot", "ok-full-disk", f, len);
	put_file("snapshot", "bad-disk-cut", f, len - 4104);
	f[len - 24 - 100] ^= 1;                  /* block 4's data */
	put_file("snapshot", "bad-disk-crc", f, len);
	f[len - 24 - 100] ^= 1;
	memcpy(f + len - 24 - 4104, f + len - 24 - 2 * 4104, 8);   /* block 4 -> 1 */
	put_file("snapshot", "bad-disk-order", f, len);
	free(f);
	/* A Linux guest's boot source in the "config" section (after gfns,
	 * pages and state): a byte of it flipped; the file called version 2
	 * (which has no section) with its header CRC made again. */
	f = snapshot_bytes(2, false, NULL, "/boot/vmlinuz-6.1.0-understudy", &len);
	put_file("snapshot", "ok-diff-linux-boot", f, len);
	{
		size_t at = hdr + 24 + 2 * 8 + 24 + 2 * 4096, cfg_len_at = mac_at + 6;
		uint64_t state_len;
		uint32_t two = 2;

		memcpy(&state_len, f + at + 8, 8);
		at += 24 + state_len;                /* the config section's header */
		f[at + 24 + 3] ^= 1;
		put_file("snapshot", "bad-config-crc", f, len);
		f[at + 24 + 3] ^= 1;
		put_file("snapshot", "bad-config-cut", f, at + 24 + 5);
		memcpy(f + 8, &two, 4);
		crc = proto_crc32c(0, f, cfg_len_at + 2);
		memcpy(f + cfg_len_at + 2, &crc, 4);
		put_file("snapshot", "bad-config-in-v2", f, len);
	}
	free(f);
}

/* ---- the secondary's stream --------------------------------------------------- */

static void hello(struct proto_buf *out, const struct machine_config *cfg)
{
	Understudy__Hello h = UNDERSTUDY__HELLO__INIT;

	h.protocol_version = PROTO_VERSION;
	h.role = UNDERSTUDY__ROLE__ROLE_PRIMARY;
	h.config_digest64 = machine_config_digest(cfg);
	h.capabilities = PROTO_CAPS_REQUIRED;
	h.heartbeat_ms = 100;
	h.timeout_ms = 1000;
	h.epoch_ms = 20;
	if (proto_msg_pack(out, PROTO_T_HELLO, &h.base))
		exit(1);
}

static void config(struct proto_buf *out, const struct machine_config *cfg)
{
	char text[512];
	int n = proto_config_encode(cfg, text, sizeof(text));

	if (n < 0 || repl_section_pack(out, PROTO_SECTION_MACHINE_CONFIG, text, (size_t)n))
		exit(1);
}

static void epoch_msg(struct proto_buf *out, uint16_t type, uint64_t epoch)
{
	Understudy__EpochBegin b = UNDERSTUDY__EPOCH_BEGIN__INIT;
	Understudy__EpochEnd e = UNDERSTUDY__EPOCH_END__INIT;

	b.epoch = e.epoch = epoch;
	if (proto_msg_pack(out, type, type == PROTO_T_EPOCH_BEGIN ? &b.base : &e.base))
		exit(1);
}

static void pages(struct proto_buf *out, uint64_t gfn0, size_t n)
{
	static uint8_t page[4][PROTO_PAGE_BYTES];
	struct proto_page_enc *e = proto_page_enc_new(0, PROTO_PAGE_NO_COMPRESS);
	const void *ptrs[4];
	uint64_t gfns[4];

	for (size_t i = 0; i < n; i++) {
		memset(page[i], (int)i, sizeof(page[i])); /* page 0 is all zero */
		page[i][7] = 0x5a;
		gfns[i] = gfn0 + i;
		ptrs[i] = page[i];
	}
	if (!e || proto_pages_encode(e, gfns, ptrs, n, out, NULL))
		exit(1);
	proto_page_enc_free(e);
}

static void section(struct proto_buf *out, const char *name, const void *data, size_t len)
{
	if (repl_section_pack(out, name, data, len))
		exit(1);
}

static void standby_corpus(void)
{
	struct machine_config cfg = { .mem_bytes = 64 << 20, .ncpus = 1, .guest = "counter" };
	struct machine_config other = cfg;
	uint8_t released[PROTO_META_U64_BYTES];
	struct proto_buf o;

	proto_buf_init(&o);
	proto_released_encode(5, released);
	hello(&o, &cfg);
	config(&o, &cfg);
	pages(&o, 0, 3);                         /* initial sync, straight in */
	epoch_msg(&o, PROTO_T_EPOCH_BEGIN, 1);
	pages(&o, 1, 2);
	section(&o, PROTO_SECTION_STATE, "state", 5);
	section(&o, PROTO_SECTION_CONSOLE, "hello\n", 6);
	section(&o, PROTO_SECTION_RELEASED, released, sizeof(released));
	epoch_msg(&o, PROTO_T_EPOCH_END, 1);
	put_file("standby", "ok-hello-config-sync-epoch", o.data, o.len);
	put_file("standby", "bad-cut-mid-frame", o.data, o.len - 3);
	epoch_msg(&o, PROTO_T_EPOCH_END, 1);
	put_file("standby", "bad-end-outside-epoch", o.data, o.len);

	proto_buf_reset(&o);
	hello(&o, &cfg);
	config(&o, &cfg);
	put_file("standby", "ok-hello-config", o.data, o.len);
	pages(&o, 63, 2);                        /* gfn 64: past the 64-page RAM */
	put_file("standby", "bad-page-beyond-ram", o.data, o.len);
	proto_buf_reset(&o);
	hello(&o, &cfg);
	config(&o, &cfg);
	epoch_msg(&o, PROTO_T_EPOCH_BEGIN, 2);
	put_file("standby", "bad-epoch-2-first", o.data, o.len);
	proto_buf_reset(&o);
	hello(&o, &cfg);
	config(&o, &cfg);
	epoch_msg(&o, PROTO_T_EPOCH_BEGIN, 1);
	section(&o, "hpet", "x", 1);
	put_file("standby", "bad-unknown-section", o.data, o.len);
	proto_buf_reset(&o);
	hello(&o, &cfg);
	config(&o, &cfg);
	section(&o, PROTO_SECTION_CONSOLE, "x", 1);
	put_file("standby", "bad-section-outside-epoch", o.data, o.len);
	proto_buf_reset(&o);
	hello(&o, &cfg);
	config(&o, &cfg);
	epoch_msg(&o, PROTO_T_EPOCH_BEGIN, 1);
	section(&o, PROTO_SECTION_RELEASED, released, 3);
	put_file("standby", "bad-released-short", o.data, o.len);

	proto_buf_reset(&o);
	pages(&o, 0, 1);
	put_file("standby", "bad-pages-before-hello", o.data, o.len);
	proto_buf_reset(&o);
	hello(&o, &cfg);
	hello(&o, &cfg);
	put_file("standby", "bad-hello-twice", o.data, o.len);
	proto_buf_reset(&o);
	hello(&o, &cfg);
	epoch_msg(&o, PROTO_T_EPOCH_BEGIN, 1);
	put_file("standby", "bad-epoch-before-config", o.data, o.len);
	proto_buf_reset(&o);
	other.ncpus = 2;
	hello(&o, &cfg);
	config(&o, &other);
	put_file("standby", "bad-config-digest", o.data, o.len);
	proto_buf_reset(&o);
	put_file("standby", "ok-empty", o.data, 0);
	proto_buf_fini(&o);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	root = argv[1];
	state_corpus();
	config_corpus();
	frame_corpus();
	snapshot_corpus();
	standby_corpus();
	return 0;
}
