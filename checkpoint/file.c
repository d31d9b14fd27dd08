/* Snapshot files: one checkpoint with its machine configuration.
 *
 *   header   magic "USSNAP01", format version, header length, config
 *            digest, snapshot id, parent id, flags, the machine config,
 *            counts, the NIC's given MAC (version 2), the length of the
 *            "config" section (version 3), header CRC32C
 *   section  "gfns"  npages * 8 bytes
 *   section  "pages" npages * 4096 bytes
 *   section  "state" the serialized state blob (itself self-checking)
 *   section  "config" (version 3) the whole machine configuration, a packed
 *            MachineConfig as the Hello carries it (file_config.c): with a
 *            Linux guest's kernel, initrd and command line, which a reboot
 *            of the restored guest boots from
 *   section  "disk"  (flag 8, full snapshots taken --with-disk only) the
 *            image's size and number of blocks (u64 each), then for each
 *            non-zero block its index (u64, ascending) and 4096 bytes
 *   trailer  magic "USSNAPND", file length, CRC32C over the header and every
 *            section header (which carry their data's CRC32C)
 *
 * Each section header is { tag[8], len, crc32c of the data }. Integers are
 * little-endian: the structs below, the gfns and the block indices are
 * written as they sit in memory, which the assertion after them holds to
 * (understudy runs on x86-64 KVM only).
 *
 * Versions: 3 is written. 2 (before the "config" section: config_len 0,
 * no section; restored without a boot source) is still read, and so is 1
 * (before the MAC: a NIC's MAC given with mac= was not recorded), whose
 * header is version 2's without net_mac and config_len, moved into version
 * 2's layout as it is read. Any other version is refused by number, before
 * anything else is trusted. */
#include "checkpoint/checkpoint.h"
#include "proto/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG "snapshot"
#define FILE_MAGIC "USSNAP01"
#define TRAILER_MAGIC "USSNAPND"
#define FILE_VERSION 3u
#define FLAG_FULL 1u
#define FLAG_DISK 2u   /* the VM has a virtio-blk disk (its image is not in the file) */
#define FLAG_NET 4u    /* the VM has a virtio-net NIC (not its tap): net_mac, or derived */
#define FLAG_DISK_DATA 8u   /* ... and the file carries the disk's contents */
#define BLK MACHINE_DISK_BLOCK
#define DISK_REC (8 + BLK)  /* one block in the "disk" section */
#define MAX_STATE_LEN (64u << 20)

struct file_hdr {
	char magic[8];
	uint32_t version;
	uint32_t hdr_len;
	uint64_t config_digest;
	uint64_t id;
	uint64_t parent_id;
	uint32_t flags;
	int32_t ncpus;
	uint64_t mem_bytes;
	char guest[32];
	char guest_args[256];
	uint64_t npages;
	uint64_t state_len;
	uint8_t net_mac[6];     /* the NIC's MAC given with mac= (unicast); zero: derived */
	uint16_t config_len;    /* version 3: the "config" section's data, 1..4096 */
	uint32_t hdr_crc;
	uint32_t pad;
};

/* Version 1's header ends where net_mac starts, with its own hdr_crc, pad. */
#define HDR_V1_CRC_AT offsetof(struct file_hdr, net_mac)
#define HDR_V1_LEN (HDR_V1_CRC_AT + 8)
_Static_assert(sizeof(struct file_hdr) == HDR_V1_LEN + 8, "version 2 adds 8 header bytes");

struct file_sec {
	char tag[8];
	uint64_t len;
	uint32_t crc;
	uint32_t pad;
};

