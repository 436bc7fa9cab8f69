/*
 * clock.h: the agent's one monotonic clock, for its deadlines and waits.
 */
#ifndef BCD_CLOCK_H
#define BCD_CLOCK_H

#include <stdint.h>

/* Milliseconds of the monotonic clock (seconds: bcd_now_ms() / 1000.0). */
int64_t		bcd_now_ms(void);

#endif							/* BCD_CLOCK_H */
