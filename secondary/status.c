/* What `understudy status` shows of the secondary (read only: nothing here
 * changes its state). Text, or JSON with "status json". */
#include "secondary/secondary_int.h"

#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

static const char *const sstate_names[] = {
	"waiting", "hello", "standby", "contending", "fence-failed", "active", "fenced", "done",
};

/* The state for status: a standby that could not take over is not healthy. */
const char *repl_sec_state_name(const struct repl_secondary *s)
{
	if (s->state == S_STANDBY && !s->con)
		return "standby-unready";
	return sstate_names[s->state];
}

static void sec_words(const struct repl_secondary *s, struct repl_status_words *w)
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
	struct repl_status_words w;
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
	struct repl_status_words w;
	uint64_t p50, p99;
	size_t n = 0;

	(void)req;
	sec_words(s, &w);
	repl_stats_pause_pct(&g->st, &p50, &p99);
	repl_status_add(out, len, &n, "role %s\nstate %s\nname %s\n", took_over ? "primary" : "secondary",
			took_over ? "unprotected" : repl_sec_state_name(s),
			repl_ops_vm(&s->o->ops, s->cfg.guest));
	repl_vm_status_text(s->vm, sec_cfg(s), out, len, &n);
	if (!took_over) {
		if (s->peer_addr[0])
			repl_status_add(out, len, &n, "peer %s\n", s->peer_addr);
		repl_status_add(out, len, &n, "epoch %llu\nacked %llu\napply p50 %.1f us\napply p99 %.1f us\n"
				"dirty pages last %llu\nbytes received %llu\n", (unsigned long long)g->applied,
				(unsigned long long)g->applied, p50 / 1e3, p99 / 1e3,
				(unsigned long long)g->st.last_dirty_pages,
				(unsigned long long)s->link.bytes_rcvd);
		if (s->link.conn)
			repl_status_add(out, len, &n, "since heartbeat %.1f ms\n",
					(now_ns() - s->link.last_rx_ns) / 1e6);
		if (g->verify_ok || g->verify_failed)
			repl_status_add(out, len, &n, "verified epochs %llu\nverify failures %llu\n",
					(unsigned long long)g->verify_ok, (unsigned long long)g->verify_failed);
	}
	if (!took_over || (w.reason[0] && !same_fault(&s->fault, &s->fault_at_takeover)))
		repl_status_add(out, len, &n, "reason %s\n", w.reason[0] ? repl_status_one_line(w.reason) : "none");
	repl_status_add(out, len, &n, "fencing: %s\n", repl_status_one_line(w.fencing));
	if (s->switches)
		repl_status_add(out, len, &n, "switchovers %llu (last at epoch %llu, downtime %.3f ms)\n",
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
