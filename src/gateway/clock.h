/* clock.h: the gateway's times: the monotonic clock, a certificate's time as epoch seconds. */
#ifndef BC_GATEWAY_CLOCK_H
#define BC_GATEWAY_CLOCK_H

#include <time.h>

#include <openssl/asn1.h>

/* Seconds on the monotonic clock, to the nanosecond (every deadline and age of the gateway). */
double		gw_mono_now(void);

/* An ASN1_TIME (UTCTime or GeneralizedTime) as seconds since the epoch; -1 when absent or invalid. */
time_t		gw_asn1_epoch(const ASN1_TIME *t);

#endif							/* BC_GATEWAY_CLOCK_H */
