/*
 * signals.c: stopping the daemon.  SIGTERM and SIGINT are blocked for the
 * whole process and only ever taken by sigtimedwait() (every sleep) or seen
 * pending (during an HTTPS request, through curl's progress callback), so a
 * stop request is never lost between a check and a sleep.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "core/clock.h"
#include "core/signals.h"

/* Set once a stop signal was taken (or bcd_stop_now was called); read by every thread. */
static atomic_int stop_taken = 0;

/* The signals that stop the daemon. */
static void
stop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
}

/* Block SIGTERM and SIGINT: from now on they are taken only where we wait. */
void
bcd_signals_block(void)
{
	sigset_t	set;

	stop_signals(&set);
	sigprocmask(SIG_BLOCK, &set, NULL);
}

/* Make every later bcd_stop_requested() true: the daemon is stopping. */
void
bcd_stop_now(void)
{
	stop_taken = 1;
}

/* 1 when SIGTERM or SIGINT was taken or is pending. */
int
bcd_stop_requested(void)
{
	sigset_t	pending;

	if (stop_taken)
		return 1;
	if (sigpending(&pending) == 0 &&
		(sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1))
		return 1;
	return 0;
}

/* Sleep for seconds unless a stop signal arrives first: 1 then, else 0. */
int
bcd_sleep(double seconds)
{
	sigset_t	set;
	double		end = bcd_now_ms() / 1000.0 + (seconds > 0 ? seconds : 0);

	stop_signals(&set);
	for (;;)
	{
		double		left = end - bcd_now_ms() / 1000.0;
		struct timespec ts;

		if (bcd_stop_requested())
		{
			stop_taken = 1;
			return 1;
		}
		if (left <= 0)
			return 0;
		ts.tv_sec = (time_t) left;
		ts.tv_nsec = (long) ((left - (double) ts.tv_sec) * 1e9);
		if (sigtimedwait(&set, NULL, &ts) > 0)
		{
			stop_taken = 1;
			return 1;
		}
		/* EAGAIN: time is up; EINTR: another signal; loop and recompute */
	}
}
