/* Little-endian integers in byte buffers: the one definition every layer
 * uses (the wire in proto/, the boot protocol and PCI config space in
 * machine/, net's own headers, the snapshot file). Here in kmod/ because
 * it is the lowest layer, the one every module may include (docs/design.md:
 * machine/ sits below proto/). p need not be aligned. */
#ifndef US_KMOD_LE_H
#define US_KMOD_LE_H

#include <stdint.h>

static inline uint16_t le_get16(const void *p)
{
	const uint8_t *b = p;

	return (uint16_t)(b[0] | b[1] << 8);
}

static inline uint32_t le_get32(const void *p)
{
	const uint8_t *b = p;

	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t le_get64(const void *p)
{
	const uint8_t *b = p;

	return (uint64_t)le_get32(b) | (uint64_t)le_get32(b + 4) << 32;
}

static inline void le_put16(void *p, uint16_t v)
{
	uint8_t *b = p;

	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static inline void le_put32(void *p, uint32_t v)
{
	uint8_t *b = p;

	le_put16(b, (uint16_t)v);
	le_put16(b + 2, (uint16_t)(v >> 16));
}

static inline void le_put64(void *p, uint64_t v)
{
	uint8_t *b = p;

	le_put32(b, (uint32_t)v);
	le_put32(b + 4, (uint32_t)(v >> 32));
}

#endif
