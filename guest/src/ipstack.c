/* IPv4 over Ethernet for the built-in guests (see ipstack.h). */
#include "ipstack.h"

#include "glib.h"

#define ETH_ARP 0x0806
#define ETH_IP 0x0800

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static int mac_eq(const uint8_t *a, const uint8_t *b)
{
	for (int i = 0; i < 6; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

/* The Internet checksum of n bytes, starting from sum. */
static uint16_t csum(uint32_t sum, const uint8_t *p, size_t n)
{
	for (; n > 1; p += 2, n -= 2)
		sum += get16(p);
	if (n)
		sum += (uint32_t)p[0] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

int ip_parse_cidr(const char *s, uint32_t *ip, uint32_t *mask)
{
	uint32_t v = 0, bits;

	for (int i = 0; i < 4; i++) {
		uint32_t b = 0;
		int digits = 0;

		while (*s >= '0' && *s <= '9' && digits < 4)
			b = b * 10 + (uint32_t)(*s++ - '0'), digits++;
		if (!digits || b > 255 || (i < 3 && *s++ != '.'))
			return -1;
		v = v << 8 | b;
	}
	if (*s++ != '/')
		return -1;
	bits = 0;
	if (*s < '0' || *s > '9')
		return -1;
	while (*s >= '0' && *s <= '9')
		bits = bits * 10 + (uint32_t)(*s++ - '0');
	if ((*s && *s != ',') || bits < 1 || bits > 30)
		return -1;
	*ip = v;
	*mask = ~0u << (32 - bits);
	if ((v & ~*mask) == 0 || (v & ~*mask) == ~*mask)
		return -1;   /* the network or broadcast address */
	return 0;
}

void ip_init(struct ipstack *s, struct vnet *nic, uint32_t ip, uint32_t mask)
{
	memset(s, 0, sizeof(*s));
	s->nic = nic;
	s->ip = ip;
	s->mask = mask;
}

static void arp_learn(struct ipstack *s, uint32_t ip, const uint8_t *mac)
{
	if ((ip & s->mask) != (s->ip & s->mask) || ip == s->ip || (mac[0] & 1))
		return;
	for (int i = 0; i < IP_ARP_SLOTS; i++)
		if (s->arp[i].ip == ip) {
			memcpy(s->arp[i].mac, mac, 6);
			return;
		}
	s->arp[s->arp_next].ip = ip;
	memcpy(s->arp[s->arp_next].mac, mac, 6);
	s->arp_next = (s->arp_next + 1) % IP_ARP_SLOTS;
}

static const uint8_t *arp_find(struct ipstack *s, uint32_t ip)
{
	for (int i = 0; i < IP_ARP_SLOTS; i++)
		if (s->arp[i].ip == ip)
			return s->arp[i].mac;
	return 0;
}

static void eth_header(struct ipstack *s, const uint8_t *dst, uint16_t type)
{
	memcpy(s->out, dst, 6);
	memcpy(s->out + 6, s->nic->mac, 6);
	put16(s->out + 12, type);
}

/* ARP for IPv4 over Ethernet: op 1 request, 2 reply. */
static void arp_send(struct ipstack *s, uint16_t op, const uint8_t *eth_dst, const uint8_t *tha,
		     uint32_t tpa)
{
	uint8_t *a = s->out + 14;

	eth_header(s, eth_dst, ETH_ARP);
	put16(a, 1);
	put16(a + 2, ETH_IP);
	a[4] = 6;
	a[5] = 4;
	put16(a + 6, op);
	memcpy(a + 8, s->nic->mac, 6);
	put32(a + 14, s->ip);
	memcpy(a + 18, tha, 6);
	put32(a + 24, tpa);
	memset(a + 28, 0, 60 - 14 - 28);       /* padded to the minimum frame */
	vnet_send(s->nic, s->out, 60);
}

void ip_announce(struct ipstack *s)
{
	static const uint8_t bcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t zero[6];

	arp_send(s, 1, bcast, zero, s->ip);
}

static void arp_input(struct ipstack *s, const uint8_t *a, size_t len)
{
	uint32_t spa, tpa;

	if (len < 28 || get16(a) != 1 || get16(a + 2) != ETH_IP || a[4] != 6 || a[5] != 4)
		return;
	spa = get32(a + 14);
	tpa = get32(a + 24);
	if (tpa != s->ip)
		return;
	arp_learn(s, spa, a + 8);
	if (get16(a + 6) == 1 && spa != s->ip) {
		arp_send(s, 2, a + 8, a + 8, spa);
		s->arp_replies++;
	}
}

/* An IPv4 header for len bytes of payload to dst (its MAC known). */
static uint8_t *ip_header(struct ipstack *s, uint32_t dst, uint8_t proto, size_t len)
{
	const uint8_t *mac = arp_find(s, dst);
	uint8_t *h = s->out + 14;

	if (!mac || len > sizeof(s->out) - 34)
		return 0;
	eth_header(s, mac, ETH_IP);
	h[0] = 0x45;
	h[1] = 0;
	put16(h + 2, (uint16_t)(20 + len));
	put16(h + 4, s->ip_id++);
	put16(h + 6, 0x4000);                  /* don't fragment */
	h[8] = 64;
	h[9] = proto;
	put16(h + 10, 0);
	put32(h + 12, s->ip);
	put32(h + 16, dst);
	put16(h + 10, csum(0, h, 20));
	return h + 20;
}

static void icmp_input(struct ipstack *s, uint32_t src, const uint8_t *p, size_t len)
{
	uint8_t *o;

	if (len < 8 || p[0] != 8 || csum(0, p, len) != 0)
		return;                            /* an echo request, intact */
	if (!(o = ip_header(s, src, 1, len)))
		return;
	memcpy(o, p, len);
	o[0] = 0;                              /* echo reply */
	put16(o + 2, 0);
	put16(o + 2, csum(0, o, len));
	vnet_send(s->nic, s->out, 34 + len);
	s->echo_replies++;
}

/* The UDP pseudo-header's sum. */
static uint32_t pseudo(uint32_t src, uint32_t dst, size_t len)
{
	return (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + 17 + (uint32_t)len;
}

static void udp_input(struct ipstack *s, uint32_t src, uint32_t dst, const uint8_t *u,
		      size_t len)
{
	size_t ulen;

	if (len < 8 || (ulen = get16(u + 4)) < 8 || ulen > len)
		return;
	if (get16(u + 6) && csum(pseudo(src, dst, ulen), u, ulen) != 0) {
		s->dropped++;
		return;
	}
	s->udp_in_count++;
	if (s->udp_in)
		s->udp_in(s->ctx, src, get16(u), get16(u + 2), u + 8, ulen - 8);
}

int ip_udp_send(struct ipstack *s, uint32_t dst_ip, uint16_t src_port, uint16_t dst_port,
		const void *data, size_t len)
{
	uint8_t *u = ip_header(s, dst_ip, 17, 8 + len);
	uint16_t sum;

	if (!u)
		return -1;
	put16(u, src_port);
	put16(u + 2, dst_port);
	put16(u + 4, (uint16_t)(8 + len));
	put16(u + 6, 0);
	memcpy(u + 8, data, len);
	sum = csum(pseudo(s->ip, dst_ip, 8 + len), u, 8 + len);
	put16(u + 6, sum ? sum : 0xffff);
	s->udp_out++;
	return vnet_send(s->nic, s->out, 42 + len);
}

static void ipv4_input(struct ipstack *s, const uint8_t *eth, const uint8_t *h, size_t len)
{
	size_t ihl, tot;
	uint32_t src, dst;

	if (len < 20 || (h[0] >> 4) != 4 || (ihl = (size_t)(h[0] & 15) * 4) < 20 || ihl > len ||
	    (tot = get16(h + 2)) < ihl || tot > len || csum(0, h, ihl) != 0 ||
	    (get16(h + 6) & 0x3fff)) {         /* fragments are not reassembled */
		s->dropped++;
		return;
	}
	src = get32(h + 12);
	dst = get32(h + 16);
	if (dst != s->ip)
		return;
	arp_learn(s, src, eth + 6);
	if (h[9] == 1)
		icmp_input(s, src, h + ihl, tot - ihl);
	else if (h[9] == 17)
		udp_input(s, src, dst, h + ihl, tot - ihl);
}

void ip_input(struct ipstack *s, const uint8_t *frame, size_t len)
{
	static const uint8_t bcast[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

	if (len < 14 || (!mac_eq(frame, s->nic->mac) && !mac_eq(frame, bcast)))
		return;
	if (get16(frame + 12) == ETH_ARP)
		arp_input(s, frame + 14, len - 14);
	else if (get16(frame + 12) == ETH_IP)
		ipv4_input(s, frame, frame + 14, len - 14);
}

int ip_poll(struct ipstack *s)
{
	uint8_t frame[1514];
	size_t len;
	int n = 0;

	if (vnet_announce_wanted(s->nic)) {
		ip_announce(s);
		vnet_announce_ack(s->nic);
		con_puts("announced\n");
	}
	while ((len = vnet_recv(s->nic, frame, sizeof(frame))) > 0) {
		ip_input(s, frame, len);
		n++;
	}
	return n;
}

void ip_ready(struct ipstack *s, const char *who, uint64_t port)
{
	con_puts(who);
	con_puts(" ready mac=");
	for (int i = 0; i < 6; i++) {
		con_put_hex8(s->nic->mac[i]);
		if (i < 5)
			con_putc(':');
	}
	con_puts(" port=");
	con_put_u64(port);
	con_putc('\n');
	ip_announce(s);
}

void ip_serve(struct ipstack *s, const char *who)
{
	if (!ip_poll(s))
		vnet_wait(s->nic, 100000);
	if (vnet_status(s->nic) & 0x40) {
		con_puts("error ");
		con_puts(who);
		con_puts(": virtio-net needs a reset\n");
		guest_power_off(4);
	}
}
