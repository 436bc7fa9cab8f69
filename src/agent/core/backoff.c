/*
 * backoff.c: how long the daemon waits: jitter (from OpenSSL's RAND_bytes),
 * so a fleet does not act in step, and the exponential backoff after a
 * failure without an answer.
 */
#include <math.h>
#include <stdint.h>

#include <openssl/rand.h>

#include "core/backoff.h"

/* Shortest and longest backoff step, in seconds. */
#define BACKOFF_FIRST 1.0
#define BACKOFF_MAX 60.0

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
