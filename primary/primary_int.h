/* primary/ private: what the engine's files call of each other. The layers
 * inside, top down: run.c (the host's entry points) -> engine.c (the link's
 * callbacks, the handshake, the guest's stop) -> cycle.c (epochs, ACKs, the
 * hand-over) -> failure.c (faults, the goodbye, the end); epoch.c, sync.c,
 * postcopy_src.c and lease.c below them. */
#ifndef US_PRIMARY_INT_H
#define US_PRIMARY_INT_H

#include "primary/primary.h"

/* ---- disk.c: disk replication, the capture (replication/disk.h) ------ */

/* The primary's side: the capture of each epoch's dirty blocks. */
struct repl_disk_cap {
	uint64_t nblocks;          /* 0: the machine has no disk, all of this is a no-op */
	uint64_t *harvest;         /* the last capture's dirty blocks, for requeue */
	struct repl_disk_blocks blk;
	struct proto_page_enc *enc;   /* ZERO / RAW / LZ4, no XOR cache */
	struct proto_page_stats st;   /* what the sections held */
	uint64_t copy_ns;          /* the last capture's harvest + reads */
	uint64_t epochs_with_blocks, blocks_total, copy_ns_total, captures;
	uint64_t sync_blocks;      /* sent by the syncs before the first checkpoint */
};

int repl_disk_cap_init(struct repl_disk_cap *d, struct machine *m) US_MUST_CHECK;
void repl_disk_cap_fini(struct repl_disk_cap *d);
/* A disk to capture: without one the epoch skips the calls below (an epoch
 * of a VM without a disk does not enter disk.c). */
static inline bool repl_disk_cap_on(const struct repl_disk_cap *d)
{
	return d->nblocks != 0;
}
/* In the pause: harvests the dirty blocks and reads each into d->blk. */
int repl_disk_capture(struct repl_disk_cap *d, struct machine *m) US_MUST_CHECK;
/* With the guest running: more room when the last capture came near the
 * buffer's size, so that no later pause has to grow it. */
void repl_disk_grow(struct repl_disk_cap *d);
/* The capture did not reach the link: its blocks are dirty again. */
void repl_disk_requeue(struct repl_disk_cap *d, struct machine *m);
/* Appends d->blk as "disk" Sections to out; *crc accumulates the disk
 * digest (proto_digest_page over block number and data). */
int repl_disk_pack(struct repl_disk_cap *d, struct proto_buf *out, uint32_t *crc) US_MUST_CHECK;
/* Initial sync: one "disk" Section (appended to out) of up to
 * REPL_DISK_SECTION_BLOCKS blocks from *cursor on, and moves *cursor past
 * them. todo NULL: the first pass (holes skipped, blocks that read zero not
 * sent); else a dirty round: the blocks set in todo, zero or not. *sent
 * counts the blocks sent. 1: more may follow; 0: the pass is done. */
int repl_disk_sync_batch(struct repl_disk_cap *d, struct machine *m, const uint64_t *todo,
			 uint64_t *cursor, struct proto_buf *out, uint64_t *sent) US_MUST_CHECK;

/* ---- the epochs (epoch.c) ------------------------------------------------- */

#define REPL_EPOCH_SLOTS 8

/* One epoch slot moves through these in order; one function in epoch.c
 * (settle) makes a slot free again. An ACK may overtake the link's sent()
 * (RDMA completions): the slot is then released while on_wire still holds. */
enum repl_epoch_state {
	REPL_EPOCH_FREE,        /* may take the next capture */
	REPL_EPOCH_PRECOPY,     /* EpochBegin and pages pre-copied while the guest ran are on the link */
	REPL_EPOCH_CAPTURED,    /* pages + state in the capture buffer, output marked */
	REPL_EPOCH_ENCODED,     /* framed into buf */
	REPL_EPOCH_SENDING,     /* buf handed to the link */
	REPL_EPOCH_SENT,        /* the link is done with buf; waiting for ACK */
	REPL_EPOCH_ACKED,       /* the secondary holds the epoch */
	REPL_EPOCH_RELEASED,    /* the epoch's output has left */
};

