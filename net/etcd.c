/* etcd v3 over its HTTP/JSON gateway (see etcd.h). One curl easy handle per
 * client keeps the connection to the endpoint that answered last alive, so a
 * keepalive every few hundred ms costs one request on an open socket.
 * Everything the server sends is untrusted: each field used is checked for
 * its type, each int64 (a JSON string in the gateway's encoding) for its
 * digits, each byte string for valid base64. */
#include "net/etcd.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "kmod/log.h"
#include "net/net.h"

#define TAG "etcd"
/* Far more than any answer of the calls below; a server sending more is
 * not the gateway. */
#define ANSWER_MAX (1u << 20)

struct etcd {
	CURL *curl;
	struct curl_slist *headers;
	char *urls[ETCD_MAX_ENDPOINTS];  /* "http[s]://HOST:PORT" */
	size_t nurls;
	size_t cur;                      /* the endpoint that answered last */
	char *ca_file;
	unsigned timeout_ms;
	char *answer;
	size_t answer_len, answer_cap;
	bool answer_too_big;
	char errbuf[CURL_ERROR_SIZE];
};

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

/* ---- endpoints ------------------------------------------------------------ */

static int endpoint_parse(const char *spec, size_t len, char **url)
{
	char buf[300], host[256];
	const char *scheme = "http", *hp = buf;
	int port, r;

	if (!len || len >= sizeof(buf)) {
		log_error(TAG, "endpoint '%.*s': %s", (int)(len > 80 ? 80 : len), spec,
			  len ? "too long" : "empty");
		return -EINVAL;
	}
	memcpy(buf, spec, len);
	buf[len] = 0;
	if (!strncmp(buf, "https://", 8)) {
		scheme = "https";
		hp += 8;
	} else if (!strncmp(buf, "http://", 7)) {
		hp += 7;
	} else if (strstr(buf, "://")) {
		log_error(TAG, "endpoint '%s': only http:// and https://", buf);
		return -EINVAL;
	}
	r = net_parse_host_port(hp, false, host, sizeof(host), &port);
	if (r == -ERANGE) {
		log_error(TAG, "endpoint '%s': bad port, need 1..65535", buf);
		return -EINVAL;
	}
	for (const char *c = host; !r && *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr(".-_:", *c))
			r = -EINVAL;
	if (r || !host[0]) {
		log_error(TAG, "endpoint '%s': need [http[s]://]HOST:PORT", buf);
		return -EINVAL;
	}
	/* An IPv6 address goes back into brackets in a URL. */
	if (asprintf(url, strchr(host, ':') ? "%s://[%s]:%d" : "%s://%s:%d", scheme, host,
		     port) < 0)
		return -ENOMEM;
	return 0;
}

