/* conn.h: one TLS client connection: its bufferevent, its request deadline, its writes. */
#ifndef BC_GATEWAY_CONN_H
#define BC_GATEWAY_CONN_H

struct bufferevent;
struct event_base;
struct evhttp_request;
struct gateway;
struct gw_conn;

/* Prepare the per-connection bookkeeping; 0 on success. */
int			gw_conn_init(void);

/* evhttp's bufferevent callback: a TLS bufferevent for a new connection (arg: the gateway). */
struct bufferevent *gw_conn_bevcb(struct event_base *base, void *arg);

/* The same for the metrics listener: counted in mconnections, within GW_METRICS_MAX_CONNECTIONS. */
struct bufferevent *gw_conn_metrics_bevcb(struct event_base *base, void *arg);

/* The connection a request arrived on, or NULL when the client is gone. */
struct gw_conn *gw_conn_of(struct evhttp_request *req);

/* A whole request arrived: stop its deadline. */
void		gw_conn_request_begin(struct gw_conn *c);

/* An answer is about to be written on c for req: count it until it is written. */
void		gw_conn_reply_begin(struct gw_conn *c, struct evhttp_request *req);

#endif
