/* Messages that travel as the data of a Section rather than as frames of
 * their own: the machine configuration (MachineConfig) and the drill's
 * DrillRequest and DrillReport (proto/understudy.proto). Packed and
 * unpacked here so that replication/ sends bytes it does not lay out. */
#include "proto/proto.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "machine/machine.h"

int proto_config_encode(const struct machine_config *cfg, void *buf, size_t len)
{
	Understudy__MachineConfig mc = UNDERSTUDY__MACHINE_CONFIG__INIT;
	size_t n;

	mc.mem_bytes = cfg->mem_bytes;
	mc.vcpus = (uint32_t)cfg->ncpus;
	mc.guest = (char *)cfg->guest;
	mc.guest_args = (char *)cfg->guest_args;
	mc.disk_bytes = cfg->ndisks ? cfg->disk_bytes : 0;
	mc.kernel = (char *)cfg->kernel;
	mc.initrd = (char *)cfg->initrd;
	mc.append = (char *)cfg->append;
	n = protobuf_c_message_get_packed_size(&mc.base);
	if (n > len || n > INT_MAX)
		return -ENOSPC;
	return (int)protobuf_c_message_pack(&mc.base, buf);
}

static bool config_valid(const Understudy__MachineConfig *mc)
{
	return mc->vcpus >= 1 && mc->vcpus <= KVM_MAX_VCPUS && mc->mem_bytes >= (8ull << 20) &&
	       mc->mem_bytes <= MACHINE_MAX_MEM && !(mc->mem_bytes % (2ull << 20)) &&
	       strlen(mc->guest) < sizeof(((struct machine_config *)0)->guest) &&
	       strlen(mc->guest_args) < sizeof(((struct machine_config *)0)->guest_args) &&
	       strlen(mc->kernel) < sizeof(((struct machine_config *)0)->kernel) &&
	       strlen(mc->initrd) < sizeof(((struct machine_config *)0)->initrd) &&
	       strlen(mc->append) < sizeof(((struct machine_config *)0)->append) &&
	       (!mc->kernel[0] || !strcmp(mc->guest, MACHINE_LINUX_GUEST)) &&
	       (mc->kernel[0] || (!mc->initrd[0] && !mc->append[0]));
}

int proto_config_decode(const void *data, size_t len, struct machine_config *cfg)
{
	Understudy__MachineConfig *mc;
	int r = -EBADMSG;

	mc = understudy__machine_config__unpack(NULL, len, data);
	if (!mc)
		return -EBADMSG;
	if (config_valid(mc)) {
		memset(cfg, 0, sizeof(*cfg));
		cfg->mem_bytes = mc->mem_bytes;
		cfg->ncpus = (int)mc->vcpus;
		strcpy(cfg->guest, mc->guest);
		strcpy(cfg->guest_args, mc->guest_args);
		cfg->disk_bytes = mc->disk_bytes;
		cfg->ndisks = mc->disk_bytes ? 1 : 0;
		strcpy(cfg->kernel, mc->kernel);
		strcpy(cfg->initrd, mc->initrd);
		strcpy(cfg->append, mc->append);
		r = 0;
	}
	understudy__machine_config__free_unpacked(mc, NULL);
	return r;
}

/* ---- drills ---------------------------------------------------------------------- */

int proto_drill_request_encode(uint64_t id, uint8_t *buf, size_t len)
{
	Understudy__DrillRequest m = UNDERSTUDY__DRILL_REQUEST__INIT;

	m.id = id;
	if (protobuf_c_message_get_packed_size(&m.base) > len || len > INT_MAX)
		return -ENOSPC;
	return (int)protobuf_c_message_pack(&m.base, buf);
}

int proto_drill_request_decode(const void *data, size_t len, uint64_t *id)
{
	Understudy__DrillRequest *m = understudy__drill_request__unpack(NULL, len, data);

	if (!m)
		return -EBADMSG;
	*id = m->id;
	understudy__drill_request__free_unpacked(m, NULL);
	return *id ? 0 : -EBADMSG;
}

int proto_drill_report_encode(const Understudy__DrillReport *m, uint8_t *buf, size_t len)
{
	if (protobuf_c_message_get_packed_size(&m->base) > len || len > INT_MAX)
		return -ENOSPC;
	return (int)protobuf_c_message_pack(&m->base, buf);
}

int proto_drill_report_decode(const void *data, size_t len, Understudy__DrillReport *out)
{
	Understudy__DrillReport *m = understudy__drill_report__unpack(NULL, len, data);

	if (!m)
		return -EBADMSG;
	*out = *m;
	out->base.unknown_fields = NULL;
	out->base.n_unknown_fields = 0;
	understudy__drill_report__free_unpacked(m, NULL);
	return 0;
}
