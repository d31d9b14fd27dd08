/* `understudy status --json` and the other JSON documents of the control
 * socket: valid JSON whatever a string field holds (a quote, a backslash, a
 * newline in a reason), the string read back as it was, and the documented
 * field names and types unchanged (docs/design.md, man/understudy.8, the
 * system tests and benches that read them). No VM: an agent's status
 * reads only its counters. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "primary/primary_int.h"
#include "secondary/drill_int.h"

/* A reason no line of text or hand-written JSON survives. */
#define NASTY "said \"no\" at C:\\vm\\disk\nstate protected\n\ttab \x01 end"

/* Parses text as exactly one JSON object followed by at most a newline. */
static json_object *parse_one(const char *text)
{
	json_tokener *tok = json_tokener_new();
	json_object *o;
	size_t len = strlen(text), end;

	assert_non_null(tok);
	o = json_tokener_parse_ex(tok, text, (int)len);
	end = json_tokener_get_parse_end(tok);
	if (!o || json_tokener_get_error(tok) != json_tokener_success)
		fail_msg("not JSON (%s): %s", json_tokener_error_desc(json_tokener_get_error(tok)), text);
	json_tokener_free(tok);
	if (!json_object_is_type(o, json_type_object))
		fail_msg("not a JSON object: %s", text);
	if (strspn(text + end, "\n") != len - end)
		fail_msg("text after the object: '%s'", text + end);
	return o;
}

struct field {
	const char *name;
	enum json_type type;
};

/* Every field of o is in want, with its type, and the other way round. */
static void fields_are(json_object *o, const struct field *want, size_t n)
{
	size_t i, seen = 0;

	for (i = 0; i < n; i++) {
		json_object *v;

		if (!json_object_object_get_ex(o, want[i].name, &v))
			fail_msg("no field \"%s\" in %s", want[i].name, json_object_to_json_string(o));
		if (json_object_get_type(v) != want[i].type)
			fail_msg("\"%s\" is a %s, want a %s", want[i].name,
				 json_type_to_name(json_object_get_type(v)), json_type_to_name(want[i].type));
	}
	json_object_object_foreach(o, key, val) {
		(void)val;
		for (i = 0; i < n && strcmp(want[i].name, key); i++)
			;
		if (i == n)
			fail_msg("unexpected field \"%s\"", key);
		seen++;
	}
	assert_int_equal(seen, n);
}

static const char *str(json_object *o, const char *key)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		fail_msg("no string \"%s\" in %s", key, json_object_to_json_string(o));
	return json_object_get_string(v);
}

#define D json_type_double
#define I json_type_int
#define S json_type_string
#define B json_type_boolean
#define A json_type_array

/* What every VM's status has (repl_vm_status_json), after "name". */
#define VM_FIELDS \
	{ "guest", S }, { "mem_bytes", I }, { "vcpus", I }, { "uptime_s", D }, \
	{ "running_since", S }, { "devices", A }, { "took_over", B }, { "took_over_epoch", I }, \
	{ "took_over_at", S }, { "took_over_silence_ms", D }

static const struct field primary_fields[] = {
	{ "role", S }, { "state", S }, { "name", S }, VM_FIELDS, { "peer", S }, { "epoch", I }, { "acked", I },
	{ "pause_p50_us", D }, { "pause_p99_us", D }, { "dirty_pages_last", I },
	{ "dirty_pages_avg", D }, { "bytes_sent", I }, { "lag_ms", D }, { "stretched", I },
	{ "since_heartbeat_ms", D }, { "pause_max_us", D }, { "pause_max_pages", I },
	{ "pause_max_harvest_us", D }, { "pause_max_copy_us", D }, { "pause_max_state_us", D },
	{ "reason", S }, { "fencing", S }, { "migration_downtime_ms", D },
	{ "migration_total_ms", D }, { "throttle_pct", I }, { "resumed_epoch", I },
	{ "switch_in_ms", D }, { "precopy_passes", I }, { "precopy_pages", I },
	{ "precopy_resent", I }, { "left_bytes", I }, { "predicted_downtime_ms", D },
	{ "hot_pages", I }, { "hot_budget", I }, { "reprotected_pages", I }, { "epochs_timer", I },
	{ "epochs_output", I },
};

static const struct field secondary_fields[] = {
	{ "role", S }, { "state", S }, { "name", S }, VM_FIELDS, { "peer", S }, { "epoch", I }, { "acked", I },
	{ "apply_p50_us", D },
	{ "apply_p99_us", D }, { "dirty_pages_last", I }, { "bytes_received", I },
	{ "since_heartbeat_ms", D }, { "verify_ok", I }, { "verify_failed", I }, { "reason", S },
	{ "fencing", S }, { "switchovers", I }, { "switch_epoch", I }, { "switch_downtime_ms", D },
};

