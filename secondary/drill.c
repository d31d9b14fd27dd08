/* Test-failover drills: start an isolated clone of the standby at one
 * complete checkpoint while production runs on and stays protected.
 *
 *   idle -> asked -> running -> probing -> ending -> done
 *
 * asked: the secondary sent "drill-begin"; the primary digests its RAM at
 * its next capture (epoch E) and sends "drill-digest" right after epoch E on
 * the link, so the secondary reads it with exactly E applied to the standby
 * and E+1 not begun (applying is synchronous on this loop).
 * The clone's VM is built at the request, as a standby is built before it
 * is needed: its own KVM VM in this process, its RAM a MAP_PRIVATE mapping
 * of the standby's memfd (machine_new_clone), vCPUs parked, its console
 * captured into a buffer (nothing outside hears it, it has no network).
 * Until activation nothing of it is private, so it follows the standby.
 * running: at the digest's arrival the clone is activated there and then:
 * its RAM digested (as it is: the standby at E), its vCPU, irqchip, timer,
 * clock and UART state read from the standby (which holds E) and set, its
 * vCPUs resumed. Activation time, from the digest's arrival to the clone's
 * vCPUs running (less the digest, which a takeover does not compute), is
 * the RTO this drill measures: a takeover's resume plus the state copy a
 * standby gets with each epoch; the VM's build is reported apart.
 *
 * Why the clone's view stays at E while the standby applies E+1, E+2...:
 * a MAP_PRIVATE page the clone has not written yet still shows the file,
 * so later writes to the memfd would reach it. Staging writes the standby
 * only in ckpt_apply, on this thread; before each apply
 * (repl_drill_before_apply) every page the epoch writes is touched through
 * the clone's mapping with an atomic OR of 0: that write fault gives the
 * clone its private copy of the page as it is at E (the atomic RMW cannot
 * lose a byte the clone's guest writes meanwhile), and only then does the
 * standby change. KVM follows: the fault replaces the clone's PTE and
 * KVM's MMU notifier drops its old mapping. Cost: one page fault and one
 * page of memory per page production dirties during the drill, on the
 * secondary only; nothing on the primary waits for it. The memory the
 * drill used is the clone mapping's Private_Dirty in /proc/self/smaps.
 *
 * probing: counter: "get" must answer the last reply of the committed
 * output (the output of applied epochs, tracked here); stress: "check"
 * must answer "ok ..."; external: the CLI runs --probe CMD and relays the
 * console (drill console-in/out) until it says probe-done.
 * ending: "drill-end" asks the primary for its pause and lag figures since
 * drill-begin ("drill-stats"); then the report (drill_report.c). */
#include "secondary/drill.h"
#include "secondary/drill_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"

#define TAG "drill"
#define ASK_TIMEOUT_NS (10ull * 1000000000ull)
#define PROBE_TIMEOUT_NS (20ull * 1000000000ull)
#define EXTERNAL_PROBE_TIMEOUT_NS (120ull * 1000000000ull)
#define END_TIMEOUT_NS (5ull * 1000000000ull)

/* A DrillRequest to the primary as the Section name (understudy.proto). */
static int send_request(struct repl_link *l, const char *name, uint64_t id)
{
	uint8_t buf[32];
	int n = proto_drill_request_encode(id, buf, sizeof(buf));

	return n < 0 ? n : repl_link_send_section(l, name, buf, (size_t)n);
}

/* ---- the committed output (what a takeover would have replayed up to) ---- */

/* Every applied epoch's output, line by line: the last complete line and the
 * unfinished one after it. */
void repl_drill_applied(struct repl_secondary *s)
{
	struct repl_drill *d = s->drill;
	const struct proto_buf *out = &s->stage.out;

	if (!d && !(d = s->drill = calloc(1, sizeof(*d))))
		return;                         /* no drill can run then: request says so */
	if (s->stage.applied == 1) {            /* a new standby: the old output is not its */
		d->tail_len = 0;
		d->have_line = false;
	}
	for (size_t i = 0; i < out->len; i++) {
		char c = (char)out->data[i];

		if (c == '\r')
			continue;
		if (c == '\n') {
			d->tail[d->tail_len] = 0;
			memcpy(d->last_line, d->tail, d->tail_len + 1);
			d->have_line = true;
			d->tail_len = 0;
		} else if (d->tail_len + 1 < sizeof(d->tail)) {
			d->tail[d->tail_len++] = c;
		}
	}
	d->tail[d->tail_len] = 0;
}

