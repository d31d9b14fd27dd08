/* A machine running on the agent's libev loop: its console endpoint, the
 * hand-over of guest output from vCPU threads to the loop, and the output
 * gate that output commit closes (output leaves only up to a released mark). */
#include "replication/replication_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG "vm"

static void wake(struct repl_vm *v)
{
	ev_async_send(v->loop, &v->wake);
}

static void on_console_out(void *ctx, const uint8_t *buf, size_t len)
{
	struct repl_vm *v = ctx;
	bool first, fresh;

	if (!len)
		return;
	pthread_mutex_lock(&v->out_lock);
	if (v->out_len + len > v->out_cap) {
		size_t cap = v->out_cap ? v->out_cap * 2 : 65536;
		uint8_t *p;

		while (cap < v->out_len + len)
			cap *= 2;
		p = realloc(v->out, cap);
		if (!p) {
			pthread_mutex_unlock(&v->out_lock);
			log_error(TAG, "out of memory holding guest output");
			return;
		}
		v->out = p;
		v->out_cap = cap;
	}
	memcpy(v->out + v->out_len, buf, len);
	first = v->out_len == 0;
	fresh = v->produced == v->epoch_mark;
	v->out_len += len;
	v->produced += len;
	pthread_mutex_unlock(&v->out_lock);
	if (first && !v->gated) {
		wake(v);
	} else if (fresh && v->gated) {
		atomic_store(&v->out_new, true);
		wake(v);
	}
}

static void on_console_room(void *ctx)
{
	struct repl_vm *v = ctx;

	atomic_store(&v->room, true);
	wake(v);
}

static void on_stopped(void *ctx, int status)
{
	struct repl_vm *v = ctx;

	v->status = status;
	atomic_store(&v->stopped, true);
	wake(v);
}

static size_t on_input(void *ctx, const uint8_t *buf, size_t len)
{
	struct repl_vm *v = ctx;

	return machine_console_input(v->m, buf, len);
}

static void on_hangup(void *ctx)
{
	struct repl_vm *v = ctx;

	if (v->on_hangup)
		v->on_hangup(v->cb_ctx);
}

/* A half-closed console client waits for the output still held here. */
static bool on_output_held(void *ctx)
{
	struct repl_vm *v = ctx;
	bool held;

	pthread_mutex_lock(&v->out_lock);
	held = v->produced != v->released;
	pthread_mutex_unlock(&v->out_lock);
	return held;
}

uint64_t repl_vm_released(struct repl_vm *v)
{
	uint64_t r;

	pthread_mutex_lock(&v->out_lock);
	r = v->released;
	pthread_mutex_unlock(&v->out_lock);
	return r;
}

uint64_t repl_vm_output_mark(struct repl_vm *v)
{
	uint64_t mark;

	pthread_mutex_lock(&v->out_lock);
	mark = v->epoch_mark = v->produced;
	v->net.epoch_mark = v->net.produced;
	pthread_mutex_unlock(&v->out_lock);
	return mark;
}

/* Output leaves in whole lines: a release stops after the last newline in
 * range, so a client never holds half a line that a takeover could replay
 * differently. A line still open after two releases leaves anyway (a prompt
 * without a newline must not wait forever). */
void repl_vm_release(struct repl_vm *v, uint64_t upto)
{
	size_t n, cut;
	uint64_t from;
	bool ungated = upto == UINT64_MAX;   /* unprotected, or after a takeover */

	if (v->witness && !repl_witness_valid(v->witness)) {
		if (!v->lease_held_back)
			log_warn(TAG, "output held: this side's witness lease is not provably valid");
		v->lease_held_back = true;
		return;
	}
	v->lease_held_back = false;
	pthread_mutex_lock(&v->out_lock);
	from = v->released;
	if (upto > v->produced)
		upto = v->produced;
	n = upto > v->released ? (size_t)(upto - v->released) : 0;
	cut = n;
	if (v->gated && upto != UINT64_MAX) {
		while (cut && v->out[cut - 1] != '\n')
			cut--;
		if (cut < n && ++v->tail_holds < 3)
			n = cut;
	}
	if (n) {
		if (v->con)
			console_write(v->con, v->out, n);
		memmove(v->out, v->out + n, v->out_len - n);
		v->out_len -= n;
		v->released += n;
		if (n == cut)
			v->tail_holds = 0;
	}
	pthread_mutex_unlock(&v->out_lock);
	if (n && ungated && repl_event_log_on())
		repl_event_log("out %llu %llu", (unsigned long long)from,
			       (unsigned long long)(from + n));
}

