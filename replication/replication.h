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
#include <stdlib.h>

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
/* For the engines' status: what it shows of the last failure and of the
 * fencing; the text has one field a line, so a reason's control characters
 * (a peer's text may hold any) become spaces there (s changed in place;
 * JSON carries the reason as it is); lines appended at *n, cut past len
 * (still terminated). */
struct repl_status_words {
	char reason[200];
	char fencing[200];
};
const char *repl_status_one_line(char *s);
void repl_status_add(char *out, size_t len, size_t *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* vm_net.c: the tap of a VM with a NIC (cfg->nnets), opened with the
 * machine (a standby's too: at setup, not at takeover); frames from it go
 * to the guest at once, frames from the guest are held like console output. */
/* Frames produced so far (while paused: an epoch's end). */
uint64_t repl_vm_net_mark(struct repl_vm *v);
/* Frames up to mark leave through the tap, in order; epoch 0: ungated
 * (logged "netout"), else logged "netrel <epoch> <from> <to>". */
void repl_vm_net_release(struct repl_vm *v, uint64_t epoch, uint64_t mark);
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
/* The key of a link's beats (the primary's getrandom). */
#define REPL_BEAT_KEY_BYTES 32
/* Beats with key: the primary's to the stream's peer address, the
 * secondary's on the UDP port of bind_at ("HOST:PORT"), answered where the
 * primary's come from. Best effort: a failure is logged and leaves the
 * link without beats. */
void repl_link_beat_start(struct repl_link *l, bool primary, const void *key, size_t key_len,
			  const char *bind_at, unsigned interval_ms);
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
/* witness_key: --witness-key or NULL; token: a secondary's standby token or
 * NULL; vm_name: the VM's name or NULL (Hello.vm_name). */
int repl_send_hello(struct repl_link *l, Understudy__Role role, const struct machine_config *cfg,
		    const struct repl_timing *t, const char *witness_key,
		    const char *token, const char *vm_name) US_MUST_CHECK;
/* The same, from a primary resuming after a switchover (Hello.resume_epoch). */
int repl_send_hello_resume(struct repl_link *l, Understudy__Role role,
			   const struct machine_config *cfg, const struct repl_timing *t,
			   const char *witness_key, const char *token,
			   uint64_t resume_epoch, const char *vm_name) US_MUST_CHECK;
/* Refuses (-EINVAL, err names both) a peer that answers to another witness. */
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

/* ---- post-copy: what both sides compute (primary/postcopy_src.c,
 * secondary/postcopy_dst.c) ------------------------------------------------ */

/* One page's share of a RAM digest (test mode): a sum, so that the order in
 * which pages are counted does not matter. */
static inline uint64_t repl_pc_page_sum(uint64_t gfn, const void *data)
{
	uint64_t crc = proto_digest_page(0, gfn, data);

	return ((crc << 32) | (gfn & 0xffffffffu)) * 0x9e3779b97f4a7c15ull;
}

static inline bool repl_bm_test(const uint64_t *bm, uint64_t i)
{
	return bm[i / 64] >> (i % 64) & 1;
}

static inline void repl_bm_set(uint64_t *bm, uint64_t i)
{
	bm[i / 64] |= 1ull << (i % 64);
}

/* ---- drills: what both halves compute (drill.c) --------------------------- */
/* A digest of m's RAM by content: crc32c over every non-zero page as its
 * index and bytes (holes skipped unread); what the drill compares on both
 * sides. m paused, or a clone not started. */
uint32_t repl_drill_ram_crc(struct machine *m);
/* p50, p99 and max of the pauses numbered [from, to) of st (counting from the
 * first), or false when the ring no longer holds them all. */
bool repl_drill_pauses_range(const struct repl_stats *st, uint64_t from, uint64_t to, uint64_t *p50,
			     uint64_t *p99, uint64_t *max);
/* Drill messages as Sections (understudy.proto, DrillRequest and
 * DrillReport; proto_drill_* packs and reads them). */
#define REPL_DRILL_BEGIN "drill-begin"
#define REPL_DRILL_DIGEST "drill-digest"
#define REPL_DRILL_END "drill-end"
#define REPL_DRILL_STATS "drill-stats"

/* ---- test hook: output-commit events (events.c) ------------------------ */
/* With UNDERSTUDY_EVENT_LOG=FILE: appends "<CLOCK_MONOTONIC ns> <text>".
 * The epoch's own events (capture, ack, release) test repl_event_log_on()
 * in line first, so that without the variable they do not enter events.c. */
void repl_event_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline bool repl_event_log_on(void)
{
	const char *path = getenv("UNDERSTUDY_EVENT_LOG");

	return path && *path;
}
/* repl_vm_release up to mark, logged as "release <epoch> <from> <to>". */
void repl_release_epoch(struct repl_vm *v, uint64_t epoch, uint64_t mark);

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

/* The protection engine on a VM a host runs (`understudy primary`, and
 * `understudy protect` on `run`, `restore`, a secondary that took over):
 * the host keeps the VM, its console, control socket, signals and
 * witness. */
struct repl_primary;
struct repl_primary_host {
	/* The engine is done: the guest stopped (status: its exit status, its
	 * last epoch committed) or it was replaced (REPL_EXIT_REPLACED,
	 * primary/primary.h). Not called when the secondary is lost: the engine
	 * then runs the VM unprotected and may be detached and replaced by a
	 * new one. */
	void (*ended)(void *ctx, int status);
	void *ctx;
	/* The VM runs for this engine (`understudy primary`'s --peer): a
	 * secondary never reached (before its Hello) ends it, exit 1, where
	 * an engine attached by `protect` leaves the VM running unprotected. */
	bool owned;
};

/* ---- planned switchover ------------------------------------------------------ */

/* What a primary that switched over hands to the standby it becomes: both
 * copies hold `epoch`; the new primary protects the guest onto `listen`. */
struct repl_switch {
	uint64_t epoch;
	char listen[128];
	double downtime_ms;        /* the guest's pause here -> the new primary's word */
	uint64_t bytes_sent;       /* by this side since protection began */
	/* The link options. Its strings are in str[] (cert, key, ca,
	 * peer_name, rdma_provider; "": not given) and NULL in net, so that a
	 * copy of this struct holds up alone: repl_switch_secondary_opts
	 * points the standby's options at the str[] of the copy it is given. */
	struct net_config net;
	char str[5][512];
	unsigned timeout_ms, handshake_timeout_ms;
	/* With a witness: its settings, and the host's witness (resigned and
	 * still running) for the standby this process becomes (secondary_new
	 * takes it over); the host fills them in. */
	struct repl_witness_opts witness;
	struct repl_witness *wit;
	char token[REPL_WITNESS_ID_MAX];   /* the standby's witness token ("": a new one) */
	char disk[256];            /* the VM's image ("": none), the standby's --disk */
};

#endif
