/* One logger for the whole program: levels, a module tag, monotonic time.
 * Lines go to stderr as "understudy[role] +12.345678 INFO  tag: message". */
#ifndef US_LOG_H
#define US_LOG_H

#include <stdint.h>

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Process-wide settings, set once by main() before threads start. */
void log_set_level(enum log_level level);
void log_set_role(const char *role);
void log_msg(enum log_level level, const char *tag, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_error(tag, ...) log_msg(LOG_ERROR, tag, __VA_ARGS__)
#define log_warn(tag, ...)  log_msg(LOG_WARN, tag, __VA_ARGS__)
#define log_info(tag, ...)  log_msg(LOG_INFO, tag, __VA_ARGS__)
#define log_debug(tag, ...) log_msg(LOG_DEBUG, tag, __VA_ARGS__)

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);

#define US_MUST_CHECK __attribute__((warn_unused_result))

#endif
