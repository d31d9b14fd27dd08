/* Invariant 2, an epoch applies whole or not at all, as a deterministic
 * unit test of the secondary's staging (secondary/staging.c), without
 * KVM: the standby is a stand-in machine of plain memory.
 *
 * The standby holds epoch 1 (the initial sync, applied as it arrives, then
 * committed). Epoch 2 is then sent as the primary sends it (EpochBegin,
 * state, released and console sections, page batches with a page named
 * twice and XOR deltas against epoch 1, EpochEnd) and torn at every frame
 * boundary and in the middle of every frame: after each cut the link ends
 * as the secondary ends it (repl_staging_abort), and the standby's RAM must
 * be byte-equal to epoch 1, epoch 1 still the last applied, and epoch 2
 * accepted again from its start on the next connection. sys_commit_order
 * checks the same end to end, but a torn epoch there may touch no page it
 * reads; here every cut is tried, every run.
 *
 * Applying the epoch needs KVM (ckpt_apply sets vCPU state), so the whole
 * stream's EpochEnd is only checked to pass the completeness checks (page
 * count and digest) before the apply refuses the stand-in's state. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "machine/machine.h"
#include "proto/proto.h"
#include "replication/replication.h"
#include "secondary/secondary_int.h"

#define NPAGES 64
#define EPOCH_PAGES 24          /* pages in epoch 2, one of them twice */
#define BATCH 5                 /* pages per PROTO_T_PAGES frame */

struct standby {
	struct machine m;
	struct repl_vm vm;
	struct repl_staging g;
	struct proto_dec dec;
	uint8_t *epoch1;        /* RAM as epoch 1 left it */
	uint64_t frames;        /* frames taken on this connection */
};

/* What the secondary does with each frame (secondary/receive.c,
 * repl_sec_frame and on_message), for the frames of an epoch. */
static int on_frame(void *ctx, const struct proto_frame *f)
{
	struct standby *s = ctx;
	ProtobufCMessage *msg;
	struct repl_fault fault;
	int r;

	s->frames++;
	if (f->type == PROTO_T_PAGES)
		return repl_staging_pages(&s->g, f);
	if ((r = proto_msg_unpack(f->type, f->payload, f->len, &msg)) < 0)
		return r;
	switch (f->type) {
	case PROTO_T_EPOCH_BEGIN:
		r = repl_staging_begin(&s->g, ((Understudy__EpochBegin *)msg)->epoch);
		break;
	case PROTO_T_SECTION:
		r = repl_staging_section(&s->g, (Understudy__Section *)msg);
		break;
	case PROTO_T_EPOCH_END:
		memset(&fault, 0, sizeof(fault));
		r = repl_staging_end(&s->g, (Understudy__EpochEnd *)msg, &fault);
		/* Whole and digested: only the stand-in's vCPU state is refused. */
		if (r < 0 && !strstr(fault.what, "cannot be applied"))
			fail_msg("the whole epoch was refused before the apply: %s", fault.what);
		r = 0;
		break;
	default:
		r = -EPROTO;
	}
	proto_msg_free(msg);
	return r;
}

static void fill(uint8_t *page, uint64_t gfn, unsigned epoch)
{
	for (size_t i = 0; i < KVM_PAGE_SIZE; i++)
		page[i] = (uint8_t)(gfn * 31 + i * 7 + epoch * 101 + (i >> 9));
}

static void put_msg(struct proto_buf *out, uint16_t type, const ProtobufCMessage *msg,
		    size_t *ends, size_t *n)
{
	assert_int_equal(proto_msg_pack(out, type, msg), 0);
	ends[(*n)++] = out->len;
}

static void put_section(struct proto_buf *out, const char *name, const void *data, size_t len,
			size_t *ends, size_t *n)
{
	Understudy__Section sec = UNDERSTUDY__SECTION__INIT;

	sec.name = (char *)name;
	sec.data.data = (uint8_t *)data;
	sec.data.len = len;
	put_msg(out, PROTO_T_SECTION, &sec.base, ends, n);
}

/* Epoch 2 as the primary sends it, into out; ends[i] is where frame i ends. */
static size_t build_epoch2(struct proto_page_enc *e, struct proto_buf *out, size_t *ends)
{
	Understudy__EpochBegin eb = UNDERSTUDY__EPOCH_BEGIN__INIT;
	Understudy__EpochEnd ee = UNDERSTUDY__EPOCH_END__INIT;
	static uint8_t pages[EPOCH_PAGES + 1][KVM_PAGE_SIZE];
	uint64_t gfns[EPOCH_PAGES + 1];
	const void *ptrs[EPOCH_PAGES + 1];
	uint8_t state[256], released[PROTO_META_U64_BYTES], digest[PROTO_META_U32_BYTES];
	uint32_t crc = 0;
	size_t n = 0, npages = 0;

	eb.epoch = 2;
	put_msg(out, PROTO_T_EPOCH_BEGIN, &eb.base, ends, &n);
	for (size_t i = 0; i < sizeof(state); i++)
		state[i] = (uint8_t)(i ^ 0x5a);
	put_section(out, PROTO_SECTION_STATE, state, sizeof(state), ends, &n);
	proto_released_encode(3, released);
	put_section(out, PROTO_SECTION_RELEASED, released, sizeof(released), ends, &n);
	put_section(out, PROTO_SECTION_CONSOLE, "2\n", 2, ends, &n);
	/* Pages 0, 2, 4... changed; the first one again at the end (its
	 * pre-copy, then the pause), with other contents. */
	for (size_t i = 0; i < EPOCH_PAGES; i++) {
		gfns[i] = 2 * i;
		fill(pages[i], gfns[i], 2);
	}
	gfns[EPOCH_PAGES] = 0;
	fill(pages[EPOCH_PAGES], 0, 3);
	for (size_t i = 0; i <= EPOCH_PAGES; i++) {
		ptrs[i] = pages[i];
		crc = proto_digest_page(crc, gfns[i], pages[i]);
	}
	while (npages < EPOCH_PAGES) {
		size_t k = EPOCH_PAGES - npages < BATCH ? EPOCH_PAGES - npages : BATCH;

		assert_int_equal(proto_pages_encode(e, gfns + npages, ptrs + npages, k, out, NULL), 0);
		ends[n++] = out->len;
		npages += k;
	}
	proto_page_enc_forget(e, 0);   /* sent again in the epoch: no delta */
	assert_int_equal(proto_pages_encode(e, gfns + EPOCH_PAGES, ptrs + EPOCH_PAGES, 1, out, NULL), 0);
	ends[n++] = out->len;
	ee.epoch = 2;
	ee.npages = EPOCH_PAGES + 1;
	proto_digest_encode(crc, digest);
	ee.digest.data = digest;
	ee.digest.len = sizeof(digest);
	put_msg(out, PROTO_T_EPOCH_END, &ee.base, ends, &n);
	return n;
}

