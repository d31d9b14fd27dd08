/* secondary/ private: what the agent's files call of each other, downward
 * only: standby.c (the agent's life, role changes, control) -> link.c (the
 * primary's connection, candidates, the silence watch) -> receive.c (what
 * the primary's frames say) -> takeover.c, postcopy_dst.c, staging.c; and
 * the agent's state, struct repl_secondary. */
#ifndef US_SECONDARY_INT_H
#define US_SECONDARY_INT_H

#include "replication/replication.h"
#include "secondary/secondary.h"

/* ---- disk.c: disk replication, staging and applying (replication/disk.h) */

/* The secondary's side. Decodes a "disk" Section into b (checked whole
 * first: a bad one adds nothing), the digest into *crc. -EBADMSG for a bad
 * section or more blocks than the image has. */
int repl_disk_stage(struct repl_disk_blocks *b, uint64_t nblocks, const void *data, size_t len,
		    uint32_t *crc) US_MUST_CHECK;
/* Writes b's blocks to m's image; durable (fdatasync) before returning if sync. */
int repl_disk_apply(struct machine *m, const struct repl_disk_blocks *b, bool sync) US_MUST_CHECK;

/* A standby's image at path for a disk of bytes bytes: a regular file,
 * writable, of that size or empty (then sized). Its content is dropped (it
 * reads zero): the initial sync sends only blocks that are not. err says
 * why not (-EINVAL: wrong size or kind; else -errno). */
int repl_disk_prepare(const char *path, uint64_t bytes, char *err, size_t errlen) US_MUST_CHECK;

/* ---- the secondary's staging (secondary/staging.c) ------------------------ */

/* Epoch N arrives in parts into a staging checkpoint; only a complete,
 * verified epoch is applied to the standby. Output of applied epochs that
 * the primary may not have released is held for a takeover. */
struct repl_staging {
	struct repl_vm *vm;              /* the standby (borrowed) */
	uint64_t max_gfn;
	uint64_t config_digest;
	bool have_ckpt;
	uint64_t applied;                /* last applied epoch */
	bool in_epoch;
	uint64_t cur;
	struct ckpt stage;
	uint32_t crc;
	bool has_state, has_verify;
	struct proto_verify verify_want; /* the primary's digest of the epoch in flight */
	struct proto_verify verify_last; /* ...of the last applied epoch */
	uint64_t verify_ok, verify_failed;
	struct proto_buf out;            /* console output of the epoch in flight */
	struct repl_disk_blocks disk;    /* disk blocks of the epoch in flight */
	uint32_t disk_crc;
	bool disk_sync;                  /* --disk-sync ack: blocks durable before the ACK */
	uint64_t released;               /* the primary's release mark in that epoch */
	struct proto_buf held;           /* output of applied epochs, maybe unreleased */
	uint64_t held_from;              /* absolute offset of held[0] */
	bool held_based;                 /* held_from is known (first epoch seen) */
	struct repl_stats st;
};

/* ---- connections before their Hello (secondary/candidates.c) ------------- */

/* A connection to the secondary is a candidate until it says a valid Hello:
 * candidates do not block each other or a real primary. Each must say it
 * within handshake_timeout_ms of its connection, or is closed as a lost
 * peer; one that has sent nothing at all goes after REPL_CANDIDATES_SILENT_MS
 * (a primary speaks first, at once). The slots are shared fairly: a
 * newcomer from an address that has REPL_CANDIDATES_PER_SOURCE of them
 * takes the place of its oldest, and when all are taken, the place of the
 * oldest silent one (else of the oldest one past REPL_CANDIDATES_SILENT_MS),
 * so idle connections cannot keep a real primary out. The agent decides on
 * the Hello; a candidate it accepts is handed over (promote), and so is the
 * decoder that read the Hello (adopt). */
#define REPL_CANDIDATES_MAX 8        /* connections still to say Hello */
#define REPL_CANDIDATES_PER_SOURCE 4
#define REPL_CANDIDATES_SILENT_MS 1000

struct repl_candidate;

struct repl_candidates_ops {
	/* The candidate's Hello: 0 accepts it (promote follows), < 0 refuses
	 * it (-ECONNREFUSED: an Error is on its way, then it is closed). */
	int (*hello)(void *ctx, struct repl_link *l, const struct proto_frame *f);
	/* Accepted: c is the agent's now. */
	void (*promote)(void *ctx, struct net_conn *c);
	/* Frames after the Hello, in the chunk that carried it. */
	int (*frame)(void *ctx, const struct proto_frame *f);
	/* Take the decoder (and its counts) that read the Hello from l. */
	void (*adopt)(void *ctx, struct repl_link *l);
	/* What the frames of that chunk came to (r: the feed's result). */
	void (*fed)(void *ctx, int r);
};

struct repl_candidates {
	const struct repl_candidates_ops *ops;
	void *ctx;
	unsigned handshake_timeout_ms;
	struct repl_fault *fault;        /* the agent's: why a candidate was closed */
	struct repl_candidate *slot[REPL_CANDIDATES_MAX];
	uint64_t log_ns;                 /* lines about room made: one per 10 s */
	unsigned unlogged;
};

