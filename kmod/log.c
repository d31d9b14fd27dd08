#include "kmod/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Written once by main() before any thread starts, read-only afterwards. */
static struct {
	enum log_level level;
	char role[16];
	uint64_t t0_ns;
} log_cfg = { LOG_INFO, "", 0 };

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void log_set_level(enum log_level level)
{
	log_cfg.level = level;
}

void log_set_role(const char *role)
{
	snprintf(log_cfg.role, sizeof(log_cfg.role), "%s", role);
}

void log_msg(enum log_level level, const char *tag, const char *fmt, ...)
{
	static const char *const names[] = { "ERROR", "WARN ", "INFO ", "DEBUG" };
	const char *env;
	char line[1024];
	va_list ap;
	int n;

	if (!log_cfg.t0_ns) {
		log_cfg.t0_ns = now_ns();
		env = getenv("UNDERSTUDY_LOG");
		if (env && !strcmp(env, "debug"))
			log_cfg.level = LOG_DEBUG;
	}
	if (level > log_cfg.level)
		return;
	uint64_t t = now_ns() - log_cfg.t0_ns;
	n = snprintf(line, sizeof(line), "understudy%s%s%s +%llu.%06llu %s %s: ",
		     log_cfg.role[0] ? "[" : "", log_cfg.role, log_cfg.role[0] ? "]" : "",
		     (unsigned long long)(t / 1000000000ull),
		     (unsigned long long)(t % 1000000000ull / 1000), names[level], tag);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	fwrite(line, 1, n, stderr);
}
