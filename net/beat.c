/* The beat side channel (net/beat.h): one UDP socket and one thread per
 * link. The thread sleeps in poll() until the next beat is due or a
 * datagram arrives, so a beat is stamped within a scheduling delay of its
 * arrival whatever the owner's loop is doing. */
#include "net/beat.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "kmod/le.h"
#include "net/socket.h"

#define TAG "beat"
#define BEAT_MAGIC 0x54425355u   /* "USBT" little endian */
#define BEAT_VERSION 1
#define BEAT_BYTES 32
#define BEAT_SIGNED 16            /* bytes under the MAC */
#define BEAT_MAC 16

struct net_beat {
	int fd, stop_fd;
	pthread_t thread;
	uint8_t key[NET_BEAT_KEY_BYTES];
	int role;
	uint64_t interval_ns, progress_ns_max;
	bool have_peer;               /* under rx_lock once started, as peer */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	uint64_t tx_seq, rx_seq;      /* under rx_lock */
	pthread_mutex_t rx_lock;      /* the socket's state: the thread or heard_now */
	_Atomic uint64_t progress_ns, heard_ns;
	_Atomic uint64_t sent, heard, dropped, held;
};

static bool mac(const struct net_beat *b, const uint8_t *msg, uint8_t out[BEAT_MAC])
{
	uint8_t full[EVP_MAX_MD_SIZE];
	unsigned len = 0;

	if (!HMAC(EVP_sha256(), b->key, sizeof(b->key), msg, BEAT_SIGNED, full, &len) ||
	    len < BEAT_MAC)
		return false;
	memcpy(out, full, BEAT_MAC);
	return true;
}

static void send_beat(struct net_beat *b)
{
	uint8_t d[BEAT_BYTES] = { 0 };
	uint64_t now = now_ns(), progress = atomic_load(&b->progress_ns);

	if (!b->have_peer)
		return;
	if (progress < now && now - progress > b->progress_ns_max) {
		atomic_fetch_add(&b->held, 1);   /* a wedged loop is not masked */
		return;
	}
	le_put32(d, BEAT_MAGIC);
	d[4] = BEAT_VERSION;
	d[5] = (uint8_t)b->role;
	le_put64(d + 8, ++b->tx_seq);
	if (!mac(b, d, d + BEAT_SIGNED))
		return;
	/* Lost, refused (nothing listens yet) or full: the next beat may pass. */
	if (sendto(b->fd, d, sizeof(d), MSG_DONTWAIT, (struct sockaddr *)&b->peer, b->peer_len) ==
	    (ssize_t)sizeof(d))
		atomic_fetch_add(&b->sent, 1);
}

/* A valid beat: the peer's role, a good MAC, a sequence number not seen. */
static bool valid(struct net_beat *b, const uint8_t *d, ssize_t n)
{
	uint8_t want[BEAT_MAC];
	uint64_t seq;

	if (n != BEAT_BYTES || le_get32(d) != BEAT_MAGIC || d[4] != BEAT_VERSION ||
	    d[5] != (b->role == NET_BEAT_PRIMARY ? NET_BEAT_SECONDARY : NET_BEAT_PRIMARY) ||
	    !mac(b, d, want) || CRYPTO_memcmp(want, d + BEAT_SIGNED, BEAT_MAC))
		return false;
	seq = le_get64(d + 8);
	if (seq <= b->rx_seq)
		return false;
	b->rx_seq = seq;
	return true;
}

static void read_beats(struct net_beat *b)
{
	uint8_t d[BEAT_BYTES + 1];
	struct sockaddr_storage from;
	socklen_t from_len;
	ssize_t n;

	for (;;) {
		from_len = sizeof(from);
		n = recvfrom(b->fd, d, sizeof(d), MSG_DONTWAIT, (struct sockaddr *)&from, &from_len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;          /* EAGAIN, or an ICMP error of our own sends */
		}
		if (!valid(b, d, n)) {
			atomic_fetch_add(&b->dropped, 1);
			continue;
		}
		atomic_store(&b->heard_ns, now_ns());
		atomic_fetch_add(&b->heard, 1);
		if (!b->have_peer) {     /* answer where the peer's beats come from */
			b->peer = from;
			b->peer_len = from_len;
			b->have_peer = true;
		}
	}
}

/* A beat late by a scheduling delay is a false alarm at a short timeout. */
static void raise_priority(void)
{
	struct sched_param sp = { .sched_priority = 1 };
	int r = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);

	if (r == 0)
		return;
	if (setpriority(PRIO_PROCESS, (id_t)gettid(), -10) == 0)
		log_info(TAG, "beat thread: no real-time priority (%s), nice -10", strerror(r));
	else
		log_warn(TAG, "beat thread: no real-time priority (%s) nor nice -10 (%s): beats may "
			 "be late on a busy machine", strerror(r), strerror(errno));
}

