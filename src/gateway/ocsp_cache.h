/*
 * ocsp_cache.h: the OCSP answers of bc_join.ocsp_response(), checked, and
 * kept per CertID (POST /v1/ocsp, GET /v1/ocsp/...; ocsp_route.c).
 *
 * A request with exactly one CertID and no nonce is cacheable: its answer is
 * the same for every client (the CertID echoed, no nonce), so it is kept,
 * keyed by the CertID's DER, and served while the NEXT_UPDATE rule of the
 * document cache holds for it (doc_cache.h: before its nextUpdate, no
 * NOTIFY bc_join_crl since the fetch that made it started, and the pool
 * listening without a gap since then).  One database call in flight per key;
 * the table is bounded in entries and bytes (least recently used evicted).
 */
#ifndef BC_GATEWAY_OCSP_CACHE_H
#define BC_GATEWAY_OCSP_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "doc_cache.h"
#include "http_cache.h"

struct evbuffer;
struct gw_config;
struct gw_db_pool;
struct gw_db_result;
struct gw_ocsp_cache;

/* The statement: the request's DER in, the OCSPResponse's DER out (bytea, hex text). */
#define GW_OCSP_SQL "SELECT bc_join.ocsp_response($1::bytea)"

/* The largest OCSPResponse accepted from the database (DER bytes). */
#define GW_OCSP_RESPONSE_MAX 65536

/* The NOTIFY channel that makes every kept answer stale (a revocation committed). */
#define GW_OCSP_CHANNEL "bc_join_crl"

/* RFC 6960 OCSPResponseStatus values the gateway answers itself (unsigned). */
#define GW_OCSP_MALFORMED		1
#define GW_OCSP_INTERNAL_ERROR	2
#define GW_OCSP_TRY_LATER		3

/* One answer, as the route sends it. */
struct gw_ocsp_answer
{
	const unsigned char *der;	/* the database's OCSPResponse; NULL: send unsigned `status` */
	size_t		len;
	int			status;			/* OCSPResponseStatus of der, or the one to send */
	int			cacheable;		/* successful, one SingleResponse echoing the key, nextUpdate ahead */
	time_t		this_update;	/* cacheable: its SingleResponse's */
	time_t		next_update;
	long		max_age;		/* cacheable: Cache-Control max-age (min(60, nextUpdate - now)) */
	const char *etag;			/* cacheable: its entity tag */
	int			hit;			/* answered from the cache */
	const char *reason;			/* why not a database answer (log) */
	const char *sqlstate;		/* the database error's, or NULL */
};

/* Called once per request with its answer; a and its strings live only during the call. */
typedef void (*gw_ocsp_cb) (const struct gw_ocsp_answer *a, void *arg);

/*
 * What a database answer of GW_OCSP_SQL is (pure; the unit tests too): a
 * filled with der/len (the decoded DER, which the caller frees with
 * PQfreemem through *owned) or the unsigned status to send instead.  key
 * (a CertID's DER) NULL: not for the cache.
 */
void		gw_ocsp_examine(const struct gw_db_result *r, const unsigned char *key, size_t key_len,
							time_t now, struct gw_ocsp_answer *a, unsigned char **owned);

/*
 * The same for a DER OCSPResponse already decoded: its status, and whether it
 * is cacheable for key (its times then in a).
 */
void		gw_ocsp_examine_der(const unsigned char *der, size_t len, const unsigned char *key,
								size_t key_len, time_t now, struct gw_ocsp_answer *a);

/* What a cacheable request finds in the cache now. */
enum gw_ocsp_step
{
	GW_OCSP_HIT,				/* the kept answer is current: served, no database call */
	GW_OCSP_WAIT,				/* a call for this CertID is in flight: wait for it (or the next) */
	GW_OCSP_FETCH				/* no current answer, no call in flight: call the database */
};

/*
 * The decision for one key (pure; test/unit/test_gw_ocsp.c): m is the
 * document cache's NEXT_UPDATE moment of the kept answer (gw_doc_current
 * decides whether it is current), fetching whether a call for it is in
 * flight.
 */
enum gw_ocsp_step gw_ocsp_decide(const struct gw_doc_moment *m, int fetching);

/* A cache of at most cfg->ocsp_cache_entries answers and cfg->ocsp_cache_bytes bytes; NULL when out of memory. */
struct gw_ocsp_cache *gw_ocsp_cache_new(struct gw_db_pool *pool, const struct gw_config *cfg);

/* Stop keeping answers (before the pool is freed). */
void		gw_ocsp_cache_close(struct gw_ocsp_cache *c);

/* Free the cache (after the pool: every call has been answered by then). */
void		gw_ocsp_cache_free(struct gw_ocsp_cache *c);

/*
 * Answer cb for a cacheable request (its one CertID's DER key, and param,
 * the request's DER as bytea hex text, which must live until cb is called):
 * at once from the kept answer, or after the one call in flight for key
 * (started with param if none is).  0 when accepted (cb called exactly once,
 * possibly before this returns); -1 when the cache cannot take it (disabled,
 * full of calls in flight, out of memory): cb not called, the caller calls
 * the database itself.
 */
int			gw_ocsp_cache_get(struct gw_ocsp_cache *c, const unsigned char *key, size_t key_len,
							  const char *param, gw_ocsp_cb cb, void *arg);

/*
 * Call the database for a request that is not cached (a nonce, several
 * CertIDs, or the cache declined): cb once with the answer.  Counted in the
 * cache's metrics.
 */
void		gw_ocsp_call(struct gw_ocsp_cache *c, const char *param, gw_ocsp_cb cb, void *arg);

/* Count a request that never reached the cache (malformed) or bypassed it. */
enum gw_ocsp_count
{
	GW_OCSP_COUNT_HIT,
	GW_OCSP_COUNT_MISS,			/* a call started for the key */
	GW_OCSP_COUNT_SHARED,		/* waited for a call in flight */
	GW_OCSP_COUNT_UNCACHEABLE,	/* a nonce or several CertIDs: the database every time */
	GW_OCSP_COUNT_BYPASS,		/* cacheable, but the cache could not take it */
	GW_OCSP_COUNT_MALFORMED,	/* answered malformedRequest by the gateway */
	GW_OCSP_COUNT_N
};
void		gw_ocsp_cache_count(struct gw_ocsp_cache *c, enum gw_ocsp_count what);

/* Append the cache's metrics (Prometheus text) to buf; 0 on success. */
int			gw_ocsp_cache_render_metrics(const struct gw_ocsp_cache *c, struct evbuffer *buf);

#endif
