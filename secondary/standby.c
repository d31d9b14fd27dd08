/* The secondary: keeps a hot standby (memory slots registered, vCPUs created,
 * not running) at the last complete checkpoint (staging.c), and takes over
 * when the primary is silent for timeout_ms: neither its stream bytes nor
 * its beats (the UDP side channel of replication.h, stamped by a thread
 * of their own as they arrive) were heard, nor are any waiting unread.
 *
 *   waiting -> hello -> standby -> active (took over) -> done
 *
 * Policy per kind of failure:
 *  - peer lost (connection closed): with a complete checkpoint, the watch
 *    timer takes over after timeout_ms of silence; without one, the standby
 *    is dropped and we wait for a primary again.
 *  - peer protocol error (bad frame, bad or torn epoch, bad configuration):
 *    nothing of it is applied, the standby is dropped, we wait again: a
 *    confused primary never causes a takeover while it may still run.
 *  - the primary says goodbye (Fence): it either stops (guest powered off:
 *    we end, no takeover) or goes on without us (it gave us up: we stand
 *    down, drop the standby and wait for a new primary, no takeover). Only a
 *    primary that went silent without a goodbye (killed, hung) is replaced.
 *  - this process stalled (SIGSTOP, starved: its own loop late by more than
 *    the shorter of the two timeouts): the gap is not the primary's silence.
 *    The silence clock restarts when we resume, pending input is read
 *    first, and a takeover needs a fresh full timeout of silence. A link
 *    found closed right after a stall at least as long as the primary's
 *    timeout (while connected), without a goodbye, may be a primary that
 *    gave us up as well as a dead one: we stand down, no takeover (a crash
 *    of the primary during our stall is not covered).
 *  - local failure (no memory to stage an epoch, KVM refusing to apply one):
 *    the epoch cannot be acknowledged and never will be, so this standby is
 *    no use: the primary is told why (Error) before the close, the standby
 *    is dropped, we wait again. Never a takeover from a standby KVM refused.
 * The reason of the last failure is in the log and in status.
 *
 * A connection is only a candidate until it says a valid Hello
 * (candidates.c): candidates do not block each other or a real primary.
 * The first valid Hello wins; any other candidate is closed when it speaks
 * (a Hello then is refused: already serving a primary) or, silent, at
 * handshake_timeout_ms after its connection, as a lost peer.
 *
 * Everything a takeover needs (today the console listener) is acquired at
 * start (repl_sec_acquire_resources): a secondary that cannot hold it does
 * not start, and a takeover only starts serving what it already holds.
 * The takeover itself (takeover.c): with --fence-cmd the old
 * primary is fenced first, with a witness the key is won first; a standby
 * the witness no longer vouches for stands down. */
#include "secondary/secondary.h"
#include "secondary/secondary_int.h"
#include "replication/postcopy.h"
#include "replication/agent.h"
#include "replication/drill.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "kmod/mutant.h"
#include "net/control.h"
#include "net/notify.h"
#include "replication/fence.h"

#define TAG "secondary"

static void attach_after_switch(struct repl_secondary *s);
static void on_engine_ended(void *ctx, int status);

/* The connection ends (see the policy above). */
static void end_link(struct repl_secondary *s, bool drop)
{
	if (s->pc && s->state < S_CONTENDING) {   /* announced: no takeover without the source */
		repl_link_close(&s->link);
		repl_pc_dst_lost(s, s->fault.what[0] ? s->fault.what : "the link to the source ended");
		return;
	}
	repl_link_close(&s->link);
	proto_dec_fini(&s->link.dec);
	proto_dec_init(&s->link.dec, PROTO_MAX_PAYLOAD_DEFAULT);
	repl_staging_abort(&s->stage);
	if (s->state >= S_CONTENDING)
		return;
	if (drop || !s->stage.have_ckpt) {
		if (s->vm)
			log_warn(TAG, "standby dropped: %s", drop ? s->fault.what
					 : "the primary went away before the first checkpoint");
		repl_sec_drop_standby(s);
		s->state = S_WAITING;
		net_notify(NET_NOTIFY_STATUS, "waiting for a primary on %s (standby dropped)",
			   s->listen_at);
		return;
	}
	log_warn(TAG, "primary connection lost; standby holds epoch %llu",
		 (unsigned long long)s->stage.applied);
}

/* A failure on our side: drop the standby at once (no takeover from it
 * while the Error leaves), tell the primary why, then close. */
static void fail_local(struct repl_secondary *s, const struct repl_fault *f)
{
	log_error(TAG, "%s (%s): this standby cannot go on; dropping it and telling the primary",
		  f->what, repl_fault_kind_name(f->kind));
	s->fault = *f;
	repl_staging_abort(&s->stage);
	repl_sec_drop_standby(s);
	s->state = S_WAITING;
	net_notify(NET_NOTIFY_STATUS, "waiting for a primary on %s (standby dropped)", s->listen_at);
	if (s->link.conn && repl_send_error(&s->link, f->err, f->what) == 0) {
		s->refusing = true;      /* the Error leaves, then closed() follows */
		net_close_flush(s->link.conn);
		return;
	}
	end_link(s, true);
}

/* A primary that said Hello must go on until the first checkpoint: silent
 * longer than the handshake deadline (or the failure timeout, if longer),
 * it is a lost peer; without a checkpoint the standby is dropped. */
static void handshake_overdue(struct repl_secondary *s)
{
	unsigned limit_ms = s->o->handshake_timeout_ms > s->o->timeout_ms ?
			    s->o->handshake_timeout_ms : s->o->timeout_ms;
	uint64_t silent_ms = repl_link_silent_ns(&s->link) / 1000000;

	if (!s->link.conn || s->refusing || s->stage.have_ckpt ||
	    (s->state != S_HELLO && s->state != S_STANDBY) || silent_ms <= limit_ms)
		return;
	log_warn(TAG, "the primary was silent for %llu ms before the first checkpoint: a lost peer",
		 (unsigned long long)silent_ms);
	repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, -ETIMEDOUT,
		       "primary silent for %llu ms before the first checkpoint",
		       (unsigned long long)silent_ms);
	end_link(s, false);
}

