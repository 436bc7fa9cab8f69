/*
 * crl.c: the node CA's CRL, fetched through the pool, cached, served from memory.
 *
 * `SELECT bc_join.crl()` (bytea, text result in hex form) is run through the
 * pool at most once at a time; the DER is kept with its thisUpdate and
 * nextUpdate.  Every pool connection runs LISTEN bc_join_crl (see
 * gw_db_pool_listen); a notification means a revocation committed, and a
 * fetch starts at once.  The cached CRL is current while:
 *   - no notification arrived since the fetch that produced it started,
 *   - the pool has had a listening connection without a gap since that
 *     fetch (otherwise a notification may have been missed), and
 *   - its nextUpdate has not passed (by the wall clock, and by the monotonic
 *     clock measured from the fetch, whichever comes first).
 * A request for a CRL that is not current waits for the fetch in progress
 * (started if none is), but only for a fetch that started after the last
 * notification it could know of.  A fetch that fails leaves the old CRL
 * served until its nextUpdate, then 503; for --retry-after seconds after a
 * failure, requests get that answer without a new attempt.  A refresh timer fetches again at
 * 3/4 of the way from thisUpdate to nextUpdate (every --retry-after seconds
 * while it fails).
 */
#include "crl.h"
#include "config.h"
#include "db_pool.h"
#include "log.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <libpq-fe.h>
#include <openssl/asn1.h>
#include <openssl/x509.h>

/* The longest Cache-Control max-age, so a CDN passes a revocation on within a minute. */
#define GW_CRL_MAX_AGE 60

static const char crl_sql[] = "SELECT bc_join.crl()";

struct waiter
{
	TAILQ_ENTRY(waiter) link;
	gw_crl_cb	cb;
	void	   *arg;
	uint64_t	seq;			/* notifications seen when it arrived */
};

struct gw_crl
{
	struct event_base *base;
	struct gw_db_pool *pool;
	const struct gw_config *cfg;
	struct event *timer;		/* the refresh (or retry) timer */
	int			closing;

	/* the cached CRL */
	unsigned char *der;
	size_t		len;
	time_t		this_update;
	time_t		next_update;
	double		fetched_mono;	/* when the fetch that produced it finished */
	double		expires_mono;	/* nextUpdate on the monotonic clock */
	uint64_t	seq;			/* notify_seq when that fetch started */
	unsigned long period;		/* the pool's listening period after that fetch */

	uint64_t	notify_seq;		/* notifications received */
	int			fetching;
	uint64_t	fetch_seq;		/* notify_seq when the running fetch started */
	TAILQ_HEAD(, waiter) waiters;

	double		failed_mono;	/* when the last fetch failed (0: never) */

	uint64_t	fetch_ok;
	uint64_t	fetch_error;
	uint64_t	served;
	uint64_t	unavailable;
};

static void start_fetch(struct gw_crl *c);

/* Seconds on the monotonic clock. */
static double
mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Seconds the cached CRL may still be served (<= 0: past its nextUpdate, or none). */
static double
remaining(const struct gw_crl *c)
{
	double		wall,
				mono;

	if (c->der == NULL)
		return 0;
	wall = difftime(c->next_update, time(NULL));
	mono = c->expires_mono - mono_now();
	return wall < mono ? wall : mono;
}

/* Whether the cached CRL can be served without asking the database. */
static int
current(const struct gw_crl *c)
{
	unsigned long p = gw_db_pool_listen_period(c->pool);

	return c->der != NULL && c->seq == c->notify_seq && p != 0 && p == c->period &&
		remaining(c) > 0;
}

/* Answer one waiter: the cached CRL while it is before its nextUpdate, else nothing (503). */
static void
answer(struct gw_crl *c, gw_crl_cb cb, void *arg)
{
	double		r = remaining(c);

	if (r > 0)
	{
		long		age = r < GW_CRL_MAX_AGE ? (long) r : GW_CRL_MAX_AGE;

		c->served++;
		cb(c->der, c->len, age, arg);
	}
	else
	{
		c->unavailable++;
		cb(NULL, 0, 0, arg);
	}
}

/* Arm the timer in secs seconds (at least one). */
static void
arm(struct gw_crl *c, double secs)
{
	struct timeval tv;

	if (c->closing)
		return;
	if (secs < 1)
		secs = 1;
	tv.tv_sec = (time_t) secs;
	tv.tv_usec = (suseconds_t) ((secs - (double) tv.tv_sec) * 1e6);
	evtimer_add(c->timer, &tv);
}

/* An ASN1_TIME as seconds since the epoch; -1 when it does not convert. */
static time_t
asn1_epoch(const ASN1_TIME *t)
{
	struct tm	tm;

	if (t == NULL || !ASN1_TIME_to_tm(t, &tm))
		return (time_t) -1;
	return timegm(&tm);
}