/* An engine as status sees it; its reason is written in as a peer's error
 * text or a future caller could leave it (repl_fault_set replaces quotes
 * today, the encoder must not depend on it). */
static struct repl_primary *engine(struct repl_primary_opts *o, const char *what)
{
	struct repl_primary *p = calloc(1, sizeof(*p));

	assert_non_null(p);
	o->peer = "[::1]:7000";
	p->o = o;
	p->state = P_PROTECTED;
	p->ep.epoch = 41;
	p->ep.acked = 40;
	p->epochs_timer = 29;
	p->epochs_output = 11;
	p->fault.kind = REPL_FAULT_PEER_PROTOCOL;
	snprintf(p->fault.what, sizeof(p->fault.what), "%s", what);
	return p;
}

static void primary_status_escapes_reason(void **state)
{
	struct repl_primary_opts o = { .ops.vm = &(struct repl_name){ .name = "web1" } };
	struct repl_primary *p = engine(&o, NASTY);
	char *text = repl_primary_status_text(p, "status json");
	json_object *js;

	(void)state;
	assert_non_null(text);
	js = parse_one(text);
	assert_string_equal(str(js, "reason"), "peer protocol error: " NASTY);
	assert_string_equal(str(js, "name"), "web1");
	assert_string_equal(str(js, "state"), "protected");
	assert_string_equal(str(js, "peer"), "[::1]:7000");
	fields_are(js, primary_fields, sizeof(primary_fields) / sizeof(primary_fields[0]));
	json_object_put(js);
	free(text);
	free(p);
}

/* The text status keeps one line per field: the reason's newline does not
 * make a second "state" line a reader could take for the real one. */
static void primary_status_text_one_line_per_field(void **state)
{
	struct repl_primary_opts o = { .cfg.guest = "counter" };
	struct repl_primary *p = engine(&o, NASTY);
	char *text = repl_primary_status_text(p, "status");
	const char *at;

	(void)state;
	assert_non_null(text);
	at = strstr(text, "\nstate ");
	assert_non_null(at);
	assert_true(!strncmp(at, "\nstate protected\n", 17));
	assert_null(strstr(at + 1, "\nstate "));
	assert_non_null(strstr(text, "\nname counter\n"));   /* no --name: the guest's */
	/* the JSON's epochs_timer and epochs_output, each in its place */
	assert_non_null(strstr(text, "\nepochs by trigger: timer 29, output 11\n"));
	assert_non_null(strstr(text, "\nreason peer protocol error: said \"no\" at C:\\vm\\disk"));
	free(text);
	free(p);
}

static void secondary_status_escapes_reason(void **state)
{
	struct repl_secondary_opts o = { 0 };
	struct repl_secondary *s = calloc(1, sizeof(*s));
	char *text;
	json_object *js;

	(void)state;
	assert_non_null(s);
	s->o = &o;
	s->state = S_STANDBY;
	s->con = (void *)1;      /* a standby that could take over (only tested for NULL) */
	s->stage.applied = 7;
	s->fault.kind = REPL_FAULT_PEER_LOST;
	snprintf(s->fault.what, sizeof(s->fault.what), "%s", NASTY);
	text = repl_sec_status_text(s, "status json");
	assert_non_null(text);
	js = parse_one(text);
	assert_string_equal(str(js, "reason"), "peer lost: " NASTY);
	assert_string_equal(str(js, "role"), "secondary");
	assert_string_equal(str(js, "state"), "standby");
	assert_string_equal(str(js, "name"), "");   /* neither a name nor a primary's guest yet */
	fields_are(js, secondary_fields, sizeof(secondary_fields) / sizeof(secondary_fields[0]));
	json_object_put(js);
	free(text);
	free(s);
}

