/*
 * clock.c: the agent's clocks (clock.h): clock_gettime, monotonic for every
 * deadline and wait of bcd, real-time for certificates' times.
 */
#include <stdint.h>
#include <time.h>

#include "core/clock.h"

/* Milliseconds of the monotonic clock. */
int64_t
bcd_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Seconds of the monotonic clock. */
double
bcd_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Seconds of the real-time clock. */
double
bcd_now_real(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}
