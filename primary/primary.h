/* primary: the protection engine. It runs a VM's epochs onto a secondary
 * (output held until each epoch is acknowledged), attached to a VM a host
 * runs (`understudy primary`, `understudy protect`, a standby that took
 * over); it migrates and switches over. What host/ calls; the engine's
 * files share primary_int.h. */
#ifndef US_PRIMARY_H
#define US_PRIMARY_H

#include "replication/replication.h"

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

/* Copies o (and its strings); o->cfg and o->console are not used. wit: the
 * host's witness (it must own the key) or NULL. The VM's output is gated from
 * now on, and its on_stopped goes to the engine until detach. */
int repl_primary_attach(struct ev_loop *loop, struct repl_vm *vm, struct repl_witness *wit,
			const struct repl_primary_opts *o, const struct repl_primary_host *host,
			struct repl_primary **out) US_MUST_CHECK;
/* A signal asks the VM to stop: the guest stops through the engine (its
 * last epoch committed, the secondary told not to take over; unprotected,
 * it just ends), a fenced engine ends (REPL_EXIT_REPLACED), a hand-over in
 * progress waits for its outcome. The host hears of the end (host->ended). */
void repl_primary_stop(struct repl_primary *p);
/* With o->endpoints: the witness key taken for a primary about to run its
 * guest (*out, renewing), before the VM boots; -EBUSY when the witness
 * vouches for a standby (REPL_EXIT_STANDBY_VOUCHED), other -errno when it
 * cannot be had. Without: 0 and *out NULL. */
int repl_primary_witness_take(struct ev_loop *loop, const struct repl_witness_opts *o,
			      struct repl_witness **out) US_MUST_CHECK;
/* Frees the engine (says goodbye to a secondary still there); the VM stays
 * the host's, with its on_stopped as before the attach; output held for
 * epochs not acknowledged stays held (fenced: the VM stays paused). */
void repl_primary_detach(struct repl_primary *p);
/* Stops a protection or migration not yet handing over: the secondary is
 * told to stand down, the VM runs on unprotected. */
void repl_primary_cancel(struct repl_primary *p);
/* "takeover" to an engine whose migration is in doubt (the link failed
 * after the hand-over left; the guest is paused): the operator made sure
 * the destination does not run the guest, so it resumes here unprotected.
 * The reply (malloc'd); NULL when the engine is not in doubt. */
char *repl_primary_resume_request(struct repl_primary *p);
/* A control request "migrate PEER ..." to the engine protecting the VM: the
 * hand-over to PEER if it is this engine's own secondary, else refused
 * (the caller drops the secondary first: "cancel"). The reply, malloc'd. */
char *repl_primary_migrate_request(struct repl_primary *p, const char *req);
/* True when a new engine may replace this one: it runs the VM unprotected,
 * its old secondary has been told goodbye and (witness) withdrawn. A
 * migrated, fenced or finished engine is never replaced. */
bool repl_primary_replaceable(const struct repl_primary *p);
/* True from the attach until protection ends (given up, fenced, done). */
bool repl_primary_protecting(const struct repl_primary *p);
/* True when the witness must keep vouching for the standby at the end (it
 * takes over, or the engine was fenced). */
bool repl_primary_keeps_standby(const struct repl_primary *p);
/* A control request "protect PEER [key=value ...]" (what `understudy
 * protect` sends: epoch-ms, timeout-ms, handshake-timeout-ms, insecure,
 * transport, tls-cert, tls-key, tls-ca, tls-peer-name) or "migrate PEER
 * [downtime-ms=N] [...]" (o->migrate_downtime_ms, 30 by default) into o; 0
 * or -EINVAL with err saying why. The strings of o point into req, which
 * must stay. */
int repl_protect_parse(char *req, struct repl_primary_opts *o, char *err, size_t errlen) US_MUST_CHECK;
/* Why the engine o describes cannot take the VM on machine m (a migration
 * of a VM with a disk without with-disk, or with post-copy), or NULL. The
 * text starts with "usage: " (the operator's request is what is wrong). */
const char *repl_protect_refusal(const struct repl_primary_opts *o, const struct machine *m);

/* The control request "switchover listen=HOST:PORT" -> reply (malloc'd). */
char *repl_switchover_request(struct repl_primary *p, const char *req);
/* True (and *sw filled) when the engine ended by a switchover: the VM is
 * paused at sw->epoch and must become a standby (secondary_new). */
bool repl_primary_switched(const struct repl_primary *p, struct repl_switch *sw);
/* The secondary options of the standby a switched primary becomes. */
void repl_switch_secondary_opts(const struct repl_switch *sw, const char *control,
				struct repl_secondary_opts *o);

/* status.c */
/* "unprotected", "protected", ...: the engine's state. */
const char *repl_primary_state(const struct repl_primary *p);
/* Why the engine ended, for the host's last word: "migrated", the last
 * failure, or "the guest stopped". */
const char *repl_primary_end_reason(const struct repl_primary *p);
/* The status reply of the engine (as `understudy status` shows it). */
char *repl_primary_status_text(void *p, const char *req);

#endif
