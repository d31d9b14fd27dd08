/* What `understudy status` shows of every VM, and the helpers of the
 * engines' status (primary/status.c, secondary/status.c). Read only:
 * nothing here changes an agent's state. */
#include "replication/replication.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

const char *repl_status_one_line(char *s)
{
	for (char *c = s; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = ' ';
	return s;
}

void repl_status_add(char *out, size_t len, size_t *n, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (*n >= len)
		return;
	va_start(ap, fmt);
	k = vsnprintf(out + *n, len - *n, fmt, ap);
	va_end(ap);
	if (k > 0)
		*n += (size_t)k;
}

/* "2026-12-05 16:20:01 UTC" (text) or "2026-12-05T16:20:01Z" (JSON). */
static void wall(const struct timespec *t, bool iso, char *out, size_t len)
{
	struct tm tm;

	gmtime_r(&t->tv_sec, &tm);
	strftime(out, len, iso ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%d %H:%M:%S UTC", &tm);
}

static bool vm_runs(const struct repl_vm *v)
{
	return v && v->running_since_ns;
}

void repl_vm_status_text(const struct repl_vm *v, const struct machine_config *cfg, char *out,
			 size_t len, size_t *n)
{
	char t[40];

	if (!cfg->guest[0]) {
		repl_status_add(out, len, n, "guest none yet (no primary has connected)\n");
		return;
	}
	if (cfg->kernel[0])
		repl_status_add(out, len, n, "guest %s (kernel %s)\n", cfg->guest, cfg->kernel);
	else
		repl_status_add(out, len, n, "guest %s\n", cfg->guest);
	repl_status_add(out, len, n, "memory %llu MiB\nvCPUs %d\n", (unsigned long long)(cfg->mem_bytes >> 20),
			cfg->ncpus);
	if (vm_runs(v)) {
		wall(&v->running_since, false, t, sizeof(t));
		repl_status_add(out, len, n, "uptime %.1f s on this host (since %s)\n",
				(now_ns() - v->running_since_ns) / 1e9, t);
	} else {
		repl_status_add(out, len, n, "uptime none: the guest does not run on this host (a standby)\n");
	}
	repl_status_add(out, len, n, "devices serial console");
	if (cfg->ndisks)
		repl_status_add(out, len, n, ", virtio-blk (%s, %llu MiB)", cfg->disk[0] ? cfg->disk : "no image yet",
				(unsigned long long)(cfg->disk_bytes >> 20));
	if (cfg->nnets)
		repl_status_add(out, len, n, ", virtio-net (tap %s)", cfg->net_tap[0] ? cfg->net_tap : "none yet");
	repl_status_add(out, len, n, "\n");
	if (vm_runs(v) && v->took_over) {
		wall(&v->took_over_at, false, t, sizeof(t));
		repl_status_add(out, len, n, "took over at epoch %llu, %s, after %.0f ms of silence\n",
				(unsigned long long)v->took_over_epoch, t, v->took_over_silence_ms);
	}
}

void repl_vm_status_json(const struct repl_vm *v, const struct machine_config *cfg,
			 struct json_object *o)
{
	json_object *dev = json_object_new_array();
	bool runs = vm_runs(v), took = runs && v->took_over;
	char t[40] = "";

	proto_json_add_str(o, "guest", cfg->guest);
	proto_json_add_u64(o, "mem_bytes", cfg->mem_bytes);
	proto_json_add_u64(o, "vcpus", cfg->guest[0] && cfg->ncpus > 0 ? (uint64_t)cfg->ncpus : 0);
	proto_json_add_fixed(o, "uptime_s", runs ? (now_ns() - v->running_since_ns) / 1e9 : 0.0, 1);
	if (runs)
		wall(&v->running_since, true, t, sizeof(t));
	proto_json_add_str(o, "running_since", t);
	if (cfg->guest[0])
		json_object_array_add(dev, json_object_new_string("serial"));
	if (cfg->ndisks)
		json_object_array_add(dev, json_object_new_string("virtio-blk"));
	if (cfg->nnets)
		json_object_array_add(dev, json_object_new_string("virtio-net"));
	if (o)
		json_object_object_add(o, "devices", dev);
	else
		json_object_put(dev);
	t[0] = 0;
	if (took)
		wall(&v->took_over_at, true, t, sizeof(t));
	proto_json_add_bool(o, "took_over", took);
	proto_json_add_u64(o, "took_over_epoch", took ? v->took_over_epoch : 0);
	proto_json_add_str(o, "took_over_at", t);
	proto_json_add_fixed(o, "took_over_silence_ms", took ? v->took_over_silence_ms : 0.0, 1);
}