static int endpoints_parse(struct etcd *e, const char *list)
{
	const char *p = list, *comma;
	int r;

	if (!list || !*list) {
		log_error(TAG, "no endpoint given");
		return -EINVAL;
	}
	for (;;) {
		comma = strchr(p, ',');
		if (e->nurls == ETCD_MAX_ENDPOINTS) {
			log_error(TAG, "more than %d endpoints in '%s'", ETCD_MAX_ENDPOINTS, list);
			return -EINVAL;
		}
		r = endpoint_parse(p, comma ? (size_t)(comma - p) : strlen(p), &e->urls[e->nurls]);
		if (r)
			return r;
		e->nurls++;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

int etcd_check_endpoints(const char *list)
{
	struct etcd e = { 0 };
	int r = endpoints_parse(&e, list);

	for (size_t i = 0; i < e.nurls; i++)
		free(e.urls[i]);
	return r;
}

static size_t on_answer(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct etcd *e = ctx;
	size_t n = size * nmemb;
	char *b;

	if (n > ANSWER_MAX - e->answer_len) {
		e->answer_too_big = true;
		return 0; /* curl fails the transfer */
	}
	if (e->answer_len + n + 1 > e->answer_cap) {
		size_t cap = e->answer_cap ? e->answer_cap : 4096;

		while (cap < e->answer_len + n + 1)
			cap *= 2;
		b = realloc(e->answer, cap);
		if (!b)
			return 0;
		e->answer = b;
		e->answer_cap = cap;
	}
	memcpy(e->answer + e->answer_len, data, n);
	e->answer_len += n;
	e->answer[e->answer_len] = 0;
	return n;
}

int etcd_new(const struct etcd_config *cfg, struct etcd **out)
{
	struct etcd *e = calloc(1, sizeof(*e));
	int r = -ENOMEM;

	if (!e)
		return -ENOMEM;
	e->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 1000;
	r = endpoints_parse(e, cfg->endpoints);
	if (r)
		goto err_free;
	r = -ENOMEM;
	if (cfg->ca_file && !(e->ca_file = strdup(cfg->ca_file)))
		goto err_free;
	/* Counted by libcurl, and safe from any thread since 7.84 (Debian 12
	 * has 7.88): each client takes a reference, etcd_free drops it. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		log_error(TAG, "cannot initialise libcurl");
		goto err_free;
	}
	e->curl = curl_easy_init();
	if (!e->curl)
		goto err_global;
	e->headers = curl_slist_append(NULL, "Content-Type: application/json");
	/* No "Expect: 100-continue" round trip before a larger body. */
	if (e->headers)
		e->headers = curl_slist_append(e->headers, "Expect:");
	if (!e->headers)
		goto err_curl;
	/* The calls run on a thread of their own: no signal for timeouts, no
	 * proxy from the environment, no redirect, http(s) only. */
	if (curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L) ||
	    curl_easy_setopt(e->curl, CURLOPT_PROXY, "") ||
	    curl_easy_setopt(e->curl, CURLOPT_FOLLOWLOCATION, 0L) ||
	    curl_easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, "http,https") ||
	    curl_easy_setopt(e->curl, CURLOPT_TCP_NODELAY, 1L) ||
	    curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, e->headers) ||
	    curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_answer) ||
	    curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e) ||
	    curl_easy_setopt(e->curl, CURLOPT_ERRORBUFFER, e->errbuf) ||
	    curl_easy_setopt(e->curl, CURLOPT_SSL_VERIFYPEER, 1L) ||
	    curl_easy_setopt(e->curl, CURLOPT_SSL_VERIFYHOST, 2L) ||
	    (e->ca_file && curl_easy_setopt(e->curl, CURLOPT_CAINFO, e->ca_file))) {
		log_error(TAG, "libcurl lacks an option this client needs");
		r = -ENOTSUP;
		goto err_curl;
	}
	*out = e;
	return 0;

err_curl:
	curl_slist_free_all(e->headers);
	curl_easy_cleanup(e->curl);
err_global:
	curl_global_cleanup();
err_free:
	for (size_t i = 0; i < e->nurls; i++)
		free(e->urls[i]);
	free(e->ca_file);
	free(e);
	return r;
}

void etcd_free(struct etcd *e)
{
	if (!e)
		return;
	curl_easy_cleanup(e->curl);
	curl_slist_free_all(e->headers);
	curl_global_cleanup();
	for (size_t i = 0; i < e->nurls; i++)
		free(e->urls[i]);
	free(e->ca_file);
	free(e->answer);
	free(e);
}

/* s[0..n) fit for a log line, cut to cap - 1 bytes: anything but printable
 * ASCII shows as '.'. */
