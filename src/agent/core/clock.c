/*
 * clock.c: the agent's one monotonic clock (clock.h): clock_gettime in
 * milliseconds; every deadline and wait of bcd is measured on it.
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
