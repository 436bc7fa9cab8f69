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
	evtimer_add(shutdown_timer, &tv);
	gw_maybe_finish(gw);
}

/* Set up evhttp on the listen address; 0 on success. */
static int
setup_http(struct gateway *gw)
{
	struct timeval io = {.tv_sec = gw->cfg.io_timeout_ms / 1000,
	.tv_usec = (gw->cfg.io_timeout_ms % 1000) * 1000};
	evutil_socket_t fd;
	int			one = 1;

	gw->http = evhttp_new(gw->base);
	if (gw->http == NULL)
		return -1;
	evhttp_set_bevcb(gw->http, gw_conn_bevcb, gw);
	evhttp_set_gencb(gw->http, gw_http_handle, gw);
	evhttp_set_timeout_tv(gw->http, &io);
	evhttp_set_max_body_size(gw->http, gw_routes_max_body());

	/*
	 * A body over the bound is read to its end (and dropped) before the 413
	 * goes out, as nginx's lingering close does: closing with the client's
	 * bytes unread makes the kernel send a reset, which can reach the client
	 * before the 413 does (seen with Debian 13's curl and OpenSSL 3.5: no
	 * status at all).  Bounded as any request is, by --request-timeout.
	 */
	if (evhttp_set_flags(gw->http, EVHTTP_SERVER_LINGERING_CLOSE) != 0)
		gw_log(GW_LOG_WARN, "libevent without lingering close; a client sending an oversized body may see a reset", NULL);
	evhttp_set_max_headers_size(gw->http, GW_MAX_HEADERS);
	evhttp_set_allowed_methods(gw->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
							   EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
							   EVHTTP_REQ_PATCH);
	gw->bound = evhttp_bind_socket_with_handle(gw->http, gw->cfg.listen_host, gw->cfg.listen_port);
	if (gw->bound == NULL)
	{
		gw_log(GW_LOG_ERROR, "cannot listen",
			   json_pack("{s:s,s:i}", "host", gw->cfg.listen_host, "port", gw->cfg.listen_port));
		return -1;
	}
	/* accepted sockets inherit it: no Nagle delay between a TLS record and the next */
	fd = evhttp_bound_socket_get_fd(gw->bound);
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
		gw_logf(GW_LOG_WARN, "cannot set TCP_NODELAY on the listener");
	return gw_listener_setup(gw);
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
	if (setup_http(&gw) != 0)
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
	gw_ocsp_cache_close(gw.ocsp);
	gw_db_pool_free(gw.pool);
	for (size_t i = 0; i < gw_nroutes; i++)
		gw_doc_cache_free(gw.docs[i]);
	gw_ocsp_cache_free(gw.ocsp);
	gw_listener_close(&gw);
	if (gw.http != NULL)
		evhttp_free(gw.http);
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