static const char *printable(const char *s, size_t n, char *out, size_t cap)
{
	size_t i;

	n = n < cap - 1 ? n : cap - 1;
	for (i = 0; i < n; i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '.';
	out[n] = 0;
	return out;
}

static const char *answer_excerpt(struct etcd *e, char *out, size_t cap)
{
	return printable(e->answer, e->answer_len, out, cap);
}

/* ---- one request, over the endpoints -------------------------------------- */

enum attempt { ATTEMPT_ANSWER, ATTEMPT_NEXT, ATTEMPT_FAIL };

/* One POST to endpoint i within ms; what to do next, and the errno. */
static enum attempt attempt(struct etcd *e, size_t i, const char *path, const char *body,
			    uint64_t ms, long *status, int *err)
{
	char url[320];
	CURLcode c;
	long os_errno = 0;
	char excerpt[201];

	snprintf(url, sizeof(url), "%s%s", e->urls[i], path);
	e->answer_len = 0;
	e->answer_too_big = false;
	e->errbuf[0] = 0;
	if (!ms)
		ms = 1; /* 0 would mean curl's default of minutes */
	if (curl_easy_setopt(e->curl, CURLOPT_URL, url) ||
	    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, body) ||
	    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body)) ||
	    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)ms) ||
	    curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)ms)) {
		*err = -ENOMEM;
		return ATTEMPT_FAIL;
	}
	c = curl_easy_perform(e->curl);
	if (c == CURLE_OK) {
		long fresh = 0;

		curl_easy_getinfo(e->curl, CURLINFO_NUM_CONNECTS, &fresh);
		if (fresh)
			log_debug(TAG, "%s: new connection", url);
		curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, status);
		if (*status >= 500 && *status <= 599) {
			log_warn(TAG, "%s: HTTP %ld: %s", url, *status,
				 answer_excerpt(e, excerpt, sizeof(excerpt)));
			*err = *status == 504 ? -ETIMEDOUT : -EHOSTUNREACH;
			return ATTEMPT_NEXT;
		}
		return ATTEMPT_ANSWER;
	}
	log_debug(TAG, "%s: %s", url, e->errbuf[0] ? e->errbuf : curl_easy_strerror(c));
	switch (c) {
	case CURLE_OUT_OF_MEMORY:
		*err = -ENOMEM;
		return ATTEMPT_FAIL;
	case CURLE_WRITE_ERROR:
		*err = e->answer_too_big ? -EPROTO : -ENOMEM;
		if (e->answer_too_big)
			log_error(TAG, "%s: answer longer than %u bytes", url, ANSWER_MAX);
		return ATTEMPT_FAIL;
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_BAD_CONTENT_ENCODING:
	case CURLE_TOO_MANY_REDIRECTS:
		log_error(TAG, "%s: not an HTTP answer: %s", url,
			  e->errbuf[0] ? e->errbuf : curl_easy_strerror(c));
		*err = -EPROTO;
		return ATTEMPT_FAIL;
	case CURLE_OPERATION_TIMEDOUT:
		*err = -ETIMEDOUT;
		return ATTEMPT_NEXT;
	case CURLE_COULDNT_CONNECT:
		curl_easy_getinfo(e->curl, CURLINFO_OS_ERRNO, &os_errno);
		*err = os_errno == EHOSTUNREACH || os_errno == ENETUNREACH ? -EHOSTUNREACH :
									     -ECONNREFUSED;
		return ATTEMPT_NEXT;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CACERT_BADFILE:
		log_error(TAG, "%s: TLS: %s", url, e->errbuf[0] ? e->errbuf : curl_easy_strerror(c));
		*err = -EHOSTUNREACH;
		return ATTEMPT_NEXT;
	default: /* resolve, send, receive, nothing answered: this endpoint is down */
		*err = -EHOSTUNREACH;
		return ATTEMPT_NEXT;
	}
}

/* POSTs body (consumed) to path on the endpoint that answered last, then on
 * the others, all within the client's timeout. 0 with the HTTP status and
 * the answer in e->answer[e->answer_len]. */
static int post(struct etcd *e, const char *path, char *body, long *status)
{
	uint64_t deadline = now_ns() + (uint64_t)e->timeout_ms * 1000000u, now;
	int err = -ETIMEDOUT;
	size_t k;

	for (k = 0; k < e->nurls; k++) {
		size_t i = (e->cur + k) % e->nurls, left = e->nurls - k;
		uint64_t ms;

		now = now_ns();
		if (now >= deadline) {
			err = -ETIMEDOUT;
			break;
		}
		/* An endpoint that swallows the request must leave time for the
		 * others: each gets its share of what is left, the last all of it. */
		ms = (deadline - now) / 1000000u / left;
		switch (attempt(e, i, path, body, ms, status, &err)) {
		case ATTEMPT_ANSWER:
			e->cur = i;
			free(body);
			return 0;
		case ATTEMPT_FAIL:
			free(body);
			return err;
		case ATTEMPT_NEXT:
			break;
		}
	}
	free(body);
	log_warn(TAG, "%s: no endpoint answered in %u ms (%s)", path, e->timeout_ms, strerror(-err));
	return err;
}

/* ---- JSON -------------------------------------------------------------- */

/* The gateway's error answer: {"error":"...","code":N,"message":"..."}, or
 * inside a stream {"error":{"grpc_code":N,"message":"..."}}. Logs it. */
static int answer_error(const char *what, long status, json_object *ans)
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
		printable(json_object_get_string(msg), (size_t)json_object_get_string_len(msg), text,
			  sizeof(text));
	log_error(TAG, "%s: HTTP %ld, error %d: %s", what, status,
		  c && json_object_is_type(c, json_type_int) ? json_object_get_int(c) : -1, text);
	return -EPROTO;
}

