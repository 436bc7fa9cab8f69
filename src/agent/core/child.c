/*
 * child.c: a child process run with a deadline (child.h).  The child starts
 * with no signal blocked, SIGPIPE at its default, in its own process group,
 * its stdin and stdout (and stderr: on the stdout pipe or its own) on pipes
 * whose other ends only bcd holds (O_CLOEXEC); the caller's setup runs last,
 * then the exec: of a path, or of a descriptor bcd opened and checked
 * (bcd_child_spawn_fd: what was checked is what runs, whatever the path
 * names by then).  Its exit is polled every 10 ms up to the deadline; a child
 * not reaped by then is killed (SIGKILL) with its process group and reaped.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bc_common.h"
#include "core/child.h"
#include "core/clock.h"
#include "core/signals.h"

/* Close *fd unless it is -1, and make it -1. */
void
bcd_child_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/*
 * In the child: exec by the descriptor at 3 (close-on-exec).  A script
 * (#!) is run by its interpreter from /dev/fd/3, which the kernel refuses
 * (ENOENT) while 3 is close-on-exec; then once more with 3 left open to
 * the interpreter, as sudo does with its fdexec.
 */
static void
exec_fd3(char *const argv[], char *const envp[])
{
	fexecve(3, argv, envp);
	if (errno == ENOENT && fcntl(3, F_SETFD, 0) == 0)
		fexecve(3, argv, envp);
}

/*
 * Fork and exec path, or the descriptor exec_fd when it is not -1, with
 * argv (envp: its whole environment, NULL: ours), on pipes: c filled.
 * own_stderr: stderr on a pipe of its own (c->err), else on stdout's.
 * setup (NULL: none) runs in the child before the exec (exec_fd is then
 * descriptor 3, close-on-exec; setup must leave it).  BC_OK, or BC_EINVAL
 * with errno when a pipe or the fork failed (nothing is left open then).
 */
static int
spawn(bcd_child *c, const char *path, int exec_fd, char *const argv[], char *const envp[],
	  int own_stderr, bcd_child_setup setup, void *arg)
{
	int			in[2] = {-1, -1};
	int			out[2] = {-1, -1};
	int			errp[2] = {-1, -1};
	int			saved;

	c->pid = -1;
	c->in = c->out = c->err = -1;
	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 ||
		(own_stderr && pipe2(errp, O_CLOEXEC) != 0))
		goto failed;
	c->pid = fork();
	if (c->pid < 0)
		goto failed;
	if (c->pid == 0)
	{
		/* the child: async-signal-safe calls only (bcd has threads) */
		sigset_t	none;
		static char *const no_env[] = {NULL};

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		setpgid(0, 0);
		if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 ||
			dup2(own_stderr ? errp[1] : out[1], 2) < 0)
			_exit(127);
		if (exec_fd >= 0 && (exec_fd == 3 ? fcntl(3, F_SETFD, FD_CLOEXEC) :
							 dup3(exec_fd, 3, O_CLOEXEC)) < 0)
			_exit(127);
		if (setup != NULL && setup(arg) != 0)
			_exit(127);
		if (exec_fd >= 0)
			exec_fd3(argv, envp != NULL ? envp : no_env);
		else if (envp != NULL)
			execve(path, argv, envp);
		else
			execv(path, argv);
		_exit(127);
	}
	setpgid(c->pid, c->pid);
	bcd_child_close(&in[0]);
	bcd_child_close(&out[1]);
	bcd_child_close(&errp[1]);
	c->in = in[1];
	c->out = out[0];
	c->err = errp[0];
	return BC_OK;

failed:
	saved = errno;
	for (int i = 0; i < 2; i++)
	{
		bcd_child_close(&in[i]);
		bcd_child_close(&out[i]);
		bcd_child_close(&errp[i]);
	}
	errno = saved;
	return BC_EINVAL;
}

/* Fork and exec path (see spawn). */
int
bcd_child_spawn(bcd_child *c, const char *path, char *const argv[], char *const envp[],
				int own_stderr, bcd_child_setup setup, void *arg)
{
	return spawn(c, path, -1, argv, envp, own_stderr, setup, arg);
}

/* Fork and exec the file open at fd (see spawn; fd is 3 in the child). */
int
bcd_child_spawn_fd(bcd_child *c, int fd, char *const argv[], char *const envp[],
				   int own_stderr, bcd_child_setup setup, void *arg)
{
	return spawn(c, NULL, fd, argv, envp, own_stderr, setup, arg);
}

/*
 * Wait for c's exit until deadline (seconds of bcd_now_ms), and when
 * stoppable until a stop signal (bcd_stop_requested): BCD_CHILD_EXITED with
 * *status, or what came first.
 */
int
bcd_child_wait(bcd_child *c, double deadline, int stoppable, int *status)
{
	for (;;)
	{
		struct timespec ts = {0, 10 * 1000 * 1000};

		if (waitpid(c->pid, status, WNOHANG) == c->pid)
			return BCD_CHILD_EXITED;
		if (bcd_now_ms() / 1000.0 >= deadline)
			return BCD_CHILD_TIMED_OUT;
		if (stoppable && bcd_stop_requested())
			return BCD_CHILD_STOPPED;
		nanosleep(&ts, NULL);
	}
}

/*
 * The end of c: unless reaped, its process group and it killed (SIGKILL)
 * and it reaped into *status; our ends of its pipes closed.
 */
void
bcd_child_end(bcd_child *c, int reaped, int *status)
{
	if (!reaped)
	{
		kill(-c->pid, SIGKILL);
		kill(c->pid, SIGKILL);
		while (waitpid(c->pid, status, 0) < 0 && errno == EINTR)
			;
	}
	bcd_child_close(&c->in);
	bcd_child_close(&c->out);
	bcd_child_close(&c->err);
}
