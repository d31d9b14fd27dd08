#include "tests/harness.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

bool th_kvm_available(void)
{
	const char *p = getenv("UNDERSTUDY_KVM");
	int fd = open(p && *p ? p : "/dev/kvm", O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		printf("SKIP: /dev/kvm cannot be opened (%s): KVM tests need it\n", strerror(errno));
		return false;
	}
	close(fd);
	return true;
}

static void on_out(void *ctx, const uint8_t *buf, size_t len)
{
	struct th_vm *t = ctx;

	pthread_mutex_lock(&t->lock);
	if (t->out_len + len + 1 > t->out_cap) {
		size_t cap = t->out_cap ? t->out_cap * 2 : 65536;

		while (cap < t->out_len + len + 1)
			cap *= 2;
		t->out = realloc(t->out, cap);
		t->out_cap = cap;
	}
	memcpy(t->out + t->out_len, buf, len);
	t->out_len += len;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

static void on_stopped(void *ctx, int status)
{
	struct th_vm *t = ctx;

	pthread_mutex_lock(&t->lock);
	t->stopped = true;
	t->status = status;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

int th_vm_new(struct th_vm *t, const char *guest, uint64_t mem_bytes, int ncpus, bool boot)
{
	struct machine_config cfg = { .mem_bytes = mem_bytes, .ncpus = ncpus };
	struct machine_ops ops = { .console_out = on_out, .stopped = on_stopped, .ctx = t };
	char err[256];
	int r;

	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cond, NULL);
	r = machine_parse_guest(&cfg, guest, err, sizeof(err));
	if (r < 0) {
		printf("%s\n", err);
		return r;
	}
	r = machine_new(&cfg, &ops, &t->m);
	if (r < 0)
		return r;
	if (boot && (r = machine_boot(t->m)) < 0) {
		machine_free(t->m);
		t->m = NULL;
	}
	return r;
}

void th_vm_free(struct th_vm *t)
{
	machine_free(t->m);
	t->m = NULL;
	free(t->out);
	t->out = NULL;
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->lock);
}

void th_vm_send(struct th_vm *t, const char *s)
{
	size_t len = strlen(s), off = 0;

	while (off < len) {
		off += machine_console_input(t->m, (const uint8_t *)s + off, len - off);
		if (off < len)
			th_sleep_us(1000);
	}
}

static int count_lines(struct th_vm *t)
{
	int n = 0;

	for (size_t i = 0; i < t->out_len; i++)
		n += t->out[i] == '\n';
	return n;
}

int th_vm_lines(struct th_vm *t)
{
	int n;

	pthread_mutex_lock(&t->lock);
	n = count_lines(t);
	pthread_mutex_unlock(&t->lock);
	return n;
}

void th_deadline(struct timespec *until, int timeout_ms)
{
	clock_gettime(CLOCK_REALTIME, until);
	until->tv_sec += timeout_ms / 1000;
	until->tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until->tv_nsec >= 1000000000) {
		until->tv_sec++;
		until->tv_nsec -= 1000000000;
	}
}

int th_vm_wait_lines(struct th_vm *t, int n, int timeout_ms)
{
	struct timespec until;
	int got;

	th_deadline(&until, timeout_ms);
	pthread_mutex_lock(&t->lock);
	while ((got = count_lines(t)) < n && !t->stopped)
		if (pthread_cond_timedwait(&t->cond, &t->lock, &until) == ETIMEDOUT)
			break;
	got = count_lines(t);
	pthread_mutex_unlock(&t->lock);
	return got;
}

char *th_vm_output(struct th_vm *t)
{
	char *s;

	pthread_mutex_lock(&t->lock);
	s = malloc(t->out_len + 1);
	memcpy(s, t->out ? t->out : "", t->out_len);
	s[t->out_len] = 0;
	pthread_mutex_unlock(&t->lock);
	return s;
}

void th_sleep_us(uint64_t us)
{
	struct timespec d = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };

	nanosleep(&d, NULL);
}

uint64_t th_seed(void)
{
	const char *s = getenv("UNDERSTUDY_SEED");
	uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid();

	printf("seed %llu (set UNDERSTUDY_SEED to replay)\n", (unsigned long long)seed);
	return seed;
}

/* ---- checkpoint tests: a machine with its console collected ------------------ */


static void vmh_on_out(void *ctx, const uint8_t *buf, size_t len)
{
	struct th_vmh *h = ctx;

	pthread_mutex_lock(&h->lock);
	if (h->len + len + 1 > h->cap) {
		h->cap = (h->len + len + 1) * 2;
		h->out = realloc(h->out, h->cap);
		assert_non_null(h->out);
	}
	memcpy(h->out + h->len, buf, len);
	h->len += len;
	h->out[h->len] = 0;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

struct machine_config th_config(const char *guest, const char *args, uint64_t mem_mb, int ncpus)
{
	struct machine_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.mem_bytes = mem_mb << 20;
	cfg.ncpus = ncpus;
	snprintf(cfg.guest, sizeof(cfg.guest), "%s", guest);
	snprintf(cfg.guest_args, sizeof(cfg.guest_args), "%s", args);
	return cfg;
}

/* A machine (booted when boot is set), parked. */
struct th_vmh *th_vmh_new(const struct machine_config *cfg, bool boot)
{
	struct th_vmh *h = calloc(1, sizeof(*h));
	struct machine_ops ops = { .console_out = vmh_on_out };

	assert_non_null(h);
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	ops.ctx = h;
	assert_int_equal(machine_new(cfg, &ops, &h->m), 0);
	if (boot)
		assert_int_equal(machine_boot(h->m), 0);
	return h;
}

void th_vmh_free(struct th_vmh *h)
{
	machine_free(h->m);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h->out);
	free(h);
}

size_t th_vmh_len(struct th_vmh *h)
{
	size_t n;

	pthread_mutex_lock(&h->lock);
	n = h->len;
	pthread_mutex_unlock(&h->lock);
	return n;
}

/* Waits until the output holds at least len bytes; false on timeout. */
bool th_vmh_wait_len(struct th_vmh *h, size_t len, int timeout_ms)
{
	struct timespec until;
	bool ok;

	th_deadline(&until, timeout_ms);
	pthread_mutex_lock(&h->lock);
	while (h->len < len)
		if (pthread_cond_timedwait(&h->cond, &h->lock, &until) == ETIMEDOUT)
			break;
	ok = h->len >= len;
	pthread_mutex_unlock(&h->lock);
	return ok;
}

static size_t vmh_count_lines(struct th_vmh *h)
{
	size_t n = 0;

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < h->len; i++)
		n += h->out[i] == '\n';
	pthread_mutex_unlock(&h->lock);
	return n;
}

bool th_vmh_wait_lines(struct th_vmh *h, size_t lines, int timeout_ms)
{
	uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000;

	while (vmh_count_lines(h) < lines) {
		if (now_ns() > end)
			return false;
		th_vmh_wait_len(h, th_vmh_len(h) + 1, 20);
	}
	return true;
}

void th_vmh_send(struct th_vmh *h, const char *s)
{
	size_t len = strlen(s), off = 0;

	while (off < len) {
		off += machine_console_input(h->m, (const uint8_t *)s + off, len - off);
		if (off < len)
			usleep(1000);
	}
}

unsigned th_ckpt_seed(const char *name)
{
	const char *e = getenv("CKPT_SEED");
	unsigned seed = e ? (unsigned)strtoul(e, NULL, 0) : (unsigned)(now_ns() ^ (uint64_t)getpid());

	printf("%s: seed %u (CKPT_SEED=%u replays it)\n", name, seed, seed);
	return seed;
}
