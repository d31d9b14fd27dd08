/* Failures sorted by whose they are: the peer's (gone, or talking nonsense)
 * or ours (a passing shortage, or a machine or encoder that will not work).
 * The agents decide per kind; this file only names and classifies. */
#include "replication/replication_int.h"

#include "kmod/log.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const kind_names[] = {
	[REPL_FAULT_NONE] = "none",
	[REPL_FAULT_PEER_LOST] = "peer lost",
	[REPL_FAULT_PEER_PROTOCOL] = "peer protocol error",
	[REPL_FAULT_LOCAL_TRANSIENT] = "local transient failure",
	[REPL_FAULT_LOCAL_FATAL] = "local fatal failure",
};

const char *repl_fault_kind_name(enum repl_fault_kind kind)
{
	return kind <= REPL_FAULT_LOCAL_FATAL ? kind_names[kind] : "?";
}

enum repl_fault_kind repl_fault_local(int err)
{
	switch (err) {
	case -ENOMEM:
	case -ENOBUFS:
	case -EAGAIN:
	case -EINTR:
		return REPL_FAULT_LOCAL_TRANSIENT;
	default:
		return REPL_FAULT_LOCAL_FATAL;
	}
}

enum repl_fault_kind repl_fault_send(int err)
{
	switch (err) {
	case -ENOTCONN:
	case -ESHUTDOWN:
	case -EPIPE:
	case -ECONNRESET:
		return REPL_FAULT_PEER_LOST;
	default:
		return repl_fault_local(err);
	}
}

void repl_fault_set(struct repl_fault *f, enum repl_fault_kind kind, int err, const char *fmt, ...)
{
	va_list ap;

	f->kind = kind;
	f->err = err;
	va_start(ap, fmt);
	vsnprintf(f->what, sizeof(f->what), fmt, ap);
	va_end(ap);
	/* The text may quote the peer: keep it one printable line for status. */
	for (char *c = f->what; *c; c++)
		if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = '\'';
}

void repl_fault_reason(const struct repl_fault *f, char *out, size_t len)
{
	if (f->kind == REPL_FAULT_NONE && len)
		out[0] = 0;
	else
		snprintf(out, len, "%s: %s", repl_fault_kind_name(f->kind), f->what);
}

/* A loop that hangs while its threads run on: the beat thread must stop
 * vouching for it after REPL_BEAT_PROGRESS_MS (sys_fast_failover). */
char *repl_fault_test_wedge(const char *req)
{
	const char *hooks = getenv("UNDERSTUDY_TEST_HOOKS");
	struct timespec ts;
	char *end, *out = NULL;
	unsigned long ms;

	if (!hooks || strcmp(hooks, "1"))
		return strdup("error test wedge is a test hook (UNDERSTUDY_TEST_HOOKS=1)\n");
	errno = 0;
	ms = strtoul(req, &end, 10);
	if (errno || end == req || *end || ms < 1 || ms > 60000)
		return strdup("error test wedge MS: 1..60000\n");
	log_warn("fault", "test hook: this agent's loop hangs for %lu ms (its threads run on)", ms);
	ts = (struct timespec){ .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	log_warn("fault", "test hook: the loop runs again after %lu ms", ms);
	if (asprintf(&out, "ok wedged %lu ms\n", ms) < 0)
		out = NULL;
	return out;
}

/* A migration's two sides stop at a named point of the hand-over, for
 * sys_migrate_handover to kill the destination there: "paused" (the
 * source, the guest paused for the final epoch, nothing of it written
 * yet) and "handover" (the destination, right after it read the order:
 * the order left the source). */
static bool test_stop_at(const char *where)
{
	const char *hooks = getenv("UNDERSTUDY_TEST_HOOKS"), *at = getenv("UNDERSTUDY_TEST_STOP");

	return hooks && !strcmp(hooks, "1") && at && !strcmp(at, where);
}

void repl_fault_test_stop(const char *where)
{
	if (!test_stop_at(where))
		return;
	log_warn("fault", "test hook: stopping at %s (SIGSTOP)", where);
	raise(SIGSTOP);
}

/* "contend" (a migration's destination, its witness thread about to
 * contend for the key after the hand-over order: the loop runs on and
 * acknowledges the final epoch, but the key is never taken); "withdraw"
 * (a witness thread about to write K/standby = none). The thread holds
 * for good, or until the file UNDERSTUDY_TEST_RELEASE exists. */
void repl_fault_test_hold(const char *where)
{
	const char *release = getenv("UNDERSTUDY_TEST_RELEASE");

	if (!test_stop_at(where))
		return;
	log_warn("fault", "test hook: this thread holds at %s %s%s", where,
		 release ? "until there is a file " : "for good", release ? release : "");
	while (!release || access(release, F_OK))
		usleep(20000);
	log_warn("fault", "test hook: released at %s", where);
}
