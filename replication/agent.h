/* replication/ inside: the state of the two agents' engines, shared by
 * the files of each (primary/engine.c and its neighbours; secondary/standby.c,
 * link.c, receive.c, takeover.c, ...) and status.c. Calls go one way: the state
 * machine files (primary/engine.c, secondary/standby.c and link.c) call the
 * others, never the reverse. */
#ifndef US_REPL_AGENT_H
#define US_REPL_AGENT_H

#include "replication/replication.h"

enum pstate { P_CONNECTING, P_HELLO, P_SYNC, P_PROTECTING, P_PROTECTED, P_SWITCHING, P_UNPROTECTED,
	      P_FENCED, P_DONE };

struct repl_primary {
	const struct repl_primary_opts *o;
	struct repl_primary_opts own;  /* attached: a copy of the caller's options */
	char own_strings[7][512];      /* ...and of the strings they point to */
	bool attached;                 /* on a host's running VM (repl_primary_attach) */
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
	ev_signal sigint_w, sigterm_w;
	struct control *ctl;

	struct repl_witness *wit;      /* NULL: heartbeat only */
	char standby_token[REPL_WITNESS_ID_MAX];   /* from the secondary's Hello */
	bool vouch_asked;              /* K/standby may name the standby from now on */
	bool lapsed;                   /* unprotected, paused until the key is re-taken */
	bool vouched;                  /* ...and does */
	bool withdrawn;                /* K/standby = none confirmed after a vouch */
	struct repl_witness_cbs host_cbs;   /* attached: the host's, put back at detach */
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
	ev_signal sigint_w, sigterm_w;
	struct control *ctl;
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

/* status.c */
const char *repl_sec_state_name(const struct repl_secondary *s);
char *repl_sec_status_text(void *ctx, const char *req);

#endif
