/* Freestanding helpers for the built-in guests (CPL3 code). */
#ifndef US_GLIB_H
#define US_GLIB_H

#define GUEST_FREESTANDING
#include "../guest.h"

#include <stddef.h>
#include <stdint.h>

#define UART_BASE 0x3f8

static inline void outb(uint16_t port, uint8_t v)
{
	__asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}

static inline void outl(uint16_t port, uint32_t v)
{
	__asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port));
}

static inline uint8_t inb(uint16_t port)
{
	uint8_t v;

	__asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;

	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return (uint64_t)hi << 32 | lo;
}

void *memset(void *d, int c, size_t n);
void *memcpy(void *d, const void *s, size_t n);

void con_putc(char c);
void con_puts(const char *s);
void con_put_u64(uint64_t v);
void con_put_hex8(uint8_t b);
void con_put_hex64(uint64_t v);
int con_getc(void);
/* Reads one line (without '\n', '\r' dropped) into buf; returns its length. */
size_t con_getline(char *buf, size_t size);

/* Waits for console input, at most usec, or until the host wants the vCPU. */
static inline void guest_idle(uint32_t usec)
{
	outl(GUEST_PORT_IDLE, usec);
}

static inline void guest_power_off(uint32_t status)
{
	outl(GUEST_PORT_POWER, status);
}

int str_eq(const char *a, const char *b);
/* Value of key in "k=v,k=v", or def. */
uint64_t arg_u64(const char *args, const char *key, uint64_t def);

uint64_t mix64(uint64_t x);
/* 64-bit digest of n bytes (n a multiple of 8). */
uint64_t digest64(const void *p, size_t n);

void guest_main(int cpu, struct guest_bootinfo *bi);

#endif
