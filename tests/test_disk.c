/* Disk replication's pieces (replication/disk.c, the disk side of
 * machine/virtio_blk.c): a "disk" Section's encode/decode round trip and
 * digest; truncated, corrupt or impossible sections refused whole; the
 * dirty-block bitmap of a real machine's virtio-blk (a guest write marks
 * exactly its blocks, a replicated write none), the capture in the pause,
 * requeue, the initial sync's passes (holes and zero blocks skipped, a
 * dirty round sends zero blocks too), the standby image's preparation; a
 * snapshot file with the disk's contents (checkpoint/file.c): written,
 * read, restored to an image equal to the source, refused whole when cut
 * or corrupt with the target image untouched. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "checkpoint/checkpoint.h"
#include "machine/virtio.h"
#include "replication/disk.h"
#include "primary/primary_int.h"
#include "secondary/secondary_int.h"
#include "tests/harness.h"

#define BLK MACHINE_DISK_BLOCK
#define NBLOCKS 64

/* ---- sections, no KVM --------------------------------------------------------- */

/* n blocks: zero, random (raw), compressible (lz4), by turns. */
static void make_blocks(uint64_t *blocks, uint8_t *data, size_t n, unsigned seed)
{
	srand(seed);
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = data + i * BLK;

		blocks[i] = (i * 7 + 3) % NBLOCKS;
		if (i % 3 == 0)
			memset(p, 0, BLK);
		else if (i % 3 == 1)
			for (size_t k = 0; k < BLK; k++)
				p[k] = (uint8_t)rand();
		else
			for (size_t k = 0; k < BLK; k++)
				p[k] = (uint8_t)(k / 512 + i);
	}
}

/* Encodes n blocks into out (the data of one "disk" Section); their digest in *crc. */
static void encode(const uint64_t *blocks, const uint8_t *data, size_t n, struct proto_buf *out,
		   uint32_t *crc)
{
	struct proto_page_enc *e = proto_page_enc_new(0, 0);
	const void *ptrs[NBLOCKS];

	assert_non_null(e);
	*crc = 0;
	for (size_t i = 0; i < n; i++) {
		ptrs[i] = data + i * BLK;
		*crc = proto_digest_page(*crc, blocks[i], ptrs[i]);
	}
	assert_int_equal(proto_blocks_encode(e, blocks, ptrs, n, out, NULL), 0);
	proto_page_enc_free(e);
}

static void test_roundtrip(void **state)
{
	uint64_t blocks[12];
	uint8_t *data = malloc(12 * BLK);
	struct repl_disk_blocks b;
	struct proto_buf out;
	uint32_t want, crc = 0;

	(void)state;
	assert_non_null(data);
	make_blocks(blocks, data, 12, 1);
	proto_buf_init(&out);
	encode(blocks, data, 12, &out, &want);
	/* Zero blocks take a few bytes, compressible ones less than a block. */
	assert_true(out.len < 12 * BLK);
	repl_disk_blocks_init(&b);
	assert_int_equal(repl_disk_stage(&b, NBLOCKS, out.data, out.len, &crc), 0);
	assert_int_equal(b.n, 12);
	assert_int_equal(crc, want);
	for (size_t i = 0; i < 12; i++) {
		assert_int_equal(b.blocks[i], blocks[i]);
		assert_memory_equal(b.data + i * BLK, data + i * BLK, BLK);
	}
	repl_disk_blocks_fini(&b);
	proto_buf_fini(&out);
	free(data);
}

