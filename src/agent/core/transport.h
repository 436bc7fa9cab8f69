/*
 * transport.h: bcd's HTTP client (libcurl): of the gateway (https, its CA
 * pinned), with the one classification of what the gateway answered; and
 * of a cloud's link-local metadata service (plain http, those hosts only).
 */
#ifndef BCD_TRANSPORT_H
#define BCD_TRANSPORT_H

#include <stddef.h>

#include "core/outcome.h"

/* Bound of a response body read from the gateway. */
#define BCD_HTTP_BODY_MAX (256 * 1024)
/* Bound of an answer of a metadata service. */
#define BCD_HTTP_METADATA_MAX (64 * 1024)

/* A client of one gateway or one metadata service (one per thread). */
typedef struct bcd_http bcd_http;

/* One HTTP answer: status (0: none came), body (NUL-terminated, malloc()ed), Retry-After. */
typedef struct bcd_http_reply
{
	long		status;
	char	   *body;
	size_t		len;
	long		retry_after;	/* seconds, -1 when absent */
} bcd_http_reply;

bcd_http   *bcd_http_new(const char *base_url, const char *ca_file,
						 char *err, size_t errlen);
void		bcd_http_free(bcd_http *h);
/* POST (GET when body is NULL) and classify: BCD_RC_OK (200/403: verify it), _RETRY, _FAILED or _STOPPED. */
bcd_rc		bcd_http_exchange(bcd_http *h, const char *path, const char *body,
							  bcd_http_reply *reply, char *err, size_t errlen);
/*
 * One request of bytes rather than JSON (the CRL, OCSP): POST len bytes of
 * content_type (NULL: no Content-Type; GET when body is NULL), If-None-Match when if_none_match is
 * neither NULL nor "", answers of at most max bytes; the answer's ETag into
 * etag ("" when none).  BCD_RC_OK with any HTTP status in reply, else
 * _RETRY (no answer; why in err) or _STOPPED.  Nothing is classified.
 */
bcd_rc		bcd_http_fetch(bcd_http *h, const char *path, const char *content_type,
						   const unsigned char *body, size_t len, const char *if_none_match,
						   size_t max, bcd_http_reply *reply, char *etag, size_t etaglen,
						   char *err, size_t errlen);
void		bcd_http_reply_free(bcd_http_reply *reply);
void		bcd_http_describe(const bcd_http_reply *reply, char *buf, size_t len);

/*
 * The metadata mode: plain HTTP, unpinned, so only to http:// URLs of
 * 169.254.169.254, [fd00:ec2::254], metadata.google.internal or 127.0.0.1.
 */
bcd_http   *bcd_http_new_metadata(const char *base_url, char *err, size_t errlen);
/* GET, or PUT with an empty body, of base_url + path: a 200's body or BC_EINVAL. */
int			bcd_http_metadata_fetch(bcd_http *h, const char *method, const char *path,
									const char *header, char **out, size_t *outlen,
									char *err, size_t errlen);
/* s percent-encoded for a URL, malloc()ed, or NULL. */
char	   *bcd_http_escape(const char *s);

#endif							/* BCD_TRANSPORT_H */
