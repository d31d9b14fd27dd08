/* Benchmarks of the machine layer (figure, reference from the same run, ratio):
 *  - pause+resume of a running guest, 1 and 2 vCPUs, p50/p99, against a
 *    condition-variable hand-off between two host threads;
 *  - the fixed cost of a checkpoint pause (stop every vCPU, read the VM's and
 *    every vCPU's state, resume) of a guest dirtying 50 MiB/s, split into
 *    its parts, and the cost of each state ioctl on its own, against a
 *    trivial ioctl (KVM_CHECK_EXTENSION) and a getpid system call;
 *  - dirty-log harvest (GET + CLEAR + merge) of 1 GiB and 4 GiB guests with
 *    a given number of dirty pages, against scanning the same bitmap in memory.
 *
 * The per-ioctl figures issue the ioctls directly on the machine's file
 * descriptors: they measure the platform, not the project's code. */
#include <linux/kvm.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "machine/machine.h"

#define ITER 2000
#define FIXED_ITER 1000

static void sleep_us(uint64_t us)
{
	struct timespec d = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };

	nanosleep(&d, NULL);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Reference: wake a waiting thread and wait for its answer (cond + mutex). */
struct pingpong {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int turn;
	bool stop;
};

static void *pong(void *arg)
{
	struct pingpong *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		while (p->turn != 1 && !p->stop)
			pthread_cond_wait(&p->cond, &p->lock);
		p->turn = 0;
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void handoff_reference(uint64_t *p50, uint64_t *p99)
{
	struct pingpong p = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false };
	uint64_t *lat = calloc(ITER, sizeof(uint64_t));
	pthread_t th;

	pthread_create(&th, NULL, pong, &p);
	for (int i = 0; i < ITER; i++) {
		uint64_t t0;

		sleep_us(200 + (uint64_t)(rand() % 300));
		t0 = now_ns();
		pthread_mutex_lock(&p.lock);
		p.turn = 1;
		pthread_cond_broadcast(&p.cond);
		while (p.turn != 0)
			pthread_cond_wait(&p.cond, &p.lock);
		pthread_mutex_unlock(&p.lock);
		lat[i] = now_ns() - t0;
	}
	pthread_mutex_lock(&p.lock);
	p.stop = true;
	pthread_cond_broadcast(&p.cond);
	pthread_mutex_unlock(&p.lock);
	pthread_join(th, NULL);
	qsort(lat, ITER, sizeof(uint64_t), cmp_u64);
	*p50 = lat[ITER / 2];
	*p99 = lat[ITER * 99 / 100];
	free(lat);
}

static struct machine *boot(const char *guest, uint64_t mem, int ncpus)
{
	struct machine_config cfg = { .mem_bytes = mem, .ncpus = ncpus };
	struct machine *m;
	char err[256];

	if (machine_parse_guest(&cfg, guest, err, sizeof(err)) < 0 ||
	    machine_new(&cfg, NULL, &m) < 0 || machine_boot(m) < 0) {
		fprintf(stderr, "cannot start guest %s\n", guest);
		exit(1);
	}
	return m;
}

static void bench_pause(int ncpus, uint64_t ref50, uint64_t ref99)
{
	struct machine *m = boot("dirty:mb=16,report_ms=1000", 64ull << 20, ncpus);
	uint64_t *lat = calloc(ITER, sizeof(uint64_t));

	machine_resume(m);
	sleep_us(50000);
	for (int i = 0; i < ITER; i++) {
		uint64_t t0;

		sleep_us(200 + (uint64_t)(rand() % 800));
		t0 = now_ns();
		machine_pause(m);
		machine_resume(m);
		lat[i] = now_ns() - t0;
	}
	qsort(lat, ITER, sizeof(uint64_t), cmp_u64);
	printf("pause+resume, %d vCPU(s), running dirty guest: p50 %7.1f us  p99 %7.1f us | "
	       "reference thread hand-off p50 %5.1f us p99 %5.1f us | ratio p50 %.1fx\n",
	       ncpus, lat[ITER / 2] / 1e3, lat[ITER * 99 / 100] / 1e3, ref50 / 1e3, ref99 / 1e3,
	       (double)lat[ITER / 2] / (double)ref50);
	free(lat);
	machine_free(m);
}

