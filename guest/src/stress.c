/* stress: a guest that makes every piece of machine state matter, for the
 * checkpoint tests. On every vCPU (1..8, typically 2) it
 *   - takes periodic LAPIC timer interrupts (x2APIC, set up by the tiny CPL0
 *     entry below; the CPL0 handler counts into its per-cpu word at gs:0 and
 *     EOIs), and checks ticks never go backwards and keep coming (timer_us=N,
 *     1 ms period);
 *   - keeps live values in xmm8 and the upper half of ymm9 (xmm14/xmm15 hold
 *     the increments) across long stretches of C code and checks them
 *     against its step count: a lost xsave area shows at once;
 *   - writes a history ring through an alias mapping it adds to the page
 *     tables itself (PDPT slot 256 -> 6 MiB) and reads it back through the
 *     identity map; older entries must match the step count (memory and
 *     registers from the same instant);
 *   - checks rdtsc never goes backwards (the TSC MSR);
 *   - vCPU 0 watches the others' step counts (never backwards, advancing).
 * Console (vCPU 0): "check" -> "ok cpus=N ticks=a,b steps=a,b sum=HEX" or
 * "FAIL cpu<i> <what> <detail>"; "time" -> "time <rdtsc> <tsc ticks per ms>"
 * (the guest's clock, for tests of time across a failover); "halt" powers
 * off. Needs --mem >= 8M. */
#include "glib.h"

#define MAX_CPUS 8
#define ALIAS_VA 0x4000000000ull        /* PDPT slot 256 */
#define ALIAS_GPA 0x600000ull           /* 2 MiB page */
#define ALIAS_PD_GPA (GUEST_HEAP_GPA + 0x10000)
#define HIST 1024                        /* entries per cpu, 64 bytes apart */
#define CHUNK 32768                      /* steps between console polls */
#define SPILL 64                         /* steps between vector checks */

enum fail_code {
	F_NONE, F_XMM, F_YMM, F_TICKS_BACK, F_TSC_BACK, F_TIMER_DEAD, F_ALIAS, F_HISTORY,
	F_PEER_BACK, F_PEER_STALL, F_NMIRROR,
};
static const char *const fail_name[] = {
	"none", "xmm-lost", "ymm-lost", "ticks-backwards", "tsc-backwards", "timer-dead",
	"alias-mismatch", "memory-history", "peer-backwards", "peer-stalled", "step-mirror",
};

/* One per vCPU at GUEST_HEAP_GPA + 256 * cpu; gs base points here. */
struct pcpu {
	volatile uint64_t ticks;      /* the timer handler's counter (gs:0) */
	volatile uint64_t n;          /* steps done (mirror of the register copy) */
	volatile uint64_t sum;        /* running checksum of the vector values */
	volatile uint64_t fail;
	volatile uint64_t detail;
	uint64_t vec[4];              /* spill of xmm8 and ymm9's upper half */
	uint64_t last_tsc, last_ticks, quiet_tsc;
	uint64_t peer_n[MAX_CPUS];    /* cpu 0: last seen steps of the others */
	uint64_t ready;
	uint8_t pad[256 - 13 * 8 - MAX_CPUS * 8];
};
_Static_assert(sizeof(struct pcpu) == 256, "the CPL0 entry sets gs to 256 * cpu");

struct shared {
	struct pcpu cpu[MAX_CPUS];
	volatile uint64_t alias_ready;
	uint64_t avx;
	uint64_t tsc_per_ms;
	uint32_t ncpus;
	uint32_t timer_us;
};

#define SH ((struct shared *)GUEST_HEAP_GPA)

/* CPL0: gs base = this cpu's struct pcpu; x2APIC on; periodic LAPIC timer at
 * vector 0x20 (count from the word in struct shared, bus clock 1 GHz on KVM);
 * then iretq to CPL3 as the common runtime does. rdi, rsi survive. */
__asm__(
	".text\n"
	".globl guest_cpl0_entry\n"
	"guest_cpl0_entry:\n"
	"  mov %rcx, %r8\n"
	"  mov %rdx, %r9\n"
	"  mov %rdi, %rax\n"
	"  shl $8, %rax\n"
	"  add $" "0x400000" ", %rax\n"
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
	"  mov $0x83e, %ecx\n"
	"  mov $0xb, %eax\n"
	"  wrmsr\n"
	"  mov $0x832, %ecx\n"
	"  mov $0x20020, %eax\n"
	"  wrmsr\n"
	"  mov $0x838, %ecx\n"
	"  mov $1000000, %eax\n"
	"  wrmsr\n"
	"  pushq $0x1b\n"
	"  push %r9\n"
	"  pushq $" GUEST_STR(GUEST_USER_RFLAGS) "\n"
	"  pushq $0x23\n"
	"  push %r8\n"
	"  iretq\n"
	".balign 16\n"
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

static const uint64_t incs[4] __attribute__((aligned(16))) = { 1, 3, 5, 7 };

static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (uint64_t)hi << 32 | lo;
}

