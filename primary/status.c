/* What `understudy status` shows of the primary engine (read only: nothing
 * here changes its state). Text, or JSON with "status json". */
#include "primary/primary_int.h"

#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

static const char *const pstate_names[] = {
	"connecting", "hello", "syncing", "first-checkpoint", "protected", "switching", "unprotected",
	"fenced", "done",
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

static void pri_words(const struct repl_primary *p, struct repl_status_words *w)
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
	struct repl_status_words w;

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
	struct repl_status_words w;
	char pc[512];
	size_t n = 0;

	(void)req;
	pri_words(p, &w);
	repl_stats_pause_pct(&q->st, &p50, &p99);
	repl_status_add(out, len, &n, "role primary\nstate %s\nname %s\n", repl_primary_state(p),
			repl_ops_vm(&p->o->ops, p->o->cfg.guest));
	repl_vm_status_text(p->vm, p->vm ? &p->vm->m->cfg : &p->o->cfg, out, len, &n);
	repl_status_add(out, len, &n, "peer %s\nepoch %llu\nacked %llu\npause p50 %.1f us\npause p99 %.1f us\n"
			"dirty pages last %llu\ndirty pages avg %.1f\nbytes sent %llu\nlag %.3f ms\n"
			"stretched epochs %llu\n", p->o->peer ? p->o->peer : "", (unsigned long long)q->epoch,
			(unsigned long long)q->acked, p50 / 1e3, p99 / 1e3,
			(unsigned long long)q->st.last_dirty_pages,
			q->st.epochs ? (double)q->st.dirty_pages_total / (double)q->st.epochs : 0.0,
			(unsigned long long)p->link.bytes_sent, q->st.lag_ns / 1e6,
			(unsigned long long)q->st.stretched);
	/* The JSON's epochs_timer and epochs_output (the first and a final
	 * epoch are in neither). */
	repl_status_add(out, len, &n, "epochs by trigger: timer %llu, output %llu\n",
			(unsigned long long)p->epochs_timer, (unsigned long long)p->epochs_output);
	if (p->link.conn)
		repl_status_add(out, len, &n, "since heartbeat %.1f ms\n", (now_ns() - p->link.last_rx_ns) / 1e6);
	if (q->worst.pause_ns)
		repl_status_add(out, len, &n, "longest pause %.1f us: %llu pages, harvest %.1f us, copy %.1f us, "
				"state %.1f us\n", q->worst.pause_ns / 1e3, (unsigned long long)q->worst_pages,
				q->worst.harvest_ns / 1e3, q->worst.copy_ns / 1e3, q->worst.state_ns / 1e3);
	repl_status_add(out, len, &n, "reason %s\nfencing: %s\n", w.reason[0] ? repl_status_one_line(w.reason) : "none",
			repl_status_one_line(w.fencing));
	if (p->o->resume_epoch)
		repl_status_add(out, len, &n, "resumed from epoch %llu (switchover, downtime about %.3f ms)\n",
				(unsigned long long)p->o->resume_epoch, p->o->switch_downtime_ms);
	if (p->migrated || p->downtime_ms > 0 || p->migration_ms > 0)
		repl_status_add(out, len, &n, "migration downtime %.3f ms\nmigration total %.3f ms\n",
				p->downtime_ms, p->migration_ms);
	if (p->throttle_pct || p->migrate_ms)
		repl_status_add(out, len, &n, "throttle %u %%\n", p->throttle_pct);
	if (q->st.pre_passes)
		repl_status_add(out, len, &n, "pre-copy %llu passes, %llu pages, %llu sent again at the pause\n",
				(unsigned long long)q->st.pre_passes, (unsigned long long)q->st.pre_pages,
				(unsigned long long)q->st.pre_resent);
	if (p->migrate_ms || p->switching_over)
		repl_status_add(out, len, &n, "left to send about %llu bytes\npredicted downtime %.3f ms\n",
				(unsigned long long)left_bytes(p), p->predicted_ms);
	repl_pc_src_status(p, pc, sizeof(pc));
	repl_status_add(out, len, &n, "%s", pc);
	if (d->nblocks)
		repl_status_add(out, len, &n, "disk: %llu epochs with blocks, %llu blocks, %.1f blocks and %.1f us "
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

const char *repl_primary_end_reason(const struct repl_primary *p)
{
	return p->migrated ? "migrated" : p->fault.kind ? p->fault.what : "the guest stopped";
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
