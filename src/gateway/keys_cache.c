/*
 * keys_cache.c: the signed service keys (GET /v1/service-keys), fetched
 * through the pool, cached, served from memory.
 *
 * bc_join.signed_service_keys() signs the service-keys document once per
 * signing key: run for every request, a flood of GETs costs the database
 * those signatures and a pool connection each (it cut legitimate joins by
 * 30%).  So, as the CRL is (crl.c), the document is fetched at most once at
 * a time and kept: a request is answered from the copy while it is younger
 * than --service-keys-max-age (default 10 s), else it waits for the one
 * fetch in progress (started if none is).  Keys rotate by files in the
 * server's key directory, which nothing signals to the gateway; the age is
 * the bound: a rotation is served within --service-keys-max-age, and the
 * Cache-Control max-age is what is left of it, so a cache in front adds
 * nothing.  The copy is never believed by anyone but bcd, which checks its
 * signatures and its time; a stale one does no harm beyond its age.  A
 * fetch that fails leaves the last copy served while it is younger than
 * GW_KEYS_STALE_MAX (then 503), at most one attempt per --retry-after.
 *
 * The SPIFFE bundle (GET /v1/spiffe-bundle, bc_join.spiffe_bundle()) is a
 * second cache of the same kind with the same bound: a key or node CA
 * rotation shows in it within --service-keys-max-age.  Each cache names
 * its document (its metrics: bc_gateway_<name>_...).
 */
#include "keys_cache.h"
#include "config.h"
#include "db_pool.h"
#include "log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/buffer.h>

/* A copy is served while a fetch fails for at most this long (seconds). */
#define GW_KEYS_STALE_MAX 300
/* The largest document accepted from the database. */
#define GW_KEYS_MAX_SIZE (256 * 1024)


struct waiter
{
	TAILQ_ENTRY(waiter) link;
	gw_keys_cb	cb;
	void	   *arg;
};

struct gw_keys
{
	struct gw_db_pool *pool;
	const struct gw_config *cfg;
	const char *sql;			/* the document's query: one text column */
	const char *name;			/* service_keys, spiffe_bundle: logs and metrics */
	const char *path;			/* what it answers */
	int			closing;

	char	   *doc;			/* the cached copy */
	size_t		len;
	double		fetched_mono;	/* when the fetch that produced it started */

	int			fetching;
	double		fetch_started;
	double		failed_mono;	/* when the last fetch failed (0: never) */
	TAILQ_HEAD(, waiter) waiters;

	uint64_t	fetch_ok;
	uint64_t	fetch_error;
	uint64_t	served;
	uint64_t	unavailable;
};

/* Seconds on the monotonic clock. */
static double
mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Age of the copy in seconds (a large number when there is none). */
static double
age(const struct gw_keys *k)
{
	return k->doc != NULL ? mono_now() - k->fetched_mono : 1e18;
}

/* Answer one request: the copy when it is younger than limit seconds, else 503. */
static void
answer(struct gw_keys *k, gw_keys_cb cb, void *arg, double limit)
{
	double		a = age(k);

	if (a < limit)
	{
		double		left = (double) k->cfg->service_keys_max_age_s - a;

		k->served++;
		cb(k->doc, k->len, left > 0 ? (long) left : 0, arg);
	}
	else
	{
		k->unavailable++;
		cb(NULL, 0, 0, arg);
	}
}

/* The fetch finished: keep the copy, answer every waiter. */
static void
fetch_done(const struct gw_db_result *r, void *arg)
{
	struct gw_keys *k = arg;
	const char *why = NULL;
	struct waiter *w;
	double		limit;

	k->fetching = 0;
	if (r->status != GW_DB_OK)
		why = r->reason ? r->reason : "database error";
	else if (r->value == NULL || r->value_len == 0)
		why = "the query returned NULL";
	else if (r->value_len > GW_KEYS_MAX_SIZE)
		why = "the document is larger than 256 KiB";
	else
	{
		char	   *doc = malloc(r->value_len);

		if (doc == NULL)
			why = "out of memory";
		else
		{
			memcpy(doc, r->value, r->value_len);
			free(k->doc);
			k->doc = doc;
			k->len = r->value_len;
			k->fetched_mono = k->fetch_started;
		}
	}
	if (why == NULL)
	{
		k->fetch_ok++;
		k->failed_mono = 0;
		gw_log(GW_LOG_DEBUG, "cached document fetched",
			   json_pack("{s:s,s:I}", "document", k->name, "bytes", (json_int_t) k->len));
		limit = (double) k->cfg->service_keys_max_age_s;
	}
	else
	{
		k->fetch_error++;
		k->failed_mono = mono_now();
		gw_log(r->status == GW_DB_OK ? GW_LOG_ERROR : GW_LOG_WARN, "cached document fetch failed",
			   json_pack("{s:s,s:s,s:s?,s:b}", "document", k->name, "reason", why, "sqlstate",
						 r->status == GW_DB_ERROR ? r->sqlstate : NULL,
						 "serving_cached", age(k) < GW_KEYS_STALE_MAX));
		limit = GW_KEYS_STALE_MAX;
	}
	while ((w = TAILQ_FIRST(&k->waiters)) != NULL)
	{
		TAILQ_REMOVE(&k->waiters, w, link);
		answer(k, w->cb, w->arg, limit);
		free(w);
	}
}

