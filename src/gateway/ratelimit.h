/* ratelimit.h: a token bucket per client address in a bounded LRU table. */
#ifndef BC_GATEWAY_RATELIMIT_H
#define BC_GATEWAY_RATELIMIT_H

#include "client_addr.h"

struct gw_ratelimit;

/* A table of at most capacity buckets of burst tokens refilled at rate per second. */
struct gw_ratelimit *gw_ratelimit_new(double rate, double burst, int capacity);

/* Free the table. */
void		gw_ratelimit_free(struct gw_ratelimit *rl);

/*
 * Take one token for addr at time now (seconds, monotonic): 1 when allowed,
 * 0 when limited, with *retry_after set to the seconds until a token is back.
 */
int			gw_ratelimit_take(struct gw_ratelimit *rl, const struct gw_addr *addr,
							  double now, double *retry_after);

#endif
