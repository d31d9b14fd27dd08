/* etcd's HTTP/JSON gateway encoding (net/etcd.c's helper): request bodies
 * built with json-c, with keys and values as base64; answers read field by
 * field, each checked for its type, each int64 (a JSON string of digits)
 * for its digits, each byte string for valid base64. */
#include "net/etcd_json.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmod/log.h"

#define TAG "etcd"

/* ---- base64 (standard alphabet, padded: what Go's encoding/json writes) -- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* s as base64, a JSON string (NULL: out of memory). */
static json_object *b64_string(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s), i, o = 0;
	char *out = malloc(4 * ((n + 2) / 3) + 1);
	json_object *j;

	if (!out)
		return NULL;
	for (i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
			     (i + 2 < n ? p[i + 2] : 0);

		out[o++] = B64[v >> 18];
		out[o++] = B64[v >> 12 & 63];
		out[o++] = i + 1 < n ? B64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? B64[v & 63] : '=';
	}
	j = json_object_new_string_len(out, (int)o);
	free(out);
	return j;
}

static int b64_value(char c)
{
	const char *p = c ? strchr(B64, c) : NULL;

	return p ? (int)(p - B64) : -1;
}

/* Decodes in[0..n) into out (at least n / 4 * 3 bytes); -EPROTO unless it is
 * padded standard base64 with nothing after the padding. */
static int b64_decode(const char *in, size_t n, unsigned char *out, size_t *out_len)
{
	size_t i, o = 0;

	if (n % 4)
		return -EPROTO;
	for (i = 0; i < n; i += 4) {
		int a = b64_value(in[i]), b = b64_value(in[i + 1]);
		int c = b64_value(in[i + 2]), d = b64_value(in[i + 3]);
		bool last = i + 4 == n;

		if (a < 0 || b < 0)
			return -EPROTO;
		out[o++] = (unsigned char)(a << 2 | b >> 4);
		if (last && in[i + 2] == '=' && in[i + 3] == '=')
			break;
		if (c < 0)
			return -EPROTO;
		out[o++] = (unsigned char)((b & 15) << 4 | c >> 2);
		if (last && in[i + 3] == '=')
			break;
		if (d < 0)
			return -EPROTO;
		out[o++] = (unsigned char)((c & 3) << 6 | d);
	}
	*out_len = o;
	return 0;
}

/* s[0..n) fit for a log line, cut to cap - 1 bytes: anything but printable
 * ASCII shows as '.'. */
const char *etcd_printable(const char *s, size_t n, char *out, size_t cap)
{
	size_t i;

	n = n < cap - 1 ? n : cap - 1;
	for (i = 0; i < n; i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '.';
	out[n] = 0;
	return out;
}

/* ---- answers ------------------------------------------------------------- */

/* The gateway's error answer: {"error":"...","code":N,"message":"..."}, or
 * inside a stream {"error":{"grpc_code":N,"message":"..."}}. Logs it. */
int etcd_answer_error(const char *what, long status, json_object *ans)
{
	json_object *err = NULL, *msg = NULL, *c = NULL;
	char text[201] = "(no error text)";

	if (ans && json_object_object_get_ex(ans, "error", &err)) {
		if (json_object_is_type(err, json_type_object)) {
			json_object_object_get_ex(err, "message", &msg);
			json_object_object_get_ex(err, "grpc_code", &c);
		} else {
			msg = err;
			json_object_object_get_ex(ans, "code", &c);
		}
	}
	if (msg && json_object_is_type(msg, json_type_string))
		etcd_printable(json_object_get_string(msg), (size_t)json_object_get_string_len(msg), text,
			  sizeof(text));
	log_error(TAG, "%s: HTTP %ld, error %d: %s", what, status,
		  c && json_object_is_type(c, json_type_int) ? json_object_get_int(c) : -1, text);
	return -EPROTO;
}

/* An int64 field: the gateway writes a JSON string of digits; absent is 0
 * (proto3 leaves defaults out). */
int etcd_field_int64(const char *what, json_object *o, const char *name, int64_t *v)
{
	json_object *f;
	const char *s;
	char *end, text[41];
	long long x;

	*v = 0;
	if (!json_object_object_get_ex(o, name, &f))
		return 0;
	if (json_object_is_type(f, json_type_int)) {
		*v = json_object_get_int64(f);
		return 0;
	}
	if (!json_object_is_type(f, json_type_string))
		goto bad;
	s = json_object_get_string(f);
	if (!(*s >= '0' && *s <= '9') && !(*s == '-' && s[1] >= '0' && s[1] <= '9'))
		goto bad;
	errno = 0;
	x = strtoll(s, &end, 10);
	if (errno || *end || (size_t)(end - s) != (size_t)json_object_get_string_len(f))
		goto bad;
	*v = x;
	return 0;
bad:
	s = json_object_to_json_string(f);
	log_error(TAG, "%s: field %s is not an int64: %s", what, name,
		  etcd_printable(s ? s : "", s ? strlen(s) : 0, text, sizeof(text)));
	return -EPROTO;
}

int etcd_field_bool(const char *what, json_object *o, const char *name, bool *v)
{
	json_object *f;

	*v = false;
	if (!json_object_object_get_ex(o, name, &f))
		return 0;
	if (!json_object_is_type(f, json_type_boolean)) {
		log_error(TAG, "%s: field %s is not a boolean", what, name);
		return -EPROTO;
	}
	*v = json_object_get_boolean(f);
	return 0;
}

/* A bytes field (base64), absent is empty; decoded into a new NUL-terminated
 * buffer, -EPROTO when it is no base64 or holds a NUL (keys and values
 * here are text). */
int etcd_field_text(const char *what, json_object *o, const char *name, char **v)
{
	json_object *f;
	const char *s = "";
	size_t n = 0, len = 0;

	if (json_object_object_get_ex(o, name, &f)) {
		if (!json_object_is_type(f, json_type_string))
			goto bad;
		s = json_object_get_string(f);
		n = (size_t)json_object_get_string_len(f);
	}
	*v = malloc(n / 4 * 3 + 1);
	if (!*v)
		return -ENOMEM;
	if (b64_decode(s, n, (unsigned char *)*v, &len) || memchr(*v, 0, len)) {
		free(*v);
		*v = NULL;
		goto bad;
	}
	(*v)[len] = 0;
	return 0;
bad:
	log_error(TAG, "%s: field %s is not base64 text", what, name);
	return -EPROTO;
}

/* Checks the parts of an answer every call shares: "header", when there,
 * is an object. */
int etcd_answer_check(const char *what, json_object *ans)
{
	json_object *h;

	if (json_object_object_get_ex(ans, "header", &h) &&
	    !json_object_is_type(h, json_type_object)) {
		log_error(TAG, "%s: header is not an object", what);
		return -EPROTO;
	}
	return 0;
}

/* ---- requests ------------------------------------------------------------ */

/* Request bodies are built with json-c; keys and values travel as base64,
 * int64s as decimal strings (what etcd's JSON gateway takes). */

/* Adds key: v to o; false when v is NULL (out of memory). */
static bool put_member(json_object *o, const char *key, json_object *v)
{
	if (!v)
		return false;
	json_object_object_add(o, key, v);
	return true;
}

/* Appends v to the array a; false when v is NULL or there is no room. */
static bool push(json_object *a, json_object *v)
{
	if (!v)
		return false;
	if (json_object_array_add(a, v)) {
		json_object_put(v);
		return false;
	}
	return true;
}

static bool put_int64(json_object *o, const char *key, int64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%lld", (long long)v);
	return put_member(o, key, json_object_new_string(s));
}

/* The text of o in *body (malloc'd) and o dropped: 0, or -ENOMEM when a
 * part of o could not be made (ok false) or the text could not be. */
static int body_text(json_object *o, bool ok, char **body)
{
	const char *text = ok && o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
								    JSON_C_TO_STRING_NOSLASHESCAPE) : NULL;

	*body = text ? strdup(text) : NULL;
	json_object_put(o);
	return *body ? 0 : -ENOMEM;
}