/* A VM with a disk adds its five counters. */
static void primary_status_disk_fields(void **state)
{
	static const struct field disk[] = {
		{ "disk_epochs", I }, { "disk_blocks", I }, { "disk_blocks_per_epoch", D },
		{ "disk_copy_us_per_epoch", D }, { "disk_sync_blocks", I },
	};
	struct field all[sizeof(primary_fields) / sizeof(primary_fields[0]) + 5];
	size_t n = sizeof(primary_fields) / sizeof(primary_fields[0]);
	struct repl_primary_opts o = { 0 };
	struct repl_primary *p = engine(&o, "benign");
	char *text;
	json_object *js;

	(void)state;
	memcpy(all, primary_fields, sizeof(primary_fields));
	memcpy(all + n, disk, sizeof(disk));
	p->ep.disk.nblocks = 64;
	p->ep.disk.epochs_with_blocks = 4;
	p->ep.disk.blocks_total = 10;
	p->ep.disk.copy_ns_total = 6000;
	p->ep.disk.sync_blocks = 1024;
	text = repl_primary_status_text(p, "status json");
	js = parse_one(text);
	fields_are(js, all, n + 5);
	assert_int_equal(json_object_get_int64(json_object_object_get(js, "disk_sync_blocks")), 1024);
	assert_string_equal(json_object_to_json_string(json_object_object_get(js, "disk_blocks_per_epoch")),
			    "2.5");
	assert_string_equal(json_object_to_json_string(json_object_object_get(js, "disk_copy_us_per_epoch")),
			    "1.5");
	json_object_put(js);
	free(text);
	free(p);
}

/* No reason: an empty string, as before. */
static void status_without_reason(void **state)
{
	struct repl_primary_opts o = { 0 };
	struct repl_primary *p = engine(&o, "");
	char *text;
	json_object *js;

	(void)state;
	p->fault.kind = REPL_FAULT_NONE;
	text = repl_primary_status_text(p, "status json");
	js = parse_one(text);
	assert_string_equal(str(js, "reason"), "");
	json_object_put(js);
	free(text);
	free(p);
}

/* A standby without a drill: "drill status" says idle, as one object. */
static void drill_status_idle(void **state)
{
	struct repl_secondary *s = calloc(1, sizeof(*s));
	char *text;
	json_object *js;

	(void)state;
	assert_non_null(s);
	text = drill_status_json(s);
	js = parse_one(text);
	assert_string_equal(str(js, "state"), "idle");
	json_object_put(js);
	free(text);
	free(s);
}

/* The command line reads a status through proto_json_read: the reason
 * comes back byte for byte, the counters as numbers, nothing is wrong. */
static void reader_reads_status_back(void **state)
{
	struct repl_primary_opts o = { 0 };
	struct repl_primary *p = engine(&o, NASTY);
	char *text = repl_primary_status_text(p, "status json");
	struct proto_json_reader rd;

	(void)state;
	assert_non_null(text);
	assert_int_equal(proto_json_read(&rd, text), 0);
	assert_string_equal(proto_json_need_str(&rd, "reason"), "peer protocol error: " NASTY);
	assert_string_equal(proto_json_need_str(&rd, "state"), "protected");
	assert_int_equal(proto_json_need_u64(&rd, "epoch"), p->ep.epoch);
	assert_int_equal(proto_json_need_u64(&rd, "epochs_timer"), 29);
	assert_int_equal(proto_json_need_u64(&rd, "epochs_output"), 11);
	(void)proto_json_need_num(&rd, "lag_ms");
	(void)proto_json_need_num(&rd, "bytes_sent");
	assert_string_equal(rd.why, "");
	proto_json_reader_fini(&rd);
	free(text);
	free(p);
}

/* A reply that is not what the reader needs says what is wrong, the first
 * thing only, and reads after it give "" and 0 (no crash, no stale value). */
static void reader_names_what_is_wrong(void **state)
{
	static const struct {
		const char *text, *why;
	} bad[] = {
		{ "{\"role\":\"primary\"}", "no field \"state\"" },
		{ "{\"state\":7}", "\"state\" is a JSON int, not a string" },
		{ "{\"state\":null}", "\"state\" is a JSON null, not a string" },
		{ "{\"state\":\"protected\",\"epoch\":\"12\"}", "\"epoch\" is a JSON string, not an integer" },
		{ "{\"state\":\"protected\",\"epoch\":1.5}", "\"epoch\" is a JSON double, not an integer" },
		{ "{\"state\":\"protected\",\"epoch\":-3}", "\"epoch\" is negative" },
		{ "{\"state\":\"protected\",\"epoch\":3,\"lag_ms\":\"1\"}", "\"lag_ms\" is a JSON string, not a number" },
	};
	struct proto_json_reader rd;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t epoch;

		assert_int_equal(proto_json_read(&rd, bad[i].text), 0);
		(void)proto_json_need_str(&rd, "state");
		epoch = proto_json_need_u64(&rd, "epoch");
		assert_int_equal(epoch, rd.why[0] ? 0 : 3);
		(void)proto_json_need_num(&rd, "lag_ms");
		assert_string_equal(proto_json_need_str(&rd, "role"), "");   /* after: nothing */
		assert_string_equal(rd.why, bad[i].why);
		proto_json_reader_fini(&rd);
	}
	/* A number read as a number takes an integer too. */
	assert_int_equal(proto_json_read(&rd, "{\"lag_ms\":2,\"p\":0.25}"), 0);
	assert_true(proto_json_need_num(&rd, "lag_ms") == 2.0);
	assert_true(proto_json_need_num(&rd, "p") == 0.25);
	assert_string_equal(rd.why, "");
	proto_json_reader_fini(&rd);
}

