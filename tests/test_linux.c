/* machine/linux.c: the checks on a --kernel machine, made before anything
 * is built (no KVM needed):
 *  - Debian's own kernel (/boot/vmlinuz-*) is accepted and its header read
 *    as the boot protocol says (2.10+, 64-bit entry, cmdline_size, ...);
 *  - crafted images are refused for the reason they are bad: no "HdrS",
 *    an old protocol, no 64-bit entry, a zImage, a truncated file;
 *  - an ELF vmlinux: a well-formed one is accepted with its entry and the
 *    span of its PT_LOAD segments; one of another machine, not an
 *    executable, a segment beyond the file or below 1 MiB, program headers
 *    past the end, an entry outside every segment are refused, each by name;
 *  - a command line longer than cmdline_size, an initrd that does not fit
 *    below initrd_addr_max, and --mem too small for kernel + initrd are
 *    refused, naming the option and the file;
 *  - the platform tables a kernel reads (ACPI and MP) checksum to zero,
 *    name every vCPU once, the PM1a and reset ports platform.c serves, and
 *    a DSDT whose AML package lengths nest exactly (PCI0, \_S5);
 *  - the platform ports: the CMOS clock in BCD, SLP_EN and the resets. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "machine/linux.h"
#include "machine/devices.h"
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


	assert_int_equal(check(dir, NULL, NULL, 256ull << 20, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not a regular file"));
	p = good_image("good", 0x7fffffff, 2047);
	assert_int_equal(check(p, NULL, NULL, 256ull << 20, err, sizeof(err)), 0);
}

/* A minimal x86-64 ELF executable: two PT_LOAD segments at 16 MiB (4 KiB
 * of file, 8 KiB in memory) and 20 MiB (4 KiB), a PT_NOTE between them,
 * entry at 16 MiB; 16 KiB of file. */
static void make_elf(uint8_t *b, size_t len)
{
	static const struct { uint32_t type; uint64_t off, pa, filesz, memsz; } ph[3] = {
		{ 1, 0x1000, 0x1000000, 0x1000, 0x2000 },
		{ 4, 0x3000, 0, 0x10, 0x10 },
		{ 1, 0x2000, 0x1400000, 0x1000, 0x1000 },
	};
	uint64_t entry = 0x1000000, phoff = 64;
	uint16_t type = 2, machine = 62, phentsize = 56, phnum = 3;

	memset(b, 0, len);
	memcpy(b, "\177ELF", 4);
	b[4] = 2;                          /* ELFCLASS64 */
	b[5] = 1;                          /* little-endian */
	b[6] = 1;
	memcpy(b + 16, &type, 2);
	memcpy(b + 18, &machine, 2);
	memcpy(b + 24, &entry, 8);
	memcpy(b + 32, &phoff, 8);
	memcpy(b + 54, &phentsize, 2);
	memcpy(b + 56, &phnum, 2);
	for (int i = 0; i < 3; i++) {
		uint8_t *p = b + phoff + 56 * i;

		memcpy(p, &ph[i].type, 4);
		memcpy(p + 8, &ph[i].off, 8);
		memcpy(p + 16, &ph[i].pa, 8);   /* p_vaddr: not read */
		memcpy(p + 24, &ph[i].pa, 8);
		memcpy(p + 32, &ph[i].filesz, 8);
		memcpy(p + 40, &ph[i].memsz, 8);
	}
}

/* The ELF of make_elf with the 8 bytes at off set to v, probed. */
static int probe_elf_with(size_t off, size_t width, uint64_t v, struct linux_image *img,
			  char *err, size_t errlen)
{
	uint8_t b[16384];

	make_elf(b, sizeof(b));
	if (off)
		memcpy(b + off, &v, width);
	err[0] = 0;
	return machine_linux_probe(b, sizeof(b), sizeof(b), img, err, errlen);
}

