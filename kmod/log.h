/* One logger for the whole program: levels, a module tag, monotonic time.
 * Text lines go to stderr as
 *   "understudy[role] vm=NAME +12.345678 INFO  tag: message";
 * with LOG_FORMAT_JSON each line is one JSON object instead:
 *   {"time":"2026-01-02T03:04:05.678Z","level":"info","module":"tag",
 *    "role":"primary","vm":"NAME","epoch":42,"message":"..."}
 * ("role", "vm" and "epoch" only when known), for log shippers (journald,
 * Loki). */
#ifndef US_LOG_H
#define US_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

/* Process-wide settings, set once by main() before threads start. */
void log_set_level(enum log_level level);
void log_set_role(const char *role);
bool log_has_role(void);
/* The VM's name (--name), or "" for none; may change once threads run
 * (a secondary takes its primary's): lines read a whole name. */
void log_set_vm(const char *name);
void log_set_format(enum log_format format);
/* The epoch this process last captured or applied, put into JSON lines.
 * Any thread may call it (a relaxed atomic store): the replication engines
 * call it once per epoch. */
void log_set_epoch(uint64_t epoch);
void log_msg(enum log_level level, const char *tag, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_error(tag, ...) log_msg(LOG_ERROR, tag, __VA_ARGS__)
#define log_warn(tag, ...)  log_msg(LOG_WARN, tag, __VA_ARGS__)
#define log_info(tag, ...)  log_msg(LOG_INFO, tag, __VA_ARGS__)
#define log_debug(tag, ...) log_msg(LOG_DEBUG, tag, __VA_ARGS__)

/* Appends s to out (size len, always terminated) as the inside of a JSON
 * string: quotes, backslashes and control bytes escaped, bytes that are not
 * valid UTF-8 replaced by U+FFFD. Returns the length written. */
size_t log_json_escape(char *out, size_t len, const char *s);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);

#define US_MUST_CHECK __attribute__((warn_unused_result))

#endif