void repl_release_epoch(struct repl_vm *v, uint64_t epoch, uint64_t mark)
{
	uint64_t from = v->released;

	repl_vm_release(v, mark);
	if (v->released != from && repl_event_log_on())
		repl_event_log("release %llu %llu %llu", (unsigned long long)epoch,
			       (unsigned long long)from, (unsigned long long)v->released);
}

void repl_vm_set_gated(struct repl_vm *v, bool gated)
{
	v->gated = gated;
	if (!gated) {
		repl_vm_release(v, UINT64_MAX);
		repl_vm_net_release(v, 0, UINT64_MAX);
	}
}

static void on_wake(struct ev_loop *loop, ev_async *w, int revents)
{
	struct repl_vm *v = w->data;

	(void)loop;
	(void)revents;
	if (!v->gated) {
		repl_vm_release(v, UINT64_MAX);
		repl_vm_net_release(v, 0, UINT64_MAX);
	}
	if (atomic_exchange(&v->room, false) && v->con)
		console_input_resume(v->con);
	if (atomic_exchange(&v->out_new, false) && v->on_output)
		v->on_output(v->cb_ctx);
	if (atomic_load(&v->stopped) && v->on_stopped) {
		void (*cb)(void *, int) = v->on_stopped;

		v->on_stopped = NULL;
		cb(v->cb_ctx, v->status);
	}
}

int repl_vm_new(struct ev_loop *loop, const struct machine_config *cfg, const char *console,
		struct repl_vm **out)
{
	struct machine_ops mops;
	struct repl_vm *v;
	int r;

	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->loop = loop;
	pthread_mutex_init(&v->out_lock, NULL);
	ev_async_init(&v->wake, on_wake);
	v->wake.data = v;
	ev_async_start(loop, &v->wake);
	mops = (struct machine_ops){ .console_out = on_console_out, .console_room = on_console_room,
				     .stopped = on_stopped, .net_tx = repl_vm_net_tx, .ctx = v };
	r = machine_new(cfg, &mops, &v->m);
	if (r < 0)
		goto err;
	if ((r = repl_vm_net_open(v)) < 0)
		goto err_machine;
	if (console && (r = repl_vm_open_console(v, console)) < 0)
		goto err_net;
	*out = v;
	return 0;

err_net:
	repl_vm_net_close(v);
err_machine:
	machine_free(v->m);
err:
	ev_async_stop(loop, &v->wake);
	pthread_mutex_destroy(&v->out_lock);
	free(v);
	return r;
}

static void poweron_free(struct repl_vm *v)
{
	if (v->poweron)
		ckpt_fini(v->poweron);
	free(v->poweron);
	v->poweron = NULL;
}

/* The machine's state as it is now (no pages) into v->poweron. */
static int keep_poweron(struct repl_vm *v)
{
	struct ckpt_image *img;
	int r;

	img = malloc(sizeof(*img));
	v->poweron = malloc(sizeof(*v->poweron));
	if (!img || !v->poweron) {
		free(v->poweron);
		v->poweron = NULL;
		free(img);
		return -ENOMEM;
	}
	ckpt_init(v->poweron);
	v->poweron->config_digest = machine_config_digest(&v->m->cfg);
	machine_pause(v->m);     /* the vCPUs start parked: this waits until they are */
	r = ckpt_image_read(v->m, img);
	if (r == 0)
		r = ckpt_state_encode(v->poweron, img);
	free(img);
	if (r < 0) {
		log_error(TAG, "reading the power-on state: %s", strerror(-r));
		poweron_free(v);
	}
	return r;
}

int repl_vm_boot(struct repl_vm *v)
{
	int r;

	if ((r = machine_boot(v->m)) < 0)
		return r;
	return keep_poweron(v);
}

/* Taken on the fresh machine, before any checkpoint: vCPUs as KVM made
 * them, devices at reset. machine_boot, which repl_vm_reboot calls after
 * applying it, sets the boot registers and loads RAM as on a booting
 * primary, so nothing is loaded here: RAM stays untouched (zero, as a
 * standby's initial sync expects) and no file is read but the headers. */