struct secondary_engine;

enum sstate { S_WAITING, S_HELLO, S_STANDBY, S_CONTENDING, S_FENCE_FAILED, S_ACTIVE, S_FENCED,
	      S_DONE };

struct repl_secondary {
	const struct repl_secondary_opts *o;
	struct ev_loop *loop;
	struct net_listener *lis;
	struct repl_link link;
	enum sstate state;
	bool got_hello;
	bool refusing;                   /* an Error is on its way, then we close */
	bool standing_down;              /* the primary said it goes on without us */
	bool told_silent;                /* manual takeover: the primary's silence was logged */
	uint64_t hello_digest;           /* the primary's machine configuration digest */
	struct repl_timing timing;       /* ours, in our Hello */
	struct repl_timing peer_timing;  /* the primary's, from its Hello */
	struct machine_config cfg;
	struct repl_vm *vm;
	struct repl_vm *spare;           /* built at start from --guest/--mem, unused yet */
	struct repl_staging stage;
	struct repl_fault rx_fault;      /* set by a frame that failed on our side */
	struct repl_fault fault;         /* the last failure: status reason */
	struct repl_fault fault_at_takeover;   /* ...when it took over (status: not repeated) */

	int exit_status;
	ev_timer watch_w, hb_w;
	struct console *con;             /* bound at start, served from the takeover on */
	struct repl_candidates cands;    /* connections before their Hello */

	struct repl_witness *wit;        /* NULL: heartbeat only */
	char token[REPL_WITNESS_ID_MAX]; /* this standby's, in our Hello */
	uint64_t contend_t0_ns;          /* the takeover decision: contending since */
	char peer_addr[128];             /* the primary's host (no port), for the fence command */
	bool migrate_now;                /* the primary handed the guest over (Fence) */
	bool migrating;                  /* ...so the takeover keeps its link and skips the fence */
	const struct secondary_engine *eng;   /* the host's engine, once active (secondary.h) */
	struct repl_pc_dst *pc;          /* a post-copy hand-over announced (secondary/postcopy_dst.c) */
	bool switch_now;                 /* the Fence was a switchover (migrate_now too) */
	bool switching;                  /* ...taking over: protect onto switch_listen */
	char switch_listen[128];         /* where the old primary waits as our standby */
	char switch_token[REPL_WITNESS_ID_MAX];   /* its token, vouched for as we win the key */
	bool lapsed;                     /* active, unprotected: paused until the key is re-taken */
	bool resuming;                   /* the candidate's Hello resumes our standby */
	bool await_resume;               /* switched: no takeover before the new primary connects */
	uint64_t switches;               /* switchovers this agent took part in */
	double switch_downtime_ms;       /* the last one's, as its old primary measured it */
	uint64_t switch_epoch;           /* ...and its epoch */
	ev_timer switch_w;               /* our engine switched over: become the standby */
	char listen_at[128];             /* --listen, or where the last switchover said */
	uint64_t switch_fence_ns;        /* the Fence SWITCHES arrived then */
	uint64_t switch_paused_us;       /* ...its sender's guest paused that long before */
	double switch_in_ms;             /* ...so the guest was down about this long here */
	struct repl_drill *drill;        /* drills (drill.c), from the first applied epoch */
	uint64_t peer_caps;              /* the primary's Hello.capabilities */
	unsigned fence_failures;         /* fence command runs that failed for this takeover */
	ev_timer fence_w;                /* ...the next run (bounded backoff, fence.h) */
	const char *fence_reason;        /* ...why the takeover is wanted */
	bool operator_fenced;            /* takeover --fenced-by-operator: no fence command */
	bool self_vouched;               /* K/standby names this standby again (fence failed) */
	bool withdrawing;                /* ...the takeover waits for K/standby = none */
};

/* ---- link.c: the primary's connection and the watch for its silence ----- */

/* Candidates (connections before their Hello), the watch and heartbeat
 * timers (not started). */
void repl_sec_link_init(struct repl_secondary *s);
/* The listener's callback (ctx: the agent): a connection is a candidate. */
void repl_sec_on_accept(struct net_listener *l, struct net_conn *c, void *ctx);

/* ---- candidates.c: what the agent calls of them (the struct: above) ---- */

void repl_candidates_init(struct repl_candidates *cs, const struct repl_candidates_ops *ops,
			  void *ctx, unsigned handshake_timeout_ms, struct repl_fault *fault);
/* Takes ownership of c: it waits for its Hello, or is closed when all
 * slots are taken by candidates that are talking and young. */
void repl_candidates_add(struct repl_candidates *cs, struct net_conn *c);
/* Closes the candidates past their deadline (see above). */
void repl_candidates_expire(struct repl_candidates *cs);
void repl_candidates_close_all(struct repl_candidates *cs, const char *why);

/* ---- metrics.c: the agent's metrics and events ------------------------- */

