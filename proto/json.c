/* The JSON documents understudy writes and reads (proto.h): built with
 * json-c, so every string is escaped, and parsed with its tokener. */
#include "proto/proto.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

void proto_json_add_str(json_object *o, const char *key, const char *v)
{
	if (o)
		json_object_object_add(o, key, json_object_new_string(v ? v : ""));
}

void proto_json_add_u64(json_object *o, const char *key, uint64_t v)
{
	if (o)
		json_object_object_add(o, key, json_object_new_uint64(v));
}

void proto_json_add_bool(json_object *o, const char *key, bool v)
{
	if (o)
		json_object_object_add(o, key, json_object_new_boolean(v));
}

void proto_json_add_fixed(json_object *o, const char *key, double v, int decimals)
{
	char s[64];

	if (!o)
		return;
	if (!isfinite(v)) {
		json_object_object_add(o, key, NULL);
		return;
	}
	snprintf(s, sizeof(s), "%.*f", decimals, v);
	json_object_object_add(o, key, json_object_new_double_s(v, s));
}

char *proto_json_line(json_object *o)
{
	const char *text;
	char *line = NULL;

	if (!o)
		return NULL;
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	if (text && asprintf(&line, "%s\n", text) < 0)
		line = NULL;
	json_object_put(o);
	return line;
}

json_object *proto_json_parse(const char *text, const char **why)
{
	json_tokener *tok = json_tokener_new();
	json_object *o = NULL;
	size_t len = text ? strlen(text) : 0, end;
	const char *bad = NULL;
	enum json_tokener_error err;

	if (!tok) {
		bad = "out of memory";
		goto out;
	}
	o = json_tokener_parse_ex(tok, text ? text : "", (int)len);
	end = json_tokener_get_parse_end(tok);
	err = json_tokener_get_error(tok);
	if (err == json_tokener_continue)
		bad = "cut short";
	else if (err != json_tokener_success)
		bad = json_tokener_error_desc(err);
	else if (!json_object_is_type(o, json_type_object))     /* NULL is JSON's null */
		bad = "another JSON value";
	else if (strspn(text + end, " \t\r\n") != len - end)
		bad = "text after the object";
	json_tokener_free(tok);
out:
	if (bad) {
		json_object_put(o);
		o = NULL;
	}
	if (why)
		*why = bad;
	return o;
}

const char *proto_json_str(json_object *o, const char *key)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return "";
	return json_object_get_string(v);
}

double proto_json_num(json_object *o, const char *key, double dflt)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) ||
	    !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
		return dflt;
	return json_object_get_double(v);
}

int proto_json_read(struct proto_json_reader *r, const char *text)
{
	const char *bad = NULL;
	char start[48];
	size_t i;

	r->why[0] = 0;
	r->o = proto_json_parse(text, &bad);
	if (r->o)
		return 0;
	/* the start of the text, one line, bytes outside printable ASCII as '?' */
	for (i = 0; text && text[i] && i < sizeof(start) - 1; i++)
		start[i] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
	start[i] = 0;
	snprintf(r->why, sizeof(r->why), "not a JSON object (%s): '%s%s'", bad, start,
		 text && text[i] ? "..." : "");
	return -EPROTO;
}

void proto_json_reader_fini(struct proto_json_reader *r)
{
	json_object_put(r->o);
	r->o = NULL;
}

static void wrong(struct proto_json_reader *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void wrong(struct proto_json_reader *r, const char *fmt, ...)
{
	va_list ap;

	if (r->why[0])
		return;          /* the first problem is the one told */
	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
}

/* The field key of r's object if it has one of the wanted type, else NULL
 * and the problem recorded (unless one already was). */
static json_object *need(struct proto_json_reader *r, const char *key, enum json_type t1,
			 enum json_type t2, const char *what)
{
	json_object *v;

	if (r->why[0])
		return NULL;
	if (!r->o) {
		wrong(r, "no JSON object");
		return NULL;
	}
	if (!json_object_object_get_ex(r->o, key, &v)) {
		wrong(r, "no field \"%s\"", key);
		return NULL;
	}
	if (!json_object_is_type(v, t1) && !json_object_is_type(v, t2)) {
		wrong(r, "\"%s\" is a JSON %s, not %s", key, json_type_to_name(json_object_get_type(v)),
		      what);
		return NULL;
	}
	return v;
}

const char *proto_json_need_str(struct proto_json_reader *r, const char *key)
{
	json_object *v = need(r, key, json_type_string, json_type_string, "a string");

	return v ? json_object_get_string(v) : "";
}

double proto_json_need_num(struct proto_json_reader *r, const char *key)
{
	json_object *v = need(r, key, json_type_double, json_type_int, "a number");

	return v ? json_object_get_double(v) : 0;
}

uint64_t proto_json_need_u64(struct proto_json_reader *r, const char *key)
{
	json_object *v = need(r, key, json_type_int, json_type_int, "an integer");

	if (!v)
		return 0;
	if (json_object_get_int64(v) < 0) {
		wrong(r, "\"%s\" is negative", key);
		return 0;
	}
	return json_object_get_uint64(v);
}

json_object *proto_json_need_obj(struct proto_json_reader *r, const char *key)
{
	return need(r, key, json_type_object, json_type_object, "an object");
}
