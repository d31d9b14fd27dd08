/* Fuzz target: a snapshot file through the read path restore uses,
 * ckpt_file_read_ex(): header (magic, version 1 to 3, header checksum,
 * ranges, the NIC's MAC, length, configuration digest), the gfns, pages and state sections with
 * their checksums, the config section of version 3 (its checksum, then
 * the MachineConfig it holds against the header), the disk section of a
 * --with-disk snapshot (its length, block order and checksum), and the
 * trailer. The input is the whole file, handed over
 * as a memfd opened by its /proc/self/fd path (the API takes a path).
 * Applying a chain of files (ckpt_file_apply_chain) needs a machine with
 * /dev/kvm and is not fuzzed here; the id/parent-id link it checks comes
 * from this same header. Accepted: ckpt_file_read_ex() returned 0; what it
 * accepted must then fit the machine the header describes. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz.h"

static int write_all(int fd, const uint8_t *data, size_t size)
{
	while (size) {
		ssize_t n = write(fd, data, size);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		data += n;
		size -= (size_t)n;
	}
	return 0;
}

int fuzz_verdict(const uint8_t *data, size_t size)
{
	struct ckpt_file_info info;
	struct machine_config cfg;
	struct ckpt c;
	char path[64];
	int fd, r;

	fd = memfd_create("fuzz-snapshot", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if ((r = write_all(fd, data, size)) < 0)
		goto out;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ckpt_init(&c);
	r = ckpt_file_read_ex(path, &c, &cfg, &info);
	if (r == 0 && (cfg.ncpus < 1 || cfg.ncpus > KVM_MAX_VCPUS ||
		       cfg.mem_bytes > MACHINE_MAX_MEM ||
		       c.npages > cfg.mem_bytes / CKPT_PAGE_SIZE ||
		       (c.full && c.npages != cfg.mem_bytes / CKPT_PAGE_SIZE) ||
		       !memchr(cfg.guest, 0, sizeof(cfg.guest)) ||
		       !memchr(cfg.guest_args, 0, sizeof(cfg.guest_args)) ||
		       !memchr(cfg.kernel, 0, sizeof(cfg.kernel)) ||
		       !memchr(cfg.initrd, 0, sizeof(cfg.initrd)) ||
		       !memchr(cfg.append, 0, sizeof(cfg.append)) ||
		       (cfg.kernel[0] && strcmp(cfg.guest, MACHINE_LINUX_GUEST)) ||
		       (!cfg.kernel[0] && (cfg.initrd[0] || cfg.append[0]))))
		abort(); /* the reader let an impossible snapshot through */
	ckpt_fini(&c);
out:
	close(fd);
	return r;
}

FUZZ_LIBFUZZER_ENTRY
