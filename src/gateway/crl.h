/* crl.h: the node CA's CRL, fetched through the pool, cached, served from memory. */
#ifndef BC_GATEWAY_CRL_H
#define BC_GATEWAY_CRL_H

#include <stddef.h>

struct event_base;
struct evbuffer;
struct gw_config;
struct gw_db_pool;
struct gw_crl;

/* The route. */
#define GW_PATH_CRL "/v1/crl"

/* The NOTIFY channel a revocation signals on. */
#define GW_CRL_CHANNEL "bc_join_crl"

/*
 * The answer to one GET /v1/crl: der/len the CRL (NULL when none can be
 * served: 503) and max_age the Cache-Control max-age in seconds.  der lives
 * only during the call.
 */
typedef void (*gw_crl_cb) (const unsigned char *der, size_t len, long max_age, void *arg);

/* A cache fed by pool; registers LISTEN on the pool.  NULL on failure. */
struct gw_crl *gw_crl_new(struct event_base *base, struct gw_db_pool *pool,
						  const struct gw_config *cfg);

/* Stop refreshing (before the pool is freed): nothing new is fetched. */
void		gw_crl_close(struct gw_crl *c);

/* Free the cache (after the pool: waiters have been answered by then). */
void		gw_crl_free(struct gw_crl *c);

/*
 * Answer cb with the CRL: at once from the cache when it is current, else
 * after the one fetch in progress (started if none is).  0 when accepted (cb
 * will be called exactly once, possibly before this returns), -1 when out
 * of memory (cb not called).
 */
int			gw_crl_get(struct gw_crl *c, gw_crl_cb cb, void *arg);

/* Append the CRL metrics (Prometheus text) to buf; 0 on success. */
int			gw_crl_render_metrics(const struct gw_crl *c, struct evbuffer *buf);

#endif