struct repl_epoch {
	int kind;                  /* REPL_TX_EPOCH: the slot is its own send cookie */
	enum repl_epoch_state state;
	unsigned on_wire;          /* buffers (pre, buf) the link reads until its sent() */
	uint64_t epoch;
	uint64_t out_mark;         /* guest output produced up to the pause */
	uint64_t net_mark;         /* frames the guest sent up to the pause */
	uint64_t capture_ns;
	uint64_t bytes;            /* sent after the pause (buf; the pre-copy is not in it) */
	struct proto_buf buf;
	struct proto_buf pre;      /* the pre-copy's part, sent before the pause */
};

/* The primary's part of a drill the secondary runs (primary/drill.c): a digest of
 * the RAM at one capture, and the pauses and lag from the drill's begin. */
struct repl_drill_pri {
	uint64_t id;               /* 0: no drill */
	bool want_digest;          /* digest the RAM at the next capture */
	bool digest_ready;         /* ...taken: send it after that epoch */
	uint64_t npause0;          /* stats' pause count at drill-begin */
	uint64_t p50_before_ns, p99_before_ns, lag_before_ns, lag_max_ns;
	uint64_t digest_epoch, digest_ns, unacked_at_digest;
	uint32_t mem_crc;
};

/* The pipeline: one capture buffer, REPL_EPOCH_SLOTS slots in flight. */
struct repl_epochs {
	struct repl_vm *vm;
	struct repl_link *link;
	struct proto_page_enc *enc;  /* shared with the initial sync (one XOR cache) */
	struct ckpt cap;
	struct ckpt pre;             /* the open epoch's pre-copy (pages, no state) */
	struct repl_epoch *open;     /* the epoch whose pre-copy is on the link, or NULL */
	uint32_t pre_crc;            /* ...their part of the epoch digest */
	int pre_mode;                /* -1 adaptive, 0 never, 1 always (UNDERSTUDY_PRECOPY) */
	double pre_waste;            /* share of pre-copied pages sent again (moving average) */
	unsigned pre_skip;           /* epochs to go without pre-copy after a wasteful run */
	bool pre_retry;              /* the open epoch's closing part is being retried */
	struct repl_disk_cap disk;   /* the capture's disk blocks (none without a disk) */
	struct repl_epoch slot[REPL_EPOCH_SLOTS];
	uint64_t epoch;            /* last captured */
	uint64_t acked;
	uint64_t out_mark_prev;    /* output up to here went in an earlier epoch */
	bool verify;               /* test mode: digest of RAM and state in every epoch */
	struct proto_verify verify_digest;  /* ...taken at the pause */
	struct repl_stats st;
	struct ckpt_stats worst;   /* breakdown of the longest pause */
	double copy_page_ns;       /* copy cost of a page in the pause (moving average) */
	bool hold_output;          /* switchover: nothing more leaves here (the new primary replays it) */
	bool hot_off;              /* a hand-over is coming: no hot pages (each would be in every epoch) */
	bool reboot;               /* the guest rebooted: the next epoch to leave says so
				    * (the secondary clears the standby's RAM first) */
	uint64_t worst_pages;
	struct repl_rate *rate;    /* migration: bandwidth limit (primary/postcopy_src.c), or NULL */
	struct repl_drill_pri drill;
};

int repl_epochs_init(struct repl_epochs *q, struct repl_vm *vm, struct repl_link *link,
		     bool verify) US_MUST_CHECK;
void repl_epochs_fini(struct repl_epochs *q);
/* The link is gone with every send on it: all slots are free again. */
void repl_epochs_drop(struct repl_epochs *q);
/* Pause, capture, resume (unless !resume), encode, send. 1: epoch sent;
 * 0: stretched (no free slot or link full); <0: failed, *f says how (a
 * transient failure has been undone: its pages are dirty again). */