/*
 * Check a fetched value (bytea in text form) and make it the cached CRL; a
 * short reason when it is refused (and nothing changes).
 */
static const char *
store(struct gw_crl *c, const char *text, size_t text_len, uint64_t seq)
{
	unsigned char *der;
	size_t		len = 0;
	const unsigned char *p;
	X509_CRL   *crl;
	time_t		tu,
				nu;

	/* hex form: "\x" and two digits a byte; refuse before decoding anything big */
	if (text == NULL)
		return "bc_join.crl() returned NULL";
	if (text_len > 2 + 2 * c->cfg->crl_max_size)
		return "the CRL is larger than --crl-max-size";
	der = PQunescapeBytea((const unsigned char *) text, &len);
	if (der == NULL)
		return "out of memory";
	if (len > c->cfg->crl_max_size)
	{
		PQfreemem(der);
		return "the CRL is larger than --crl-max-size";
	}
	p = der;
	crl = len > 0 && len <= LONG_MAX ? d2i_X509_CRL(NULL, &p, (long) len) : NULL;
	if (crl == NULL || p != der + len)
	{
		X509_CRL_free(crl);
		PQfreemem(der);
		return "bc_join.crl() is not one DER CRL";
	}
	tu = asn1_epoch(X509_CRL_get0_lastUpdate(crl));
	nu = asn1_epoch(X509_CRL_get0_nextUpdate(crl));
	X509_CRL_free(crl);
	if (tu == (time_t) -1 || nu == (time_t) -1 || nu <= tu)
	{
		PQfreemem(der);
		return "the CRL has no usable thisUpdate/nextUpdate";
	}
	if (difftime(nu, time(NULL)) <= 0)
	{
		PQfreemem(der);
		return "the CRL is already past its nextUpdate";
	}
	free(c->der);
	c->der = malloc(len);
	if (c->der == NULL)
	{
		PQfreemem(der);
		c->len = 0;
		return "out of memory";
	}
	memcpy(c->der, der, len);
	PQfreemem(der);
	c->len = len;
	c->this_update = tu;
	c->next_update = nu;
	c->fetched_mono = mono_now();
	c->expires_mono = c->fetched_mono + difftime(nu, time(NULL));
	c->seq = seq;
	c->period = gw_db_pool_listen_period(c->pool);
	return NULL;
}

/* The fetch finished: cache it, answer the waiters it satisfies, go on if needed. */
static void
fetch_done(const struct gw_db_result *r, void *arg)
{
	struct gw_crl *c = arg;
	const char *why = NULL;
	uint64_t	seq = c->fetch_seq;
	TAILQ_HEAD(, waiter) done;
	struct waiter *w,
			   *next;

	c->fetching = 0;
	if (r->status == GW_DB_OK)
		why = store(c, r->value, r->value_len, seq);
	else
		why = r->reason ? r->reason : "database error";
	if (why == NULL)
	{
		c->fetch_ok++;
		gw_log(GW_LOG_INFO, "crl fetched",
			   json_pack("{s:I,s:I,s:I}", "bytes", (json_int_t) c->len,
						 "this_update", (json_int_t) c->this_update,
						 "next_update", (json_int_t) c->next_update));
		arm(c, 0.75 * difftime(c->next_update, c->this_update) -
			difftime(time(NULL), c->this_update));
	}
	else
	{
		c->fetch_error++;
		c->failed_mono = mono_now();
		gw_log(r->status == GW_DB_OK ? GW_LOG_ERROR : GW_LOG_WARN, "crl fetch failed",
			   json_pack("{s:s,s:s?,s:b}", "reason", why, "sqlstate",
						 r->status == GW_DB_ERROR ? r->sqlstate : NULL,
						 "serving_cached", remaining(c) > 0));
		if (c->der != NULL)
			arm(c, c->cfg->retry_after_s);
	}

	/*
	 * A waiter that arrived after a notification newer than this fetch's
	 * start waits for the next fetch, unless the fetch failed (then it gets
	 * the cached CRL or a 503 now, rather than a retry loop) or we close.
	 */
	TAILQ_INIT(&done);
	for (w = TAILQ_FIRST(&c->waiters); w != NULL; w = next)
	{
		next = TAILQ_NEXT(w, link);
		if (w->seq <= seq || why != NULL || c->closing)
		{
			TAILQ_REMOVE(&c->waiters, w, link);
			TAILQ_INSERT_TAIL(&done, w, link);
		}
	}
	while ((w = TAILQ_FIRST(&done)) != NULL)
	{
		TAILQ_REMOVE(&done, w, link);
		answer(c, w->cb, w->arg);
		free(w);
	}
	if (!c->closing && !c->fetching && why == NULL &&
		(!TAILQ_EMPTY(&c->waiters) || c->seq != c->notify_seq))
		start_fetch(c);
}