struct file_trailer {
	char magic[8];
	uint64_t file_len;
	uint32_t file_crc;
	uint32_t pad;
};

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "snapshot files are little-endian and written from memory: a big-endian host "
	       "needs each integer converted (kmod/le.h)");

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len > (1u << 30) ? (1u << 30) : len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len > (1u << 30) ? (1u << 30) : len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENODATA;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Block k of an image of disk_bytes bytes. */
static int write_block(int fd, uint64_t disk_bytes, uint64_t k, const uint8_t *buf)
{
	uint64_t off = k * BLK;
	size_t len = disk_bytes - off < BLK ? (size_t)(disk_bytes - off) : BLK, done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

/* The header's own CRC32C: over what precedes hdr_crc in h's version. */
static uint32_t hdr_crc(const struct file_hdr *h)
{
	return proto_crc32c(0, h, h->version == 1 ? HDR_V1_CRC_AT : offsetof(struct file_hdr, hdr_crc));
}

/* The header's bytes as the file holds them, the start of the file's CRC. */
static uint32_t hdr_file_crc(const struct file_hdr *h)
{
	if (h->version == 1)
		return proto_crc32c(proto_crc32c(0, h, HDR_V1_CRC_AT), &h->hdr_crc, 8);
	return proto_crc32c(0, h, sizeof(*h));
}

/* The length of the whole file of header h, without a "disk" section. */
static uint64_t file_len(const struct file_hdr *h)
{
	return h->hdr_len + 3 * sizeof(struct file_sec) + h->npages * (8 + CKPT_PAGE_SIZE) +
	       h->state_len + (h->version >= 3 ? sizeof(struct file_sec) + h->config_len : 0) +
	       sizeof(struct file_trailer);
}

static bool mac_given(const uint8_t mac[6])
{
	static const uint8_t zero[6];

	return memcmp(mac, zero, 6) != 0;
}

uint64_t ckpt_file_new_id(void)
{
	uint64_t id = 0;

	while (!id)
		if (getrandom(&id, sizeof(id), 0) != sizeof(id))
			id = now_ns() ^ ((uint64_t)getpid() << 40);
	return id;
}

static void header_fill(struct file_hdr *h, const struct ckpt *c, const struct machine_config *cfg,
			const struct ckpt_file_info *info, const struct ckpt_disk *d, size_t config_len)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, FILE_MAGIC, 8);
	h->version = FILE_VERSION;
	h->hdr_len = sizeof(*h);
	h->config_digest = c->config_digest;
	h->id = info->id;
	h->parent_id = info->parent_id;
	h->flags = (c->full ? FLAG_FULL : 0) | (cfg->ndisks ? FLAG_DISK : 0) |
		   (cfg->nnets ? FLAG_NET : 0) | (d ? FLAG_DISK_DATA : 0);
	h->ncpus = cfg->ncpus;
	h->mem_bytes = cfg->mem_bytes;
	memcpy(h->guest, cfg->guest, sizeof(h->guest));
	memcpy(h->guest_args, cfg->guest_args, sizeof(h->guest_args));
	h->guest[sizeof(h->guest) - 1] = 0;
	h->guest_args[sizeof(h->guest_args) - 1] = 0;
	h->npages = c->npages;
	h->state_len = c->state_len;
	if (cfg->nnets)
		memcpy(h->net_mac, cfg->net_mac, sizeof(h->net_mac));
	h->config_len = (uint16_t)config_len;
	h->hdr_crc = hdr_crc(h);
}

/* Writes one section; folds its header into *file_crc. */
static int write_section(int fd, const char *tag, const void *data, size_t len, uint32_t *file_crc)
{
	struct file_sec s;
	int r;

	memset(&s, 0, sizeof(s));
	memcpy(s.tag, tag, strlen(tag) < sizeof(s.tag) ? strlen(tag) : sizeof(s.tag));
	s.len = len;
	s.crc = proto_crc32c(0, data, len);
	*file_crc = proto_crc32c(*file_crc, &s, sizeof(s));
	if ((r = write_all(fd, &s, sizeof(s))) < 0)
		return r;
	return len ? write_all(fd, data, len) : 0;
}

/* The "disk" section: its header (data CRC first: it precedes the data),
 * then the image's size and count, then each block with its index. */
