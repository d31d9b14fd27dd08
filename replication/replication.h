/* replication: running a protected machine — the epoch loop, output commit,
 * heartbeat, failure detection, failover, migration rounds — and the
 * runtime that hosts a machine on an agent's libev loop. */
#ifndef US_REPLICATION_H
#define US_REPLICATION_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "checkpoint/checkpoint.h"
#include "machine/machine.h"
#include "net/console.h"
#include "net/net.h"
#include "net/tap.h"
#include "proto/proto.h"
#include "replication/disk.h"
#include "replication/metrics.h"
#include "replication/witness.h"

/* Frames the guest sent on its NIC, held for output commit (vm_net.c), under
 * repl_vm.out_lock. Records of u16 length + frame in one buffer allocated
 * at open (the vCPU thread never allocates). At REPL_NET_HELD_FRAMES frames
 * or REPL_NET_HELD_BYTES bytes a new frame is dropped, as a full NIC queue
 * drops it (counted; logged once a run of drops). */
#define REPL_NET_HELD_FRAMES 4096u
#define REPL_NET_HELD_BYTES (4u << 20)
struct repl_net_held {
	uint8_t *buf;
	size_t len;             /* bytes of records held */
	uint32_t frames;        /* frames held */
	uint64_t produced;      /* frames the guest sent (not dropped) */
	uint64_t released;      /* frames handed to the tap */
	uint64_t epoch_mark;    /* produced at the last repl_vm_output_mark */
	uint64_t dropped;       /* at the bound */
	uint64_t tap_errors;    /* the tap refused a released frame */
	uint64_t rx_frames;     /* frames from the tap the guest took */
	bool drop_logged;
};

/* A machine on the loop with its console. Guest output is collected from the
 * vCPU threads; while gated it leaves only through repl_vm_release(). */
struct repl_vm {
	struct ev_loop *loop;
	struct machine *m;
	struct console *con;
	ev_async wake;

	pthread_mutex_t out_lock;
	uint8_t *out;           /* produced, not yet released */
	size_t out_len, out_cap;
	uint64_t produced;      /* total bytes the guest wrote */
	uint64_t released;      /* total bytes handed to the console */
	atomic_bool gated;      /* read by the vCPU threads (on_console_out) */
	int tail_holds;         /* releases an unfinished line has waited */
	/* With a witness: nothing leaves unless its lease is provably valid at
	 * the moment of release (the owner's gate, on top of output commit). */
	const struct repl_witness *witness;
	bool lease_held_back;   /* output waited for the lease (logged once) */

	atomic_bool room;
	atomic_bool stopped;
	int status;

	uint64_t epoch_mark;    /* produced at the last repl_vm_output_mark */
	atomic_bool out_new;    /* output since that mark (while gated) */

	/* The NIC's tap, read on the loop, and the frames output commit holds. */
	struct net_tap *tap;
	ev_io tap_w;
	struct repl_net_held net;

	/* The machine's power-on state (no RAM), from repl_vm_boot or
	 * repl_vm_keep_poweron: a guest's reboot starts from it
	 * (repl_vm_reboot). NULL: the guest's reboot ends the VM. */
	struct ckpt *poweron;

	/* Loop-thread callbacks of the owner. */
	void (*on_stopped)(void *ctx, int status);
	/* Gated output arrived, the first since the last epoch's mark: an
	 * output-triggered epoch may end now (primary/cycle.c). */
	void (*on_output)(void *ctx);
	void (*on_hangup)(void *ctx);
	void *cb_ctx;

	/* Its history on this host, for status (status.c). */
	uint64_t running_since_ns;      /* the guest runs here since (now_ns), 0: it does not */
	struct timespec running_since;  /* ...the same on the wall clock */
	bool took_over;                 /* a takeover resumed it here */
	uint64_t took_over_epoch;       /* ...from this epoch */
	struct timespec took_over_at;   /* ...then (wall clock) */
	double took_over_silence_ms;    /* ...after the primary was silent this long */
};

/* console may be NULL: a standby gets the console it bound at start when it
 * takes over (repl_vm_serve_console). */
