/*
 * body_budget.h: the global budget of large request bodies in flight
 * (--max-large-body-bytes).
 *
 * Each connection may hold GW_BODY_FREE bytes of its current request (the
 * headers' and the default body bound) for free; every byte beyond that is
 * reserved from one budget shared by all connections, and released when the
 * request's answer is written or the connection goes.  Pure bookkeeping:
 * conn.c counts the bytes and cuts the connection when a reservation fails.
 */
#ifndef BC_GATEWAY_BODY_BUDGET_H
#define BC_GATEWAY_BODY_BUDGET_H

#include <stddef.h>

#include "config.h"

/* Bytes of one request a connection holds without reserving. */
#define GW_BODY_FREE	(GW_MAX_BODY + GW_MAX_HEADERS)

/*
 * A request has req_bytes received; grow its reservation *reserved (and the
 * total *used) to cover what is over GW_BODY_FREE.  0 when covered, -1 when
 * budget cannot (then nothing changes).
 */
int			gw_body_budget_take(size_t budget, size_t *used, size_t *reserved, size_t req_bytes);

/* Give a request's reservation back: *used -= *reserved, *reserved = 0. */
void		gw_body_budget_release(size_t *used, size_t *reserved);

#endif
