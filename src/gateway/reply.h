/* reply.h: one request from dispatch to its answer: sent, counted, logged. */
#ifndef BC_GATEWAY_REPLY_H
#define BC_GATEWAY_REPLY_H

#include <stddef.h>
#include <time.h>

#include "metrics.h"

struct evhttp_request;
struct gateway;
struct gw_route;

/* One request from dispatch to answer (http.c makes it, a gw_reply* frees it). */
struct gw_request
{
	struct gateway *gw;
	struct evhttp_request *req;
	const struct gw_route *route;	/* its row (NULL: unknown path) */
	const char *label;			/* endpoint name in logs */
	int			endpoint;		/* its metrics' endpoint (routes.h) */
	int			observed;		/* counted in bc_gateway_requests_total */
	struct timespec start;
	char		client[64];
	char	   *body;
	size_t		body_len;
	char		sqlstate[6];
	const char *reason;
	char		cache_control[64];	/* empty: no-store */
};

/* Send the answer, count it, log it and free rq. */
void		gw_reply(struct gw_request *rq, int code, enum gw_outcome out, const char *ctype,
					 const char *body, size_t len, int retry_after);

/* Answer with {"status":"error","error":{"code":code,"message":msg}}. */
void		gw_reply_error(struct gw_request *rq, int http, enum gw_outcome out, const char *code,
						   const char *msg, int retry_after);

/* Answer 503 UNAVAILABLE with Retry-After; reason goes to the log. */
void		gw_reply_unavailable(struct gw_request *rq, enum gw_outcome out, const char *reason);

/* Answer 500 INTERNAL, saying nothing else. */
void		gw_reply_internal(struct gw_request *rq);

#endif
