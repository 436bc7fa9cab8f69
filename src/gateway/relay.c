/*
 * relay.c: a request relayed to the database, and the status mapping.
 *
 * A POST body goes to the database byte for byte as the one text parameter
 * of the route's fixed statement; the function's jsonb result comes back
 * byte for byte as the response body.  The gateway reads only the result's
 * "status" (which the statement extracts) to choose 200 or 403, and the
 * SQLSTATE of an error to choose 400, 404, 503 or 500.  It never forwards a
 * server message except the primary message of INVALID_INPUT, which names
 * the offending field.
 */
#include "relay.h"
#include "db_pool.h"
#include "gateway.h"
#include "reply.h"
#include "routes.h"

#include "bc_protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

/*
 * The SQLSTATEs answered 400 whose primary message is relayed: 22023 is the
 * extension's INVALID_INPUT (its message names the offending field), the
 * others are the jsonb input cast's own fixed messages.
 */
static const char *const invalid_relayed[] = {"22023", "22P02", "22021", "22P05", NULL};

/*
 * The HTTP status and outcome for a database error with this SQLSTATE.
 *
 * 400 for every data exception (class 22) and for 54000/54001 (program limit
 * exceeded, stack depth / statement too complex): the statement's one
 * variable is the request body, and its jsonb input cast alone can raise
 * 22003 (a number out of range), 22P02, 22021, 22P05 and 54001 (nesting
 * deeper than max_stack_depth).  Unauthenticated input must never be a 500.
 */
int
gw_http_status_for_sqlstate(const char *ss, int *outcome)
{
	static const char *const unsupported[] = {"0A000", "42883", NULL};
	static const char *const unavailable[] = {"57P01", "57P02", "57P03", "53300",
	"40001", "40P01", "25006", NULL};

	if (ss == NULL || strlen(ss) != 5)
		goto internal;
	if (strncmp(ss, "22", 2) == 0 || strcmp(ss, "54000") == 0 || strcmp(ss, "54001") == 0)
	{
		*outcome = GW_OUT_INVALID;
		return 400;
	}
	for (int i = 0; unsupported[i]; i++)
		if (strcmp(ss, unsupported[i]) == 0)
		{
			*outcome = GW_OUT_UNSUPPORTED;
			return 404;
		}
	if (strcmp(ss, "57014") == 0)
	{
		*outcome = GW_OUT_TIMEOUT;
		return 503;
	}
	if (strncmp(ss, "08", 2) == 0)
		goto unavail;
	for (int i = 0; unavailable[i]; i++)
		if (strcmp(ss, unavailable[i]) == 0)
			goto unavail;
internal:
	*outcome = GW_OUT_ERROR;
	return 500;
unavail:
	*outcome = GW_OUT_UNAVAILABLE;
	return 503;
}

/*
 * The message of a 400 INVALID_INPUT for SQLSTATE ss: the server's primary
 * message for the codes whose messages are written for the client; for the
 * rest of class 22 and for 54xxx a fixed message of the gateway's, since a
 * data exception raised deeper in the server may quote stored values.
 */
const char *
gw_http_invalid_input_message(const char *ss, const char *server_msg)
{
	for (int i = 0; invalid_relayed[i]; i++)
		if (strcmp(ss, invalid_relayed[i]) == 0)
			return server_msg ? server_msg : "invalid input";
	if (strncmp(ss, "54", 2) == 0)
		return "request nested too deeply or too complex";
	if (strcmp(ss, "22003") == 0)
		return "a value in the request is out of range";
	return "invalid input";
}

/* Why a request body is not relayed; see relay.h. */
const char *
gw_http_body_refusal(const char *body, size_t n, size_t max, int *http)
{
	*http = 400;
	if (n == 0)
		return "request body is empty";
	if (n > (max != 0 ? max : GW_MAX_BODY))
	{
		*http = 413;
		return max > GW_MAX_BODY ? "request body over the route's bound" :
			"request body over 65536 bytes";
	}
	/* a text parameter ends at the first NUL: refuse rather than truncate */
	if (body != NULL && memchr(body, '\0', n) != NULL)
		return "request body contains a NUL byte";
	return NULL;
}