/* The shorter of the two timeouts: a stall longer than that may have made
 * the primary give us up, or us it. */
static unsigned stall_ms(const struct repl_secondary *s)
{
	unsigned peer_ms = s->peer_timing.timeout_ms;

	return peer_ms && peer_ms < s->o->timeout_ms ? peer_ms : s->o->timeout_ms;
}

/* The silence check's period: at most a quarter of the timeout, 5 ms. */
static double watch_tick(const struct repl_secondary *s)
{
	return s->o->timeout_ms / 4e3 < 0.005 ? s->o->timeout_ms / 4e3 : 0.005;
}

/* The next check exactly when the timeout would run out (plus a little),
 * if that comes before the next tick: a takeover is not late by a tick. */
static void watch_at(struct repl_secondary *s, uint64_t left_ns)
{
	double at = left_ns / 1e9 + 0.0002;

	if (at < watch_tick(s)) {
		s->watch_w.repeat = at;
		ev_timer_again(s->loop, &s->watch_w);
	}
}

static void on_watch(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;
	struct secondary_engine_state eng;
	uint64_t stall_ns, silent_ns, timeout_ns = (uint64_t)s->o->timeout_ms * 1000000ull;

	(void)loop;
	(void)revents;
	w->repeat = watch_tick(s);
	stall_ns = repl_link_tick(&s->link, stall_ms(s));
	if (stall_ns) {
		log_warn(TAG, "this process was stalled for %llu ms (stopped or starved): not counted as "
			 "the primary's silence; reading what is pending, then a fresh %u ms",
			 (unsigned long long)(stall_ns / 1000000), s->o->timeout_ms);
		return;
	}
	repl_candidates_expire(&s->cands);
	handshake_overdue(s);
	if (s->wit && s->state == S_ACTIVE) {
		repl_sec_engine_state(s, &eng);
		if (!(eng.state && (!strcmp(eng.state, "switching") || !strcmp(eng.state, "migrated"))))
			repl_sec_lease_check(s);   /* not a source that gave the key up on purpose */
	}
	if (s->state != S_STANDBY || !s->stage.have_ckpt)
		return;
	/* Judged by what arrived (a beat is stamped by its own thread), not by
	 * when this loop got round to reading it. */
	silent_ns = repl_link_silent_ns(&s->link);
	if (silent_ns <= timeout_ns) {
		watch_at(s, timeout_ns - silent_ns);
		return;
	}
	if (repl_link_heard_late(&s->link, timeout_ns))
		return;
	if (s->pc) {
		repl_pc_dst_lost(s, "the source went silent during the post-copy hand-over");
		return;
	}
	if (s->await_resume) {
		/* After a switchover the new primary runs the guest already: until
		 * it has connected, its silence proves nothing (it may be alive and
		 * unable to reach us). No takeover on silence: a person decides. */
		if (!s->told_silent) {
			s->told_silent = true;
			log_warn(TAG, "the new primary has not connected within %u ms of the switchover: "
				 "no automatic takeover from this standby (it may run unprotected); "
				 "`understudy takeover` if it is gone", s->o->timeout_ms);
		}
		return;
	}
	if (!s->o->manual_takeover) {
		repl_sec_begin_takeover(s);
	} else if (!s->told_silent) {
		s->told_silent = true;
		log_warn(TAG, "the primary is silent (%u ms): takeover is manual, waiting to be told "
			 "(understudy takeover)", s->o->timeout_ms);
	}
}

static void on_hb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;

	(void)loop;
	(void)revents;
	if (s->link.conn && s->state == S_STANDBY &&
	    repl_send_epoch_msg(&s->link, PROTO_T_HEARTBEAT, s->stage.applied) < 0)
		log_warn(TAG, "heartbeat could not be sent");
}

/* ---- receiving ------------------------------------------------------------------ */

/* A fresh token for a fresh standby: a vouch for an earlier one never
 * lets this one in. */
static void new_token(struct repl_secondary *s)
{
	repl_witness_new_token(s->token, sizeof(s->token));
}

/* A secondary told what it will hold (--guest, --mem, ...) builds that VM
 * while it waits, as a QEMU destination started with -incoming has: a
 * primary whose configuration is the same one then finds its standby ready
 * and the migration or initial sync does not wait for KVM to set up the
 * guest's memory and vCPUs. The VM is fresh, as one built now would be.
 * 1: s->vm is the spare; 0: none fits (any spare is freed), build one. */
/* A Linux guest's kernel, initrd and command line (outside the digest). */
static void boot_files_copy(struct machine_config *dst, const struct machine_config *src)
{
	memcpy(dst->kernel, src->kernel, sizeof(dst->kernel));
	memcpy(dst->initrd, src->initrd, sizeof(dst->initrd));
	memcpy(dst->append, src->append, sizeof(dst->append));
}

static int take_spare(struct repl_secondary *s)
{
	struct repl_vm *v = s->spare;

	s->spare = NULL;
	if (!v)
		return 0;
	if (machine_config_digest(&v->m->cfg) == s->hello_digest) {
		s->vm = v;
		return 1;
	}
	log_info(TAG, "the VM built at start is not the primary's: building the standby anew");
	repl_vm_free(v);
	return 0;
}

static void build_spare(struct repl_secondary *s)
{
	uint64_t t0 = now_ns();
	int r;

	/* Not with a disk: the standby's image is emptied and sized to the
	 * primary's when it connects (standby_disk), not under an open VM. */
	if (s->o->pin.ndisks)
		return;
	r = repl_vm_new(s->loop, &s->o->pin, NULL, &s->spare);
	if (r < 0) {
		log_warn(TAG, "cannot build the standby's VM ahead (%s): built when a primary comes",
			 strerror(-r));
		s->spare = NULL;
		return;
	}
	repl_vm_set_gated(s->spare, true);
	log_info(TAG, "standby VM built ahead in %.1f ms: guest %s, %llu MiB, %d vCPU(s)",
		 (now_ns() - t0) / 1e6, s->o->pin.guest, (unsigned long long)(s->o->pin.mem_bytes >> 20),
		 s->o->pin.ncpus);
}

