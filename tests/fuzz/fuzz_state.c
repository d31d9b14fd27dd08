/* Fuzz target: a machine-state blob (the "state" section of an epoch, the
 * state of a snapshot file) through the checkpoint's decoder, which runs
 * every proto/ state decoder: header, section headers and checksums, and
 * the vcpu, vm, uart, pci and platform section data. The digest and vCPU count it must
 * match are taken from the blob's own header, so a well-formed blob can be
 * accepted. Accepted: ckpt_state_decode() returned 0. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "checkpoint/checkpoint.h"
#include "proto/proto.h"
#include "tests/fuzz/fuzz.h"

int fuzz_verdict(const uint8_t *data, size_t size)
{
	static struct ckpt_image *img;
	struct proto_state_hdr h;
	int ncpus, r;

	if (!img && !(img = malloc(sizeof(*img))))
		return -ENOMEM;
	if ((r = proto_state_hdr_decode(data, size, &h)) < 0)
		return r;
	if ((ncpus = ckpt_state_ncpus(data, size)) < 0)
		return ncpus;
	return ckpt_state_decode(data, size, h.digest, ncpus, img);
}

FUZZ_LIBFUZZER_ENTRY
