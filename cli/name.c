/* The VM's name (--name, config key name) and where the control sockets of
 * the VMs of this host are: $UNDERSTUDY_RUN_DIR, else /run/understudy, one
 * NAME.sock each. An agent given no --control listens there; a client
 * command given --name instead of --control asks there. */
#include "cli/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "net/control.h"

#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

bool cli_name_valid(const char *name)
{
	size_t n = strlen(name);

	return n >= 1 && n < CLI_NAME_MAX && name[0] != '.' && strspn(name, NAME_CHARS) == n;
}

int cli_name_set(struct cli_name *nm, const char *arg)
{
	if (!cli_name_valid(arg)) {
		fprintf(stderr, "understudy: --name '%s': need 1..%d of A-Z a-z 0-9 . _ -, not "
			"starting with '.'\n", arg, CLI_NAME_MAX - 1);
		return 2;
	}
	snprintf(nm->name, sizeof(nm->name), "%s", arg);
	nm->given = true;
	return 0;
}

/* The last path component of path, without its extension, made a name:
 * characters outside the set become '_', a leading '.' too. */
static void name_from_path(char *out, size_t len, const char *path, bool strip_ext)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	const char *dot = strip_ext ? strrchr(base, '.') : NULL;
	size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);

	if (n >= len)
		n = len - 1;
	for (size_t i = 0; i < n; i++)
		out[i] = strchr(NAME_CHARS, base[i]) && base[i] ? base[i] : '_';
	out[n] = 0;
	if (out[0] == '.')
		out[0] = '_';
}

int cli_name_resolve(struct cli_name *nm, const struct cli_config *cf,
		     const struct machine_config *cfg)
{
	if (nm->given)
		return 0;
	nm->name[0] = 0;
	if (cf && cf->file) {
		name_from_path(nm->name, sizeof(nm->name), cf->file, true);
		if (!cli_name_valid(nm->name)) {
			fprintf(stderr, "understudy: %s: no VM name in the file's name: give name = NAME "
				"in it, or --name\n", cf->file);
			return 2;
		}
		return 0;
	}
	if (cfg && cfg->kernel[0])
		name_from_path(nm->name, sizeof(nm->name), cfg->kernel, false);
	else if (cfg && cfg->guest[0])
		snprintf(nm->name, sizeof(nm->name), "%.*s", (int)strcspn(cfg->guest, ":"), cfg->guest);
	if (nm->name[0] && !cli_name_valid(nm->name))
		nm->name[0] = 0;
	return 0;
}

const char *cli_run_dir(void)
{
	const char *d = getenv("UNDERSTUDY_RUN_DIR");

	return d && d[0] ? d : CLI_RUN_DIR;
}

int cli_name_socket(const char *dir, const char *name, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/%s.sock", dir, name);

	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		fprintf(stderr, "understudy: %s/%s.sock: too long for a socket path\n", dir, name);
		return 2;
	}
	return 0;
}

const char *cli_name_client_control(struct cli_name *nm, const char *control)
{
	if (control)
		return control;
	if (!nm->given)
		return NULL;
	if (cli_name_socket(cli_run_dir(), nm->name, nm->control, sizeof(nm->control)))
		return NULL;
	return nm->control;
}

int cli_name_agent_control(const char *cmd, struct cli_name *nm, const char **control)
{
	const char *dir = cli_run_dir();
	char *reply = NULL;

	if (*control || !nm->name[0])
		return 0;
	if (cli_name_socket(dir, nm->name, nm->control, sizeof(nm->control)))
		return 2;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "understudy %s: %s: %s (the directory of the control sockets; "
			"UNDERSTUDY_RUN_DIR or --control to put it elsewhere)\n", cmd, dir,
			strerror(errno));
		return 2;
	}
	/* A socket file whose agent answers is another VM of this name; one
	 * nobody answers on is left by an agent that died: control_open
	 * replaces it. */
	if (control_request(nm->control, "status json", 2000, &reply) >= 0) {
		free(reply);
		fprintf(stderr, "understudy %s: a VM named '%s' runs on this host already: its agent "
			"answers on %s (--name another name)\n", cmd, nm->name, nm->control);
		return 2;
	}
	*control = nm->control;
	return 0;
}
