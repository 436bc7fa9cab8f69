/*
 * refusals.h: the Workload API's refusals logged without flooding the log:
 * the first few per uid in each interval one by one, then one summary line
 * per uid at the end of the interval.
 */
#ifndef BCD_WL_REFUSALS_H
#define BCD_WL_REFUSALS_H

#include <sys/types.h>

/* Refusals of one uid logged one by one per interval; the interval in seconds. */
#define BCD_WL_REFUSALS_FIRST 5
#define BCD_WL_REFUSALS_INTERVAL 10.0

typedef struct bcd_wl_refusals bcd_wl_refusals;

bcd_wl_refusals *bcd_wl_refusals_new(void);
void		bcd_wl_refusals_free(bcd_wl_refusals *r);

/*
 * A refusal of uid at now (monotonic seconds): 1 when it is to be logged in
 * full, 0 when it is only counted for the interval's summary.
 */
int			bcd_wl_refusals_take(bcd_wl_refusals *r, uid_t uid, double now);

/* At every tick: once an interval is over, log "N more refusals of uid U in the last 10 s". */
void		bcd_wl_refusals_tick(bcd_wl_refusals *r, double now);

#endif							/* BCD_WL_REFUSALS_H */
