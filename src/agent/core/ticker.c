/*
 * ticker.c: a stoppable periodic thread (ticker.h): the round, then a
 * timed wait on a condition variable that bcd_ticker_stop signals.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "core/ticker.h"

/* Make t ready to start (ticker.h). */
void
bcd_ticker_init(bcd_ticker *t)
{
	pthread_condattr_t ca;

	t->started = 0;
	t->stop = 0;
	t->kick = 0;
	pthread_mutex_init(&t->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
}

/* Wait seconds, or until stopped: 1 when stopped. */
static int
wait_or_stop(bcd_ticker *t, long seconds)
{
	struct timespec until;
	int			stop;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += seconds;
	pthread_mutex_lock(&t->mu);
	while (!t->stop && !t->kick && pthread_cond_timedwait(&t->cv, &t->mu, &until) != ETIMEDOUT)
		;
	t->kick = 0;
	stop = t->stop;
	pthread_mutex_unlock(&t->mu);
	return stop;
}

/* The thread: a round, then the wait it asks for, until stopped. */
static void *
ticker_main(void *arg)
{
	bcd_ticker *t = arg;

	while (!wait_or_stop(t, t->round(t->arg)))
		;
	return NULL;
}

/* Start t's thread (ticker.h). */
int
bcd_ticker_start(bcd_ticker *t, bcd_round_fn round, void *arg)
{
	t->round = round;
	t->arg = arg;
	if (pthread_create(&t->thread, NULL, ticker_main, t) != 0)
		return -1;
	t->started = 1;
	return 0;
}

/* Run the next round now (ticker.h). */
void
bcd_ticker_kick(bcd_ticker *t)
{
	pthread_mutex_lock(&t->mu);
	t->kick = 1;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

/* Stop t's thread (ticker.h). */
void
bcd_ticker_stop(bcd_ticker *t)
{
	if (!t->started)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = 1;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->thread, NULL);
	t->started = 0;
}

/* Release t (ticker.h). */
void
bcd_ticker_destroy(bcd_ticker *t)
{
	bcd_ticker_stop(t);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
}