int repl_vm_new(struct ev_loop *loop, const struct machine_config *cfg, const char *console,
		struct repl_vm **out) US_MUST_CHECK;
int repl_vm_open_console(struct repl_vm *v, const char *console) US_MUST_CHECK;
/* Serves con (from console_bind) as this machine's console; takes ownership. */
void repl_vm_serve_console(struct repl_vm *v, struct console *con);
/* The console back from the VM, bound but not served (console_unserve), for
 * a copy that becomes a standby; output not released is dropped. */
struct console *repl_vm_take_console(struct repl_vm *v);
/* Appends the output bytes [from, to) not yet released to out; 0 or -ENOMEM. */
int repl_vm_output_copy(struct repl_vm *v, uint64_t from, uint64_t to,
			struct proto_buf *out) US_MUST_CHECK;
void repl_vm_free(struct repl_vm *v);
/* Total output handed to the console so far. */
uint64_t repl_vm_released(struct repl_vm *v);
/* Total output produced so far (call while paused to mark an epoch's end). */
uint64_t repl_vm_output_mark(struct repl_vm *v);
/* Hands output up to the mark to the console. */
void repl_vm_release(struct repl_vm *v, uint64_t upto);
void repl_vm_set_gated(struct repl_vm *v, bool gated);
/* machine_boot, then the power-on state kept for repl_vm_reboot. */
int repl_vm_boot(struct repl_vm *v) US_MUST_CHECK;
/* For a Linux guest's machine this process did not boot (a standby, a
 * restore), fresh, before any checkpoint applies: its power-on state kept
 * for repl_vm_reboot, which loads cfg->kernel, cfg->initrd and cfg->append
 * then. Without a kernel readable here (logged once, as a warning) none is
 * kept and a reboot of the guest ends the VM; 0 then too. Other guests:
 * nothing. -errno only if the state cannot be read. */
int repl_vm_keep_poweron(struct repl_vm *v) US_MUST_CHECK;
/* The guest asked for a reset and its machine stopped: the same machine
 * boots it again as at power-on (RAM zero, the kernel, initrd and command
 * line loaded again and those pages dirty, vCPUs and devices in their
 * power-on state; the disk image and the tap as they are). The zeroed
 * pages are not marked dirty (machine_ram_clear). Returns with the machine
 * paused; on an error it is half reset and must not run or be captured.
 * -ENOTSUP: no power-on state kept. */
int repl_vm_reboot(struct repl_vm *v) US_MUST_CHECK;

/* The guest runs here from now on (a start, a restore, a takeover, a
 * switchover's new primary): status counts its uptime here from this call. */
void repl_vm_mark_running(struct repl_vm *v);
/* It does not run here any more (it became a standby). */
void repl_vm_mark_standby(struct repl_vm *v);
/* A takeover resumed it here from epoch after silence_ms of the primary's silence. */
void repl_vm_mark_took_over(struct repl_vm *v, uint64_t epoch, double silence_ms);
/* What every VM's status shows (status.c): the guest, memory, vCPUs,
 * uptime on this host, devices, and a takeover that brought it here. v may
 * be NULL (a standby not built yet), cfg then what is known of the guest
 * (guest "" when nothing is). The text appends lines to out at *n. */
void repl_vm_status_text(const struct repl_vm *v, const struct machine_config *cfg, char *out,
			 size_t len, size_t *n);
void repl_vm_status_json(const struct repl_vm *v, const struct machine_config *cfg,
			 struct json_object *o);

/* vm_net.c: the tap of a VM with a NIC (cfg->nnets), opened with the
 * machine (a standby's too: at setup, not at takeover); frames from it go
 * to the guest at once, frames from the guest are held like console output. */
int repl_vm_net_open(struct repl_vm *v) US_MUST_CHECK;
void repl_vm_net_close(struct repl_vm *v);
/* machine_ops.net_tx of the machine (vCPU thread). */
void repl_vm_net_tx(void *ctx, const uint8_t *frame, size_t len);
/* Frames produced so far (while paused: an epoch's end). */
uint64_t repl_vm_net_mark(struct repl_vm *v);
/* Frames up to mark leave through the tap, in order; epoch 0: ungated
 * (logged "netout"), else logged "netrel <epoch> <from> <to>". */
