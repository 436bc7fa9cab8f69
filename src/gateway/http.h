/* http.h: the routes, the relay to the database and the status mapping. */
#ifndef BC_GATEWAY_HTTP_H
#define BC_GATEWAY_HTTP_H

struct evhttp_request;

/* evhttp's generic callback: every request that libevent parsed completely (arg: the gateway). */
void		gw_http_handle(struct evhttp_request *req, void *arg);

/*
 * The HTTP status and outcome for a database error with this SQLSTATE:
 * 400 invalid, 404 unsupported, 503 unavailable/timeout or 500 error.
 */
int			gw_http_status_for_sqlstate(const char *sqlstate, int *outcome);

#endif
