/* Linux guests: the x86 boot protocol's 64-bit entry (Documentation/arch/
 * x86/boot.rst). The host does what a boot loader would: the protected-mode
 * kernel of the bzImage at 1 MiB, the zero page (struct boot_params) with
 * the image's setup header, an e820 map, the command line and the initrd,
 * identity page tables and a flat GDT; vCPU 0 starts in long mode at the
 * 64-bit entry (load address + 0x200) with RSI pointing at the zero page.
 * An uncompressed ELF vmlinux (as Firecracker boots) is loaded segment by
 * segment at its physical addresses and entered at its own entry point,
 * with a setup header written by the loader (a vmlinux carries none).
 * The other vCPUs wait for the kernel's INIT/SIPI in the in-kernel LAPIC.
 * The platform tables that tell the kernel about them are linux_tables.c's.
 *
 * Guest-physical layout below 1 MiB (all of it RAM):
 *   0x00500  GDT               0x07000  zero page        0x08ff0  boot stack
 *   0x09000  PML4, PDPT, 4 PDs (identity map of the first 4 GiB, 2 MiB pages)
 *   0x20000  command line      0x9fc00..0xa0000, 0xe0000..0x100000: reserved
 *                              (platform tables, linux_tables.c) */
#include "machine/machine.h"
#include "machine/machine_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kmod/le.h"
#include "machine/linux.h"

#define TAG "linux"

/* Setup header fields, as offsets into the file (and into boot_params). */
#define HDR_SETUP_SECTS     0x1f1
#define HDR_BOOT_FLAG       0x1fe
#define HDR_JUMP            0x200
#define HDR_MAGIC           0x202
#define HDR_VERSION         0x206
#define HDR_TYPE_OF_LOADER  0x210
#define HDR_LOADFLAGS       0x211
#define HDR_RAMDISK_IMAGE   0x218
#define HDR_RAMDISK_SIZE    0x21c
#define HDR_HEAP_END_PTR    0x224
#define HDR_CMD_LINE_PTR    0x228
#define HDR_INITRD_ADDR_MAX 0x22c
#define HDR_KERNEL_ALIGN    0x230
#define HDR_RELOCATABLE     0x234
#define HDR_XLOADFLAGS      0x236
#define HDR_CMDLINE_SIZE    0x238
#define HDR_PREF_ADDRESS    0x258
#define HDR_INIT_SIZE       0x260
#define HDR_MIN_BYTES       0x264   /* through init_size */

/* boot_params outside the setup header. */
#define BP_ACPI_RSDP_ADDR   0x070
#define BP_E820_ENTRIES     0x1e8
#define BP_E820_TABLE       0x2d0
#define BP_E820_MAX         128

#define LOADED_HIGH   0x01
#define CAN_USE_HEAP  0x80
#define XLF_KERNEL_64 0x01

#define GDT_GPA        0x500ull
#define ZERO_PAGE_GPA  0x7000ull
#define STACK_TOP_GPA  0x8ff0ull
#define PML4_GPA       0x9000ull
#define CMDLINE_GPA    0x20000ull
#define KERNEL_GPA     0x100000ull
#define LINUX_MIN_FREE (16ull << 20)   /* RAM beyond kernel and initrd to run at all */

#define SEL_CODE 0x10   /* __BOOT_CS */
#define SEL_DATA 0x18   /* __BOOT_DS */
#define SEL_TSS  0x20

/* ---- an ELF vmlinux --------------------------------------------------- */

/* ELF64 header and program header fields (the System V ABI's layout). */
#define ELF_CLASS       4      /* 2: 64-bit */
#define ELF_DATA        5      /* 1: little-endian */
#define ELF_TYPE        16     /* 2: ET_EXEC */
#define ELF_MACHINE     18     /* 62: EM_X86_64 */
#define ELF_ENTRY       24
#define ELF_PHOFF       32
#define ELF_PHENTSIZE   54
#define ELF_PHNUM       56
#define ELF_HDR_BYTES   64
#define PH_TYPE         0      /* 1: PT_LOAD */
#define PH_OFFSET       8
#define PH_PADDR        24
#define PH_FILESZ       32
#define PH_MEMSZ        40
#define PH_BYTES        56
#define ELF_PT_LOAD     1
/* What a vmlinux's own setup header would say; the loader writes it. */
#define ELF_CMDLINE_SIZE    2047         /* COMMAND_LINE_SIZE - 1 */
#define ELF_INITRD_ADDR_MAX 0x37ffffffu  /* the protocol's default */
#define ELF_KERNEL_ALIGN    0x200000u