static int write_disk(int fd, const struct ckpt_disk *d, uint32_t *file_crc)
{
	uint64_t head[2] = { d->disk_bytes, d->n };
	struct file_sec sec;
	uint32_t crc = proto_crc32c(0, head, sizeof(head));
	int r;

	for (size_t i = 0; i < d->n; i++) {
		crc = proto_crc32c(crc, &d->blocks[i], 8);
		crc = proto_crc32c(crc, d->data + i * BLK, BLK);
	}
	memset(&sec, 0, sizeof(sec));
	memcpy(sec.tag, "disk", 4);
	sec.len = sizeof(head) + d->n * DISK_REC;
	sec.crc = crc;
	*file_crc = proto_crc32c(*file_crc, &sec, sizeof(sec));
	if ((r = write_all(fd, &sec, sizeof(sec))) < 0 || (r = write_all(fd, head, sizeof(head))) < 0)
		return r;
	for (size_t i = 0; i < d->n; i++)
		if ((r = write_all(fd, &d->blocks[i], 8)) < 0 ||
		    (r = write_all(fd, d->data + i * BLK, BLK)) < 0)
			return r;
	return 0;
}

static uint64_t disk_section_len(const struct ckpt_disk *d)
{
	return d ? sizeof(struct file_sec) + 16 + d->n * DISK_REC : 0;
}

/* Header, sections and trailer: the whole file. */
static int write_file(int fd, const struct file_hdr *h, const struct ckpt *c,
		      const uint8_t *config, const struct ckpt_disk *d)
{
	struct file_trailer t;
	uint32_t file_crc = hdr_file_crc(h);
	int r;

	if ((r = write_all(fd, h, sizeof(*h))) < 0 ||
	    (r = write_section(fd, "gfns", c->gfns, c->npages * sizeof(uint64_t), &file_crc)) < 0 ||
	    (r = write_section(fd, "pages", c->pages, c->npages * CKPT_PAGE_SIZE, &file_crc)) < 0 ||
	    (r = write_section(fd, "state", c->state, c->state_len, &file_crc)) < 0 ||
	    (r = write_section(fd, "config", config, h->config_len, &file_crc)) < 0 ||
	    (d && (r = write_disk(fd, d, &file_crc)) < 0))
		return r;
	memset(&t, 0, sizeof(t));
	memcpy(t.magic, TRAILER_MAGIC, 8);
	t.file_len = file_len(h) + disk_section_len(d);
	t.file_crc = file_crc;
	return write_all(fd, &t, sizeof(t));
}

static int fsync_dir(const char *path)
{
	char *copy = strdup(path);
	int fd, r = 0;

	if (!copy)
		return -ENOMEM;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		r = -errno;
	if (fd >= 0)
		close(fd);
	free(copy);
	return r;
}

/* A snapshot holds guest RAM: it is private to its owner (0600) and written
 * where nobody else can have planted anything. The destination is a new
 * name or a regular file (replaced): never a symbolic link, a device, a
 * FIFO, a socket or a directory, which the final rename() would replace by
 * a regular file (/dev/full would become one). Checked before anything is
 * written and again just before the rename. */
static int refuse_special(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISLNK(st.st_mode)) {
		log_error(TAG, "%s is a symbolic link: refusing to write a snapshot through it", path);
		return -ELOOP;
	}
	if (!S_ISREG(st.st_mode)) {
		log_error(TAG, "%s is not a regular file: refusing to replace it by a snapshot", path);
		return S_ISDIR(st.st_mode) ? -EISDIR : -EEXIST;
	}
	return 0;
}

/* A random temporary name beside path. */
static int tmp_name(const char *path, char *tmp, size_t len)
{
	if (snprintf(tmp, len, "%s.tmp.%016llx", path,
		     (unsigned long long)ckpt_file_new_id()) >= (int)len)
		return -ENAMETOOLONG;
	return 0;
}

/* An unnamed file (O_TMPFILE) in path's directory; *named = false. Where the
 * file system has none: a new file with a random name created exclusively,
 * never through a link (tmp), *named = true. Mode 0600 either way. */