/* A primary whose VM this side cannot hold: told why, then closed. */
static int refuse_primary(struct repl_secondary *s, const char *err)
{
	log_error(TAG, "refusing primary: %s", err);
	repl_fault_set(&s->fault, REPL_FAULT_PEER_PROTOCOL, -EINVAL, "refused the primary: %s", err);
	if (repl_send_error(&s->link, -EINVAL, err) < 0)
		log_warn(TAG, "could not tell the primary why");
	return -ECONNREFUSED;
}

/* The standby's disk: our own image (--disk), of the primary's size, opened
 * now with the standby (never at takeover). */
static int standby_disk(struct repl_secondary *s)
{
	char err[512];

	if (s->cfg.ndisks && !s->o->disk) {
		snprintf(err, sizeof(err), "the primary's VM has a disk (%llu bytes): start this "
			 "secondary with --disk FILE, its own image of it",
			 (unsigned long long)s->cfg.disk_bytes);
		return refuse_primary(s, err);
	}
	if (!s->cfg.ndisks && s->o->disk) {
		snprintf(err, sizeof(err), "this secondary has --disk %s but the primary's VM has no disk",
			 s->o->disk);
		return refuse_primary(s, err);
	}
	if (!s->cfg.ndisks)
		return 0;
	if (repl_disk_prepare(s->o->disk, s->cfg.disk_bytes, err, sizeof(err)) < 0)
		return refuse_primary(s, err);
	snprintf(s->cfg.disk, sizeof(s->cfg.disk), "%s", s->o->disk);
	return 0;
}

static int build_standby(struct repl_secondary *s, const Understudy__Section *sec)
{
	const struct machine_config *pin = &s->o->pin;
	uint64_t avail;
	char err[256];
	int r;

	if (strcmp(sec->name, PROTO_SECTION_MACHINE_CONFIG) ||
	    proto_config_decode(sec->data.data, sec->data.len, &s->cfg) < 0) {
		log_error(TAG, "refusing primary: bad machine configuration section");
		return -EBADMSG;
	}
	/* The NIC is this host's (its tap): the primary's digest says whether
	 * there is one and its MAC, so a secondary without --net, or with
	 * another mac=, is refused just below. */
	s->cfg.nnets = pin->nnets;
	memcpy(s->cfg.net_mac, pin->net_mac, sizeof(s->cfg.net_mac));
	memcpy(s->cfg.net_tap, pin->net_tap, sizeof(s->cfg.net_tap));
	if (machine_config_digest(&s->cfg) != s->hello_digest) {
		struct machine_config alt = s->cfg;

		alt.nnets = !alt.nnets;
		memset(alt.net_mac, 0, sizeof(alt.net_mac));
		if (machine_config_digest(&alt) == s->hello_digest)
			log_error(TAG, "refusing primary: %s", s->cfg.nnets ?
				  "this secondary has --net but the primary's VM has no NIC" :
				  "the primary's VM has a NIC: start the secondary with --net tap:NAME");
		else
			log_error(TAG, "refusing primary: its configuration does not match its digest%s",
				  s->cfg.nnets ? " (or another mac= than this secondary's --net)" : "");
		return -EBADMSG;
	}
	if (pin->guest[0] && (pin->mem_bytes != s->cfg.mem_bytes || pin->ncpus != s->cfg.ncpus ||
			      strcmp(pin->guest, s->cfg.guest))) {
		snprintf(err, sizeof(err), "machine configuration differs: primary has %s with %llu MiB "
			 "and %d vCPUs, this secondary is for %s with %llu MiB and %d vCPUs",
			 s->cfg.guest, (unsigned long long)(s->cfg.mem_bytes >> 20), s->cfg.ncpus,
			 pin->guest, (unsigned long long)(pin->mem_bytes >> 20), pin->ncpus);
		log_error(TAG, "refusing primary: %s", err);
		repl_fault_set(&s->fault, REPL_FAULT_PEER_PROTOCOL, -EINVAL, "refused the primary: %s", err);
		if (repl_send_error(&s->link, -EINVAL, err) < 0)
			log_warn(TAG, "could not tell the primary why");
		return -ECONNREFUSED;
	}
	/* What a Linux guest boots from if it reboots here after a takeover:
	 * this secondary's own --kernel, else the primary's files, which must
	 * be at the same paths on this host (repl_vm_keep_poweron says if not). */
	if (pin->kernel[0])
		boot_files_copy(&s->cfg, pin);
	if ((avail = machine_host_mem_available()) && s->cfg.mem_bytes > avail) {
		snprintf(err, sizeof(err), "the primary's VM has %llu MiB of RAM and this host has %llu "
			 "MiB available (MemAvailable): the standby must be able to hold all of it",
			 (unsigned long long)(s->cfg.mem_bytes >> 20), (unsigned long long)(avail >> 20));
		return refuse_primary(s, err);
	}
	if ((r = standby_disk(s)) < 0)
		return r;
	r = take_spare(s);
	if (r == 0)
		r = repl_vm_new(s->loop, &s->cfg, NULL, &s->vm);
	else if (r > 0)   /* built from the pin: what it boots from is not in the digest */
		boot_files_copy(&s->vm->m->cfg, &s->cfg);
	if (r < 0) {
		repl_fault_set(&s->rx_fault, repl_fault_local(r), r, "cannot build the standby: %s",
			       strerror(-r));
		return r;
	}
	/* Before the sync writes anything into it: never a reason to refuse. */
	if (repl_vm_keep_poweron(s->vm) < 0)
		log_warn(TAG, "a reboot of this guest will end it here: its power-on state "
			 "could not be read");
	repl_vm_set_gated(s->vm, true);
	repl_staging_attach(&s->stage, s->vm, s->hello_digest);
	s->stage.disk_sync = s->o->disk_sync_ack;
	if (s->wit)
		new_token(s);
	s->state = S_STANDBY;
	net_notify(NET_NOTIFY_STATUS, "syncing a standby of %s from the primary", s->cfg.guest);
	log_info(TAG, "standby built: guest %s, %llu MiB, %d vCPU(s); syncing", s->cfg.guest,
		 (unsigned long long)(s->cfg.mem_bytes >> 20), s->cfg.ncpus);
	return repl_send_hello(&s->link, UNDERSTUDY__ROLE__ROLE_SECONDARY, &s->cfg, &s->timing,
			       s->o->witness.key, s->wit ? s->token : NULL);
}