/* The i-th program header of an image probe_elf accepted. */
static const uint8_t *elf_phdr(const uint8_t *buf, unsigned i)
{
	return buf + le_get64(buf + ELF_PHOFF) + (uint64_t)i * PH_BYTES;
}

/* An uncompressed vmlinux (the kernel build's vmlinux, or the ELF inside a
 * bzImage): x86-64, executable, its PT_LOAD segments inside the file and
 * at physical addresses from 1 MiB up, the program headers within the
 * first len bytes read. */
static int probe_elf(const uint8_t *buf, size_t len, uint64_t file_bytes,
		     struct linux_image *img, char *err, size_t errlen)
{
	uint64_t phoff, lo = UINT64_MAX, end = 0, entry = le_get64(buf + ELF_ENTRY);
	unsigned phnum, held = 0;

	if (len < ELF_HDR_BYTES || buf[ELF_CLASS] != 2 || buf[ELF_DATA] != 1 ||
	    le_get16(buf + ELF_MACHINE) != 62) {
		snprintf(err, errlen, "an ELF file, but not a 64-bit x86 one (class %u, machine %u)",
			 len > ELF_CLASS ? buf[ELF_CLASS] : 0,
			 len >= ELF_HDR_BYTES ? le_get16(buf + ELF_MACHINE) : 0);
		return -ENOEXEC;
	}
	if (le_get16(buf + ELF_TYPE) != 2) {
		snprintf(err, errlen, "an ELF file but not an executable (e_type %u): give the "
			 "kernel's vmlinux or its bzImage", le_get16(buf + ELF_TYPE));
		return -ENOEXEC;
	}
	phoff = le_get64(buf + ELF_PHOFF);
	phnum = le_get16(buf + ELF_PHNUM);
	if (le_get16(buf + ELF_PHENTSIZE) != PH_BYTES || !phnum || phoff > len ||
	    (uint64_t)phnum * PH_BYTES > len - phoff) {
		snprintf(err, errlen, "truncated or malformed ELF (%u program headers of %u bytes "
			 "at %llu)", phnum, le_get16(buf + ELF_PHENTSIZE), (unsigned long long)phoff);
		return -ENOEXEC;
	}
	for (unsigned i = 0; i < phnum; i++) {
		const uint8_t *ph = elf_phdr(buf, i);
		uint64_t off = le_get64(ph + PH_OFFSET), pa = le_get64(ph + PH_PADDR);
		uint64_t filesz = le_get64(ph + PH_FILESZ), memsz = le_get64(ph + PH_MEMSZ);

		if (le_get32(ph + PH_TYPE) != ELF_PT_LOAD)
			continue;
		if (filesz > memsz || off > file_bytes || filesz > file_bytes - off ||
		    pa < KERNEL_GPA || pa >= MACHINE_LOW_RAM_MAX || memsz > MACHINE_LOW_RAM_MAX - pa) {
			snprintf(err, errlen, "ELF segment %u (%llu bytes of file at %llu, %llu in "
				 "memory at 0x%llx) is outside the file or below 1 MiB", i,
				 (unsigned long long)filesz, (unsigned long long)off,
				 (unsigned long long)memsz, (unsigned long long)pa);
			return -ENOEXEC;
		}
		lo = pa < lo ? pa : lo;
		end = pa + memsz > end ? pa + memsz : end;
		held |= entry >= pa && entry - pa < memsz;
	}
	if (!held) {
		snprintf(err, errlen, "ELF without a loadable segment holding its entry 0x%llx",
			 (unsigned long long)entry);
		return -ENOEXEC;
	}
	img->elf = 1;
	img->entry = entry;
	img->load_lo = lo;
	img->load_end = end;
	img->pref_address = lo;
	img->kernel_bytes = end - lo;
	img->init_size = (uint32_t)(end - lo);
	img->cmdline_size = ELF_CMDLINE_SIZE;
	img->initrd_addr_max = ELF_INITRD_ADDR_MAX;
	img->kernel_alignment = ELF_KERNEL_ALIGN;
	img->xloadflags = XLF_KERNEL_64;
	return 0;
}

