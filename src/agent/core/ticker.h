/*
 * ticker.h: a thread that runs rounds until it is stopped, waiting between
 * them on the monotonic clock (ticker.c): what the attestation loop
 * (attest.c) and the revocation watch (revocation.c) each run on.  A
 * module embeds a bcd_ticker, starts it with its round, and stops it before
 * it frees what the round reads.
 */
#ifndef BCD_TICKER_H
#define BCD_TICKER_H

#include <pthread.h>

/* One round; it returns the seconds to wait before the next. */
typedef long (*bcd_round_fn) (void *arg);

typedef struct bcd_ticker
{
	bcd_round_fn round;
	void	   *arg;
	pthread_t	thread;
	int			started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int			stop;			/* under mu */
	int			kick;			/* under mu: the next round now */
} bcd_ticker;

/* Make t ready to start (its mutex, its condition variable on the monotonic clock). */
void		bcd_ticker_init(bcd_ticker *t);
/* Start t's thread: round(arg), then the seconds it returns, until stopped.  0, or -1. */
int			bcd_ticker_start(bcd_ticker *t, bcd_round_fn round, void *arg);
/* Run the next round now (one in flight: the next right after it). */
void		bcd_ticker_kick(bcd_ticker *t);
/* Stop t's thread (a round in flight ends first) and join it; not started: nothing. */
void		bcd_ticker_stop(bcd_ticker *t);
/* Release t (stopped first). */
void		bcd_ticker_destroy(bcd_ticker *t);

#endif							/* BCD_TICKER_H */