int repl_epoch_run(struct repl_epochs *q, bool resume, struct repl_fault *f) US_MUST_CHECK;
/* Between two pauses, with the guest running: opens the next epoch on the
 * link with the pages written so far (EpochBegin and page batches); the
 * pause then copies only what was written since, and pages written again
 * travel again (the secondary stages them, the last copy wins). One a
 * epoch. 1: sent; 0: nothing sent (nothing to send, no room, or a local
 * failure: pre-copy then rests a while, its pages dirty again); <0: the
 * link failed, *f says how. */
int repl_epoch_precopy(struct repl_epochs *q, struct repl_fault *f) US_MUST_CHECK;
/* Whether a pre-copy pays for the coming epoch: the last epoch was large
 * enough and the recent pre-copies were not mostly sent again. */
bool repl_epoch_precopy_wanted(const struct repl_epochs *q);
/* The link's sent() for an epoch cookie. */
void repl_epoch_sent(struct repl_epochs *q, void *cookie);
/* ACK(epoch): 1 accepted (output released), 0 ignored (stale or unknown). */
int repl_epoch_ack(struct repl_epochs *q, uint64_t epoch);

/* ---- the initial sync (primary/sync.c) -------------------------------------------- */

/* Copies the guest's RAM to the secondary while it runs: round 0 every page
 * ever written, then the pages dirtied meanwhile, until few are left; the
 * rest goes in the first checkpoint. */
struct repl_sync {
	struct ev_loop *loop;
	struct repl_vm *vm;
	struct repl_link *link;
	struct proto_page_enc *enc;
	struct repl_disk_cap *disk;   /* the epochs' (its image goes first), or NULL */
	uint64_t disk_cursor, disk_sent;   /* the pass over the disk; blocks sent in it */
	int disk_round;            /* 0: every block with data; then the dirty ones */
	bool disk_done;
	uint64_t *todo;            /* pages of the round, sent from cursor on */
	uint64_t cursor;
	int round;
	uint64_t round_pages;
	uint8_t *snap;             /* stable copies of pages being sent */
	uint64_t t0_ns;
	uint64_t batches;          /* sent so far */
	struct proto_page_stats pages;   /* what the batches held, by encoding */
	bool running;
	ev_idle idle_w;
	struct repl_rate *rate;    /* migration: bandwidth limit (primary/postcopy_src.c), or NULL */
	ev_timer rate_w;           /* ...until the bucket allows the next batch */
	/* Loop-thread callbacks of the owner: the sync ended, or failed. */
	void (*done)(void *ctx);
	void (*failed)(void *ctx, const struct repl_fault *f);
	void *ctx;
};

int repl_sync_init(struct repl_sync *s, struct ev_loop *loop, struct repl_vm *vm,
		   struct repl_link *link, struct proto_page_enc *enc) US_MUST_CHECK;
void repl_sync_fini(struct repl_sync *s);
int repl_sync_start(struct repl_sync *s, struct repl_fault *f) US_MUST_CHECK;
void repl_sync_stop(struct repl_sync *s);
/* A send the link owned left: go on if the sync waited for room. */
void repl_sync_room(struct repl_sync *s);
/* Pages of the current round not sent yet (0 when not running). */
uint64_t repl_sync_left(const struct repl_sync *s);

enum pstate { P_CONNECTING, P_HELLO, P_SYNC, P_PROTECTING, P_PROTECTED, P_SWITCHING, P_UNPROTECTED,
	      P_FENCED, P_DONE };

struct repl_primary {
	const struct repl_primary_opts *o;
	struct repl_primary_opts own;  /* a copy of the host's options */
	char own_strings[7][512];      /* ...and of the strings they point to */
	bool owned;                    /* the VM runs for this engine (understudy primary) */
	struct repl_primary_host host;
	uint64_t attach_t0_ns;
	void (*host_stopped)(void *ctx, int status);   /* the VM's on_stopped before attach */
	void *host_stopped_ctx;
	struct ev_loop *loop;
	struct repl_vm *vm;
	struct repl_link link;
	enum pstate state;
	struct repl_sync sync;
	struct repl_epochs ep;