int machine_linux_probe(const uint8_t *buf, size_t len, uint64_t file_bytes,
			struct linux_image *img, char *err, size_t errlen)
{
	unsigned sects;

	memset(img, 0, sizeof(*img));
	if (len >= 4 && !memcmp(buf, "\177ELF", 4))
		return probe_elf(buf, len, file_bytes, img, err, errlen);
	if (len < HDR_MIN_BYTES || memcmp(buf + HDR_MAGIC, "HdrS", 4) ||
	    le_get16(buf + HDR_BOOT_FLAG) != 0xaa55) {
		snprintf(err, errlen, "not a Linux kernel image (no \"HdrS\" setup header at 0x%x)",
			 HDR_MAGIC);
		return -ENOEXEC;
	}
	img->version = le_get16(buf + HDR_VERSION);
	if (img->version < 0x20a) {
		snprintf(err, errlen, "boot protocol %u.%02u is too old: need 2.10 or later",
			 img->version >> 8, img->version & 0xff);
		return -ENOEXEC;
	}
	img->loadflags = buf[HDR_LOADFLAGS];
	img->xloadflags = le_get16(buf + HDR_XLOADFLAGS);
	img->relocatable = buf[HDR_RELOCATABLE];
	img->initrd_addr_max = le_get32(buf + HDR_INITRD_ADDR_MAX);
	img->kernel_alignment = le_get32(buf + HDR_KERNEL_ALIGN);
	img->cmdline_size = le_get32(buf + HDR_CMDLINE_SIZE);
	img->pref_address = le_get64(buf + HDR_PREF_ADDRESS);
	img->init_size = le_get32(buf + HDR_INIT_SIZE);
	img->header_end = HDR_MAGIC + buf[HDR_JUMP + 1];
	if (!(img->loadflags & LOADED_HIGH)) {
		snprintf(err, errlen, "not a bzImage (a zImage loads below 1 MiB)");
		return -ENOEXEC;
	}
	if (!(img->xloadflags & XLF_KERNEL_64)) {
		snprintf(err, errlen, "no 64-bit entry point (xloadflags 0x%x lacks XLF_KERNEL_64): "
			 "a 64-bit x86 kernel is needed", img->xloadflags);
		return -ENOEXEC;
	}
	sects = buf[HDR_SETUP_SECTS] ? buf[HDR_SETUP_SECTS] : 4;
	img->setup_bytes = (uint64_t)(sects + 1) * 512;
	if (img->setup_bytes >= file_bytes || img->header_end > img->setup_bytes ||
	    img->header_end < HDR_MIN_BYTES) {
		snprintf(err, errlen, "truncated or malformed image (setup of %llu bytes in a file "
			 "of %llu)", (unsigned long long)img->setup_bytes,
			 (unsigned long long)file_bytes);
		return -ENOEXEC;
	}
	img->kernel_bytes = file_bytes - img->setup_bytes;
	if (img->init_size < img->kernel_bytes)
		img->init_size = (uint32_t)img->kernel_bytes;
	return 0;
}

/* First 64 KiB of path (the whole setup part fits) and its size. */
static int read_head(const char *path, uint8_t *buf, size_t cap, size_t *len, uint64_t *size)
{
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		r = S_ISREG(st.st_mode) ? -errno : -EINVAL;
		goto out;
	}
	n = pread(fd, buf, cap, 0);
	if (n < 0) {
		r = -errno;
		goto out;
	}
	*len = (size_t)n;
	*size = (uint64_t)st.st_size;
out:
	close(fd);
	return r;
}

static uint64_t low_ram_end(const struct machine_config *cfg)
{
	return cfg->mem_bytes < MACHINE_LOW_RAM_MAX ? cfg->mem_bytes : MACHINE_LOW_RAM_MAX;
}

