/*
 * keys_cache.h: the signed service keys (GET /v1/service-keys) and the
 * SPIFFE bundle (GET /v1/spiffe-bundle), each fetched through the pool at
 * most once per --service-keys-max-age, served from memory.
 */
#ifndef BC_GATEWAY_KEYS_CACHE_H
#define BC_GATEWAY_KEYS_CACHE_H

#include <stddef.h>

struct evbuffer;
struct gw_config;
struct gw_db_pool;
struct gw_keys;

/*
 * The answer to one GET /v1/service-keys: doc/len the JSON text of
 * bc_join.signed_service_keys() (NULL when none can be served: 503) and
 * max_age the Cache-Control max-age in seconds.  doc lives only during the call.
 */
typedef void (*gw_keys_cb) (const char *doc, size_t len, long max_age, void *arg);

/*
 * A cache of the document sql (one text column) fed by pool; name
 * (service_keys, spiffe_bundle) names its metrics, path what it answers.
 * The strings must outlive the cache.  NULL when out of memory.
 */
struct gw_keys *gw_keys_new(struct gw_db_pool *pool, const struct gw_config *cfg,
							const char *sql, const char *name, const char *path);

/* Stop fetching (before the pool is freed). */
void		gw_keys_close(struct gw_keys *k);

/* Free the cache (after the pool: waiters have been answered by then). */
void		gw_keys_free(struct gw_keys *k);

/*
 * Answer cb with the signed service keys: at once from the copy when it is
 * younger than --service-keys-max-age, else after the one fetch in progress
 * (started if none is).  0 when accepted (cb will be called exactly once,
 * possibly before this returns), -1 when out of memory (cb not called).
 */
int			gw_keys_get(struct gw_keys *k, gw_keys_cb cb, void *arg);

/* Append the cache's metrics (Prometheus text) to buf; 0 on success. */
int			gw_keys_render_metrics(const struct gw_keys *k, struct evbuffer *buf);

#endif
