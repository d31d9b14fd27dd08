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

#include "machine/machine.h"
#include "net/console.h"
#include "net/net.h"
#include "proto/proto.h"

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
	bool gated;
	int tail_holds;         /* releases an unfinished line has waited */

	atomic_bool room;
	atomic_bool stopped;
	int status;

	/* Loop-thread callbacks of the owner. */
	void (*on_stopped)(void *ctx, int status);
	void (*on_hangup)(void *ctx);
	void *cb_ctx;
};

/* console may be NULL: a standby opens its console when it takes over. */
int repl_vm_new(struct ev_loop *loop, const struct machine_config *cfg, const char *console,
		struct repl_vm **out) US_MUST_CHECK;
int repl_vm_open_console(struct repl_vm *v, const char *console) US_MUST_CHECK;
/* Appends the output bytes [from, to) not yet released to out; 0 or -ENOMEM. */
int repl_vm_output_copy(struct repl_vm *v, uint64_t from, uint64_t to,
			struct proto_buf *out) US_MUST_CHECK;
void repl_vm_free(struct repl_vm *v);
/* Total output produced so far (call while paused to mark an epoch's end). */
uint64_t repl_vm_output_mark(struct repl_vm *v);
/* Hands output up to the mark to the console. */
void repl_vm_release(struct repl_vm *v, uint64_t upto);
void repl_vm_set_gated(struct repl_vm *v, bool gated);

/* ---- the link between primary and secondary (wire.c) ---------------------- */

/* Kinds of send cookie (each cookie struct starts with its kind). */
enum { REPL_TX_OWNED = 0x5a11, REPL_TX_EPOCH = 0xe90c };

struct owned_tx;

struct repl_link {
	struct net_conn *conn;
	struct owned_tx *owned;    /* sends whose bytes the link owns */
	struct proto_dec dec;
	uint64_t last_rx_ns;
	uint64_t bytes_sent, bytes_rcvd;
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
int repl_send_hello(struct repl_link *l, Understudy__Role role,
		    const struct machine_config *cfg) US_MUST_CHECK;
int repl_check_hello(const Understudy__Hello *h, Understudy__Role want, char *err, size_t errlen);
int repl_send_error(struct repl_link *l, int code, const char *text) US_MUST_CHECK;
/* PROTO_T_ACK (epoch) or PROTO_T_HEARTBEAT (seq). */
int repl_send_epoch_msg(struct repl_link *l, uint16_t type, uint64_t epoch) US_MUST_CHECK;
int repl_config_encode(const struct machine_config *cfg, char *buf, size_t len);
int repl_config_decode(const void *data, size_t len, struct machine_config *cfg) US_MUST_CHECK;

#define REPL_STATS_WINDOW 1024
struct repl_stats {
	uint64_t pause_ns[REPL_STATS_WINDOW];
	uint64_t npause;
	uint64_t epochs, acked, last_dirty_pages, dirty_pages_total, stretched;
	uint64_t bytes_sent;
	uint64_t lag_ns;          /* capture of the last acked epoch -> its ACK */
};
void repl_stats_add_pause(struct repl_stats *s, uint64_t ns);
void repl_stats_pause_pct(const struct repl_stats *s, uint64_t *p50, uint64_t *p99);

/* ---- test mode: the standby equals the primary (verify.c) -- issue 13 ---- */
struct ckpt_digest;
/* Appends the "verify" section holding d to b. */
int repl_verify_pack(struct proto_buf *b, const struct ckpt_digest *d) US_MUST_CHECK;
/* After applying epoch: reads m back from KVM and compares it with the
 * primary's digest; logs "VERIFY FAILED" and the parts that differ. */
bool repl_verify_standby(struct machine *m, const struct ckpt_digest *want, uint64_t epoch);

/* ---- test hook: output-commit events (events.c) -- issue 13 ------------- */
/* With UNDERSTUDY_EVENT_LOG=FILE: appends "<CLOCK_MONOTONIC ns> <text>". */
void repl_event_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* repl_vm_release up to mark, logged as "release <epoch> <from> <to>". */
void repl_release_epoch(struct repl_vm *v, uint64_t epoch, uint64_t mark);

/* ---- the agents' engines (primary.c, secondary.c) ------------------------ */

struct repl_primary_opts {
	struct machine_config cfg;
	const char *console;
	const char *peer;          /* HOST:PORT of the secondary */
	const char *control;       /* control socket path, or NULL */
	struct net_config net;
	unsigned epoch_ms;         /* default 25 */
	unsigned timeout_ms;       /* secondary silent this long: go unprotected */
};

struct repl_secondary_opts {
	const char *listen;        /* HOST:PORT */
	const char *console;       /* served after takeover */
	const char *control;
	struct net_config net;
	unsigned timeout_ms;       /* primary silent this long: take over */
	struct machine_config pin; /* if pin.guest[0]: refuse any other config */
};

/* Run until the guest powers off or a signal; return the exit status. */
int repl_primary_run(const struct repl_primary_opts *o);
int repl_secondary_run(const struct repl_secondary_opts *o);

#endif
