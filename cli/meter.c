/* A progress line on stderr for a command that waits (migrate). On a
 * terminal it is one line redrawn in place with \r, cut to the terminal's
 * width: fields are dropped from the right until the rest fits in one
 * column less than the width (a line that filled the last column would
 * wrap on some terminals, and \r would then redraw only its second half).
 * Anything else (a pipe, a file, a log) gets one whole line per update,
 * ended with \n, so that a script reading lines sees each as it comes. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/cli.h"

void cli_meter_init(struct cli_meter *m, FILE *f)
{
	m->f = f;
	m->tty = isatty(fileno(f));
	m->drawn = 0;
}

int cli_meter_width(int fd)
{
	struct winsize ws;
	const char *env = getenv("COLUMNS");
	char *end;
	long n;

	if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	/* a terminal that gives no size (a serial console): COLUMNS, as set by
	 * a shell that knows it */
	if (env && *env) {
		n = strtol(env, &end, 10);
		if (!*end && n > 0 && n <= 10000)
			return (int)n;
	}
	return 80;
}

void cli_meter_draw(struct cli_meter *m, const char *const *fields, int nfields)
{
	char line[1024];
	size_t len = 0, room;
	int i;

	if (!m->tty) {
		for (i = 0; i < nfields; i++)
			fprintf(m->f, "%s%s", i ? " " : "", fields[i]);
		fputc('\n', m->f);
		fflush(m->f);
		return;
	}
	room = (size_t)cli_meter_width(fileno(m->f)) - 1;
	if (room >= sizeof(line))
		room = sizeof(line) - 1;
	line[0] = 0;
	for (i = 0; i < nfields; i++) {
		size_t need = strlen(fields[i]) + (i ? 1 : 0);

		if (len + need > room) {
			/* the first field alone is cut; the others go whole or not at all */
			if (i == 0) {
				memcpy(line, fields[0], room);
				len = room;
			}
			break;
		}
		len += (size_t)snprintf(line + len, sizeof(line) - len, "%s%s", i ? " " : "", fields[i]);
	}
	line[len] = 0;
	/* spaces over what is left of a longer line drawn before */
	fprintf(m->f, "\r%s%*s", line, m->drawn > (int)len ? m->drawn - (int)len : 0, "");
	fflush(m->f);
	m->drawn = len > 0 ? (int)len : 1;
}

void cli_meter_end(struct cli_meter *m)
{
	if (m->tty && m->drawn) {
		fputc('\n', m->f);
		fflush(m->f);
	}
	m->drawn = 0;
}

void cli_meter_say(struct cli_meter *m, const char *fmt, ...)
{
	char text[2048];
	const char *s = text;
	size_t room;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	cli_meter_end(m);
	if (!m->tty) {
		fprintf(m->f, "%s\n", text);
		fflush(m->f);
		return;
	}
	/* wrapped at spaces, the lines after the first indented by two */
	room = (size_t)cli_meter_width(fileno(m->f)) - 1;
	while (*s) {
		size_t indent = s == text ? 0 : 2, n = strlen(s), cut = n;

		if (room > indent + 8 && indent + n > room) {
			cut = room - indent;
			while (cut > 0 && s[cut] != ' ')
				cut--;
			if (cut == 0)           /* one word longer than the line */
				cut = room - indent;
		}
		fprintf(m->f, "%*s%.*s\n", (int)indent, "", (int)cut, s);
		s += cut;
		while (*s == ' ')
			s++;
	}
	fflush(m->f);
}
