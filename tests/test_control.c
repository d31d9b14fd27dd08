/* net/control: one request line in, one reply out, on a libev loop; the
 * socket is private to the agent's user from its creation. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "kmod/log.h"
#include "net/control.h"

/* The control socket must not depend on a chmod() after bind(): a client
 * that connects between the two is served. This stands in for that window
 * by making every chmod() of this binary a no-op that succeeds. */
int chmod(const char *path, mode_t mode)
{
	(void)path;
	(void)mode;
	return 0;
}

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

/* Idle clients cannot lock the next user out (issue 25, item 8): 200 that
 * connect and send nothing, then a real request is answered at once; a
 * client that sends nothing is closed after its 2 s deadline. */
static void idle_clients(void **state)
{
	struct server *s = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct pollfd p = { .events = POLLIN };
	int fds[200], fd;
	char *reply = NULL, buf[16];
	uint64_t t0;
	double ms;

	strcpy(sa.sun_path, s->path);
	for (int i = 0; i < 200; i++) {
		fds[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_int_equal(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
	}
	t0 = now_ns();
	assert_int_equal(control_request(s->path, "status", 5000, &reply), 0);
	ms = (double)(now_ns() - t0) / 1e6;
	printf("status answered in %.1f ms with 200 idle clients connected\n", ms);
	assert_string_equal(reply, "got [status]\n");
	free(reply);
	assert_true(ms < 1500);
	for (int i = 0; i < 200; i++)
		close(fds[i]);
	/* One idle client: closed at its deadline, not before, not never. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	t0 = now_ns();
	p.fd = fd;
	assert_int_equal(poll(&p, 1, 5000), 1);
	ms = (double)(now_ns() - t0) / 1e6;
	assert_int_equal(read(fd, buf, sizeof(buf)), 0);
	printf("an idle client was closed after %.0f ms\n", ms);
	assert_true(ms > 1500 && ms < 4000);
	close(fd);
}

/* Created private even with umask 0, and with no chmod() to fix it later. */
static void private_socket(void **state)
{
	struct server *s = *state;
	struct ev_loop *loop = ev_loop_new(0);
	struct control *ctl;
	struct stat st;
	char path[64];
	mode_t old = umask(0);
	int fd;

	(void)s;
	snprintf(path, sizeof(path), "/tmp/us-control-umask-%d", (int)getpid());
	assert_int_equal(control_open(loop, path, echo, NULL, &ctl), 0);
	umask(old);
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 077, 0);
	control_free(ctl);
	/* Something that is not a socket is not removed to make room. */
	fd = open(path, O_CREAT | O_WRONLY | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(control_open(loop, path, echo, NULL, &ctl), -EEXIST);
	assert_int_equal(unlink(path), 0);
	ev_loop_destroy(loop);
}

/* A client of another uid that gets past the file's mode (root opened it up
 * here) is refused by its credentials: one error line, then end of file,
 * and the handler never runs. */
static void foreign_peer(void **state)
{
	struct server *s = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char buf[256] = "", *reply = NULL;
	int status, fd;
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	if (geteuid() != 0) {
		printf("SKIP: foreign_peer needs root to connect as another uid\n");
		skip();
	}
	strcpy(sa.sun_path, s->path);
	assert_int_equal(fchmodat(AT_FDCWD, s->path, 0666, 0), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(3);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			_exit(4);
		signal(SIGPIPE, SIG_IGN); /* the server may have closed already */
		n = write(fd, "status\n", 7);
		while ((n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
			len += (size_t)n;
		buf[len] = 0;
		_exit(strncmp(buf, "error permission denied", 23) || !strchr(buf, '\n') ||
		      strchr(buf, '\n')[1] ? 6 : 0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(s->requests, 0);
	/* The agent's own user is still served. */
	assert_int_equal(control_request(s->path, "mine", 5000, &reply), 0);
	assert_string_equal(reply, "got [mine]\n");
	free(reply);
}

/* A request that arrived while the agent's loop was stalled past the 2 s
 * request deadline (an epoch's work, an emulator's pause) is served, not
 * dropped: the deadline and the request are seen in the same iteration,
 * and the request wins. The loop is stepped by hand, without a thread. */
static void stalled_loop(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ev_loop *loop = ev_loop_new(0);
	struct control *ctl;
	struct server mine = { 0 };
	char path[64], buf[128] = "";
	size_t len = 0;
	ssize_t n;
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/us-control-stall-%d", (int)getpid());
	assert_int_equal(control_open(loop, path, echo, &mine, &ctl), 0);
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ev_run(loop, EVRUN_NOWAIT);         /* accepted; no request yet */
	usleep(2500 * 1000);                /* the loop stalls past the deadline */
	assert_int_equal(write(fd, "late\n", 5), 5);
	for (int i = 0; i < 4; i++)         /* deadline and request due together */
		ev_run(loop, EVRUN_NOWAIT);
	while (len < sizeof(buf) - 1) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		ev_run(loop, EVRUN_NOWAIT);
		if (poll(&p, 1, 100) <= 0)
			continue;
		n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = 0;
	assert_string_equal(buf, "got [late]\n");
	assert_int_equal(mine.requests, 1);
	close(fd);
	control_free(ctl);
	ev_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(request_reply, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_clients, setup, teardown),
		cmocka_unit_test_setup_teardown(idle_clients, setup, teardown),
		cmocka_unit_test_setup_teardown(private_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(foreign_peer, setup, teardown),
		cmocka_unit_test(stalled_loop),
	};

	log_set_level(LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