void repl_vm_net_release(struct repl_vm *v, uint64_t epoch, uint64_t mark);
/* Held frames are dropped (a copy becoming a standby). */
void repl_vm_net_forget(struct repl_vm *v);
/* The guest's NIC now sits behind this host's tap (a takeover, a restore):
 * RARP broadcasts from its MAC so that bridges and switches learn its new
 * port whatever the guest does. */
void repl_vm_net_announce(struct repl_vm *v);

/* ---- the link between primary and secondary (wire.c) ---------------------- */

/* Kinds of send cookie (each cookie struct starts with its kind). */
enum { REPL_TX_OWNED = 0x5a11, REPL_TX_EPOCH = 0xe90c };

struct owned_tx;
struct net_beat;

struct repl_link {
	struct net_conn *conn;
	struct owned_tx *owned;    /* sends whose bytes the link owns */
	struct proto_dec dec;
	uint64_t last_rx_ns;
	uint64_t up_ns;            /* the connection came up (set by the agent) */
	uint64_t bytes_sent, bytes_rcvd;
	/* Stalls of this process (repl_link_tick), all CLOCK_MONOTONIC. */
	uint64_t last_tick_ns;     /* the silence check last ran */
	uint64_t resumed_ns;       /* the last stall ended (0: none yet) */
	uint64_t stall_ns;         /* ...and lasted this long */
	struct net_beat *beat;     /* the beat side channel (beat.c), or NULL */
};

void repl_link_init(struct repl_link *l, uint32_t max_payload);
void repl_link_fini(struct repl_link *l);
/* Closes the connection (safe inside its callbacks); the decoder stays. */
void repl_link_close(struct repl_link *l);
/* Call from the closed() callback: the connection is gone. */
void repl_link_closed(struct repl_link *l);
/* Sends buf, whose bytes the link takes over (buf is left empty). */
int repl_link_send_owned(struct repl_link *l, struct proto_buf *buf) US_MUST_CHECK;
int repl_link_send_buf(struct repl_link *l, const void *data, size_t len, void *cookie) US_MUST_CHECK;
int repl_link_send_msg(struct repl_link *l, uint16_t type, const ProtobufCMessage *msg) US_MUST_CHECK;
int repl_link_send_section(struct repl_link *l, const char *name, const void *data,
			   size_t len) US_MUST_CHECK;
bool repl_link_sent_owned(void *cookie);
/* Appends a Section frame to b (epochs are framed into one buffer). */
int repl_section_pack(struct proto_buf *b, const char *name, const void *data,
		      size_t len) US_MUST_CHECK;
/* A control-socket reply (malloc'd) from a formatter writing into a buffer. */
char *repl_status_reply(int (*format)(void *ctx, const char *req, char *out, size_t len),
			void *ctx, const char *req);
int repl_link_feed(struct repl_link *l, const void *data, size_t len, proto_frame_fn fn,
		   void *ctx) US_MUST_CHECK;
/* Call first in the silence check, a timer at most a quarter of stall_ms
 * apart at the lowest priority. When this process's own loop ran late by
 * more than stall_ms (stopped, starved), the gap is not the peer's silence:
 * the silence clock restarts now, the caller skips this check (what is
 * pending is read before the next one) and the stall's length is returned;
 * else 0. */
uint64_t repl_link_tick(struct repl_link *l, unsigned stall_ms);
/* How long this process was stalled while the connection was up, if its
 * loop is late by more than stall_ms right now or a stall ended less than
 * stall_ms ago; else 0. An event seen then (a close) may be the peer
 * reacting to our stall, if the stall lasted longer than its timeout. */
