/* relay.h: a request relayed to its statement, and the database's answer mapped to HTTP. */
#ifndef BC_GATEWAY_RELAY_H
#define BC_GATEWAY_RELAY_H

#include <stddef.h>

#include "metrics.h"

struct gw_request;

/* A GW_ROUTE_RELAY request: check its body and run the route's statement on it. */
void		gw_relay_body(struct gw_request *rq);

/* A GW_ROUTE_QUERY request: run the route's statement with an empty parameter. */
void		gw_relay_query(struct gw_request *rq);

/*
 * The HTTP status and outcome (enum gw_outcome) for a database error with
 * this SQLSTATE: 400 invalid, 404 unsupported, 503 unavailable/timeout or
 * 500 error.
 */
int			gw_http_status_for_sqlstate(const char *sqlstate, int *outcome);

/*
 * The message of a 400 INVALID_INPUT for sqlstate: server_msg (the server's
 * primary message) only for the codes whose messages are written for the
 * client, else a fixed message of the gateway's.
 */
const char *gw_http_invalid_input_message(const char *sqlstate, const char *server_msg);

/*
 * A relayed result's "status": 200 with issued, pending, challenge,
 * attested or quarantined (/v1/attest), 403 with refused, its outcome in
 * *out; -1 for any other (a 500).
 */
int			gw_relay_status(const char *status, enum gw_outcome *out, int *http);

/*
 * Why a request body of n bytes is not relayed to a route taking at most max
 * bytes (0: GW_MAX_BODY), its HTTP status in *http, or NULL when it is
 * relayed.  body NULL checks only the length.
 */
const char *gw_http_body_refusal(const char *body, size_t n, size_t max, int *http);

#endif
