/*
 * transport.h: bcd's HTTPS client of the gateway (libcurl, the gateway's CA
 * pinned), and the one classification of what the gateway answered.
 */
#ifndef BCD_TRANSPORT_H
#define BCD_TRANSPORT_H

#include <stddef.h>

#include "core/outcome.h"

/* Bound of a response body read from the gateway. */
#define BCD_HTTP_BODY_MAX (256 * 1024)

/* A client of one gateway (one per thread). */
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
void		bcd_http_reply_free(bcd_http_reply *reply);
void		bcd_http_describe(const bcd_http_reply *reply, char *buf, size_t len);

#endif							/* BCD_TRANSPORT_H */