/* Start the one fetch (nothing when one runs or we close). */
static void
start_fetch(struct gw_keys *k)
{
	const char *why = NULL;

	if (k->fetching || k->closing)
		return;
	k->fetching = 1;
	k->fetch_started = mono_now();
	if (gw_db_submit(k->pool, k->sql, NULL, fetch_done, k, &why) != 0)
	{
		struct gw_db_result r = {.status = GW_DB_UNAVAILABLE, .reason = why};

		fetch_done(&r, k);
	}
}

/* A cache fed by pool; see keys_cache.h. */
struct gw_keys *
gw_keys_new(struct gw_db_pool *pool, const struct gw_config *cfg, const char *sql,
			const char *name, const char *path)
{
	struct gw_keys *k = calloc(1, sizeof(*k));

	if (k == NULL)
		return NULL;
	k->pool = pool;
	k->cfg = cfg;
	k->sql = sql;
	k->name = name;
	k->path = path;
	TAILQ_INIT(&k->waiters);
	return k;
}

/* Stop fetching; see keys_cache.h. */
void
gw_keys_close(struct gw_keys *k)
{
	if (k != NULL)
		k->closing = 1;
}

/* Free the cache; see keys_cache.h. */
void
gw_keys_free(struct gw_keys *k)
{
	struct waiter *w;

	if (k == NULL)
		return;
	k->closing = 1;
	while ((w = TAILQ_FIRST(&k->waiters)) != NULL)
	{
		TAILQ_REMOVE(&k->waiters, w, link);
		answer(k, w->cb, w->arg, GW_KEYS_STALE_MAX);
		free(w);
	}
	free(k->doc);
	free(k);
}

/* Answer cb with the signed service keys; see keys_cache.h. */
int
gw_keys_get(struct gw_keys *k, gw_keys_cb cb, void *arg)
{
	struct waiter *w;

	if (age(k) < (double) k->cfg->service_keys_max_age_s)
	{
		answer(k, cb, arg, (double) k->cfg->service_keys_max_age_s);
		return 0;
	}
	/* closing, or a fetch failed lately: the copy while it is not too old, else 503 */
	if (k->closing ||
		(!k->fetching && k->failed_mono > 0 && mono_now() - k->failed_mono < k->cfg->retry_after_s))
	{
		answer(k, cb, arg, GW_KEYS_STALE_MAX);
		return 0;
	}
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return -1;
	w->cb = cb;
	w->arg = arg;
	TAILQ_INSERT_TAIL(&k->waiters, w, link);
	start_fetch(k);
	return 0;
}

/* Append the cache's metrics; see keys_cache.h. */
int
gw_keys_render_metrics(const struct gw_keys *k, struct evbuffer *buf)
{
	int			rc = 0;
	const char *n = k->name;

	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_%s_fetches_total Fetches of the %s document from the database, by result.\n"
							  "# TYPE bc_gateway_%s_fetches_total counter\n"
							  "bc_gateway_%s_fetches_total{result=\"ok\"} %llu\n"
							  "bc_gateway_%s_fetches_total{result=\"error\"} %llu\n"
							  "# HELP bc_gateway_%s_answers_total GET %s answered from the cache, by result.\n"
							  "# TYPE bc_gateway_%s_answers_total counter\n"
							  "bc_gateway_%s_answers_total{result=\"served\"} %llu\n"
							  "bc_gateway_%s_answers_total{result=\"unavailable\"} %llu\n",
							  n, n, n, n, (unsigned long long) k->fetch_ok,
							  n, (unsigned long long) k->fetch_error,
							  n, k->path, n, n, (unsigned long long) k->served,
							  n, (unsigned long long) k->unavailable) < 0;
	if (k->doc != NULL)
		rc |= evbuffer_add_printf(buf,
								  "# HELP bc_gateway_%s_age_seconds Age of the cached %s document.\n"
								  "# TYPE bc_gateway_%s_age_seconds gauge\n"
								  "bc_gateway_%s_age_seconds %.3f\n", n, n, n, n, age(k)) < 0;
	return rc ? -1 : 0;
}
