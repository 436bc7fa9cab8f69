/*
 * clock.h: the agent's clocks: the monotonic one, for its deadlines and
 * waits, and the real-time one, for the times certificates carry.
 */
#ifndef BCD_CLOCK_H
#define BCD_CLOCK_H

#include <stdint.h>

/* Milliseconds of the monotonic clock (seconds: bcd_now_s()). */
int64_t		bcd_now_ms(void);

/* Seconds of the monotonic clock, to the nanosecond. */
double		bcd_now_s(void);

/* Seconds of the real-time clock (what a certificate's notAfter is compared with). */
double		bcd_now_real(void);

#endif							/* BCD_CLOCK_H */