static void elf_vmlinux(void **state)
{
	struct linux_image img;
	uint8_t b[16384];
	char err[512];
	const char *p;

	(void)state;
	assert_int_equal(probe_elf_with(0, 0, 0, &img, err, sizeof(err)), 0);
	assert_true(img.elf);
	assert_int_equal(img.entry, 0x1000000);
	assert_int_equal(img.load_lo, 0x1000000);
	assert_int_equal(img.load_end, 0x1401000);
	assert_true(img.cmdline_size >= 255);
	make_elf(b, sizeof(b));
	p = write_file("vmlinux", b, sizeof(b), 0);
	assert_int_equal(check(p, NULL, "console=ttyS0", 256ull << 20, err, sizeof(err)), 0);
	/* 20 MiB of kernel and 16 MiB to run do not fit in 32 MiB */
	assert_int_equal(check(p, NULL, NULL, 32ull << 20, err, sizeof(err)), -ENOMEM);
	assert_non_null(strstr(err, "--mem"));

	assert_int_equal(probe_elf_with(18, 2, 3, &img, err, sizeof(err)), -ENOEXEC);  /* i386 */
	assert_non_null(strstr(err, "not a 64-bit x86"));
	assert_int_equal(probe_elf_with(16, 2, 3, &img, err, sizeof(err)), -ENOEXEC);  /* ET_DYN */
	assert_non_null(strstr(err, "not an executable"));
	assert_int_equal(probe_elf_with(56, 2, 400, &img, err, sizeof(err)), -ENOEXEC); /* phnum */
	assert_non_null(strstr(err, "malformed ELF"));
	/* the last segment's file part past the end of the file */
	assert_int_equal(probe_elf_with(64 + 112 + 8, 8, 0x3800, &img, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "segment 2"));
	/* the first segment below 1 MiB */
	assert_int_equal(probe_elf_with(64 + 24, 8, 0x8000, &img, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "segment 0"));
	/* filesz beyond memsz */
	assert_int_equal(probe_elf_with(64 + 40, 8, 0x800, &img, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "segment 0"));
	/* the entry in the gap between the segments */
	assert_int_equal(probe_elf_with(24, 8, 0x1200000, &img, err, sizeof(err)), -ENOEXEC);
	assert_non_null(strstr(err, "entry"));
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

/* A machine with RAM and vCPU count only: the tables need no KVM. */
static struct machine *fake_machine(int ncpus)
{
	struct machine *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->ram = calloc(1, 1 << 20);
	assert_non_null(m->ram);
	m->ncpus = ncpus;
	platform_reset(&m->platform);
	return m;
}

static void free_machine(struct machine *m)
{
	free(m->ram);
	free(m);
}

static uint8_t sum8(const uint8_t *p, size_t n)
{
	uint8_t s = 0;

	while (n--)
		s = (uint8_t)(s + *p++);
	return s;
}

static uint32_t le32(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A table at gpa: its signature, length and checksum. */
static const uint8_t *table(struct machine *m, uint32_t gpa, const char *sig)
{
	const uint8_t *t = m->ram + gpa;

	assert_true(gpa >= LINUX_BIOS_GPA && gpa < (1u << 20));
	assert_memory_equal(t, sig, 4);
	assert_int_equal(sum8(t, le32(t + 4)), 0);
	return t;
}

/* Walks a term list of AML, checking each package's length lands exactly
 * on its end; counts the NameSegs it sees that are wanted. */
static size_t pkg_len(const uint8_t *p, size_t *bytes)
{
	int extra = p[0] >> 6;
	size_t len = extra ? (p[0] & 0x0f) : (p[0] & 0x3f);

	for (int i = 0; i < extra; i++)
		len |= (size_t)p[1 + i] << (4 + 8 * i);
	*bytes = 1 + (size_t)extra;
	return len;
}

static void tables_checksummed(void **state)
{
	for (int ncpus = 1; ncpus <= 8; ncpus += 7) {
		struct machine *m = fake_machine(ncpus);
		uint64_t rsdp_gpa;
		const uint8_t *rsdp, *xsdt, *fadt = NULL, *madt = NULL, *dsdt, *mpf, *mpc, *e;
		uint32_t nent, lapics = 0, ioapics = 0;
		size_t n, lb;

		(void)state;
		assert_int_equal(linux_tables_build(m, &rsdp_gpa), 0);
		rsdp = m->ram + rsdp_gpa;
		assert_memory_equal(rsdp, "RSD PTR ", 8);
		assert_int_equal(sum8(rsdp, 20), 0);
		assert_int_equal(sum8(rsdp, 36), 0);
		assert_int_equal(rsdp[15], 2);
		table(m, le32(rsdp + 16), "RSDT");
		xsdt = table(m, le32(rsdp + 24), "XSDT");
		nent = (le32(xsdt + 4) - 36) / 8;
		for (uint32_t i = 0; i < nent; i++) {
			uint32_t gpa = le32(xsdt + 36 + 8 * i);

			if (!memcmp(m->ram + gpa, "FACP", 4))
				fadt = table(m, gpa, "FACP");
			else
				madt = table(m, gpa, "APIC");
		}
		assert_non_null(fadt);
		assert_non_null(madt);
		assert_memory_equal(m->ram + le32(fadt + 36), "FACS", 4);
		assert_int_equal(le32(fadt + 56), LINUX_ACPI_PM1_EVT);
		assert_int_equal(le32(fadt + 64), LINUX_ACPI_PM1_CNT);
		assert_int_equal(fadt[88], 4);
		assert_int_equal(fadt[89], 2);
		assert_int_equal(le32(fadt + 48), 0);          /* no SMI port: ACPI mode */
		assert_int_equal(le32(fadt + 116 + 4), LINUX_RESET_PORT);
		assert_int_equal(fadt[128], 6);
		assert_true(le32(fadt + 112) & (1u << 10));    /* reset register supported */
		for (e = madt + 44; e < madt + le32(madt + 4); e += e[1]) {
			assert_true(e[1] >= 2);
			if (e[0] == 0) {
				assert_int_equal(e[3], lapics);    /* APIC ID = vCPU index */
				lapics++;
			}
			ioapics += e[0] == 1;
		}
		assert_true(e == madt + le32(madt + 4));
		assert_int_equal(lapics, ncpus);
		assert_int_equal(ioapics, 1);

		/* DSDT: Scope(\_SB_) { Device(PCI0) {...} } then Name(_S5_, Package). */
		dsdt = table(m, le32(fadt + 40), "DSDT");
		e = dsdt + 36;
		assert_int_equal(e[0], 0x10);
		n = pkg_len(e + 1, &lb);
		assert_memory_equal(e + 1 + lb, "\\_SB_", 5);
		assert_int_equal(e[1 + lb + 5], 0x5b);
		assert_int_equal(e[1 + lb + 6], 0x82);
		{
			const uint8_t *d = e + 1 + lb + 7;
			size_t dlb, dn = pkg_len(d, &dlb);

			assert_memory_equal(d + dlb, "PCI0", 4);
			assert_true(d + dn == e + 1 + n);   /* the device ends the scope */
			assert_non_null(memmem(d, dn, "\x0c\x41\xd0\x0a\x03", 5));   /* PNP0A03 */
		}
		e += 1 + n;
		assert_memory_equal(e, "\x08_S5_\x12", 6);
		n = pkg_len(e + 6, &lb);
		assert_int_equal(e[6 + lb], 4);
		assert_true(e + 6 + n == dsdt + le32(dsdt + 4));

		mpf = m->ram + LINUX_EBDA_GPA;
		assert_memory_equal(mpf, "_MP_", 4);
		assert_int_equal(sum8(mpf, 16), 0);
		mpc = m->ram + le32(mpf + 4);
		assert_memory_equal(mpc, "PCMP", 4);
		assert_int_equal(sum8(mpc, mpc[4] | mpc[5] << 8), 0);
		assert_int_equal(mpc[44], 0);                  /* first entry: a processor */
		assert_int_equal(mpc[44 + 3], 3);              /* enabled, bootstrap */
		free_machine(m);
	}
}

static uint8_t io(struct machine *m, uint16_t port, int size, bool write, uint8_t v)
{
	uint8_t data[4] = { v, 0, 0, 0 };

	assert_true(platform_io(m, port, size, write, data));
	return data[0];
}

static int from_bcd(uint8_t v)
{
	return (v >> 4) * 10 + (v & 0xf);
}

static void platform_ports(void **state)
{
	struct machine *m = fake_machine(1);
	time_t now;
	struct tm tm;
	uint8_t data[4] = { 0 };
	int year;

	(void)state;
	io(m, 0x70, 1, true, 0x0a);
	assert_false(io(m, 0x71, 1, false, 0) & 0x80);     /* no update in progress */
	io(m, 0x70, 1, true, 0x8b);                         /* NMI mask bit ignored */
	assert_int_equal(io(m, 0x71, 1, false, 0), 0x02);   /* 24-hour, BCD */
	now = time(NULL);
	gmtime_r(&now, &tm);
	io(m, 0x70, 1, true, 0x09);
	year = from_bcd(io(m, 0x71, 1, false, 0));
	io(m, 0x70, 1, true, 0x32);
	year += 100 * from_bcd(io(m, 0x71, 1, false, 0));
	assert_true(year == tm.tm_year + 1900 || year == tm.tm_year + 1901);
	io(m, 0x70, 1, true, 0x40);                         /* CMOS RAM keeps a byte */
	io(m, 0x71, 1, true, 0x5a);
	assert_int_equal(io(m, 0x71, 1, false, 0), 0x5a);

	/* PM1a control: SCI_EN reads set; SLP_TYP alone does nothing, SLP_EN stops. */
	data[0] = 0;
	assert_true(platform_io(m, LINUX_ACPI_PM1_CNT, 2, false, data));
	assert_int_equal(data[0] & 1, 1);
	data[0] = 0x01;
	data[1] = 0x14;                                     /* SLP_TYP 5 */
	assert_true(platform_io(m, LINUX_ACPI_PM1_CNT, 2, true, data));
	assert_int_equal(m->platform.stop_req, 0);
	data[1] = 0x34;                                     /* | SLP_EN */
	assert_true(platform_io(m, LINUX_ACPI_PM1_CNT, 2, true, data));
	assert_int_equal(m->platform.stop_req, 1);

	platform_reset(&m->platform);
	assert_false(platform_io(m, LINUX_RESET_PORT - 1, 4, true, data));   /* PCI's 0xCF8 */
	assert_false(platform_io(m, LINUX_RESET_PORT, 4, true, data));
	io(m, LINUX_RESET_PORT, 1, true, 0x02);
	assert_int_equal(m->platform.stop_req, 0);
	io(m, LINUX_RESET_PORT, 1, true, 0x06);
	assert_int_equal(m->platform.stop_req, 2);
	platform_reset(&m->platform);
	assert_int_equal(io(m, 0x64, 1, false, 0xff), 0);  /* i8042: nothing to wait for */
	io(m, 0x64, 1, true, 0xfe);
	assert_int_equal(m->platform.stop_req, 2);
	assert_false(platform_io(m, 0x80, 1, true, data));
	free_machine(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(debian_kernel_accepted),
		cmocka_unit_test(bad_images_refused),
		cmocka_unit_test(elf_vmlinux),
		cmocka_unit_test(limits_refused),
		cmocka_unit_test(tables_checksummed),
		cmocka_unit_test(platform_ports),
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