uint64_t repl_link_stalled_ns(const struct repl_link *l, unsigned stall_ms);
/* ---- the beat side channel (beat.c) -----------------------------------------
 * Each agent's loop spends long stretches on its own work (a pause under CPU
 * pressure, encoding, applying an epoch), and a heartbeat on the stream is
 * only sent, and only seen, when the loop gets round to it. So each link
 * also has a beat (net/beat.h): UDP datagrams to the peer's stream port from
 * a thread of their own, stamped by the receiving thread when they arrive.
 * The primary makes a fresh key per link and sends it first thing after the
 * secondary's Hello in a REPL_BEAT_SECTION section (over TLS when the link
 * is); the secondary binds its listen address (UDP) when that arrives.
 * Silence is judged on repl_link_silent_ns(): since the last stream bytes or beat.
 * Beats of a link that closed do not count (the close folds the last one
 * into last_rx_ns), so the policies after a close are unchanged; nor do
 * they once the stream has carried nothing for REPL_BEAT_STREAM_MS (a
 * stream blackholed or wedged while UDP passes is a lost peer, later).
 * A wedged loop is not masked: beats go out only while the loop's silence
 * check (repl_link_tick) ran within REPL_BEAT_PROGRESS_MS; past that the
 * peer's timeout runs, so a hung (not stopped, not dead) agent is detected
 * within REPL_BEAT_PROGRESS_MS + the peer's timeout. A beat channel that
 * cannot be opened (UDP port taken, blocked by a firewall) is logged and
 * detection falls back to the stream alone, as before. */
#define REPL_BEAT_SECTION "beat-key"
#define REPL_BEAT_PROGRESS_MS 3000
#define REPL_BEAT_STREAM_MS 3000
/* One beat this often: the heartbeat interval, or a fifth of the peer's
 * timeout if that is shorter (a beat lost or late must not be a silence). */
unsigned repl_beat_interval_ms(unsigned heartbeat_ms, unsigned peer_timeout_ms);
/* A fresh key for a link's beats (getrandom). 0 or -errno. */
#define REPL_BEAT_KEY_BYTES 32
int repl_beat_key_new(uint8_t key[REPL_BEAT_KEY_BYTES]) US_MUST_CHECK;
/* Beats with key: the primary's to the stream's peer address, the
 * secondary's on the UDP port of bind_at ("HOST:PORT"), answered where the
 * primary's come from. Best effort: a failure is logged and leaves the
 * link without beats. */
void repl_link_beat_start(struct repl_link *l, bool primary, const void *key, size_t key_len,
			  const char *bind_at, unsigned interval_ms);
/* Stops the beats; the last one heard counts as the last bytes received. */
void repl_link_beat_stop(struct repl_link *l);
/* How long the peer has been silent: now less when it was last heard (its
 * stream bytes or its beat), read in that order and never below 0 (a beat
 * is stamped by its own thread and may be newer than a clock read before). */
uint64_t repl_link_silent_ns(const struct repl_link *l);
/* Before the peer is declared silent: whether it was heard after all, by a
 * beat waiting on the beat socket or bytes waiting on the stream's socket
 * (both sent by the peer before now, unread only because this process was
 * busy). True moves the silence clock to now. */
bool repl_link_heard_late(struct repl_link *l, uint64_t timeout_ns);

/* A side's failure detection settings, as its Hello carries them. */
struct repl_timing {
	unsigned heartbeat_ms;     /* sends something at least this often */
	unsigned timeout_ms;       /* gives the peer up after this much silence */
	unsigned epoch_ms;         /* primary only */
};
/* Heartbeat every repl_heartbeat_interval(timeout_ms); epoch_ms 0 for a secondary. */
void repl_timing_init(struct repl_timing *t, unsigned timeout_ms, unsigned epoch_ms);
/* witness_key: --witness-key or NULL; token: a secondary's standby token or NULL. */
int repl_send_hello(struct repl_link *l, Understudy__Role role, const struct machine_config *cfg,
		    const struct repl_timing *t, const char *witness_key,
		    const char *token) US_MUST_CHECK;
