/* checkpoint/: snapshot files and incremental chains on real KVM: a chain
 * of diffs equals a full capture, a snapshot file restores a machine that
 * answers as the original, a damaged or truncated file is refused with
 * nothing read, a full disk leaves the old snapshot intact. A NIC's given
 * MAC goes through the file (version 2); version 1 files still read, the
 * one case they could not hold (a given MAC) refused.
 * Seeded tests print their seed; CKPT_SEED=N replays one. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint/checkpoint.h"
#include "tests/harness.h"
#include "proto/proto.h"

/* ---- incremental chain: base + diffs == full capture ------------------------ */

static void compare_vcpu(const struct kvm_vcpu_state *x, const struct kvm_vcpu_state *y)
{
	assert_memory_equal(&x->regs, &y->regs, sizeof(x->regs));
	assert_int_equal(x->sregs.cr0, y->sregs.cr0);
	assert_int_equal(x->sregs.cr3, y->sregs.cr3);
	assert_int_equal(x->sregs.cr4, y->sregs.cr4);
	assert_int_equal(x->sregs.efer, y->sregs.efer);
	assert_memory_equal(&x->sregs.cs, &y->sregs.cs, sizeof(x->sregs.cs));
	assert_int_equal(x->xsave_size, y->xsave_size);
	/* legacy region + header + AVX: what the guests use */
	assert_memory_equal(x->xsave + 160, y->xsave + 160, 256);
	assert_memory_equal(x->xsave + 576, y->xsave + 576, 256);
	assert_int_equal(x->mp_state.mp_state, y->mp_state.mp_state);
}

static void incremental_chain(void **state)
{
	unsigned seed = th_ckpt_seed("incremental_chain");
	struct machine_config cfg = th_config("dirty", "mb=8,report_ms=1000", 16, 1);
	enum { NDIFFS = 6 };
	struct ckpt chain[NDIFFS + 1], full;
	struct kvm_vcpu_state *sa = malloc(sizeof(*sa)), *sb = malloc(sizeof(*sb));
	struct th_vmh *a, *b;
	size_t total = 0;

	(void)state;
	srand(seed);
	a = th_vmh_new(&cfg, true);
	machine_resume(a->m);
	th_sleep_us(20000);
	for (int i = 0; i <= NDIFFS; i++) {
		ckpt_init(&chain[i]);
		if (i)
			th_sleep_us(1000 + (unsigned)(rand() % 15000));
		if (i < NDIFFS)
			assert_int_equal(ckpt_take(a->m, &chain[i], i == 0), 0);
		total += chain[i].npages;
	}
	/* The last diff and a full capture at the same moment. */
	ckpt_init(&full);
	machine_pause(a->m);
	assert_int_equal(ckpt_capture(a->m, &chain[NDIFFS], false), 0);
	assert_int_equal(ckpt_capture(a->m, &full, true), 0);
	assert_true(chain[NDIFFS].npages > 0);
	printf("incremental_chain: base %zu pages, diffs %zu pages in all\n", chain[0].npages,
	       total + chain[NDIFFS].npages - chain[0].npages);

	b = th_vmh_new(&cfg, false);
	for (int i = 0; i <= NDIFFS; i++)
		assert_int_equal(ckpt_apply(b->m, &chain[i]), 0);
	assert_int_equal(full.npages, b->m->ram_pages);
	for (size_t i = 0; i < full.npages; i++) {
		int64_t p = machine_gfn_page(b->m, full.gfns[i]);

		assert_true(p >= 0);
		if (memcmp(machine_page_hva(b->m, (uint64_t)p), full.pages + i * CKPT_PAGE_SIZE,
			   CKPT_PAGE_SIZE))
			fail_msg("page gfn 0x%llx differs after base + %d diffs",
				 (unsigned long long)full.gfns[i], NDIFFS);
	}
	assert_memory_equal(b->m->ram, a->m->ram, a->m->ram_pages * KVM_PAGE_SIZE);
	assert_int_equal(machine_get_vcpu_state(a->m, 0, sa), 0);
	assert_int_equal(machine_get_vcpu_state(b->m, 0, sb), 0);
	compare_vcpu(sa, sb);
	/* and the restored guest runs on */
	machine_resume(b->m);
	assert_true(th_vmh_wait_lines(b, 1, 10000));
	assert_non_null(strstr(b->out, "pages "));
	th_vmh_free(b);
	th_vmh_free(a);
	for (int i = 0; i <= NDIFFS; i++)
		ckpt_fini(&chain[i]);
	ckpt_fini(&full);
	free(sa);
	free(sb);
}

