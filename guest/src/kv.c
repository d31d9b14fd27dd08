/* kv: a key-value store on virtio-net and virtio-blk, the oracle of the
 * disk-and-network failover tests. kv:ip=A.B.C.D/N,port=P (default 7000);
 * needs --net and --disk. kv:dump=1 (--disk only) replays the log, prints
 * every record on the console and powers off.
 *
 * One UDP datagram each way, text (a trailing "\n" or "\r\n" is dropped):
 *   PUT <reqid> <key> <value>  ->  OK <reqid> <version>
 *   GET <reqid> <key>          ->  VAL <reqid> <key> <version> <value>
 *                                  or NONE <reqid> <key>
 *   anything else with a verb and a reqid  ->  ERR <reqid> <reason>
 * reqid: 1..32 bytes 0x21..0x7e; key: 1..64 bytes 0x21..0x7e; value: the
 * rest of the datagram after the key and one space, 1..64 bytes 0x20..0x7e.
 * A datagram without a PUT/GET verb and a reqid is garbage: ignored,
 * counted. The version of a key counts its PUTs (1, 2, ...).
 *
 * Durability: a PUT appends one 512-byte record to the log (sector seq of
 * the disk), writes it and flushes the disk, and only then changes the
 * store and sends OK. A failed write or flush answers ERR and changes
 * nothing (the next PUT overwrites the same sector).
 *
 * Record: u32 magic "KVR1", u32 zero, u64 seq (= its sector), u64 version,
 * u32 client ip, u16 client port, u8 key length, u8 value length, u8 reqid
 * length, 7 zero bytes, reqid[32], key[64], value[64], zeros, and at 508 a
 * u32 CRC32C of bytes 0..507 (little-endian fields).
 *
 * Replay at boot reads the log from sector 0 and stops at the first record
 * that is not valid (magic, seq, lengths, CRC, version = the key's + 1):
 * a torn or never-written sector ends the log, and the next PUT goes there.
 *
 * Retries: the last KV_DEDUPE PUTs (client ip, port, reqid -> version) are
 * remembered, in RAM and so in every checkpoint, and rebuilt from the log
 * at replay; a PUT found there is answered "OK <reqid> <version>" again
 * and not applied. GETs are answered from the store as it is. */
#include "ipstack.h"
#include "vblk.h"

#include "glib.h"

#define KV_DEFAULT_PORT 7000
#define KV_MAXLEN 64
#define KV_REQID_MAX 32
#define KV_SLOTS 4096           /* open addressing, a power of two */
#define KV_KEYS_MAX 3584        /* keep probe runs short */
#define KV_DEDUPE 1024
#define KV_MAGIC 0x3152564bu    /* "KVR1" */
#define KV_REPLAY_SECTORS 64    /* 32 KiB a read at replay */

struct kv_slot {
	uint64_t version;       /* 0: free */
	uint8_t klen, vlen;
	char key[KV_MAXLEN], val[KV_MAXLEN];
};

struct kv_seen {
	uint32_t ip;
	uint16_t port;
	uint8_t rlen, used;
	char reqid[KV_REQID_MAX];
	uint64_t version;
};

struct kv_rec {
	uint32_t magic, zero;
	uint64_t seq, version;
	uint32_t ip;
	uint16_t port;
	uint8_t klen, vlen, rlen, pad[7];
	char reqid[KV_REQID_MAX], key[KV_MAXLEN], val[KV_MAXLEN];
	uint8_t fill[508 - 200];
	uint32_t crc;
};

_Static_assert(sizeof(struct kv_rec) == 512, "a record is one sector");

struct kv {
	struct ipstack ip;
	struct vblk *disk;
	uint8_t *io;            /* VBLK_MAX_BYTES bounce buffer */
	uint16_t port;
	uint64_t seq;           /* next record's sector */
	uint64_t nkeys, puts, gets, retries, errs, garbage;
	unsigned seen_next;
	struct kv_seen seen[KV_DEDUPE];
	struct kv_slot slot[KV_SLOTS];
	char reply[256];
};