/* Refuses (-EINVAL, err names both) a peer that answers to another witness. */
/* The same, from a primary resuming after a switchover (Hello.resume_epoch). */
int repl_send_hello_resume(struct repl_link *l, Understudy__Role role,
			   const struct machine_config *cfg, const struct repl_timing *t,
			   const char *witness_key, const char *token,
			   uint64_t resume_epoch) US_MUST_CHECK;
int repl_check_witness(const Understudy__Hello *h, const char *mine, char *err, size_t errlen);
int repl_check_hello(const Understudy__Hello *h, Understudy__Role want, char *err, size_t errlen);
/* Reads the peer's settings from its Hello (-EPROTO if it did not say them). */
int repl_hello_timing(const Understudy__Hello *h, struct repl_timing *t, char *err,
		      size_t errlen) US_MUST_CHECK;
/* Refuses (-EINVAL, err names both values) settings under which a healthy
 * side could be taken for dead: the secondary's failover timeout must be at
 * least REPL_TIMING_MARGIN x the primary's heartbeat interval and epoch
 * interval, the primary's timeout at least as much x the secondary's
 * heartbeat interval. */
#define REPL_TIMING_MARGIN 2
int repl_check_timing(const struct repl_timing *pri, const struct repl_timing *sec, char *err,
		      size_t errlen) US_MUST_CHECK;
int repl_send_error(struct repl_link *l, int code, const char *text) US_MUST_CHECK;
/* A goodbye before a deliberate close (see Fence in proto/understudy.proto). */
int repl_send_fence(struct repl_link *l, Understudy__FenceAction action, uint64_t epoch,
		    const char *reason) US_MUST_CHECK;
/* Fence SWITCHES: epoch was the last; the old primary's standby waits at
 * listen, under token with a witness (NULL: none). */
int repl_send_switch(struct repl_link *l, uint64_t epoch, const char *listen, const char *token,
		     uint64_t released, uint64_t paused_us) US_MUST_CHECK;
#define REPL_SWITCH_REQUEST "switch-request"   /* Section S -> P: switch back to me */
/* PROTO_T_ACK (epoch) or PROTO_T_HEARTBEAT (seq). */
int repl_send_epoch_msg(struct repl_link *l, uint16_t type, uint64_t epoch) US_MUST_CHECK;

#define REPL_STATS_WINDOW 1024
struct repl_stats {
	uint64_t pause_ns[REPL_STATS_WINDOW];
	uint64_t npause;
	uint64_t epochs, acked, last_dirty_pages, dirty_pages_total, stretched;
	uint64_t bytes_sent;
	uint64_t pre_passes, pre_pages, pre_resent;   /* pre-copies; their pages; ...sent again at the pause */
	uint64_t lag_ns;          /* capture of the last acked epoch -> its ACK */
	uint64_t lag_bytes;       /* ...and what it sent after its pause */
	struct repl_hist pause_h; /* every pause (primary) or apply (secondary) */
	struct repl_hist commit_h;   /* capture -> ACK of each acked epoch (primary) */
	struct proto_page_stats pages;   /* pages of the epochs, by encoding */
};
void repl_stats_add_pause(struct repl_stats *s, uint64_t ns);
void repl_stats_pause_pct(const struct repl_stats *s, uint64_t *p50, uint64_t *p99);
/* Counts one epoch of npages pages (captured or applied). */
void repl_stats_add_epoch(struct repl_stats *s, uint64_t npages);
/* Period of an agent's heartbeat for a failure-detection timeout (seconds). */
double repl_heartbeat_interval(unsigned timeout_ms);

/* ---- failures and what they mean (fault.c) ------------------------------- */

/* Not every failure means the peer is gone: each kind has its own policy,
 * decided by the agent that owns the link (see primary/engine.c, secondary/link.c). */
enum repl_fault_kind {
	REPL_FAULT_NONE,
	REPL_FAULT_PEER_LOST,        /* connection closed, silent past the timeout */
	REPL_FAULT_PEER_PROTOCOL,    /* bad frame, unexpected message, refusal */
	REPL_FAULT_LOCAL_TRANSIENT,  /* out of memory or buffers here: may pass */
	REPL_FAULT_LOCAL_FATAL,      /* KVM or encoder failure here: will not pass */
};

