/* Fuzz target: what a secondary receives, as one stream of frames fed to
 * the frame decoder, with the secondary's order of checks (on_message in
 * secondary/receive.c): Hello first, then the machine-config Section,
 * then EpochBegin/Section/EpochEnd and page batches in any order, through
 * the same staging calls (repl_staging_begin, _section, _pages).
 * Without /dev/kvm: the standby is a stand-in machine of NPAGES pages of
 * plain memory with the vCPU count of the received configuration, and an
 * EpochEnd is checked to close an open epoch, then dropped (applying it,
 * repl_staging_end, needs a real VM). Like the secondary, the first bad
 * frame ends the stream. Accepted: every frame was taken and the stream
 * ends on a frame boundary. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "machine/machine.h"
#include "proto/proto.h"
#include "replication/replication.h"
#include "secondary/secondary_int.h"
#include "tests/fuzz/fuzz.h"

#define NPAGES 64

struct standby {
	struct repl_staging stage;
	struct repl_vm vm;
	bool got_hello, attached;
	uint64_t hello_digest;
};

static struct machine *stand_in(void)
{
	static struct machine *m;

	if (!m) {
		m = calloc(1, sizeof(*m));
		if (!m || !(m->ram = calloc(NPAGES, KVM_PAGE_SIZE)))
			abort();
		m->ram_pages = m->low_pages = NPAGES;
	}
	return m;
}

static int on_hello(struct standby *s, const Understudy__Hello *h)
{
	struct repl_timing t;
	char err[256];
	int r;

	if (s->got_hello)
		return -EPROTO;
	if ((r = repl_check_hello(h, UNDERSTUDY__ROLE__ROLE_PRIMARY, err, sizeof(err))) < 0 ||
	    (r = repl_hello_timing(h, &t, err, sizeof(err))) < 0)
		return r;
	s->got_hello = true;
	s->hello_digest = h->config_digest64;
	return 0;
}

static int build_standby(struct standby *s, const Understudy__Section *sec)
{
	struct machine_config cfg;

	if (strcmp(sec->name, PROTO_SECTION_MACHINE_CONFIG) ||
	    proto_config_decode(sec->data.data, sec->data.len, &cfg) < 0 ||
	    machine_config_digest(&cfg) != s->hello_digest)
		return -EBADMSG;
	s->vm.m = stand_in();
	s->vm.m->ncpus = cfg.ncpus;
	repl_staging_attach(&s->stage, &s->vm, s->hello_digest);
	s->attached = true;
	return 0;
}

static int on_message(struct standby *s, uint16_t type, ProtobufCMessage *msg)
{
	if (type == PROTO_T_HELLO)
		return on_hello(s, (Understudy__Hello *)msg);
	if (!s->got_hello)
		return -EPROTO;
	if (!s->attached)
		return type == PROTO_T_SECTION ? build_standby(s, (Understudy__Section *)msg) : -EPROTO;
	switch (type) {
	case PROTO_T_EPOCH_BEGIN:
		return repl_staging_begin(&s->stage, ((Understudy__EpochBegin *)msg)->epoch);
	case PROTO_T_SECTION:
		return repl_staging_section(&s->stage, (Understudy__Section *)msg);
	case PROTO_T_EPOCH_END:
		if (!s->stage.in_epoch || ((Understudy__EpochEnd *)msg)->epoch != s->stage.cur)
			return -EPROTO;
		repl_staging_abort(&s->stage);
		return 0;
	case PROTO_T_HEARTBEAT:
	case PROTO_T_FENCE:
		return 0;
	default:
		return -EPROTO;
	}
}

static int on_frame(void *ctx, const struct proto_frame *f)
{
	struct standby *s = ctx;
	ProtobufCMessage *msg;
	int r;

	if (f->type == PROTO_T_PAGES)
		return repl_staging_pages(&s->stage, f);
	if ((r = proto_msg_unpack(f->type, f->payload, f->len, &msg)) < 0)
		return r;
	r = on_message(s, f->type, msg);
	proto_msg_free(msg);
	return r;
}

int fuzz_verdict(const uint8_t *data, size_t size)
{
	struct standby *s = calloc(1, sizeof(*s));
	struct proto_dec d;
	int r;

	if (!s)
		return -ENOMEM;
	repl_staging_init(&s->stage);
	repl_staging_attach(&s->stage, NULL, 0);
	proto_dec_init(&d, 1u << 20);
	r = proto_dec_feed(&d, data, size, on_frame, s);
	if (!r && proto_dec_partial(&d))
		r = -EPIPE;
	proto_dec_fini(&d);
	repl_staging_fini(&s->stage);
	free(s);
	return r;
}

FUZZ_LIBFUZZER_ENTRY