/* A server error: map its SQLSTATE to an answer. */
static void
reply_db_error(struct gw_request *rq, const struct gw_db_result *r)
{
	int			out = GW_OUT_ERROR;
	int			code = gw_http_status_for_sqlstate(r->sqlstate, &out);

	if (r->sqlstate != NULL)
		snprintf(rq->sqlstate, sizeof(rq->sqlstate), "%s", r->sqlstate);
	switch (code)
	{
		case 400:
			/* seen by the operator: a server-side fault could raise these too */
			if (strncmp(r->sqlstate, "54", 2) == 0)
				rq->reason = "program limit exceeded (request too complex, or a server fault)";
			gw_reply_error(rq, 400, GW_OUT_INVALID, BC_ERROR_INVALID_INPUT,
						   gw_http_invalid_input_message(r->sqlstate, r->message), 0);
			return;
		case 404:
			gw_reply_error(rq, 404, GW_OUT_UNSUPPORTED, BC_ERROR_UNSUPPORTED,
						   "not supported by this service", 0);
			return;
		case 503:
			gw_reply_unavailable(rq, (enum gw_outcome) out, r->reason);
			return;
		default:
			gw_reply_internal(rq);
			return;
	}
}

/* The HTTP status and outcome of a relayed result's status; see relay.h. */
int
gw_relay_status(const char *status, enum gw_outcome *out, int *http)
{
	static const struct
	{
		const char *status;
		enum gw_outcome out;
		int			http;
	}			map[] = {
		{BC_STATUS_ISSUED, GW_OUT_ISSUED, 200},
		{BC_STATUS_PENDING, GW_OUT_PENDING, 200},
		{BC_STATUS_CHALLENGE, GW_OUT_CHALLENGE, 200},
		{BC_STATUS_ATTESTED, GW_OUT_ATTESTED, 200},
		{BC_STATUS_QUARANTINED, GW_OUT_QUARANTINED, 200},
		{BC_STATUS_REFUSED, GW_OUT_REFUSED, 403},
	};

	for (size_t i = 0; status != NULL && i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(status, map[i].status) == 0)
		{
			*out = map[i].out;
			*http = map[i].http;
			return 0;
		}
	return -1;
}

/* The database answered a relayed call. */
static void
relay_done(const struct gw_db_result *r, void *arg)
{
	struct gw_request *rq = arg;

	switch (r->status)
	{
		case GW_DB_OK:
			{
				enum gw_outcome out;
				int			http;

				if (r->value == NULL || r->tag == NULL || gw_relay_status(r->tag, &out, &http) != 0)
					break;
				gw_reply(rq, http, out, "application/json", r->value, r->value_len, 0);
				return;
			}
		case GW_DB_ERROR:
			reply_db_error(rq, r);
			return;
		case GW_DB_UNAVAILABLE:
			gw_reply_unavailable(rq, GW_OUT_UNAVAILABLE, r->reason);
			return;
		case GW_DB_TIMEOUT:
			gw_reply_unavailable(rq, GW_OUT_TIMEOUT, r->reason);
			return;
	}
	rq->reason = "unexpected result";
	gw_reply_internal(rq);
}

/* Run the route's statement with param (it must live until relay_done). */
static void
submit(struct gw_request *rq, const char *param)
{
	const char *why = NULL;

	/* from here relay_done answers, possibly before gw_db_submit returns */
	if (gw_db_submit(rq->gw->pool, rq->route->sql, param, relay_done, rq, &why) != 0)
		gw_reply_unavailable(rq, GW_OUT_UNAVAILABLE, why);
}

/* A GW_ROUTE_RELAY request; see relay.h. */
void
gw_relay_body(struct gw_request *rq)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(rq->req);
	size_t		n = in ? evbuffer_get_length(in) : 0;
	const char *why = NULL;
	int			http;

	rq->body_len = n;
	if ((why = gw_http_body_refusal(NULL, n, rq->route->max_body, &http)) != NULL)
	{
		gw_reply_error(rq, http, http == 413 ? GW_OUT_TOO_LARGE : GW_OUT_INVALID,
					   BC_ERROR_INVALID_INPUT, why, 0);
		return;
	}
	rq->body = malloc(n + 1);
	if (rq->body == NULL || evbuffer_copyout(in, rq->body, n) != (ev_ssize_t) n)
	{
		gw_reply_internal(rq);
		return;
	}
	rq->body[n] = '\0';
	if ((why = gw_http_body_refusal(rq->body, n, rq->route->max_body, &http)) != NULL)
	{
		gw_reply_error(rq, http, GW_OUT_INVALID, BC_ERROR_INVALID_INPUT, why, 0);
		return;
	}
	submit(rq, rq->body);
}

/* A GW_ROUTE_QUERY request; see relay.h. */
void
gw_relay_query(struct gw_request *rq)
{
	submit(rq, "");
}