/* A new connection: the decoder starts over, as end_link() leaves it. */
static void connect_again(struct standby *s)
{
	proto_dec_fini(&s->dec);
	proto_dec_init(&s->dec, PROTO_MAX_PAYLOAD_DEFAULT);
	s->frames = 0;
}

static void torn_at_every_frame(void **state)
{
	struct standby *s = calloc(1, sizeof(*s));
	struct proto_page_enc *e = proto_page_enc_new(1, 0);
	struct proto_buf sync, epoch;
	size_t ends[64], nframes, cuts = 0;
	uint8_t page[KVM_PAGE_SIZE];
	const void *ptr = page;

	(void)state;
	assert_non_null(s);
	assert_non_null(e);
	/* The stand-in standby: plain memory, no memfd. */
	s->m.ram = calloc(NPAGES, KVM_PAGE_SIZE);
	s->epoch1 = malloc((size_t)NPAGES * KVM_PAGE_SIZE);
	assert_non_null(s->m.ram);
	assert_non_null(s->epoch1);
	s->m.ram_pages = s->m.low_pages = NPAGES;
	s->m.ram_private = true;
	s->m.ncpus = 1;
	s->vm.m = &s->m;
	repl_staging_init(&s->g);
	repl_staging_attach(&s->g, &s->vm, 0x1234);
	proto_dec_init(&s->dec, PROTO_MAX_PAYLOAD_DEFAULT);

	/* Epoch 1: the initial sync, every page, straight into RAM. */
	proto_buf_init(&sync);
	for (uint64_t gfn = 0; gfn < NPAGES; gfn++) {
		fill(page, gfn, 1);
		assert_int_equal(proto_pages_encode(e, &gfn, &ptr, 1, &sync, NULL), 0);
	}
	assert_int_equal(proto_dec_feed(&s->dec, sync.data, sync.len, on_frame, s), 0);
	assert_int_equal(s->frames, NPAGES);
	for (uint64_t gfn = 0; gfn < NPAGES; gfn++) {
		fill(page, gfn, 1);
		assert_memory_equal(s->m.ram + gfn * KVM_PAGE_SIZE, page, KVM_PAGE_SIZE);
	}
	/* ...committed: what repl_staging_end leaves after epoch 1 (its
	 * ckpt_apply needs KVM). */
	s->g.have_ckpt = true;
	s->g.applied = 1;
	memcpy(s->epoch1, s->m.ram, (size_t)NPAGES * KVM_PAGE_SIZE);

	proto_buf_init(&epoch);
	nframes = build_epoch2(e, &epoch, ends);
	assert_true(nframes >= 8);
	/* Cut after k whole frames (k = 0 .. all but EpochEnd), and in the
	 * middle of frame k. */
	for (size_t k = 0; k < nframes; k++) {
		size_t start = k ? ends[k - 1] : 0;
		size_t at[2] = { start, start + (ends[k] - start) / 2 };

		for (int j = 0; j < 2; j++) {
			connect_again(s);
			assert_int_equal(proto_dec_feed(&s->dec, epoch.data, at[j], on_frame, s), 0);
			assert_int_equal(s->frames, k);
			repl_staging_abort(&s->g);   /* the link ended */
			if (memcmp(s->m.ram, s->epoch1, (size_t)NPAGES * KVM_PAGE_SIZE))
				fail_msg("epoch 2 torn after %zu of %zu frames (byte %zu of %zu): the "
					 "standby is no longer epoch 1", k, nframes, at[j], epoch.len);
			assert_int_equal(s->g.applied, 1);
			assert_false(s->g.in_epoch);
			cuts++;
		}
	}
	/* The whole epoch, on a new connection: taken from its start, complete
	 * (count and digest) up to the apply, which the stand-in cannot do. */
	connect_again(s);
	assert_int_equal(proto_dec_feed(&s->dec, epoch.data, epoch.len, on_frame, s), 0);
	assert_int_equal(s->frames, nframes);
	printf("epoch 2 (%zu frames, %zu bytes) torn at %zu places: the standby stayed byte-equal "
	       "to epoch 1 each time; the whole epoch passes the completeness checks\n", nframes,
	       epoch.len, cuts);

	proto_buf_fini(&epoch);
	proto_buf_fini(&sync);
	proto_dec_fini(&s->dec);
	repl_staging_fini(&s->g);
	proto_page_enc_free(e);
	free(s->epoch1);
	free(s->m.ram);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(torn_at_every_frame),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