/* Where the kernel's memory ends: the image at 1 MiB and what it unpacks
 * into from its preferred address (it moves itself up to at least that). */
static uint64_t kernel_end(const struct linux_image *img)
{
	uint64_t run = img->pref_address > KERNEL_GPA ? img->pref_address : KERNEL_GPA;
	uint64_t end = run + img->init_size;

	if (end < KERNEL_GPA + img->kernel_bytes)
		end = KERNEL_GPA + img->kernel_bytes;
	return (end + MACHINE_MEM_ALIGN - 1) & ~(MACHINE_MEM_ALIGN - 1);
}

/* The initrd's address: as high as low RAM and initrd_addr_max allow, page
 * aligned; 0 when it does not fit above the kernel. */
static uint64_t initrd_gpa(const struct machine_config *cfg, const struct linux_image *img,
			   uint64_t initrd_bytes)
{
	uint64_t top = low_ram_end(cfg);

	if (top > (uint64_t)img->initrd_addr_max + 1)
		top = (uint64_t)img->initrd_addr_max + 1;
	if (initrd_bytes > top || ((top - initrd_bytes) & ~(KVM_PAGE_SIZE - 1)) < kernel_end(img))
		return 0;
	return (top - initrd_bytes) & ~(KVM_PAGE_SIZE - 1);
}

int machine_linux_check(const struct machine_config *cfg, char *err, size_t errlen)
{
	uint8_t *buf = malloc(LINUX_HEAD_BYTES);
	struct linux_image img;
	uint64_t size, initrd_bytes = 0, need;
	size_t len = 0, cmdlen = strlen(cfg->append);
	char why[200];
	int r;

	if (!buf)
		return -ENOMEM;
	r = read_head(cfg->kernel, buf, LINUX_HEAD_BYTES, &len, &size);
	if (r < 0) {
		snprintf(err, errlen, "--kernel %s: %s", cfg->kernel,
			 r == -EINVAL ? "not a regular file" : strerror(-r));
		goto out;
	}
	r = machine_linux_probe(buf, len, size, &img, why, sizeof(why));
	if (r < 0) {
		snprintf(err, errlen, "--kernel %s: %s", cfg->kernel, why);
		goto out;
	}
	if (cmdlen > img.cmdline_size) {
		snprintf(err, errlen, "--append: %zu bytes, but kernel %s takes at most %u", cmdlen,
			 cfg->kernel, img.cmdline_size);
		r = -E2BIG;
		goto out;
	}
	if (cfg->initrd[0]) {
		r = read_head(cfg->initrd, buf, 1, &len, &initrd_bytes);
		if (r < 0) {
			snprintf(err, errlen, "--initrd %s: %s", cfg->initrd,
				 r == -EINVAL ? "not a regular file" : strerror(-r));
			goto out;
		}
		if (initrd_bytes + kernel_end(&img) > (uint64_t)img.initrd_addr_max + 1) {
			snprintf(err, errlen, "--initrd %s: %llu MiB does not fit between the kernel "
				 "(up to %llu MiB) and its initrd_addr_max (0x%x)", cfg->initrd,
				 (unsigned long long)(initrd_bytes >> 20),
				 (unsigned long long)(kernel_end(&img) >> 20), img.initrd_addr_max);
			r = -EFBIG;
			goto out;
		}
	}
	need = kernel_end(&img) + ((initrd_bytes + KVM_PAGE_SIZE - 1) & ~(KVM_PAGE_SIZE - 1)) +
	       LINUX_MIN_FREE;
	if (low_ram_end(cfg) < need) {
		snprintf(err, errlen, "--mem %llu MiB is too small for kernel %s%s%s: it needs at "
			 "least %llu MiB (the kernel unpacked up to %llu MiB, %llu MiB of initrd, "
			 "%llu MiB to run)", (unsigned long long)(cfg->mem_bytes >> 20), cfg->kernel,
			 initrd_bytes ? " and initrd " : "", cfg->initrd,
			 (unsigned long long)((need + (1 << 20) - 1) >> 20),
			 (unsigned long long)(kernel_end(&img) >> 20),
			 (unsigned long long)((initrd_bytes + (1 << 20) - 1) >> 20),
			 (unsigned long long)(LINUX_MIN_FREE >> 20));
		r = -ENOMEM;
		goto out;
	}
	r = 0;
out:
	free(buf);
	return r;
}

