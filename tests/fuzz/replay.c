/* Replays a fuzz target's saved corpus without libFuzzer: every regular file
 * in the directory argv[1] goes through LLVMFuzzerTestOneInput once.
 * Prints "N inputs replayed" and exits 0, or non-zero if the directory
 * cannot be read (a crash is a crash). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long len;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto err_file;
	buf = malloc(len ? (size_t)len : 1);
	if (!buf)
		goto err_file;
	if (fread(buf, 1, (size_t)len, f) != (size_t)len)
		goto err_buf;
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)len);
	free(buf);
	return 0;
err_buf:
	free(buf);
err_file:
	fclose(f);
	return -1;
}

int main(int argc, char **argv)
{
	char path[4096];
	struct dirent *de;
	struct stat sb;
	int n = 0, bad = 0;
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
		if (stat(path, &sb) || !S_ISREG(sb.st_mode))
			continue;
		if (replay_file(path)) {
			fprintf(stderr, "cannot read %s\n", path);
			bad++;
			continue;
		}
		n++;
	}
	closedir(dir);
	printf("%d inputs replayed from %s\n", n, argv[1]);
	return bad || n == 0 ? 1 : 0;
}