static int open_private(const char *path, char *tmp, size_t len, bool *named)
{
	char *copy = strdup(path);
	int fd, r;

	if (!copy)
		return -ENOMEM;
	fd = open(dirname(copy), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	free(copy);
	*named = fd < 0;
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd < 0 ? -errno : fd;
	if ((r = tmp_name(path, tmp, len)) < 0)
		return r;
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}

/* Gives the unnamed file fd the name tmp (new, random: linkat never follows
 * or replaces anything there). */
static int link_tmpfile(int fd, const char *path, char *tmp, size_t len)
{
	char proc[64];
	int r;

	if ((r = tmp_name(path, tmp, len)) < 0)
		return r;
	if (linkat(fd, "", AT_FDCWD, tmp, AT_EMPTY_PATH) == 0)
		return 0;
	/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc does not. */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
}

int ckpt_file_write_ex(const char *path, const struct ckpt *c, const struct machine_config *cfg,
		       const struct ckpt_file_info *info)
{
	return ckpt_file_write_disk(path, c, cfg, info, NULL);
}

int ckpt_file_write_disk(const char *path, const struct ckpt *c, const struct machine_config *cfg,
			 const struct ckpt_file_info *info, const struct ckpt_disk *d)
{
	uint8_t config[PROTO_CONFIG_MAX_BYTES];
	struct file_hdr h;
	char tmp[4096] = "";
	bool named;
	int fd, r;

	if (d && !c->full)
		return -EINVAL;
	if ((r = refuse_special(path)) < 0)
		return r;
	if ((r = ckpt_file_config_encode(cfg, config, sizeof(config))) < 0)
		return r;
	header_fill(&h, c, cfg, info, d, (size_t)r);
	fd = open_private(path, tmp, sizeof(tmp), &named);
	if (fd < 0) {
		r = fd;
		log_error(TAG, "%s: cannot create the snapshot file: %s", path, strerror(-r));
		return r;
	}
	if ((r = write_file(fd, &h, c, config, d)) < 0)
		goto err_file;
	if (fsync(fd) < 0) {
		r = -errno;
		goto err_file;
	}
	if (!named && (r = link_tmpfile(fd, path, tmp, sizeof(tmp))) < 0)
		goto err_file;
	named = true;
	if (close(fd) < 0) {
		r = -errno;
		goto err_tmp;
	}
	/* rename() replaces a link planted at path since, never its target. */
	if ((r = refuse_special(path)) < 0)
		goto err_tmp;
	if (rename(tmp, path) < 0) {
		r = -errno;
		goto err_tmp;
	}
	if ((r = fsync_dir(path)) < 0)
		log_warn(TAG, "%s: syncing the directory: %s", path, strerror(-r));
	return 0;

err_file:
	close(fd);
err_tmp:
	if (named)
		unlink(tmp);
	log_error(TAG, "writing %s: %s (any previous file there is untouched)", path, strerror(-r));
	return r;
}

int ckpt_file_write(const char *path, const struct ckpt *c, const struct machine_config *cfg)
{
	struct ckpt_file_info info = { .id = ckpt_file_new_id() };

	return ckpt_file_write_ex(path, c, cfg, &info);
}

static int read_section(int fd, const char *tag, void *data, size_t len, uint32_t *file_crc)
{
	struct file_sec s;
	int r;

	if ((r = read_all(fd, &s, sizeof(s))) < 0)
		return r;
	*file_crc = proto_crc32c(*file_crc, &s, sizeof(s));
	if (strncmp(s.tag, tag, sizeof(s.tag)) || s.len != len) {
		log_error(TAG, "section '%s' missing or of the wrong size", tag);
		return -EBADMSG;
	}
	if (len && (r = read_all(fd, data, len)) < 0)
		return r;
	if (proto_crc32c(0, data, len) != s.crc) {
		log_error(TAG, "section '%s': checksum mismatch", tag);
		return -EBADMSG;
	}
	return 0;
}

/* The header at fd into h: version 2 as it is, version 1 moved into
 * version 2's layout (net_mac zero). Magic and version are checked here,
 * before the rest is read. */
static int read_hdr_bytes(int fd, struct file_hdr *h)
{
	uint8_t *p = (uint8_t *)h;
	int r;

	memset(h, 0, sizeof(*h));
	if ((r = read_all(fd, h, HDR_V1_LEN)) < 0)
		return r;
	if (memcmp(h->magic, FILE_MAGIC, 8)) {
		log_error(TAG, "not an understudy snapshot (bad magic)");
		return -EBADMSG;
	}
	if ((h->version == 2 || h->version == FILE_VERSION) && h->hdr_len == sizeof(*h))
		return read_all(fd, p + HDR_V1_LEN, sizeof(*h) - HDR_V1_LEN);
	if (h->version == 1 && h->hdr_len == HDR_V1_LEN) {
		memcpy(&h->hdr_crc, p + HDR_V1_CRC_AT, 8);
		memset(p + HDR_V1_CRC_AT, 0, 8);
		return 0;
	}
	log_error(TAG, "snapshot format version %u (header of %u bytes), this build reads "
		  "versions 1 to %u", h->version, h->hdr_len, FILE_VERSION);
	return -EPROTONOSUPPORT;
}

static int check_header(const struct file_hdr *h, off_t size)
{
	uint64_t expect;

	if (h->hdr_crc != hdr_crc(h)) {
		log_error(TAG, "header checksum mismatch");
		return -EBADMSG;
	}
	if (h->mem_bytes > MACHINE_MAX_MEM || h->npages > h->mem_bytes / CKPT_PAGE_SIZE ||
	    h->state_len > MAX_STATE_LEN || h->ncpus < 1 || h->ncpus > KVM_MAX_VCPUS ||
	    ((h->flags & FLAG_FULL) && h->npages != h->mem_bytes / CKPT_PAGE_SIZE) ||
	    (h->flags & ~(FLAG_FULL | FLAG_DISK | FLAG_NET | FLAG_DISK_DATA)) ||
	    ((h->flags & FLAG_DISK_DATA) && (h->flags & (FLAG_FULL | FLAG_DISK)) !=
	     (FLAG_FULL | FLAG_DISK)) ||
	    (mac_given(h->net_mac) && (!(h->flags & FLAG_NET) || (h->net_mac[0] & 1))) ||
	    (h->version < 3 ? h->config_len != 0 :
	     !h->config_len || h->config_len > PROTO_CONFIG_MAX_BYTES)) {
		log_error(TAG, "header values out of range");
		return -EBADMSG;
	}
	expect = file_len(h);
	/* The disk's section: its length is the rest, whole blocks. */
	if ((h->flags & FLAG_DISK_DATA) && (uint64_t)size >= expect + sizeof(struct file_sec) + 16 &&
	    ((uint64_t)size - expect - sizeof(struct file_sec) - 16) % DISK_REC == 0)
		expect = (uint64_t)size;
	if ((uint64_t)size != expect) {
		log_error(TAG, "file is %lld bytes, its header says %llu: truncated or damaged",
			  (long long)size, (unsigned long long)expect);
		return -EBADMSG;
	}
	return 0;
}

/* Reads and checks the header of the file open at fd, and the machine
 * configuration it carries. */
static int read_header(int fd, struct file_hdr *h, off_t *size, struct machine_config *cfg)
{
	struct stat st;
	int r;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((size_t)st.st_size < HDR_V1_LEN) {
		log_error(TAG, "file too short to be a snapshot");
		return -EBADMSG;
	}
	*size = st.st_size;
	if ((r = read_hdr_bytes(fd, h)) < 0 || (r = check_header(h, st.st_size)) < 0)
		return r;
	memset(cfg, 0, sizeof(*cfg));
	cfg->mem_bytes = h->mem_bytes;
	cfg->ncpus = h->ncpus;
	memcpy(cfg->guest, h->guest, sizeof(cfg->guest));
	memcpy(cfg->guest_args, h->guest_args, sizeof(cfg->guest_args));
	cfg->guest[sizeof(cfg->guest) - 1] = 0;
	cfg->guest_args[sizeof(cfg->guest_args) - 1] = 0;
	cfg->ndisks = (h->flags & FLAG_DISK) ? 1 : 0;
	cfg->nnets = (h->flags & FLAG_NET) ? 1 : 0;
	memcpy(cfg->net_mac, h->net_mac, sizeof(cfg->net_mac));
	if (machine_config_digest(cfg) != h->config_digest) {
		/* Version 1 did not record a MAC given with mac=. */
		log_error(TAG, "configuration and digest disagree%s", h->version == 1 && cfg->nnets ?
			  " (a version 1 file of a VM whose NIC had a given mac=, which that "
			  "version did not record: it cannot be restored)" : "");
		return -EBADMSG;
	}
	return 0;
}

/* The "disk" section at fd's offset, sec_len bytes with its header: read
 * through, every block index checked (ascending, inside the image) and the
 * data's CRC32C compared. With image >= 0 each block is also written there
 * (the last one cut to the image's size). info (may be NULL) gets the
 * image's size and count. */
static int disk_walk(int fd, uint64_t sec_len, int image, struct ckpt_file_info *info,
		     uint32_t *file_crc)
{
	struct file_sec sec;
	uint64_t head[2], prev = 0, nblocks, block;
	uint8_t *buf;
	uint32_t crc;
	int r;

	if ((r = read_all(fd, &sec, sizeof(sec))) < 0 || (r = read_all(fd, head, sizeof(head))) < 0)
		return r;
	*file_crc = proto_crc32c(*file_crc, &sec, sizeof(sec));
	nblocks = (head[0] + BLK - 1) / BLK;
	if (strncmp(sec.tag, "disk", sizeof(sec.tag)) || sec.len != sec_len - sizeof(sec) ||
	    head[1] > nblocks || sec.len != 16 + head[1] * DISK_REC) {
		log_error(TAG, "section 'disk' missing or of the wrong size");
		return -EBADMSG;
	}
	if (!(buf = malloc(BLK)))
		return -ENOMEM;
	crc = proto_crc32c(0, head, sizeof(head));
	for (uint64_t i = 0; i < head[1]; i++) {
		if ((r = read_all(fd, &block, 8)) < 0 || (r = read_all(fd, buf, BLK)) < 0)
			goto out;
		crc = proto_crc32c(proto_crc32c(crc, &block, 8), buf, BLK);
		if (block >= nblocks || (i && block <= prev)) {
			log_error(TAG, "section 'disk': block %llu out of order or outside the image",
				  (unsigned long long)block);
			r = -EBADMSG;
			goto out;
		}
		prev = block;
		if (image >= 0 && (r = write_block(image, head[0], block, buf)) < 0)
			goto out;
	}
	r = 0;
	if (crc != sec.crc) {
		log_error(TAG, "section 'disk': checksum mismatch");
		r = -EBADMSG;
	} else if (info) {
		info->disk = true;
		info->disk_bytes = head[0];
		info->disk_blocks = head[1];
	}
out:
	free(buf);
	return r;
}

/* Reads the sections and the trailer after header h into c, checking every
 * checksum, and the "config" section into cfg (read from the header);
 * state is scratch of h->state_len bytes. */
static int read_body(int fd, const struct file_hdr *h, off_t size, struct ckpt *c, uint8_t *state,
		     struct machine_config *cfg, struct ckpt_file_info *info)
{
	uint8_t config[PROTO_CONFIG_MAX_BYTES];
	struct file_trailer t;
	uint32_t file_crc = hdr_file_crc(h);
	int r;

	if ((r = ckpt_reserve(c, (size_t)h->npages)) < 0)
		return r;
	if ((r = read_section(fd, "gfns", c->gfns, h->npages * 8, &file_crc)) < 0 ||
	    (r = read_section(fd, "pages", c->pages, h->npages * CKPT_PAGE_SIZE, &file_crc)) < 0 ||
	    (r = read_section(fd, "state", state, h->state_len, &file_crc)) < 0 ||
	    (h->version >= 3 &&
	     (r = read_section(fd, "config", config, h->config_len, &file_crc)) < 0) ||
	    ((h->flags & FLAG_DISK_DATA) &&
	     (r = disk_walk(fd, (uint64_t)size - file_len(h), -1, info,
			    &file_crc)) < 0) ||
	    (r = read_all(fd, &t, sizeof(t))) < 0)
		return r;
	if (memcmp(t.magic, TRAILER_MAGIC, 8) || t.file_len != (uint64_t)size ||
	    t.file_crc != file_crc || t.pad) {
		log_error(TAG, "file checksum mismatch");
		return -EBADMSG;
	}
	if ((h->version >= 3 && (r = ckpt_file_config_decode(config, h->config_len, cfg)) < 0) ||
	    (r = ckpt_set_state(c, state, (size_t)h->state_len)) < 0)
		return r;
	c->npages = (size_t)h->npages;
	c->full = h->flags & FLAG_FULL;
	c->config_digest = h->config_digest;
	return 0;
}

int ckpt_file_read_ex(const char *path, struct ckpt *c, struct machine_config *cfg,
		      struct ckpt_file_info *info)
{
	struct file_hdr h;
	struct machine_config fcfg;
	uint8_t *state = NULL;
	off_t size = 0;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		log_error(TAG, "%s: %s", path, strerror(-r));
		return r;
	}
	if ((r = read_header(fd, &h, &size, &fcfg)) < 0)
		goto err;
	if (info) {
		info->disk = false;
		info->disk_bytes = info->disk_blocks = 0;
	}
	ckpt_reset(c);
	state = malloc(h.state_len ? (size_t)h.state_len : 1);
	if (!state) {
		r = -ENOMEM;
		goto err;
	}
	if ((r = read_body(fd, &h, size, c, state, &fcfg, info)) < 0)
		goto err;
	*cfg = fcfg;
	if (info) {
		info->id = h.id;
		info->parent_id = h.parent_id;
	}
	free(state);
	close(fd);
	return 0;
err:
	if (r == -ENODATA)
		log_error(TAG, "%s: truncated", path);
	else
		log_error(TAG, "%s: not a usable snapshot (%s)", path, strerror(-r));
	free(state);
	ckpt_reset(c);
	close(fd);
	return r == -ENODATA ? -EBADMSG : r;
}

