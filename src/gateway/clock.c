/* clock.c: the gateway's times (clock.h). */
#include "clock.h"

#include <time.h>

#include <openssl/asn1.h>

/* Seconds on the monotonic clock; see clock.h. */
double
gw_mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* An ASN1_TIME as seconds since the epoch; see clock.h. */
time_t
gw_asn1_epoch(const ASN1_TIME *t)
{
	struct tm	tm;

	if (t == NULL || !ASN1_TIME_to_tm(t, &tm))
		return (time_t) -1;
	return timegm(&tm);
}
