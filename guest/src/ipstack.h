/* A minimal IPv4 host for the built-in guests, on a vnet: Ethernet II, ARP
 * (answers requests for its address, learns senders, announces itself with
 * a gratuitous ARP), IPv4 without options or fragments, ICMP echo, UDP.
 * One address, one subnet, no gateway: peers are on the link. */
#ifndef US_GUEST_IPSTACK_H
#define US_GUEST_IPSTACK_H

#include "vnet.h"

#define IP_ARP_SLOTS 16

struct ip_arp {
	uint32_t ip;
	uint8_t mac[6];
};

struct ipstack {
	struct vnet *nic;
	uint32_t ip, mask;          /* host order */
	struct ip_arp arp[IP_ARP_SLOTS];
	unsigned arp_next;
	uint16_t ip_id;
	/* A UDP datagram for this host. */
	void (*udp_in)(void *ctx, uint32_t src_ip, uint16_t src_port, uint16_t dst_port,
		       const uint8_t *data, size_t len);
	void *ctx;
	uint64_t arp_replies, echo_replies, udp_in_count, udp_out, dropped;
	uint8_t out[1514];
};

/* "A.B.C.D/N" -> ip, mask; 0, or -1 when it is not one. */
int ip_parse_cidr(const char *s, uint32_t *ip, uint32_t *mask);
void ip_init(struct ipstack *s, struct vnet *nic, uint32_t ip, uint32_t mask);
/* One received Ethernet frame. */
void ip_input(struct ipstack *s, const uint8_t *frame, size_t len);
/* A datagram to dst (on the link; its MAC must be known, as it is for the
 * sender of a datagram just received): 0, or -1. */
int ip_udp_send(struct ipstack *s, uint32_t dst_ip, uint16_t src_port, uint16_t dst_port,
		const void *data, size_t len);
/* A gratuitous ARP (request for its own address, broadcast). */
void ip_announce(struct ipstack *s);
/* Receives and handles every waiting frame; answers the device's announce
 * request; returns the number of frames handled. */
int ip_poll(struct ipstack *s);
/* Says "<who> ready mac=M port=P" on the console and announces itself. */
void ip_ready(struct ipstack *s, const char *who, uint64_t port);
/* One round of a server's loop: handles what came in, else waits up to
 * 100 ms for a frame; a NIC that needs a reset powers the guest off (4). */
void ip_serve(struct ipstack *s, const char *who);

#endif
