/*
 * pace.c: when the daemon acts.  SIGTERM and SIGINT are blocked for the
 * whole process and only ever taken by sigtimedwait() (every sleep) or seen
 * pending (during an HTTPS request, through curl's progress callback), so a
 * stop request is never lost between a check and a sleep.  Jitter comes from
 * OpenSSL's RAND_bytes.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "daemon.h"

/* Shortest and longest backoff step, in seconds. */
#define BACKOFF_FIRST 1.0
#define BACKOFF_MAX 60.0

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

/* Seconds on the monotonic clock. */
static double
monotonic_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Sleep for seconds unless a stop signal arrives first: 1 then, else 0. */
int
bcd_sleep(double seconds)
{
	sigset_t	set;
	double		end = monotonic_now() + (seconds > 0 ? seconds : 0);

	stop_signals(&set);
	for (;;)
	{
		double		left = end - monotonic_now();
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

/* A uniform number in [0, 1). */
static double
uniform(void)
{
	uint32_t	r = 0;

	if (RAND_bytes((unsigned char *) &r, sizeof(r)) != 1)
		return 0.5;
	return (double) r / 4294967296.0;
}

/* seconds, moved at random by up to +-fraction of itself. */
double
bcd_jitter(double seconds, double fraction)
{
	return seconds * (1.0 + fraction * (2.0 * uniform() - 1.0));
}

/* Start over at the first step. */
void
bcd_backoff_reset(bcd_backoff *b)
{
	b->next = BACKOFF_FIRST;
}

/*
 * The next wait after a failure: the current step with +-10% jitter (the
 * step then doubles, up to 60 s), but never less than a Retry-After the
 * gateway sent (clamped to [1, max_retry_after]).
 */
double
bcd_backoff_next(bcd_backoff *b, long retry_after, long max_retry_after)
{
	double		wait = bcd_jitter(b->next, 0.1);

	b->next = fmin(b->next * 2.0, BACKOFF_MAX);
	if (retry_after > 0)
	{
		double		told = (double) (retry_after < max_retry_after ?
									 retry_after : max_retry_after);

		if (told < 1)
			told = 1;
		wait = fmax(wait, told);
	}
	return wait;
}

/* Log one line on stderr, prefixed "bcd: " (never keys or tokens), in one write. */
void
bcd_log(const char *fmt,...)
{
	char		line[2048];
	va_list		ap;
	int			n;

	memcpy(line, "bcd: ", 5);
	va_start(ap, fmt);
	n = vsnprintf(line + 5, sizeof(line) - 6, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t) n > sizeof(line) - 7)
		n = (int) (sizeof(line) - 7);
	line[5 + n] = '\n';
	line[6 + n] = '\0';
	fputs(line, stderr);
	fflush(stderr);
}
