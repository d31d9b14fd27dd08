/* Drill reports kept as files (--report-dir): one JSON file a drill, named
 * by its UTC time and kind, never overwriting another. Shared by the kinds
 * (cli/drill.c, cli/drill_switch.c). */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

int cli_drill_keep_report(const char *dir, json_object *rep)
{
	char path[4096], stamp[32];
	time_t now = time(NULL);
	struct tm tm;
	FILE *f;
	json_object *k;
	const char *kind = json_object_object_get_ex(rep, "kind", &k) ? json_object_get_string(k) :
			   "unknown";

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		goto err;
	snprintf(path, sizeof(path), "%s/drill-%s-%s.json", dir, stamp, kind);
	for (int i = 2; access(path, F_OK) == 0 && i < 100; i++)
		snprintf(path, sizeof(path), "%s/drill-%s-%s-%d.json", dir, stamp, kind, i);
	if (!(f = fopen(path, "w")))
		goto err;
	fprintf(f, "%s\n", json_object_to_json_string_ext(rep, JSON_C_TO_STRING_PRETTY));
	if (fclose(f) != 0)
		goto err;
	fprintf(stderr, "report kept in %s\n", path);
	return 0;
err:
	fprintf(stderr, "understudy drill: cannot keep the report in %s: %s\n", dir, strerror(errno));
	return -errno;
}
