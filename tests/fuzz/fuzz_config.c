/* Fuzz target: the machine configuration a secondary receives (the data
 * of the "machine-config" section, a packed MachineConfig) through
 * proto_config_decode(). Accepted: it returned 0; the decoded configuration
 * is then within the limits a machine can be built with. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "replication/replication.h"
#include "tests/fuzz/fuzz.h"

int fuzz_verdict(const uint8_t *data, size_t size)
{
	struct machine_config cfg;
	int r = proto_config_decode(data, size, &cfg);

	if (r == 0 && (cfg.ncpus < 1 || cfg.ncpus > KVM_MAX_VCPUS ||
		       cfg.mem_bytes > MACHINE_MAX_MEM ||
		       !memchr(cfg.guest, 0, sizeof(cfg.guest)) ||
		       !memchr(cfg.guest_args, 0, sizeof(cfg.guest_args))))
		abort(); /* the decoder let an impossible configuration through */
	return r;
}

FUZZ_LIBFUZZER_ENTRY
