/* What `understudy status` shows of each agent (read only: nothing here
 * changes an agent's state). Text, or JSON with "status json". */
#include "replication/postcopy.h"

#include <stdio.h>
#include <string.h>

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

static int pri_status_format(void *ctx, const char *req, char *out, size_t len)
{
	struct repl_primary *p = ctx;
	const struct repl_epochs *q = &p->ep;
	uint64_t p50, p99;
	bool json = strstr(req, "json") != NULL;
	double hb_ms = p->link.conn ? (now_ns() - p->link.last_rx_ns) / 1e6 : -1;
	char reason[200], fencing[200], pc[512], tail[800];
	const struct repl_disk_cap *d = &q->disk;
	uint64_t de = d->epochs_with_blocks;

	repl_fault_reason(&p->fault, reason, sizeof(reason));
	repl_pc_src_status(p, json, pc, sizeof(pc));
	/* Disk replication: blocks per epoch that had any, and their copy in the pause. */
	if (!d->nblocks)
		snprintf(tail, sizeof(tail), "%s", pc);
	else
		snprintf(tail, sizeof(tail), json ?
			 "%s,\"disk_epochs\":%llu,\"disk_blocks\":%llu,\"disk_blocks_per_epoch\":%.1f,"
			 "\"disk_copy_us_per_epoch\":%.1f" :
			 "%sdisk: %llu epochs with blocks, %llu blocks, %.1f blocks and %.1f us of copy "
			 "in the pause per such epoch\n", pc, (unsigned long long)de,
			 (unsigned long long)d->blocks_total, de ? (double)d->blocks_total / de : 0.0,
			 de ? d->copy_ns_total / 1e3 / de : 0.0);
	repl_stats_pause_pct(&q->st, &p50, &p99);
	if (p->wit)
		snprintf(fencing, sizeof(fencing), REPL_FENCING_WITNESS " (key %s, lease %lld ms left, "
			 "standby %s)", p->o->witness.key, (long long)repl_witness_left_ms(p->wit),
			 p->vouched ? "vouched for" : "not vouched for");
	else
		snprintf(fencing, sizeof(fencing), "%s", REPL_FENCING);
	return snprintf(out, len, json ?
			"{\"role\":\"primary\",\"state\":\"%s\",\"peer\":\"%s\",\"epoch\":%llu,\"acked\":%llu,"
			"\"pause_p50_us\":%.1f,\"pause_p99_us\":%.1f,\"dirty_pages_last\":%llu,"
			"\"dirty_pages_avg\":%.1f,\"bytes_sent\":%llu,\"lag_ms\":%.3f,"
			"\"stretched\":%llu,\"since_heartbeat_ms\":%.1f,\"pause_max_us\":%.1f,"
			"\"pause_max_pages\":%llu,\"pause_max_harvest_us\":%.1f,\"pause_max_copy_us\":%.1f,"
			"\"pause_max_state_us\":%.1f,\"reason\":\"%s\",\"fencing\":\"%s\","
			"\"migration_downtime_ms\":%.3f,\"migration_total_ms\":%.3f,"
			"\"throttle_pct\":%u,\"resumed_epoch\":%llu,\"switch_in_ms\":%.3f,"
			"\"precopy_passes\":%llu,\"precopy_pages\":%llu,\"precopy_resent\":%llu,"
			"\"left_bytes\":%llu,\"predicted_downtime_ms\":%.3f%s}\n" :
			"role primary\nstate %s\npeer %s\nepoch %llu\nacked %llu\npause p50 %.1f us\n"
			"pause p99 %.1f us\ndirty pages last %llu\ndirty pages avg %.1f\n"
			"bytes sent %llu\nlag %.3f ms\nstretched epochs %llu\n"
			"since heartbeat %.1f ms\nlongest pause %.1f us: %llu pages, harvest %.1f us, "
			"copy %.1f us, state %.1f us\nreason %s\nfencing: %s\n"
			"migration downtime %.3f ms\nmigration total %.3f ms\nthrottle %u %%\n"
			"resumed from epoch %llu (switchover, downtime about %.3f ms)\n"
			"pre-copy %llu passes, %llu pages, %llu sent again at the pause\n"
			"left to send about %llu bytes\npredicted downtime %.3f ms\n%s",
			repl_primary_state(p), p->o->peer ? p->o->peer : "", (unsigned long long)q->epoch,
			(unsigned long long)q->acked, p50 / 1e3, p99 / 1e3,
			(unsigned long long)q->st.last_dirty_pages,
			q->st.epochs ? (double)q->st.dirty_pages_total / (double)q->st.epochs : 0.0,
			(unsigned long long)p->link.bytes_sent, q->st.lag_ns / 1e6,
			(unsigned long long)q->st.stretched, hb_ms, q->worst.pause_ns / 1e3,
			(unsigned long long)q->worst_pages, q->worst.harvest_ns / 1e3,
			q->worst.copy_ns / 1e3, q->worst.state_ns / 1e3,
			json || reason[0] ? reason : "none", fencing, p->downtime_ms, p->migration_ms,
			p->throttle_pct, (unsigned long long)p->o->resume_epoch, p->o->switch_downtime_ms,
			(unsigned long long)q->st.pre_passes, (unsigned long long)q->st.pre_pages,
			(unsigned long long)q->st.pre_resent, (unsigned long long)left_bytes(p), p->predicted_ms, tail);
}

