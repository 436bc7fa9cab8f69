/*
 * reply.c: one request's answer: its headers (Cache-Control, Retry-After,
 * Connection: close while shutting down), the JSON error bodies, its count
 * in the metrics and its log line.  Never the request's body or a server's
 * message beyond what the caller chose to send.
 */
#include "reply.h"
#include "conn.h"
#include "gateway.h"
#include "log.h"

#include "bc_protocol.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

/* Seconds elapsed since ts (monotonic). */
static double
elapsed_since(const struct timespec *ts)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double) (now.tv_sec - ts->tv_sec) + (double) (now.tv_nsec - ts->tv_nsec) / 1e9;
}

/* Log one answered request; never its body or the server's messages. */
static void
log_request(struct gw_request *rq, int code, enum gw_outcome out, size_t bytes, double secs)
{
	int			level = code >= 500 || strncmp(rq->sqlstate, "54", 2) == 0 ? GW_LOG_WARN :
		rq->observed ? GW_LOG_INFO : GW_LOG_DEBUG;
	json_t	   *f;

	if (!gw_log_enabled(level))
		return;
	f = json_pack("{s:s,s:i,s:s,s:s,s:f,s:I,s:I}",
				  "endpoint", rq->label, "status", code,
				  "outcome", rq->observed ? gw_outcome_name(out) : "",
				  "client", rq->client, "duration_ms", floor(secs * 1e6) / 1e3,
				  "bytes", (json_int_t) bytes, "bytes_in", (json_int_t) rq->body_len);
	if (f != NULL && rq->sqlstate[0] != '\0')
		json_object_set_new(f, "sqlstate", json_string(rq->sqlstate));
	if (f != NULL && rq->reason != NULL)
		json_object_set_new(f, "reason", json_string(rq->reason));
	gw_log(level, "request", f);
}

/* Send the answer, count it, log it and free rq; see reply.h. */
void
gw_reply(struct gw_request *rq, int code, enum gw_outcome out, const char *ctype,
		 const char *body, size_t len, int retry_after)
{
	struct gateway *gw = rq->gw;
	struct evkeyvalq *h = evhttp_request_get_output_headers(rq->req);
	struct evbuffer *buf = evbuffer_new();
	double		secs = elapsed_since(&rq->start);
	char		ra[16];

	evhttp_add_header(h, "Content-Type", ctype);
	evhttp_add_header(h, "Cache-Control", rq->cache_control[0] ? rq->cache_control : "no-store");
	if (retry_after > 0)
	{
		snprintf(ra, sizeof(ra), "%d", retry_after);
		evhttp_add_header(h, "Retry-After", ra);
	}
	if (gw->shutting_down)
		evhttp_add_header(h, "Connection", "close");
	if (buf != NULL && len > 0 && evbuffer_add(buf, body, len) != 0)
	{
		code = 500;
		out = GW_OUT_ERROR;
	}
	gw_conn_reply_begin(gw_conn_of(rq->req), rq->req);
	evhttp_send_reply(rq->req, code, NULL, buf);
	evbuffer_free(buf);
	if (rq->observed)
		gw_metrics_observe(&gw->metrics, rq->endpoint, out, secs);
	log_request(rq, code, out, len, secs);
	free(rq->body);
	free(rq);
	gw->in_flight--;
	gw_maybe_finish(gw);
}

/* Answer with a JSON error body; see reply.h. */
void
gw_reply_error(struct gw_request *rq, int http, enum gw_outcome out, const char *code,
			   const char *msg, int retry_after)
{
	json_t	   *j = json_pack("{s:s,s:{s:s,s:s}}", "status", "error",
							  "error", "code", code, "message", msg ? msg : "");
	char	   *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

	static const char fallback[] =
		"{\"status\":\"error\",\"error\":{\"code\":\"INTERNAL\",\"message\":\"internal error\"}}";

	if (text == NULL)
		gw_reply(rq, 500, GW_OUT_ERROR, "application/json", fallback, sizeof(fallback) - 1, 0);
	else
		gw_reply(rq, http, out, "application/json", text, strlen(text), retry_after);
	free(text);
	json_decref(j);
}

/* Answer 503 UNAVAILABLE with Retry-After; see reply.h. */
void
gw_reply_unavailable(struct gw_request *rq, enum gw_outcome out, const char *reason)
{
	rq->reason = reason;
	gw_reply_error(rq, 503, out, BC_ERROR_UNAVAILABLE, "service temporarily unavailable",
				   rq->gw->cfg.retry_after_s);
}

/* Answer 500 INTERNAL; see reply.h. */
void
gw_reply_internal(struct gw_request *rq)
{
	gw_reply_error(rq, 500, GW_OUT_ERROR, BC_ERROR_INTERNAL, "internal error", 0);
}