static void test_bad_sections(void **state)
{
	uint64_t blocks[6];
	uint8_t *data = malloc(6 * BLK);
	struct repl_disk_blocks b;
	struct proto_buf out;
	uint32_t want, crc = 0;
	uint8_t *copy;

	(void)state;
	assert_non_null(data);
	make_blocks(blocks, data, 6, 2);
	proto_buf_init(&out);
	encode(blocks, data, 6, &out, &want);
	copy = malloc(out.len);
	assert_non_null(copy);
	repl_disk_blocks_init(&b);
	/* Truncated anywhere: nothing staged, the digest untouched. */
	for (size_t cut = 0; cut < out.len; cut += out.len / 17 + 1) {
		assert_int_equal(repl_disk_stage(&b, NBLOCKS, out.data, cut, &crc), -EBADMSG);
		assert_int_equal(b.n, 0);
		assert_int_equal(crc, 0);
	}
	/* A count that claims more blocks than there are. */
	memcpy(copy, out.data, out.len);
	copy[0] = 7;
	assert_int_equal(repl_disk_stage(&b, NBLOCKS, copy, out.len, &crc), -EBADMSG);
	assert_int_equal(b.n, 0);
	/* A block past the end of the image. */
	assert_int_equal(repl_disk_stage(&b, 4, out.data, out.len, &crc), -EBADMSG);
	assert_int_equal(b.n, 0);
	/* Blocks for a machine without a disk. */
	assert_int_equal(repl_disk_stage(&b, 0, out.data, out.len, &crc), -EBADMSG);
	/* A corrupt byte inside a compressed or raw block still decodes (the
	 * frame's crc32c refuses it on the wire): the epoch's disk digest differs. */
	memcpy(copy, out.data, out.len);
	copy[out.len - 100] ^= 0x55;
	if (repl_disk_stage(&b, NBLOCKS, copy, out.len, &crc) == 0)
		assert_int_not_equal(crc, want);
	else
		assert_int_equal(b.n, 0);
	/* Staged twice, more blocks than the image holds: refused. */
	repl_disk_blocks_reset(&b);
	crc = 0;
	for (int i = 0; i < NBLOCKS / 6; i++)
		assert_int_equal(repl_disk_stage(&b, NBLOCKS, out.data, out.len, &crc), 0);
	assert_int_equal(repl_disk_stage(&b, NBLOCKS, out.data, out.len, &crc), -EBADMSG);
	assert_int_equal(b.n, NBLOCKS / 6 * 6);
	repl_disk_blocks_fini(&b);
	free(copy);
	proto_buf_fini(&out);
	free(data);
}

/* ---- a real machine's disk ---------------------------------------------------- */

#define MEM (16ull << 20)
#define BAR 0xe0000000ull
#define RING_GPA 0x200000ull
#define QS 8

struct fixture {
	struct machine *m;
	char path[64];
	int fd;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct machine_config cfg = { .mem_bytes = MEM, .ncpus = 1, .guest = "counter", .ndisks = 1 };

