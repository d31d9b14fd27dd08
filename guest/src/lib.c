#include "glib.h"

#define UART_LSR (UART_BASE + 5)
#define LSR_DR 0x01

void *memset(void *d, int c, size_t n)
{
	uint8_t *p = d;

	while (n--)
		*p++ = (uint8_t)c;
	return d;
}

void *memcpy(void *d, const void *s, size_t n)
{
	uint8_t *p = d;
	const uint8_t *q = s;

	while (n--)
		*p++ = *q++;
	return d;
}

/* The device model's transmitter is always ready: no LSR poll per byte. */
void con_putc(char c)
{
	outb(UART_BASE, (uint8_t)c);
}

void con_puts(const char *s)
{
	while (*s)
		con_putc(*s++);
}

void con_put_u64(uint64_t v)
{
	char buf[24];
	int i = 0;

	do {
		buf[i++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (i)
		con_putc(buf[--i]);
}

void con_put_hex8(uint8_t b)
{
	con_putc("0123456789abcdef"[b >> 4]);
	con_putc("0123456789abcdef"[b & 15]);
}

void con_put_hex64(uint64_t v)
{
	for (int s = 60; s >= 0; s -= 4)
		con_putc("0123456789abcdef"[(v >> s) & 15]);
}

int con_getc(void)
{
	while (!(inb(UART_LSR) & LSR_DR))
		guest_idle(100000);
	return inb(UART_BASE);
}

size_t con_getline(char *buf, size_t size)
{
	size_t n = 0;
	int c;

	while ((c = con_getc()) != '\n') {
		if (c == '\r')
			continue;
		if (n + 1 < size)
			buf[n++] = (char)c;
	}
	buf[n] = 0;
	return n;
}

int str_eq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

uint64_t arg_u64(const char *args, const char *key, uint64_t def)
{
	const char *p = args;

	while (*p) {
		const char *k = key;

		while (*k && *p == *k)
			p++, k++;
		if (!*k && *p == '=') {
			uint64_t v = 0;

			for (p++; *p >= '0' && *p <= '9'; p++)
				v = v * 10 + (uint64_t)(*p - '0');
			return v;
		}
		while (*p && *p != ',')
			p++;
		if (*p == ',')
			p++;
	}
	return def;
}

uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

uint64_t digest64(const void *p, size_t n)
{
	const uint64_t *w = p;
	uint64_t a = 0x9e3779b97f4a7c15ull, b = 0x632be59bd9b4e019ull;

	/* Two independent lanes keep the multiplier pipeline busy. */
	for (size_t i = 0; i + 1 < n / 8; i += 2) {
		a = (a ^ w[i]) * 0x100000001b3ull;
		b = (b ^ w[i + 1]) * 0x100000001b3ull;
		a = a << 29 | a >> 35;
		b = b << 31 | b >> 33;
	}
	return mix64(a ^ mix64(b + n));
}