/* ---- helpers ------------------------------------------------------------------ */

static uint32_t crc32c(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint32_t c = ~0u;

	while (n--) {
		c ^= *b++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

static int bytes_eq(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

static uint32_t hash(const char *k, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)k[i]) * 16777619u;
	return h;
}

/* Whether n bytes are all in lo..0x7e. */
static int printable(const char *s, size_t n, char lo)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < lo || s[i] > 0x7e)
			return 0;
	return 1;
}

static size_t put_dec(char *q, uint64_t v)
{
	char t[20];
	size_t n = 0, i = 0;

	do
		t[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (n)
		q[i++] = t[--n];
	return i;
}

static size_t put_str(char *q, const char *s)
{
	size_t i = 0;

	while (s[i]) {
		q[i] = s[i];
		i++;
	}
	return i;
}

static size_t put_mem(char *q, const char *s, size_t n)
{
	memcpy(q, s, n);
	return n;
}

/* ---- the store ---------------------------------------------------------------- */

/* The slot of key, or the free slot where it would go; NULL when the table
 * is full and the key is not in it. */
static struct kv_slot *slot_find(struct kv *kv, const char *key, size_t klen)
{
	uint32_t i = hash(key, klen) & (KV_SLOTS - 1);

	for (int n = 0; n < KV_SLOTS; n++, i = (i + 1) & (KV_SLOTS - 1)) {
		struct kv_slot *s = &kv->slot[i];

		if (!s->version || (s->klen == klen && bytes_eq(s->key, key, klen)))
			return s;
	}
	return 0;
}

static struct kv_seen *seen_find(struct kv *kv, uint32_t ip, uint16_t port, const char *reqid,
				 size_t rlen)
{
	for (unsigned i = 0; i < KV_DEDUPE; i++) {
		struct kv_seen *e = &kv->seen[i];

		if (e->used && e->ip == ip && e->port == port && e->rlen == rlen &&
		    bytes_eq(e->reqid, reqid, rlen))
			return e;
	}
	return 0;
}

static void seen_add(struct kv *kv, uint32_t ip, uint16_t port, const char *reqid, size_t rlen,
		     uint64_t version)
{
	struct kv_seen *e = &kv->seen[kv->seen_next];

	kv->seen_next = (kv->seen_next + 1) % KV_DEDUPE;
	e->ip = ip;
	e->port = port;
	e->rlen = (uint8_t)rlen;
	e->used = 1;
	memcpy(e->reqid, reqid, rlen);
	e->version = version;
}

/* The record r applied to the store (replay and PUT alike). */
static void apply(struct kv *kv, struct kv_slot *s, const struct kv_rec *r)
{
	if (!s->version) {
		kv->nkeys++;
		s->klen = r->klen;
		memcpy(s->key, r->key, r->klen);
	}
	s->version = r->version;
	s->vlen = r->vlen;
	memcpy(s->val, r->val, r->vlen);
	seen_add(kv, r->ip, r->port, r->reqid, r->rlen, r->version);
}

/* 0 when r is the valid record number seq, with s its key's slot. */
static int rec_check(struct kv *kv, const struct kv_rec *r, uint64_t seq, struct kv_slot **s)
{
	if (r->magic != KV_MAGIC || r->seq != seq || r->crc != crc32c(r, 508))
		return -1;
	if (r->klen < 1 || r->klen > KV_MAXLEN || r->vlen < 1 || r->vlen > KV_MAXLEN ||
	    r->rlen < 1 || r->rlen > KV_REQID_MAX)
		return -1;
	*s = slot_find(kv, r->key, r->klen);
	if (!*s || r->version != (*s)->version + 1 || (!(*s)->version && kv->nkeys >= KV_KEYS_MAX))
		return -1;
	return 0;
}

static void rec_print(const struct kv_rec *r)
{
	char line[256];
	size_t n = 0;

	n += put_str(line + n, "rec ");
	n += put_dec(line + n, r->seq);
	line[n++] = ' ';
	for (int i = 3; i >= 0; i--) {
		n += put_dec(line + n, (r->ip >> (8 * i)) & 0xff);
		line[n++] = i ? '.' : ':';
	}
	n += put_dec(line + n, r->port);
	line[n++] = ' ';
	n += put_mem(line + n, r->reqid, r->rlen);
	line[n++] = ' ';
	n += put_mem(line + n, r->key, r->klen);
	line[n++] = ' ';
	n += put_dec(line + n, r->version);
	line[n++] = ' ';
	n += put_mem(line + n, r->val, r->vlen);
	line[n++] = '\n';
	line[n] = 0;
	con_puts(line);
}

/* Reads the log from sector 0 into the store; 0, or a vblk error. */
static int replay(struct kv *kv, int print)
{
	kv->seq = 0;
	for (;;) {
		uint64_t left = kv->disk->capacity - kv->seq;
		uint32_t n = left < KV_REPLAY_SECTORS ? (uint32_t)left : KV_REPLAY_SECTORS;
		int r;

		if (n == 0)
			return 0;
		if ((r = vblk_read(kv->disk, kv->seq, kv->io, n)) < 0)
			return r;
		for (uint32_t i = 0; i < n; i++) {
			const struct kv_rec *rec = (const struct kv_rec *)(kv->io + (size_t)i * VBLK_SECTOR);
			struct kv_slot *s;

			if (rec_check(kv, rec, kv->seq, &s) < 0)
				return 0;
			if (print)
				rec_print(rec);
			apply(kv, s, rec);
			kv->seq++;
		}
	}
}

/* ---- requests ----------------------------------------------------------------- */

static void reply_send(struct kv *kv, uint32_t ip, uint16_t port, size_t n)
{
	ip_udp_send(&kv->ip, ip, kv->port, port, kv->reply, n);
}

static void reply_err(struct kv *kv, uint32_t ip, uint16_t port, const char *reqid, size_t rlen,
		      const char *reason)
{
	size_t n = put_str(kv->reply, "ERR ");

	n += put_mem(kv->reply + n, reqid, rlen);
	kv->reply[n++] = ' ';
	n += put_str(kv->reply + n, reason);
	kv->errs++;
	reply_send(kv, ip, port, n);
}

static void reply_ok(struct kv *kv, uint32_t ip, uint16_t port, const char *reqid, size_t rlen,
		     uint64_t version)
{
	size_t n = put_str(kv->reply, "OK ");

	n += put_mem(kv->reply + n, reqid, rlen);
	kv->reply[n++] = ' ';
	n += put_dec(kv->reply + n, version);
	reply_send(kv, ip, port, n);
}

static void do_get(struct kv *kv, uint32_t ip, uint16_t port, const char *reqid, size_t rlen,
		   const char *key, size_t klen)
{
	struct kv_slot *s = slot_find(kv, key, klen);
	size_t n;

	kv->gets++;
	if (!s || !s->version) {
		n = put_str(kv->reply, "NONE ");
		n += put_mem(kv->reply + n, reqid, rlen);
		kv->reply[n++] = ' ';
		n += put_mem(kv->reply + n, key, klen);
	} else {
		n = put_str(kv->reply, "VAL ");
		n += put_mem(kv->reply + n, reqid, rlen);
		kv->reply[n++] = ' ';
		n += put_mem(kv->reply + n, key, klen);
		kv->reply[n++] = ' ';
		n += put_dec(kv->reply + n, s->version);
		kv->reply[n++] = ' ';
		n += put_mem(kv->reply + n, s->val, s->vlen);
	}
	reply_send(kv, ip, port, n);
}

static void do_put(struct kv *kv, uint32_t ip, uint16_t port, const char *reqid, size_t rlen,
		   const char *key, size_t klen, const char *val, size_t vlen)
{
	struct kv_rec *r = (struct kv_rec *)kv->io;
	struct kv_seen *seen = seen_find(kv, ip, port, reqid, rlen);
	struct kv_slot *s;
	int e;

	if (seen) {
		kv->retries++;
		reply_ok(kv, ip, port, reqid, rlen, seen->version);
		return;
	}
	s = slot_find(kv, key, klen);
	if (!s || (!s->version && kv->nkeys >= KV_KEYS_MAX)) {
		reply_err(kv, ip, port, reqid, rlen, "store-full");
		return;
	}
	if (kv->seq >= kv->disk->capacity) {
		reply_err(kv, ip, port, reqid, rlen, "log-full");
		return;
	}
	memset(r, 0, sizeof(*r));
	r->magic = KV_MAGIC;
	r->seq = kv->seq;
	r->version = s->version + 1;
	r->ip = ip;
	r->port = port;
	r->klen = (uint8_t)klen;
	r->vlen = (uint8_t)vlen;
	r->rlen = (uint8_t)rlen;
	memcpy(r->reqid, reqid, rlen);
	memcpy(r->key, key, klen);
	memcpy(r->val, val, vlen);
	r->crc = crc32c(r, 508);
	/* durable first, then the store, then the reply */
	if ((e = vblk_write(kv->disk, kv->seq, r, 1)) < 0 || (e = vblk_flush(kv->disk)) < 0) {
		con_puts("kv: log write failed: ");
		con_puts(vblk_strerror(e));
		con_putc('\n');
		reply_err(kv, ip, port, reqid, rlen, "disk-error");
		return;
	}
	kv->seq++;
	kv->puts++;
	apply(kv, s, r);
	reply_ok(kv, ip, port, reqid, rlen, r->version);
}

/* The length of the token at s (up to a space or the end of n bytes). */
static size_t token(const char *s, size_t n)
{
	size_t i = 0;

	while (i < n && s[i] != ' ')
		i++;
	return i;
}

static void on_udp(void *ctx, uint32_t src_ip, uint16_t src_port, uint16_t dst_port,
		   const uint8_t *data, size_t len)
{
	struct kv *kv = ctx;
	const char *p = (const char *)data, *reqid, *key;
	size_t rlen, klen;
	int put;

	if (dst_port != kv->port)
		return;
	if (len && p[len - 1] == '\n')
		len--;
	if (len && p[len - 1] == '\r')
		len--;
	if (len < 5 || (!bytes_eq(p, "PUT ", 4) && !bytes_eq(p, "GET ", 4))) {
		kv->garbage++;
		return;
	}
	put = p[0] == 'P';
	reqid = p + 4;
	len -= 4;
	rlen = token(reqid, len);
	if (rlen < 1 || rlen > KV_REQID_MAX || !printable(reqid, rlen, 0x21)) {
		kv->garbage++;
		return;
	}
	key = reqid + rlen + 1;
	len = rlen < len ? len - rlen - 1 : 0;
	klen = token(key, len);
	if (klen < 1 || klen > KV_MAXLEN || !printable(key, klen, 0x21)) {
		reply_err(kv, src_ip, src_port, reqid, rlen, "bad-key");
		return;
	}
	if (!put) {
		if (klen != len)
			reply_err(kv, src_ip, src_port, reqid, rlen, "bad-request");
		else
			do_get(kv, src_ip, src_port, reqid, rlen, key, klen);
		return;
	}
	if (klen + 1 >= len || len - klen - 1 > KV_MAXLEN ||
	    !printable(key + klen + 1, len - klen - 1, 0x20)) {
		reply_err(kv, src_ip, src_port, reqid, rlen, "bad-value");
		return;
	}
	do_put(kv, src_ip, src_port, reqid, rlen, key, klen, key + klen + 1, len - klen - 1);
}

/* ---- boot ----------------------------------------------------------------------- */

static const char *arg_str(const char *args, const char *key)
{
	for (const char *p = args; *p; ) {
		const char *k = key;

		while (*k && *p == *k)
			p++, k++;
		if (!*k && *p == '=')
			return p + 1;
		while (*p && *p != ',')
			p++;
		if (*p == ',')
			p++;
	}
	return 0;
}

static void report_boot(struct kv *kv)
{
	con_puts("kv replayed ");
	con_put_u64(kv->seq);
	con_puts(" records, ");
	con_put_u64(kv->nkeys);
	con_puts(" keys; log ");
	con_put_u64(kv->seq);
	con_putc('/');
	con_put_u64(kv->disk->capacity);
	con_puts(" sectors\n");
}

/* Heap layout: NIC rings and buffers | struct vnet | disk ring | struct vblk
 * | bounce buffer | struct kv. */
#define OFF_VNET   VNET_MEM_BYTES
#define OFF_VBLKM  (OFF_VNET + 0x1000)
#define OFF_VBLK   (OFF_VBLKM + VBLK_MEM_BYTES)
#define OFF_IO     (OFF_VBLK + 0x1000)
#define OFF_KV     (OFF_IO + VBLK_MAX_BYTES)

void guest_main(int cpu, struct guest_bootinfo *bi)
{
	uint8_t *heap = (uint8_t *)bi->heap_gpa;
	struct vnet *nic = (struct vnet *)(heap + OFF_VNET);
	struct vblk *disk = (struct vblk *)(heap + OFF_VBLK);
	struct kv *kv = (struct kv *)(heap + OFF_KV);
	const char *ip = arg_str(bi->args, "ip");
	uint64_t port = arg_u64(bi->args, "port", KV_DEFAULT_PORT);
	int dump = arg_u64(bi->args, "dump", 0) != 0;
	uint32_t addr = 0, mask = 0;
	int r;

	if (cpu != 0)
		for (;;)
			guest_idle(1000000);
	if ((!dump && (!ip || ip_parse_cidr(ip, &addr, &mask) < 0)) || port < 1 || port > 65535) {
		con_puts("error kv: need ip=A.B.C.D/N (a host address) and port=1..65535, "
			 "or dump=1\n");
		guest_power_off(2);
	}
	if ((uint64_t)OFF_KV + sizeof(*kv) > bi->mem_bytes - bi->heap_gpa) {
		con_puts("error kv: not enough guest memory\n");
		guest_power_off(3);
	}
	memset(kv, 0, sizeof(*kv));
	kv->disk = disk;
	kv->io = heap + OFF_IO;
	kv->port = (uint16_t)port;
	if ((r = vblk_init(disk, heap + OFF_VBLKM, 0)) < 0) {
		con_puts(r == -1 ? "error kv: no virtio-blk device (run with --disk FILE)\n" :
			 "error kv: virtio-blk init failed\n");
		guest_power_off(3);
	}
	if ((r = replay(kv, dump)) < 0) {
		con_puts("error kv: reading the log: ");
		con_puts(vblk_strerror(r));
		con_putc('\n');
		guest_power_off(4);
	}
	report_boot(kv);
	if (dump)
		guest_power_off(0);
	if ((r = vnet_init(nic, heap)) < 0) {
		con_puts(r == -1 ? "error kv: no virtio-net device (run with --net tap:NAME)\n" :
			 "error kv: virtio-net init failed\n");
		guest_power_off(3);
	}
	ip_init(&kv->ip, nic, addr, mask);
	kv->ip.udp_in = on_udp;
	kv->ip.ctx = kv;
	ip_ready(&kv->ip, "kv", port);
	for (;;) {
		ip_serve(&kv->ip, "kv");
		if (vblk_status(disk) & 0x40) {
			con_puts("error kv: virtio-blk needs a reset\n");
			guest_power_off(4);
		}
	}
}
