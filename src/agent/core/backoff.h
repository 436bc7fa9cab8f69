/*
 * backoff.h: how long bcd waits before it asks again: jitter, and the
 * exponential backoff after a failure without an answer.
 */
#ifndef BCD_BACKOFF_H
#define BCD_BACKOFF_H

/* seconds, moved at random by up to +-fraction of itself. */
double		bcd_jitter(double seconds, double fraction);

/* Exponential backoff: 1 s doubling to 60 s, +-10% jitter, Retry-After honoured. */
typedef struct bcd_backoff
{
	double		next;
} bcd_backoff;

void		bcd_backoff_reset(bcd_backoff *b);
double		bcd_backoff_next(bcd_backoff *b, long retry_after, long max_retry_after);

#endif							/* BCD_BACKOFF_H */
