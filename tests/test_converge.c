/* replication/converge.c: a migration's hand-over decision (pure).
 *  - an idle guest over a 40 ms link hands over at once: the round trip is
 *    a floor no throttle shortens (before, pause + capture-to-ACK missed
 *    30 ms every epoch and auto-converge throttled it to 99 %);
 *  - a guest whose epochs take longer to carry than the downtime allows is
 *    throttled, over a short link and over a long one, and hands over once
 *    its epochs shrink;
 *  - on a short link the target holds as asked (29.9 ms goes, 30.1 waits);
 *  - whatever the inputs, a throttle is only ever for the epoch's bytes
 *    (with no bytes it always hands over), and the goal never drops below
 *    the target nor jumps as the floor grows;
 *  - the round trip an epoch shows is its lag less its bytes' transfer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "primary/converge.h"

#define MIB (1024.0 * 1024.0)
#define PER_MS(mib_s) ((mib_s) * MIB / 1e3)    /* MiB/s -> bytes per ms */

static void test_idle_over_long_link(void **st)
{
	/* 40 ms round trip, a counter guest: a few pages and the state. */
	struct repl_converge c = { .pause_ms = 0.4, .rtt_ms = 40, .bytes = 24 * 1024,
				   .bytes_per_ms = PER_MS(400), .target_ms = 30 };
	double predicted, goal, old_predicted;

	(void)st;
	assert_int_equal(repl_converge_decide(&c, &predicted, &goal), REPL_CONVERGE_SWITCH);
	assert_true(predicted > 40 && predicted < 41);
	assert_true(goal >= predicted);
	/* What the old prediction (pause + capture-to-ACK) said of it: a miss. */
	old_predicted = c.pause_ms + c.rtt_ms + c.bytes / c.bytes_per_ms;
	assert_true(old_predicted > c.target_ms);
	/* ...and a link of 200 ms the same. */
	c.rtt_ms = 200;
	assert_int_equal(repl_converge_decide(&c, NULL, NULL), REPL_CONVERGE_SWITCH);
}

static void test_busy_guest_throttled(void **st)
{
	/* 10 MiB an epoch over 400 MiB/s: 25 ms of transfer against 2 ms. */
	struct repl_converge c = { .pause_ms = 1, .rtt_ms = 0.1, .bytes = 10 * MIB,
				   .bytes_per_ms = PER_MS(400), .target_ms = 2 };

	(void)st;
	assert_int_equal(repl_converge_decide(&c, NULL, NULL), REPL_CONVERGE_THROTTLE);
	c.bytes = 64 * 1024;       /* throttled down to 64 KiB: 0.16 ms */
	assert_int_equal(repl_converge_decide(&c, NULL, NULL), REPL_CONVERGE_SWITCH);

	/* Over 40 ms: the goal is the floor plus half the target (15 ms). */
	c = (struct repl_converge){ .pause_ms = 1, .rtt_ms = 40, .bytes = 10 * MIB,
				    .bytes_per_ms = PER_MS(400), .target_ms = 30 };
	assert_true(repl_converge_goal_ms(&c) == 56);
	assert_int_equal(repl_converge_decide(&c, NULL, NULL), REPL_CONVERGE_THROTTLE);
	c.bytes = 4 * MIB;         /* 10 ms */
	assert_int_equal(repl_converge_decide(&c, NULL, NULL), REPL_CONVERGE_SWITCH);
}

static void test_short_link_target_holds(void **st)
{
	struct repl_converge c = { .pause_ms = 1, .rtt_ms = 0.1, .bytes_per_ms = 1000,
				   .target_ms = 30 };
	double predicted;

	(void)st;
	c.bytes = 28800;           /* 28.8 ms: 29.9 in all */
	assert_int_equal(repl_converge_decide(&c, &predicted, NULL), REPL_CONVERGE_SWITCH);
	assert_true(predicted < 30);
	c.bytes = 29000;           /* 30.1 */
	assert_int_equal(repl_converge_decide(&c, &predicted, NULL), REPL_CONVERGE_THROTTLE);
	assert_true(repl_converge_goal_ms(&c) == 30);
}

/* A --bandwidth cap so low that no pause of 1 ms carries an epoch of a
 * guest dirtying 64 MiB: never a hand-over (sys_migrate case 3's premise). */
static void test_low_cap_never_fits(void **st)
{
	struct repl_converge c = { .pause_ms = 0, .rtt_ms = 0, .bytes = 4096 + 1024,
				   .bytes_per_ms = PER_MS(1), .target_ms = 1 };

	(void)st;
	/* One page and a little state at 1 MiB/s: 4.9 ms > 1 ms. */
	assert_int_equal(repl_converge_decide(&c, NULL, NULL), REPL_CONVERGE_THROTTLE);
}

static void test_properties(void **st)
{
	unsigned seed = 1;

	(void)st;
	for (int i = 0; i < 100000; i++) {
		struct repl_converge c = {
			.pause_ms = rand_r(&seed) % 5000 / 1000.0,
			.rtt_ms = rand_r(&seed) % 300000 / 1000.0,
			.bytes = rand_r(&seed) % 4 ? rand_r(&seed) % (64 << 20) : 0,
			.bytes_per_ms = 1 + rand_r(&seed) % 1000000,
			.target_ms = 1 + rand_r(&seed) % 300,
		};
		double predicted, goal, floor_ms = c.pause_ms + c.rtt_ms;
		enum repl_converge_step s = repl_converge_decide(&c, &predicted, &goal);

		assert_true(goal >= c.target_ms);
		assert_true(goal >= floor_ms + c.target_ms / 2);
		if (c.bytes == 0)
			assert_int_equal(s, REPL_CONVERGE_SWITCH);
		if (s == REPL_CONVERGE_THROTTLE)   /* the bytes alone are what misses */
			assert_true(c.bytes / c.bytes_per_ms > c.target_ms / 2);
		else
			assert_true(predicted <= goal);
	}
	/* The goal grows with the floor without a jump. */
	for (double f = 0, last = 30; f < 100; f += 0.01) {
		struct repl_converge c = { .rtt_ms = f, .target_ms = 30 };
		double g = repl_converge_goal_ms(&c);

		assert_true(g >= last && g - last < 0.02);
		last = g;
	}
}

static void test_rtt_sample(void **st)
{
	(void)st;
	/* 45 ms from capture to ACK, 5 MiB at 1 MiB per ms: 40 ms of round trip. */
	assert_true(repl_converge_rtt_sample(45, 5 * MIB, MIB) == 40);
	assert_true(repl_converge_rtt_sample(2, 5 * MIB, MIB) == 0);      /* never below 0 */
	assert_true(repl_converge_rtt_sample(7.5, 5 * MIB, 0) == 7.5);   /* bandwidth unknown */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_over_long_link),
		cmocka_unit_test(test_busy_guest_throttled),
		cmocka_unit_test(test_short_link_target_holds),
		cmocka_unit_test(test_low_cap_never_fits),
		cmocka_unit_test(test_properties),
		cmocka_unit_test(test_rtt_sample),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
