/* Restoring a chain of snapshot files: a full snapshot and the diffs taken
 * after it, each naming the one before as its parent. */
#include "checkpoint/checkpoint.h"

#include <errno.h>

int ckpt_file_apply_chain(struct machine *m, struct ckpt *c, uint64_t base_id, char *const *files,
			  int n, struct ckpt_chain_error *err)
{
	struct machine_config cfg;
	struct ckpt_file_info info = { .id = base_id };
	uint64_t prev = 0;
	int r;

	for (int i = 0; i < n; i++) {
		err->file = i;
		if (i > 0) {
			err->fault = CKPT_CHAIN_READ;
			if ((r = ckpt_file_read_ex(files[i], c, &cfg, &info)) < 0)
				return r;
			err->fault = CKPT_CHAIN_LINK;
			if (c->full || info.parent_id != prev)
				return -EINVAL;
		}
		err->fault = CKPT_CHAIN_APPLY;
		if ((r = ckpt_apply(m, c)) < 0)
			return r;
		prev = info.id;
	}
	return 0;
}
