/* Fuzz target: the setup message of an RDMA link (net/rdma.h), which each
 * side reads from the TCP setup socket before it trusts the peer's ring
 * address, key and size: rdma_setup_feed(), the parser the transport calls
 * with each read(). The input is everything the peer sent; it is fed three
 * ways (whole, one byte at a time, cut in two) and the verdicts and the
 * decoded messages must agree. Bytes after a whole message are refused, as
 * on the socket when they come with it. Accepted: the message was taken;
 * its fields are then in range and encode back to exactly the input.
 * Rejected: -EPROTO (with a reason), or -ENODATA when the input ended before
 * the message did. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/rdma.h"
#include "tests/fuzz/fuzz.h"

static int feed(const uint8_t *data, size_t size, size_t step, struct rdma_setup *out)
{
	struct rdma_setup_rx rx;
	const char *why = NULL;
	size_t off = 0, n;
	int r = -EAGAIN;

	memset(&rx, 0, sizeof(rx));
	memset(out, 0, sizeof(*out));
	while (off < size && r == -EAGAIN) {
		n = step && size - off > step ? step : size - off;
		r = rdma_setup_feed(&rx, data + off, n, out, &why);
		off += n;
	}
	if (r == 0 && off < size)
		return -EPROTO; /* whole before the input ended: bytes after it */
	if (r == -EPROTO && !why)
		abort(); /* refused without saying why (the link logs it) */
	if (r != 0 && r != -EPROTO && r != -EAGAIN)
		abort();
	return r == -EAGAIN ? -ENODATA : r;
}

int fuzz_verdict(const uint8_t *data, size_t size)
{
	struct rdma_setup a, b, c;
	uint8_t msg[RDMA_SETUP_HDR + RDMA_ADDR_MAX];
	int ra = feed(data, size, 0, &a);
	int rb = feed(data, size, 1, &b);
	int rc = feed(data, size, size / 2 ? size / 2 : 1, &c);

	if (ra != rb || ra != rc)
		abort(); /* the verdict depends on how the bytes were cut */
	if (ra == -ENODATA && size >= RDMA_SETUP_HDR + RDMA_ADDR_MAX)
		abort(); /* still waiting after the longest possible message */
	if (ra)
		return ra;
	if (memcmp(&a, &b, sizeof(a)) || memcmp(&a, &c, sizeof(a)))
		abort();
	if (a.addr_len < 1 || a.addr_len > RDMA_ADDR_MAX || a.ring_bytes < RDMA_RING_MIN ||
	    a.ring_bytes > RDMA_RING_MAX)
		abort(); /* a field out of range got through */
	if (rdma_setup_encode(&a, msg) != size || memcmp(msg, data, size))
		abort(); /* what was taken is not what was sent */
	return 0;
}

FUZZ_LIBFUZZER_ENTRY