static uint64_t pct(uint64_t *v, size_t n, int p)
{
	qsort(v, n, sizeof(uint64_t), cmp_u64);
	return v[n * (size_t)p / 100];
}

static void print_part(const char *name, uint64_t *ns, size_t n, uint64_t ref50)
{
	uint64_t p50 = pct(ns, n, 50), p99 = pct(ns, n, 99);

	printf("  %-28s p50 %7.1f us  p99 %7.1f us  (%5.1fx the trivial ioctl)\n", name, p50 / 1e3,
	       p99 / 1e3, ref50 ? (double)p50 / (double)ref50 : 0);
}

/* One state ioctl on a paused machine, timed. Returns its time in ns. */
static uint64_t time_ioctl(int fd, unsigned long req, void *arg)
{
	uint64_t t0 = now_ns();

	if (ioctl(fd, req, arg) < 0) {
		perror("state ioctl");
		exit(1);
	}
	return now_ns() - t0;
}

enum part { P_MP, P_REGS, P_SREGS, P_XCRS, P_XSAVE, P_LAPIC, P_EVENTS, P_DEBUGREGS, P_MSRS,
	    P_IRQCHIP3, P_PIT, P_CLOCK, P_CHECK_EXT, P_GETPID, NPARTS };
static const char *const part_names[NPARTS] = {
	"KVM_GET_MP_STATE", "KVM_GET_REGS", "KVM_GET_SREGS", "KVM_GET_XCRS", "KVM_GET_XSAVE(2)",
	"KVM_GET_LAPIC", "KVM_GET_VCPU_EVENTS", "KVM_GET_DEBUGREGS", "KVM_GET_MSRS (all, 1 call)",
	"KVM_GET_IRQCHIP x3", "KVM_GET_PIT2", "KVM_GET_CLOCK", "ref KVM_CHECK_EXTENSION",
	"ref getpid()",
};

/* Every state ioctl of a capture once, on vCPU 0 of a machine just paused
 * after running (caches as cold as a real pause leaves them). */
static void time_state_ioctls(struct machine *m, uint64_t *ns)
{
	static struct {
		struct kvm_msrs hdr;
		struct kvm_msr_entry e[KVM_MAX_MSRS];
	} msrs;
	static struct kvm_vcpu_state st;
	struct kvm_vm_state vs = { .pic_master.chip_id = KVM_IRQCHIP_PIC_MASTER,
				   .pic_slave.chip_id = KVM_IRQCHIP_PIC_SLAVE,
				   .ioapic.chip_id = KVM_IRQCHIP_IOAPIC };
	int fd = m->vcpus[0].kvm.fd, vm = m->vm.fd;
	bool xsave2 = m->sys.xsave_size > 4096;
	uint64_t t0;

	msrs.hdr.nmsrs = m->sys.nmsrs;
	for (uint32_t i = 0; i < m->sys.nmsrs; i++)
		msrs.e[i].index = m->sys.msrs[i];
	ns[P_MP] = time_ioctl(fd, KVM_GET_MP_STATE, &st.mp_state);
	ns[P_REGS] = time_ioctl(fd, KVM_GET_REGS, &st.regs);
	ns[P_SREGS] = time_ioctl(fd, KVM_GET_SREGS, &st.sregs);
	ns[P_XCRS] = time_ioctl(fd, KVM_GET_XCRS, &st.xcrs);
	ns[P_XSAVE] = time_ioctl(fd, xsave2 ? KVM_GET_XSAVE2 : KVM_GET_XSAVE, st.xsave);
	ns[P_LAPIC] = time_ioctl(fd, KVM_GET_LAPIC, &st.lapic);
	ns[P_EVENTS] = time_ioctl(fd, KVM_GET_VCPU_EVENTS, &st.events);
	ns[P_DEBUGREGS] = time_ioctl(fd, KVM_GET_DEBUGREGS, &st.debugregs);
	ns[P_MSRS] = time_ioctl(fd, KVM_GET_MSRS, &msrs);
	t0 = now_ns();
	if (ioctl(vm, KVM_GET_IRQCHIP, &vs.pic_master) < 0 ||
	    ioctl(vm, KVM_GET_IRQCHIP, &vs.pic_slave) < 0 || ioctl(vm, KVM_GET_IRQCHIP, &vs.ioapic) < 0) {
		perror("KVM_GET_IRQCHIP");
		exit(1);
	}
	ns[P_IRQCHIP3] = now_ns() - t0;
	ns[P_PIT] = time_ioctl(vm, KVM_GET_PIT2, &vs.pit);
	ns[P_CLOCK] = time_ioctl(vm, KVM_GET_CLOCK, &vs.clock);
	t0 = now_ns();
	if (ioctl(m->sys.fd, KVM_CHECK_EXTENSION, KVM_CAP_IRQCHIP) <= 0)
		exit(1);
	ns[P_CHECK_EXT] = now_ns() - t0;
	t0 = now_ns();
	syscall(SYS_getpid);
	ns[P_GETPID] = now_ns() - t0;
}