/* ---- snapshot files ------------------------------------------------------------ */

static void corrupt_at(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0x01;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

/* A counter VM on cfg, running, asked `requests` (nlines replies waited
 * for), taken into *c, written to path and read back into *r and *rcfg.
 * Returns the VM, left running. */
static struct th_vmh *snap_to_file(const struct machine_config *cfg, const char *requests,
				   int nlines, const char *path, struct ckpt *c, struct ckpt *r,
				   struct machine_config *rcfg)
{
	struct th_vmh *a = th_vmh_new(cfg, true);

	machine_resume(a->m);
	th_vmh_send(a, requests);
	assert_true(th_vmh_wait_lines(a, nlines, 5000));
	ckpt_init(c);
	ckpt_init(r);
	assert_int_equal(ckpt_take(a->m, c, true), 0);
	assert_int_equal(ckpt_file_write(path, c, cfg), 0);
	assert_int_equal(ckpt_file_read(path, r, rcfg), 0);
	return a;
}

static void files(void **state)
{
	struct machine_config cfg = th_config("counter", "area_mb=1", 16, 1), rcfg;
	char dir[] = "/tmp/ckpt-test-XXXXXX", path[64], bad[64];
	struct ckpt c, r;
	struct th_vmh *a, *b;
	struct stat st;
	char cmd[600];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/snap", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	a = snap_to_file(&cfg, "incr\nincr\n", 2, path, &c, &r, &rcfg);
	assert_int_equal(rcfg.mem_bytes, cfg.mem_bytes);
	assert_string_equal(rcfg.guest_args, cfg.guest_args);
	assert_int_equal(rcfg.nnets, 0);
	assert_int_equal(r.npages, c.npages);
	assert_memory_equal(r.pages, c.pages, c.npages * CKPT_PAGE_SIZE);
	assert_memory_equal(r.state, c.state, c.state_len);

	/* restored from the file, it answers as the original would */
	b = th_vmh_new(&rcfg, false);
	assert_int_equal(ckpt_apply(b->m, &r), 0);
	machine_resume(b->m);
	th_vmh_send(b, "get\n");
	assert_true(th_vmh_wait_lines(b, 1, 5000));
	assert_int_equal(strncmp(b->out, "2 ", 2), 0);
	th_vmh_free(b);

	/* damaged anywhere: a clear error, nothing read */
	assert_int_equal(stat(path, &st), 0);
	{
		off_t offs[40] = { 3, 100, 500, st.st_size / 2, st.st_size - 100, st.st_size - 4 };
		unsigned seed = th_ckpt_seed("files flips");

		srand(seed);
		for (size_t i = 6; i < 40; i++)   /* the first 4 KiB (headers, gfns) and anywhere */
			offs[i] = i % 2 ? rand() % 4096 : (off_t)(((uint64_t)rand() << 16 ^ (uint64_t)rand()) %
								  (uint64_t)st.st_size);
		for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
			snprintf(cmd, sizeof(cmd), "cp %s %s", path, bad);
			assert_int_equal(system(cmd), 0);
			corrupt_at(bad, offs[i]);
			/* -EBADMSG, or -EPROTONOSUPPORT when the flip hits the version field */
			if (ckpt_file_read(bad, &r, &rcfg) >= 0)
				fail_msg("a flipped bit at offset %lld was not noticed", (long long)offs[i]);
			assert_int_equal(r.npages, 0);
		}
	}
	snprintf(cmd, sizeof(cmd), "cp %s %s && truncate -s -4096 %s", path, bad, bad);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(ckpt_file_read(bad, &r, &rcfg), -EBADMSG);

	ckpt_fini(&c);
	ckpt_fini(&r);
	th_vmh_free(a);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

static uint8_t *slurp(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(read(fd, buf, (size_t)st.st_size), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void spill(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* The trailer of the file f (len bytes, a header of hdr bytes, then nsec
 * sections) made again: its length and the file CRC over the header and
 * each section header. */
static void retrail(uint8_t *f, size_t len, size_t hdr, int nsec)
{
	enum { SEC = 24 };
	uint32_t crc = proto_crc32c(0, f, hdr);
	uint64_t sec_len, file_len = len;
	size_t off = hdr;

	for (int i = 0; i < nsec; i++) {
		memcpy(&sec_len, f + off + 8, 8);
		crc = proto_crc32c(crc, f + off, SEC);
		off += SEC + sec_len;
	}
	assert_int_equal(off + 24, len);
	memcpy(f + off + 8, &file_len, 8);
	memcpy(f + off + 16, &crc, 4);
}

/* Where the sections of a version 3 file start, and its "config" section
 * (the fourth, after gfns, pages and state): the offset of its header. */
enum { V3_HDR = 376, CONFIG_LEN_AT = 366, HDR_CRC_AT = 368 };
static size_t config_at(const uint8_t *f)
{
	size_t off = V3_HDR;
	uint64_t sec_len;

	for (int i = 0; i < 3; i++) {
		memcpy(&sec_len, f + off + 8, 8);
		off += 24 + sec_len;
	}
	assert_memory_equal(f + off, "config\0\0", 8);
	return off;
}

/* f (*len bytes, version 3) as the version 2 writer wrote the same
 * snapshot: no "config" section, config_len 0 (it was padding), version 2;
 * the header CRC and the trailer made again. */
static void to_version_2(uint8_t *f, size_t *len)
{
	uint32_t two = 2, crc;
	size_t at = config_at(f), sec;
	uint64_t sec_len;

	memcpy(&sec_len, f + at + 8, 8);
	sec = 24 + (size_t)sec_len;
	memmove(f + at, f + at + sec, *len - at - sec);
	*len -= sec;
	memcpy(f + 8, &two, 4);
	memset(f + CONFIG_LEN_AT, 0, 2);
	crc = proto_crc32c(0, f, HDR_CRC_AT);
	memcpy(f + HDR_CRC_AT, &crc, 4);
	retrail(f, *len, V3_HDR, 3);
}

/* The version 3 file at from, written at to as the version 1 writer wrote
 * the same snapshot: version 2's (above), then the header without its 8
 * MAC bytes (they sat at 360, version 1's CRC there), its CRC, the
 * trailer's length and file CRC (over the header and the three section
 * headers) made again. */
static void to_version_1(const char *from, const char *to)
{
	enum { MAC_AT = 360, V1_HDR = 368 };
	uint32_t one = 1, hdr_len = V1_HDR, crc;
	size_t len;
	uint8_t *f = slurp(from, &len);

	to_version_2(f, &len);
	memmove(f + MAC_AT, f + MAC_AT + 8, len - MAC_AT - 8);
	len -= 8;
	memcpy(f + 8, &one, 4);
	memcpy(f + 12, &hdr_len, 4);
	crc = proto_crc32c(0, f, MAC_AT);
	memcpy(f + MAC_AT, &crc, 4);
	retrail(f, len, V1_HDR, 3);
	spill(to, f, len);
	free(f);
}

/* A snapshot of a VM with a NIC (given mac, or derived: NULL), written
 * without a machine: three pages of a 16 MiB VM and a state blob. */
static void write_net_snapshot(const char *path, const uint8_t *mac, struct ckpt *c)
{
	struct machine_config cfg = th_config("counter", "area_mb=1", 16, 1);
	uint8_t page[CKPT_PAGE_SIZE];

	cfg.nnets = 1;
	if (mac)
		memcpy(cfg.net_mac, mac, 6);
	ckpt_reset(c);
	for (int i = 0; i < 3; i++) {
		memset(page, 0x30 + i, sizeof(page));
		assert_int_equal(ckpt_add_page(c, 5 + 7 * (uint64_t)i, page), 0);
	}
	assert_int_equal(ckpt_set_state(c, "state of the machine", 20), 0);
	c->config_digest = machine_config_digest(&cfg);
	assert_int_equal(ckpt_file_write(path, c, &cfg), 0);
}

/* The file format of a NIC's MAC (no machine: runs without /dev/kvm). A
 * given MAC is in the file and comes back with the configuration; a file
 * cut anywhere in or after the header is refused as damaged, nothing read.
 * Version 1 files: one of a NIC with the derived MAC still reads, one of a
 * given MAC (not recorded then: the digest disagrees) is refused. */
static void file_net_mac(void **state)
{
	static const uint8_t mac[6] = { 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee }, zero[6];
	char dir[] = "/tmp/ckpt-mac-XXXXXX", path[64], bad[64], cmd[200];
	struct machine_config rcfg;
	struct ckpt c, r;
	size_t len;
	uint8_t *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/snap", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	ckpt_init(&c);
	ckpt_init(&r);
	write_net_snapshot(path, mac, &c);
	assert_int_equal(ckpt_file_read(path, &r, &rcfg), 0);
	assert_int_equal(rcfg.nnets, 1);
	assert_memory_equal(rcfg.net_mac, mac, 6);
	assert_int_equal(machine_config_digest(&rcfg), c.config_digest);
	assert_int_equal(r.npages, 3);
	assert_memory_equal(r.pages, c.pages, 3 * CKPT_PAGE_SIZE);
	assert_memory_equal(r.state, c.state, c.state_len);

	/* cut: in version 1's part, at its end, in the MAC, right after the
	 * header, in the sections, one byte short */
	f = slurp(path, &len);
	{
		size_t cuts[] = { 0, 7, 100, 367, 368, 372, 375, 376, 400, len / 2, len - 1 };

		for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
			spill(bad, f, cuts[i]);
			if (ckpt_file_read(bad, &r, &rcfg) != -EBADMSG)
				fail_msg("a file cut to %zu of %zu bytes was not refused as damaged",
					 cuts[i], len);
			assert_int_equal(r.npages, 0);
		}
	}
	free(f);
	/* the MAC's bytes are under the header's checksum */
	f = slurp(path, &len);
	spill(bad, f, len);
	free(f);
	corrupt_at(bad, 362);
	assert_int_equal(ckpt_file_read(bad, &r, &rcfg), -EBADMSG);

	/* version 1: a given MAC was not in the file, the digest covers it */
	to_version_1(path, bad);
	assert_int_equal(ckpt_file_read(bad, &r, &rcfg), -EBADMSG);
	assert_int_equal(r.npages, 0);
	/* ... the derived MAC needed none: such a file reads as it always did */
	write_net_snapshot(path, NULL, &c);
	to_version_1(path, bad);
	assert_int_equal(ckpt_file_read(bad, &r, &rcfg), 0);
	assert_int_equal(rcfg.nnets, 1);
	assert_memory_equal(rcfg.net_mac, zero, 6);
	assert_int_equal(r.npages, 3);
	assert_memory_equal(r.pages, c.pages, 3 * CKPT_PAGE_SIZE);
	/* ... and a version 1 header is checked as version 2's is */
	corrupt_at(bad, 60);
	assert_int_equal(ckpt_file_read(bad, &r, &rcfg), -EBADMSG);
	corrupt_at(bad, 60);
	corrupt_at(bad, 8);   /* version 1 -> 0 */
	assert_int_equal(ckpt_file_read(bad, &r, &rcfg), -EPROTONOSUPPORT);
	assert_int_equal(r.npages, 0);

	ckpt_fini(&c);
	ckpt_fini(&r);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* A snapshot of a Linux guest (kernel, initrd, command line), written
 * without a machine: two pages of a 16 MiB VM and a state blob. */
static void write_linux_snapshot(const char *path, struct ckpt *c, struct machine_config *cfg)
{
	uint8_t page[CKPT_PAGE_SIZE];

	memset(cfg, 0, sizeof(*cfg));
	cfg->mem_bytes = 16 << 20;
	cfg->ncpus = 2;
	strcpy(cfg->guest, MACHINE_LINUX_GUEST);
	strcpy(cfg->kernel, "/boot/vmlinuz-6.1.0-test");
	strcpy(cfg->initrd, "/var/lib/ut/initrd.img");
	strcpy(cfg->append, "console=ttyS0 quiet ut.mode=shell");
	cfg->ndisks = 1;
	cfg->disk_bytes = 64 << 20;
	ckpt_reset(c);
	for (int i = 0; i < 2; i++) {
		memset(page, 0x50 + i, sizeof(page));
		assert_int_equal(ckpt_add_page(c, 9 + (uint64_t)i, page), 0);
	}
	assert_int_equal(ckpt_set_state(c, "state of the machine", 20), 0);
	c->config_digest = machine_config_digest(cfg);
	assert_int_equal(ckpt_file_write(path, c, cfg), 0);
}

/* The "config" section (version 3, no machine: runs without /dev/kvm): a
 * Linux guest's kernel, initrd and command line come back with the
 * configuration; a file cut at every byte from the section's header to
 * the end, or with any byte of the section flipped, is refused as damaged
 * with nothing read; a section that unpacks but disagrees with the header
 * (or a kernel for a built-in guest) is refused; a version 2 file (no
 * section) reads with no boot source, a version 3 header without one (or
 * a version 2 header that claims one) is refused. */
static void file_config(void **state)
{
	char dir[] = "/tmp/ckpt-config-XXXXXX", path[64], bad[64], cmd[200];
	struct machine_config cfg, rcfg, other;
	uint8_t buf[PROTO_CONFIG_MAX_BYTES];
	struct ckpt c, r;
	size_t len, at, n = 0;
	uint8_t *f;
	int enc;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/snap", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	ckpt_init(&c);
	ckpt_init(&r);
	write_linux_snapshot(path, &c, &cfg);
	assert_int_equal(ckpt_file_read(path, &r, &rcfg), 0);
	assert_string_equal(rcfg.kernel, cfg.kernel);
	assert_string_equal(rcfg.initrd, cfg.initrd);
	assert_string_equal(rcfg.append, cfg.append);
	assert_string_equal(rcfg.guest, MACHINE_LINUX_GUEST);
	assert_int_equal(rcfg.ncpus, 2);
	assert_int_equal(r.npages, 2);

	f = slurp(path, &len);
	at = config_at(f);
	/* cut at every byte from the section's header on */
	for (size_t cut = at; cut < len; cut++, n++) {
		spill(bad, f, cut);
		if (ckpt_file_read(bad, &r, &rcfg) != -EBADMSG)
			fail_msg("a file cut to %zu of %zu bytes (the config section at %zu) was "
				 "not refused as damaged", cut, len, at);
		assert_int_equal(r.npages, 0);
	}
	/* any byte of the section (header or data) flipped */
	for (size_t i = at; i < len - 24; i++, n++) {
		f[i] ^= 0x20;
		spill(bad, f, len);
		f[i] ^= 0x20;
		if (ckpt_file_read(bad, &r, &rcfg) >= 0)
			fail_msg("a file with byte %zu (the config section at %zu) flipped was read", i,
				 at);
		assert_int_equal(r.npages, 0);
	}
	/* the header's config_len: 0 in version 3 (with its CRC made again) */
	{
		uint16_t zero = 0;
		uint32_t crc;
		uint8_t *g = malloc(len);

		assert_non_null(g);
		memcpy(g, f, len);
		memcpy(g + CONFIG_LEN_AT, &zero, 2);
		crc = proto_crc32c(0, g, HDR_CRC_AT);
		memcpy(g + HDR_CRC_AT, &crc, 4);
		spill(bad, g, len);
		assert_int_equal(ckpt_file_read(bad, &r, &rcfg), -EBADMSG);
		free(g);
	}
	printf("file_config: %zu damaged files refused (config section of %zu bytes at %zu)\n",
	       n + 1, len - 24 - at, at);

	/* version 2: no section, no boot source, read as before */
	to_version_2(f, &len);
	spill(bad, f, len);
	assert_int_equal(ckpt_file_read(bad, &r, &rcfg), 0);
	assert_string_equal(rcfg.kernel, "");
	assert_string_equal(rcfg.initrd, "");
	assert_string_equal(rcfg.append, "");
	assert_string_equal(rcfg.guest, MACHINE_LINUX_GUEST);
	assert_int_equal(r.npages, 2);
	/* ... and a version 2 header that claims a section is refused */
	{
		uint16_t some = 40;
		uint32_t crc;

		memcpy(f + CONFIG_LEN_AT, &some, 2);
		crc = proto_crc32c(0, f, HDR_CRC_AT);
		memcpy(f + HDR_CRC_AT, &crc, 4);
		spill(bad, f, len);
		assert_int_equal(ckpt_file_read(bad, &r, &rcfg), -EBADMSG);
	}
	free(f);

	/* the section's meaning, checked against the header's configuration */
	rcfg = cfg;
	rcfg.kernel[0] = rcfg.initrd[0] = rcfg.append[0] = 0;
	enc = ckpt_file_config_encode(&cfg, buf, sizeof(buf));
	assert_true(enc > 0);
	assert_int_equal(ckpt_file_config_decode(buf, (size_t)enc, &rcfg), 0);
	assert_string_equal(rcfg.kernel, cfg.kernel);
	other = cfg;
	other.ncpus = 1;
	assert_int_equal(ckpt_file_config_decode(buf, (size_t)enc, &other), -EBADMSG);
	other = cfg;
	other.mem_bytes = 32 << 20;
	assert_int_equal(ckpt_file_config_decode(buf, (size_t)enc, &other), -EBADMSG);
	other = cfg;
	strcpy(other.guest, "counter");
	assert_int_equal(ckpt_file_config_decode(buf, (size_t)enc, &other), -EBADMSG);
	other = cfg;
	strcpy(other.guest, "counter");
	enc = ckpt_file_config_encode(&other, buf, sizeof(buf));   /* a kernel, guest counter */
	assert_int_equal(ckpt_file_config_decode(buf, (size_t)enc, &other), -EBADMSG);
	other.kernel[0] = 0;                                        /* an initrd without kernel */
	enc = ckpt_file_config_encode(&other, buf, sizeof(buf));
	assert_int_equal(ckpt_file_config_decode(buf, (size_t)enc, &other), -EBADMSG);
	memset(buf, 0xff, 64);                                      /* not a message */
	assert_int_equal(ckpt_file_config_decode(buf, 64, &cfg), -EBADMSG);

	ckpt_fini(&c);
	ckpt_fini(&r);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* On KVM: a VM whose NIC was given a MAC, snapshotted; the machine built
 * from the file's configuration presents that MAC and answers as the
 * original would. */
static void files_net_mac(void **state)
{
	static const uint8_t mac[6] = { 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee };
	struct machine_config cfg = th_config("counter", "area_mb=1", 16, 1), rcfg;
	char dir[] = "/tmp/ckpt-mac-XXXXXX", path[64];
	uint8_t got[6];
	struct ckpt c, r;
	struct th_vmh *a, *b;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/snap", dir);
	cfg.nnets = 1;
	memcpy(cfg.net_mac, mac, 6);
	a = snap_to_file(&cfg, "incr\n", 1, path, &c, &r, &rcfg);
	assert_memory_equal(rcfg.net_mac, mac, 6);
	b = th_vmh_new(&rcfg, false);
	machine_net_mac(&b->m->cfg, got);
	assert_memory_equal(got, mac, 6);
	assert_int_equal(ckpt_apply(b->m, &r), 0);
	machine_resume(b->m);
	th_vmh_send(b, "get\n");
	assert_true(th_vmh_wait_lines(b, 1, 5000));
	assert_int_equal(strncmp(b->out, "1 ", 2), 0);
	th_vmh_free(b);
	th_vmh_free(a);
	ckpt_fini(&c);
	ckpt_fini(&r);
	unlink(path);
	rmdir(dir);
}

/* ENOSPC: a small tmpfs that holds one snapshot and not two. A failed write
 * (new name or replacing the old file) leaves the old snapshot as it was,
 * told apart from the new one by its contents; with space the new one is
 * complete. The tmpfs is mounted in a private mount namespace of this thread
 * (as root), so nothing outlives the test. */
static void files_enospc(void **state)
{
	struct machine_config cfg = th_config("counter", "area_mb=1", 16, 1), rcfg;
	char dir[] = "/tmp/ckpt-enospc-XXXXXX", small[100], second[100], cmd[200];
	struct ckpt c, c2, r;
	struct th_vmh *a;
	struct stat st;

	(void)state;
	if (geteuid() != 0) {
		printf("SKIP files_enospc: mounting a small tmpfs needs root (uid %u)\n", getuid());
		skip();
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		printf("SKIP files_enospc: no private mount namespace: %s\n", strerror(errno));
		skip();
	}
	assert_non_null(mkdtemp(dir));
	if (mount("tmpfs", dir, "tmpfs", 0, "size=20m") < 0) {
		printf("SKIP files_enospc: cannot mount a tmpfs: %s\n", strerror(errno));
		rmdir(dir);
		skip();
	}
	snprintf(small, sizeof(small), "%s/snap", dir);
	snprintf(second, sizeof(second), "%s/snap2", dir);
	a = th_vmh_new(&cfg, true);
	machine_resume(a->m);
	ckpt_init(&c);
	ckpt_init(&c2);
	ckpt_init(&r);
	th_vmh_send(a, "incr\n");
	assert_true(th_vmh_wait_lines(a, 1, 5000));
	assert_int_equal(ckpt_take(a->m, &c, true), 0);
	th_vmh_send(a, "incr\n");
	assert_true(th_vmh_wait_lines(a, 2, 5000));
	assert_int_equal(ckpt_take(a->m, &c2, true), 0);
	/* two different checkpoints of the same size */
	assert_int_equal(c.npages, c2.npages);
	assert_true(memcmp(c.pages, c2.pages, c.npages * CKPT_PAGE_SIZE) != 0);

	assert_int_equal(ckpt_file_write(small, &c, &cfg), 0);
	assert_int_equal(ckpt_file_write(second, &c2, &cfg), -ENOSPC);
	assert_int_equal(stat(second, &st), -1);                     /* nothing at the name */
	assert_int_equal(ckpt_file_write(small, &c2, &cfg), -ENOSPC); /* replacing it neither */
	assert_int_equal(ckpt_file_read(small, &r, &rcfg), 0);       /* the old one, intact */
	assert_int_equal(r.npages, c.npages);
	assert_memory_equal(r.pages, c.pages, c.npages * CKPT_PAGE_SIZE);
	assert_memory_equal(r.state, c.state, c.state_len);
	snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) = 1", dir);
	assert_int_equal(system(cmd), 0);                            /* no temporary left */
	unlink(small);
	assert_int_equal(ckpt_file_write(second, &c2, &cfg), 0);     /* with space: complete */
	assert_int_equal(ckpt_file_read(second, &r, &rcfg), 0);
	assert_int_equal(r.npages, c2.npages);
	assert_memory_equal(r.pages, c2.pages, c2.npages * CKPT_PAGE_SIZE);
	assert_memory_equal(r.state, c2.state, c2.state_len);
	printf("files_enospc: 20 MiB tmpfs, snapshots of %zu pages: second write ENOSPC, old one "
	       "intact by contents, new one complete once there is space\n", c.npages);
	umount2(dir, MNT_DETACH);
	rmdir(dir);
	ckpt_fini(&c);
	ckpt_fini(&c2);
	ckpt_fini(&r);
	th_vmh_free(a);
}

int main(void)
{
	const struct CMUnitTest file_tests[] = {
		cmocka_unit_test(file_net_mac),
		cmocka_unit_test(file_config),
	};
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(files),
		cmocka_unit_test(files_net_mac),
		cmocka_unit_test(files_enospc),
		cmocka_unit_test(incremental_chain),
	};

	int r;

	log_set_level(LOG_WARN);
	if ((r = cmocka_run_group_tests(file_tests, NULL, NULL)))
		return r;
	if (access("/dev/kvm", R_OK | W_OK) != 0) {
		printf("SKIP test_snapshot (the tests on a machine): /dev/kvm not usable\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