/* ---- loading ------------------------------------------------------------ */

static void *gpa_ptr(struct machine *m, uint64_t gpa)
{
	return m->ram + gpa;
}

/* Reads all of path into guest RAM at gpa (at most max bytes). */
static int load_file(struct machine *m, const char *path, uint64_t off, uint64_t gpa,
		     uint64_t bytes)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint64_t done = 0;
	int r = 0;

	if (fd < 0)
		return -errno;
	while (done < bytes) {
		ssize_t n = pread(fd, gpa_ptr(m, gpa + done), bytes - done, (off_t)(off + done));

		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0) {
			r = -EIO;     /* shrank since it was checked */
			break;
		}
		done += (uint64_t)n;
	}
	close(fd);
	machine_mark_dirty(m, gpa, bytes);
	return r;
}

/* The PT_LOAD segments of an ELF vmlinux at their physical addresses, the
 * part of each beyond the file (its .bss) zeroed. */
static int load_elf(struct machine *m, const char *path, const uint8_t *head, unsigned phnum)
{
	int r;

	for (unsigned i = 0; i < phnum; i++) {
		const uint8_t *ph = elf_phdr(head, i);
		uint64_t pa = le_get64(ph + PH_PADDR), filesz = le_get64(ph + PH_FILESZ);
		uint64_t memsz = le_get64(ph + PH_MEMSZ);

		if (le_get32(ph + PH_TYPE) != ELF_PT_LOAD)
			continue;
		if ((r = load_file(m, path, le_get64(ph + PH_OFFSET), pa, filesz)) < 0)
			return r;
		memset(gpa_ptr(m, pa + filesz), 0, memsz - filesz);
		machine_mark_dirty(m, pa + filesz, memsz - filesz);
	}
	return 0;
}

static void e820_add(uint8_t *zp, uint64_t addr, uint64_t size, uint32_t type)
{
	uint8_t n = zp[BP_E820_ENTRIES];
	uint8_t *e = zp + BP_E820_TABLE + 20 * (size_t)n;

	if (n >= BP_E820_MAX || !size)
		return;
	le_put64(e, addr);
	le_put64(e + 8, size);
	le_put32(e + 16, type);
	zp[BP_E820_ENTRIES] = (uint8_t)(n + 1);
}

/* The map: base memory up to the EBDA, the BIOS area with the platform
 * tables reserved, RAM from 1 MiB to the PCI hole at 3 GiB, RAM above 4 GiB. */
static void build_e820(struct machine *m, uint8_t *zp)
{
	uint64_t low = m->low_pages * KVM_PAGE_SIZE, high = (m->ram_pages - m->low_pages) * KVM_PAGE_SIZE;

	e820_add(zp, 0, LINUX_EBDA_GPA, LINUX_E820_RAM);
	e820_add(zp, LINUX_EBDA_GPA, 0xa0000 - LINUX_EBDA_GPA, LINUX_E820_RESERVED);
	e820_add(zp, LINUX_BIOS_GPA, KERNEL_GPA - LINUX_BIOS_GPA, LINUX_E820_RESERVED);
	e820_add(zp, KERNEL_GPA, low - KERNEL_GPA, LINUX_E820_RAM);
	e820_add(zp, MACHINE_HIGH_RAM_GPA, high, LINUX_E820_RAM);
}

/* Identity map of the first 4 GiB in 2 MiB pages (the kernel builds its
 * own tables at once; these only have to cover kernel, zero page, command
 * line and initrd). */
static void build_page_tables(struct machine *m)
{
	uint64_t *pml4 = gpa_ptr(m, PML4_GPA), *pdpt = pml4 + 512;

	memset(pml4, 0, 6 * KVM_PAGE_SIZE);
	pml4[0] = (PML4_GPA + 0x1000) | 0x3;
	for (uint64_t g = 0; g < 4; g++) {
		uint64_t *pd = gpa_ptr(m, PML4_GPA + 0x2000 + g * 0x1000);

		pdpt[g] = (PML4_GPA + 0x2000 + g * 0x1000) | 0x3;
		for (uint64_t i = 0; i < 512; i++)
			pd[i] = ((g << 30) + (i << 21)) | 0x83;   /* present, writable, 2 MiB */
	}
	machine_mark_dirty(m, PML4_GPA, 6 * KVM_PAGE_SIZE);
}

