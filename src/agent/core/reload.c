/*
 * reload.c: a reload command run once (reload.h), shared by files mode
 * (workload/files.c) and SSH host certificates (core/ssh_host.c).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bc_common.h"
#include "core/child.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/reload.h"

/* In the reload's child: every other descriptor closed (3 is the file to run), cwd /. */
static int
reload_setup(void *arg)
{
	(void) arg;
	close_range(4, ~0U, 0);
	return chdir("/") != 0 ? -1 : 0;
}

/* Run a reload once (reload.h). */
int
bcd_reload_run(const char *prefix, const char *exe, int fd, const char *env_extra,
			   atomic_int *stopping)
{
	char	   *argv[2] = {(char *) exe, NULL};
	char	   *envp[4] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LC_ALL=C", (char *) env_extra, NULL};
	char		out[BCD_RELOAD_OUTPUT_MAX + 1];
	size_t		len = 0;
	double		deadline = bcd_now_ms() / 1000.0 + BCD_RELOAD_TIMEOUT;
	bcd_child	c;
	int			status = 0;
	int			reaped = 0;

	if (bcd_child_spawn_fd(&c, fd, argv, envp, 0, reload_setup, NULL) != BC_OK)
	{
		bcd_log("%s: cannot run %s: %s", prefix, exe, strerror(errno));
		return -1;
	}
	bcd_child_close(&c.in);
	while (!reaped && bcd_now_ms() / 1000.0 < deadline &&
		   (stopping == NULL || !atomic_load(stopping)))
	{
		struct pollfd pfd = {.fd = c.out,.events = POLLIN};

		if (c.out >= 0 && poll(&pfd, 1, 50) > 0)
		{
			char		junk[4096];
			ssize_t		r = len < BCD_RELOAD_OUTPUT_MAX ?
				read(c.out, out + len, BCD_RELOAD_OUTPUT_MAX - len) : read(c.out, junk, sizeof(junk));

			if (r > 0 && len < BCD_RELOAD_OUTPUT_MAX)
				len += (size_t) r;
			else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
				bcd_child_close(&c.out);
		}
		else if (c.out < 0)
		{
			struct timespec ts = {0, 50 * 1000 * 1000};

			nanosleep(&ts, NULL);
		}
		reaped = waitpid(c.pid, &status, WNOHANG) == c.pid;
	}
	bcd_child_end(&c, reaped, &status);
	out[len] = '\0';
	for (size_t i = 0; i < len; i++)
		if ((unsigned char) out[i] < 0x20 || (unsigned char) out[i] >= 0x7f)
			out[i] = out[i] == '\n' && i + 1 == len ? '\0' : ' ';
	if (!reaped)
	{
		bcd_log("%s: reload %s killed after %.0f s%s%s", prefix, exe, BCD_RELOAD_TIMEOUT,
				len ? ": " : "", out);
		return -1;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
	{
		bcd_log("%s: reload %s done%s%s", prefix, exe, len ? ": " : "", out);
		return 0;
	}
	bcd_log("%s: reload %s failed (%s %d)%s%s", prefix, exe,
			WIFEXITED(status) ? "exit" : "signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), len ? ": " : "", out);
	return -1;
}
