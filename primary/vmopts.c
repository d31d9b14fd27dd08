#include "primary/agent.h"

#include <stdlib.h>
#include <string.h>

#include "guest/guest.h"
#include "net/console.h"

void vm_options_init(struct vm_options *o)
{
	memset(o, 0, sizeof(*o));
	o->cfg.mem_bytes = 64ull << 20;
	o->cfg.ncpus = 1;
	o->console = "stdio";
}

void agent_print_guests(FILE *f)
{
	for (const struct guest_image *g = guest_list(); g->name; g++)
		fprintf(f, "  %-10s %s\n", g->name, g->summary);
}

int vm_options_parse(struct vm_options *o, int opt, const char *arg)
{
	char err[256];
	char *end;
	long n;

	switch (opt) {
	case 1000:
		if (machine_parse_guest(&o->cfg, arg, err, sizeof(err)) < 0) {
			fprintf(stderr, "understudy: --guest: %s\n", err);
			return 2;
		}
		return 0;
	case 1001:
		if (machine_parse_size(arg, &o->cfg.mem_bytes) < 0 || o->cfg.mem_bytes < (8ull << 20) ||
		    o->cfg.mem_bytes > MACHINE_MAX_MEM || o->cfg.mem_bytes % (2ull << 20)) {
			fprintf(stderr, "understudy: --mem '%s': need a multiple of 2M between 8M and 60G\n", arg);
			return 2;
		}
		return 0;
	case 1002:
		n = strtol(arg, &end, 10);
		if (*end || n < 1 || n > KVM_MAX_VCPUS) {
			fprintf(stderr, "understudy: --cpus '%s': need 1..%d\n", arg, KVM_MAX_VCPUS);
			return 2;
		}
		o->cfg.ncpus = (int)n;
		return 0;
	case 1003:
		if (console_check_spec(arg) < 0) {
			fprintf(stderr, "understudy: --console '%s': use stdio or tcp:HOST:PORT\n", arg);
			return 2;
		}
		o->console = arg;
		return 0;
	case 1004:
	case 1005:
	case 1006:
		fprintf(stderr, "understudy: Linux guests (--kernel/--initrd/--append) are not supported "
				"by this build yet; use --guest\n");
		return 2;
	default:
		return 2;
	}
}

int vm_options_check(const struct vm_options *o)
{
	if (!o->cfg.guest[0]) {
		fprintf(stderr, "understudy: --guest is required (built-in guests:");
		for (const struct guest_image *g = guest_list(); g->name; g++)
			fprintf(stderr, " %s", g->name);
		fprintf(stderr, ")\n");
		return 2;
	}
	return 0;
}
