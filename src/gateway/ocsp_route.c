/*
 * ocsp_route.c: the OCSP responder's HTTP side.
 *
 * POST /v1/ocsp carries the DER OCSPRequest as its body (at most
 * BC_OCSP_REQUEST_MAX bytes, else 413); GET /v1/ocsp/<request> carries it
 * url-encoded base64 in the path (RFC 6960 A.1, RFC 5019).  The request is
 * parsed by src/common/ocsp.c (OpenSSL's d2i_OCSP_REQUEST); one that does not
 * parse is answered an unsigned malformedRequest by the gateway, without a
 * database call.  A request with exactly one CertID and no nonce goes through
 * the per-CertID cache (ocsp_cache.c), any other to the database every time.
 * Every OCSP answer is HTTP 200, application/ocsp-response; a cacheable one
 * (successful, one SingleResponse, nextUpdate ahead) carries RFC 5019's
 * caching headers (Cache-Control max-age=min(60, nextUpdate - now), public,
 * no-transform, must-revalidate; Last-Modified = thisUpdate; Expires =
 * nextUpdate; ETag), and a GET whose If-None-Match matches is a 304.
 */
#include "ocsp_route.h"
#include "gateway.h"
#include "http_cache.h"
#include "log.h"
#include "ocsp_cache.h"
#include "reply.h"

#include "bc_protocol.h"
#include "ocsp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <openssl/evp.h>
#include <openssl/ocsp.h>

/* The base64 of BC_OCSP_REQUEST_MAX bytes, padded. */
#define B64_MAX (4 * ((BC_OCSP_REQUEST_MAX + 2) / 3))

_Static_assert(GW_OCSP_GET_TAIL_MAX == 3 * B64_MAX, "GW_OCSP_GET_TAIL_MAX follows BC_OCSP_REQUEST_MAX");

/* The DER of a GET request's tail; see ocsp_route.h. */
int
gw_ocsp_get_decode(const char *tail, unsigned char *der, size_t cap, size_t *len, const char **why)
{
	size_t		tl = tail ? strlen(tail) : 0;
	size_t		n = 0;
	char	   *b64 = NULL;
	unsigned char buf[3 * (B64_MAX / 4) + 3];
	EVP_ENCODE_CTX *ctx = NULL;
	int			outl = 0,
				fl = 0,
				rc = -1;

	*len = 0;
	*why = "the request in the path is empty";
	if (tl == 0)
		return -1;
	*why = "the request in the path is too long";
	if (tl > GW_OCSP_GET_TAIL_MAX)
		return -1;
	b64 = evhttp_uridecode(tail, 0, &n);
	*why = "the request in the path does not url-decode";
	if (b64 == NULL)
		return -1;
	*why = "the request in the path is too long";
	if (n > B64_MAX)
		goto out;
	*why = "out of memory";
	if ((ctx = EVP_ENCODE_CTX_new()) == NULL)
		goto out;
	EVP_DecodeInit(ctx);
	*why = "the request in the path is not base64";
	if (EVP_DecodeUpdate(ctx, buf, &outl, (const unsigned char *) b64, (int) n) < 0 ||
		EVP_DecodeFinal(ctx, buf + outl, &fl) < 0)
		goto out;
	*why = "the request in the path is empty";
	if (outl + fl <= 0)
		goto out;
	*why = "the request in the path is too long";
	if ((size_t) (outl + fl) > cap)
		goto out;
	memcpy(der, buf, (size_t) (outl + fl));
	*len = (size_t) (outl + fl);
	*why = NULL;
	rc = 0;
out:
	EVP_ENCODE_CTX_free(ctx);
	free(b64);
	return rc;
}

/* The outcome (metrics) of an OCSP answer with this status. */
static enum gw_outcome
outcome_of(int status)
{
	switch (status)
	{
		case OCSP_RESPONSE_STATUS_SUCCESSFUL:
			return GW_OUT_ISSUED;
		case OCSP_RESPONSE_STATUS_MALFORMEDREQUEST:
			return GW_OUT_INVALID;
		case OCSP_RESPONSE_STATUS_TRYLATER:
			return GW_OUT_UNAVAILABLE;
		default:
			return GW_OUT_ERROR;
	}
}

/* Answer an unsigned OCSPResponse of status (malformedRequest, internalError, tryLater). */
static void
reply_unsigned(struct gw_request *rq, int status)
{
	OCSP_RESPONSE *resp = OCSP_response_create(status, NULL);
	unsigned char *der = NULL;
	int			n = resp ? i2d_OCSP_RESPONSE(resp, &der) : -1;

	OCSP_RESPONSE_free(resp);
	if (n <= 0)
	{
		gw_reply_internal(rq);
		return;
	}
	gw_reply(rq, 200, outcome_of(status), "application/ocsp-response", (const char *) der,
			 (size_t) n, 0);
	OPENSSL_free(der);
}

/* A request the gateway answers malformedRequest itself; why goes to the log. */
static void
reply_malformed(struct gw_request *rq, const char *why)
{
	gw_ocsp_cache_count(rq->gw->ocsp, GW_OCSP_COUNT_MALFORMED);
	rq->reason = why;
	reply_unsigned(rq, OCSP_RESPONSE_STATUS_MALFORMEDREQUEST);
}