static void *beat_thread(void *arg)
{
	struct net_beat *b = arg;
	uint64_t next = now_ns();

	raise_priority();
	for (;;) {
		struct pollfd pf[2] = { { .fd = b->fd, .events = POLLIN },
					{ .fd = b->stop_fd, .events = POLLIN } };
		uint64_t now = now_ns();
		int wait_ms;

		if (now >= next) {
			pthread_mutex_lock(&b->rx_lock);
			send_beat(b);
			pthread_mutex_unlock(&b->rx_lock);
			next += b->interval_ns;
			if (next <= now)     /* we were not scheduled: no burst of beats */
				next = now + b->interval_ns;
		}
		wait_ms = (int)((next - now + 999999) / 1000000);
		if (poll(pf, 2, wait_ms) < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		if (pf[0].revents) {
			pthread_mutex_lock(&b->rx_lock);
			read_beats(b);
			pthread_mutex_unlock(&b->rx_lock);
		}
	}
	return NULL;
}

static int beat_socket(struct net_beat *b, const struct net_beat_opts *o)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int r, family = AF_INET;

	if (o->peer) {
		if ((r = net_sock_resolve(o->peer, false, &b->peer, &b->peer_len)) < 0)
			return r;
		b->have_peer = true;
		family = b->peer.ss_family;
	}
	if (o->bind) {
		if ((r = net_sock_resolve(o->bind, false, &ss, &len)) < 0)
			return r;
		family = ss.ss_family;
	}
	b->fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (b->fd < 0)
		return -errno;
	if (o->bind && bind(b->fd, (struct sockaddr *)&ss, len) < 0) {
		r = -errno;
		log_warn(TAG, "cannot bind UDP %s: %s", o->bind, strerror(-r));
		return r;
	}
	return 0;
}

int net_beat_open(const struct net_beat_opts *o, struct net_beat **out)
{
	struct net_beat *b = calloc(1, sizeof(*b));
	int r;

	if (!b)
		return -ENOMEM;
	b->fd = b->stop_fd = -1;
	pthread_mutex_init(&b->rx_lock, NULL);
	memcpy(b->key, o->key, sizeof(b->key));
	b->role = o->role;
	b->interval_ns = (o->interval_ms ? o->interval_ms : 1) * 1000000ull;
	b->progress_ns_max = o->progress_ms * 1000000ull;
	atomic_store(&b->progress_ns, now_ns());
	if ((r = beat_socket(b, o)) < 0)
		goto err;
	b->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (b->stop_fd < 0) {
		r = -errno;
		goto err;
	}
	r = -pthread_create(&b->thread, NULL, beat_thread, b);
	if (r < 0)
		goto err;
	*out = b;
	return 0;

err:
	log_warn(TAG, "no beat channel: %s", strerror(-r));
	if (b->stop_fd >= 0)
		close(b->stop_fd);
	if (b->fd >= 0)
		close(b->fd);
	OPENSSL_cleanse(b->key, sizeof(b->key));
	pthread_mutex_destroy(&b->rx_lock);
	free(b);
	return r;
}

void net_beat_close(struct net_beat *b)
{
	uint64_t one = 1;

	if (!b)
		return;
	if (write(b->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		log_warn(TAG, "cannot wake the beat thread: %s", strerror(errno));
	pthread_join(b->thread, NULL);
	close(b->stop_fd);
	close(b->fd);
	OPENSSL_cleanse(b->key, sizeof(b->key));
	pthread_mutex_destroy(&b->rx_lock);
	free(b);
}

void net_beat_progress(struct net_beat *b)
{
	if (b)
		atomic_store(&b->progress_ns, now_ns());
}

uint64_t net_beat_heard_ns(const struct net_beat *b)
{
	return b ? atomic_load(&((struct net_beat *)b)->heard_ns) : 0;
}

uint64_t net_beat_heard_now(struct net_beat *b)
{
	if (!b)
		return 0;
	pthread_mutex_lock(&b->rx_lock);
	read_beats(b);
	pthread_mutex_unlock(&b->rx_lock);
	return atomic_load(&b->heard_ns);
}

void net_beat_counts(const struct net_beat *b, uint64_t *sent, uint64_t *heard,
		     uint64_t *dropped, uint64_t *held)
{
	struct net_beat *m = (struct net_beat *)b;

	*sent = atomic_load(&m->sent);
	*heard = atomic_load(&m->heard);
	*dropped = atomic_load(&m->dropped);
	*held = atomic_load(&m->held);
}