/* Start the one fetch (nothing when one runs or we close). */
static void
start_fetch(struct gw_crl *c)
{
	const char *why = NULL;

	if (c->fetching || c->closing)
		return;
	c->fetching = 1;
	c->fetch_seq = c->notify_seq;
	if (gw_db_submit(c->pool, crl_sql, NULL, fetch_done, c, &why) != 0)
	{
		struct gw_db_result r = {.status = GW_DB_UNAVAILABLE, .reason = why};

		fetch_done(&r, c);
	}
}

/* A notification on the pool: a revocation committed. */
static void
on_notify(const char *channel, const char *extra, void *arg)
{
	struct gw_crl *c = arg;

	(void) extra;
	if (strcmp(channel, GW_CRL_CHANNEL) != 0)
		return;
	c->notify_seq++;
	gw_log(GW_LOG_DEBUG, "crl stale: revocation notified", NULL);
	/* refresh now, so the next request finds it done */
	if (c->der != NULL)
		start_fetch(c);
}

/* The refresh timer. */
static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void) fd;
	(void) what;
	start_fetch(arg);
}

/* A cache fed by pool; see crl.h. */
struct gw_crl *
gw_crl_new(struct event_base *base, struct gw_db_pool *pool, const struct gw_config *cfg)
{
	struct gw_crl *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->base = base;
	c->pool = pool;
	c->cfg = cfg;
	TAILQ_INIT(&c->waiters);
	c->timer = evtimer_new(base, timer_cb, c);
	if (c->timer == NULL)
	{
		free(c);
		return NULL;
	}
	gw_db_pool_listen(pool, GW_CRL_CHANNEL, on_notify, c);
	return c;
}

/* Stop refreshing; see crl.h. */
void
gw_crl_close(struct gw_crl *c)
{
	if (c == NULL)
		return;
	c->closing = 1;
	evtimer_del(c->timer);
}

/* Free the cache; see crl.h. */
void
gw_crl_free(struct gw_crl *c)
{
	struct waiter *w;

	if (c == NULL)
		return;
	c->closing = 1;
	while ((w = TAILQ_FIRST(&c->waiters)) != NULL)
	{
		TAILQ_REMOVE(&c->waiters, w, link);
		answer(c, w->cb, w->arg);
		free(w);
	}
	event_free(c->timer);
	free(c->der);
	free(c);
}

/* Answer cb with the CRL; see crl.h. */
int
gw_crl_get(struct gw_crl *c, gw_crl_cb cb, void *arg)
{
	struct waiter *w;

	/* after a failed fetch, at most one attempt per --retry-after: cached or 503 meanwhile */
	if (current(c) || c->closing ||
		(!c->fetching && c->failed_mono > 0 &&
		 mono_now() - c->failed_mono < c->cfg->retry_after_s))
	{
		answer(c, cb, arg);
		return 0;
	}
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return -1;
	w->cb = cb;
	w->arg = arg;
	w->seq = c->notify_seq;
	TAILQ_INSERT_TAIL(&c->waiters, w, link);
	start_fetch(c);
	return 0;
}

/* Append the CRL metrics; see crl.h. */
int
gw_crl_render_metrics(const struct gw_crl *c, struct evbuffer *buf)
{
	int			rc = 0;

	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_crl_fetches_total CRL fetches from the database, by result.\n"
							  "# TYPE bc_gateway_crl_fetches_total counter\n"
							  "bc_gateway_crl_fetches_total{result=\"ok\"} %llu\n"
							  "bc_gateway_crl_fetches_total{result=\"error\"} %llu\n"
							  "# HELP bc_gateway_crl_requests_total GET /v1/crl answered, by result.\n"
							  "# TYPE bc_gateway_crl_requests_total counter\n"
							  "bc_gateway_crl_requests_total{result=\"served\"} %llu\n"
							  "bc_gateway_crl_requests_total{result=\"unavailable\"} %llu\n",
							  (unsigned long long) c->fetch_ok, (unsigned long long) c->fetch_error,
							  (unsigned long long) c->served,
							  (unsigned long long) c->unavailable) < 0;
	if (c->der != NULL)
		rc |= evbuffer_add_printf(buf,
								  "# HELP bc_gateway_crl_age_seconds Seconds since the cached CRL was fetched.\n"
								  "# TYPE bc_gateway_crl_age_seconds gauge\n"
								  "bc_gateway_crl_age_seconds %.3f\n"
								  "# HELP bc_gateway_crl_next_update_seconds Seconds until the cached CRL's nextUpdate.\n"
								  "# TYPE bc_gateway_crl_next_update_seconds gauge\n"
								  "bc_gateway_crl_next_update_seconds %.0f\n"
								  "# HELP bc_gateway_crl_bytes Size of the cached CRL (DER).\n"
								  "# TYPE bc_gateway_crl_bytes gauge\n"
								  "bc_gateway_crl_bytes %zu\n",
								  mono_now() - c->fetched_mono, remaining(c), c->len) < 0;
	return rc ? -1 : 0;
}
