/*
 * http_cache.h: what HTTP caches in front of the gateway need: an entity tag
 * of an answer, If-None-Match against it (a 304), HTTP-dates (Last-Modified,
 * Expires).  Pure functions (test/unit/test_gw_http_cache.c).
 */
#ifndef BC_GATEWAY_HTTP_CACHE_H
#define BC_GATEWAY_HTTP_CACHE_H

#include <stddef.h>
#include <time.h>

/* An entity tag with its quotes and NUL: '"' + 32 hex digits + '"'. */
#define GW_ETAG_LEN 35

/* The strong ETag of body: the first 16 bytes of its SHA-256 in hex, quoted. */
void		gw_etag(const void *body, size_t len, char out[GW_ETAG_LEN]);

/*
 * Whether an If-None-Match field value (RFC 9110 13.1.2: "*" or a list of
 * entity tags, weak ones "W/"-prefixed) matches etag, by the weak comparison
 * If-None-Match uses; NULL or a value that lists nothing matches nothing.
 */
int			gw_etag_matches(const char *if_none_match, const char *etag);

/* t as an HTTP-date ("Sun, 06 Dec 2026 21:44:44 GMT") into out; 0 on success. */
int			gw_http_date(time_t t, char *out, size_t len);

#endif
