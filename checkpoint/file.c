/* Snapshot files: one checkpoint with its machine configuration.
 *
 *   header   magic "USSNAP01", format version, config digest, snapshot id,
 *            parent id, flags, the machine config, counts, header CRC32C
 *   section  "gfns"  npages * 8 bytes
 *   section  "pages" npages * 4096 bytes
 *   section  "state" the serialized state blob (itself self-checking)
 *   trailer  magic "USSNAPND", file length, CRC32C over the header and every
 *            section header (which carry their data's CRC32C)
 *
 * Each section header is { tag[8], len, crc32c of the data }. Integers are
 * little-endian (the byte order of every host this runs on). */
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
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define TAG "snapshot"
#define FILE_MAGIC "USSNAP01"
#define TRAILER_MAGIC "USSNAPND"
#define FILE_VERSION 1u
#define FLAG_FULL 1u
#define FLAG_DISK 2u   /* the VM has a virtio-blk disk (its image is not in the file) */
#define FLAG_NET 4u    /* the VM has a virtio-net NIC with the derived MAC (not its tap) */
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
	uint32_t hdr_crc;
	uint32_t pad;
};

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

static uint32_t hdr_crc(const struct file_hdr *h)
{
	return proto_crc32c(0, h, offsetof(struct file_hdr, hdr_crc));
}

/* The length of a whole file with npages pages and state_len state bytes. */
static uint64_t file_len(uint64_t npages, uint64_t state_len)
{
	return sizeof(struct file_hdr) + 3 * sizeof(struct file_sec) +
	       npages * (8 + CKPT_PAGE_SIZE) + state_len + sizeof(struct file_trailer);
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
			const struct ckpt_file_info *info)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, FILE_MAGIC, 8);
	h->version = FILE_VERSION;
	h->hdr_len = sizeof(*h);
	h->config_digest = c->config_digest;
	h->id = info->id;
	h->parent_id = info->parent_id;
	h->flags = (c->full ? FLAG_FULL : 0) | (cfg->ndisks ? FLAG_DISK : 0) |
		   (cfg->nnets ? FLAG_NET : 0);
	h->ncpus = cfg->ncpus;
	h->mem_bytes = cfg->mem_bytes;
	memcpy(h->guest, cfg->guest, sizeof(h->guest));
	memcpy(h->guest_args, cfg->guest_args, sizeof(h->guest_args));
	h->guest[sizeof(h->guest) - 1] = 0;
	h->guest_args[sizeof(h->guest_args) - 1] = 0;
	h->npages = c->npages;
	h->state_len = c->state_len;
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

