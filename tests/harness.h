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

#endif
