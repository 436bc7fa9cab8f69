/*
 * main.c: bc-gateway, the HTTPS relay in front of the bc_join database.
 *
 * One thread, one libevent loop: evhttp on OpenSSL bufferevents for the
 * clients, non-blocking libpq connections for the database.  SIGTERM or
 * SIGINT stops accepting, lets in-flight requests finish (at most
 * --shutdown-timeout) and exits 0.
 */
#include "config.h"
#include "conn.h"
#include "db_pool.h"
#include "doc_cache.h"
#include "documents.h"
#include "gateway.h"
#include "http.h"
#include "listener.h"
#include "log.h"
#include "ocsp_cache.h"
#include "ratelimit.h"
#include "routes.h"
#include "tls.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/http.h>

static struct event *shutdown_timer;

/* --shutdown-timeout passed with requests still in flight: stop anyway. */
static void
shutdown_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct gateway *gw = arg;

	(void) fd;
	(void) what;
	gw_log(GW_LOG_WARN, "shutdown timeout; abandoning requests in flight",
		   json_pack("{s:i,s:i}", "in_flight", (int) gw->in_flight, "writing", (int) gw->writing));
	event_base_loopexit(gw->base, NULL);
}

/* SIGTERM or SIGINT: stop accepting and drain. */
static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct gateway *gw = arg;
	long		ms = gw->cfg.shutdown_ms;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

	(void) what;
	if (gw->shutting_down)
		return;
	gw->shutting_down = 1;
	gw_log(GW_LOG_INFO, "shutting down",
		   json_pack("{s:s,s:i}", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT",
					 "in_flight", (int) gw->in_flight));
	if (gw->bound != NULL)
	{
		gw_listener_close(gw);
		evhttp_del_accept_socket(gw->http, gw->bound);
		gw->bound = NULL;
	}
	if (gw->mbound != NULL)
	{
		gw_listener_metrics_close(gw);
		evhttp_del_accept_socket(gw->mhttp, gw->mbound);
		gw->mbound = NULL;
	}
	evtimer_add(shutdown_timer, &tv);
	gw_maybe_finish(gw);
}

/*
 * A new evhttp on TLS connections made by bevcb, requests to gencb, bodies of
 * at most max_body; NULL when out of memory.
 */
static struct evhttp *
new_http(struct gateway *gw, struct bufferevent *(*bevcb) (struct event_base *, void *),
		 void (*gencb) (struct evhttp_request *, void *), size_t max_body)
{
	struct timeval io = {.tv_sec = gw->cfg.io_timeout_ms / 1000,
	.tv_usec = (gw->cfg.io_timeout_ms % 1000) * 1000};
	struct evhttp *http = evhttp_new(gw->base);

	if (http == NULL)
		return NULL;
	evhttp_set_bevcb(http, bevcb, gw);
	evhttp_set_gencb(http, gencb, gw);
	evhttp_set_timeout_tv(http, &io);
	evhttp_set_max_body_size(http, max_body);

	/*
	 * A body over the bound is read to its end (and dropped) before the 413
	 * goes out, as nginx's lingering close does: closing with the client's
	 * bytes unread makes the kernel send a reset, which can reach the client
	 * before the 413 does (seen with Debian 13's curl and OpenSSL 3.5: no
	 * status at all).  Bounded as any request is, by --request-timeout.
	 */
	if (evhttp_set_flags(http, EVHTTP_SERVER_LINGERING_CLOSE) != 0)
		gw_log(GW_LOG_WARN, "libevent without lingering close; a client sending an oversized body may see a reset", NULL);
	evhttp_set_max_headers_size(http, GW_MAX_HEADERS);
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
							   EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
							   EVHTTP_REQ_PATCH);
	return http;
}