	*state = NULL;
	if (!f)
		return -1;
	if (!th_kvm_available()) {
		free(f);
		return 0;
	}
	snprintf(f->path, sizeof(f->path), "/tmp/test_disk.XXXXXX");
	f->fd = mkstemp(f->path);
	/* 64 blocks and a half: the last block is partial. */
	if (f->fd < 0 || ftruncate(f->fd, NBLOCKS * BLK + 2048) < 0)
		return -1;
	snprintf(cfg.disk, sizeof(cfg.disk), "%s", f->path);
	if (machine_new(&cfg, NULL, &f->m) < 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (!f)
		return 0;
	machine_free(f->m);
	close(f->fd);
	unlink(f->path);
	free(f);
	return 0;
}

static uint64_t bar_rd(struct machine *m, uint32_t off, uint32_t len)
{
	uint64_t v = 0;

	assert_int_equal(pci_mmio(m, BAR + off, (uint8_t *)&v, len, false), 0);
	return v;
}

static void bar_wr(struct machine *m, uint32_t off, uint32_t len, uint64_t v)
{
	assert_int_equal(pci_mmio(m, BAR + off, (uint8_t *)&v, len, true), 0);
}

static void queue_up(struct machine *m)
{
	uint8_t st = VIRTIO_S_ACKNOWLEDGE | VIRTIO_S_DRIVER;

	bar_wr(m, 0x14, 1, 0);
	bar_wr(m, 0x14, 1, st);
	bar_wr(m, 0x08, 4, 0);
	bar_wr(m, 0x0c, 4, 0);
	bar_wr(m, 0x08, 4, 1);
	bar_wr(m, 0x0c, 4, 1);                /* VERSION_1 */
	bar_wr(m, 0x14, 1, st | VIRTIO_S_FEATURES_OK);
	assert_true(bar_rd(m, 0x14, 1) & VIRTIO_S_FEATURES_OK);
	memset(m->ram + RING_GPA, 0, 0x4000);
	bar_wr(m, 0x16, 2, 0);
	bar_wr(m, 0x18, 2, QS);
	bar_wr(m, 0x20, 8, RING_GPA);
	bar_wr(m, 0x28, 8, RING_GPA + 0x1000);
	bar_wr(m, 0x30, 8, RING_GPA + 0x2000);
	bar_wr(m, 0x1c, 2, 1);
	bar_wr(m, 0x14, 1, st | VIRTIO_S_FEATURES_OK | VIRTIO_S_DRIVER_OK);
}

static void set_desc(struct machine *m, int i, uint64_t addr, uint32_t len, uint16_t flags,
		     uint16_t next)
{
	uint8_t *d = m->ram + RING_GPA + 16 * i;

	memcpy(d, &addr, 8);
	memcpy(d + 8, &len, 4);
	memcpy(d + 12, &flags, 2);
	memcpy(d + 14, &next, 2);
}

/* A guest write of len bytes of byte v at sector, as request number n. */
static void guest_write(struct machine *m, uint64_t sector, uint32_t len, uint8_t v, uint16_t n)
{
	uint8_t hdr[16] = { 1 }, *avail = m->ram + RING_GPA + 0x1000;
	uint16_t head = 0;

	memcpy(hdr + 8, &sector, 8);
	memcpy(m->ram + RING_GPA + 0x3000, hdr, 16);
	memset(m->ram + RING_GPA + 0x4000, v, len);
	m->ram[RING_GPA + 0x3100] = 0xff;
	set_desc(m, 0, RING_GPA + 0x3000, 16, VIRTQ_DESC_F_NEXT, 1);
	set_desc(m, 1, RING_GPA + 0x4000, len, VIRTQ_DESC_F_NEXT, 2);
	set_desc(m, 2, RING_GPA + 0x3100, 1, VIRTQ_DESC_F_WRITE, 0);
	memcpy(avail + 4 + 2 * ((n - 1) % QS), &head, 2);
	memcpy(avail + 2, &n, 2);
	bar_wr(m, VIRTIO_NOTIFY_OFF, 2, 0);
	assert_int_equal(m->ram[RING_GPA + 0x3100], 0);
}

static void test_dirty_blocks(void **state)
{
	struct fixture *f = *state;
	struct machine *m = f ? f->m : NULL;
	uint64_t bm[2] = { 0 };
	struct repl_disk_cap d;
	uint8_t buf[BLK];

	if (!f)
		skip();
	assert_int_equal(machine_disk_blocks(m), NBLOCKS + 1);
	assert_int_equal(m->cfg.disk_bytes, NBLOCKS * BLK + 2048);
	queue_up(m);
	/* Sectors 7..9 straddle blocks 0 and 1; sector 8 * 40 is block 40. */
	guest_write(m, 7, 3 * 512, 0xa5, 1);
	guest_write(m, 8 * 40, 512, 0x5a, 2);
	guest_write(m, 8 * NBLOCKS, 512, 0x77, 3);   /* the partial last block */
	machine_disk_harvest(m, bm);
	assert_int_equal(bm[0], (1ull << 0) | (1ull << 1) | (1ull << 40));
	assert_int_equal(bm[1], 1);
	/* Harvested: clear now. A replicated write marks nothing. */
	memset(bm, 0, sizeof(bm));
	memset(buf, 0x33, sizeof(buf));
	assert_int_equal(machine_disk_write(m, 5, buf), 0);
	machine_disk_harvest(m, bm);
	assert_int_equal(bm[0] | bm[1], 0);

	/* The capture reads the dirty blocks as the image holds them. */
	assert_int_equal(repl_disk_cap_init(&d, m), 0);
	guest_write(m, 8 * 40 + 1, 512, 0x11, 4);
	guest_write(m, 8 * 40 + 2, 512, 0x22, 5);    /* coalesced: one block */
	assert_int_equal(repl_disk_capture(&d, m), 0);
	assert_int_equal(d.blk.n, 1);
	assert_int_equal(d.blk.blocks[0], 40);
	assert_int_equal(d.blk.data[0], 0x5a);
	assert_int_equal(d.blk.data[512], 0x11);
	assert_int_equal(d.blk.data[1024], 0x22);
	/* Not delivered: requeued, the next capture has it again. */
	repl_disk_requeue(&d, m);
	assert_int_equal(repl_disk_capture(&d, m), 0);
	assert_int_equal(d.blk.n, 1);
	assert_int_equal(repl_disk_capture(&d, m), 0);
	assert_int_equal(d.blk.n, 0);
	/* Initial sync, first pass: the blocks that hold data (0, 1, 5, 40,
	 * the last), holes and zero blocks skipped; a dirty round: the blocks
	 * asked for, a zero one too. */
	{
		struct proto_buf out;
		uint64_t cursor = 0, sent = 0, todo[2] = { (1ull << 2) | (1ull << 40), 0 };
		int more;

		proto_buf_init(&out);
		while ((more = repl_disk_sync_batch(&d, m, NULL, &cursor, &out, &sent)) > 0)
			;
		assert_int_equal(more, 0);
		assert_int_equal(sent, 5);
		assert_true(out.len > 0);   /* one Section frame */
		proto_buf_reset(&out);
		cursor = sent = 0;
		assert_int_equal(repl_disk_sync_batch(&d, m, todo, &cursor, &out, &sent), 0);
		assert_int_equal(sent, 2);
		assert_int_equal(d.blk.n, 2);
		assert_int_equal(d.blk.blocks[0], 2);
		assert_int_equal(d.blk.blocks[1], 40);
		assert_int_equal(d.blk.data[0], 0);
		assert_int_equal(d.blk.data[BLK], 0x5a);
		proto_buf_fini(&out);
	}
	/* The partial last block reads zero-padded. */
	assert_int_equal(machine_disk_read(m, NBLOCKS, buf), 0);
	assert_int_equal(buf[0], 0x77);
	assert_int_equal(buf[2047], 0);
	assert_int_equal(buf[BLK - 1], 0);
	repl_disk_cap_fini(&d);
}

static void test_prepare(void **state)
{
	char path[64], err[512];
	struct stat sb;
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/test_disk_prep.XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	/* Empty: sized. Right size with data: emptied. */
	assert_int_equal(repl_disk_prepare(path, 1 << 20, err, sizeof(err)), 0);
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, 1 << 20);
	assert_int_equal(pwrite(fd, "x", 1, 4096), 1);
	assert_int_equal(repl_disk_prepare(path, 1 << 20, err, sizeof(err)), 0);
	assert_int_equal(fstat(fd, &sb), 0);
	assert_true(sb.st_blocks == 0);
	/* Another size: refused, untouched. */
	assert_int_equal(repl_disk_prepare(path, 2 << 20, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "disk size differs"));
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, 1 << 20);
	close(fd);
	unlink(path);
	assert_int_equal(repl_disk_prepare(path, 1 << 20, err, sizeof(err)), -ENOENT);
}

