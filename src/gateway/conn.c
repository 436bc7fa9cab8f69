/*
 * conn.c: one TLS client connection: its bufferevent, its request deadline,
 * its writes.
 *
 * The state lives in the SSL object's ex_data, so it is freed exactly when
 * libevent frees the connection (bufferevent_free -> SSL_free).  The
 * deadline bounds the time a client may take to deliver a whole request,
 * TLS handshake included, however slowly it trickles bytes; libevent's own
 * timeout only bounds inactivity.
 */
#include "conn.h"
#include "body_budget.h"
#include "gateway.h"
#include "listener.h"
#include "log.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>

/* Called when in_flight or writing drops: lets a shutdown finish. */
void
gw_maybe_finish(struct gateway *gw)
{
	if (gw->shutting_down && gw->in_flight == 0 && gw->writing == 0 && gw->base != NULL)
		event_base_loopexit(gw->base, NULL);
}

struct gw_conn
{
	struct gateway *gw;
	struct bufferevent *bev;
	struct event *deadline;
	int			writing;
	size_t		req_bytes;		/* received since the current request began */
	size_t		reserved;		/* its share of --max-large-body-bytes */
	int			refused;		/* cut for the budget: count it once */
	int			metrics;		/* on the metrics listener (gw->mconnections) */
};

static int	conn_index = -1;

/* SSL ex_data destructor: the connection is going away. */
static void
conn_ex_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
	struct gw_conn *c = ptr;

	(void) parent;
	(void) ad;
	(void) idx;
	(void) argl;
	(void) argp;
	if (c == NULL)
		return;
	if (c->writing)
		c->gw->writing--;
	gw_body_budget_release(&c->gw->large_body_used, &c->reserved);
	if (c->deadline != NULL)
		event_free(c->deadline);
	if (c->metrics)
	{
		c->gw->mconnections--;
		gw_listener_metrics_conn_closed(c->gw);
	}
	else
	{
		c->gw->connections--;
		gw_listener_conn_closed(c->gw);
	}
	gw_maybe_finish(c->gw);
	free(c);
}

/* Prepare the per-connection bookkeeping; 0 on success. */
int
gw_conn_init(void)
{
	if (conn_index < 0)
		conn_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, conn_ex_free);
	return conn_index < 0 ? -1 : 0;
}

/* Arm the deadline for the next request on c. */
static void
arm_deadline(struct gw_conn *c)
{
	long		ms = c->gw->cfg.request_timeout_ms;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

	evtimer_add(c->deadline, &tv);
}

/* The TCP peer's address of fd, as text (empty when unknown). */
static void
peer_host(evutil_socket_t fd, char *host, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t	sl = sizeof(ss);

	host[0] = '\0';
	if (getpeername(fd, (struct sockaddr *) &ss, &sl) != 0)
		return;
	if (ss.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *) &ss)->sin_addr, host, (socklen_t) len);
	else if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &ss)->sin6_addr, host, (socklen_t) len);
}

/* The deadline passed before a whole request arrived: cut the connection. */
static void
deadline_cb(evutil_socket_t unused, short what, void *arg)
{
	struct gw_conn *c = arg;
	evutil_socket_t fd = bufferevent_getfd(c->bev);
	char		host[64];

	(void) unused;
	(void) what;
	if (fd < 0)
		return;
	peer_host(fd, host, sizeof(host));
	gw_log(GW_LOG_INFO, "request deadline passed; connection closed",
		   json_pack("{s:s,s:I}", "client", host, "timeout_ms",
					 (json_int_t) c->gw->cfg.request_timeout_ms));
	/* libevent sees the end of the stream and frees the connection itself */
	shutdown(fd, SHUT_RDWR);
}

/*
 * Bytes arrived on c (decrypted, before evhttp parses them): past
 * GW_BODY_FREE for the current request they are reserved from
 * --max-large-body-bytes; when the budget is spent the connection is cut
 * (shut down: evhttp sees the end of the stream and frees it, which gives the
 * reservation back), counted and logged once.
 */
