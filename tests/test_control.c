/* net/control: one request line in, one reply out, on a libev loop. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "kmod/log.h"
#include "net/control.h"

struct server {
	struct ev_loop *loop;
	struct control *ctl;
	ev_async stop;
	pthread_t thread;
	char path[64];
	int requests;
};

static char *echo(void *ctx, const char *request)
{
	struct server *s = ctx;
	char *r = NULL;

	s->requests++;
	if (!strcmp(request, "null"))
		return NULL;
	if (asprintf(&r, "got [%s]", request) < 0)
		return NULL;
	return r;
}

static void on_stop(struct ev_loop *loop, ev_async *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

static void *serve(void *arg)
{
	struct server *s = arg;

	ev_run(s->loop, 0);
	return NULL;
}

static int setup(void **state)
{
	struct server *s = calloc(1, sizeof(*s));

	snprintf(s->path, sizeof(s->path), "/tmp/us-control-%d", (int)getpid());
	s->loop = ev_loop_new(0);
	assert_int_equal(control_open(s->loop, s->path, echo, s, &s->ctl), 0);
	ev_async_init(&s->stop, on_stop);
	ev_async_start(s->loop, &s->stop);
	assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct server *s = *state;

	ev_async_send(s->loop, &s->stop);
	pthread_join(s->thread, NULL);
	control_free(s->ctl);
	assert_int_equal(access(s->path, F_OK), -1);   /* socket file removed */
	ev_loop_destroy(s->loop);
	free(s);
	return 0;
}

static void request_reply(void **state)
{
	struct server *s = *state;
	char *reply = NULL;

	for (int i = 0; i < 20; i++) {
		assert_int_equal(control_request(s->path, "status please", 5000, &reply), 0);
		assert_string_equal(reply, "got [status please]\n");
		free(reply);
	}
	assert_int_equal(control_request(s->path, "null", 5000, &reply), 0);
	assert_string_equal(reply, "error\n");
	free(reply);
}

static void bad_clients(void **state)
{
	struct server *s = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char big[CONTROL_MAX_REQUEST + 100], buf[256];
	char *reply = NULL;
	ssize_t n;
	int fd;

	/* a client that connects and goes away */
	strcpy(sa.sun_path, s->path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	/* a request without end */
	memset(big, 'x', sizeof(big));
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
	n = read(fd, buf, sizeof(buf) - 1);
	assert_true(n > 0);
	buf[n] = 0;
	assert_non_null(strstr(buf, "too long"));
	close(fd);
	/* the server still answers */
	assert_int_equal(control_request(s->path, "again", 5000, &reply), 0);
	assert_string_equal(reply, "got [again]\n");
	free(reply);
	/* nobody listening: an error, not a hang */
	assert_int_equal(control_request("/tmp/us-control-nobody", "x", 1000, &reply), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(request_reply, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_clients, setup, teardown),
	};

	log_set_level(LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