char *repl_primary_status_text(void *ctx, const char *req)
{
	return repl_status_reply(pri_status_format, ctx, req);
}

/* The state for status: a standby that could not take over is not healthy. */
const char *repl_sec_state_name(const struct repl_secondary *s)
{
	if (s->state == S_STANDBY && !s->con)
		return "standby-unready";
	return sstate_names[s->state];
}

static int sec_status_format(void *ctx, const char *req, char *out, size_t len)
{
	struct repl_secondary *s = ctx;
	const struct repl_staging *g = &s->stage;
	uint64_t p50, p99;
	bool json = strstr(req, "json") != NULL;
	double hb_ms = (now_ns() - s->link.last_rx_ns) / 1e6;
	char reason[200], fencing[200];
	/* A standby that took over runs the guest: a primary, unprotected until
	 * `understudy protect` attaches a secondary (then the engine answers). */
	bool took_over = s->state == S_ACTIVE;

	repl_fault_reason(&s->fault, reason, sizeof(reason));
	repl_stats_pause_pct(&g->st, &p50, &p99);
	if (s->wit)
		snprintf(fencing, sizeof(fencing), REPL_FENCING_WITNESS " (key %s, %s)",
			 s->o->witness.key, s->state >= S_ACTIVE ? "this side owns it" :
			 "takeover only after winning it");
	else
		snprintf(fencing, sizeof(fencing), "%s", REPL_FENCING);
	return snprintf(out, len, json ?
			"{\"role\":\"%s\",\"state\":\"%s\",\"epoch\":%llu,\"acked\":%llu,"
			"\"apply_p50_us\":%.1f,\"apply_p99_us\":%.1f,\"dirty_pages_last\":%llu,"
			"\"bytes_received\":%llu,\"since_heartbeat_ms\":%.1f,\"verify_ok\":%llu,"
			"\"verify_failed\":%llu,\"reason\":\"%s\",\"fencing\":\"%s\",\"switchovers\":%llu,"
			"\"switch_epoch\":%llu,\"switch_downtime_ms\":%.3f}\n" :
			"role %s\nstate %s\nepoch %llu\nacked %llu\napply p50 %.1f us\n"
			"apply p99 %.1f us\ndirty pages last %llu\nbytes received %llu\n"
			"since heartbeat %.1f ms\nverified epochs %llu\nverify failures %llu\n"
			"reason %s\nfencing: %s\nswitchovers %llu (last at epoch %llu, downtime %.3f ms)\n",
			took_over ? "primary" : "secondary",
			took_over ? "unprotected" : repl_sec_state_name(s), (unsigned long long)g->applied,
			(unsigned long long)g->applied, p50 / 1e3, p99 / 1e3,
			(unsigned long long)g->st.last_dirty_pages,
			(unsigned long long)s->link.bytes_rcvd, hb_ms,
			(unsigned long long)g->verify_ok, (unsigned long long)g->verify_failed,
			json || reason[0] ? reason : "none", fencing, (unsigned long long)s->switches,
			(unsigned long long)s->switch_epoch, s->switch_downtime_ms);
}

char *repl_sec_status_text(void *ctx, const char *req)
{
	return repl_status_reply(sec_status_format, ctx, req);
}

const char *repl_primary_state(const struct repl_primary *p)
{
	if (p->migrated)
		return "migrated";
	if (p->in_doubt)
		return "in-doubt";
	if (repl_pc_src_state(p))
		return repl_pc_src_state(p);
	return pstate_names[p->state];
}