static void
input_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct gw_conn *c = arg;
	struct gateway *gw = c->gw;
	evutil_socket_t fd;
	char		host[64];

	(void) buf;
	if (info->n_added == 0 || c->refused)
		return;
	c->req_bytes += info->n_added;
	if (gw_body_budget_take(gw->cfg.large_body_budget, &gw->large_body_used, &c->reserved,
							c->req_bytes) == 0)
		return;
	c->refused = 1;
	gw->metrics.large_body_refused++;
	fd = bufferevent_getfd(c->bev);
	if (fd < 0)
		return;
	peer_host(fd, host, sizeof(host));
	gw_log(GW_LOG_WARN, "large-body budget spent; connection closed",
		   json_pack("{s:s,s:I,s:I,s:I}", "client", host,
					 "bytes_in", (json_int_t) c->req_bytes,
					 "budget_in_use", (json_int_t) gw->large_body_used,
					 "budget", (json_int_t) gw->cfg.large_body_budget));
	shutdown(fd, SHUT_RDWR);
}

/* A TLS bufferevent for a new connection, on the metrics listener or not. */
static struct bufferevent *
conn_new(struct event_base *base, struct gateway *gw, int metrics)
{
	struct gw_conn *c = calloc(1, sizeof(*c));
	SSL		   *ssl = NULL;
	struct bufferevent *bev = NULL;

	if (c == NULL)
		goto fail;
	c->gw = gw;
	c->metrics = metrics;
	c->deadline = evtimer_new(base, deadline_cb, c);
	ssl = SSL_new(gw->ssl_ctx);
	if (c->deadline == NULL || ssl == NULL)
		goto fail;
	if (SSL_set_ex_data(ssl, conn_index, c) != 1)
		goto fail;
	if (metrics)
		gw->mconnections++;
	else
		gw->connections++;
	c = NULL;					/* owned by ssl from here on */
	bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
										 BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL)
		goto fail;
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	c = SSL_get_ex_data(ssl, conn_index);
	c->bev = bev;
	if (evbuffer_add_cb(bufferevent_get_input(bev), input_cb, c) == NULL)
		goto fail;
	arm_deadline(c);
	if (metrics)
		gw_listener_metrics_conn_opened(gw);
	else
		gw_listener_conn_opened(gw);
	return bev;
fail:

	/*
	 * Returning NULL would make evhttp fall back to a plaintext socket on the
	 * TLS port.  Only memory exhaustion gets here; stop rather than serve
	 * anything unencrypted.
	 */
	gw_log(GW_LOG_ERROR, "cannot set up a TLS connection; stopping", NULL);
	abort();
}

/* evhttp's bufferevent callback: a TLS bufferevent for a new connection. */
struct bufferevent *
gw_conn_bevcb(struct event_base *base, void *arg)
{
	return conn_new(base, arg, 0);
}

/* The same on the metrics listener; see conn.h. */
struct bufferevent *
gw_conn_metrics_bevcb(struct event_base *base, void *arg)
{
	return conn_new(base, arg, 1);
}

/* The connection a request arrived on, or NULL when the client is gone. */
struct gw_conn *
gw_conn_of(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev;
	SSL		   *ssl;

	if (evcon == NULL)
		return NULL;
	bev = evhttp_connection_get_bufferevent(evcon);
	ssl = bev ? bufferevent_openssl_get_ssl(bev) : NULL;
	return ssl ? SSL_get_ex_data(ssl, conn_index) : NULL;
}

/* A whole request arrived: stop its deadline. */
void
gw_conn_request_begin(struct gw_conn *c)
{
	if (c != NULL)
		evtimer_del(c->deadline);
}

/* The answer was written: the next request on this connection gets a fresh deadline. */
static void
reply_done_cb(struct evhttp_request *req, void *arg)
{
	struct gw_conn *c = arg;

	(void) req;
	if (c->writing)
	{
		c->writing = 0;
		c->gw->writing--;
	}
	/* the request's buffers are freed: its reservation goes; what is buffered is the next one's */
	gw_body_budget_release(&c->gw->large_body_used, &c->reserved);
	c->req_bytes = evbuffer_get_length(bufferevent_get_input(c->bev));
	arm_deadline(c);
	gw_maybe_finish(c->gw);
}

/* An answer is about to be written on c for req: count it until it is written. */
void
gw_conn_reply_begin(struct gw_conn *c, struct evhttp_request *req)
{
	if (c == NULL)
		return;
	if (!c->writing)
	{
		c->writing = 1;
		c->gw->writing++;
	}
	evhttp_request_set_on_complete_cb(req, reply_done_cb, c);
}
