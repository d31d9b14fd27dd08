/* What `understudy status` shows of each agent (read only: nothing here
 * changes an agent's state). Text, or JSON with "status json". */
#include "replication/postcopy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

static const char *const pstate_names[] = {
	"connecting", "hello", "syncing", "first-checkpoint", "protected", "switching", "unprotected",
	"fenced", "done",
};

static const char *const sstate_names[] = {
	"waiting", "hello", "standby", "contending", "fence-failed", "active", "fenced", "done",
};

/* What a hand-over would still send, before encoding: the rest of the sync
 * round, or the pages the last epoch dirtied (the next final epoch's like). */
static uint64_t left_bytes(const struct repl_primary *p)
{
	if (p->state == P_SYNC)
		return repl_sync_left(&p->sync) * KVM_PAGE_SIZE;
	if (p->state == P_PROTECTING || p->state == P_PROTECTED)
		return p->ep.st.last_dirty_pages * KVM_PAGE_SIZE;
	return 0;
}

/* What status shows of the agent's last failure and of its fencing. */
struct status_words {
	char reason[200];
	char fencing[200];
};

/* The text status has one field a line: a reason's control characters
 * (a peer's text may hold any) are shown as spaces there; JSON carries
 * the reason as it is. */
static const char *one_line(char *s)
{
	for (char *c = s; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = ' ';
	return s;
}

/* Appends to the text status; past len the text is cut (still terminated). */
static void add(char *out, size_t len, size_t *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void add(char *out, size_t len, size_t *n, const char *fmt, ...)
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
		add(out, len, n, "guest none yet (no primary has connected)\n");
		return;
	}
	if (cfg->kernel[0])
		add(out, len, n, "guest %s (kernel %s)\n", cfg->guest, cfg->kernel);
	else
		add(out, len, n, "guest %s\n", cfg->guest);
	add(out, len, n, "memory %llu MiB\nvCPUs %d\n", (unsigned long long)(cfg->mem_bytes >> 20),
	    cfg->ncpus);
	if (vm_runs(v)) {
		wall(&v->running_since, false, t, sizeof(t));
		add(out, len, n, "uptime %.1f s on this host (since %s)\n",
		    (now_ns() - v->running_since_ns) / 1e9, t);
	} else {
		add(out, len, n, "uptime none: the guest does not run on this host (a standby)\n");
	}
	add(out, len, n, "devices serial console");
	if (cfg->ndisks)
		add(out, len, n, ", virtio-blk (%s, %llu MiB)", cfg->disk[0] ? cfg->disk : "no image yet",
		    (unsigned long long)(cfg->disk_bytes >> 20));
	if (cfg->nnets)
		add(out, len, n, ", virtio-net (tap %s)", cfg->net_tap[0] ? cfg->net_tap : "none yet");
	add(out, len, n, "\n");
	if (vm_runs(v) && v->took_over) {
		wall(&v->took_over_at, false, t, sizeof(t));
		add(out, len, n, "took over at epoch %llu, %s, after %.0f ms of silence\n",
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

static void pri_words(const struct repl_primary *p, struct status_words *w)
{
	repl_fault_reason(&p->fault, w->reason, sizeof(w->reason));
	if (p->wit)
		snprintf(w->fencing, sizeof(w->fencing), REPL_FENCING_WITNESS " (key %s, lease %lld ms "
			 "left, standby %s)", p->o->witness.key, (long long)repl_witness_left_ms(p->wit),
			 p->vouched ? "vouched for" : "not vouched for");
	else
		snprintf(w->fencing, sizeof(w->fencing), "%s", REPL_FENCING);
}

static char *pri_status_json(const struct repl_primary *p)
{
	const struct repl_epochs *q = &p->ep;
	const struct repl_disk_cap *d = &q->disk;
	uint64_t p50, p99, de = d->epochs_with_blocks;
	json_object *o = json_object_new_object();
	struct status_words w;

	pri_words(p, &w);
	repl_stats_pause_pct(&q->st, &p50, &p99);
	proto_json_add_str(o, "role", "primary");
	proto_json_add_str(o, "state", repl_primary_state(p));
	proto_json_add_str(o, "name", repl_ops_vm(&p->o->ops, p->o->cfg.guest));
	repl_vm_status_json(p->vm, p->vm ? &p->vm->m->cfg : &p->o->cfg, o);
	proto_json_add_str(o, "peer", p->o->peer);
	proto_json_add_u64(o, "epoch", q->epoch);
	proto_json_add_u64(o, "acked", q->acked);
	proto_json_add_fixed(o, "pause_p50_us", p50 / 1e3, 1);
	proto_json_add_fixed(o, "pause_p99_us", p99 / 1e3, 1);
	proto_json_add_u64(o, "dirty_pages_last", q->st.last_dirty_pages);
	proto_json_add_fixed(o, "dirty_pages_avg", q->st.epochs ? (double)q->st.dirty_pages_total /
			     (double)q->st.epochs : 0.0, 1);
	proto_json_add_u64(o, "bytes_sent", p->link.bytes_sent);
	proto_json_add_fixed(o, "lag_ms", q->st.lag_ns / 1e6, 3);
	proto_json_add_u64(o, "stretched", q->st.stretched);
	proto_json_add_fixed(o, "since_heartbeat_ms", p->link.conn ?
			     (now_ns() - p->link.last_rx_ns) / 1e6 : -1, 1);
	proto_json_add_fixed(o, "pause_max_us", q->worst.pause_ns / 1e3, 1);
	proto_json_add_u64(o, "pause_max_pages", q->worst_pages);
	proto_json_add_fixed(o, "pause_max_harvest_us", q->worst.harvest_ns / 1e3, 1);
	proto_json_add_fixed(o, "pause_max_copy_us", q->worst.copy_ns / 1e3, 1);
	proto_json_add_fixed(o, "pause_max_state_us", q->worst.state_ns / 1e3, 1);
	proto_json_add_str(o, "reason", w.reason);
	proto_json_add_str(o, "fencing", w.fencing);
	proto_json_add_fixed(o, "migration_downtime_ms", p->downtime_ms, 3);
	proto_json_add_fixed(o, "migration_total_ms", p->migration_ms, 3);
	proto_json_add_u64(o, "throttle_pct", p->throttle_pct);
	proto_json_add_u64(o, "resumed_epoch", p->o->resume_epoch);
	proto_json_add_fixed(o, "switch_in_ms", p->o->switch_downtime_ms, 3);
	proto_json_add_u64(o, "precopy_passes", q->st.pre_passes);
	proto_json_add_u64(o, "precopy_pages", q->st.pre_pages);
	proto_json_add_u64(o, "precopy_resent", q->st.pre_resent);
	proto_json_add_u64(o, "left_bytes", left_bytes(p));
	proto_json_add_fixed(o, "predicted_downtime_ms", p->predicted_ms, 3);
	/* Counts of the hot set (machine_set_hot_budget) for the benchmarks:
	 * the pages it holds now, its budget, and the pages every harvest so
	 * far re-protected (each costs a write fault when rewritten). */
	proto_json_add_u64(o, "hot_pages", p->vm ? p->vm->m->hot_pages : 0);
	proto_json_add_u64(o, "hot_budget", p->vm ? p->vm->m->hot_budget : 0);
	proto_json_add_u64(o, "reprotected_pages", p->vm ? p->vm->m->stats.reprotected : 0);
	/* What started the epochs: the timer, or guest output waiting (an
	 * early epoch); the first and a final epoch are in neither. */
	proto_json_add_u64(o, "epochs_timer", p->epochs_timer);
	proto_json_add_u64(o, "epochs_output", p->epochs_output);
	repl_pc_src_status_json(p, o);
	/* Disk replication: blocks per epoch that had any, and their copy in the pause. */
	if (d->nblocks) {
		proto_json_add_u64(o, "disk_epochs", de);
		proto_json_add_u64(o, "disk_blocks", d->blocks_total);
		proto_json_add_u64(o, "disk_sync_blocks", d->sync_blocks);
		proto_json_add_fixed(o, "disk_blocks_per_epoch",
				     de ? (double)d->blocks_total / de : 0.0, 1);
		proto_json_add_fixed(o, "disk_copy_us_per_epoch",
				     de ? d->copy_ns_total / 1e3 / de : 0.0, 1);
	}
	return proto_json_line(o);
}

/* One field a line, only those that apply: the migration, switchover,
 * throttle and pre-copy lines once there is one (the JSON has them all). */
static int pri_status_format(void *ctx, const char *req, char *out, size_t len)
{
	struct repl_primary *p = ctx;
	const struct repl_epochs *q = &p->ep;
	const struct repl_disk_cap *d = &q->disk;
	uint64_t p50, p99, de = d->epochs_with_blocks;
	struct status_words w;
	char pc[512];
	size_t n = 0;

	(void)req;
	pri_words(p, &w);
	repl_stats_pause_pct(&q->st, &p50, &p99);
	add(out, len, &n, "role primary\nstate %s\nname %s\n", repl_primary_state(p),
	    repl_ops_vm(&p->o->ops, p->o->cfg.guest));
	repl_vm_status_text(p->vm, p->vm ? &p->vm->m->cfg : &p->o->cfg, out, len, &n);
	add(out, len, &n, "peer %s\nepoch %llu\nacked %llu\npause p50 %.1f us\npause p99 %.1f us\n"
	    "dirty pages last %llu\ndirty pages avg %.1f\nbytes sent %llu\nlag %.3f ms\n"
	    "stretched epochs %llu\n", p->o->peer ? p->o->peer : "", (unsigned long long)q->epoch,
	    (unsigned long long)q->acked, p50 / 1e3, p99 / 1e3,
	    (unsigned long long)q->st.last_dirty_pages,
	    q->st.epochs ? (double)q->st.dirty_pages_total / (double)q->st.epochs : 0.0,
	    (unsigned long long)p->link.bytes_sent, q->st.lag_ns / 1e6,
	    (unsigned long long)q->st.stretched);
	/* The JSON's epochs_timer and epochs_output (the first and a final
	 * epoch are in neither). */
	add(out, len, &n, "epochs by trigger: timer %llu, output %llu\n",
	    (unsigned long long)p->epochs_timer, (unsigned long long)p->epochs_output);
	if (p->link.conn)
		add(out, len, &n, "since heartbeat %.1f ms\n", (now_ns() - p->link.last_rx_ns) / 1e6);
	if (q->worst.pause_ns)
		add(out, len, &n, "longest pause %.1f us: %llu pages, harvest %.1f us, copy %.1f us, "
		    "state %.1f us\n", q->worst.pause_ns / 1e3, (unsigned long long)q->worst_pages,
		    q->worst.harvest_ns / 1e3, q->worst.copy_ns / 1e3, q->worst.state_ns / 1e3);
	add(out, len, &n, "reason %s\nfencing: %s\n", w.reason[0] ? one_line(w.reason) : "none",
	    one_line(w.fencing));
	if (p->o->resume_epoch)
		add(out, len, &n, "resumed from epoch %llu (switchover, downtime about %.3f ms)\n",
		    (unsigned long long)p->o->resume_epoch, p->o->switch_downtime_ms);
	if (p->migrated || p->downtime_ms > 0 || p->migration_ms > 0)
		add(out, len, &n, "migration downtime %.3f ms\nmigration total %.3f ms\n",
		    p->downtime_ms, p->migration_ms);
	if (p->throttle_pct || p->migrate_ms)
		add(out, len, &n, "throttle %u %%\n", p->throttle_pct);
	if (q->st.pre_passes)
		add(out, len, &n, "pre-copy %llu passes, %llu pages, %llu sent again at the pause\n",
		    (unsigned long long)q->st.pre_passes, (unsigned long long)q->st.pre_pages,
		    (unsigned long long)q->st.pre_resent);
	if (p->migrate_ms || p->switching_over)
		add(out, len, &n, "left to send about %llu bytes\npredicted downtime %.3f ms\n",
		    (unsigned long long)left_bytes(p), p->predicted_ms);
	repl_pc_src_status(p, pc, sizeof(pc));
	add(out, len, &n, "%s", pc);
	if (d->nblocks)
		add(out, len, &n, "disk: %llu epochs with blocks, %llu blocks, %.1f blocks and %.1f us "
		    "of copy in the pause per such epoch\n", (unsigned long long)de,
		    (unsigned long long)d->blocks_total, de ? (double)d->blocks_total / de : 0.0,
		    de ? d->copy_ns_total / 1e3 / de : 0.0);
	return (int)n;
}

char *repl_primary_status_text(void *ctx, const char *req)
{
	if (strstr(req, "json"))
		return pri_status_json(ctx);
	return repl_status_reply(pri_status_format, ctx, req);
}

/* The state for status: a standby that could not take over is not healthy. */
const char *repl_sec_state_name(const struct repl_secondary *s)
{
	if (s->state == S_STANDBY && !s->con)
		return "standby-unready";
	return sstate_names[s->state];
}

static void sec_words(const struct repl_secondary *s, struct status_words *w)
{
	repl_fault_reason(&s->fault, w->reason, sizeof(w->reason));
	if (s->wit)
		snprintf(w->fencing, sizeof(w->fencing), REPL_FENCING_WITNESS " (key %s, %s)",
			 s->o->witness.key, s->state >= S_ACTIVE ? "this side owns it" :
			 "takeover only after winning it");
	else
		snprintf(w->fencing, sizeof(w->fencing), "%s", REPL_FENCING);
}

/* What is known of the guest: the primary's, else what --guest pins. */
static const struct machine_config *sec_cfg(const struct repl_secondary *s)
{
	return s->cfg.guest[0] || !s->o ? &s->cfg : &s->o->pin;
}

/* A standby that took over runs the guest: a primary, unprotected until
 * `understudy protect` attaches a secondary (then the engine answers). */
static char *sec_status_json(const struct repl_secondary *s)
{
	const struct repl_staging *g = &s->stage;
	bool took_over = s->state == S_ACTIVE;
	json_object *o = json_object_new_object();
	struct status_words w;
	uint64_t p50, p99;

	sec_words(s, &w);
	repl_stats_pause_pct(&g->st, &p50, &p99);
	proto_json_add_str(o, "role", took_over ? "primary" : "secondary");
	proto_json_add_str(o, "state", took_over ? "unprotected" : repl_sec_state_name(s));
	proto_json_add_str(o, "name", repl_ops_vm(&s->o->ops, s->cfg.guest));
	repl_vm_status_json(s->vm, sec_cfg(s), o);
	proto_json_add_str(o, "peer", s->peer_addr);
	proto_json_add_u64(o, "epoch", g->applied);
	proto_json_add_u64(o, "acked", g->applied);
	proto_json_add_fixed(o, "apply_p50_us", p50 / 1e3, 1);
	proto_json_add_fixed(o, "apply_p99_us", p99 / 1e3, 1);
	proto_json_add_u64(o, "dirty_pages_last", g->st.last_dirty_pages);
	proto_json_add_u64(o, "bytes_received", s->link.bytes_rcvd);
	proto_json_add_fixed(o, "since_heartbeat_ms", (now_ns() - s->link.last_rx_ns) / 1e6, 1);
	proto_json_add_u64(o, "verify_ok", g->verify_ok);
	proto_json_add_u64(o, "verify_failed", g->verify_failed);
	proto_json_add_str(o, "reason", w.reason);
	proto_json_add_str(o, "fencing", w.fencing);
	proto_json_add_u64(o, "switchovers", s->switches);
	proto_json_add_u64(o, "switch_epoch", s->switch_epoch);
	proto_json_add_fixed(o, "switch_downtime_ms", s->switch_downtime_ms, 3);
	return proto_json_line(o);
}

static bool same_fault(const struct repl_fault *a, const struct repl_fault *b)
{
	return a->kind == b->kind && a->err == b->err && !strcmp(a->what, b->what);
}

/* A standby shows its link and applies; a standby that took over shows
 * the takeover instead (the primary's silence since and the reason that
 * led to it are history: the took-over line says them). */
static int sec_status_format(void *ctx, const char *req, char *out, size_t len)
{
	struct repl_secondary *s = ctx;
	const struct repl_staging *g = &s->stage;
	bool took_over = s->state == S_ACTIVE;
	struct status_words w;
	uint64_t p50, p99;
	size_t n = 0;

	(void)req;
	sec_words(s, &w);
	repl_stats_pause_pct(&g->st, &p50, &p99);
	add(out, len, &n, "role %s\nstate %s\nname %s\n", took_over ? "primary" : "secondary",
	    took_over ? "unprotected" : repl_sec_state_name(s),
	    repl_ops_vm(&s->o->ops, s->cfg.guest));
	repl_vm_status_text(s->vm, sec_cfg(s), out, len, &n);
	if (!took_over) {
		if (s->peer_addr[0])
			add(out, len, &n, "peer %s\n", s->peer_addr);
		add(out, len, &n, "epoch %llu\nacked %llu\napply p50 %.1f us\napply p99 %.1f us\n"
		    "dirty pages last %llu\nbytes received %llu\n", (unsigned long long)g->applied,
		    (unsigned long long)g->applied, p50 / 1e3, p99 / 1e3,
		    (unsigned long long)g->st.last_dirty_pages,
		    (unsigned long long)s->link.bytes_rcvd);
		if (s->link.conn)
			add(out, len, &n, "since heartbeat %.1f ms\n",
			    (now_ns() - s->link.last_rx_ns) / 1e6);
		if (g->verify_ok || g->verify_failed)
			add(out, len, &n, "verified epochs %llu\nverify failures %llu\n",
			    (unsigned long long)g->verify_ok, (unsigned long long)g->verify_failed);
	}
	if (!took_over || (w.reason[0] && !same_fault(&s->fault, &s->fault_at_takeover)))
		add(out, len, &n, "reason %s\n", w.reason[0] ? one_line(w.reason) : "none");
	add(out, len, &n, "fencing: %s\n", one_line(w.fencing));
	if (s->switches)
		add(out, len, &n, "switchovers %llu (last at epoch %llu, downtime %.3f ms)\n",
		    (unsigned long long)s->switches, (unsigned long long)s->switch_epoch,
		    s->switch_downtime_ms);
	return (int)n;
}

char *repl_sec_status_text(void *ctx, const char *req)
{
	if (strstr(req, "json"))
		return sec_status_json(ctx);
	return repl_status_reply(sec_status_format, ctx, req);
}

const char *repl_primary_state(const struct repl_primary *p)
{
	if (p->migrated)
		return "migrated";
	if (p->in_doubt)
		return p->reclaiming ? "contending" : "in-doubt";
	if (repl_pc_src_state(p))
		return repl_pc_src_state(p);
	return pstate_names[p->state];
}
