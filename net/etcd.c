/* etcd v3 over its HTTP/JSON gateway (see etcd.h). One curl easy handle per
 * client keeps the connection to the endpoint that answered last alive, so a
 * keepalive every few hundred ms costs one request on an open socket.
 * Everything the server sends is untrusted: each field used is checked for
 * its type, each int64 (a JSON string in the gateway's encoding) for its
 * digits, each byte string for valid base64 (net/etcd_json.c). */
#include "net/etcd.h"
#include "net/etcd_json.h"

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

static const char *answer_excerpt(struct etcd *e, char *out, size_t cap)
{
	return etcd_printable(e->answer, e->answer_len, out, cap);
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
		r = etcd_answer_error(path, status, r ? NULL : o);
		json_object_put(o);
		return r;
	}
	if (r)
		return r;
	*ans = o;
	return 0;
}

/* ---- the calls ------------------------------------------------------------ */

int etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *id, int64_t *granted_s)
{
	static const char *what = "/v3/lease/grant";
	json_object *ans = NULL, *err;
	char *body;
	int r;

	r = etcd_body_int64("TTL", ttl_s, &body);
	if (!r)
		r = call(e, what, body, false, &ans);
	if (r)
		return r;
	r = etcd_answer_check(what, ans);
	/* LeaseGrantResponse carries an error string of its own. */
	if (!r && json_object_object_get_ex(ans, "error", &err) &&
	    (!json_object_is_type(err, json_type_string) || json_object_get_string_len(err)))
		r = etcd_answer_error(what, 200, ans);
	if (!r)
		r = etcd_field_int64(what, ans, "ID", id);
	if (!r)
		r = etcd_field_int64(what, ans, "TTL", granted_s);
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
	r = etcd_body_int64("ID", id, &body);
	if (!r)
		r = call(e, what, body, true, &ans);
	if (r)
		return r;
	if (!json_object_object_get_ex(ans, "result", &res) ||
	    !json_object_is_type(res, json_type_object)) {
		r = etcd_answer_error(what, 200, ans);
		goto out;
	}
	r = etcd_answer_check(what, res);
	if (!r)
		r = etcd_field_int64(what, res, "TTL", ttl_s);
	if (!r)
		r = etcd_field_int64(what, res, "ID", &got);
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

	r = etcd_body_int64("ID", id, &body);
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
			r = etcd_answer_error(what, status, ans);
	} else if (!r) {
		r = etcd_answer_check(what, ans);
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
	r = etcd_body_key(key, &body);
	if (!r)
		r = call(e, what, body, false, &ans);
	if (r)
		return r;
	r = etcd_answer_check(what, ans);
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
	r = etcd_field_text(what, kv, "key", &k);
	if (!r && strcmp(k, key)) {
		char text[101];

		log_error(TAG, "%s: asked for key %s, got %s", what, key,
			  etcd_printable(k, strlen(k), text, sizeof(text)));
		r = -EPROTO;
	}
	if (!r)
		r = etcd_field_text(what, kv, "value", &v);
	if (!r)
		r = etcd_field_int64(what, kv, "lease", &l);
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

	r = etcd_body_txn(cmp, ncmp, put, nput, &body);
	if (!r)
		r = call(e, what, body, false, &ans);
	if (r)
		return r;
	r = etcd_answer_check(what, ans);
	if (!r)
		r = etcd_field_bool(what, ans, "succeeded", &done);
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

	r = etcd_body_key(key, &body);
	if (!r)
		r = call(e, what, body, false, &ans);
	if (r)
		return r;
	r = etcd_answer_check(what, ans);
	if (!r)
		r = etcd_field_int64(what, ans, "deleted", &deleted);
	if (!r && (deleted < 0 || deleted > 1)) {
		log_error(TAG, "%s: %lld keys deleted for one", what, (long long)deleted);
		r = -EPROTO;
	}
	json_object_put(ans);
	return r;
}
