/* Test harness: a machine in this process with its console captured. */
#ifndef US_TEST_HARNESS_H
#define US_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "machine/machine.h"

struct th_vm {
	struct machine *m;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char *out;
	size_t out_len, out_cap;
	bool stopped;
	int status;
};

/* True when /dev/kvm can be used; otherwise prints a loud SKIP reason. */
bool th_kvm_available(void);
/* Creates and (when boot) boots a machine running guest ("name[:args]"). */
int th_vm_new(struct th_vm *t, const char *guest, uint64_t mem_bytes, int ncpus, bool boot);
void th_vm_free(struct th_vm *t);
void th_vm_send(struct th_vm *t, const char *s);
/* Waits until the output holds n lines; returns the count seen. */
int th_vm_wait_lines(struct th_vm *t, int n, int timeout_ms);
int th_vm_lines(struct th_vm *t);
/* Copies the output (NUL-terminated) into a fresh buffer the caller frees. */
char *th_vm_output(struct th_vm *t);
void th_sleep_us(uint64_t us);
/* CLOCK_REALTIME deadline timeout_ms from now, for pthread_cond_timedwait. */
void th_deadline(struct timespec *until, int timeout_ms);
uint64_t th_seed(void);

/* ---- checkpoint tests: a machine with its console collected --------------
 * (assertions fail the calling cmocka test) */

struct th_vmh {
	struct machine *m;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char *out;
	size_t len, cap;
};

struct machine_config th_config(const char *guest, const char *args, uint64_t mem_mb, int ncpus);
/* A machine (booted when boot is set), parked. */
struct th_vmh *th_vmh_new(const struct machine_config *cfg, bool boot);
void th_vmh_free(struct th_vmh *h);
size_t th_vmh_len(struct th_vmh *h);
/* Waits until the output holds at least len bytes; false on timeout. */
bool th_vmh_wait_len(struct th_vmh *h, size_t len, int timeout_ms);
bool th_vmh_wait_lines(struct th_vmh *h, size_t lines, int timeout_ms);
void th_vmh_send(struct th_vmh *h, const char *s);
/* Prints the seed of a seeded test; CKPT_SEED=N replays one. */
unsigned th_ckpt_seed(const char *name);

#endif
