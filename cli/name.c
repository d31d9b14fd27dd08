/* The VM's name (--name, config key name) and where the control sockets of
 * the VMs of this host are: $UNDERSTUDY_RUN_DIR, else /run/understudy for
 * root, else $XDG_RUNTIME_DIR/understudy (/tmp/understudy-UID without it),
 * one NAME.sock each. An agent given no --control listens there; a client
 * command given --name instead of --control asks there. */
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "net/control.h"
#include "replication/metrics.h"

#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

_Static_assert(CLI_NAME_MAX == REPL_NAME_MAX, "a name fits a peer's Hello");

bool cli_name_valid(const char *name)
{
	return repl_name_valid(name);
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

const char *cli_run_dir(char *buf, size_t len, bool *is_default)
{
	const char *d = getenv("UNDERSTUDY_RUN_DIR");
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	*is_default = !(d && d[0]);
	if (d && d[0])
		snprintf(buf, len, "%s", d);
	else if (geteuid() == 0)
		snprintf(buf, len, "%s", CLI_RUN_DIR);
	else if (xdg && xdg[0] == '/')
		snprintf(buf, len, "%s/understudy", xdg);
	else
		snprintf(buf, len, "/tmp/understudy-%u", (unsigned)geteuid());
	return buf;
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
	char dir[PATH_MAX];
	bool is_default;

	if (cli_name_socket(cli_run_dir(dir, sizeof(dir), &is_default), nm->name, nm->control,
			    sizeof(nm->control)))
		return NULL;
	return nm->control;
}

/* The directory of the control sockets: made 0700 when missing (its
 * parent must exist). A default one must then be a directory of ours that
 * nobody else may write to (/tmp/understudy-UID could have been made by
 * another user). 0 or -errno. */
static int make_socket_dir(const char *dir, bool is_default)
{
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (!is_default)
		return 0;
	if (lstat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	if (st.st_uid != geteuid() || (st.st_mode & 022))
		return -EPERM;
	return 0;
}

/* The directory part of a socket path: "." for a bare file name. */
static void dir_of(const char *path, char *out, size_t len)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		snprintf(out, len, ".");
	else if (slash == path)
		snprintf(out, len, "/");
	else
		snprintf(out, len, "%.*s", (int)(slash - path), path);
}

int cli_name_agent_control(const char *cmd, struct cli_name *nm, const char **control)
{
	char dir[PATH_MAX];
	char *reply = NULL;
	bool is_default;
	int r;

	if (*control) {
		/* Given (--control, control =): its directory is made when
		 * missing; one that cannot be is the operator's to fix. An
		 * existing directory (/tmp, a shared one) is taken as it is. */
		dir_of(*control, dir, sizeof(dir));
		if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
			fprintf(stderr, "understudy %s: --control %s: cannot make its directory "
				"%s: %s\n", cmd, *control, dir, strerror(errno));
			return 2;
		}
		return 0;
	}
	if (!nm->name[0])
		return 0;
	cli_run_dir(dir, sizeof(dir), &is_default);
	if (cli_name_socket(dir, nm->name, nm->control, sizeof(nm->control)))
		return 2;
	r = make_socket_dir(dir, is_default);
	if (r < 0 && is_default) {
		/* No default place for the socket: the VM runs all the same,
		 * without one (status, list and --name cannot reach it). */
		log_warn("cli", "%s: %s: running without a control socket (--control PATH or "
			 "UNDERSTUDY_RUN_DIR to have one)", dir, strerror(-r));
		return 0;
	}
	if (r < 0) {
		fprintf(stderr, "understudy %s: UNDERSTUDY_RUN_DIR %s: %s (the directory of the "
			"control sockets)\n", cmd, dir, strerror(-r));
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