/* The answer of a request (from the cache or the database). */
static void
answered(const struct gw_ocsp_answer *a, void *arg)
{
	struct gw_request *rq = arg;
	struct evkeyvalq *h = evhttp_request_get_output_headers(rq->req);
	char		date[64];

	if (a->sqlstate != NULL)
		snprintf(rq->sqlstate, sizeof(rq->sqlstate), "%s", a->sqlstate);
	if (a->der == NULL)
	{
		rq->reason = a->reason;
		reply_unsigned(rq, a->status);
		return;
	}
	if (a->cacheable)
	{
		snprintf(rq->cache_control, sizeof(rq->cache_control),
				 "max-age=%ld, public, no-transform, must-revalidate", a->max_age);
		if (gw_http_date(a->this_update, date, sizeof(date)) == 0)
			evhttp_add_header(h, "Last-Modified", date);
		if (gw_http_date(a->next_update, date, sizeof(date)) == 0)
			evhttp_add_header(h, "Expires", date);
		if (a->etag != NULL)
		{
			evhttp_add_header(h, "ETag", a->etag);
			if (evhttp_request_get_command(rq->req) == EVHTTP_REQ_GET &&
				gw_etag_matches(evhttp_find_header(evhttp_request_get_input_headers(rq->req),
												   "If-None-Match"), a->etag))
			{
				gw_reply(rq, 304, outcome_of(a->status), "application/ocsp-response", NULL, 0, 0);
				return;
			}
		}
	}
	gw_reply(rq, 200, outcome_of(a->status), "application/ocsp-response",
			 (const char *) a->der, a->len, 0);
}

/* The request's DER as bytea hex text ("\x..."), malloc'd. */
static char *
bytea_hex(const unsigned char *der, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	char	   *s = malloc(2 * len + 3);

	if (s == NULL)
		return NULL;
	s[0] = '\\';
	s[1] = 'x';
	for (size_t i = 0; i < len; i++)
	{
		s[2 + 2 * i] = hex[der[i] >> 4];
		s[3 + 2 * i] = hex[der[i] & 0xf];
	}
	s[2 + 2 * len] = '\0';
	return s;
}

/* An OCSP request; see ocsp_route.h. */
void
gw_ocsp_handle(struct gw_request *rq, const char *tail)
{
	unsigned char *der = NULL;
	size_t		len = 0;
	const char *why = NULL;
	bc_ocsp_request *req = NULL;
	char		err[128] = "";

	if (tail == NULL)
	{
		struct evbuffer *in = evhttp_request_get_input_buffer(rq->req);
		size_t		n = in ? evbuffer_get_length(in) : 0;

		rq->body_len = n;
		if (n > BC_OCSP_REQUEST_MAX)
		{
			gw_reply_error(rq, 413, GW_OUT_TOO_LARGE, BC_ERROR_INVALID_INPUT,
						   "request body over the route's bound", 0);
			return;
		}
		if (n == 0)
		{
			reply_malformed(rq, "empty OCSP request");
			return;
		}
		der = malloc(n);
		if (der == NULL || evbuffer_remove(in, der, n) != (int) n)
		{
			free(der);
			gw_reply_internal(rq);
			return;
		}
		len = n;
	}
	else
	{
		rq->body_len = strlen(tail);
		der = malloc(BC_OCSP_REQUEST_MAX);
		if (der == NULL)
		{
			gw_reply_internal(rq);
			return;
		}
		if (gw_ocsp_get_decode(tail, der, BC_OCSP_REQUEST_MAX, &len, &why) != 0)
		{
			free(der);
			reply_malformed(rq, why);
			return;
		}
	}
	req = malloc(sizeof(*req));
	if (req == NULL)
	{
		free(der);
		gw_reply_internal(rq);
		return;
	}
	if (bc_ocsp_parse_request(der, len, req, err, sizeof(err)) != 0)
	{
		gw_log(GW_LOG_DEBUG, "malformed OCSP request",
			   json_pack("{s:s,s:s}", "client", rq->client, "reason", err));
		free(der);
		free(req);
		reply_malformed(rq, "malformed OCSP request");
		return;
	}
	/* from here rq->body (freed with rq) is the statement's parameter */
	rq->body = bytea_hex(der, len);
	free(der);
	if (rq->body == NULL)
	{
		free(req);
		gw_reply_internal(rq);
		return;
	}
	if (req->n == 1 && !req->has_nonce)
	{
		int			rc = gw_ocsp_cache_get(rq->gw->ocsp, req->ids[0].der, req->ids[0].der_len,
										   rq->body, answered, rq);

		free(req);
		if (rc == 0)
			return;
		gw_ocsp_cache_count(rq->gw->ocsp, GW_OCSP_COUNT_BYPASS);
	}
	else
	{
		free(req);
		gw_ocsp_cache_count(rq->gw->ocsp, GW_OCSP_COUNT_UNCACHEABLE);
	}
	gw_ocsp_call(rq->gw->ocsp, rq->body, answered, rq);
}
