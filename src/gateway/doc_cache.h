/*
 * doc_cache.h: a document fetched through the pool at most once at a time,
 * kept, and served from memory while its freshness rule allows (the CRL,
 * the signed service keys, the SPIFFE bundle: documents.c).
 */
#ifndef BC_GATEWAY_DOC_CACHE_H
#define BC_GATEWAY_DOC_CACHE_H

#include <stddef.h>
#include <time.h>

#include "http_cache.h"

struct event_base;
struct evbuffer;
struct gw_config;
struct gw_db_pool;
struct gw_doc_cache;

/* A copy may be served for at most this long after it turned stale while fetches fail (MAX_AGE, seconds). */
#define GW_DOC_STALE_MAX 300

/* The longest Cache-Control max-age of a NEXT_UPDATE document, so a CDN passes a revocation on within a minute. */
#define GW_DOC_NEXT_UPDATE_CC_MAX 60
/*
 * A MAX_AGE document with a channel, while no pool connection listens on it
 * (at start, in a database outage): its copy is current for this many
 * seconds from its fetch, not for the max age (a revocation may be missed)
 * and not never (each request would fetch, and the signed SSH document costs
 * a signature per signing key: a TPM's or a token's, tens of milliseconds).
 */
#define GW_DOC_UNLISTENED_MAX_AGE 5

/* When a copy is current. */
enum gw_doc_rule
{
	/*
	 * Younger than --service-keys-max-age (counted from the start of the
	 * fetch that made it) and, when the spec names a channel, no
	 * notification on it since that fetch started and the pool listening
	 * without a gap since then (the next request fetches again; #47: the
	 * KRL and the signed SSH document); while fetches fail, served up to
	 * GW_DOC_STALE_MAX old (or --service-keys-max-age, when that is longer;
	 * or the spec's stale_factor times its max age).  The spec may name its
	 * own max age (bc_join.metrics(): --metrics-max-age).
	 * Cache-Control max-age: what is left of --service-keys-max-age, at
	 * most GW_DOC_NEXT_UPDATE_CC_MAX for a document with a channel (a CDN
	 * passes a revocation on within a minute, as for the CRL).
	 */
	GW_DOC_MAX_AGE,

	/*
	 * Before its nextUpdate (by the wall clock, and by the monotonic clock
	 * from the fetch, whichever comes first), no notification on the
	 * document's channel since that fetch started, and the pool listening
	 * without a gap since then; while fetches fail, served until its
	 * nextUpdate.  Refreshed at 3/4 of thisUpdate to nextUpdate (every
	 * --retry-after while that fails).  Cache-Control max-age: the seconds
	 * until nextUpdate, at most GW_DOC_NEXT_UPDATE_CC_MAX.
	 */
	GW_DOC_NEXT_UPDATE
};

/* What a document's check keeps of a fetched value. */
struct gw_doc_copy
{
	char	   *body;			/* what is served (malloc'd; the cache frees it) */
	size_t		len;
	time_t		this_update;	/* NEXT_UPDATE: the document's validity */
	time_t		next_update;
	char		etag[GW_ETAG_LEN];	/* of body (the cache sets it when it keeps the copy) */
};

/*
 * Check the fetched value (column 0's text, NULL for SQL NULL) and fill copy;
 * NULL when kept, else a short reason for the log (copy untouched).
 */
typedef const char *(*gw_doc_check) (const char *value, size_t len,
									 const struct gw_config *cfg, struct gw_doc_copy *copy);

/* The HELP texts of a document's metrics, where they are not the generic ones. */
struct gw_doc_metric_text
{
	const char *fetches;		/* bc_gateway_<name>_fetches_total */
	const char *answers_name;	/* the answers counter: bc_gateway_<name>_<answers_name>_total */
	const char *answers;
	const char *age;			/* bc_gateway_<name>_age_seconds */
	const char *next_update;	/* bc_gateway_<name>_next_update_seconds (NEXT_UPDATE; NULL: none) */
	const char *bytes;			/* bc_gateway_<name>_bytes (NULL: none) */
	const char *up;				/* bc_gateway_<name>_up: 1 when the last fetch succeeded (NULL: none) */
};

/* One cached document. */
struct gw_doc_spec
{
	const char *name;			/* crl, service_keys, ...: bc_gateway_<name>_* and the logs' document */
	const char *sql;			/* its query: one column */
	enum gw_doc_rule rule;
	const char *channel;		/* the NOTIFY channel that makes it stale (NEXT_UPDATE: required; MAX_AGE: NULL for none) */
	gw_doc_check check;
	const char *content_type;	/* of the 200 */
	const char *unavailable;	/* the reason logged with a 503 */
	const char *log_as;			/* the log lines' "<log_as> fetched" (NULL: cached document) */
	const struct gw_doc_metric_text *metric_text;	/* NULL: the generic texts */
	const char *cors;			/* Access-Control-Allow-Origin of every answer (NULL: none) */

