#include "guest/guest.h"

#include <string.h>

extern const uint8_t guest_counter_start[], guest_counter_end[];
extern const uint8_t guest_dirty_start[], guest_dirty_end[];
extern const uint8_t guest_stress_start[], guest_stress_end[];
extern const uint8_t guest_blk_start[], guest_blk_end[];
extern const uint8_t guest_udpecho_start[], guest_udpecho_end[];
extern const uint8_t guest_kv_start[], guest_kv_end[];

#define IMAGE(n, s, k) { #n, s, k, guest_##n##_start, 0 }

const struct guest_image *guest_list(void)
{
	static struct guest_image images[] = {
		IMAGE(counter, "request/response counter over the serial console (failover oracle): "
		      "counter:area_mb=N,dense=0|1,churn_mb=N,churn_rate_mb=N",
		      "area_mb,dense,churn_mb,churn_rate_mb"),
		IMAGE(dirty, "dirties a working set at a set rate: dirty:mb=N,rate_mb=N,report_ms=N,"
		      "hot_mb=N (after one pass, rewrite only the first N MiB)",
		      "mb,rate_mb,report_ms,hot_mb"),
		IMAGE(stress, "exercises all machine state (timer, SSE/AVX, own mappings, 2 vCPUs); "
		      "'check' self-tests", ""),
		IMAGE(blk, "virtio-blk driver on the console (needs --disk FILE): info, "
		      "write SECTOR HEX, read SECTOR, selftest START N PASS, check START N PASS, "
		      "flush, id, discard SECTOR N, msix, evil", ""),
		IMAGE(udpecho, "UDP echo on virtio-net (needs --net tap:NAME): udpecho:ip=A.B.C.D/N,"
		      "port=P; replies '<k> <payload>', k counting its replies; answers ping and ARP",
		      "ip=addr,port"),
		IMAGE(kv, "key-value store on virtio-net and a disk log (needs --net tap:NAME and "
		      "--disk FILE): kv:ip=A.B.C.D/N,port=P (default 7000); UDP 'PUT reqid key value', "
		      "'GET reqid key'; kv:dump=1 prints the log", "ip=addr,port,dump"),
		{ NULL, NULL, NULL, NULL, 0 },
	};
	/* Sizes are link-time differences; fill them on first use (idempotent). */
	images[0].size = guest_counter_end - guest_counter_start;
	images[1].size = guest_dirty_end - guest_dirty_start;
	images[2].size = guest_stress_end - guest_stress_start;
	images[3].size = guest_blk_end - guest_blk_start;
	images[4].size = guest_udpecho_end - guest_udpecho_start;
	images[5].size = guest_kv_end - guest_kv_start;
	return images;
}

const struct guest_image *guest_find(const char *name)
{
	for (const struct guest_image *g = guest_list(); g->name; g++)
		if (!strcmp(g->name, name))
			return g;
	return NULL;
}