/* ---- the clone -------------------------------------------------------------------- */

static void clone_out(void *ctx, const uint8_t *buf, size_t len)
{
	struct drill_run *r = ctx;

	pthread_mutex_lock(&r->out_lock);
	r->out_total += len;
	if (r->out_len + len > DRILL_OUT_MAX)
		len = DRILL_OUT_MAX - r->out_len;      /* the rest is counted, not kept */
	memcpy(r->out + r->out_len, buf, len);
	r->out_len += len;
	pthread_mutex_unlock(&r->out_lock);
}

static void clone_stopped(void *ctx, int status)
{
	struct drill_run *r = ctx;

	r->clone_status = status;
	atomic_store(&r->clone_stopped, true);
}

void repl_drill_before_apply(struct repl_secondary *s, bool all)
{
	struct drill_run *r = s->drill ? &s->drill->run : NULL;
	const struct ckpt *c = &s->stage.stage;

	uint64_t t0 = now_ns(), dt;

	if (!r || !r->clone || !r->active)
		return;                  /* until activation the clone is meant to follow */
	for (uint64_t pg = 0; all && pg < r->clone->ram_pages; pg++) {
		__atomic_fetch_or((uint8_t *)machine_page_hva(r->clone, pg), 0, __ATOMIC_SEQ_CST);
		r->preserved++;
	}
	for (size_t i = 0; !all && i < c->npages; i++) {
		int64_t pg = machine_gfn_page(r->clone, c->gfns[i]);

		if (pg < 0)
			continue;              /* ckpt_apply refuses the epoch: nothing written */
		__atomic_fetch_or((uint8_t *)machine_page_hva(r->clone, (uint64_t)pg), 0,
				  __ATOMIC_SEQ_CST);
		r->preserved++;
	}
	dt = now_ns() - t0;         /* the ACK waits for this too */
	r->preserve_ns += dt;
	r->preserve_epochs++;
	if (dt > r->preserve_max_ns)
		r->preserve_max_ns = dt;
}

/* vCPU, irqchip, timer, clock and UART state from the standby, in
 * ckpt_apply's order: VM and devices, then vCPUs, then post-load. */
static int clone_set_state(struct machine *from, struct machine *to)
{
	struct ckpt_image *img = malloc(sizeof(*img));
	int r;

	if (!img)
		return -ENOMEM;
	if ((r = ckpt_image_read(from, img)) < 0 || (r = machine_set_state(to, &img->ms)) < 0)
		goto out;
	for (int i = 0; i < to->ncpus; i++)
		if ((r = machine_set_vcpu_state(to, i, &img->vcpus[i])) < 0)
			goto out;
	r = ckpt_state_post_load(to, img);
out:
	free(img);
	return r;
}

static void activate(struct repl_secondary *s, const Understudy__DrillReport *rep)
{
	struct repl_drill *d = s->drill;
	struct drill_run *r = &d->run;
	uint64_t t0 = now_ns(), t1;
	int e;

	r->active = true;        /* from here on the standby's writes leave the clone alone */
	r->apply_npause0 = s->stage.st.npause;
	r->primary = *rep;
	r->have_digest = true;
	r->epoch_start = s->stage.applied;
	r->held_bytes = s->stage.held.len;
	memcpy(r->committed_tail, d->tail, sizeof(d->tail));
	memcpy(r->committed_line, d->last_line, sizeof(d->last_line));
	r->have_committed_line = d->have_line;
	t1 = now_ns();
	r->clone_crc = repl_drill_ram_crc(r->clone);
	r->digest_ns = now_ns() - t1;
	if ((e = clone_set_state(s->vm->m, r->clone)) < 0) {
		drill_fail(r, "cannot set the clone's state: %s", strerror(-e));
		drill_stop_clone(r);
		drill_finish(s);
		return;
	}
	machine_resume(r->clone);
	r->t_active_ns = now_ns();
	if (r->clone_crc != rep->mem_crc32c)
		drill_fail(r, "digest mismatch: the clone's RAM %08x, the primary's %08x at epoch %llu",
			   r->clone_crc, rep->mem_crc32c, (unsigned long long)r->epoch_start);
	r->rto_ns = r->t_active_ns - t0 - r->digest_ns;
	r->state = DRILL_RUNNING;
	log_info(TAG, "epoch %llu: clone running (activation %.3f ms; digest %08x, the primary's "
		 "%08x)", (unsigned long long)r->epoch_start, r->rto_ns / 1e6, r->clone_crc,
		 rep->mem_crc32c);
}

