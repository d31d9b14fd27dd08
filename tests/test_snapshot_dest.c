/* Where a snapshot file may go (checkpoint/file.c, cli/snapshot.c), without
 * a VM: a new name or a regular file, which is replaced; a symbolic link, a
 * FIFO, a socket, a directory or a device node at the destination is
 * refused and left exactly as it was (the final rename() used to turn a
 * device such as /dev/full into a regular file). The nodes are made in a
 * temporary directory: the real /dev is never touched. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "checkpoint/checkpoint.h"
#include "machine/machine.h"

struct dest {
	char dir[64];
	struct machine_config cfg;
	struct ckpt c;
};

static int setup(void **state)
{
	struct dest *d = calloc(1, sizeof(*d));
	uint8_t page[CKPT_PAGE_SIZE], blob[64];

	assert_non_null(d);
	strcpy(d->dir, "/tmp/us-snapdest-XXXXXX");
	assert_non_null(mkdtemp(d->dir));
	d->cfg = (struct machine_config){ .mem_bytes = 8 << 20, .ncpus = 1, .guest = "counter" };
	ckpt_init(&d->c);
	d->c.full = false;   /* a diff of one page: a full one would need all 2048 */
	d->c.config_digest = machine_config_digest(&d->cfg);
	memset(page, 0x5a, sizeof(page));
	memset(blob, 0x33, sizeof(blob));
	assert_int_equal(ckpt_add_page(&d->c, 0, page), 0);
	assert_int_equal(ckpt_set_state(&d->c, blob, sizeof(blob)), 0);
	*state = d;
	return 0;
}

static int teardown(void **state)
{
	struct dest *d = *state;
	char cmd[128];

	ckpt_fini(&d->c);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
	if (system(cmd) != 0)
		return -1;
	free(d);
	return 0;
}

/* How many entries d->dir holds (a temporary left behind shows here). */
static int entries(const struct dest *d)
{
	char cmd[160];
	FILE *p;
	int n = -1;

	snprintf(cmd, sizeof(cmd), "ls -A %s | wc -l", d->dir);
	p = popen(cmd, "r");
	assert_non_null(p);
	if (fscanf(p, "%d", &n) != 1)
		n = -1;
	pclose(p);
	return n;
}

/* The node at path is refused by the writer, and by the command before it
 * asks any VM (exit 2, --out named), and is unchanged afterwards. */
static void expect_refused(struct dest *d, const char *path, const char *what)
{
	const char *bin = getenv("UNDERSTUDY_BIN");
	struct stat before, after;
	int n = entries(d), r, err;

	assert_int_equal(lstat(path, &before), 0);
	r = err = ckpt_file_write(path, &d->c, &d->cfg);
	if (r >= 0)
		fail_msg("%s: a snapshot was written over it", what);
	assert_int_equal(lstat(path, &after), 0);
	if ((after.st_mode & S_IFMT) != (before.st_mode & S_IFMT) || after.st_ino != before.st_ino ||
	    after.st_rdev != before.st_rdev)
		fail_msg("%s: replaced (mode %o -> %o)", what, before.st_mode, after.st_mode);
	assert_int_equal(entries(d), n);   /* no temporary left */
	if (bin) {   /* the command: exit 2 before reaching for the control socket */
		char cmd[512];

		snprintf(cmd, sizeof(cmd), "%s snapshot --control %s/none.ctl --out %s 2>%s/err; "
			 "s=$?; grep -q -- '--out' %s/err && exit $s; exit 99", bin, d->dir, path,
			 d->dir, d->dir);
		r = system(cmd);
		assert_true(WIFEXITED(r));
		if (WEXITSTATUS(r) != 2)
			fail_msg("%s: understudy snapshot --out exited %d, want 2 naming --out", what,
				 WEXITSTATUS(r));
		snprintf(cmd, sizeof(cmd), "%s/err", d->dir);
		unlink(cmd);
	}
	printf("refused: %s (%s)\n", what, strerror(-err));
}

static void special_destinations(void **state)
{
	struct dest *d = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char path[128];
	int s;

	snprintf(path, sizeof(path), "%s/fifo", d->dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	expect_refused(d, path, "a FIFO");

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock", d->dir);
	s = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(s >= 0);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	expect_refused(d, sa.sun_path, "a socket");
	close(s);

	snprintf(path, sizeof(path), "%s/dir", d->dir);
	assert_int_equal(mkdir(path, 0700), 0);
	expect_refused(d, path, "a directory");

	snprintf(path, sizeof(path), "%s/link", d->dir);
	assert_int_equal(symlink("/dev/full", path), 0);
	expect_refused(d, path, "a symbolic link to /dev/full");

	/* the same device as /dev/full (1, 7), as a node of our own */
	snprintf(path, sizeof(path), "%s/full", d->dir);
	if (mknod(path, S_IFCHR | 0600, makedev(1, 7)) == 0)
		expect_refused(d, path, "a character device (1, 7)");
	else
		printf("SKIP: no device node made here (%s): the FIFO, socket and directory cases "
		       "ran\n", strerror(errno));
}

static void regular_destinations(void **state)
{
	struct dest *d = *state;
	struct machine_config rcfg;
	struct ckpt r;
	char path[128];
	FILE *f;

	/* a new name */
	snprintf(path, sizeof(path), "%s/new", d->dir);
	assert_int_equal(ckpt_file_write(path, &d->c, &d->cfg), 0);
	/* an existing regular file: replaced by the snapshot */
	snprintf(path, sizeof(path), "%s/old", d->dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("an older file\n", f);
	fclose(f);
	assert_int_equal(ckpt_file_write(path, &d->c, &d->cfg), 0);
	ckpt_init(&r);
	assert_int_equal(ckpt_file_read(path, &r, &rcfg), 0);
	assert_int_equal(r.npages, 1);
	ckpt_fini(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(special_destinations, setup, teardown),
		cmocka_unit_test_setup_teardown(regular_destinations, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