/* A primary resuming after a switchover: this standby must hold exactly
 * the epoch it resumes from, of the same machine; the epochs go on at once
 * (our Hello answers now: there is no machine-config section to wait for). */
static int resume_hello(struct repl_secondary *s, struct repl_link *l, const Understudy__Hello *h)
{
	char err[256];

	if (s->state != S_STANDBY || !s->vm || !s->stage.have_ckpt || !h->resume_epoch ||
	    h->resume_epoch != s->stage.applied || h->config_digest64 != s->hello_digest) {
		if (s->state == S_WAITING)
			snprintf(err, sizeof(err), "no standby here to resume from epoch %llu: protect "
				 "afresh", (unsigned long long)h->resume_epoch);
		else if (!h->resume_epoch)
			snprintf(err, sizeof(err), "this standby holds epoch %llu of a guest and waits "
				 "for its primary", (unsigned long long)s->stage.applied);
		else
			snprintf(err, sizeof(err), "this standby holds epoch %llu of configuration "
				 "%016llx, not epoch %llu of %016llx: protect afresh",
				 (unsigned long long)s->stage.applied, (unsigned long long)s->hello_digest,
				 (unsigned long long)h->resume_epoch,
				 (unsigned long long)h->config_digest64);
		log_error(TAG, "refusing primary: %s", err);
		repl_fault_set(&s->fault, REPL_FAULT_PEER_PROTOCOL, -EINVAL, "refused the primary: %s", err);
		if (repl_send_error(l, -EINVAL, err) < 0)
			log_warn(TAG, "could not tell the primary why");
		return -ECONNREFUSED;
	}
	s->got_hello = true;
	s->resuming = true;          /* our Hello follows on the promoted link */
	log_info(TAG, "the new primary resumes from epoch %llu, which this standby holds: no resync",
		 (unsigned long long)h->resume_epoch);
	return 0;
}

static int on_hello(struct repl_secondary *s, struct repl_link *l, const Understudy__Hello *h)
{
	char err[256];
	int r;

	if (s->got_hello)
		return -EPROTO;
	r = repl_check_hello(h, UNDERSTUDY__ROLE__ROLE_PRIMARY, err, sizeof(err));
	if (r == 0)
		r = repl_check_witness(h, s->o->witness.key, err, sizeof(err));
	if (r == 0)
		r = repl_hello_timing(h, &s->peer_timing, err, sizeof(err));
	if (r == 0)
		r = repl_check_timing(&s->peer_timing, &s->timing, err, sizeof(err));
	if (r < 0) {
		log_error(TAG, "refusing primary: %s", err);
		repl_fault_set(&s->fault, REPL_FAULT_PEER_PROTOCOL, r, "refused the primary: %s", err);
		if (repl_send_error(l, r, err) < 0)
			log_warn(TAG, "could not tell the primary why");
		return -ECONNREFUSED;
	}
	s->peer_caps = h->capabilities;   /* drills need PROTO_CAP_DRILL */
	if (h->resume_epoch || s->state != S_WAITING)
		return resume_hello(s, l, h);
	s->got_hello = true;
	s->hello_digest = h->config_digest64;
	return 0;
}

static int end_epoch(struct repl_secondary *s, const Understudy__EpochEnd *ee)
{
	int r;

	repl_drill_before_apply(s, ee->reboot);   /* a drill's clone keeps its view of the pages */
	r = repl_staging_end(&s->stage, ee, &s->rx_fault);
	if (r < 0) {
		if (s->rx_fault.kind == REPL_FAULT_PEER_PROTOCOL)
			log_error(TAG, "%s", s->rx_fault.what);
		return r;
	}
	if (s->stage.applied == 1) {
		log_info(TAG, "first checkpoint applied: the VM is protected");
		net_notify(NET_NOTIFY_READY, "standby of %s complete", s->cfg.guest);
	}
	if (ee->reboot) {
		/* Not a failure: the primary booted the guest again and goes on. */
		log_info(TAG, "the guest rebooted on the primary: epoch %llu, applied whole onto the "
			 "cleared RAM, holds it rebooted", (unsigned long long)s->stage.applied);
		net_notify(NET_NOTIFY_STATUS, "standby: the guest rebooted (epoch %llu)",
			   (unsigned long long)s->stage.applied);
	}
	repl_drill_applied(s);
	repl_event_log("ack-out %llu", (unsigned long long)s->stage.applied);
	return repl_send_epoch_msg(&s->link, PROTO_T_ACK, s->stage.applied);
}

/* A goodbye: whatever follows (close, silence), no takeover. */
static int on_fence(struct repl_secondary *s, const Understudy__Fence *f)
{
	if (MUTANT(takeover_while_alive))   /* make check-mutants: the goodbye is ignored */
		return 0;
	if (f->action == UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_SWITCHES) {
		if (!f->listen || !f->listen[0] || strlen(f->listen) >= sizeof(s->switch_listen)) {
			log_error(TAG, "a switchover without a usable standby address: refused");
			return -EPROTO;
		}
		log_info(TAG, "switchover: the primary hands the guest over at epoch %llu (this side "
			 "holds %llu) and waits at %s as our standby", (unsigned long long)f->epoch,
			 (unsigned long long)s->stage.applied, f->listen);
		snprintf(s->switch_listen, sizeof(s->switch_listen), "%s", f->listen);
		s->switch_token[0] = 0;
		if (f->standby_token && f->standby_token[0] && strcmp(f->standby_token, "none") &&
		    strlen(f->standby_token) < sizeof(s->switch_token))
			snprintf(s->switch_token, sizeof(s->switch_token), "%s", f->standby_token);
		repl_staging_released(&s->stage, f->released);
		s->switch_fence_ns = now_ns();
		s->switch_paused_us = f->paused_us;
		s->switch_now = s->migrate_now = true;
		return 0;
	}
	if (f->action == UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_MIGRATES) {
		log_info(TAG, "the primary hands the guest over at epoch %llu (this side holds %llu): "
			 "taking over now", (unsigned long long)f->epoch,
			 (unsigned long long)s->stage.applied);
		s->migrate_now = true;   /* after_feed: not inside the decoder */
		repl_fault_test_stop("handover");
		return 0;
	}
	if (f->action == UNDERSTUDY__FENCE_ACTION__FENCE_PRIMARY_CONTINUES) {
		repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, 0, "stood down: the primary goes on "
			       "without this secondary (%s)", f->reason);
		log_warn(TAG, "%s; no takeover, waiting for a new primary", s->fault.what);
		s->standing_down = true;
		return -ECANCELED;       /* on_recv ends the link */
	}
	log_info(TAG, "primary stops (%s): no takeover", f->reason);
	s->state = S_DONE;
	ev_break(s->loop, EVBREAK_ALL);
	return 0;
}

