/* Test hook: with UNDERSTUDY_EVENT_LOG=FILE set, an agent appends one line
 * per output-commit event, stamped with CLOCK_MONOTONIC (the clock of
 * Python's time.monotonic_ns(), so a test can put its own actions, such as
 * stopping the secondary, on the same time line, and compare two agents on
 * the same host):
 *     <ns> capture <epoch>
 *     <ns> ack <epoch>
 *     <ns> release <epoch> <bytes_from> <bytes_to>   output of an acked epoch
 *     <ns> out <bytes_from> <bytes_to>      ungated output (unprotected, taken over)
 *     <ns> replay <bytes_from> <bytes_to>   a takeover replays held output
 *     <ns> contend                          a standby starts contending for the key
 *     <ns> fenced                           the lease ran out: nothing leaves any more
 * Each line is one write() to a file opened with O_APPEND: lines never mix.
 * Unset, an event costs one getenv(); the epoch's own events test it in line
 * (repl_event_log_on) and do not call here. */
#include "replication/replication.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

void repl_event_log(const char *fmt, ...)
{
	const char *path = getenv("UNDERSTUDY_EVENT_LOG");
	struct timespec ts;
	char line[160];
	va_list ap;
	int n, fd;

	if (!path || !*path)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	n = snprintf(line, sizeof(line), "%llu ",
		     (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)n) != n)
		log_warn("events", "event log %s: short write", path);
	close(fd);
}