/* ---- the probe ----------------------------------------------------------------- */

static void send_probe(struct drill_run *r, const char *line)
{
	pthread_mutex_lock(&r->out_lock);
	r->probe_from = r->out_len;
	pthread_mutex_unlock(&r->out_lock);
	snprintf(r->probe_sent, sizeof(r->probe_sent), "%s", line);
	if (machine_console_input(r->clone, (const uint8_t *)line, strlen(line)) != strlen(line))
		log_warn(TAG, "the clone's console took only part of the probe");
	r->t_probe_ns = now_ns();
}

static void start_probe(struct repl_secondary *s)
{
	struct drill_run *r = &s->drill->run;

	r->state = DRILL_PROBING;
	r->t_probe_ns = now_ns();
	if (r->external)
		return;                  /* the CLI runs the command now */
	if (!strcmp(s->cfg.guest, "counter")) {
		send_probe(r, "get\n");
	} else if (!strcmp(s->cfg.guest, "stress")) {
		send_probe(r, "check\n");
	} else {
		snprintf(r->probe, sizeof(r->probe), "none: no built-in probe for guest %s (use --probe)",
			 s->cfg.guest);
		r->probe_done = r->probe_ok = true;
	}
}

static void probe_check(struct repl_secondary *s)
{
	struct drill_run *r = &s->drill->run;
	char *lines;
	int done;

	if (r->external || r->probe_done)
		return;
	pthread_mutex_lock(&r->out_lock);
	lines = strndup(r->out, r->out_len);
	pthread_mutex_unlock(&r->out_lock);
	if (!lines)
		return;
	done = drill_probe_judge(r, s->cfg.guest, lines);
	free(lines);
	if (done)
		r->probe_done = true;
	else if (now_ns() - r->t_probe_ns > PROBE_TIMEOUT_NS)
		drill_fail(r, "probe: no answer to %.*s within %llu s", (int)strcspn(r->probe_sent, "\n"),
			   r->probe_sent, PROBE_TIMEOUT_NS / 1000000000ull);
}

/* ---- the run ------------------------------------------------------------------- */

void drill_stop_clone(struct drill_run *r)
{
	if (!r->clone)
		return;
	drill_measure_memory(r);
	machine_stop(r->clone, 0);
	machine_pause(r->clone);
	machine_free(r->clone);
	r->clone = NULL;
	r->t_stopped_ns = now_ns();
}

/* This side's cost: the time to apply an epoch (which the ACK waits for)
 * while the clone ran, beside as many applies right before it. */
static void apply_figures(struct repl_secondary *s, struct drill_run *r)
{
	const struct repl_stats *st = &s->stage.st;
	uint64_t n = st->npause - r->apply_npause0;
	uint64_t nb = n < r->apply_npause0 ? n : r->apply_npause0;   /* as many before, if held */

	if (!r->active || !n || !nb)
		return;
	r->apply_known = repl_drill_pauses_range(st, r->apply_npause0, st->npause, &r->apply_during[0],
				      &r->apply_during[1], &r->apply_during[2]) &&
			 repl_drill_pauses_range(st, r->apply_npause0 - nb, r->apply_npause0, &r->apply_before[0],
				      &r->apply_before[1], &r->apply_before[2]);
}

void drill_finish(struct repl_secondary *s)
{
	struct drill_run *r = &s->drill->run;

	drill_stop_clone(r);
	ev_timer_stop(s->loop, &s->drill->tick_w);
	r->epoch_end = s->stage.applied;
	apply_figures(s, r);
	clock_gettime(CLOCK_REALTIME, &r->wall_end);
	r->state = DRILL_DONE;
	drill_report_build(s);
	log_info(TAG, "drill %llu: %s%s%s", (unsigned long long)r->id, r->failed ? "FAIL" : "PASS",
		 r->failed ? ": " : "", r->failed ? r->reason : "");
}

