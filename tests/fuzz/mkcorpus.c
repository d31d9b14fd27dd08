/* Writes the generated part of the fuzz corpora (make fuzz-corpus):
 * state/ and config/ entirely, and the frame/ files named below. Each file
 * is named for the verdict its target must give (ok-* accepted, bad-*
 * rejected); replay.c asserts it. The other frame/ and pages/ files were
 * made by hand and are kept as they are. Usage: mkcorpus CORPUS_DIR */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A blob of img's sections, the vcpu ones changed by how. */
enum how { WHOLE, VCPU_V1, UNKNOWN_SECTION, NO_UART, VCPU_TWICE, TOO_MANY_MSRS };

static size_t build(struct blob *b, const struct ckpt_image *img, enum how how)
{
	static uint8_t data[PROTO_UART_STATE_BYTES + sizeof(struct kvm_vcpu_state) * 2];

	b->len = PROTO_STATE_HDR_BYTES;
	b->n = 0;
	for (int i = 0; i < img->ncpus; i++) {
		size_t n = proto_vcpu_state_encode(&img->vcpus[i], data);

		if (how == TOO_MANY_MSRS)
			data[529] = KVM_MAX_MSRS + 1;
		blob_add(b, PROTO_STATE_VCPU, how == VCPU_V1 ? 1 : PROTO_STATE_VCPU_VERSION,
			 how == VCPU_TWICE ? 0 : (uint32_t)i, data, n);
	}
	proto_vm_state_encode(&img->ms.vm, data);
	blob_add(b, PROTO_STATE_VM, PROTO_STATE_VM_VERSION, 0, data, PROTO_VM_STATE_BYTES);
	proto_uart_state_encode(&img->ms.uart, data);
	if (how != NO_UART)
		blob_add(b, how == UNKNOWN_SECTION ? "hpet" : PROTO_STATE_UART,
			 PROTO_STATE_UART_VERSION, 0, data, PROTO_UART_STATE_BYTES);
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
	n = repl_config_encode(&cfg, buf, sizeof(buf));
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
	int n = repl_config_encode(&cfg, text, sizeof(text));

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
	return 0;
}