int ckpt_file_read(const char *path, struct ckpt *c, struct machine_config *cfg)
{
	return ckpt_file_read_ex(path, c, cfg, NULL);
}

/* ---- a snapshot's disk contents into an image ----------------------------- */

/* The image for ckpt_file_restore_disk: opened (created 0600 if missing,
 * never through a symbolic link), locked as a VM's, a regular file. */
static int open_image(const char *image, char *err, size_t errlen)
{
	struct stat st;
	int img = open(image, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600), r;

	if (img < 0) {
		r = -errno;
		snprintf(err, errlen, "--disk %s: %s", image, strerror(-r));
		return r;
	}
	if (flock(img, LOCK_EX | LOCK_NB) < 0) {
		r = -errno;
		snprintf(err, errlen, "--disk %s: in use by another process (%s)", image, strerror(-r));
	} else if (fstat(img, &st) < 0 || !S_ISREG(st.st_mode)) {
		r = -EINVAL;
		snprintf(err, errlen, "--disk %s: not a regular file", image);
	} else {
		return img;
	}
	close(img);
	return r;
}

int ckpt_file_restore_disk(const char *path, const char *image, char *err, size_t errlen)
{
	struct machine_config cfg;
	struct ckpt_file_info info = { 0 };
	struct file_hdr h;
	uint32_t crc = 0;
	uint64_t at, len;
	off_t size;
	int fd, img = -1, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	if ((r = read_header(fd, &h, &size, &cfg)) < 0 || !(h.flags & FLAG_DISK_DATA)) {
		snprintf(err, errlen, "%s: %s", path, r < 0 ? "not a usable snapshot" :
			 "carries no disk (taken without --with-disk)");
		r = r < 0 ? r : -EINVAL;
		goto out;
	}
	at = file_len(&h) - sizeof(struct file_trailer);
	len = (uint64_t)size - at - sizeof(struct file_trailer);
	/* Checked whole before the image is touched, then written. */
	if (lseek(fd, (off_t)at, SEEK_SET) < 0 || (r = disk_walk(fd, len, -1, &info, &crc)) < 0) {
		r = r < 0 ? r : -errno;
		snprintf(err, errlen, "%s: its disk section is damaged: nothing written", path);
		goto out;
	}
	if ((img = open_image(image, err, errlen)) < 0) {
		r = img;
		goto out;
	}
	if (ftruncate(img, 0) < 0 || ftruncate(img, (off_t)info.disk_bytes) < 0 ||
	    lseek(fd, (off_t)at, SEEK_SET) < 0)
		r = -errno;
	if (r == 0)
		r = disk_walk(fd, len, img, NULL, &crc);
	if (r == 0 && fdatasync(img) < 0)
		r = -errno;
	if (r < 0)
		snprintf(err, errlen, "writing the disk of %s to %s: %s", path, image,
			 r == -EBADMSG ? "the snapshot changed while it was read" : strerror(-r));
	close(img);
out:
	close(fd);
	return r;
}