static void build_gdt(struct machine *m)
{
	uint64_t *gdt = gpa_ptr(m, GDT_GPA);

	gdt[0] = 0;
	gdt[1] = 0;
	gdt[SEL_CODE / 8] = 0x00af9b000000ffffull;   /* 64-bit code, flat */
	gdt[SEL_DATA / 8] = 0x00cf93000000ffffull;   /* data, flat 4 GiB */
	gdt[SEL_TSS / 8] = 0x00008b0000000067ull;    /* 64-bit TSS, busy, base 0 */
	gdt[SEL_TSS / 8 + 1] = 0;
	machine_mark_dirty(m, GDT_GPA, 6 * 8);
}

/* vCPU 0 at the 64-bit entry rip: long mode, paging on the identity map,
 * flat __BOOT_CS/__BOOT_DS, interrupts off, RSI = zero page. */
static int boot_bsp(struct machine *m, uint64_t rip)
{
	struct kvm_vcpu *v = &m->vcpus[0].kvm;
	struct kvm_segment code = {
		.base = 0, .limit = 0xffffffff, .selector = SEL_CODE, .type = 11, .present = 1,
		.s = 1, .l = 1, .g = 1,
	};
	struct kvm_segment data = {
		.base = 0, .limit = 0xffffffff, .selector = SEL_DATA, .type = 3, .present = 1,
		.s = 1, .db = 1, .g = 1,
	};
	struct kvm_regs r = {
		.rip = rip, .rsi = ZERO_PAGE_GPA, .rsp = STACK_TOP_GPA, .rflags = 2,
	};
	struct kvm_sregs s;
	int rc;

	if ((rc = kvm_vcpu_get_sregs(v, &s)) < 0)
		return rc;
	s.cs = code;
	s.ds = s.es = s.fs = s.gs = s.ss = data;
	s.tr = (struct kvm_segment){ .base = 0, .limit = 0x67, .selector = SEL_TSS, .type = 11,
				     .present = 1 };
	s.ldt = (struct kvm_segment){ .type = 2, .present = 1, .unusable = 1 };
	s.gdt.base = GDT_GPA;
	s.gdt.limit = 6 * 8 - 1;
	s.idt.base = 0;
	s.idt.limit = 0;
	s.cr0 = 0x1 | 0x10 | 0x80000000ull;    /* PE, ET, PG */
	s.cr3 = PML4_GPA;
	s.cr4 = 0x20;                          /* PAE */
	s.efer = 0x100 | 0x400;                /* LME, LMA */
	if ((rc = kvm_vcpu_set_sregs(v, &s)) < 0 || (rc = kvm_vcpu_set_regs(v, &r)) < 0)
		return rc;
	return 0;
}