	/*
	 * MAX_AGE: the max age in seconds (NULL: --service-keys-max-age), and
	 * while fetches fail a copy is served until it is stale_factor times as
	 * old (0: GW_DOC_STALE_MAX or the max age, whichever is longer).
	 */
	double		(*max_age) (const struct gw_config *cfg);
	int			stale_factor;
};

/*
 * The answer to one request: body/len the document (NULL when none can be
 * served: 503), max_age the Cache-Control max-age in seconds and etag its
 * entity tag.  body and etag live only during the call.
 */
typedef void (*gw_doc_cb) (const char *body, size_t len, long max_age, const char *etag,
						   void *arg);

/*
 * A cache of spec fed by pool, answering path (for the metrics' HELP); a
 * spec with a channel registers LISTEN on the pool, a NEXT_UPDATE document
 * a timer on base too.
 * spec and path must outlive the cache.  NULL when out of memory.
 */
struct gw_doc_cache *gw_doc_cache_new(struct event_base *base, struct gw_db_pool *pool,
									  const struct gw_config *cfg,
									  const struct gw_doc_spec *spec, const char *path);

/* Stop fetching and refreshing (before the pool is freed). */
void		gw_doc_cache_close(struct gw_doc_cache *c);

/* Free the cache (after the pool: waiters have been answered by then). */
void		gw_doc_cache_free(struct gw_doc_cache *c);

/*
 * Answer cb with the document: at once when the copy is current (or a fetch
 * failed less than --retry-after ago, or the cache closes: the copy while it
 * may be served, else nothing), else after the one fetch in progress
 * (started if none is).  0 when accepted (cb will be called exactly once,
 * possibly before this returns), -1 when out of memory (cb not called).
 */
int			gw_doc_cache_get(struct gw_doc_cache *c, gw_doc_cb cb, void *arg);

/* Whether the cache has a copy and the last fetch succeeded (bc_gateway_<name>_up). */
int			gw_doc_cache_up(const struct gw_doc_cache *c);

/* Append the cache's metrics (Prometheus text) to buf; 0 on success. */
int			gw_doc_cache_render_metrics(const struct gw_doc_cache *c, struct evbuffer *buf);

/*
 * The freshness decision, a pure function of what the cache knows at one
 * moment (the cache fills it; the unit tests too).
 */
struct gw_doc_moment
{
	enum gw_doc_rule rule;
	int			has_copy;
	double		age;			/* MAX_AGE: seconds since the fetch that made the copy started */
	double		max_age;		/* MAX_AGE: --service-keys-max-age (or the spec's max_age) */
	double		stale_max;		/* MAX_AGE: served while fetches fail until this old (0: GW_DOC_STALE_MAX or max_age) */
	int			channel;		/* MAX_AGE: the spec names a channel (max-age at most GW_DOC_NEXT_UPDATE_CC_MAX) */
	double		wall_left;		/* NEXT_UPDATE: seconds until nextUpdate by the wall clock */
	double		mono_left;		/* NEXT_UPDATE: the same by the monotonic clock from the fetch */
	int			unseen;			/* a notification on the spec's channel since that fetch started, or a gap in listening */
	int			unlistened;		/* MAX_AGE with a channel: no connection listens now (GW_DOC_UNLISTENED_MAX_AGE) */
	int			failed;			/* the last fetch failed */
	double		since_failure;	/* seconds since it failed */
	double		retry_after;	/* --retry-after */
	int			fetching;
	int			closing;
};

/* What one request gets now. */
enum gw_doc_step
{
	GW_DOC_SERVE,				/* the copy */
	GW_DOC_UNAVAILABLE,			/* 503 */
	GW_DOC_WAIT					/* the fetch in progress (started if none is) */
};

/* Whether the copy can be answered without asking the database. */
int			gw_doc_current(const struct gw_doc_moment *m);

/* The Cache-Control max-age with which the copy may be served now, or -1 when it may not be (503). */
long		gw_doc_servable(const struct gw_doc_moment *m);

/* What a request gets now (*max_age: the copy's, when SERVE). */
enum gw_doc_step gw_doc_decide(const struct gw_doc_moment *m, long *max_age);

/* NEXT_UPDATE: seconds from now (the wall clock) until the refresh at 3/4 of this_update to next_update. */
double		gw_doc_refresh_in(time_t this_update, time_t next_update, time_t now);

#endif
