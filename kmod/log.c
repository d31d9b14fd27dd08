#include "kmod/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Written once by main() before any thread starts, read-only afterwards;
 * only the epoch and the VM's name change later (atomic): a secondary
 * without a name takes its primary's. A name is written into the slot
 * not in use, then published: a line being formatted reads the old one. */
static struct {
	enum log_level level;
	enum log_format format;
	char role[16];
	char vm_slot[2][64];
	_Atomic(const char *) vm;   /* NULL: no name */
	uint64_t t0_ns;
	_Atomic uint64_t epoch;   /* 0: not known (no epoch yet) */
} log_cfg = { LOG_INFO, LOG_FORMAT_TEXT, "", { "", "" }, NULL, 0, 0 };

static const char *log_vm(void)
{
	const char *vm = atomic_load_explicit(&log_cfg.vm, memory_order_acquire);

	return vm ? vm : "";
}

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

void log_set_vm(const char *name)
{
	char *slot = log_cfg.vm_slot[log_vm() == log_cfg.vm_slot[0]];

	snprintf(slot, sizeof(log_cfg.vm_slot[0]), "%s", name ? name : "");
	atomic_store_explicit(&log_cfg.vm, slot, memory_order_release);
}

bool log_has_role(void)
{
	return log_cfg.role[0] != 0;
}

void log_set_format(enum log_format format)
{
	log_cfg.format = format;
}

void log_set_epoch(uint64_t epoch)
{
	atomic_store_explicit(&log_cfg.epoch, epoch, memory_order_relaxed);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one
 * (overlong forms and surrogates are not valid either). */
static size_t utf8_len(const unsigned char *s)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t n;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

size_t log_json_escape(char *out, size_t len, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t o = 0;

	if (!len)
		return 0;
	while (*s) {
		char esc[8];
		const char *piece = esc;
		size_t n = utf8_len(s), plen;

		if (n == 0) {                       /* not UTF-8: U+FFFD */
			piece = "\\ufffd";
			plen = 6;
			n = 1;
		} else if (n > 1) {
			piece = (const char *)s;
			plen = n;
		} else if (*s == '"' || *s == '\\') {
			esc[0] = '\\';
			esc[1] = (char)*s;
			plen = 2;
		} else if (*s == '\n' || *s == '\t' || *s == '\r') {
			esc[0] = '\\';
			esc[1] = *s == '\n' ? 'n' : *s == '\t' ? 't' : 'r';
			plen = 2;
		} else if (*s < 0x20 || *s == 0x7f) {
			plen = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", *s);
		} else {
			piece = (const char *)s;
			plen = 1;
		}
		if (o + plen >= len)
			break;                      /* never half an escape */
		memcpy(out + o, piece, plen);
		o += plen;
		s += n;
	}
	out[o] = 0;
	return o;
}

static const char *const level_text[] = { "ERROR", "WARN ", "INFO ", "DEBUG" };
static const char *const level_json[] = { "error", "warn", "info", "debug" };

/* One JSON object for the line; msg is the formatted message. */
static int json_line(char *line, size_t len, enum log_level level, const char *tag,
		     const char *msg)
{
	uint64_t epoch = atomic_load_explicit(&log_cfg.epoch, memory_order_relaxed);
	char when[40], esc_tag[64], esc_role[40], esc_msg[3072], epoch_s[40] = "", vm_s[400] = "";
	const char *vm = log_vm();
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	log_json_escape(esc_tag, sizeof(esc_tag), tag);
	log_json_escape(esc_role, sizeof(esc_role), log_cfg.role);
	log_json_escape(esc_msg, sizeof(esc_msg), msg);
	if (epoch)
		snprintf(epoch_s, sizeof(epoch_s), ",\"epoch\":%llu", (unsigned long long)epoch);
	if (vm[0]) {
		strcpy(vm_s, ",\"vm\":\"");
		log_json_escape(vm_s + 7, sizeof(vm_s) - 8, vm);
		strcat(vm_s, "\"");
	}
	return snprintf(line, len, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"module\":\"%s\"%s%s%s%s%s,"
			"\"message\":\"%s\"}", when, ts.tv_nsec / 1000000, level_json[level],
			esc_tag, log_cfg.role[0] ? ",\"role\":\"" : "", esc_role,
			log_cfg.role[0] ? "\"" : "", vm_s, epoch_s, esc_msg);
}

void log_msg(enum log_level level, const char *tag, const char *fmt, ...)
{
	const char *env;
	char line[4096], msg[1024];
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
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (log_cfg.format == LOG_FORMAT_JSON) {
		n = json_line(line, sizeof(line), level, tag, msg);
	} else {
		uint64_t t = now_ns() - log_cfg.t0_ns;
		const char *vm = log_vm();

		n = snprintf(line, sizeof(line), "understudy%s%s%s%s%s +%llu.%06llu %s %s: %s",
			     log_cfg.role[0] ? "[" : "", log_cfg.role, log_cfg.role[0] ? "]" : "",
			     vm[0] ? " vm=" : "", vm,
			     (unsigned long long)(t / 1000000000ull),
			     (unsigned long long)(t % 1000000000ull / 1000), level_text[level], tag, msg);
	}
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	fwrite(line, 1, n, stderr);
}
