/* net/ private, for net/rdma.c and the fuzz target of its setup message
 * (tests/fuzz/fuzz_rdma_setup.c): the one message each side of an RDMA link
 * sends over the TCP setup socket. Its layout, little-endian:
 *   u32 magic "URD2" | u32 address length | u64 ring address | u64 ring key |
 *   u64 ring bytes | address (the endpoint's, from fi_getname)
 * It is network input like any other: rdma_setup_feed() checks every field
 * before the transport uses one. */
#ifndef US_NET_RDMA_H
#define US_NET_RDMA_H

#include <stddef.h>
#include <stdint.h>

#define RDMA_SETUP_MAGIC 0x32445255u /* "URD2"; "URDM" wrote with CQ data */
#define RDMA_SETUP_HDR 32
#define RDMA_ADDR_MAX 128
#define RDMA_RING_MIN 65536ull       /* ring bytes a peer may announce */
#define RDMA_RING_MAX (1ull << 32)

struct rdma_setup {
	uint64_t ring_base;     /* 0 unless the provider uses virtual addresses */
	uint64_t ring_key;
	uint64_t ring_bytes;    /* RDMA_RING_MIN..RDMA_RING_MAX */
	size_t addr_len;        /* 1..RDMA_ADDR_MAX */
	uint8_t addr[RDMA_ADDR_MAX];
};

/* The peer's message as its bytes arrive; zero it before the first byte. */
struct rdma_setup_rx {
	size_t have;
	uint8_t buf[RDMA_SETUP_HDR + RDMA_ADDR_MAX];
};

/* Writes s (addr_len 1..RDMA_ADDR_MAX) to msg, which has room for
 * RDMA_SETUP_HDR + RDMA_ADDR_MAX bytes; returns the message's length. */
size_t rdma_setup_encode(const struct rdma_setup *s, uint8_t *msg);

/* Takes the next len bytes of the peer's message. 0 once it is whole and
 * checked, *out filled; -EAGAIN while bytes are missing; -EPROTO with *why
 * saying what was wrong (a bad header, bytes after the message, a ring size
 * out of range). Once it returned other than -EAGAIN, rx is done. */
int rdma_setup_feed(struct rdma_setup_rx *rx, const uint8_t *data, size_t len,
		    struct rdma_setup *out, const char **why) __attribute__((warn_unused_result));

#endif
