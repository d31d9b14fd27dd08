/* --config FILE: options from a file, for every subcommand.
 *
 * One "key = value" per line, of any length, the keys being the long
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

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* What parsing one file needs. */
struct config_reader {
	struct cli_config *cf;
	const char *cmd;
	const struct option *longopts;
	FILE *f;
	const char *file;
	unsigned line;          /* the line being read */
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
	return 0;
}

static int on_key(struct config_reader *rd, const char *name, const char *value)
{
	const struct option *o;
	char *word;

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

/* The first of chars in s, or an inline comment (';' or '#' after a
 * space), or the end of s. */
static char *find_sep(char *s, const char *chars)
{
	bool was_space = false;

	for (; *s; s++) {
		if ((chars && strchr(chars, *s)) || (was_space && (*s == ';' || *s == '#')))
			break;
		was_space = isspace((unsigned char)*s);
	}
	return s;
}

static void strip_right(char *s)
{
	size_t n = strlen(s);

	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = 0;
}

/* One line (no indentation: this format has no continuation lines):
 * blank, a comment (';' or '#'), "key = value" or "key: value" with an
 * optional " ; comment" or " # comment" after the value, or a [section],
 * which is refused. */
static void parse_line(struct config_reader *rd, char *line)
{
	char *start = line + strspn(line, " \t"), *sep, *value;

	strip_right(start);
	if (!*start || *start == ';' || *start == '#')
		return;
	if (*start == '[') {
		sep = find_sep(start + 1, "]");
		if (*sep != ']') {
			config_error(rd, "expected 'key = value'");
			return;
		}
		*sep = 0;
		config_error(rd, "[%s] sections are not used: one key = value per line", start + 1);
		return;
	}
	sep = find_sep(start, "=:");
	if (*sep != '=' && *sep != ':') {
		config_error(rd, "expected 'key = value'");
		return;
	}
	*sep = 0;
	strip_right(start);
	value = sep + 1 + strspn(sep + 1, " \t");
	*find_sep(value, NULL) = 0;
	strip_right(value);
	on_key(rd, start, value);
}

/* Lines of any length (getline): a long --fence-cmd or --on-event command
 * fits on one. */
static int read_file(struct cli_config *cf, const char *cmd, const char *file,
		     const struct option *longopts)
{
	struct config_reader rd = { .cf = cf, .cmd = cmd, .longopts = longopts, .file = file };
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	rd.f = fopen(file, "r");
	if (!rd.f) {
		fprintf(stderr, "understudy %s: --config %s: %s\n", cmd, file, strerror(errno));
		return 2;
	}
	while (!rd.status && (n = getline(&line, &cap, rd.f)) >= 0) {
		char *text = line;

		rd.line++;
		if ((size_t)n != strlen(line)) {
			config_error(&rd, "a NUL byte: not a text file");
			break;
		}
		if (rd.line == 1 && !strncmp(text, "\xef\xbb\xbf", 3))   /* a UTF-8 BOM */
			text += 3;
		parse_line(&rd, text);
	}
	if (!rd.status && ferror(rd.f)) {
		fprintf(stderr, "understudy %s: --config %s: read error\n", cmd, file);
		rd.status = 2;
	}
	free(line);
	fclose(rd.f);
	return rd.status;
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
		if (!cf->file)
			cf->file = file;
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
