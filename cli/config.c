/* --config FILE: options from a file, for every subcommand.
 *
 * One "key = value" per line (libinih reads it), the keys being the long
 * options of the command without the dashes. Rather than a second way of
 * setting each option, the file is turned back into command-line words: the
 * command then parses
 *     argv[0] --key=value (from the files, in order) ... original arguments
 * with its usual getopt_long loop, so an option added to a command later can
 * be set from a file with no change here, and a value from a file goes
 * through exactly the checks of the same value typed on the command line.
 *
 * The command line wins: a key whose option the command line also gives
 * (in any spelling getopt accepts, abbreviations included) is dropped from
 * the file's words, and so is a key a later --config file gives again. So
 * the file's value is not even checked then, and "the last one wins" holds
 * for options that accumulate too, where getopt's order alone would keep
 * both. Within one file a key may repeat: all its words are kept, in order.
 *
 * Each word made from a file remembers its file and line, so that when the
 * command rejects the value, cli_config_blame() can say where it came from. */
#include "cli/cli.h"

#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* What the inih callbacks need while one file is read. */
struct config_reader {
	struct cli_config *cf;
	const char *cmd;
	const struct option *longopts;
	FILE *f;
	const char *file;
	unsigned line;          /* of the line inih was last given */
	bool truncated;         /* that line did not fit inih's buffer */
	int status;             /* 0, or 2 once an error was printed */
};

void cli_config_fini(struct cli_config *cf)
{
	for (size_t i = 0; i < cf->nwords; i++)
		free(cf->words[i].text);
	free(cf->words);
	free(cf->argv);
	memset(cf, 0, sizeof(*cf));
}

static const struct option *find_option(const struct option *longopts, const char *name)
{
	for (const struct option *o = longopts; o->name; o++)
		if (!strcmp(o->name, name))
			return o;
	return NULL;
}

static int add_word(struct cli_config *cf, char *text, const char *file, unsigned line,
		    const struct option *opt)
{
	if (cf->nwords == cf->cap) {
		size_t cap = cf->cap ? cf->cap * 2 : 16;
		struct cli_config_word *w = realloc(cf->words, cap * sizeof(*w));

		if (!w)
			return -ENOMEM;
		cf->words = w;
		cf->cap = cap;
	}
	cf->words[cf->nwords++] = (struct cli_config_word){ text, file, line, opt };
	return 0;
}

/* inih's line source: fgets that counts lines, and strips the indentation
 * so that inih never takes an indented line for the continuation of the
 * previous value (a feature this format does not have). */
static char *read_line(char *buf, int size, void *stream)
{
	struct config_reader *rd = stream;
	size_t n, skip;

	if (rd->status || !fgets(buf, size, rd->f))
		return NULL;
	rd->line++;
	n = strlen(buf);
	if (n == (size_t)size - 1 && buf[n - 1] != '\n' && !feof(rd->f)) {
		rd->truncated = true;
		return NULL;
	}
	skip = strspn(buf, " \t");
	memmove(buf, buf + skip, n - skip + 1);
	return buf;
}

static int config_error(struct config_reader *rd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int config_error(struct config_reader *rd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "understudy: %s:%u: ", rd->file, rd->line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	rd->status = 2;
	return 0;   /* to inih: this line was bad */
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
	struct config_reader *rd = user;
	const struct option *o;
	char *word;

	if (rd->status)
		return 0;
	if (section[0])
		return config_error(rd, "[%s] sections are not used: one key = value per line",
				    section);
	o = find_option(rd->longopts, name);
	/* --help and --config make no sense from a file. */
	if (!o || !strcmp(name, "help") || !strcmp(name, "config"))
		return config_error(rd, "unknown key '%s' (understudy %s has no such option)", name,
				    rd->cmd);
	if (o->has_arg == no_argument) {
		if (!strcmp(value, "false"))
			return 1;
		if (strcmp(value, "true"))
			return config_error(rd, "'%s' is a flag: true or false, not '%s'", name, value);
		if (asprintf(&word, "--%s", name) < 0)
			word = NULL;
	} else if (o->has_arg == required_argument && !value[0]) {
		return config_error(rd, "'%s' needs a value", name);
	} else if (o->has_arg == optional_argument && !value[0]) {
		if (asprintf(&word, "--%s", name) < 0)
			word = NULL;
	} else if (asprintf(&word, "--%s=%s", name, value) < 0) {
		word = NULL;
	}
	if (!word || add_word(rd->cf, word, rd->file, rd->line, o) < 0) {
		free(word);
		fprintf(stderr, "understudy: %s: out of memory\n", rd->file);
		rd->status = 2;
		return 0;
	}
	return 1;
}

static int read_file(struct cli_config *cf, const char *cmd, const char *file,
		     const struct option *longopts)
{
	struct config_reader rd = { .cf = cf, .cmd = cmd, .longopts = longopts, .file = file };
	int r;

	rd.f = fopen(file, "r");
	if (!rd.f) {
		fprintf(stderr, "understudy %s: --config %s: %s\n", cmd, file, strerror(errno));
		return 2;
	}
	r = ini_parse_stream(read_line, &rd, on_key, &rd);
	if (!rd.status && ferror(rd.f)) {
		fprintf(stderr, "understudy %s: --config %s: read error\n", cmd, file);
		rd.status = 2;
	}
	fclose(rd.f);
	if (rd.status)
		return rd.status;
	if (rd.truncated) {
		fprintf(stderr, "understudy: %s:%u: line too long (at most %d characters)\n", file,
			rd.line, INI_MAX_LINE - 3);
		return 2;
	}
	if (r > 0) {   /* a line inih could not read, the handler never saw it */
		fprintf(stderr, "understudy: %s:%d: expected 'key = value'\n", file, r);
		return 2;
	}
	return r < 0 ? 2 : 0;
}

/* Whether a later file gives the option of word i too: then that file's
 * words replace these (within one file, a key may repeat). */
static bool given_later(const struct cli_config *cf, size_t i)
{
	for (size_t j = i + 1; j < cf->nwords; j++)
		if (cf->words[j].opt == cf->words[i].opt && cf->words[j].file != cf->words[i].file)
			return true;
	return false;
}

/* Which options of longopts the command line gives (seen[i] for longopts[i]),
 * asked of getopt_long itself so that abbreviations count. Parses a copy:
 * getopt permutes what it parses. */
static int scan_command_line(int argc, char **argv, const char *shortopts,
			     const struct option *longopts, bool *seen)
{
	char **copy = malloc((argc + 1) * sizeof(*copy));
	int saved_opterr = opterr, opt, idx;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, argv, (argc + 1) * sizeof(*copy));
	opterr = 0;
	optind = 0;   /* 0: getopt starts over, whatever it parsed before */
	for (idx = -1; (opt = getopt_long(argc, copy, shortopts, longopts, &idx)) != -1; idx = -1) {
		if (idx >= 0) {
			seen[idx] = true;
			continue;
		}
		for (int i = 0; longopts[i].name; i++)   /* a short option: by its value */
			if (!longopts[i].flag && longopts[i].val == opt)
				seen[i] = true;
	}
	opterr = saved_opterr;
	optind = 0;
	free(copy);
	return 0;
}