static void read_whole(const char *path, uint8_t **data, size_t *len)
{
	struct stat sb;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	*len = (size_t)sb.st_size;
	*data = malloc(*len + 1);
	assert_non_null(*data);
	assert_int_equal(pread(fd, *data, *len, 0), (ssize_t)*len);
	close(fd);
}

static void write_whole(const char *path, const uint8_t *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static void test_snapshot_disk(void **state)
{
	struct fixture *f = *state;
	struct machine_config cfg;
	struct ckpt_file_info info = { .id = 7 };
	struct ckpt_disk d;
	struct ckpt c;
	uint8_t blk[BLK], *src, *img, *file, keep[16];
	size_t src_len, img_len, file_len;
	char snap[64], bad[64], out[64], err[512];

	if (!f)
		skip();
	/* Blocks 3 and 10, the partial last one, and a block written zero. */
	memset(blk, 0xa5, sizeof(blk));
	assert_int_equal(pwrite(f->fd, blk, BLK, 3 * BLK), BLK);
	memset(blk, 0x3c, sizeof(blk));
	assert_int_equal(pwrite(f->fd, blk, BLK, 10 * BLK), BLK);
	assert_int_equal(pwrite(f->fd, blk, 2048, NBLOCKS * BLK), 2048);
	memset(blk, 0, sizeof(blk));
	assert_int_equal(pwrite(f->fd, blk, BLK, 20 * BLK), BLK);
	ckpt_init(&c);
	ckpt_disk_init(&d);
	assert_int_equal(ckpt_take_disk(f->m, &c, &d), 0);
	assert_int_equal(d.n, 3);
	assert_int_equal(d.blocks[0], 3);
	assert_int_equal(d.blocks[2], NBLOCKS);
	snprintf(snap, sizeof(snap), "/tmp/test_disk_snap.%d", getpid());
	snprintf(bad, sizeof(bad), "/tmp/test_disk_bad.%d", getpid());
	snprintf(out, sizeof(out), "/tmp/test_disk_out.%d", getpid());
	assert_int_equal(ckpt_file_write_disk(snap, &c, &f->m->cfg, &info, &d), 0);
	/* Read back: the disk announced, restored equal to the source. */
	assert_int_equal(ckpt_file_read_ex(snap, &c, &cfg, &info), 0);
	assert_true(info.disk);
	assert_int_equal(info.disk_blocks, 3);
	assert_int_equal(info.disk_bytes, NBLOCKS * BLK + 2048);
	assert_int_equal(ckpt_file_restore_disk(snap, out, err, sizeof(err)), 0);
	read_whole(f->path, &src, &src_len);
	read_whole(out, &img, &img_len);
	assert_int_equal(img_len, src_len);
	assert_memory_equal(img, src, src_len);
	free(img);
	/* Cut by one block record, or one byte flipped in a block: refused
	 * whole, the image never touched. */
	read_whole(snap, &file, &file_len);
	memset(keep, 0x77, sizeof(keep));
	write_whole(out, keep, sizeof(keep));
	write_whole(bad, file, file_len - (8 + BLK));
	assert_int_equal(ckpt_file_read_ex(bad, &c, &cfg, &info), -EBADMSG);
	assert_true(ckpt_file_restore_disk(bad, out, err, sizeof(err)) < 0);
	file[file_len - 24 - 100] ^= 1;
	write_whole(bad, file, file_len);
	assert_int_equal(ckpt_file_read_ex(bad, &c, &cfg, &info), -EBADMSG);
	assert_true(ckpt_file_restore_disk(bad, out, err, sizeof(err)) < 0);
	read_whole(out, &img, &img_len);
	assert_int_equal(img_len, sizeof(keep));
	assert_memory_equal(img, keep, sizeof(keep));
	/* Without the disk: as before, no disk announced. */
	assert_int_equal(ckpt_file_read_ex(snap, &c, &cfg, &info), 0);
	assert_int_equal(ckpt_file_write_ex(bad, &c, &f->m->cfg, &info), 0);
	assert_int_equal(ckpt_file_read_ex(bad, &c, &cfg, &info), 0);
	assert_false(info.disk);
	assert_true(ckpt_file_restore_disk(bad, out, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "no disk"));
	free(img);
	free(file);
	free(src);
	unlink(snap);
	unlink(bad);
	unlink(out);
	ckpt_disk_fini(&d);
	ckpt_fini(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_bad_sections),
		cmocka_unit_test_setup_teardown(test_dirty_blocks, setup, teardown),
		cmocka_unit_test(test_prepare),
		cmocka_unit_test_setup_teardown(test_snapshot_disk, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
