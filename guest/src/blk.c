/* blk: the virtio-blk driver (vblk.c over the virtio-pci transport, vpci.c)
 * driven from the console.
 *
 * At boot it enumerates PCI bus 0 through ports 0xCF8/0xCFC, finds the
 * virtio-blk function (1af4:1042), sizes its BAR as a firmware or OS does
 * (all-ones written with memory decoding off, then restored); vblk_init then
 * walks the virtio capabilities, negotiates VERSION_1 (+ FLUSH and DISCARD
 * when offered) and sets up queue 0 with interrupts off
 * (VIRTQ_AVAIL_F_NO_INTERRUPT, no MSI-X vector): it polls the used ring
 * ('msix' checks that interrupts come when asked for). One request at a
 * time: header, data, status, three descriptors. Requests go out unchecked
 * (vblk_request), so a bad sector is the device's error status.
 *
 * Console, one reply line per request:
 *   info                      "blk capacity=N features=HEX bar=HEX bar_size=N queue=N"
 *   write SECTOR HEX          the bytes given, zero-padded to a sector; "ok"
 *   read SECTOR               "data " + the sector's first 32 bytes in hex
 *   selftest START N PASS     writes a pattern to N sectors from START (8
 *                             sectors a request), reads them back, compares:
 *                             "ok N" or "bad SECTOR"
 *   check START N PASS        reads and compares only: "ok N" or "bad SECTOR"
 *   log START N COUNT PACE [EVERY]  a write log on a ring of N 4 KiB blocks from
 *                             sector START: record s (0, 1, ...) goes to block
 *                             s mod N, "w s" once its write completed; before
 *                             it, block s mod N must hold record s - N (zeros
 *                             while s < N) and block (s - 1) mod N record
 *                             s - 1, else "bad ahead|behind s ..." and power
 *                             off 3 (the image is not what this guest wrote
 *                             up to now). COUNT records (0: forever), PACE us
 *                             apart; then "log done COUNT". With EVERY, only
 *                             every EVERY-th record is said (benchmarks).
 *   flush / id / discard SECTOR N
 *   msix                      one read with interrupts on (MSI-X entry 0,
 *                             vector 0x20): "msix ok" when exactly one came
 *   evil                      hands the device a descriptor outside RAM;
 *                             "needs-reset" if the device says so, then
 *                             re-initialises the device ("reinit ok")
 *   halt
 * The pattern of sector s in pass p is 16 lines of 32 bytes:
 *   "s0000000005 p00001 l00 ........\n" (s, p, line number, zero-padded). */

#include "vblk.h"

#include "glib.h"

#define CHUNK 8               /* sectors a request in selftest */

struct drv {
	struct vblk b;
	uint64_t bar_size;
	uint8_t *mem, *buf, *buf2;
};

/* CPL0, as the common runtime's entry plus: gs base = a word per vCPU at
 * IRQ_COUNT_GPA (the interrupt count), x2APIC on (spurious vector 0xff);
 * then iretq to CPL3. An MSI-X message of the disk, vector
 * GUEST_TIMER_VECTOR (the gate the loader installs), counts in that word
 * and EOIs. rdi, rsi survive. */
#define IRQ_COUNT_GPA 0x403800   /* GUEST_HEAP_GPA + 0x3800 */
__asm__(
	".text\n"
	".globl guest_cpl0_entry\n"
	"guest_cpl0_entry:\n"
	"  mov %rcx, %r8\n"
	"  mov %rdx, %r9\n"
	"  mov %rdi, %rax\n"
	"  shl $6, %rax\n"
	"  add $0x403800, %rax\n"
	"  xor %edx, %edx\n"
	"  mov $0xc0000101, %ecx\n"
	"  wrmsr\n"
	"  mov $0x1b, %ecx\n"
	"  rdmsr\n"
	"  or $0xc00, %eax\n"
	"  wrmsr\n"
	"  xor %edx, %edx\n"
	"  mov $0x80f, %ecx\n"
	"  mov $0x1ff, %eax\n"
	"  wrmsr\n"
	"  pushq $0x1b\n"
	"  push %r9\n"
	"  pushq $" GUEST_STR(GUEST_USER_RFLAGS) "\n"
	"  pushq $0x23\n"
	"  push %r8\n"
	"  iretq\n"
	".globl guest_timer_isr\n"
	"guest_timer_isr:\n"
	"  incq %gs:0\n"
	"  push %rax\n"
	"  push %rcx\n"
	"  push %rdx\n"
	"  mov $0x80b, %ecx\n"
	"  xor %eax, %eax\n"
	"  xor %edx, %edx\n"
	"  wrmsr\n"
	"  pop %rdx\n"
	"  pop %rcx\n"
	"  pop %rax\n"
	"  iretq\n");