/* Text that is not one JSON object: -EPROTO, the reason and the text's
 * start (one line, control bytes as '?'), and every read after it fails. */
static void reader_refuses_what_is_not_an_object(void **state)
{
	static const struct {
		const char *text, *why;
	} bad[] = {
		{ "error unknown request 'status json'\n",
		  "not a JSON object (unexpected character): 'error unknown request 'status json'?'" },
		{ "{\"state\":\"protected\"} {}", "not a JSON object (text after the object): "
		  "'{\"state\":\"protected\"} {}'" },
		{ "{\"state\":\"prot", "not a JSON object (cut short): '{\"state\":\"prot'" },
		{ "[1,2]", "not a JSON object (another JSON value): '[1,2]'" },
		{ "", "not a JSON object (cut short): ''" },
		{ "{\"reason\":\"a very long reply that goes on and on past the quoted part\"}",
		  "not a JSON object (cut short): '{\"reason\":\"a very long reply that goes on and o...'" },
	};
	struct proto_json_reader rd;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* the last one is whole JSON: cut short for the test */
		const char *text = bad[i].text;
		char cut[64];

		if (i == sizeof(bad) / sizeof(bad[0]) - 1) {
			snprintf(cut, sizeof(cut), "%s", text);
			text = cut;
		}
		assert_int_equal(proto_json_read(&rd, text), -EPROTO);
		assert_null(rd.o);
		assert_string_equal(proto_json_need_str(&rd, "state"), "");
		assert_string_equal(rd.why, bad[i].why);
		proto_json_reader_fini(&rd);
	}
}

/* A VM as status sees it: a machine's configuration, no KVM. */
static struct repl_vm *fake_vm(const char *guest)
{
	struct repl_vm *v = calloc(1, sizeof(*v));

	assert_non_null(v);
	v->m = calloc(1, sizeof(*v->m));
	assert_non_null(v->m);
	snprintf(v->m->cfg.guest, sizeof(v->m->cfg.guest), "%s", guest);
	v->m->cfg.mem_bytes = 64ull << 20;
	v->m->cfg.ncpus = 2;
	return v;
}

static void fake_vm_free(struct repl_vm *v)
{
	free(v->m);
	free(v);
}

static bool has_line(const char *text, const char *start)
{
	const char *at = text;
	size_t n = strlen(start);

	for (; at; at = strchr(at, '\n'), at = at ? at + 1 : NULL)
		if (!strncmp(at, start, n))
			return true;
	return false;
}

/* The lines every running VM shows. */
static void vm_lines_present(const char *text, const char *guest)
{
	char want[64];

	snprintf(want, sizeof(want), "guest %s\n", guest);
	if (!strstr(text, want) || !has_line(text, "memory 64 MiB") || !has_line(text, "vCPUs 2") ||
	    !has_line(text, "uptime ") || !strstr(text, " on this host (since ") ||
	    !has_line(text, "devices serial console"))
		fail_msg("the guest, memory, vCPUs, uptime or devices missing:\n%s", text);
}

/* A fresh protected primary: no switchover, migration, throttle or
 * pre-copy behind it, so no such line; the VM's own lines are there. */
static void fresh_primary_text_only_what_applies(void **state)
{
	struct repl_primary_opts o = { 0 };
	struct repl_primary *p = engine(&o, "");
	static const char *const absent[] = {
		"resumed from", "migration ", "switchover", "throttle", "pre-copy", "left to send",
		"predicted downtime", "took over", "since heartbeat",
	};
	char *text;

	(void)state;
	p->fault.kind = REPL_FAULT_NONE;
	p->vm = fake_vm("counter");
	repl_vm_mark_running(p->vm);
	text = repl_primary_status_text(p, "status");
	assert_non_null(text);
	vm_lines_present(text, "counter");
	for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
		if (strstr(text, absent[i]))
			fail_msg("a fresh primary shows \"%s\":\n%s", absent[i], text);
	assert_true(has_line(text, "reason none"));
	free(text);
	/* ...and once they happened, they show. */
	o.resume_epoch = 12;
	o.switch_downtime_ms = 3.5;
	p->migrate_ms = 30;
	p->throttle_pct = 20;
	p->downtime_ms = 4.25;
	p->migration_ms = 900;
	p->ep.st.pre_passes = 3;
	text = repl_primary_status_text(p, "status");
	assert_true(has_line(text, "resumed from epoch 12 (switchover, downtime about 3.500 ms)"));
	assert_true(has_line(text, "migration downtime 4.250 ms"));
	assert_true(has_line(text, "migration total 900.000 ms"));
	assert_true(has_line(text, "throttle 20 %"));
	assert_true(has_line(text, "pre-copy 3 passes"));
	assert_true(has_line(text, "predicted downtime"));
	free(text);
	fake_vm_free(p->vm);
	free(p);
}

