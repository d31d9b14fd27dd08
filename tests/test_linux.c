/* machine/linux.c: the checks on a --kernel machine, made before anything
 * is built (no KVM needed):
 *  - Debian's own kernel (/boot/vmlinuz-*) is accepted and its header read
 *    as the boot protocol says (2.10+, 64-bit entry, cmdline_size, ...);
 *  - crafted images are refused for the reason they are bad: no "HdrS",
 *    an old protocol, no 64-bit entry, a zImage, a truncated file, an ELF;
 *  - a command line longer than cmdline_size, an initrd that does not fit
 *    below initrd_addr_max, and --mem too small for kernel + initrd are
 *    refused, naming the option and the file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "machine/machine.h"

static char dir[64];

/* A minimal bzImage: setup header of protocol version, 4 setup sectors,
 * then kernel_kib KiB of "kernel". */
static void make_image(uint8_t *b, size_t len, uint16_t version, uint16_t xloadflags,
		       uint32_t initrd_max, uint32_t cmdline_size)
{
	memset(b, 0, len);
	b[0x1f1] = 4;                      /* setup_sects */
	b[0x1fe] = 0x55;
	b[0x1ff] = 0xaa;
	b[0x200] = 0xeb;
	b[0x201] = 0x6a;                   /* header through 0x26c */
	memcpy(b + 0x202, "HdrS", 4);
	b[0x206] = (uint8_t)version;
	b[0x207] = (uint8_t)(version >> 8);
	b[0x211] = 0x01;                   /* LOADED_HIGH */
	memcpy(b + 0x22c, &initrd_max, 4);
	b[0x232] = 0x20;                   /* kernel_alignment 2 MiB */
	b[0x234] = 1;
	memcpy(b + 0x236, &xloadflags, 2);
	memcpy(b + 0x238, &cmdline_size, 4);
	b[0x25a] = 0x00;                   /* pref_address 0x1000000 */
	b[0x25b] = 0x01;
	b[0x262] = 0x80;                   /* init_size 8 MiB */
}

static const char *write_file(const char *name, const void *buf, size_t len, uint64_t size)
{
	static char path[8][128];
	static int next;
	char *p = path[next++ % 8];
	int fd;

	snprintf(p, 128, "%s/%s", dir, name);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	if (size > len)
		assert_int_equal(ftruncate(fd, (off_t)size), 0);
	close(fd);
	return p;
}

static const char *good_image(const char *name, uint32_t initrd_max, uint32_t cmdline_size)
{
	uint8_t b[8192];

	make_image(b, sizeof(b), 0x20f, 0x7f, initrd_max, cmdline_size);
	return write_file(name, b, sizeof(b), 0);
}

static int check(const char *kernel, const char *initrd, const char *append, uint64_t mem,
		 char *err, size_t errlen)
{
	struct machine_config cfg = { .mem_bytes = mem, .ncpus = 1 };

	snprintf(cfg.kernel, sizeof(cfg.kernel), "%s", kernel);
	snprintf(cfg.initrd, sizeof(cfg.initrd), "%s", initrd ? initrd : "");
	snprintf(cfg.append, sizeof(cfg.append), "%s", append ? append : "");
	err[0] = 0;
	return machine_linux_check(&cfg, err, errlen);
}

static void debian_kernel_accepted(void **state)
{
	struct dirent *d;
	DIR *boot = opendir("/boot");
	char path[512] = "", err[512];
	uint8_t *buf = malloc(65536);
	struct linux_image img;
	ssize_t n;
	int fd;

	(void)state;
	while (boot && (d = readdir(boot)))
		if (!strncmp(d->d_name, "vmlinuz-", 8))
			snprintf(path, sizeof(path), "/boot/%s", d->d_name);
	if (boot)
		closedir(boot);
	if (!path[0]) {
		free(buf);
		fprintf(stderr, "SKIP: no /boot/vmlinuz-* here (make deps-nested installs "
				"linux-image-amd64)\n");
		skip();
		return;
	}
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, 65536);
	assert_true(n > 0);
	assert_int_equal(machine_linux_probe(buf, (size_t)n, (uint64_t)lseek(fd, 0, SEEK_END), &img,
					     err, sizeof(err)), 0);
	close(fd);
	assert_true(img.version >= 0x20a);
	assert_true(img.xloadflags & 1);
	assert_true(img.cmdline_size >= 255);
	assert_true(img.kernel_bytes > (1u << 20));
	assert_true(img.setup_bytes >= 5 * 512);
	assert_int_equal(check(path, NULL, "console=ttyS0 nokaslr", 512ull << 20, err, sizeof(err)), 0);
	/* Debian's kernel unpacks above 16 MiB: 32 MiB cannot hold it. */
	assert_int_equal(check(path, NULL, NULL, 32ull << 20, err, sizeof(err)), -ENOMEM);
	assert_non_null(strstr(err, "--mem"));
	free(buf);
}

