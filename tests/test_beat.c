/* replication/beat.c: the silence clock over real beats (net/beat.c, UDP
 * on loopback, a thread each side).
 *  - while the peer beats every millisecond, the silence is never more
 *    than a fraction of a second, read after read, and a side about to
 *    declare the peer silent finds it heard (repl_link_heard_late): the
 *    last beat may be stamped by the beat thread after this thread read
 *    the clock, and that is no silence (computed the other way round it
 *    was 2^64 ns less a little: "silent for 18446744073684 ms");
 *  - once the beats stop, the silence grows with the time that passed and
 *    the peer is not heard late: detection still works. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kmod/log.h"
#include "net/beat.h"
#include "replication/replication.h"

#define MS 1000000ull

struct pair {
	struct net_beat *primary, *secondary;
	struct repl_link link;     /* the secondary's view of the primary */
};

static int free_udp_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_DGRAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int setup(void **state)
{
	static struct pair p;
	struct net_beat_opts o = { .interval_ms = 1, .progress_ms = 60000 };
	char addr[32];
	int port = free_udp_port();

	if (port < 0)
		return -1;
	memset(&p, 0, sizeof(p));
	memset(o.key, 0x5c, sizeof(o.key));
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	o.bind = addr;
	o.role = NET_BEAT_SECONDARY;
	if (net_beat_open(&o, &p.secondary))
		return -1;
	o.bind = NULL;
	o.peer = addr;
	o.role = NET_BEAT_PRIMARY;
	if (net_beat_open(&o, &p.primary))
		return -1;
	p.link.beat = p.secondary;
	p.link.last_rx_ns = now_ns();   /* the stream showed life just now */
	*state = &p;
	return 0;
}

static int teardown(void **state)
{
	struct pair *p = *state;

	net_beat_close(p->primary);
	net_beat_close(p->secondary);
	return 0;
}

static uint64_t counted_heard(struct net_beat *b)
{
	uint64_t sent, heard, dropped, held;

	net_beat_counts(b, &sent, &heard, &dropped, &held);
	return heard;
}

static void silence_is_never_negative(void **state)
{
	struct pair *p = *state;
	uint64_t t0 = now_ns(), reads = 0, worst = 0, late_misses = 0;

	while (counted_heard(p->secondary) < 3 && now_ns() - t0 < 2000 * MS)
		usleep(1000);
	assert_true(counted_heard(p->secondary) >= 3);
	t0 = now_ns();
	while (now_ns() - t0 < 400 * MS) {
		uint64_t s = repl_link_silent_ns(&p->link);

		if (s > worst)
			worst = s;
		/* What a side asks before it declares the peer silent. */
		if ((reads & 63) == 0 && !repl_link_heard_late(&p->link, 500 * MS))
			late_misses++;
		reads++;
	}
	print_message("%llu reads over 400 ms of beats every 1 ms (%llu heard): longest silence "
		      "%.3f ms, heard_late missed %llu times\n", (unsigned long long)reads,
		      (unsigned long long)counted_heard(p->secondary), worst / 1e6,
		      (unsigned long long)late_misses);
	assert_true(counted_heard(p->secondary) >= 50);
	assert_true(worst < 300 * MS);
	assert_int_equal(late_misses, 0);
}

static void silence_grows_once_the_beats_stop(void **state)
{
	struct pair *p = *state;
	uint64_t s = 0, s0 = 0;

	net_beat_close(p->primary);
	p->primary = NULL;
	/* A beat sent before the close may still be read (and stamped) late by
	 * a starved receiver: then the silence restarts between the two looks
	 * and the pair of looks is taken again. */
	for (int i = 0; i < 5; i++) {
		s0 = repl_link_silent_ns(&p->link);
		usleep(120 * 1000);
		s = repl_link_silent_ns(&p->link);
		if (s >= s0)
			break;
	}
	print_message("silent for %.1f ms, then %.1f ms 120 ms later\n", s0 / 1e6, s / 1e6);
	assert_true(s >= s0 + 100 * MS && s < 5000 * MS);
	assert_false(repl_link_heard_late(&p->link, 50 * MS));
	assert_true(repl_link_heard_late(&p->link, 5000 * MS));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(silence_is_never_negative, setup, teardown),
		cmocka_unit_test_setup_teardown(silence_grows_once_the_beats_stop, setup, teardown),
	};

	log_set_level(LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