int etcd_body_int64(const char *name, int64_t v, char **body)
{
	json_object *o = json_object_new_object();

	return body_text(o, o && put_int64(o, name, v), body);
}

int etcd_body_key(const char *key, char **body)
{
	json_object *o;

	if (!key || !*key)
		return -EINVAL;
	o = json_object_new_object();
	return body_text(o, o && put_member(o, "key", b64_string(key)), body);
}

/* One compare: absent (created at revision 0, i.e. never or deleted
 * since), else equal to the value. */
static json_object *txn_compare(const struct etcd_cmp *c)
{
	json_object *o = json_object_new_object();
	bool ok = o && put_member(o, "key", b64_string(c->key)) &&
		  put_member(o, "result", json_object_new_string("EQUAL"));

	if (ok && c->value)
		ok = put_member(o, "target", json_object_new_string("VALUE")) &&
		     put_member(o, "value", b64_string(c->value));
	else if (ok)
		ok = put_member(o, "target", json_object_new_string("CREATE")) &&
		     put_member(o, "create_revision", json_object_new_string("0"));
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

static json_object *txn_put(const struct etcd_put *p)
{
	json_object *o = json_object_new_object(), *req = json_object_new_object();
	bool ok = o && req && put_member(req, "key", b64_string(p->key)) &&
		  put_member(req, "value", b64_string(p->value)) && put_int64(req, "lease", p->lease);

	if (!ok) {
		json_object_put(req);
		json_object_put(o);
		return NULL;
	}
	json_object_object_add(o, "request_put", req);
	return o;
}

/* A transaction: the compares, then the puts on success. */
int etcd_body_txn(const struct etcd_cmp *cmp, size_t ncmp, const struct etcd_put *put,
		  size_t nput, char **body)
{
	json_object *o, *cmps, *puts;
	bool ok;
	size_t i;

	for (i = 0; i < ncmp; i++)
		if (!cmp[i].key || !*cmp[i].key)
			return -EINVAL;
	for (i = 0; i < nput; i++)
		if (!put[i].key || !*put[i].key || !put[i].value)
			return -EINVAL;
	o = json_object_new_object();
	ok = o && put_member(o, "compare", cmps = json_object_new_array()) &&
	     put_member(o, "success", puts = json_object_new_array());
	for (i = 0; ok && i < ncmp; i++)
		ok = push(cmps, txn_compare(&cmp[i]));
	for (i = 0; ok && i < nput; i++)
		ok = push(puts, txn_put(&put[i]));
	return body_text(o, ok, body);
}