struct repl_fault {
	enum repl_fault_kind kind;
	int err;                     /* -errno, or 0 */
	char what[160];              /* printable, no quotes or backslashes */
};

const char *repl_fault_kind_name(enum repl_fault_kind kind);
/* Kind of a failure of our own machine, memory or encoder. */
enum repl_fault_kind repl_fault_local(int err);
/* Kind of a failure to hand bytes to the link. */
enum repl_fault_kind repl_fault_send(int err);
/* Fills f; what is formatted like printf and made safe for JSON. */
void repl_fault_set(struct repl_fault *f, enum repl_fault_kind kind, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* "kind: what" for status, or "" when there was no failure. */
void repl_fault_reason(const struct repl_fault *f, char *out, size_t len);
/* The control request "test wedge MS" (only with UNDERSTUDY_TEST_HOOKS=1):
 * the calling loop blocks MS ms while the agent's other threads (vCPUs,
 * beats) run on: a hung, not stopped, agent. The reply (malloc'd). */
char *repl_fault_test_wedge(const char *req);
/* Tests (UNDERSTUDY_TEST_HOOKS=1 and UNDERSTUDY_TEST_STOP=where): the agent
 * says so and stops itself (SIGSTOP) at that point, for a kill there. */
void repl_fault_test_stop(const char *where);
/* The same, but only the calling thread stops there, for good (the test
 * kills the agent): the others run on, e.g. a loop that flushes an ACK. */
void repl_fault_test_hold(const char *where);

/* ---- the primary's epochs (epoch.c) ---------------------------------------- */

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

/* The primary's part of a drill the secondary runs (drill.c): a digest of
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
	struct repl_rate *rate;    /* migration: bandwidth limit (postcopy.h), or NULL */
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

/* ---- the primary's part of drills (drill.c) ------------------------------ */
/* A "drill-begin" or "drill-end" Section from the secondary (other names:
 * -EPROTO). */
int repl_drill_pri_section(struct repl_epochs *q, const Understudy__Section *sec) US_MUST_CHECK;
/* In the pause, after a capture: the RAM digest a drill asked for. */
void repl_drill_pri_capture(struct repl_epochs *q);
/* After an epoch went to the link: the digest follows it. */
void repl_drill_pri_sent(struct repl_epochs *q);
/* An ACK set st.lag_ns. */
void repl_drill_pri_acked(struct repl_epochs *q);
/* A digest of m's RAM by content: crc32c over every non-zero page as its
 * index and bytes (holes skipped unread); what the drill compares on both
 * sides. m paused, or a clone not started. */
uint32_t repl_drill_ram_crc(struct machine *m);
/* wire.c: drill messages as Sections (understudy.proto, DrillRequest;
 * proto_drill_*_decode reads them). */
#define REPL_DRILL_BEGIN "drill-begin"
#define REPL_DRILL_DIGEST "drill-digest"
#define REPL_DRILL_END "drill-end"
#define REPL_DRILL_STATS "drill-stats"
int repl_send_drill_request(struct repl_link *l, const char *name, uint64_t id) US_MUST_CHECK;
int repl_send_drill_report(struct repl_link *l, const char *name,
			   const Understudy__DrillReport *m) US_MUST_CHECK;

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
	struct repl_rate *rate;    /* migration: bandwidth limit (postcopy.h), or NULL */
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

/* ---- test mode: the standby equals the primary (verify.c) --------------- */
/* Appends the "verify" section holding d to b. */
int repl_verify_pack(struct proto_buf *b, const struct proto_verify *d) US_MUST_CHECK;
/* After applying epoch: reads m back from KVM and compares it with the
 * primary's digest; logs "VERIFY FAILED" and the parts that differ. */
bool repl_verify_standby(struct machine *m, const struct proto_verify *want, uint64_t epoch);

/* ---- test hook: output-commit events (events.c) ------------------------ */
/* With UNDERSTUDY_EVENT_LOG=FILE: appends "<CLOCK_MONOTONIC ns> <text>". */
void repl_event_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* repl_vm_release up to mark, logged as "release <epoch> <from> <to>". */
void repl_release_epoch(struct repl_vm *v, uint64_t epoch, uint64_t mark);

/* ---- connections before their Hello (candidates.c) ----------------------- */

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

void repl_candidates_init(struct repl_candidates *cs, const struct repl_candidates_ops *ops,
			  void *ctx, unsigned handshake_timeout_ms, struct repl_fault *fault);
/* Takes ownership of c: it waits for its Hello, or is closed when all
 * slots are taken by candidates that are talking and young. */
void repl_candidates_add(struct repl_candidates *cs, struct net_conn *c);
/* Closes the candidates past their deadline (see above). */
void repl_candidates_expire(struct repl_candidates *cs);
void repl_candidates_close_all(struct repl_candidates *cs, const char *why);

/* ---- the agents' engines (primary/, secondary/) ------------------------ */

/* Default of handshake_timeout_ms (both agents). */
#define REPL_HANDSHAKE_TIMEOUT_MS 5000

struct repl_primary_opts {
	struct machine_config cfg;
	const char *console;
	const char *peer;          /* HOST:PORT of the secondary */
	const char *control;       /* control socket path, or NULL */
	struct net_config net;
	unsigned epoch_ms;         /* default 25 */
	unsigned timeout_ms;       /* secondary silent this long: go unprotected */
	unsigned handshake_timeout_ms;  /* each phase before protection progresses within this */
	struct repl_witness_opts witness;   /* witness.endpoints NULL: heartbeat only */
	/* Nonzero: a migration. Once protected, the guest is handed over to
	 * the secondary at the first epoch whose predicted downtime (pause +
	 * the last epoch's capture-to-ACK time) is at most this: the final
	 * epoch is captured without resuming, the secondary takes over at
	 * once, and the engine ends with status 0 ("migrated"). */
	unsigned migrate_downtime_ms;
	/* Migration: when the predicted downtime does not fit for 8 ACKs in a
	 * row, the guest is throttled (kept paused after each capture for a
	 * share of the epoch: 20 %, then +10 % per step, at most 99 %), as
	 * QEMU's auto-converge does. */
	bool no_auto_converge;
	/* Migration: the stream before the switch at most this fast (MiB/s,
	 * 0: unlimited); post-copy after this many rounds without
	 * convergence (0: never). */
	unsigned bandwidth_mib;
	unsigned postcopy_after;
	/* Migration of a VM with a disk: its image is copied to the
	 * destination's (the sync's disk rounds, then the epochs' blocks).
	 * Images are never shared here, so a migration of a VM with a disk
	 * needs it (repl_protect_refusal). */
	bool with_disk;
	/* Nonzero: the secondary's standby already holds this epoch of the VM
	 * (it was the VM's primary until a switchover): no sync, the epochs go
	 * on from resume_epoch + 1 with every page written since the VM resumed
	 * here (the dirty log was emptied just before). */
	uint64_t resume_epoch;
	/* After a switchover, the new primary's engine: where its host listens
	 * as a standby (a "switch-request" from the standby switches back to
	 * it), and the downtime of the switch as seen here (for status). */
	const char *home_listen;
	double switch_downtime_ms;
	/* Output-triggered epochs: when the guest writes output that output
	 * commit holds, the epoch ends at once if it is at least this old (else
	 * when it is), instead of at the epoch_ms timer: a reply waits for one
	 * pause and one round trip, not for the rest of the epoch. 0: the
	 * default, REPL_MIN_EPOCH_MS; >= epoch_ms: timer only. */
	unsigned min_epoch_ms;
	struct repl_ops ops;       /* metrics and event hooks of the agent (may be empty) */
};
#define REPL_MIN_EPOCH_MS 2

struct repl_secondary_opts {
	const char *listen;        /* HOST:PORT */
	const char *console;       /* bound at start, served after takeover */
	const char *control;
	struct net_config net;
	unsigned timeout_ms;       /* primary silent this long: take over */
	unsigned handshake_timeout_ms;  /* a connection must say Hello within this */
	struct machine_config pin; /* if pin.guest[0]: refuse any other config */
	/* The standby's own image of the VM's disk (opened, sized and emptied
	 * when a standby is built; NULL: a VM with a disk is refused), and
	 * --disk-sync ack: an epoch's blocks are durable before its ACK. */
	const char *disk;
	bool disk_sync_ack;
	bool manual_takeover;      /* take over only on the control request "takeover" */
	const char *fence_cmd;     /* run before a takeover; must exit 0 (fence.h), or NULL */
	unsigned fence_timeout_ms; /* ...within this */
	unsigned fence_retries;    /* ...run again at most this often after a failure (fence.h) */
	struct repl_witness_opts witness;   /* witness.endpoints NULL: heartbeat only */
	struct repl_ops ops;       /* metrics and event hooks of the agent (may be empty) */
};

/* Fencing without a witness: failure detection by heartbeat, with goodbyes
 * and the stall check. Safe against crashes and stopped or starved
 * processes, not against a partition between two live hosts. Said at start
 * and in status; with --witness the lease fences (witness.c). */
#define REPL_FENCING "none (heartbeat only: a partition can leave two live copies)"
#define REPL_FENCING_WITNESS "witness lease on etcd"

/* The exit status of a primary that must not come back as primary: the
 * secondary took over from it, it stopped so that the secondary takes
 * over (a local fatal failure, a stall it may have been replaced in), or
 * its witness lease lapsed (fenced; it exits on the next signal). A host
 * (run, restore) whose attached engine ends so exits with it too. Apart
 * from 0 (the guest powered off, or migrated away), 1 (errors) and 2 (bad
 * options); a guest that powers off with status 3 is not told apart.
 * contrib/systemd/understudy-primary@.service: RestartPreventExitStatus=. */
#define REPL_EXIT_REPLACED 3
/* A primary that refused to start because the witness vouches for a
 * standby (K/standby names it): that standby may hold the only up-to-date
 * copy and must take over first (understudy takeover on it). Restarting
 * cannot help: the unit's RestartPreventExitStatus= names it too. */
#define REPL_EXIT_STANDBY_VOUCHED 4

/* The protection of a VM that already runs on a host agent's loop (`run`,
 * `restore`, a secondary that took over): `understudy protect`. The engine
 * is the one repl_primary_run uses, from the initial sync on; the host keeps
 * the VM, its console, control socket, signals and witness. */
struct repl_primary;
struct repl_primary_host {
	/* The engine is done: the guest stopped (status: its exit status, its
	 * last epoch committed) or it was replaced (REPL_EXIT_REPLACED). Not called when
	 * the secondary is lost: the engine then runs the VM unprotected and
	 * may be detached and replaced by a new one. */
	void (*ended)(void *ctx, int status);
	void *ctx;
};
/* "unprotected", "protected", ...: the engine's state. */
const char *repl_primary_state(const struct repl_primary *p);
/* The status reply of the engine (as `understudy status` shows it). */
char *repl_primary_status_text(void *p, const char *req);

/* ---- planned switchover ------------------------------------------------------ */

/* What a primary that switched over hands to the standby it becomes: both
 * copies hold `epoch`; the new primary protects the guest onto `listen`. */
struct repl_switch {
	uint64_t epoch;
	char listen[128];
	double downtime_ms;        /* the guest's pause here -> the new primary's word */
	uint64_t bytes_sent;       /* by this side since protection began */
	struct net_config net;     /* the link options, strings in str[] */
	char str[5][512];
	unsigned timeout_ms, handshake_timeout_ms;
	/* With a witness: its settings, and (from repl_primary_run_switch only)
	 * the engine's witness, resigned and still running, for the standby
	 * this process becomes (secondary_adopt takes it over). */
	struct repl_witness_opts witness;
	struct repl_witness *wit;
	char token[REPL_WITNESS_ID_MAX];   /* the standby's witness token ("": a new one) */
	char disk[256];            /* the VM's image ("": none), the standby's --disk */
};

#endif
