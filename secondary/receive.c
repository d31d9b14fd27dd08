/* What the primary's stream says to the secondary, frame by frame: its
 * Hello (or a resuming one after a switchover), the machine configuration
 * the standby is built from (or the spare built ahead taken), the epochs
 * staged whole and applied (staging.c) and ACKed, beats, drills, post-copy's
 * announcement, and the goodbye (Fence). The link these frames come on is
 * link.c's; nothing here calls back into it. */
#include "secondary/secondary_int.h"
#include "secondary/drill.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kmod/mutant.h"
#include "net/notify.h"

#define TAG "secondary"

void repl_sec_new_token(struct repl_secondary *s)
{
	repl_witness_new_token(s->token, sizeof(s->token));
}

/* A Linux guest's kernel, initrd and command line (outside the digest). */
static void boot_files_copy(struct machine_config *dst, const struct machine_config *src)
{
	memcpy(dst->kernel, src->kernel, sizeof(dst->kernel));
	memcpy(dst->initrd, src->initrd, sizeof(dst->initrd));
	memcpy(dst->append, src->append, sizeof(dst->append));
}

/* A secondary told what it will hold (--guest, --mem, ...) builds that VM
 * while it waits, as a QEMU destination started with -incoming has: a
 * primary whose configuration is the same one then finds its standby ready
 * and the migration or initial sync does not wait for KVM to set up the
 * guest's memory and vCPUs. The VM is fresh, as one built now would be.
 * 1: s->vm is the spare; 0: none fits (any spare is freed), build one. */
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

void repl_sec_build_spare(struct repl_secondary *s)
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

/* A primary this side will not serve (on l, the link its Hello came on):
 * told why (code, -errno), then closed. */
static int refuse_primary(struct repl_secondary *s, struct repl_link *l, int code, const char *err)
{
	log_error(TAG, "refusing primary: %s", err);
	repl_fault_set(&s->fault, REPL_FAULT_PEER_PROTOCOL, code, "refused the primary: %s", err);
	if (repl_send_error(l, code, err) < 0)
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
		return refuse_primary(s, &s->link, -EINVAL, err);
	}
	if (!s->cfg.ndisks && s->o->disk) {
		snprintf(err, sizeof(err), "this secondary has --disk %s but the primary's VM has no disk",
			 s->o->disk);
		return refuse_primary(s, &s->link, -EINVAL, err);
	}
	if (!s->cfg.ndisks)
		return 0;
	if (repl_disk_prepare(s->o->disk, s->cfg.disk_bytes, err, sizeof(err)) < 0)
		return refuse_primary(s, &s->link, -EINVAL, err);
	snprintf(s->cfg.disk, sizeof(s->cfg.disk), "%s", s->o->disk);
	return 0;
}

int repl_sec_send_hello(struct repl_secondary *s)
{
	return repl_send_hello(&s->link, UNDERSTUDY__ROLE__ROLE_SECONDARY, &s->cfg, &s->timing,
			       s->o->witness.key, s->wit ? s->token : NULL,
			       repl_ops_hello_name(&s->o->ops));
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
		return refuse_primary(s, &s->link, -EINVAL, err);
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
		return refuse_primary(s, &s->link, -EINVAL, err);
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
		repl_sec_new_token(s);
	s->state = S_STANDBY;
	net_notify(NET_NOTIFY_STATUS, "syncing a standby of %s from the primary", s->cfg.guest);
	log_info(TAG, "standby built: guest %s, %llu MiB, %d vCPU(s); syncing", s->cfg.guest,
		 (unsigned long long)(s->cfg.mem_bytes >> 20), s->cfg.ncpus);
	return repl_sec_send_hello(s);
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
		return refuse_primary(s, l, -EINVAL, err);
	}
	s->got_hello = true;
	s->resuming = true;          /* our Hello follows on the promoted link */
	log_info(TAG, "the new primary resumes from epoch %llu, which this standby holds: no resync",
		 (unsigned long long)h->resume_epoch);
	return 0;
}

int repl_sec_hello(struct repl_secondary *s, struct repl_link *l, const Understudy__Hello *h)
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
	if (r == 0)   /* last: a primary refused otherwise does not name us */
		r = repl_ops_peer_name(&s->o->ops, h->vm_name, err, sizeof(err));
	if (r < 0)
		return refuse_primary(s, l, r, err);
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
		return repl_sec_hello(s, &s->link, (Understudy__Hello *)msg);
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

int repl_sec_frame(void *ctx, const struct proto_frame *f)
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