	uint64_t peer_caps;        /* the secondary's Hello.capabilities */
	bool finishing;            /* guest stopped: last epoch in flight */
	bool final_pending;        /* ...not captured yet (no free slot) */
	uint64_t final_epoch;
	int exit_status;

	uint64_t transient_since_ns;   /* first of the local shortages in a row */
	uint64_t transient_progress;   /* epochs + sync batches then */
	struct repl_fault rx_fault;    /* what a frame of the secondary said */
	struct repl_fault fault;       /* the last failure: status reason */
	struct repl_timing timing;     /* ours, in our Hello */
	struct repl_timing peer_timing;   /* the secondary's, from its Hello */

	ev_timer epoch_w, hb_w, finish_w, goodbye_w, linger_w;

	struct repl_witness *wit;      /* NULL: heartbeat only */
	char standby_token[REPL_WITNESS_ID_MAX];   /* from the secondary's Hello */
	bool vouch_asked;              /* K/standby may name the standby from now on */
	bool lapsed;                   /* unprotected, paused until the key is re-taken */
	bool vouched;                  /* ...and does */
	bool withdrawn;                /* K/standby = none confirmed after a vouch */
	struct repl_witness_cbs host_cbs;   /* the host's, put back at detach */
	bool keep_standby;             /* exit without withdrawing it: it takes over */
	unsigned migrate_ms;           /* migration: the downtime asked for (0: none) */
	bool auto_converge;            /* ...throttle the guest when it does not fit */
	unsigned throttle_pct;         /* the guest stays paused this share of each epoch */
	unsigned converge_misses;      /* ACKs since the last throttle step */
	ev_timer throttle_w;           /* ends the throttle pause of this epoch */
	uint64_t sync_bytes0;          /* link bytes when the initial sync began */
	double link_bytes_per_ms;      /* ...what it carried per ms (0: not measured) */
	double rtt_ms;                 /* the smallest round trip an epoch showed (<0: none) */
	double predicted_ms;           /* migration: the last predicted downtime (status) */
	uint64_t switch_t0_ns;         /* migration: the guest paused for the final epoch */
	bool migrated;                 /* ...and the destination runs it */
	bool migrated_told;            /* ...and status said so for a while */
	double downtime_ms;            /* measured: pause -> the destination's word */
	double migration_ms;           /* attach (or the migrate request) -> that word */
	uint64_t migrate_t0_ns;
	ev_timer lease_w;              /* the lease's validity, checked often */
	struct repl_pc_src *pc;        /* migration: bandwidth limit, post-copy (primary/postcopy_src.c) */
	void *handover_tx;             /* migration: the hand-over Fence while the link holds it */
	bool handover_out;             /* ...it reached the kernel: the destination may have it */
	bool resigned;                 /* the witness key was given up for the destination */
	bool in_doubt;                 /* the link failed after the hand-over left: paused */
	bool reclaiming;               /* ...resigned: contending for the key the destination never took */
	bool reclaim_lost;             /* ...the destination took it: it may run the guest */
	bool switching_over;           /* switchover asked: hand over at the next ACK */
	bool switched;                 /* ...done: the VM becomes the standby */
	char switch_listen[128];       /* ...where it waits for the new primary */
	char switch_token[REPL_WITNESS_ID_MAX];   /* ...and its witness token ("": none) */
	ev_timer reconnect_w;          /* resuming: the old primary may not listen yet */
	ev_timer early_w;              /* output waits: end the epoch at min_epoch_ms */
	ev_timer precopy_w;            /* half-way through an epoch: pre-copy what was written */
	uint64_t release_after;        /* after a stall: release at the ACK of this epoch */
	uint64_t stall_seen_ns;        /* ...the stall that set it */
	uint64_t epoch_t0_ns;          /* the last epoch was captured then */
	uint64_t epochs_timer;         /* epochs the epoch timer started (status, metrics) */
	uint64_t epochs_output;        /* ...that waiting guest output started early */
	unsigned min_epoch_ms;

