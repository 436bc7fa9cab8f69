/* http.h: every request through the route table to what answers it. */
#ifndef BC_GATEWAY_HTTP_H
#define BC_GATEWAY_HTTP_H

struct evhttp_request;

/* evhttp's generic callback: every request that libevent parsed completely (arg: the gateway). */
void		gw_http_handle(struct evhttp_request *req, void *arg);

/*
 * The metrics listener's (--metrics-listen): GET /healthz, and GET /metrics
 * with bc_join.metrics()'s text after the gateway's own; 404 otherwise.
 */
void		gw_http_handle_metrics(struct evhttp_request *req, void *arg);

#endif
