/* Fuzz target: the framing of a control-socket request, control_feed() of
 * net/control.c, which the socket path calls with each read(). The input is
 * what one client sends before it closes; it is fed three ways (whole, one
 * byte at a time, cut in two) and the three must agree: framing may not
 * depend on how the bytes came. Accepted: a request line came out of it
 * (what the handler would get), and it is exactly the bytes before the
 * first '\n' without a '\r' just before, no NUL, shorter than the limit.
 * Rejected: too long, a NUL byte, or the client closed before a '\n'
 * (-ENODATA: the socket path just closes the connection then). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/control.h"
#include "tests/fuzz/fuzz.h"

/* Feeds data[0..size) in pieces of at most step bytes (0: all at once),
 * as reads would bring it; the request, if any, is copied to out. */
static int feed(const uint8_t *data, size_t size, size_t step, char *out)
{
	struct control_line l;
	const char *req = NULL;
	size_t off = 0, n;
	int r = 0;

	memset(&l, 0, sizeof(l));
	while (off < size && r == 0) {
		n = step && size - off > step ? step : size - off;
		r = control_feed(&l, data + off, n, &req);
		off += n;
	}
	if (r == 1) {
		if (!req || strlen(req) >= CONTROL_MAX_REQUEST)
			abort();
		strcpy(out, req);
		return 0;
	}
	return r == 0 ? -ENODATA : r;
}

/* What the request must be when data is accepted: the first line. */
static void check_request(const uint8_t *data, size_t size, const char *req)
{
	size_t len = strlen(req);
	const uint8_t *nl = memchr(data, '\n', size);

	if (!nl || memchr(data, 0, (size_t)(nl - data)) || nl - data >= CONTROL_MAX_REQUEST - 1)
		abort(); /* no line, a NUL in it, or too long: must not be accepted */
	if (strchr(req, '\n') || memcmp(req, data, len))
		abort();
	if (data + len != nl && !(data + len + 1 == nl && data[len] == '\r'))
		abort(); /* the request is not the whole line */
}

int fuzz_verdict(const uint8_t *data, size_t size)
{
	char a[CONTROL_MAX_REQUEST], b[CONTROL_MAX_REQUEST], c[CONTROL_MAX_REQUEST];
	size_t head = size < CONTROL_MAX_REQUEST - 1 ? size : CONTROL_MAX_REQUEST - 1;
	const uint8_t *nl = memchr(data, '\n', head);
	int ra = feed(data, size, 0, a);
	int rb = feed(data, size, 1, b);
	int rc = feed(data, size, size / 2 ? size / 2 : 1, c);

	if (ra != rb || ra != rc)
		abort(); /* the verdict depends on how the bytes were cut */
	if (ra == 0) {
		if (strcmp(a, b) || strcmp(a, c))
			abort();
		check_request(data, size, a);
	} else if (ra == -EMSGSIZE) {
		if (head < CONTROL_MAX_REQUEST - 1 || nl || memchr(data, 0, head))
			abort(); /* refused as too long, yet there was a line or a NUL */
	} else if (ra == -EINVAL) {
		if (!memchr(data, 0, nl ? (size_t)(nl - data) : head))
			abort(); /* refused for a NUL byte that is not in the line */
	} else if (ra != -ENODATA || nl || memchr(data, 0, head) || head == CONTROL_MAX_REQUEST - 1) {
		abort(); /* said incomplete, but the bytes were enough for a verdict */
	}
	return ra;
}

FUZZ_LIBFUZZER_ENTRY