int repl_vm_keep_poweron(struct repl_vm *v)
{
	const struct machine_config *cfg = &v->m->cfg;
	char why[512];
	int r;

	if (!v->m->linux_guest || v->poweron)
		return 0;
	if (!cfg->kernel[0]) {
		log_warn(TAG, "a reboot of this guest will end it here: no kernel named to boot it "
			 "from (this command's --kernel, or the primary's, which an older "
			 "primary does not send)");
		return 0;
	}
	if (machine_linux_check(cfg, why, sizeof(why)) < 0) {
		log_warn(TAG, "a reboot of this guest will end it here: %s", why);
		return 0;
	}
	if ((r = keep_poweron(v)) < 0)
		return r;
	log_info(TAG, "a reboot of this guest boots it here again from %s%s%s", cfg->kernel,
		 cfg->initrd[0] ? " and " : "", cfg->initrd);
	return 0;
}

/* The state first, then the loader: machine_boot writes RAM (marking it)
 * and vCPU 0's boot registers, which the power-on state holds already. */
int repl_vm_reboot(struct repl_vm *v)
{
	int r;

	if (!v->poweron)
		return -ENOTSUP;
	if ((r = machine_restart(v->m)) < 0)
		return r;
	atomic_store(&v->stopped, false);
	if ((r = machine_ram_clear(v->m)) < 0 || (r = ckpt_apply(v->m, v->poweron)) < 0 ||
	    (r = machine_boot(v->m)) < 0)
		log_error(TAG, "rebooting the guest: %s", strerror(-r));
	return r;
}

void repl_vm_mark_running(struct repl_vm *v)
{
	v->running_since_ns = now_ns();
	clock_gettime(CLOCK_REALTIME, &v->running_since);
}

void repl_vm_mark_standby(struct repl_vm *v)
{
	v->running_since_ns = 0;
	v->took_over = false;
}

void repl_vm_mark_took_over(struct repl_vm *v, uint64_t epoch, double silence_ms)
{
	v->took_over = true;
	v->took_over_epoch = epoch;
	v->took_over_silence_ms = silence_ms;
	clock_gettime(CLOCK_REALTIME, &v->took_over_at);
}

int repl_vm_open_console(struct repl_vm *v, const char *console)
{
	struct console_ops cops = { .input = on_input, .hangup = on_hangup,
				     .output_held = on_output_held, .ctx = v };

	return console_open(v->loop, console, &cops, &v->con);
}

void repl_vm_serve_console(struct repl_vm *v, struct console *con)
{
	struct console_ops cops = { .input = on_input, .hangup = on_hangup,
				     .output_held = on_output_held, .ctx = v };

	v->con = con;
	console_serve(con, &cops);
}

struct console *repl_vm_take_console(struct repl_vm *v)
{
	struct console *con = v->con;

	if (con)
		console_unserve(con);
	v->con = NULL;
	/* What this copy produced and did not release never leaves: as a
	 * standby its output is the primary's, replayed from the stream. */
	pthread_mutex_lock(&v->out_lock);
	v->out_len = 0;
	v->released = v->produced;
	pthread_mutex_unlock(&v->out_lock);
	repl_vm_net_forget(v);
	return con;
}

int repl_vm_output_copy(struct repl_vm *v, uint64_t from, uint64_t to, struct proto_buf *out)
{
	int r = 0;

	pthread_mutex_lock(&v->out_lock);
	if (from < v->released)
		from = v->released;
	if (to > v->produced)
		to = v->produced;
	if (to > from)
		r = proto_buf_append(out, v->out + (from - v->released), (size_t)(to - from));
	pthread_mutex_unlock(&v->out_lock);
	return r;
}

void repl_vm_free(struct repl_vm *v)
{
	if (!v)
		return;
	machine_free(v->m);
	if (!v->gated) {
		repl_vm_release(v, UINT64_MAX);
		repl_vm_net_release(v, 0, UINT64_MAX);
	}
	repl_vm_net_close(v);
	if (v->con) {
		console_flush(v->con);
		console_free(v->con);
	}
	ev_async_stop(v->loop, &v->wake);
	pthread_mutex_destroy(&v->out_lock);
	poweron_free(v);
	free(v->out);
	free(v);
}