int machine_boot_linux(struct machine *m)
{
	const struct machine_config *cfg = &m->cfg;
	uint8_t *head = malloc(LINUX_HEAD_BYTES), *zp = gpa_ptr(m, ZERO_PAGE_GPA);
	struct linux_image img;
	uint64_t size = 0, initrd_bytes = 0, initrd_at = 0, rsdp = 0;
	size_t len = 0;
	char why[256];
	const char *file = cfg->kernel;
	int r;

	if (!head)
		return -ENOMEM;
	/* Checked by the command line already; checked again, the files may
	 * have changed since. */
	if ((r = machine_linux_check(cfg, why, sizeof(why))) < 0 ||
	    (r = read_head(cfg->kernel, head, LINUX_HEAD_BYTES, &len, &size)) < 0 ||
	    (r = machine_linux_probe(head, len, size, &img, why, sizeof(why))) < 0) {
		log_error(TAG, "%s", r == -ENOMEM || r == -EIO ? strerror(-r) : why);
		goto out;
	}
	if (cfg->initrd[0]) {
		file = cfg->initrd;
		if ((r = read_head(cfg->initrd, head, 1, &len, &initrd_bytes)) < 0)
			goto err_file;
		initrd_at = initrd_gpa(cfg, &img, initrd_bytes);
		if (!initrd_at || (r = load_file(m, cfg->initrd, 0, initrd_at, initrd_bytes)) < 0) {
			r = r < 0 ? r : -EFBIG;
			goto err_file;
		}
	}
	file = cfg->kernel;
	if ((r = read_head(cfg->kernel, head, LINUX_HEAD_BYTES, &len, &size)) < 0)
		goto err_file;
	r = img.elf ? load_elf(m, cfg->kernel, head, le_get16(head + ELF_PHNUM)) :
		      load_file(m, cfg->kernel, img.setup_bytes, KERNEL_GPA, img.kernel_bytes);
	if (r < 0)
		goto err_file;

	memset(zp, 0, KVM_PAGE_SIZE);
	if (img.elf) {
		/* No setup header in a vmlinux: the fields the kernel reads. */
		le_put16(zp + HDR_BOOT_FLAG, 0xaa55);
		memcpy(zp + HDR_MAGIC, "HdrS", 4);
		zp[HDR_LOADFLAGS] = LOADED_HIGH;
		le_put32(zp + HDR_KERNEL_ALIGN, img.kernel_alignment);
		le_put32(zp + HDR_INITRD_ADDR_MAX, img.initrd_addr_max);
		le_put32(zp + HDR_CMDLINE_SIZE, img.cmdline_size);
	} else {
		memcpy(zp + HDR_SETUP_SECTS, head + HDR_SETUP_SECTS, img.header_end - HDR_SETUP_SECTS);
	}
	zp[HDR_TYPE_OF_LOADER] = 0xff;
	zp[HDR_LOADFLAGS] = (uint8_t)(img.loadflags | CAN_USE_HEAP);
	le_put16(zp + HDR_HEAP_END_PTR, 0xe000 - 0x200);
	le_put32(zp + HDR_CMD_LINE_PTR, (uint32_t)CMDLINE_GPA);
	le_put32(zp + HDR_RAMDISK_IMAGE, (uint32_t)initrd_at);
	le_put32(zp + HDR_RAMDISK_SIZE, (uint32_t)initrd_bytes);
	memcpy(gpa_ptr(m, CMDLINE_GPA), cfg->append, strlen(cfg->append) + 1);
	machine_mark_dirty(m, CMDLINE_GPA, strlen(cfg->append) + 1);
	build_e820(m, zp);
	if ((r = linux_tables_build(m, &rsdp)) < 0)
		goto out;
	le_put64(zp + BP_ACPI_RSDP_ADDR, rsdp);
	machine_mark_dirty(m, ZERO_PAGE_GPA, KVM_PAGE_SIZE);
	build_page_tables(m);
	build_gdt(m);

	machine_snap_drop(m);   /* vCPU state is about to change (CPUID was set at creation) */
	if ((r = boot_bsp(m, img.elf ? img.entry : KERNEL_GPA + 0x200)) < 0) {
		log_error(TAG, "boot state of vCPU 0: %s", strerror(-r));
		goto out;
	}
	if (img.elf)
		log_info(TAG, "kernel %s (ELF vmlinux, %llu KiB) at 0x%llx, entry 0x%llx",
			 cfg->kernel, (unsigned long long)(img.kernel_bytes >> 10),
			 (unsigned long long)img.load_lo, (unsigned long long)img.entry);
	else
		log_info(TAG, "kernel %s (bzImage, boot protocol %u.%02u, %llu KiB) at 0x%llx",
			 cfg->kernel, img.version >> 8, img.version & 0xff,
			 (unsigned long long)(img.kernel_bytes >> 10), (unsigned long long)KERNEL_GPA);
	log_info(TAG, "initrd %llu KiB at 0x%llx, %d vCPU(s)",
		 (unsigned long long)(initrd_bytes >> 10), (unsigned long long)initrd_at, m->ncpus);
	r = 0;
	goto out;
err_file:
	log_error(TAG, "loading %s: %s", file, strerror(-r));
out:
	free(head);
	return r;
}
