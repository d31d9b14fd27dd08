/* Machine configuration: command-line values, checks, the digest. */
#include "machine/machine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest/guest.h"

int machine_parse_size(const char *s, uint64_t *bytes)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end == 'i' && shift)
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v > (UINT64_MAX >> shift))
		return -EINVAL;
	*bytes = (uint64_t)v << shift;
	return 0;
}

int machine_check_mem(uint64_t mem_bytes)
{
	if (mem_bytes < MACHINE_MIN_MEM || mem_bytes > MACHINE_MAX_MEM || mem_bytes % MACHINE_MEM_ALIGN)
		return -EINVAL;
	return 0;
}

uint64_t machine_host_mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	unsigned long long kib;
	uint64_t bytes = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
			bytes = (uint64_t)kib << 10;
			break;
		}
	fclose(f);
	return bytes;
}

/* Each argument is a key the guest knows with a decimal number: the guests
 * themselves ignore what they do not know, so a typo would run silently. */
static int check_guest_args(const struct guest_image *g, const char *args, char *err,
			    size_t errlen)
{
	const char *p = args;

	while (*p) {
		const char *eq = strchr(p, '='), *end = strchr(p, ',');
		size_t klen;
		const char *k, *digits = "0123456789";
		bool known = false;

		if (!end)
			end = p + strlen(p);
		if (!eq || eq > end || eq == p) {
			snprintf(err, errlen, "guest %s: bad argument '%.*s' (want key=number)", g->name,
				 (int)(end - p), p);
			return -EINVAL;
		}
		klen = (size_t)(eq - p);
		/* "k=addr" in the list: k takes an address (digits, dots, a slash). */
		for (k = g->keys; *k; ) {
			size_t n = strcspn(k, ",="), all = strcspn(k, ",");

			if (n == klen && !strncmp(k, p, n)) {
				known = true;
				digits = k[n] == '=' ? "0123456789./" : "0123456789";
			}
			k += all + (k[all] == ',');
		}
		if (!known) {
			snprintf(err, errlen, "guest %s: unknown argument '%.*s' (known: %s)", g->name,
				 (int)klen, p, g->keys[0] ? g->keys : "none");
			return -EINVAL;
		}
		if (eq + 1 == end || strspn(eq + 1, digits) < (size_t)(end - eq - 1)) {
			snprintf(err, errlen, "guest %s: bad value for '%.*s' (want %s)", g->name,
				 (int)klen, p, digits[10] ? "an address" : "a decimal number");
			return -EINVAL;
		}
		p = *end ? end + 1 : end;
	}
	return 0;
}

int machine_parse_guest(struct machine_config *cfg, const char *spec, char *err, size_t errlen)
{
	const char *colon = strchr(spec, ':');
	size_t n = colon ? (size_t)(colon - spec) : strlen(spec);

	if (n == 0 || n >= sizeof(cfg->guest)) {
		snprintf(err, errlen, "bad guest '%s'", spec);
		return -EINVAL;
	}
	memcpy(cfg->guest, spec, n);
	cfg->guest[n] = 0;
	if (!guest_find(cfg->guest)) {
		int k = snprintf(err, errlen, "unknown guest '%s' (built-in guests:", cfg->guest);

		for (const struct guest_image *g = guest_list(); g->name && k > 0 && (size_t)k < errlen; g++)
			k += snprintf(err + k, errlen - (size_t)k, " %s", g->name);
		if (k > 0 && (size_t)k < errlen)
			snprintf(err + k, errlen - (size_t)k, ")");
		return -ENOENT;
	}
	if (colon && strlen(colon + 1) >= sizeof(cfg->guest_args)) {
		snprintf(err, errlen, "guest arguments too long");
		return -EINVAL;
	}
	snprintf(cfg->guest_args, sizeof(cfg->guest_args), "%s", colon ? colon + 1 : "");
	return check_guest_args(guest_find(cfg->guest), cfg->guest_args, err, errlen);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n--)
		h = (h ^ *b++) * 0x100000001b3ull;
	return h;
}

/* Version of the device set: bump when a device is added or its state changes. */
#define MACHINE_DEVICES_VERSION 2u

uint64_t machine_config_digest(const struct machine_config *cfg)
{
	uint64_t h = 0xcbf29ce484222325ull;
	uint32_t ver = MACHINE_DEVICES_VERSION, ncpus = (uint32_t)cfg->ncpus;

	h = fnv1a(h, &cfg->mem_bytes, sizeof(cfg->mem_bytes));
	h = fnv1a(h, &ncpus, sizeof(ncpus));
	h = fnv1a(h, &ver, sizeof(ver));
	h = fnv1a(h, cfg->guest, strlen(cfg->guest));
	/* The device set: a virtio-blk function or not (not which image: the
	 * standby's copy has a path of its own). */
	if (cfg->ndisks)
		h = fnv1a(h, "virtio-blk", 10);
	/* A NIC, and its MAC when one is given (else the MAC is derived from
	 * this digest: machine_net_mac). */
	if (cfg->nnets) {
		static const uint8_t zero[6];

		h = fnv1a(h, "virtio-net", 10);
		if (memcmp(cfg->net_mac, zero, 6))
			h = fnv1a(h, cfg->net_mac, 6);
	}
	return h;
}