/* An event with its details filled in from the agent's state. */
void repl_sec_event(struct repl_secondary *s, enum repl_event ev, const char *reason);
/* The agent running now (NULL: none any more); a primary engine attached
 * after a takeover is rendered over it. m may be NULL. */
void repl_metrics_watch_secondary(struct repl_metrics *m, struct repl_secondary *s);

/* ---- status.c: what status shows --------------------------------------- */

/* The state for status ("standby-unready": a standby that could not take over). */
const char *repl_sec_state_name(const struct repl_secondary *s);
/* The status reply (as `understudy status` shows it; JSON for "status json"). */
char *repl_sec_status_text(void *ctx, const char *req);

/* ---- receive.c: what the primary's frames say --------------------------- */

/* A frame of the primary's stream (ctx: the agent); <0 as proto_dec_feed's
 * callback, -ECONNREFUSED: refused, told why (the link is to be closed). */
int repl_sec_frame(void *ctx, const struct proto_frame *f) US_MUST_CHECK;
/* A primary's Hello, on l (a candidate's link or the agent's). */
int repl_sec_hello(struct repl_secondary *s, struct repl_link *l,
		   const Understudy__Hello *h) US_MUST_CHECK;
/* Our Hello, on the agent's link: the standby built, or a primary resumes. */
int repl_sec_send_hello(struct repl_secondary *s) US_MUST_CHECK;
/* The VM of --guest, --mem, ... built ahead while no primary is there. */
void repl_sec_build_spare(struct repl_secondary *s);
/* A fresh token for a fresh standby: a vouch for an earlier one never
 * lets this one in. */
void repl_sec_new_token(struct repl_secondary *s);

/* ---- staging.c: an epoch staged whole, then applied --------------------- */

void repl_staging_init(struct repl_staging *g);
void repl_staging_fini(struct repl_staging *g);
/* A new standby (or none): forget every epoch and held byte. */
void repl_staging_attach(struct repl_staging *g, struct repl_vm *vm, uint64_t config_digest);
/* The primary released its output up to mark: not to be replayed. */
void repl_staging_released(struct repl_staging *g, uint64_t mark);
/* A torn transfer: the epoch in flight is dropped, the standby stays. */
void repl_staging_abort(struct repl_staging *g);
int repl_staging_begin(struct repl_staging *g, uint64_t epoch) US_MUST_CHECK;
int repl_staging_section(struct repl_staging *g, const Understudy__Section *sec) US_MUST_CHECK;
int repl_staging_pages(struct repl_staging *g, const struct proto_frame *f) US_MUST_CHECK;
/* Verifies and applies the staged epoch. 0: applied (send ACK); <0: *f says
 * whose fault it is, nothing of the epoch applied unless f is LOCAL_FATAL. */
int repl_staging_end(struct repl_staging *g, const Understudy__EpochEnd *ee,
		     struct repl_fault *f) US_MUST_CHECK;

/* Test mode: after applying epoch, reads m back from KVM and compares it
 * with the primary's digest; logs "VERIFY FAILED" and the parts that differ. */
bool repl_verify_standby(struct machine *m, const struct proto_verify *want, uint64_t epoch);

/* takeover.c */
/* The host's engine as it is now (st->state NULL: none attached). */
void repl_sec_engine_state(const struct repl_secondary *s, struct secondary_engine_state *st);
void repl_sec_drop_standby(struct repl_secondary *s);
/* The takeover decision (the primary is silent, or a takeover request). */
void repl_sec_begin_takeover(struct repl_secondary *s);
void repl_sec_fence(struct repl_secondary *s);
void repl_sec_lease_check(struct repl_secondary *s);
int repl_sec_acquire_resources(struct repl_secondary *s);
int repl_sec_witness_setup(struct repl_secondary *s);
/* A primary that switched over becomes this standby: its witness (resigned,
 * its thread running) is the standby's from now on. */
void repl_sec_witness_adopt(struct repl_secondary *s, struct repl_witness *w);
/* "takeover" or "takeover fenced-by-operator". */
char *repl_sec_takeover_request(struct repl_secondary *s, const char *req);
/* Stops the fence command's retry timer (at the end of the agent). */
void repl_sec_fence_retry_stop(struct repl_secondary *s);

/* ---- postcopy_dst.c: a post-copy migration's destination ---------------- */

/* A PostcopyBegin part: from the first on, no takeover without the source. */
int repl_pc_dst_begin(struct repl_secondary *s, const Understudy__PostcopyBegin *b) US_MUST_CHECK;
/* The hand-over (before the guest resumes here): the stale pages become
 * missing, faults are served from the source, the link is post-copy's.
 * <0: the VM is lost (reported, the loop ends). */
int repl_pc_dst_arm(struct repl_secondary *s) US_MUST_CHECK;
/* Announced but not armed, and the source is gone: the VM is lost. */
void repl_pc_dst_lost(struct repl_secondary *s, const char *why);
/* A post-copy hand-over is under way and not every page is in yet. */
bool repl_pc_dst_pending(const struct repl_secondary *s);
void repl_pc_dst_free(struct repl_secondary *s);

#endif
