/* The JSON documents understudy writes and reads (proto.h): built with
 * json-c, so every string is escaped, and parsed with its tokener. */
#include "proto/proto.h"

#include <math.h>
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
		bad = "not a JSON object";
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
