/* Replays a fuzz target's saved corpus without libFuzzer: every regular file
 * in the directory argv[1] goes through fuzz_verdict() once, and its verdict
 * is checked against its name: ok-* must be accepted, bad-* rejected; any
 * other name is an error (a corpus file says what it expects).
 * Prints one line per mismatch and "N inputs replayed, M as expected", and
 * exits 0 only if every input gave its expected verdict (a crash or a
 * sanitizer report is a failure by itself). */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int read_file(const char *path, uint8_t **data, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto err_file;
	*data = malloc(n ? (size_t)n : 1);
	if (!*data)
		goto err_file;
	if (fread(*data, 1, (size_t)n, f) != (size_t)n)
		goto err_buf;
	fclose(f);
	*len = (size_t)n;
	return 0;
err_buf:
	free(*data);
err_file:
	fclose(f);
	return -1;
}

/* 1 if the file must be accepted, 0 rejected, -1 if its name does not say. */
static int expected_verdict(const char *name)
{
	if (!strncmp(name, "ok-", 3))
		return 1;
	if (!strncmp(name, "bad-", 4))
		return 0;
	return -1;
}

static bool replay_one(const char *dir, const char *name)
{
	char path[4096];
	uint8_t *data;
	size_t len;
	int want = expected_verdict(name), r;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (want < 0) {
		fprintf(stderr, "%s: name says neither ok- nor bad-\n", path);
		return false;
	}
	if (read_file(path, &data, &len)) {
		fprintf(stderr, "cannot read %s\n", path);
		return false;
	}
	r = fuzz_verdict(data, len);
	free(data);
	if ((r == 0) != (want == 1)) {
		fprintf(stderr, "%s: expected %s, was %s (%d)\n", path,
			want ? "accepted" : "rejected", r == 0 ? "accepted" : "rejected", r);
		return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	char path[4096];
	struct dirent *de;
	struct stat sb;
	int n = 0, good = 0;
	DIR *dir;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	dir = opendir(argv[1]);
	if (!dir) {
		perror(argv[1]);
		return 1;
	}
	while ((de = readdir(dir))) {
		snprintf(path, sizeof(path), "%s/%s", argv[1], de->d_name);
		if (stat(path, &sb) || !S_ISREG(sb.st_mode) || !strcmp(de->d_name, "README"))
			continue;
		n++;
		good += replay_one(argv[1], de->d_name);
	}
	closedir(dir);
	printf("%d inputs replayed from %s, %d as expected\n", n, argv[1], good);
	return n == 0 || good != n ? 1 : 0;
}