static const char *parse_u64(const char *s, uint64_t *v)
{
	*v = 0;
	while (*s == ' ')
		s++;
	if (*s < '0' || *s > '9')
		return 0;
	while (*s >= '0' && *s <= '9')
		*v = *v * 10 + (uint64_t)(*s++ - '0');
	return s;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static int starts(const char *s, const char *w)
{
	while (*w)
		if (*s++ != *w++)
			return 0;
	return *s == ' ' || *s == 0;
}

/* ---- PCI --------------------------------------------------------------------- */

/* BAR0/BAR1 (64-bit): size by all-ones with decoding off, then restore. */
static void pci_size_bar(struct drv *d, int dev)
{
	uint32_t cmd = vpci_cfg_read(dev, 4) & 0xffff;
	uint32_t lo = vpci_cfg_read(dev, 0x10), hi = vpci_cfg_read(dev, 0x14);
	uint64_t mask;

	vpci_cfg_write(dev, 4, cmd & ~2u);
	vpci_cfg_write(dev, 0x10, 0xffffffffu);
	vpci_cfg_write(dev, 0x14, 0xffffffffu);
	mask = ((uint64_t)vpci_cfg_read(dev, 0x14) << 32) | (vpci_cfg_read(dev, 0x10) & ~0xfu);
	vpci_cfg_write(dev, 0x10, lo);
	vpci_cfg_write(dev, 0x14, hi);
	vpci_cfg_write(dev, 4, cmd | 2u | 4u);   /* memory decoding, bus master */
	d->bar_size = ~mask + 1;
}

/* ---- virtio ------------------------------------------------------------------ */

/* The device found, its capabilities mapped, reset and set up (vblk.h);
 * VERSION_1, FLUSH and DISCARD when offered; 2 s for an answer (the VMM's
 * I/O thread serves a notify soon after it, not at it). */
static int dev_init(struct drv *d)
{
	int r = vblk_init(&d->b, d->mem, VBLK_F_DISCARD);

	d->b.timeout_spins = 20000;
	return r;
}

/* One request; returns its status byte, 0x100 + device status when the
 * device wants a reset, or 0x200 when it did not answer. */
static int request(struct drv *d, uint32_t type, uint64_t sector, void *buf, uint32_t len,
		   int dev_writes)
{
	switch (vblk_request(&d->b, type, sector, buf, len, dev_writes)) {
	case 0: return 0;
	case VBLK_ERESET: return 0x100 | vblk_status(&d->b);
	case VBLK_ETIMEDOUT: return 0x200;   /* no answer */
	default: return *d->b.status;
	}
}

/* v in width decimal digits, zero-padded (the low digits if it is wider). */
static void put_dec(char *q, int width, uint64_t v)
{
	for (int i = width - 1; i >= 0; i--, v /= 10)
		q[i] = (char)('0' + v % 10);
}

static void pattern(uint8_t *p, uint64_t s, uint64_t pass)
{
	for (int l = 0; l < 16; l++) {
		char *q = (char *)p + 32 * l;

		q[0] = 's';
		put_dec(q + 1, 10, s);
		q[11] = ' ';
		q[12] = 'p';
		put_dec(q + 13, 5, pass);
		q[18] = ' ';
		q[19] = 'l';
		put_dec(q + 20, 2, (uint64_t)l);
		q[22] = ' ';
		for (int i = 23; i < 31; i++)
			q[i] = '.';
		q[31] = '\n';
	}
}

static int mem_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

static void report_error(int st)
{
	if (st == 0x200) {
		con_puts("timeout\n");
		return;
	}
	if (st >= 0x100) {
		con_puts("needs-reset status=");
		con_put_hex8((uint8_t)st);
	} else {
		con_puts("error status=");
		con_put_u64((uint64_t)st);
	}
	con_putc('\n');
}

/* write (check = 0) then read back and compare; or compare only. */
static void selftest(struct drv *d, const char *args, int write)
{
	uint64_t start, n, pass;

	if (!(args = parse_u64(args, &start)) || !(args = parse_u64(args, &n)) ||
	    !parse_u64(args, &pass)) {
		con_puts("error usage: selftest|check START N PASS\n");
		return;
	}
	for (uint64_t s = start; s < start + n; s += CHUNK) {
		uint64_t k = start + n - s < CHUNK ? start + n - s : CHUNK;
		int st;

		for (uint64_t i = 0; i < k; i++)
			pattern(d->buf + 512 * i, s + i, pass);
		if (write && (st = request(d, VBLK_T_OUT, s, d->buf, (uint32_t)(512 * k), 0)) != 0) {
			report_error(st);
			return;
		}
		memset(d->buf2, 0, 512 * CHUNK);
		if ((st = request(d, VBLK_T_IN, s, d->buf2, (uint32_t)(512 * k), 1)) != 0) {
			report_error(st);
			return;
		}
		for (uint64_t i = 0; i < k; i++)
			if (!mem_eq(d->buf + 512 * i, d->buf2 + 512 * i, 512)) {
				con_puts("bad ");
				con_put_u64(s + i);
				con_putc('\n');
				return;
			}
	}
	con_puts("ok ");
	con_put_u64(n);
	con_putc('\n');
}

/* Record s of the write log in block blk: 128 lines of 32 bytes,
 * "q0000000005 b000005 l000 ......\n". */
static void log_record(uint8_t *p, uint64_t s, uint64_t blk)
{
	for (int l = 0; l < 128; l++) {
		char *q = (char *)p + 32 * l;

		q[0] = 'q';
		put_dec(q + 1, 10, s);
		q[11] = ' ';
		q[12] = 'b';
		put_dec(q + 13, 6, blk);
		q[19] = ' ';
		q[20] = 'l';
		put_dec(q + 21, 3, (uint64_t)l);
		q[24] = ' ';
		for (int i = 25; i < 31; i++)
			q[i] = '.';
		q[31] = '\n';
	}
}

/* Block blk of the ring holds record s, or zeros when s is "none" (~0). */
static int log_expect(struct drv *d, uint64_t start, uint64_t blk, uint64_t s, const char *what,
		      uint64_t at)
{
	int st = request(d, VBLK_T_IN, start + 8 * blk, d->buf2, 4096, 1);

	if (st) {
		report_error(st);
		return -1;
	}
	if (s == ~0ull)
		memset(d->buf, 0, 4096);
	else
		log_record(d->buf, s, blk);
	if (mem_eq(d->buf, d->buf2, 4096))
		return 0;
	con_puts("bad ");
	con_puts(what);
	con_puts(" ");
	con_put_u64(at);
	con_puts(" block ");
	con_put_u64(blk);
	con_puts(" found '");
	for (int i = 0; i < 11; i++)
		con_putc(d->buf2[i] >= 0x20 && d->buf2[i] < 0x7f ? (char)d->buf2[i] : '?');
	con_puts("'\n");
	return -1;
}

static void cmd_log(struct drv *d, const char *args)
{
	uint64_t start, n, count, pace, every, s;

	if (!(args = parse_u64(args, &start)) || !(args = parse_u64(args, &n)) ||
	    !(args = parse_u64(args, &count)) || !(args = parse_u64(args, &pace)) || !n ||
	    start + 8 * n > d->b.capacity) {
		con_puts("error usage: log START N COUNT PACE [EVERY] (the ring inside the disk)\n");
		return;
	}
	if (!parse_u64(args, &every) || !every)
		every = 1;
	for (s = 0; !count || s < count; s++) {
		uint64_t blk = s % n;
		int st;

		if (log_expect(d, start, blk, s >= n ? s - n : ~0ull, "ahead", s) < 0 ||
		    (s && log_expect(d, start, (s - 1) % n, s - 1, "behind", s) < 0))
			guest_power_off(3);
		log_record(d->buf, s, blk);
		if ((st = request(d, VBLK_T_OUT, start + 8 * blk, d->buf, 4096, 0)) != 0) {
			report_error(st);
			guest_power_off(3);
		}
		if ((s + 1) % every == 0) {
			con_puts("w ");
			con_put_u64(s);
			con_putc('\n');
		}
		if (pace)
			guest_idle((uint32_t)pace);
	}
	con_puts("log done ");
	con_put_u64(count);
	con_putc('\n');
}

static void cmd_write(struct drv *d, const char *args)
{
	uint64_t sector;
	int st, n = 0;

	if (!(args = parse_u64(args, &sector))) {
		con_puts("error usage: write SECTOR HEX\n");
		return;
	}
	while (*args == ' ')
		args++;
	memset(d->buf, 0, 512);
	for (; hexval(args[0]) >= 0 && hexval(args[1]) >= 0 && n < 512; args += 2)
		d->buf[n++] = (uint8_t)(hexval(args[0]) << 4 | hexval(args[1]));
	if ((st = request(d, VBLK_T_OUT, sector, d->buf, 512, 0)) != 0)
		report_error(st);
	else
		con_puts("ok\n");
}

static void cmd_read(struct drv *d, const char *args)
{
	uint64_t sector;
	int st;

	if (!parse_u64(args, &sector)) {
		con_puts("error usage: read SECTOR\n");
		return;
	}
	if ((st = request(d, VBLK_T_IN, sector, d->buf, 512, 1)) != 0) {
		report_error(st);
		return;
	}
	con_puts("data ");
	for (int i = 0; i < 32; i++)
		con_put_hex8(d->buf[i]);
	con_putc('\n');
}

static void cmd_info(struct drv *d)
{
	con_puts("blk capacity=");
	con_put_u64(d->b.capacity);
	con_puts(" features=");
	con_put_hex64(d->b.features);
	con_puts(" bar=");
	con_put_hex64(d->b.pci.bar);
	con_puts(" bar_size=");
	con_put_u64(d->bar_size);
	con_puts(" queue=");
	con_put_u64(VBLK_QSIZE);
	con_putc('\n');
}

/* Interrupts on: MSI-X enabled, entry 0 = vector GUEST_TIMER_VECTOR to
 * APIC 0, queue 0 on it, VIRTQ_AVAIL_F_NO_INTERRUPT cleared; a read must
 * raise it. Then back to polling with no vector. */
static void cmd_msix(struct drv *d)
{
	volatile uint64_t *count = (volatile uint64_t *)IRQ_COUNT_GPA;
	int dev = d->b.pci.dev;
	int ptr = (int)(vpci_cfg_read(dev, 0x34) & 0xfc), n = 0, st;
	uint32_t head = 0;
	volatile uint32_t *table;
	uint64_t before;

	while (ptr && n++ < 48 && ((head = vpci_cfg_read(dev, ptr)) & 0xff) != 0x11)
		ptr = (int)((head >> 8) & 0xfc);
	if (!ptr || (head & 0xff) != 0x11) {
		con_puts("msix no capability\n");
		return;
	}
	table = (volatile uint32_t *)(d->b.pci.bar + (vpci_cfg_read(dev, ptr + 4) & ~7u));
	table[0] = 0xfee00000u;
	table[1] = 0;
	table[2] = GUEST_TIMER_VECTOR;
	table[3] = 0;                                /* unmasked */
	vpci_cfg_write(dev, ptr, head | 0x80000000u); /* MSI-X enable */
	if (vpci_queue_set_vector(&d->b.pci, 0, 0) < 0) {
		con_puts("msix vector refused\n");
		return;
	}
	vpci_queue_interrupts(&d->b.q, 1);
	before = *count;
	st = request(d, VBLK_T_IN, 0, d->buf, 512, 1);
	for (int i = 0; i < 1000 && *count == before; i++)
		guest_idle(100);
	n = (int)(*count - before);
	vpci_queue_interrupts(&d->b.q, 0);
	(void)vpci_queue_set_vector(&d->b.pci, 0, 0xffff);
	if (st)
		report_error(st);
	else if (n == 1)
		con_puts("msix ok\n");
	else {
		con_puts("msix interrupts=");
		con_put_u64((uint64_t)n);
		con_putc('\n');
	}
}

/* A descriptor whose buffer is far outside RAM: the device must refuse the
 * request with DEVICE_NEEDS_RESET; then a full re-initialisation. The
 * request is put on the queue by hand (vblk_request would not send it). */
static void cmd_evil(struct drv *d)
{
	struct vpci_queue *q = &d->b.q;
	int st;

	d->b.hdr->type = VBLK_T_IN;
	d->b.hdr->sector = 0;
	q->desc[0] = (struct vpci_desc){ (uint64_t)d->b.hdr, 16, VPCI_DESC_NEXT, 1 };
	q->desc[1] = (struct vpci_desc){ 0x7f0000000000ull, 512, VPCI_DESC_NEXT | VPCI_DESC_WRITE, 2 };
	q->desc[2] = (struct vpci_desc){ (uint64_t)d->b.status, 1, VPCI_DESC_WRITE, 0 };
	vpci_queue_push(q, 0);
	vpci_queue_notify(q);
	st = vblk_status(&d->b);
	con_puts((st & VPCI_S_NEEDS_RESET) ? "needs-reset\n" : "accepted\n");
	if ((st = dev_init(d)) != 0) {
		con_puts("reinit failed\n");
		return;
	}
	con_puts("reinit ok\n");
}

void guest_main(int cpu, struct guest_bootinfo *bi)
{
	struct drv d;
	uint8_t *mem = (uint8_t *)bi->heap_gpa;
	char line[1200];
	int dev, r;

	if (cpu != 0)
		for (;;)
			guest_idle(1000000);
	memset(&d, 0, sizeof(d));
	d.mem = mem;
	d.buf = mem + VBLK_MEM_BYTES;
	d.buf2 = mem + VBLK_MEM_BYTES + 512 * CHUNK;
	if ((dev = vpci_find(0x1042)) < 0) {
		con_puts("error no virtio-blk device (run with --disk FILE)\n");
		guest_power_off(3);
	}
	pci_size_bar(&d, dev);
	if ((r = dev_init(&d)) == -2) {
		con_puts("error virtio capabilities missing\n");
		guest_power_off(3);
	}
	if (r != 0) {
		con_puts("error device init failed\n");
		guest_power_off(3);
	}
	for (;;) {
		uint64_t a, b;
		const char *p;
		int st;

		con_getline(line, sizeof(line));
		if (str_eq(line, "info")) {
			cmd_info(&d);
		} else if (starts(line, "write")) {
			cmd_write(&d, line + 5);
		} else if (starts(line, "read")) {
			cmd_read(&d, line + 4);
		} else if (starts(line, "log")) {
			cmd_log(&d, line + 3);
		} else if (starts(line, "selftest")) {
			selftest(&d, line + 8, 1);
		} else if (starts(line, "check")) {
			selftest(&d, line + 5, 0);
		} else if (str_eq(line, "flush")) {
			st = request(&d, VBLK_T_FLUSH, 0, 0, 0, 0);
			if (st)
				report_error(st);
			else
				con_puts("ok\n");
		} else if (str_eq(line, "id")) {
			memset(d.buf, 0, 32);
			if ((st = request(&d, VBLK_T_GET_ID, 0, d.buf, 20, 1)) != 0) {
				report_error(st);
			} else {
				con_puts("id ");
				con_puts((const char *)d.buf);
				con_putc('\n');
			}
		} else if (starts(line, "discard")) {
			if (!(p = parse_u64(line + 7, &a)) || !parse_u64(p, &b)) {
				con_puts("error usage: discard SECTOR N\n");
				continue;
			}
			memset(d.buf, 0, 16);
			memcpy(d.buf, &a, 8);
			memcpy(d.buf + 8, &b, 4);
			if ((st = request(&d, VBLK_T_DISCARD, 0, d.buf, 16, 0)) != 0)
				report_error(st);
			else
				con_puts("ok\n");
		} else if (str_eq(line, "msix")) {
			cmd_msix(&d);
		} else if (str_eq(line, "evil")) {
			cmd_evil(&d);
		} else if (str_eq(line, "halt")) {
			guest_power_off(0);
		} else if (line[0]) {
			con_puts("error unknown request\n");
		}
	}
}