/* The primary's beat key: beats on the UDP port we listen on (TCP). A
 * channel that cannot be opened leaves the stream alone, as before. */
static int beat_begin(struct repl_secondary *s, const Understudy__Section *sec)
{
	char host[256], at[300];
	int port;

	if (net_parse_host_port(s->listen_at, true, host, sizeof(host), &port) < 0)
		return 0;
	if (s->lis)
		port = net_listener_port(s->lis);
	snprintf(at, sizeof(at), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
	repl_link_beat_start(&s->link, false, sec->data.data, sec->data.len, at,
			     repl_beat_interval_ms(s->timing.heartbeat_ms, s->peer_timing.timeout_ms));
	return 0;
}

static int on_message(struct repl_secondary *s, uint16_t type, ProtobufCMessage *msg)
{
	if (type == PROTO_T_HELLO)
		return on_hello(s, &s->link, (Understudy__Hello *)msg);
	if (!s->got_hello)
		return -EPROTO;
	if (!s->vm)
		return type == PROTO_T_SECTION ? build_standby(s, (Understudy__Section *)msg) : -EPROTO;
	switch (type) {
	case PROTO_T_EPOCH_BEGIN:
		if (MUTANT(ack_before_staged)) {   /* make check-mutants: ACK(N) before N is staged */
			if (repl_staging_begin(&s->stage, ((Understudy__EpochBegin *)msg)->epoch) < 0)
				return -EPROTO;
			return repl_send_epoch_msg(&s->link, PROTO_T_ACK, s->stage.cur);
		}
		return repl_staging_begin(&s->stage, ((Understudy__EpochBegin *)msg)->epoch);
	case PROTO_T_SECTION:
		if (!strcmp(((Understudy__Section *)msg)->name, REPL_BEAT_SECTION))
			return beat_begin(s, (Understudy__Section *)msg);
		if (!strncmp(((Understudy__Section *)msg)->name, "drill-", 6))
			return repl_drill_section(s, (Understudy__Section *)msg);
		return repl_staging_section(&s->stage, (Understudy__Section *)msg);
	case PROTO_T_EPOCH_END:
		return end_epoch(s, (Understudy__EpochEnd *)msg);
	case PROTO_T_HEARTBEAT:
		return 0;
	case PROTO_T_FENCE:
		return on_fence(s, (Understudy__Fence *)msg);
	case PROTO_T_POSTCOPY_BEGIN:
		return repl_pc_dst_begin(s, (Understudy__PostcopyBegin *)msg);
	default:
		return -EPROTO;
	}
}

static int on_frame(void *ctx, const struct proto_frame *f)
{
	struct repl_secondary *s = ctx;
	ProtobufCMessage *msg;
	int r;

	if (s->state == S_DONE)
		return -ECANCELED;
	if (f->type == PROTO_T_PAGES)
		return repl_staging_pages(&s->stage, f);
	r = proto_msg_unpack(f->type, f->payload, f->len, &msg);
	if (r < 0)
		return r;
	r = on_message(s, f->type, msg);
	proto_msg_free(msg);
	return r;
}

/* ---- connection ------------------------------------------------------------------ */

/* What the frames of one chunk from the primary came to (r: the feed's result). */
static void after_feed(struct repl_secondary *s, int r)
{
	if (s->migrate_now && s->state == S_STANDBY && s->stage.have_ckpt) {
		s->migrate_now = false;
		s->migrating = true;
		s->switching = s->switch_now;
		s->switch_now = false;
		if (s->pc && repl_pc_dst_arm(s) < 0)
			return;              /* the VM is lost (reported) */
		repl_sec_begin_takeover(s);   /* a switchover resumes protected */
		return;
	}
	if (s->standing_down) {
		s->standing_down = false;
		end_link(s, true);
		return;
	}
	if (r == -ECONNREFUSED && s->link.conn) {
		s->refusing = true;      /* the Error leaves, then closed() follows */
		net_close_flush(s->link.conn);
		return;
	}
	if (r >= 0 || r == -ECANCELED || s->state == S_DONE)
		return;
	if (s->rx_fault.kind == REPL_FAULT_NONE && r == -ENOMEM)
		repl_fault_set(&s->rx_fault, REPL_FAULT_LOCAL_TRANSIENT, r, "receiving: %s",
			       strerror(-r));
	if (s->rx_fault.kind == REPL_FAULT_LOCAL_TRANSIENT || s->rx_fault.kind == REPL_FAULT_LOCAL_FATAL) {
		fail_local(s, &s->rx_fault);
		return;
	}
	log_error(TAG, "bad data from the primary (%s): closing, nothing of it applied",
		  proto_strerror(r));
	if (s->rx_fault.kind == REPL_FAULT_PEER_PROTOCOL)
		s->fault = s->rx_fault;
	else
		repl_fault_set(&s->fault, REPL_FAULT_PEER_PROTOCOL, r, "the primary sent bad data (%s)",
			       proto_strerror(r));
	end_link(s, true);
}

static void on_recv(struct net_conn *c, const void *data, size_t len, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)c;
	if (s->refusing || s->state >= S_CONTENDING)
		return;                  /* after the decision nothing the old primary says counts */
	s->rx_fault.kind = REPL_FAULT_NONE;
	after_feed(s, repl_link_feed(&s->link, data, len, on_frame, s));
}

/* The rest of a large frame is read straight into the decoder's buffer
 * (net/net.h recv_buf): no copy between the socket and the decoder. */
