/* Test mode (UNDERSTUDY_VERIFY): the standby equals the primary at every
 * acknowledged epoch. The primary digests RAM and the complete machine state
 * read from KVM in the pause (checkpoint/digest.c) and sends it in the
 * epoch's "verify" section; the secondary, after applying the epoch, reads
 * its standby back from KVM, digests it the same way and compares. Costs a
 * full-RAM CRC in every pause: tests run failover trials with and without. */
#include "replication/replication.h"

#include <errno.h>
#include <string.h>

#include "checkpoint/checkpoint.h"

#define TAG "verify"

int repl_verify_pack(struct proto_buf *b, const struct proto_verify *d)
{
	uint8_t buf[PROTO_VERIFY_MAX_BYTES];
	size_t n = proto_verify_encode(d, buf, sizeof(buf));

	if (!n)
		return -EINVAL;
	return repl_section_pack(b, PROTO_SECTION_VERIFY, buf, n);
}

bool repl_verify_standby(struct machine *m, const struct proto_verify *want, uint64_t epoch)
{
	struct proto_verify got;
	char diff[512];
	int r, n;

	if ((r = ckpt_digest_machine(m, &got)) < 0) {
		log_error(TAG, "VERIFY FAILED at epoch %llu: the standby's state cannot be read: %s",
			  (unsigned long long)epoch, strerror(-r));
		return false;
	}
	n = ckpt_digest_diff(want, &got, diff, sizeof(diff));
	if (!n)
		return true;
	log_error(TAG, "VERIFY FAILED at epoch %llu: the standby differs from the primary in %d "
		  "part(s): %s", (unsigned long long)epoch, n, diff);
	return false;
}