static void vec_init(int avx)
{
	__asm__ volatile("pxor %%xmm8, %%xmm8\n movdqa (%0), %%xmm15\n movdqa 16(%0), %%xmm14"
			 : : "r"(incs) : "memory");
	if (avx)
		__asm__ volatile("vxorps %%ymm9, %%ymm9, %%ymm9" : : : "memory");
}

static inline void vec_step(int avx)
{
	if (avx)
		__asm__ volatile("vpaddq %%xmm15, %%xmm8, %%xmm8\n"
				 "vextractf128 $1, %%ymm9, %%xmm10\n"
				 "vpaddq %%xmm14, %%xmm10, %%xmm10\n"
				 "vinsertf128 $1, %%xmm10, %%ymm9, %%ymm9" : : : "memory");
	else
		__asm__ volatile("paddq %%xmm15, %%xmm8" : : : "memory");
}

static void vec_spill(int avx, uint64_t *out)
{
	if (avx)
		__asm__ volatile("vmovdqu %%xmm8, (%0)\n"
				 "vextractf128 $1, %%ymm9, %%xmm10\n vmovdqu %%xmm10, 16(%0)"
				 : : "r"(out) : "memory");
	else
		__asm__ volatile("movdqu %%xmm8, (%0)" : : "r"(out) : "memory");
}

static void fail(struct pcpu *pc, enum fail_code code, uint64_t detail)
{
	if (!pc->fail) {
		pc->detail = detail;
		pc->fail = code;
	}
}

static volatile uint64_t *hist_alias(int cpu, uint64_t i)
{
	return (volatile uint64_t *)(ALIAS_VA + (uint64_t)cpu * HIST * 64 + (i % HIST) * 64);
}

static volatile uint64_t *hist_ident(int cpu, uint64_t i)
{
	return (volatile uint64_t *)(ALIAS_GPA + (uint64_t)cpu * HIST * 64 + (i % HIST) * 64);
}

static uint64_t hist_val(int cpu, uint64_t n)
{
	return mix64(n ^ ((uint64_t)cpu << 56));
}

/* Timer and clock liveness, every few thousand steps. */
static void check_time(struct shared *sh, struct pcpu *pc)
{
	uint64_t t = rdtsc(), tk = pc->ticks;

	if (t < pc->last_tsc)
		fail(pc, F_TSC_BACK, pc->last_tsc - t);
	if (tk < pc->last_ticks)
		fail(pc, F_TICKS_BACK, pc->last_ticks - tk);
	if (tk != pc->last_ticks) {
		pc->quiet_tsc = 0;
	} else if (t > pc->last_tsc && t - pc->last_tsc < 5 * sh->tsc_per_ms) {
		/* only time this vCPU really ran counts (not pauses, not preemption) */
		pc->quiet_tsc += t - pc->last_tsc;
		if (pc->quiet_tsc > 300 * sh->tsc_per_ms)
			fail(pc, F_TIMER_DEAD, tk);
	}
	pc->last_tsc = t;
	pc->last_ticks = tk;
}

static void check_peers(struct shared *sh, struct pcpu *pc)
{
	for (uint32_t c = 1; c < sh->ncpus; c++) {
		uint64_t n = sh->cpu[c].n;

		if (n < pc->peer_n[c])
			fail(pc, F_PEER_BACK, c);
		pc->peer_n[c] = n;
	}
}

/* steps more steps; n is the register copy of the step count. */
static uint64_t work(struct shared *sh, int cpu, uint64_t n, uint64_t steps)
{
	struct pcpu *pc = &sh->cpu[cpu];
	int avx = (int)sh->avx;

	for (uint64_t s = 0; s < steps; s++) {
		vec_step(avx);
		n++;
		*hist_alias(cpu, n) = hist_val(cpu, n);
		pc->n = n;
		if (n % SPILL)
			continue;
		vec_spill(avx, pc->vec);
		if (pc->vec[0] != n || pc->vec[1] != 3 * n)
			fail(pc, F_XMM, pc->vec[0]);
		if (avx && (pc->vec[2] != 5 * n || pc->vec[3] != 7 * n))
			fail(pc, F_YMM, pc->vec[2]);
		if (*hist_ident(cpu, n) != hist_val(cpu, n))
			fail(pc, F_ALIAS, n);
		if (n >= HIST) {
			uint64_t back = (n * 31) % (HIST - 1) + 1;

			if (*hist_ident(cpu, n - back) != hist_val(cpu, n - back))
				fail(pc, F_HISTORY, n - back);
		}
		pc->sum = mix64(pc->sum + pc->vec[0] + pc->vec[3]);
		if (n % 4096 == 0) {
			check_time(sh, pc);
			if (cpu == 0)
				check_peers(sh, pc);
		}
	}
	if (pc->n != n)
		fail(pc, F_NMIRROR, pc->n);
	return n;
}

