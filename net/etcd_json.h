/* net/ private, for net/etcd.c only: the gateway's JSON (net/etcd_json.c).
 * Functions taking `what` log what they refuse under that name and return
 * -EPROTO; the body builders return 0 or -ENOMEM with *body malloc'd. */
#ifndef US_NET_ETCD_JSON_H
#define US_NET_ETCD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "net/etcd.h"

/* s[0..n) fit for a log line in out (cap bytes): non-printables as '.'. */
const char *etcd_printable(const char *s, size_t n, char *out, size_t cap);
/* Logs the gateway's error answer (ans may be NULL); returns -EPROTO. */
int etcd_answer_error(const char *what, long status, json_object *ans);
/* Fields of an answer object: absent is the type's default (proto3). */
int etcd_field_int64(const char *what, json_object *o, const char *name, int64_t *v);
int etcd_field_bool(const char *what, json_object *o, const char *name, bool *v);
/* A base64 byte string, decoded into a malloc'd NUL-terminated *v. */
int etcd_field_text(const char *what, json_object *o, const char *name, char **v);
/* The parts every answer shares ("header"). */
int etcd_answer_check(const char *what, json_object *ans);
/* {"name": "v"}, {"key": base64(key)}, and a transaction of compares and puts. */
int etcd_body_int64(const char *name, int64_t v, char **body);
int etcd_body_key(const char *key, char **body);
int etcd_body_txn(const struct etcd_cmp *cmp, size_t ncmp, const struct etcd_put *put,
		  size_t nput, char **body);

#endif
