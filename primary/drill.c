/* The primary's part of a drill the secondary runs (secondary/drill.c says
 * how): at "drill-begin", a digest of the RAM at the next capture, sent right
 * after that epoch ("drill-digest"); at "drill-end", the pauses and the lag
 * since drill-begin ("drill-stats"). */
#include "primary/primary_int.h"

#include <errno.h>
#include <string.h>

#define TAG "drill"

/* A DrillReport to the secondary as the Section name (understudy.proto). */
static int send_report(struct repl_link *l, const char *name, const Understudy__DrillReport *m)
{
	uint8_t buf[256];
	int n = proto_drill_report_encode(m, buf, sizeof(buf));

	return n < 0 ? n : repl_link_send_section(l, name, buf, (size_t)n);
}

int repl_drill_pri_section(struct repl_epochs *q, const Understudy__Section *sec)
{
	struct repl_drill_pri *d = &q->drill;
	Understudy__DrillReport rep = UNDERSTUDY__DRILL_REPORT__INIT;
	uint64_t id, max, nb;
	int r;

	if (strcmp(sec->name, REPL_DRILL_BEGIN) && strcmp(sec->name, REPL_DRILL_END))
		return -EPROTO;
	if ((r = proto_drill_request_decode(sec->data.data, sec->data.len, &id)) < 0)
		return r;
	if (!strcmp(sec->name, REPL_DRILL_BEGIN)) {
		memset(d, 0, sizeof(*d));
		d->id = id;
		d->want_digest = true;
		d->npause0 = q->st.npause;
		repl_stats_pause_pct(&q->st, &d->p50_before_ns, &d->p99_before_ns);
		d->lag_before_ns = q->st.lag_ns;
		log_info(TAG, "epoch %llu: the secondary runs a drill: digest of the RAM at the next "
			 "capture", (unsigned long long)q->epoch);
		return 0;
	}
	if (id != d->id)
		return 0;                   /* not the drill we count for: ignored */
	rep.id = id;
	rep.pause_p50_before_ns = d->p50_before_ns;
	rep.pause_p99_before_ns = d->p99_before_ns;
	rep.lag_before_ns = d->lag_before_ns;
	rep.lag_max_during_ns = d->lag_max_ns;
	/* During: from drill-begin on (the last REPL_STATS_WINDOW if more).
	 * Before: as many pauses right before drill-begin (fewer if there were
	 * fewer), the same stretch of time without a drill, when the ring
	 * still holds them (else the figures taken at drill-begin). */
	rep.pauses_during = q->st.npause - d->npause0;
	if (!repl_drill_pauses_range(&q->st, d->npause0, q->st.npause, &rep.pause_p50_during_ns,
			  &rep.pause_p99_during_ns, &rep.pause_max_during_ns))
		(void)repl_drill_pauses_range(&q->st, q->st.npause - REPL_STATS_WINDOW, q->st.npause,
				   &rep.pause_p50_during_ns, &rep.pause_p99_during_ns,
				   &rep.pause_max_during_ns);
	nb = rep.pauses_during < d->npause0 ? rep.pauses_during : d->npause0;
	if (nb && repl_drill_pauses_range(&q->st, d->npause0 - nb, d->npause0, &rep.pause_p50_before_ns,
			       &rep.pause_p99_before_ns, &max))
		rep.pause_max_before_ns = max;
	rep.digest_ns = d->digest_ns;
	rep.epoch = d->digest_epoch;
	d->id = 0;
	d->want_digest = d->digest_ready = false;
	log_info(TAG, "epoch %llu: the drill ended: %llu pauses during it, p99 %.1f us",
		 (unsigned long long)q->epoch, (unsigned long long)rep.pauses_during,
		 rep.pause_p99_during_ns / 1e3);
	if ((r = send_report(q->link, REPL_DRILL_STATS, &rep)) < 0)
		log_warn(TAG, "could not send the drill's figures: %s", strerror(-r));
	return 0;
}

void repl_drill_pri_capture(struct repl_epochs *q)
{
	struct repl_drill_pri *d = &q->drill;
	uint64_t t0 = now_ns();

	/* In the pause, like the verify mode: the RAM exactly as captured. */
	d->mem_crc = repl_drill_ram_crc(q->vm->m);
	d->digest_ns = now_ns() - t0;
	d->digest_epoch = q->epoch + 1;      /* capture() numbers the epoch next */
	d->unacked_at_digest = q->epoch - q->acked;
	d->want_digest = false;
	d->digest_ready = true;
}

void repl_drill_pri_sent(struct repl_epochs *q)
{
	struct repl_drill_pri *d = &q->drill;
	Understudy__DrillReport rep = UNDERSTUDY__DRILL_REPORT__INIT;
	int r;

	d->digest_ready = false;
	if (d->digest_epoch != q->epoch) {   /* that epoch was undone: digest the next one */
		d->want_digest = true;
		return;
	}
	rep.id = d->id;
	rep.epoch = d->digest_epoch;
	rep.mem_crc32c = d->mem_crc;
	rep.digest_ns = d->digest_ns;
	rep.pause_p50_before_ns = d->p50_before_ns;
	rep.pause_p99_before_ns = d->p99_before_ns;
	rep.lag_before_ns = d->lag_before_ns;
	rep.unacked_at_digest = d->unacked_at_digest;
	log_info(TAG, "epoch %llu: RAM digest %08x for the drill (%.2f ms in the pause)",
		 (unsigned long long)rep.epoch, rep.mem_crc32c, d->digest_ns / 1e6);
	if ((r = send_report(q->link, REPL_DRILL_DIGEST, &rep)) < 0)
		log_warn(TAG, "could not send the drill's digest: %s", strerror(-r));
}

void repl_drill_pri_acked(struct repl_epochs *q)
{
	if (q->st.lag_ns > q->drill.lag_max_ns)
		q->drill.lag_max_ns = q->st.lag_ns;
}
