/* ocsp_route.h: POST /v1/ocsp and GET /v1/ocsp/<request>, the OCSP responder's HTTP side (RFC 6960 A.1, RFC 5019). */
#ifndef BC_GATEWAY_OCSP_ROUTE_H
#define BC_GATEWAY_OCSP_ROUTE_H

#include <stddef.h>

struct gw_request;

/* The longest GET tail accepted: the base64 of BC_OCSP_REQUEST_MAX bytes, every character %-encoded. */
#define GW_OCSP_GET_TAIL_MAX (3 * 4 * ((4096 + 2) / 3))

/*
 * An OCSP request: tail NULL for POST (the body is the DER), else the path
 * after "/v1/ocsp/" (url-encoded base64 of the DER).  Answers
 * application/ocsp-response: malformedRequest from the gateway itself, else
 * bc_join.ocsp_response()'s answer (from the cache when cacheable), or
 * tryLater / internalError when the database fails.
 */
void		gw_ocsp_handle(struct gw_request *rq, const char *tail);

/*
 * The DER of a GET request's tail: url-decoded (evhttp_uridecode, '+' kept),
 * then base64-decoded (OpenSSL's EVP_Decode*) into der (cap bytes).  0 with
 * *len set, or -1 with *why (a fixed string).  Pure (fuzzed:
 * test/fuzz/fuzz_gw_ocsp_get.c).
 */
int			gw_ocsp_get_decode(const char *tail, unsigned char *der, size_t cap, size_t *len,
							   const char **why);

#endif