/* Header, sections and trailer: the whole file. */
static int write_file(int fd, const struct file_hdr *h, const struct ckpt *c)
{
	struct file_trailer t;
	uint32_t file_crc = proto_crc32c(0, h, sizeof(*h));
	int r;

	if ((r = write_all(fd, h, sizeof(*h))) < 0 ||
	    (r = write_section(fd, "gfns", c->gfns, c->npages * sizeof(uint64_t), &file_crc)) < 0 ||
	    (r = write_section(fd, "pages", c->pages, c->npages * CKPT_PAGE_SIZE, &file_crc)) < 0 ||
	    (r = write_section(fd, "state", c->state, c->state_len, &file_crc)) < 0)
		return r;
	memset(&t, 0, sizeof(t));
	memcpy(t.magic, TRAILER_MAGIC, 8);
	t.file_len = file_len(c->npages, c->state_len);
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
 * where nobody else can have planted anything. The destination must not be
 * a symbolic link (refused before anything is written). */
static int refuse_symlink(const char *path)
{
	struct stat st;

	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
		log_error(TAG, "%s is a symbolic link: refusing to write a snapshot through it", path);
		return -ELOOP;
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
	struct file_hdr h;
	char tmp[4096] = "";
	bool named;
	int fd, r;

	if ((r = refuse_symlink(path)) < 0)
		return r;
	header_fill(&h, c, cfg, info);
	fd = open_private(path, tmp, sizeof(tmp), &named);
	if (fd < 0) {
		r = fd;
		log_error(TAG, "%s: cannot create the snapshot file: %s", path, strerror(-r));
		return r;
	}
	if ((r = write_file(fd, &h, c)) < 0)
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

static int check_header(const struct file_hdr *h, off_t size)
{
	uint64_t expect;

	if (memcmp(h->magic, FILE_MAGIC, 8)) {
		log_error(TAG, "not an understudy snapshot (bad magic)");
		return -EBADMSG;
	}
	if (h->version != FILE_VERSION || h->hdr_len != sizeof(*h)) {
		log_error(TAG, "snapshot format version %u, this build reads %u", h->version,
			  FILE_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (h->hdr_crc != hdr_crc(h)) {
		log_error(TAG, "header checksum mismatch");
		return -EBADMSG;
	}
	if (h->mem_bytes > MACHINE_MAX_MEM || h->npages > h->mem_bytes / CKPT_PAGE_SIZE ||
	    h->state_len > MAX_STATE_LEN || h->ncpus < 1 || h->ncpus > KVM_MAX_VCPUS ||
	    ((h->flags & FLAG_FULL) && h->npages != h->mem_bytes / CKPT_PAGE_SIZE)) {
		log_error(TAG, "header values out of range");
		return -EBADMSG;
	}
	expect = file_len(h->npages, h->state_len);
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
	if ((size_t)st.st_size < sizeof(*h)) {
		log_error(TAG, "file too short to be a snapshot");
		return -EBADMSG;
	}
	*size = st.st_size;
	if ((r = read_all(fd, h, sizeof(*h))) < 0 || (r = check_header(h, st.st_size)) < 0)
		return r;
	memset(cfg, 0, sizeof(*cfg));
	cfg->mem_bytes = h->mem_bytes;
	cfg->ncpus = h->ncpus;
	memcpy(cfg->guest, h->guest, sizeof(cfg->guest));
	memcpy(cfg->guest_args, h->guest_args, sizeof(cfg->guest_args));
	cfg->guest[sizeof(cfg->guest) - 1] = 0;
	cfg->guest_args[sizeof(cfg->guest_args) - 1] = 0;
	cfg->ndisks = (h->flags & FLAG_DISK) ? 1 : 0;
	cfg->nnets = (h->flags & FLAG_NET) ? 1 : 0;   /* a given mac= is not in the file */
	if (machine_config_digest(cfg) != h->config_digest) {
		log_error(TAG, "configuration and digest disagree");
		return -EBADMSG;
	}
	return 0;
}

/* Reads the sections and the trailer after header h into c, checking every
 * checksum; state is scratch of h->state_len bytes. */
static int read_body(int fd, const struct file_hdr *h, off_t size, struct ckpt *c, uint8_t *state)
{
	struct file_trailer t;
	uint32_t file_crc = proto_crc32c(0, h, sizeof(*h));
	int r;

	if ((r = ckpt_reserve(c, (size_t)h->npages)) < 0)
		return r;
	if ((r = read_section(fd, "gfns", c->gfns, h->npages * 8, &file_crc)) < 0 ||
	    (r = read_section(fd, "pages", c->pages, h->npages * CKPT_PAGE_SIZE, &file_crc)) < 0 ||
	    (r = read_section(fd, "state", state, h->state_len, &file_crc)) < 0 ||
	    (r = read_all(fd, &t, sizeof(t))) < 0)
		return r;
	if (memcmp(t.magic, TRAILER_MAGIC, 8) || t.file_len != (uint64_t)size ||
	    t.file_crc != file_crc || t.pad) {
		log_error(TAG, "file checksum mismatch");
		return -EBADMSG;
	}
	if ((r = ckpt_set_state(c, state, (size_t)h->state_len)) < 0)
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
	ckpt_reset(c);
	state = malloc(h.state_len ? (size_t)h.state_len : 1);
	if (!state) {
		r = -ENOMEM;
		goto err;
	}
	if ((r = read_body(fd, &h, size, c, state)) < 0)
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

int ckpt_file_apply_chain(struct machine *m, struct ckpt *c, uint64_t base_id, char *const *files,
			  int n, struct ckpt_chain_error *err)
{
	struct machine_config cfg;
	struct ckpt_file_info info = { .id = base_id };
	uint64_t prev = 0;
	int r;

	for (int i = 0; i < n; i++) {
		err->file = i;
		if (i > 0) {
			err->fault = CKPT_CHAIN_READ;
			if ((r = ckpt_file_read_ex(files[i], c, &cfg, &info)) < 0)
				return r;
			err->fault = CKPT_CHAIN_LINK;
			if (c->full || info.parent_id != prev)
				return -EINVAL;
		}
		err->fault = CKPT_CHAIN_APPLY;
		if ((r = ckpt_apply(m, c)) < 0)
			return r;
		prev = info.id;
	}
	return 0;
}