int cli_config_apply(struct cli_config *cf, int *argc, char ***argv, const char *shortopts,
		     const struct option *longopts)
{
	const char *cmd = (*argv)[0];
	int n = *argc, ncli = 0, nopts = 0, r = 0;
	char **cli = NULL;
	bool *seen = NULL;
	size_t kept;

	memset(cf, 0, sizeof(*cf));
	/* Take the --config FILE words out (before "--"), reading each file. */
	cli = calloc(n + 1, sizeof(*cli));
	if (!cli)
		goto err_nomem;
	for (int i = 0; i < n; i++) {
		const char *a = (*argv)[i], *file = NULL;
		bool end = i > 0 && !strcmp(a, "--");

		if (!end && i > 0 && !strcmp(a, "--config")) {
			if (i + 1 >= n) {
				fprintf(stderr, "understudy %s: --config needs a FILE\n", cmd);
				r = 2;
				goto out;
			}
			file = (*argv)[++i];
		} else if (!end && i > 0 && !strncmp(a, "--config=", 9)) {
			file = a + 9;
		}
		if (!file) {
			cli[ncli++] = (*argv)[i];
			if (end)   /* the rest as it is */
				while (++i < n)
					cli[ncli++] = (*argv)[i];
			continue;
		}
		if ((r = read_file(cf, cmd, file, longopts)))
			goto out;
	}
	if (!cf->nwords && ncli == n) {   /* no --config: leave argv alone */
		free(cli);
		return 0;
	}

	for (const struct option *o = longopts; o->name; o++)
		nopts++;
	seen = calloc(nopts + 1, sizeof(*seen));
	if (!seen || scan_command_line(ncli, cli, shortopts, longopts, seen) < 0)
		goto err_nomem;
	kept = 0;
	for (size_t i = 0; i < cf->nwords; i++) {
		if (seen[cf->words[i].opt - longopts] || given_later(cf, i)) {
			free(cf->words[i].text);
			continue;
		}
		cf->words[kept++] = cf->words[i];
	}
	cf->nwords = kept;

	cf->argv = calloc(1 + cf->nwords + ncli, sizeof(*cf->argv));
	if (!cf->argv)
		goto err_nomem;
	cf->argc = 0;
	cf->argv[cf->argc++] = cli[0];
	for (size_t i = 0; i < cf->nwords; i++)
		cf->argv[cf->argc++] = cf->words[i].text;
	for (int i = 1; i < ncli; i++)
		cf->argv[cf->argc++] = cli[i];
	cf->argv[cf->argc] = NULL;
	*argc = cf->argc;
	*argv = cf->argv;
	goto out;

err_nomem:
	fprintf(stderr, "understudy %s: out of memory\n", cmd);
	r = 2;
out:
	free(seen);
	free(cli);
	if (r)
		cli_config_fini(cf);
	return r;
}

int cli_config_blame(const struct cli_config *cf, char **argv, int next)
{
	/* getopt_long has just consumed argv[next - 1]: a file's words are
	 * always one word, --key=value. Compared by address: getopt may have
	 * moved the words around, it does not copy them. */
	if (next < 1)
		return 2;
	for (size_t i = 0; i < cf->nwords; i++)
		if (cf->words[i].text == argv[next - 1]) {
			fprintf(stderr, "understudy: %s:%u: bad value for '%s'\n", cf->words[i].file,
				cf->words[i].line, cf->words[i].opt->name);
			break;
		}
	return 2;
}
