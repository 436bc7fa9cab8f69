/* http.h: the routes, the relay to the database and the status mapping. */
#ifndef BC_GATEWAY_HTTP_H
#define BC_GATEWAY_HTTP_H

#include <stddef.h>

struct evhttp_request;

/* evhttp's generic callback: every request that libevent parsed completely (arg: the gateway). */
void		gw_http_handle(struct evhttp_request *req, void *arg);

/*
 * The HTTP status and outcome for a database error with this SQLSTATE:
 * 400 invalid, 404 unsupported, 503 unavailable/timeout or 500 error.
 */
int			gw_http_status_for_sqlstate(const char *sqlstate, int *outcome);

#ifdef BC_TEST_BUILD			/* the fuzz build only (mk/fuzz.mk) */
/*
 * Fuzz entry points (test/fuzz/fuzz_gw_http.c), not used by the gateway:
 * the status, outcome and client message of a database error, as
 * reply_db_error() answers it (*message NULL unless 400); and 0 when a
 * request body is relayed, else the HTTP status it is refused with.
 */
int			gw_http_fuzz_db_error(const char *sqlstate, const char *server_msg,
								  int *outcome, const char **message);
int			gw_http_fuzz_body(const char *body, size_t n);
#endif

#endif