static void *on_recv_buf(struct net_conn *c, size_t *len, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)c;
	if (s->refusing || s->state >= S_CONTENDING)
		return NULL;
	return proto_dec_rbuf(&s->link.dec, 16384, len);
}

static void on_sent(struct net_conn *c, void *cookie, int status, void *ctx)
{
	(void)c;
	(void)status;
	(void)ctx;
	repl_link_sent_owned(cookie);
}

/* A close found right after our own stall, without a goodbye: the primary
 * may have given us up while we were stopped and run on (its goodbye lost
 * or not sent in time). That alone is no ground for a takeover: stand down. */
static bool closed_after_stall(struct repl_secondary *s)
{
	uint64_t stall_ns = repl_link_stalled_ns(&s->link, stall_ms(s));

	/* A stall shorter than the primary's timeout cannot have made it give us up. */
	if (stall_ns < (uint64_t)s->peer_timing.timeout_ms * 1000000ull || !stall_ns ||
	    s->state != S_STANDBY || !s->stage.have_ckpt)
		return false;
	repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, 0, "stood down: the link closed after this "
		       "process was stalled for %llu ms; a primary that gave it up cannot be told from "
		       "a dead one", (unsigned long long)(stall_ns / 1000000));
	log_warn(TAG, "%s: no takeover, waiting for a new primary", s->fault.what);
	end_link(s, true);
	return true;
}

static void on_closed(struct net_conn *c, int reason, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)c;
	repl_link_closed(&s->link);
	if (s->state >= S_CONTENDING)
		return;                  /* the link of the primary we replace */
	log_info(TAG, "primary connection closed (%s)", reason ? strerror(-reason) : "EOF");
	if (!s->refusing && closed_after_stall(s))
		return;
	if (!s->refusing)
		repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, reason, "primary connection closed (%s)",
			       reason ? strerror(-reason) : "EOF");
	end_link(s, s->refusing);
	s->refusing = false;
}

static const struct net_conn_ops conn_ops = {
	.recv = on_recv, .sent = on_sent, .closed = on_closed, .recv_buf = on_recv_buf,
};

/* ---- connections before their Hello (candidates.c) ------------------------------ */

/* A candidate's Hello: refused while a primary is served. */
static int cand_hello(void *ctx, struct repl_link *l, const struct proto_frame *f)
{
	struct repl_secondary *s = ctx;
	ProtobufCMessage *msg;
	int r;

	if (s->link.conn || (s->state != S_WAITING && s->state != S_STANDBY)) {
		log_warn(TAG, "refusing %s: already serving a primary", net_peer_name(l->conn));
		if (repl_send_error(l, -EBUSY, "already serving a primary") < 0)
			log_warn(TAG, "could not tell it why");
		return -ECONNREFUSED;
	}
	if ((r = proto_msg_unpack(f->type, f->payload, f->len, &msg)) < 0)
		return r;
	memset(&s->peer_timing, 0, sizeof(s->peer_timing));   /* the Hello brings them */
	r = on_hello(s, l, (Understudy__Hello *)msg);
	proto_msg_free(msg);
	return r;
}

/* A candidate that said a valid Hello becomes the primary's link. Frames
 * after its Hello go to on_frame(). */
static void cand_promote(void *ctx, struct net_conn *c)
{
	struct repl_secondary *s = ctx;
	int port;

	log_info(TAG, "primary %s connected", net_peer_name(c));
	/* Its host only: the port it connected from is an ephemeral one that
	 * nothing (a fence command, a hook, status) can use. */
	if (net_parse_host_port(net_peer_name(c), true, s->peer_addr, sizeof(s->peer_addr), &port))
		snprintf(s->peer_addr, sizeof(s->peer_addr), "%s", net_peer_name(c));
	s->fault.kind = REPL_FAULT_NONE;   /* the reason was the last connection's */
	s->rx_fault.kind = REPL_FAULT_NONE;
	s->link.conn = c;
	s->refusing = false;
	s->told_silent = false;
	s->link.last_rx_ns = s->link.up_ns = now_ns();
	s->state = s->resuming ? S_STANDBY : S_HELLO;
	net_conn_set_ops(c, &conn_ops, s);
	if (s->resuming) {
		s->resuming = false;
		s->await_resume = false;
		if (repl_send_hello(&s->link, UNDERSTUDY__ROLE__ROLE_SECONDARY, &s->cfg, &s->timing,
				    s->o->witness.key, s->wit ? s->token : NULL) < 0) {
			log_error(TAG, "cannot answer the resuming primary");
			repl_link_close(&s->link);
		}
	}
}

/* The decoder that read the Hello goes on with the primary's stream. */
static void cand_adopt(void *ctx, struct repl_link *l)
{
	struct repl_secondary *s = ctx;

	proto_dec_fini(&s->link.dec);
	s->link.dec = l->dec;
	proto_dec_init(&l->dec, 0);
	s->link.bytes_rcvd += l->bytes_rcvd;
	s->link.last_rx_ns = now_ns();
}

static void cand_fed(void *ctx, int r)
{
	after_feed(ctx, r);
}

static const struct repl_candidates_ops cand_ops = {
	.hello = cand_hello, .promote = cand_promote, .frame = on_frame, .adopt = cand_adopt,
	.fed = cand_fed,
};

static void on_accept(struct net_listener *l, struct net_conn *c, void *ctx)
{
	struct repl_secondary *s = ctx;

	(void)l;
	/* A standby without a link may hear a primary resuming it (switchover);
	 * its Hello decides (resume_hello). */
	if (s->link.conn || (s->state != S_WAITING && s->state != S_STANDBY)) {
		log_warn(TAG, "refusing %s: already serving a primary", net_peer_name(c));
		net_close(c);
		return;
	}
	repl_candidates_add(&s->cands, c);
}

/* ---- status, signals, setup ------------------------------------------------------- */

/* The engine that protects the guest we run ended: the guest stopped
 * (its last epoch committed) or this copy was told it was replaced. */
