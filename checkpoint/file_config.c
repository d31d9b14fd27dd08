/* The "config" section of a snapshot file (version 3): the whole machine
 * configuration, as the packed MachineConfig the primary's Hello carries
 * (proto/understudy.proto, proto_config_encode). The header already holds
 * the memory size, vCPUs, guest and its arguments, the devices and the
 * NIC's MAC (they make the configuration digest); what the section adds is
 * how the machine boots: a Linux guest's kernel, initrd and command line,
 * which a reboot of the restored guest boots from.
 *
 * Read after every checksum of the file matched, so what it checks is
 * meaning, not damage: the bytes unpack, the strings fit the configuration's
 * fields, a kernel only with the "linux" guest (an initrd or command line
 * only with a kernel), and what the header also says it says the same. The
 * ranges proto_config_decode checks (a real machine's memory size) are the
 * header's business here: check_header in file.c bounds them. */
#include "checkpoint/checkpoint.h"
#include "proto/proto.h"

#include <errno.h>
#include <string.h>

#define TAG "snapshot"

int ckpt_file_config_encode(const struct machine_config *cfg, uint8_t *buf, size_t len)
{
	int n = proto_config_encode(cfg, buf, len);

	if (n <= 0) {
		log_error(TAG, "the machine configuration does not encode (%d)", n);
		return n < 0 ? n : -EINVAL;
	}
	return n;
}

static bool fits(const char *s, size_t cap)
{
	return strlen(s) < cap;
}

/* mc against the header's configuration hdr: the same machine, a boot
 * source that fits. */
static bool config_agrees(const Understudy__MachineConfig *mc, const struct machine_config *hdr)
{
	bool linux_guest = !strcmp(mc->guest, MACHINE_LINUX_GUEST);

	return mc->mem_bytes == hdr->mem_bytes && mc->vcpus == (uint32_t)hdr->ncpus &&
	       fits(mc->guest, sizeof(hdr->guest)) && !strcmp(mc->guest, hdr->guest) &&
	       fits(mc->guest_args, sizeof(hdr->guest_args)) &&
	       !strcmp(mc->guest_args, hdr->guest_args) &&
	       fits(mc->kernel, sizeof(hdr->kernel)) && fits(mc->initrd, sizeof(hdr->initrd)) &&
	       fits(mc->append, sizeof(hdr->append)) && (!mc->kernel[0] || linux_guest) &&
	       (mc->kernel[0] || (!mc->initrd[0] && !mc->append[0]));
}

int ckpt_file_config_decode(const uint8_t *data, size_t len, struct machine_config *cfg)
{
	Understudy__MachineConfig *mc = understudy__machine_config__unpack(NULL, len, data);
	int r = -EBADMSG;

	if (!mc) {
		log_error(TAG, "section 'config' is not a machine configuration");
		return -EBADMSG;
	}
	if (config_agrees(mc, cfg)) {
		strcpy(cfg->kernel, mc->kernel);
		strcpy(cfg->initrd, mc->initrd);
		strcpy(cfg->append, mc->append);
		r = 0;
	} else {
		log_error(TAG, "section 'config' disagrees with the header or is out of range");
	}
	understudy__machine_config__free_unpacked(mc, NULL);
	return r;
}