/* The fixed cost of a checkpoint pause, the page copy left out: stop every
 * vCPU, harvest the dirty log, read the whole machine's state as a capture
 * does (VM state, then each vCPU's), resume. The guest dirties 50 MiB/s
 * meanwhile. Then the same pauses once more, each ioctl of the state timed
 * on its own. */
static void bench_fixed(int ncpus)
{
	struct machine *m = boot("dirty:mb=16,rate_mb=50,report_ms=100000", 64ull << 20, ncpus);
	uint64_t *stop = calloc(FIXED_ITER, 8), *vm = calloc(FIXED_ITER, 8);
	uint64_t *vcpu = calloc(FIXED_ITER, 8), *total = calloc(FIXED_ITER, 8);
	uint64_t *resume = calloc(FIXED_ITER, 8), *harvest = calloc(FIXED_ITER, 8);
	uint64_t *bm = calloc(machine_bitmap_words(m), 8);
	uint64_t *part[NPARTS], tot50, tot99, ref50;
	static struct kvm_vcpu_state st[KVM_MAX_VCPUS];
	static struct machine_state ms;

	for (int k = 0; k < NPARTS; k++)
		part[k] = calloc(FIXED_ITER, 8);
	machine_resume(m);
	sleep_us(50000);
	for (int i = 0; i < FIXED_ITER; i++) {
		uint64_t t0, t1, t2, t3, th;

		sleep_us(1000 + (uint64_t)(rand() % 2000));
		t0 = now_ns();
		machine_pause(m);
		th = now_ns();
		if (machine_harvest_dirty(m, bm) < 0)
			exit(1);
		harvest[i] = now_ns() - th;
		t1 = now_ns();
		if (machine_get_state(m, &ms) < 0)
			exit(1);
		t2 = now_ns();
		for (int c = 0; c < ncpus; c++)
			if (machine_get_vcpu_state(m, c, &st[c]) < 0)
				exit(1);
		t3 = now_ns();
		machine_resume(m);
		total[i] = now_ns() - t0;
		resume[i] = now_ns() - t3;
		stop[i] = th - t0;
		vm[i] = t2 - t1;
		vcpu[i] = t3 - t2;
	}
	for (int i = 0; i < FIXED_ITER; i++) {
		uint64_t ns[NPARTS];

		sleep_us(1000 + (uint64_t)(rand() % 2000));
		machine_pause(m);
		/* after the pause's own state read (machine.c), not alongside it */
		if (machine_get_state(m, &ms) < 0)
			exit(1);
		time_state_ioctls(m, ns);
		machine_resume(m);
		for (int k = 0; k < NPARTS; k++)
			part[k][i] = ns[k];
	}
	ref50 = pct(part[P_CHECK_EXT], FIXED_ITER, 50);
	printf("fixed cost of a pause, %d vCPU(s), guest dirtying 50 MiB/s, %d pauses:\n", ncpus,
	       FIXED_ITER);
	print_part("stop (kick until parked)", stop, FIXED_ITER, ref50);
	print_part("harvest (GET+CLEAR dirty log)", harvest, FIXED_ITER, ref50);
	print_part("VM state (machine_get_state)", vm, FIXED_ITER, ref50);
	print_part("vCPU state, all vCPUs", vcpu, FIXED_ITER, ref50);
	print_part("resume", resume, FIXED_ITER, ref50);
	print_part("total (all the above)", total, FIXED_ITER, ref50);
	printf(" each state ioctl on its own, vCPU 0, right after a pause:\n");
	for (int k = 0; k < NPARTS; k++)
		print_part(part_names[k], part[k], FIXED_ITER, ref50);
	tot50 = pct(total, FIXED_ITER, 50);
	tot99 = pct(total, FIXED_ITER, 99);
	printf("FIGURE {\"name\": \"fixed cost of a pause (stop, harvest, read all state, resume), %d vCPU, "
	       "50 MiB/s, p50\", \"value\": %.1f, \"unit\": \"us\", \"reference\": "
	       "\"KVM_CHECK_EXTENSION ioctl, p50\", \"reference_value\": %.2f, \"ratio\": %.1f, "
	       "\"goal\": null, \"met\": null}\n", ncpus, tot50 / 1e3, ref50 / 1e3,
	       ref50 ? (double)tot50 / (double)ref50 : 0);
	printf("FIGURE {\"name\": \"fixed cost of a pause (stop, harvest, read all state, resume), %d vCPU, "
	       "50 MiB/s, p99\", \"value\": %.1f, \"unit\": \"us\", \"reference\": "
	       "\"KVM_CHECK_EXTENSION ioctl, p50\", \"reference_value\": %.2f, \"ratio\": %.1f, "
	       "\"goal\": null, \"met\": null}\n", ncpus, tot99 / 1e3, ref50 / 1e3,
	       ref50 ? (double)tot99 / (double)ref50 : 0);
	for (int k = 0; k < NPARTS; k++)
		free(part[k]);
	free(stop);
	free(vm);
	free(vcpu);
	free(total);
	free(resume);
	free(harvest);
	free(bm);
	machine_free(m);
}