/* The clone is done with: ask the primary for its figures, then report. */
static void end_run(struct repl_secondary *s)
{
	struct drill_run *r = &s->drill->run;

	drill_stop_clone(r);
	r->state = DRILL_ENDING;
	r->t_end_asked_ns = now_ns();
	if (!s->link.conn || send_request(&s->link, REPL_DRILL_END, r->id) < 0)
		drill_finish(s);
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct repl_secondary *s = w->data;
	struct drill_run *r = &s->drill->run;
	uint64_t now = now_ns();

	(void)loop;
	(void)revents;
	if (r->state >= DRILL_ASKED && r->state <= DRILL_PROBING &&
	    (s->state != S_STANDBY || !s->link.conn)) {
		drill_fail(r, "production changed during the drill: this secondary is %s%s",
			   repl_sec_state_name(s), s->link.conn ? "" : " without a primary");
		drill_finish(s);
		return;
	}
	switch (r->state) {
	case DRILL_ASKED:
		if (now - r->t_asked_ns > ASK_TIMEOUT_NS) {
			drill_fail(r, "the primary sent no digest within %llu s",
				   ASK_TIMEOUT_NS / 1000000000ull);
			drill_finish(s);
		}
		return;
	case DRILL_RUNNING:
		if (atomic_load(&r->clone_stopped)) {
			drill_fail(r, "the clone stopped (status %d) after %.1f s", r->clone_status,
				   (now - r->t_active_ns) / 1e9);
			end_run(s);
		} else if (now - r->t_active_ns >= (uint64_t)r->seconds * 1000000000ull) {
			start_probe(s);
		}
		return;
	case DRILL_PROBING:
		probe_check(s);
		if (r->probe_done || r->failed)
			end_run(s);
		else if (r->external && now - r->t_probe_ns > EXTERNAL_PROBE_TIMEOUT_NS) {
			drill_fail(r, "the probe command gave no outcome within %llu s",
				   EXTERNAL_PROBE_TIMEOUT_NS / 1000000000ull);
			end_run(s);
		}
		return;
	case DRILL_ENDING:
		if (now - r->t_end_asked_ns > END_TIMEOUT_NS)
			drill_finish(s);       /* reported without the primary's figures */
		return;
	default:
		return;
	}
}

int repl_drill_section(struct repl_secondary *s, const Understudy__Section *sec)
{
	struct drill_run *r = s->drill ? &s->drill->run : NULL;
	Understudy__DrillReport rep;
	int e;

	if (strcmp(sec->name, REPL_DRILL_DIGEST) && strcmp(sec->name, REPL_DRILL_STATS))
		return -EPROTO;
	if ((e = proto_drill_report_decode(sec->data.data, sec->data.len, &rep)) < 0)
		return e;
	if (!r || rep.id != r->id)
		return 0;                        /* a drill given up on: ignored */
	if (!strcmp(sec->name, REPL_DRILL_STATS)) {
		if (r->state == DRILL_ENDING) {
			r->stats = rep;
			r->have_stats = true;
			drill_finish(s);
		}
		return 0;
	}
	if (r->state != DRILL_ASKED)
		return 0;
	if (rep.epoch != s->stage.applied || s->stage.in_epoch) {
		drill_fail(r, "the primary's digest is of epoch %llu, the standby holds %llu",
			   (unsigned long long)rep.epoch, (unsigned long long)s->stage.applied);
		drill_finish(s);
		return 0;
	}
	activate(s, &rep);
	return 0;
}

/* ---- control requests --------------------------------------------------------- */

static char *reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *reply(const char *fmt, ...)
{
	va_list ap;
	char *out = NULL;

	va_start(ap, fmt);
	if (vasprintf(&out, fmt, ap) < 0)
		out = NULL;
	va_end(ap);
	return out;
}

