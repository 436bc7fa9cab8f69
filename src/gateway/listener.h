/* listener.h: accepting connections: a cap, and a pause when out of descriptors. */
#ifndef BC_GATEWAY_LISTENER_H
#define BC_GATEWAY_LISTENER_H

struct gateway;

/* Descriptors kept for everything but client connections and the pool. */
#define GW_FD_RESERVE 32

/*
 * Set gw->max_connections from --max-connections and RLIMIT_NOFILE (at most
 * the soft limit minus --db-pool minus GW_FD_RESERVE); 0 on success, -1 with
 * a log line when the limit leaves no room for a single connection.
 */
int			gw_listener_limits(struct gateway *gw);

/* Take over the bound socket's listener: its error callback and the resume timer; 0 on success. */
int			gw_listener_setup(struct gateway *gw);

/* A connection was accepted (gw->connections already counts it). */
void		gw_listener_conn_opened(struct gateway *gw);

/* A connection went away (gw->connections no longer counts it). */
void		gw_listener_conn_closed(struct gateway *gw);

/* Forget the listener before libevent frees it (shutdown, teardown). */
void		gw_listener_close(struct gateway *gw);

/*
 * The metrics listener (--metrics-listen): at most this many connections at
 * once (taken from GW_FD_RESERVE), then it waits for a close; an accept()
 * error pauses it for a second.  Its connections do not count in
 * --max-connections, so a scraper is answered while the API is at its cap.
 */
#define GW_METRICS_MAX_CONNECTIONS 8

/* Take over the metrics listener's bound socket (gw->mbound); 0 on success. */
int			gw_listener_metrics_setup(struct gateway *gw);

/* A metrics connection was accepted (gw->mconnections already counts it). */
void		gw_listener_metrics_conn_opened(struct gateway *gw);

/* A metrics connection went away (gw->mconnections no longer counts it). */
void		gw_listener_metrics_conn_closed(struct gateway *gw);

/* Forget the metrics listener before libevent frees it. */
void		gw_listener_metrics_close(struct gateway *gw);

#endif