static void on_engine_ended(void *ctx, int status)
{
	struct repl_secondary *s = ctx;

	if (s->eng->switched(s->eng->ctx, &(struct repl_switch){ 0 })) {
		ev_timer_set(&s->switch_w, 0, 0);
		ev_timer_start(s->loop, &s->switch_w);   /* not inside the engine's call */
		return;
	}
	s->exit_status = status;
	s->state = S_DONE;
	ev_break(s->loop, EVBREAK_ALL);
}

/* ---- planned switchover -------------------------------------------------------- */

/* The standby holds sw->epoch of s->vm, paused: wait for the new primary's
 * resuming Hello. Silent past the failure timeout, it is a lost primary,
 * as after any link loss (the takeover resumes from that epoch). */
static void adopt_standby(struct repl_secondary *s, const struct repl_switch *sw)
{
	s->cfg = s->vm->m->cfg;
	s->hello_digest = machine_config_digest(&s->cfg);
	repl_vm_mark_standby(s->vm);
	repl_vm_set_gated(s->vm, true);
	s->vm->on_stopped = NULL;
	s->vm->cb_ctx = NULL;
	s->vm->witness = NULL;
	repl_staging_attach(&s->stage, s->vm, s->hello_digest);
	s->stage.applied = sw->epoch;
	s->stage.have_ckpt = true;
	if (s->wit && sw->token[0])  /* vouched for as the new owner won the key */
		snprintf(s->token, sizeof(s->token), "%s", sw->token);
	else if (s->wit)
		new_token(s);        /* the new owner vouches for it once protected */
	s->state = S_STANDBY;
	s->got_hello = s->migrating = s->switching = s->told_silent = false;
	s->await_resume = true;
	s->link.last_rx_ns = now_ns();
	s->switches++;
	s->switch_downtime_ms = sw->downtime_ms;
	s->switch_epoch = sw->epoch;
	log_info(TAG, "STANDBY after the switchover: holds epoch %llu (downtime %.3f ms); waiting "
		 "for the new primary at %s", (unsigned long long)sw->epoch, sw->downtime_ms,
		 s->listen_at);
	repl_sec_event(s, REPL_EV_SWITCHOVER, "switchover: this side is the standby now");
}

/* Our engine handed the guest over: this side becomes the standby again. */
static void on_switched(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;
	struct secondary_engine_state eng;
	struct repl_switch sw;
	int r;

	(void)loop;
	(void)revents;
	repl_sec_engine_state(s, &eng);
	if (!eng.state && s->state == S_ACTIVE) {
		attach_after_switch(s);
		return;
	}
	if (!s->eng->switched(s->eng->ctx, &sw))
		return;
	s->eng->detach(s->eng->ctx);
	s->con = repl_vm_take_console(s->vm);
	if (sw.listen[0])            /* switchover --listen: where to wait now */
		snprintf(s->listen_at, sizeof(s->listen_at), "%s", sw.listen);
	adopt_standby(s, &sw);
	r = net_listen(s->loop, &s->o->net, s->listen_at, on_accept, s, &s->lis);
	if (r < 0) {
		repl_fault_set(&s->fault, REPL_FAULT_LOCAL_FATAL, r, "cannot listen on %s after the "
			       "switchover: %s", s->listen_at, strerror(-r));
		log_error(TAG, "%s: the new primary cannot reach this standby", s->fault.what);
	}
}

static void attach_after_switch(struct repl_secondary *s)
{
	struct repl_primary_host host = { .ended = on_engine_ended, .ctx = s };
	struct repl_primary_opts o;
	int r;

	memset(&o, 0, sizeof(o));
	o.peer = s->switch_listen;
	o.net = s->o->net;
	o.epoch_ms = s->peer_timing.epoch_ms;
	o.timeout_ms = s->peer_timing.timeout_ms;
	o.handshake_timeout_ms = s->o->handshake_timeout_ms;
	o.resume_epoch = s->stage.applied;
	o.ops = s->o->ops;
	o.home_listen = s->listen_at;
	o.switch_downtime_ms = s->switch_in_ms;
	r = s->eng->attach(s->eng->ctx, s->loop, s->vm, s->wit, &o, &host);
	if (r < 0) {
		log_error(TAG, "cannot protect the guest onto the old primary (%s): it runs here "
			  "UNPROTECTED", strerror(-r));
		repl_vm_set_gated(s->vm, false);
	}
}

/* "protect PEER ...": the guest this side took over gets a secondary of its
 * own (re-protection), through the same engine as `understudy primary`. */
static char *protect_request(struct repl_secondary *s, const char *req)
{
	struct repl_primary_host host = { .ended = on_engine_ended, .ctx = s };
	char not_now[256];

	snprintf(not_now, sizeof(not_now), "this secondary is %s: only a guest it took over can be "
		 "protected", repl_sec_state_name(s));
	return s->eng->protect(s->eng->ctx, s->loop, req, s->state != S_ACTIVE ? not_now : NULL,
			       s->vm, s->wit, &s->o->ops, &host);
}

/* "switchback": a standby asks its primary for the guest back (a
 * switchover towards this side; the primary decides, see primary/cycle.c). */
static char *switchback_request(struct repl_secondary *s)
{
	if (s->state != S_STANDBY || !s->link.conn || !s->stage.have_ckpt)
		return strdup("error not a standby connected to its primary\n");
	if (repl_link_send_section(&s->link, REPL_SWITCH_REQUEST, "", 0) < 0)
		return strdup("error cannot ask the primary\n");
	log_info(TAG, "asked the primary for a switchover back to this side");
	return strdup("ok asked the primary to switch over to this side\n");
}

