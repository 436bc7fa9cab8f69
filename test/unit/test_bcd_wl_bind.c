/*
 * test_bcd_wl_bind.c: cmocka tests of the Workload API's binding of a
 * caller to its connection (src/agent/workload/attest.c): a caller of
 * another uid than bcd's connects to a real listening socket, and the
 * check must find every other process of that uid that holds its end of
 * the connection, a non-dumpable one included (prctl(PR_SET_DUMPABLE, 0)
 * makes the files under /proc/PID root's; the directory /proc/PID, whose
 * owner attest.c reads, keeps the effective uid: this test pins that).
 * Needs root (it switches the caller to uid 65534); skipped otherwise.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "bc_common.h"
#include "core/peer.h"
#include "workload/attest.h"

#define CALLER_UID 65534

typedef struct fixture
{
	char		dir[64];
	char		path[96];
	int			lfd;			/* listening */
	int			cfd;			/* bcd's end */
	pid_t		caller;			/* the connecting process */
	pid_t		holder;			/* its child, holding the connection too (0: none) */
	int			ready[2];		/* the caller says its holder is set up */
} fixture;

/*
 * The caller: uid CALLER_UID, dumpable again after the switch (as a process
 * exec'd by setpriv is), connects, forks a holder (made non-dumpable when
 * nondump) that keeps the connection and tells its pid once set up, and
 * waits.
 */
static void
caller_main(fixture *f, int with_holder, int nondump)
{
	struct sockaddr_un sa;
	int			fd;

	if (setgroups(0, NULL) != 0 || setresgid(CALLER_UID, CALLER_UID, CALLER_UID) != 0 ||
		setresuid(CALLER_UID, CALLER_UID, CALLER_UID) != 0 ||
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0)
		_exit(2);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0)
		_exit(3);
	if (with_holder && fork() == 0)
	{
		pid_t		me = getpid();

		if (nondump && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
			_exit(4);
		(void) !write(f->ready[1], &me, sizeof(me));
	}
	for (;;)
		pause();
}

/* Listen, start the caller, accept its connection. */
static void
start(fixture *f, int with_holder, int nondump)
{
	struct sockaddr_un sa;

	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/bcd-wl-bind-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(chmod(f->dir, 0755), 0);
	snprintf(f->path, sizeof(f->path), "%s/s", f->dir);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->lfd >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	assert_int_equal(bind(f->lfd, (struct sockaddr *) &sa, sizeof(sa)), 0);
	assert_int_equal(chmod(f->path, 0666), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	assert_int_equal(pipe(f->ready), 0);
	f->caller = fork();
	assert_true(f->caller >= 0);
	if (f->caller == 0)
		caller_main(f, with_holder, nondump);
	f->cfd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(f->cfd >= 0);
	/* the holder's pid, once it is set up */
	if (with_holder)
		assert_int_equal(read(f->ready[0], &f->holder, sizeof(f->holder)), sizeof(f->holder));
}

static void
stop(fixture *f)
{
	if (f->holder > 0)
	{
		kill(f->holder, SIGKILL);
		waitpid(f->holder, NULL, 0);	/* not our child: ECHILD, harmless */
	}
	kill(f->caller, SIGKILL);
	waitpid(f->caller, NULL, 0);
	close(f->cfd);
	close(f->lfd);
	close(f->ready[0]);
	close(f->ready[1]);
	unlink(f->path);
	rmdir(f->dir);
}

/* The check of f's caller: 0, or -1 with why. */
static int
check(fixture *f, char *why, size_t len)
{
	bcd_peer	p;
	bcd_peer	now;
	bcd_wl_bind b;
	int			rc;

	assert_int_equal(bcd_peer_read(f->cfd, &p), BC_OK);
	assert_int_equal(p.uid, CALLER_UID);
	assert_int_equal(p.pid, f->caller);
	assert_int_equal(bcd_wl_bind_open(f->cfd, &p, &b, why, len), BC_OK);
	now = p;
	bcd_peer_refresh(&now);
	why[0] = '\0';
	rc = bcd_wl_bind_check(&b, &p, &now, 0, why, len);
	bcd_wl_bind_close(&b);
	return rc;
}

/* The caller alone holds its end: bound. */
static void
test_alone(void **state)
{
	fixture		f;
	char		why[512];

	(void) state;
	if (geteuid() != 0)
		skip();
	start(&f, 0, 0);
	assert_int_equal(check(&f, why, sizeof(why)), 0);
	stop(&f);
}

/* A child of the caller's uid holds it too: refused, naming it. */
static void
test_holder(void **state)
{
	fixture		f;
	char		why[512];

	(void) state;
	if (geteuid() != 0)
		skip();
	start(&f, 1, 0);
	assert_int_equal(check(&f, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "also held by pid"));
	stop(&f);
}

/* The same child made non-dumpable (its /proc/PID then root's): refused all the same. */
static void
test_nondumpable_holder(void **state)
{
	fixture		f;
	char		why[512];
	char		want[64];

	(void) state;
	if (geteuid() != 0)
		skip();
	start(&f, 1, 1);
	assert_int_equal(check(&f, why, sizeof(why)), -1);
	snprintf(want, sizeof(want), "also held by pid %ld", (long) f.holder);
	assert_non_null(strstr(why, want));
	stop(&f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alone),
		cmocka_unit_test(test_holder),
		cmocka_unit_test(test_nondumpable_holder),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