	ev_timer handshake_w;          /* until protected: every phase progresses */
	struct {
		enum pstate state;
		uint64_t batches;      /* sync batches sent */
		size_t queued;         /* bytes the link (and the kernel) still hold */
		uint64_t since_ns;     /* these last changed */
	} hs;
};

/* The shorter of the two timeouts: a stall longer than that may have
 * cost us the secondary, or the secondary us (the epoch's ACK, the silence
 * check and the failure policy ask). */
static inline unsigned repl_primary_stall_ms(const struct repl_primary *p)
{
	unsigned peer_ms = p->peer_timing.timeout_ms;

	return peer_ms && peer_ms < p->o->timeout_ms ? peer_ms : p->o->timeout_ms;
}

/* ---- migration extras (postcopy_src.c): the bandwidth limit of the
 * migration stream and post-copy's source ----------------------------------- */

/* Sends may go while the bucket is not in debt; each send is charged whole
 * (a batch or an epoch may take the bucket below zero: the next waits). */
struct repl_rate {
	double bytes_per_s;        /* 0: unlimited */
	double tokens;
	uint64_t last_ns;
};

void repl_rate_init(struct repl_rate *r, unsigned mib_per_s);
/* 0 when a send may go now, else the nanoseconds until it may. */
uint64_t repl_rate_wait_ns(struct repl_rate *r);
void repl_rate_charge(struct repl_rate *r, size_t bytes);

/* ---- the source --------------------------------------------------------------------- */

/* A migration's extras on p (bandwidth limit, post-copy after that many
 * rounds without convergence; 0 never). p->pc is set; the rate is hooked
 * into the sync and the epochs. */
int repl_pc_src_new(struct repl_primary *p, unsigned bandwidth_mib, unsigned postcopy_after) US_MUST_CHECK;
void repl_pc_src_free(struct repl_primary *p);
/* The bandwidth limit in bytes per ms (0: none), for the predicted downtime. */
double repl_pc_src_cap_bytes_per_ms(const struct repl_primary *p);
/* A round (an ACK) whose predicted downtime did not fit: true when post-copy
 * is due (once). It starts in place of the next epoch the bandwidth limit
 * lets go (repl_pc_src_ready): what that epoch would carry is what the
 * destination fetches. */
bool repl_pc_src_due(struct repl_primary *p);
/* Asked by the epoch's timer only while a migration runs (p->pc): a
 * protected VM's tick does not enter postcopy_src.c. */
bool repl_pc_src_ready(struct repl_primary *p);
/* The guest is paused for good (p->finishing): names the stale pages to
 * the destination. From here on the VM lives only if both sides do. */
int repl_pc_src_announce(struct repl_primary *p) US_MUST_CHECK;
/* True once announced: a failure now loses the VM (see repl_pc_src_lost). */
bool repl_pc_src_switched(const struct repl_primary *p);
/* The destination runs the guest: the background stream starts. */
void repl_pc_src_running(struct repl_primary *p);
/* PAGE_REQUEST or POSTCOPY_DONE: <0 error, 1 post-copy is complete. */
int repl_pc_src_frame(struct repl_primary *p, uint16_t type, const ProtobufCMessage *msg) US_MUST_CHECK;
/* A send completed: room for the background stream. */
void repl_pc_src_room(struct repl_primary *p);
/* A failure after the announce: says loudly that the VM is lost. */
void repl_pc_src_lost(struct repl_primary *p, const struct repl_fault *f);
/* "postcopy" while the pages stream, else NULL. */
const char *repl_pc_src_state(const struct repl_primary *p);
/* Status fields: text lines, or members of the status JSON object. */
void repl_pc_src_status(const struct repl_primary *p, char *out, size_t len);
struct json_object;
void repl_pc_src_status_json(const struct repl_primary *p, struct json_object *o);