static char *start_request(struct repl_secondary *s, const char *args)
{
	struct repl_drill *d = s->drill;
	struct drill_run *r;
	unsigned seconds = 5;
	bool external = false;
	struct machine_ops ops;
	uint64_t t0;
	int e;
	char word[64];
	int n;

	while (sscanf(args, " %63s%n", word, &n) == 1) {
		args += n;
		if (!strncmp(word, "seconds=", 8) && atoi(word + 8) > 0 && atoi(word + 8) <= 3600)
			seconds = (unsigned)atoi(word + 8);
		else if (!strcmp(word, "probe=external"))
			external = true;
		else if (strcmp(word, "probe=builtin"))
			return reply("error bad drill argument '%s'\n", word);
	}
	if (!d || s->state != S_STANDBY || !s->stage.have_ckpt || !s->link.conn)
		return reply("error no drill: this secondary is %s%s\n", repl_sec_state_name(s),
			     s->stage.have_ckpt && s->link.conn ? "" :
			     " without a complete checkpoint from a connected primary");
	/* An older primary would take a drill Section for a protocol error and
	 * give its secondary up: production would lose its protection. */
	if (!(s->peer_caps & PROTO_CAP_DRILL))
		return reply("error the primary does not answer drills (an older version): no drill\n");
	if (d->run.state >= DRILL_ASKED && d->run.state < DRILL_DONE)
		return reply("error a drill is running (drill %llu)\n", (unsigned long long)d->run.id);
	r = &d->run;
	if (r->out)
		pthread_mutex_destroy(&r->out_lock);
	free(r->out);
	free(r->report);
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->out_lock, NULL);
	if (!(r->out = malloc(DRILL_OUT_MAX)))
		return reply("error out of memory\n");
	if (getrandom(&r->id, sizeof(r->id), 0) != (ssize_t)sizeof(r->id) || !r->id)
		r->id = now_ns() | 1;
	r->seconds = seconds;
	r->external = external;
	/* The clone's VM is built now, as a standby is built before it is
	 * needed: activation then costs what a takeover costs, plus copying
	 * the state (which the standby received with each epoch). Its RAM
	 * follows the standby until activation (nothing is private yet). */
	ops = (struct machine_ops){ .console_out = clone_out, .stopped = clone_stopped, .ctx = r };
	t0 = now_ns();
	if ((e = machine_new_clone(s->vm->m, &ops, &r->clone)) < 0)
		return reply("error cannot build the clone: %s\n", strerror(-e));
	r->build_ns = now_ns() - t0;
	clock_gettime(CLOCK_REALTIME, &r->wall_start);
	r->t_asked_ns = now_ns();
	if (send_request(&s->link, REPL_DRILL_BEGIN, r->id) < 0) {
		drill_stop_clone(r);
		return reply("error cannot ask the primary for its digest\n");
	}
	r->state = DRILL_ASKED;
	ev_timer_init(&d->tick_w, on_tick, 0.01, 0.01);
	d->tick_w.data = s;
	ev_timer_start(s->loop, &d->tick_w);
	log_info(TAG, "drill %llu: test-failover for %u s at the primary's next epoch (standby at "
		 "%llu)", (unsigned long long)r->id, seconds, (unsigned long long)s->stage.applied);
	return reply("ok drill %llu started\n", (unsigned long long)r->id);
}

static char *corrupt_request(struct repl_secondary *s)
{
	const char *hooks = getenv("UNDERSTUDY_TEST_HOOKS");
	struct machine *m = s->vm ? s->vm->m : NULL;
	uint8_t *p;

	if (!hooks || strcmp(hooks, "1"))
		return reply("error drill corrupt is a test hook (UNDERSTUDY_TEST_HOOKS=1)\n");
	if (!m || (s->drill && s->drill->run.clone))
		return reply("error no standby, or a drill is running\n");
	p = machine_page_hva(m, m->ram_pages - 1);
	p[0] ^= 0x5a;
	log_warn(TAG, "test hook: byte 0 of the standby's page %llu flipped",
		 (unsigned long long)(m->ram_pages - 1));
	return reply("ok flipped byte 0 of page %llu of the standby\n",
		     (unsigned long long)(m->ram_pages - 1));
}

char *repl_drill_request(struct repl_secondary *s, const char *req)
{
	struct drill_run *r = s->drill ? &s->drill->run : NULL;

	if (!strncmp(req, "drill test-failover", 19))
		return start_request(s, req + 19);
	if (!strcmp(req, "drill status"))
		return drill_status_json(s);
	if (!strcmp(req, "drill corrupt"))
		return corrupt_request(s);
	if (!strncmp(req, "drill console-in ", 17))
		return drill_console_in(r, req + 17);
	if (!strncmp(req, "drill console-out ", 18))
		return drill_console_out(r, req + 18);
	if (!strncmp(req, "drill probe-done ", 17)) {
		if (!r || r->state != DRILL_PROBING || !r->external)
			return reply("error no drill waits for a probe\n");
		r->probe_ok = atoi(req + 17) == 0;
		snprintf(r->probe, sizeof(r->probe), "command exited %d%s%s", atoi(req + 17),
			 strchr(req + 17, ' ') ? ":" : "", strchr(req + 17, ' ') ? strchr(req + 17, ' ') : "");
		if (!r->probe_ok)
			drill_fail(r, "probe: %s", r->probe);
		r->probe_done = true;
		return reply("ok\n");
	}
	return reply("error unknown drill request\n");
}

void repl_drill_free(struct repl_secondary *s)
{
	struct repl_drill *d = s->drill;

	if (!d)
		return;
	ev_timer_stop(s->loop, &d->tick_w);
	drill_stop_clone(&d->run);
	if (d->run.out)
		pthread_mutex_destroy(&d->run.out_lock);
	free(d->run.out);
	free(d->run.report);
	free(d);
	s->drill = NULL;
}