static void map_alias(void)
{
	uint64_t *pd = (uint64_t *)ALIAS_PD_GPA;
	volatile uint64_t *pdpt = (uint64_t *)(GUEST_PT_GPA + 0x1000);

	memset(pd, 0, 4096);
	/* present, writable, user, accessed, dirty, 2 MiB */
	pd[0] = ALIAS_GPA | 0x1 | 0x2 | 0x4 | 0x20 | 0x40 | 0x80;
	pdpt[256] = ALIAS_PD_GPA | 0x1 | 0x2 | 0x4 | 0x20;
}

static void reply(struct shared *sh)
{
	uint64_t sum = 0;

	for (uint32_t c = 0; c < sh->ncpus; c++) {
		struct pcpu *pc = &sh->cpu[c];

		if (pc->fail) {
			con_puts("FAIL cpu");
			con_put_u64(c);
			con_putc(' ');
			con_puts(pc->fail < sizeof(fail_name) / sizeof(fail_name[0]) ?
					 fail_name[pc->fail] : "?");
			con_putc(' ');
			con_put_u64(pc->detail);
			con_putc('\n');
			return;
		}
		sum ^= pc->sum;
	}
	con_puts("ok cpus=");
	con_put_u64(sh->ncpus);
	con_puts(" ticks=");
	for (uint32_t c = 0; c < sh->ncpus; c++) {
		con_put_u64(sh->cpu[c].ticks);
		con_putc(c + 1 < sh->ncpus ? ',' : ' ');
	}
	con_puts("steps=");
	for (uint32_t c = 0; c < sh->ncpus; c++) {
		con_put_u64(sh->cpu[c].n);
		con_putc(c + 1 < sh->ncpus ? ',' : ' ');
	}
	con_puts("sum=");
	con_put_hex64(sum);
	con_putc('\n');
}

/* "check": run on until every vCPU took 2 more ticks and every peer made
 * progress, within 500 ms of running time, then report. */
static uint64_t do_check(struct shared *sh, uint64_t n)
{
	uint64_t ticks0[MAX_CPUS], steps0[MAX_CPUS], ran = 0, t = rdtsc();
	int done = 0;

	for (uint32_t c = 0; c < sh->ncpus; c++) {
		ticks0[c] = sh->cpu[c].ticks;
		steps0[c] = sh->cpu[c].n;
	}
	while (!done && ran < 500 * sh->tsc_per_ms) {
		uint64_t t2;

		n = work(sh, 0, n, CHUNK / 4);
		t2 = rdtsc();
		if (t2 > t && t2 - t < 5 * sh->tsc_per_ms)
			ran += t2 - t;
		t = t2;
		done = 1;
		for (uint32_t c = 0; c < sh->ncpus; c++)
			if (sh->cpu[c].ticks < ticks0[c] + 2 || (c && sh->cpu[c].n == steps0[c]))
				done = 0;
	}
	for (uint32_t c = 0; c < sh->ncpus && !done; c++) {
		if (sh->cpu[c].ticks < ticks0[c] + 2)
			fail(&sh->cpu[c], F_TIMER_DEAD, sh->cpu[c].ticks - ticks0[c]);
		else if (c && sh->cpu[c].n == steps0[c])
			fail(&sh->cpu[0], F_PEER_STALL, c);
	}
	reply(sh);
	return n;
}

void guest_main(int cpu, struct guest_bootinfo *bi)
{
	struct shared *sh = SH;
	uint64_t n = 0;
	char line[32];
	size_t len = 0;

	if (cpu == 0) {
		sh->ncpus = bi->ncpus > MAX_CPUS ? MAX_CPUS : bi->ncpus;
		sh->tsc_per_ms = bi->tsc_khz ? bi->tsc_khz : 1000000;
		sh->avx = (xgetbv0() & 6) == 6;
		map_alias();
		sh->alias_ready = 1;
	} else {
		while (!sh->alias_ready)
			__asm__ volatile("pause");
	}
	vec_init((int)sh->avx);
	sh->cpu[cpu].last_tsc = rdtsc();
	sh->cpu[cpu].ready = 1;
	if (cpu != 0)
		for (;;)
			n = work(sh, cpu, n, CHUNK);
	for (;;) {
		n = work(sh, 0, n, CHUNK);
		while (inb(UART_BASE + 5) & 1) {
			char ch = (char)inb(UART_BASE);

			if (ch == '\r')
				continue;
			if (ch != '\n') {
				if (len + 1 < sizeof(line))
					line[len++] = ch;
				continue;
			}
			line[len] = 0;
			len = 0;
			if (str_eq(line, "check"))
				n = do_check(sh, n);
			else if (str_eq(line, "halt"))
				guest_power_off(0);
			else if (str_eq(line, "time")) {
				con_puts("time ");
				con_put_u64(rdtsc());
				con_putc(' ');
				con_put_u64(sh->tsc_per_ms);
				con_putc('\n');
			}
			else if (line[0])
				con_puts("error unknown request\n");
		}
	}
}
