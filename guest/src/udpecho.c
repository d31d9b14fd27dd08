/* udpecho: a UDP echo server on virtio-net, the oracle of the network
 * output-commit tests. udpecho:ip=A.B.C.D/N,port=P (default port 7).
 *
 * Each datagram to port P is answered to its sender with
 * "<k> <payload>", k the number of replies this guest has sent so far plus
 * one: k lives in guest RAM, so after a failover the replies go on from the
 * state of an acknowledged checkpoint, and a client that saw reply k never
 * sees a reply numbered k or lower again (output commit: reply k left only
 * once the checkpoint holding k was acknowledged). Answers ARP and ICMP
 * echo (ping), and announces itself when the device asks (takeover).
 * Prints "udpecho ready mac=... ip=..." on the console. */
#include "ipstack.h"

#include "glib.h"

struct echo {
	struct ipstack ip;
	uint16_t port;
	uint64_t k;
	uint8_t reply[1472];
};

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

static void on_udp(void *ctx, uint32_t src_ip, uint16_t src_port, uint16_t dst_port,
		   const uint8_t *data, size_t len)
{
	struct echo *e = ctx;
	size_t n;

	if (dst_port != e->port)
		return;
	n = put_dec((char *)e->reply, e->k + 1);
	e->reply[n++] = ' ';
	if (len > sizeof(e->reply) - n)
		len = sizeof(e->reply) - n;
	memcpy(e->reply + n, data, len);
	if (ip_udp_send(&e->ip, src_ip, e->port, src_port, e->reply, n + len) == 0)
		e->k++;
}

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

void guest_main(int cpu, struct guest_bootinfo *bi)
{
	uint8_t *heap = (uint8_t *)bi->heap_gpa;
	struct vnet *nic = (struct vnet *)(heap + VNET_MEM_BYTES);
	struct echo *e = (struct echo *)(heap + VNET_MEM_BYTES + 0x1000);
	const char *ip = arg_str(bi->args, "ip");
	uint32_t addr, mask;
	uint64_t port = arg_u64(bi->args, "port", 7);
	int r;

	if (cpu != 0)
		for (;;)
			guest_idle(1000000);
	if (!ip || ip_parse_cidr(ip, &addr, &mask) < 0 || port < 1 || port > 65535) {
		con_puts("error udpecho: need ip=A.B.C.D/N (a host address) and port=1..65535\n");
		guest_power_off(2);
	}
	if ((r = vnet_init(nic, heap)) < 0) {
		con_puts(r == -1 ? "error no virtio-net device (run with --net tap:NAME)\n" :
			 "error virtio-net init failed\n");
		guest_power_off(3);
	}
	ip_init(&e->ip, nic, addr, mask);
	e->ip.udp_in = on_udp;
	e->ip.ctx = e;
	e->port = (uint16_t)port;
	e->k = 0;
	ip_ready(&e->ip, "udpecho", port);
	for (;;)
		ip_serve(&e->ip, "udpecho");
}