/* run.c: what primary.h does not export */
/* Hands the guest over to the engine's own secondary as soon as the
 * predicted downtime is at most downtime_ms (see migrate_downtime_ms). */
void repl_primary_migrate(struct repl_primary *p, unsigned downtime_ms, bool auto_converge);
/* "switchover listen=HOST:PORT": at the next acknowledged epoch the guest
 * pauses for a final epoch, the secondary takes it over at once and
 * protects it onto HOST:PORT, where this VM waits as its standby (no
 * resync). 0, or -EINVAL/-EBUSY with err saying why (not protected, a
 * witness, a migration under way). */
int repl_primary_switchover(struct repl_primary *p, const char *listen, char *err,
			    size_t errlen) US_MUST_CHECK;

/* lease.c: the witness lease and the fence */
/* The epochs on the link are freed once nothing reads them any more. */
void repl_primary_link_gone(struct repl_primary *p);
void repl_primary_fence(struct repl_primary *p);
void repl_primary_lease_check(struct ev_loop *loop, ev_timer *w, int revents);
/* Attached to a host's witness: the engine's callbacks on it until detach. */
void repl_primary_witness_attach(struct repl_primary *p);
void repl_primary_witness_detach(struct repl_primary *p);
/* A migration in doubt: resume the guest here (the destination provably
 * does not run it), or, after the key was given up, contend for it back. */
void repl_primary_resume_in_doubt(struct repl_primary *p, const char *how);
void repl_primary_reclaim(struct repl_primary *p);
void repl_primary_reclaim_abandon(struct repl_primary *p);

/* failure.c */
void repl_primary_on_linger(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_done(struct repl_primary *p);
void repl_primary_on_goodbye_timeout(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_drop_protection(struct repl_primary *p, const struct repl_fault *f);
int repl_primary_on_fence(struct repl_primary *p, const Understudy__Fence *f);
void repl_primary_on_fault(struct repl_primary *p, const struct repl_fault *f);
void repl_primary_fault(struct repl_primary *p, enum repl_fault_kind kind, int err, const char *what);
void repl_primary_on_throttle_end(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_throttle_off(struct repl_primary *p);
void repl_primary_finish(struct repl_primary *p, int status);

/* cycle.c */
void repl_primary_on_precopy(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_on_early(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_on_vm_output(void *ctx);
void repl_primary_on_epoch_timer(struct ev_loop *loop, ev_timer *w, int revents);
void repl_primary_try_final_epoch(struct repl_primary *p);
void repl_primary_on_ack(struct repl_primary *p, uint64_t epoch);
void repl_primary_on_sync_done(void *ctx);
void repl_primary_on_sync_failed(void *ctx, const struct repl_fault *f);
void repl_primary_start_sync(struct repl_primary *p);

/* drill.c: the primary's part of drills */
/* A "drill-begin" or "drill-end" Section from the secondary (other names:
 * -EPROTO). */
int repl_drill_pri_section(struct repl_epochs *q, const Understudy__Section *sec) US_MUST_CHECK;
/* In the pause, after a capture: the RAM digest a drill asked for. */
void repl_drill_pri_capture(struct repl_epochs *q);
/* After an epoch went to the link: the digest follows it. */
void repl_drill_pri_sent(struct repl_epochs *q);
/* An ACK set st.lag_ns; called only while a drill runs (drill.id). */
void repl_drill_pri_acked(struct repl_epochs *q);

/* metrics.c: the engine's metrics and events */
/* An event with its details filled in from the engine's state. */
void repl_primary_event(struct repl_primary *p, enum repl_event ev, const char *reason);
/* The engine running now (NULL: none any more). m may be NULL. */
void repl_metrics_watch_primary(struct repl_metrics *m, struct repl_primary *p);

/* engine.c */
int repl_primary_init(struct repl_primary *p);
void repl_primary_start(struct repl_primary *p);
void repl_primary_fini(struct repl_primary *p);
void repl_primary_watchers_init(struct repl_primary *p);

#endif