/* A standby that took over: the takeover in one line, none of the
 * standby's link lines (a silence that grows, applies, the reason that
 * led to the takeover); its JSON keeps every field. */
static void survivor_text_says_took_over(void **state)
{
	struct repl_secondary_opts o = { 0 };
	struct repl_secondary *s = calloc(1, sizeof(*s));
	static const char *const absent[] = {
		"since heartbeat", "apply p50", "apply p99", "reason ", "bytes received", "switchovers",
		"verified epochs",
	};
	char *text;
	json_object *js;

	(void)state;
	assert_non_null(s);
	s->o = &o;
	s->state = S_STANDBY;
	s->stage.applied = 77;
	s->link.last_rx_ns = now_ns() - 2000000000ull;
	s->link.conn = (void *)1;       /* only tested for NULL */
	s->vm = fake_vm("counter");
	s->cfg = s->vm->m->cfg;
	repl_fault_set(&s->fault, REPL_FAULT_PEER_LOST, 0, "silent for 512 ms");
	text = repl_sec_status_text(s, "status");
	assert_true(has_line(text, "role secondary"));
	assert_true(has_line(text, "since heartbeat"));
	assert_true(has_line(text, "reason peer lost: silent for 512 ms"));
	assert_true(has_line(text, "uptime none: the guest does not run on this host"));
	assert_false(has_line(text, "switchovers"));
	free(text);

	s->state = S_ACTIVE;            /* as take_over leaves it */
	s->link.conn = NULL;
	repl_vm_mark_running(s->vm);
	repl_vm_mark_took_over(s->vm, 77, 512.4);
	s->fault_at_takeover = s->fault;
	text = repl_sec_status_text(s, "status");
	assert_non_null(text);
	assert_true(has_line(text, "role primary"));
	assert_true(has_line(text, "state unprotected"));
	vm_lines_present(text, "counter");
	if (!has_line(text, "took over at epoch 77, 20") || !strstr(text, " UTC, after 512 ms of silence\n"))
		fail_msg("no took-over line:\n%s", text);
	for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
		if (strstr(text, absent[i]))
			fail_msg("a survivor shows \"%s\":\n%s", absent[i], text);
	free(text);
	/* A failure after the takeover is news: shown. */
	repl_fault_set(&s->fault, REPL_FAULT_LOCAL_FATAL, -EIO, "disk gone");
	text = repl_sec_status_text(s, "status");
	assert_true(has_line(text, "reason local fatal failure: disk gone"));
	free(text);

	text = repl_sec_status_text(s, "status json");
	js = parse_one(text);
	fields_are(js, secondary_fields, sizeof(secondary_fields) / sizeof(secondary_fields[0]));
	assert_true(json_object_get_boolean(json_object_object_get(js, "took_over")));
	assert_int_equal(json_object_get_int64(json_object_object_get(js, "took_over_epoch")), 77);
	assert_int_equal(json_object_get_int64(json_object_object_get(js, "vcpus")), 2);
	assert_int_equal(json_object_get_int64(json_object_object_get(js, "mem_bytes")), 64 << 20);
	assert_string_equal(str(js, "guest"), "counter");
	assert_true(strlen(str(js, "took_over_at")) == 20);   /* 2026-12-05T16:20:01Z */
	json_object_put(js);
	free(text);
	fake_vm_free(s->vm);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(primary_status_escapes_reason),
		cmocka_unit_test(primary_status_text_one_line_per_field),
		cmocka_unit_test(secondary_status_escapes_reason),
		cmocka_unit_test(fresh_primary_text_only_what_applies),
		cmocka_unit_test(survivor_text_says_took_over),
		cmocka_unit_test(primary_status_disk_fields),
		cmocka_unit_test(status_without_reason),
		cmocka_unit_test(drill_status_idle),
		cmocka_unit_test(reader_reads_status_back),
		cmocka_unit_test(reader_names_what_is_wrong),
		cmocka_unit_test(reader_refuses_what_is_not_an_object),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