/* Bind http to host:port, TCP_NODELAY inherited by accepted sockets; the bound socket or NULL. */
static struct evhttp_bound_socket *
bind_http(struct evhttp *http, const char *host, uint16_t port)
{
	struct evhttp_bound_socket *bound = evhttp_bind_socket_with_handle(http, host, port);
	int			one = 1;

	if (bound == NULL)
	{
		gw_log(GW_LOG_ERROR, "cannot listen", json_pack("{s:s,s:i}", "host", host, "port", port));
		return NULL;
	}
	/* accepted sockets inherit it: no Nagle delay between a TLS record and the next */
	if (setsockopt(evhttp_bound_socket_get_fd(bound), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
		gw_logf(GW_LOG_WARN, "cannot set TCP_NODELAY on the listener");
	return bound;
}

/* Set up evhttp on the listen address; 0 on success. */
static int
setup_http(struct gateway *gw)
{
	gw->http = new_http(gw, gw_conn_bevcb, gw_http_handle, gw_routes_max_body());
	if (gw->http == NULL)
		return -1;
	gw->bound = bind_http(gw->http, gw->cfg.listen_host, gw->cfg.listen_port);
	if (gw->bound == NULL)
		return -1;
	return gw_listener_setup(gw);
}

/*
 * --metrics-listen (#48): a second evhttp on the same TLS context, its own
 * table (GET /metrics with bc_join.metrics(), GET /healthz), bodies of at most
 * GW_MAX_BODY (it takes none); 0 on success or when not asked for.
 */
static int
setup_metrics_http(struct gateway *gw)
{
	if (gw->cfg.metrics_port == 0)
		return 0;
	gw->service_metrics = gw_doc_cache_new(gw->base, gw->pool, &gw->cfg, &gw_doc_service_metrics,
										   "/metrics");
	if (gw->service_metrics == NULL)
		return -1;
	gw->mhttp = new_http(gw, gw_conn_metrics_bevcb, gw_http_handle_metrics, GW_MAX_BODY);
	if (gw->mhttp == NULL)
		return -1;
	gw->mbound = bind_http(gw->mhttp, gw->cfg.metrics_host, gw->cfg.metrics_port);
	if (gw->mbound == NULL || gw_listener_metrics_setup(gw) != 0)
		return -1;
	gw_log(GW_LOG_INFO, "metrics listening",
		   json_pack("{s:s,s:i,s:f}", "host", gw->cfg.metrics_host, "port", gw->cfg.metrics_port,
					 "metrics_max_age", (double) gw->cfg.metrics_max_age_ms / 1000.0));
	return 0;
}

/* Run the gateway; the process exit status. */
int
main(int argc, char **argv)
{
	struct gateway gw;
	struct event *sigterm = NULL;
	struct event *sigint = NULL;
	int			rc = 1;
	int			p;

	memset(&gw, 0, sizeof(gw));
	p = gw_config_parse(&gw.cfg, argc, argv);
	if (p != 0)
		return p > 0 ? 0 : 2;
	gw_log_set_level(gw.cfg.log_level);
	signal(SIGPIPE, SIG_IGN);
	if (gw_listener_limits(&gw) != 0)
		return 1;

	gw.base = event_base_new();
	if (gw.base == NULL || gw_conn_init() != 0)
		goto out;
	gw.ssl_ctx = gw_tls_ctx_new(gw.cfg.tls_cert, gw.cfg.tls_key);
	if (gw.ssl_ctx == NULL)
		goto out;
	gw.pool = gw_db_pool_new(gw.base, &gw.cfg);
	if (gw.pool == NULL)
		goto out;
	/* a cache for each document route */
	for (size_t i = 0; i < gw_nroutes; i++)
		if (gw_routes[i].doc != NULL &&
			(gw.docs[i] = gw_doc_cache_new(gw.base, gw.pool, &gw.cfg, gw_routes[i].doc,
										   gw_routes[i].path)) == NULL)
			goto out;
	if ((gw.ocsp = gw_ocsp_cache_new(gw.pool, &gw.cfg)) == NULL)
		goto out;
	if (gw.cfg.rate > 0)
	{
		gw.rl = gw_ratelimit_new(gw.cfg.rate, gw.cfg.burst, gw.cfg.rate_table);
		if (gw.rl == NULL)
			goto out;
	}
	if (setup_http(&gw) != 0 || setup_metrics_http(&gw) != 0)
		goto out;
	sigterm = evsignal_new(gw.base, SIGTERM, signal_cb, &gw);
	sigint = evsignal_new(gw.base, SIGINT, signal_cb, &gw);
	shutdown_timer = evtimer_new(gw.base, shutdown_timeout_cb, &gw);
	if (sigterm == NULL || sigint == NULL || shutdown_timer == NULL ||
		evsignal_add(sigterm, NULL) != 0 || evsignal_add(sigint, NULL) != 0)
		goto out;

	gw_log(GW_LOG_INFO, "listening",
		   json_pack("{s:s,s:i,s:i,s:f,s:i,s:i,s:I}", "host", gw.cfg.listen_host,
					 "port", gw.cfg.listen_port, "db_pool", gw.cfg.db_pool,
					 "rate_limit", gw.cfg.rate, "trusted_proxies", gw.cfg.nproxies,
					 "max_connections", (int) gw.max_connections,
					 "nofile", (json_int_t) gw.nofile));
	if (event_base_dispatch(gw.base) < 0)
		goto out;
	rc = gw.shutting_down ? 0 : 1;
	/* the teardown below is short and bounded: a second signal must not cut it */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	gw_log(GW_LOG_INFO, "stopped",
		   json_pack("{s:i,s:i}", "in_flight", (int) gw.in_flight, "writing", (int) gw.writing));

out:
	/* answer what is still waiting for the database before the connections go */
	for (size_t i = 0; i < gw_nroutes; i++)
		gw_doc_cache_close(gw.docs[i]);
	gw_doc_cache_close(gw.service_metrics);
	gw_ocsp_cache_close(gw.ocsp);
	gw_db_pool_free(gw.pool);
	gw.pool = NULL;				/* a waiter answered below renders no pool gauges (http.c) */
	for (size_t i = 0; i < gw_nroutes; i++)
		gw_doc_cache_free(gw.docs[i]);
	gw_doc_cache_free(gw.service_metrics);
	gw_ocsp_cache_free(gw.ocsp);
	gw_listener_close(&gw);
	gw_listener_metrics_close(&gw);
	if (gw.http != NULL)
		evhttp_free(gw.http);
	if (gw.mhttp != NULL)
		evhttp_free(gw.mhttp);
	gw_ratelimit_free(gw.rl);
	if (sigterm != NULL)
		event_free(sigterm);
	if (sigint != NULL)
		event_free(sigint);
	if (shutdown_timer != NULL)
		event_free(shutdown_timer);
	SSL_CTX_free(gw.ssl_ctx);
	if (gw.base != NULL)
		event_base_free(gw.base);
	return rc;
}