static char *control_text(void *ctx, const char *req)
{
	struct repl_secondary *s = ctx;
	char *reply;

	if ((reply = s->eng->request(s->eng->ctx, req)))
		return reply;      /* the engine's: migrate, cancel, switchover, status */
	if (!strncmp(req, "takeover", 8) && (!req[8] || req[8] == ' '))
		return repl_sec_takeover_request(ctx, req);
	if (!strncmp(req, "drill", 5))
		return repl_drill_request(s, req);
	if (!strcmp(req, "switchback"))
		return switchback_request(s);
	if (!strncmp(req, "protect ", 8) || !strncmp(req, "migrate ", 8))
		return protect_request(s, req);
	if (!strncmp(req, "status", 6))
		return repl_sec_status_text(ctx, req);
	return control_reply_unknown(req, "status, takeover, switchback, drill, protect, migrate, "
				     "cancel, switchover");
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct repl_secondary *s = w->data;

	(void)revents;
	log_info(TAG, "signal %d: stopping", w->signum);
	/* Protected again: the guest stops through the engine, which commits its
	 * last epoch and tells its secondary not to take over (on_engine_ended). */
	struct secondary_engine_state eng;

	repl_sec_engine_state(s, &eng);
	if (eng.state && !strcmp(eng.state, "switching")) {
		log_warn(TAG, "the guest is being handed over: the signal waits for the outcome");
		return;
	}
	if (eng.state && s->state == S_ACTIVE && eng.protecting) {
		machine_stop(s->vm->m, 0);
		return;
	}
	s->state = S_DONE;
	ev_break(loop, EVBREAK_ALL);
}

static void watchers_init(struct repl_secondary *s)
{
	double hb = repl_heartbeat_interval(s->o->timeout_ms);
	double tick = watch_tick(s);

	ev_timer_init(&s->watch_w, on_watch, tick, tick);
	ev_timer_init(&s->hb_w, on_hb, hb, hb);
	/* Silence is judged after pending reads are handled (see primary/engine.c);
	 * the same timer notices a stall of this process (repl_link_tick). */
	ev_set_priority(&s->watch_w, EV_MINPRI);
	ev_timer_init(&s->switch_w, on_switched, 0, 0);
	ev_signal_init(&s->sigint_w, on_signal, SIGINT);
	ev_signal_init(&s->sigterm_w, on_signal, SIGTERM);
	s->watch_w.data = s->hb_w.data = s->sigint_w.data = s->sigterm_w.data = s;
	s->switch_w.data = s;
}

int secondary_run(struct ev_loop *loop, const struct repl_secondary_opts *o,
		  const struct secondary_engine *eng)
{
	log_set_role("secondary");
	return secondary_adopt(loop, o, eng, NULL, NULL);
}

int secondary_adopt(struct ev_loop *loop, const struct repl_secondary_opts *o,
		    const struct secondary_engine *eng, struct repl_vm *vm,
		    const struct repl_switch *sw)
{
	struct repl_secondary *s = calloc(1, sizeof(*s));
	struct secondary_engine_state est;
	bool withdraw = false;
	int r, status = 1;

	if (!s) {
		repl_vm_free(vm);
		return 1;
	}
	s->o = o;
	s->eng = eng;
	s->loop = loop;
	snprintf(s->listen_at, sizeof(s->listen_at), "%s", o->listen);
	repl_timing_init(&s->timing, o->timeout_ms, 0);
	repl_link_init(&s->link, PROTO_MAX_PAYLOAD_DEFAULT);
	repl_staging_init(&s->stage);
	repl_candidates_init(&s->cands, &cand_ops, s, o->handshake_timeout_ms, &s->fault);
	watchers_init(s);
	repl_metrics_watch_secondary(o->ops.metrics, s);
	if (vm) {
		/* A primary that switched over: its VM and console are the standby's. */
		s->vm = vm;
		s->con = repl_vm_take_console(vm);
		if (sw->wit)
			repl_sec_witness_adopt(s, sw->wit);
		adopt_standby(s, sw);
	} else if (repl_sec_acquire_resources(s) < 0 || repl_sec_witness_setup(s) < 0) {
		goto out;
	} else if (o->pin.guest[0]) {
		build_spare(s);
	}
	r = net_listen(s->loop, &o->net, o->listen, on_accept, s, &s->lis);
	if (r < 0) {
		log_error(TAG, "cannot listen on %s: %s", o->listen, strerror(-r));
		goto out;
	}
	if (o->control && control_open(s->loop, o->control, control_text, s, &s->ctl) < 0)
		goto out;
	if (o->manual_takeover)
		log_info(TAG, "waiting for a primary on %s (takeover only when told: --takeover manual)",
			 o->listen);
	else
		log_info(TAG, "waiting for a primary on %s (takeover after %u ms of silence)", o->listen,
			 o->timeout_ms);
	net_notify(NET_NOTIFY_STATUS, "waiting for a primary on %s", o->listen);
	if (s->wit)
		log_info(TAG, "fencing: " REPL_FENCING_WITNESS " (key %s, lease %u ms): a takeover "
			 "only after winning the key", o->witness.key, o->witness.lease_ms);
	else
		log_info(TAG, "fencing: " REPL_FENCING);
	ev_timer_start(s->loop, &s->watch_w);
	ev_timer_start(s->loop, &s->hb_w);
	ev_signal_start(s->loop, &s->sigint_w);
	ev_signal_start(s->loop, &s->sigterm_w);
	ev_run(s->loop, 0);
	status = s->exit_status;
	net_notify(NET_NOTIFY_STOPPING, "stopping (exit status %d)", status);
out:
	ev_timer_stop(s->loop, &s->watch_w);
	ev_timer_stop(s->loop, &s->hb_w);
	ev_timer_stop(s->loop, &s->switch_w);
	repl_sec_fence_retry_stop(s);
	ev_signal_stop(s->loop, &s->sigint_w);
	ev_signal_stop(s->loop, &s->sigterm_w);
	control_free(s->ctl);
	console_free(s->con);
	repl_candidates_close_all(&s->cands, "stopping");
	if (s->lis)
		net_listener_close(s->lis);
	repl_drill_free(s);
	repl_link_fini(&s->link);
	repl_pc_dst_free(s);         /* before the stop: no vCPU waits on a missing page */
	if (s->vm) {
		machine_stop(s->vm->m, 0);
		machine_pause(s->vm->m);
	}
	repl_sec_engine_state(s, &est);
	withdraw = est.state && !est.keeps_standby;
	s->eng->detach(s->eng->ctx);
	repl_vm_free(s->vm);
	repl_vm_free(s->spare);
	if (s->wit) {
		repl_witness_release(s->wit, withdraw);
		repl_witness_free(s->wit);
	}
	repl_staging_fini(&s->stage);
	repl_metrics_watch_secondary(o->ops.metrics, NULL);
	free(s);
	return status;
}