static void bad_images_refused(void **state)
{
	uint8_t b[8192];
	char err[512];
	const char *p;

	(void)state;
	make_image(b, sizeof(b), 0x20f, 0x7f, 0x7fffffff, 2047);
	memcpy(b + 0x202, "HdrX", 4);
	p = write_file("nomagic", b, sizeof(b), 0);
	assert_int_equal(check(p, NULL, NULL, 256ull << 20, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "HdrS"));
	assert_non_null(strstr(err, "--kernel"));
	assert_non_null(strstr(err, "nomagic"));

	make_image(b, sizeof(b), 0x209, 0x7f, 0x7fffffff, 2047);
	p = write_file("old", b, sizeof(b), 0);
	assert_int_equal(check(p, NULL, NULL, 256ull << 20, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "2.09"));

	make_image(b, sizeof(b), 0x20f, 0x02, 0x7fffffff, 2047);
	p = write_file("no64", b, sizeof(b), 0);
	assert_int_equal(check(p, NULL, NULL, 256ull << 20, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "64-bit"));

	make_image(b, sizeof(b), 0x20f, 0x7f, 0x7fffffff, 2047);
	b[0x211] = 0;
	p = write_file("zimage", b, sizeof(b), 0);
	assert_int_equal(check(p, NULL, NULL, 256ull << 20, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "bzImage"));

	make_image(b, sizeof(b), 0x20f, 0x7f, 0x7fffffff, 2047);
	p = write_file("truncated", b, 5 * 512, 0);       /* setup only, no kernel */
	assert_int_equal(check(p, NULL, NULL, 256ull << 20, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "truncated"));

	p = write_file("short", "HdrS", 4, 0);
	assert_int_equal(check(p, NULL, NULL, 256ull << 20, err, sizeof(err)), -ENOEXEC);

	memset(b, 0, sizeof(b));
	memcpy(b, "\177ELF", 4);
	p = write_file("vmlinux", b, sizeof(b), 0);
	assert_int_equal(check(p, NULL, NULL, 256ull << 20, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "ELF"));

	assert_int_equal(check(dir, NULL, NULL, 256ull << 20, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not a regular file"));
	p = good_image("good", 0x7fffffff, 2047);
	assert_int_equal(check(p, NULL, NULL, 256ull << 20, err, sizeof(err)), 0);
}

static void limits_refused(void **state)
{
	char err[512], cmdline[64];
	const char *k = good_image("small-cmdline", 0x7fffffff, 16), *initrd, *k2;

	(void)state;
	memset(cmdline, 'a', 16);
	cmdline[16] = 0;
	assert_int_equal(check(k, NULL, cmdline, 256ull << 20, err, sizeof(err)), 0);
	cmdline[16] = 'a';
	cmdline[17] = 0;
	assert_int_equal(check(k, NULL, cmdline, 256ull << 20, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "--append"));
	assert_non_null(strstr(err, "at most 16"));

	/* initrd_addr_max 64 MiB: the kernel ends at 24 MiB (16 MiB + 8 MiB of
	 * init_size), so 40 MiB of initrd fit and 41 MiB do not, whatever --mem. */
	k2 = good_image("low-initrd", (64u << 20) - 1, 2047);
	initrd = write_file("initrd40", "x", 1, 40ull << 20);
	assert_int_equal(check(k2, initrd, NULL, 1ull << 30, err, sizeof(err)), 0);
	initrd = write_file("initrd41", "x", 1, 41ull << 20);
	assert_int_equal(check(k2, initrd, NULL, 1ull << 30, err, sizeof(err)), -EFBIG);
	assert_non_null(strstr(err, "--initrd"));
	assert_non_null(strstr(err, "initrd41"));
	assert_non_null(strstr(err, "initrd_addr_max"));

	/* --mem: 24 MiB of kernel + 40 MiB of initrd + 16 MiB to run = 80 MiB. */
	initrd = write_file("initrd40b", "x", 1, 40ull << 20);
	assert_int_equal(check(k, initrd, NULL, 80ull << 20, err, sizeof(err)), 0);
	assert_int_equal(check(k, initrd, NULL, 78ull << 20, err, sizeof(err)), -ENOMEM);
	assert_non_null(strstr(err, "--mem"));
	assert_non_null(strstr(err, "80 MiB"));
	assert_int_equal(check(k, "/nonexistent-initrd", NULL, 256ull << 20, err, sizeof(err)),
			 -ENOENT);
	assert_non_null(strstr(err, "--initrd /nonexistent-initrd"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(debian_kernel_accepted),
		cmocka_unit_test(bad_images_refused),
		cmocka_unit_test(limits_refused),
	};
	char cmd[96];
	int r;

	snprintf(dir, sizeof(dir), "/tmp/test_linux.XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	r = cmocka_run_group_tests(tests, NULL, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		return 1;
	return r;
}