/* Parses the answer: one JSON object, then only white space unless a
 * stream (where more objects may follow). */
static int answer_parse(struct etcd *e, const char *what, bool stream, json_object **out)
{
	json_tokener *tok = json_tokener_new();
	enum json_tokener_error err;
	json_object *o;
	char excerpt[101];
	size_t end;

	if (!tok)
		return -ENOMEM;
	o = json_tokener_parse_ex(tok, e->answer ? e->answer : "", (int)e->answer_len);
	end = json_tokener_get_parse_end(tok);
	if (o && !stream)
		while (end < e->answer_len && strchr(" \t\r\n", e->answer[end]) && e->answer[end])
			end++;
	if (!o || !json_object_is_type(o, json_type_object) ||
	    (!stream && end != e->answer_len)) {
		err = json_tokener_get_error(tok);
		log_error(TAG, "%s: answer is not one JSON object (%s): %s", what,
			  o ? "wrong type or trailing bytes" :
			  err == json_tokener_continue ? "cut short" : json_tokener_error_desc(err),
			  answer_excerpt(e, excerpt, sizeof(excerpt)));
		json_object_put(o);
		json_tokener_free(tok);
		return -EPROTO;
	}
	json_tokener_free(tok);
	*out = o;
	return 0;
}

/* Posts body (consumed) and parses a 200 answer into *ans; any other status
 * is the gateway's error, logged, -EPROTO. */
static int call(struct etcd *e, const char *path, char *body, bool stream, json_object **ans)
{
	json_object *o = NULL;
	long status = 0;
	int r;

	r = post(e, path, body, &status);
	if (r)
		return r;
	r = answer_parse(e, path, stream, &o);
	if (status != 200) {
		r = answer_error(path, status, r ? NULL : o);
		json_object_put(o);
		return r;
	}
	if (r)
		return r;
	*ans = o;
	return 0;
}

/* An int64 field: the gateway writes a JSON string of digits; absent is 0
 * (proto3 leaves defaults out). */
static int field_int64(const char *what, json_object *o, const char *name, int64_t *v)
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
		  printable(s ? s : "", s ? strlen(s) : 0, text, sizeof(text)));
	return -EPROTO;
}

static int field_bool(const char *what, json_object *o, const char *name, bool *v)
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
static int field_text(const char *what, json_object *o, const char *name, char **v)
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
static int answer_check(const char *what, json_object *ans)
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

static int body_int64(const char *name, int64_t v, char **body)
{
	json_object *o = json_object_new_object();

	return body_text(o, o && put_int64(o, name, v), body);
}

static int body_key(const char *key, char **body)
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
static int body_txn(const struct etcd_cmp *cmp, size_t ncmp, const struct etcd_put *put,
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

/* ---- the calls ------------------------------------------------------------ */

int etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *id, int64_t *granted_s)
{
	static const char *what = "/v3/lease/grant";
	json_object *ans = NULL, *err;
	char *body;
	int r;

	r = body_int64("TTL", ttl_s, &body);
	if (!r)
		r = call(e, what, body, false, &ans);
	if (r)
		return r;
	r = answer_check(what, ans);
	/* LeaseGrantResponse carries an error string of its own. */
	if (!r && json_object_object_get_ex(ans, "error", &err) &&
	    (!json_object_is_type(err, json_type_string) || json_object_get_string_len(err)))
		r = answer_error(what, 200, ans);
	if (!r)
		r = field_int64(what, ans, "ID", id);
	if (!r)
		r = field_int64(what, ans, "TTL", granted_s);
	if (!r && (*id == 0 || *granted_s <= 0)) {
		log_error(TAG, "%s: lease %lld of TTL %lld", what, (long long)*id,
			  (long long)*granted_s);
		r = -EPROTO;
	}
	json_object_put(ans);
	return r;
}