static void bench_harvest(uint64_t mem, uint64_t set_mb, uint64_t run_ms)
{
	char guest[64];
	struct machine *m;
	uint64_t *bm, t0, t_harvest = 0, t_scan = 0, dirty = 0, sink = 0;
	const int rounds = 5;

	snprintf(guest, sizeof(guest), "dirty:mb=%llu,report_ms=1000", (unsigned long long)set_mb);
	m = boot(guest, mem, 1);
	bm = calloc(machine_bitmap_words(m), 8);
	machine_resume(m);
	sleep_us(300000);   /* first touch of the whole set */
	for (int r = 0; r < rounds; r++) {
		machine_pause(m);
		if (machine_harvest_dirty(m, bm) < 0)
			exit(1);
		machine_resume(m);
		sleep_us(run_ms * 1000);  /* first writes after re-protect fault: ~3 us each */
		machine_pause(m);
		t0 = now_ns();
		if (machine_harvest_dirty(m, bm) < 0)
			exit(1);
		t_harvest += now_ns() - t0;
		/* Reference: find the set bits of the same bitmap in memory. */
		t0 = now_ns();
		dirty = 0;
		for (size_t w = 0; w < machine_bitmap_words(m); w++) {
			uint64_t b = bm[w];

			while (b) {
				sink += w * 64 + (uint64_t)__builtin_ctzll(b);
				b &= b - 1;
				dirty++;
			}
		}
		t_scan += now_ns() - t0;
		machine_resume(m);
	}
	printf("harvest %llu GiB guest, %6llu dirty pages: %8.1f us | reference bitmap scan "
	       "%6.1f us | ratio %.1fx%s\n", (unsigned long long)(mem >> 30),
	       (unsigned long long)dirty, t_harvest / rounds / 1e3, t_scan / rounds / 1e3,
	       (double)t_harvest / (double)(t_scan ? t_scan : 1), sink == 1 ? " " : "");
	free(bm);
	machine_free(m);
}

int main(int argc, char **argv)
{
	uint64_t ref50, ref99;

	srand(1);
	if (access("/dev/kvm", R_OK | W_OK) != 0) {
		printf("bench_machine: /dev/kvm not usable, nothing measured\n");
		return 0;
	}
	/* "fixed": only the fixed cost of a pause (for before/after runs). */
	if (argc > 1 && !strcmp(argv[1], "fixed")) {
		bench_fixed(1);
		bench_fixed(2);
		return 0;
	}
	handoff_reference(&ref50, &ref99);
	bench_pause(1, ref50, ref99);
	bench_pause(2, ref50, ref99);
	bench_fixed(1);
	bench_fixed(2);
	for (int g = 1; g <= 4; g += 3) {
		bench_harvest((uint64_t)g << 30, 4, 30);
		bench_harvest((uint64_t)g << 30, 64, 150);
		bench_harvest((uint64_t)g << 30, 512, 600);
	}
	return 0;
}