int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl_s)
{
	static const char *what = "/v3/lease/keepalive";
	json_object *ans = NULL, *res;
	int64_t got = 0;
	char *body;
	int r;

	/* A stream of one request: the gateway answers with one line
	 * {"result":{...}} (or {"error":{...}}), then ends the stream. */
	r = body_int64("ID", id, &body);
	if (!r)
		r = call(e, what, body, true, &ans);
	if (r)
		return r;
	if (!json_object_object_get_ex(ans, "result", &res) ||
	    !json_object_is_type(res, json_type_object)) {
		r = answer_error(what, 200, ans);
		goto out;
	}
	r = answer_check(what, res);
	if (!r)
		r = field_int64(what, res, "TTL", ttl_s);
	if (!r)
		r = field_int64(what, res, "ID", &got);
	if (!r && (*ttl_s < 0 || (got && got != id))) {
		log_error(TAG, "%s: lease %lld: answer for lease %lld, TTL %lld", what,
			  (long long)id, (long long)got, (long long)*ttl_s);
		r = -EPROTO;
	}
out:
	json_object_put(ans);
	return r;
}

int etcd_lease_revoke(struct etcd *e, int64_t id)
{
	static const char *what = "/v3/lease/revoke";
	json_object *ans = NULL, *err;
	long status = 0;
	char *body;
	int r;

	r = body_int64("ID", id, &body);
	if (!r)
		r = post(e, what, body, &status);
	if (r)
		return r;
	r = answer_parse(e, what, false, &ans);
	if (!r && status != 200) {
		/* gRPC NotFound: the lease expired or never was, as good as revoked. */
		if (json_object_object_get_ex(ans, "code", &err) &&
		    json_object_is_type(err, json_type_int) && json_object_get_int(err) == 5)
			r = 0;
		else
			r = answer_error(what, status, ans);
	} else if (!r) {
		r = answer_check(what, ans);
	}
	json_object_put(ans);
	return r;
}

int etcd_get(struct etcd *e, const char *key, char *value, size_t len, int64_t *lease)
{
	static const char *what = "/v3/kv/range";
	json_object *ans = NULL, *kvs, *kv;
	char *k = NULL, *v = NULL, *body;
	int64_t l = 0;
	int r;

	if (!value && len)
		return -EINVAL;
	r = body_key(key, &body);
	if (!r)
		r = call(e, what, body, false, &ans);
	if (r)
		return r;
	r = answer_check(what, ans);
	if (r)
		goto out;
	if (!json_object_object_get_ex(ans, "kvs", &kvs)) {
		r = 0; /* absent */
		goto out;
	}
	if (!json_object_is_type(kvs, json_type_array) || json_object_array_length(kvs) != 1 ||
	    !(kv = json_object_array_get_idx(kvs, 0)) || !json_object_is_type(kv, json_type_object)) {
		log_error(TAG, "%s: kvs is not an array of one object", what);
		r = -EPROTO;
		goto out;
	}
	r = field_text(what, kv, "key", &k);
	if (!r && strcmp(k, key)) {
		char text[101];

		log_error(TAG, "%s: asked for key %s, got %s", what, key,
			  printable(k, strlen(k), text, sizeof(text)));
		r = -EPROTO;
	}
	if (!r)
		r = field_text(what, kv, "value", &v);
	if (!r)
		r = field_int64(what, kv, "lease", &l);
	if (r)
		goto out;
	if (len)
		snprintf(value, len, "%s", v);
	if (lease)
		*lease = l;
	r = 1;
out:
	free(k);
	free(v);
	json_object_put(ans);
	return r;
}

int etcd_txn(struct etcd *e, const struct etcd_cmp *cmp, size_t ncmp, const struct etcd_put *put,
	     size_t nput)
{
	static const char *what = "/v3/kv/txn";
	json_object *ans = NULL;
	bool done = false;
	char *body;
	int r;

	r = body_txn(cmp, ncmp, put, nput, &body);
	if (!r)
		r = call(e, what, body, false, &ans);
	if (r)
		return r;
	r = answer_check(what, ans);
	if (!r)
		r = field_bool(what, ans, "succeeded", &done);
	json_object_put(ans);
	return r ? r : done;
}

int etcd_delete(struct etcd *e, const char *key)
{
	static const char *what = "/v3/kv/deleterange";
	json_object *ans = NULL;
	int64_t deleted;
	char *body;
	int r;

	r = body_key(key, &body);
	if (!r)
		r = call(e, what, body, false, &ans);
	if (r)
		return r;
	r = answer_check(what, ans);
	if (!r)
		r = field_int64(what, ans, "deleted", &deleted);
	if (!r && (deleted < 0 || deleted > 1)) {
		log_error(TAG, "%s: %lld keys deleted for one", what, (long long)deleted);
		r = -EPROTO;
	}
	json_object_put(ans);
	return r;
}
