/*
 * doc_cache.c: a document fetched through the pool, kept, served from memory.
 *
 * A document (documents.c: the CRL, the signed service keys, the SPIFFE
 * bundle) is one query's one column.  Its query runs through the pool at most
 * once at a time, whatever the load: a request for a copy that is not current
 * waits for the fetch in progress (started if none is), and every request
 * waiting then gets its answer from that one fetch.  The document's check
 * (its parse, or only its size) decides what is kept; a value it refuses
 * changes nothing.  When a copy is current is the document's rule
 * (doc_cache.h, enum gw_doc_rule):
 *
 * MAX_AGE (the service keys, the SPIFFE bundle; the service's metrics with
 * --metrics-max-age): the copy is current while it is younger than
 * --service-keys-max-age, counted from the start of the fetch that made it.  Nothing signals a change (keys rotate by files in the
 * server's key directory), so the age is the bound, and the Cache-Control
 * max-age is what is left of it, so a cache in front adds nothing.  A MAX_AGE
 * document may also name a channel (#47: the SSH KRL and the signed SSH
 * document on bc_join_crl): a notification there, or a gap in the pool's
 * listening, makes the copy not current, and the next request fetches (no
 * fetch is started by the notification itself: the signed document costs a
 * signature per signing key, and nobody may ask for it).  While no
 * connection listens at all, the copy is current for
 * GW_DOC_UNLISTENED_MAX_AGE seconds from its fetch: a missed revocation
 * reaches it that late, and requests do not each cost a fetch.
 *
 * NEXT_UPDATE (the CRL): every pool connection runs LISTEN on the document's
 * channel (see gw_db_pool_listen); a notification (a revocation committed)
 * starts a fetch at once.  The copy is current while:
 *   - no notification arrived since the fetch that produced it started,
 *   - the pool has had a listening connection without a gap since that
 *     fetch (otherwise a notification may have been missed), and
 *   - its nextUpdate has not passed (by the wall clock, and by the monotonic
 *     clock measured from the fetch, whichever comes first).
 * A request waits only for a fetch that started after the last notification
 * it could know of.  A refresh timer fetches again at 3/4 of the way from
 * thisUpdate to nextUpdate (every --retry-after seconds while it fails).
 * Cache-Control max-age is the seconds until nextUpdate, at most 60.
 *
 * A fetch that fails leaves the copy served (MAX_AGE: while it is younger
 * than GW_DOC_STALE_MAX, or the spec's stale_factor times its max age: the
 * service's metrics, 5 x --metrics-max-age; NEXT_UPDATE: until its
 * nextUpdate), then 503; for
 * --retry-after seconds after a failure, requests get that answer without a
 * new attempt (a database outage is neither hammered nor logged once per
 * request).  The first request after the start fetches.
 *
 * The decision itself (gw_doc_current, gw_doc_servable, gw_doc_decide) is a
 * pure function of a struct gw_doc_moment, tested in test/unit/test_gw_doc_cache.c.
 */
#include "doc_cache.h"
#include "clock.h"
#include "config.h"
#include "db_pool.h"
#include "log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

struct waiter
{
	TAILQ_ENTRY(waiter) link;
	gw_doc_cb	cb;
	void	   *arg;
	uint64_t	seq;			/* notifications seen when it arrived */
};

struct gw_doc_cache
{
	const struct gw_doc_spec *spec;
	const char *path;			/* what it answers (the metrics' HELP) */
	struct gw_db_pool *pool;
	const struct gw_config *cfg;
	struct event *timer;		/* NEXT_UPDATE: the refresh (or retry) timer */
	int			closing;

	/* the copy (copy.body NULL: none) */
	struct gw_doc_copy copy;
	double		started_mono;	/* when the fetch that made it started */
	double		kept_mono;		/* when it was kept */
	double		expires_mono;	/* NEXT_UPDATE: nextUpdate on the monotonic clock */
	uint64_t	seq;			/* notify_seq when that fetch started */
	unsigned long period;		/* the pool's listening period when it was kept */

	uint64_t	notify_seq;		/* notifications received */
	int			fetching;
	double		fetch_started;	/* when the running fetch started */
	uint64_t	fetch_seq;		/* notify_seq then */
	TAILQ_HEAD(, waiter) waiters;

	int			failed;			/* the last fetch failed */
	double		failed_mono;	/* when */

	uint64_t	fetch_ok;
	uint64_t	fetch_error;
	uint64_t	served;
	uint64_t	unavailable;
};

static void start_fetch(struct gw_doc_cache *c);

/* NEXT_UPDATE: seconds until nextUpdate, the sooner of the two clocks. */
static double
next_update_left(const struct gw_doc_moment *m)
{
	return m->wall_left < m->mono_left ? m->wall_left : m->mono_left;
}

/* Whether the copy can be answered without asking the database; see doc_cache.h. */
int
gw_doc_current(const struct gw_doc_moment *m)
{
	if (!m->has_copy)
		return 0;
	if (m->unseen)
		return 0;
	if (m->rule == GW_DOC_MAX_AGE)
		return m->age < (m->unlistened && m->max_age > GW_DOC_UNLISTENED_MAX_AGE
						 ? GW_DOC_UNLISTENED_MAX_AGE : m->max_age);
	return next_update_left(m) > 0;
}

/* The Cache-Control max-age of the copy now, or -1; see doc_cache.h. */
long
gw_doc_servable(const struct gw_doc_moment *m)
{
	double		left;

	if (!m->has_copy)
		return -1;
	if (m->rule == GW_DOC_MAX_AGE)
	{
		/* a stale copy only while fetches fail (or we close), and not for ever */
		double		limit = m->max_age;

		if ((m->failed || m->closing) && m->stale_max > 0)
			limit = m->stale_max;
		else if ((m->failed || m->closing) && limit < GW_DOC_STALE_MAX)
			limit = GW_DOC_STALE_MAX;
		if (!(m->age < limit))
			return -1;
		left = m->max_age - m->age;
		if (m->channel && left > GW_DOC_NEXT_UPDATE_CC_MAX)
			left = GW_DOC_NEXT_UPDATE_CC_MAX;
		return left > 0 ? (long) left : 0;
	}
	left = next_update_left(m);
	if (!(left > 0))
		return -1;
	return left < GW_DOC_NEXT_UPDATE_CC_MAX ? (long) left : GW_DOC_NEXT_UPDATE_CC_MAX;
}

/* What a request gets now; see doc_cache.h. */
enum gw_doc_step
gw_doc_decide(const struct gw_doc_moment *m, long *max_age)
{
	long		ma;

	*max_age = 0;
	/* after a failed fetch, at most one attempt per --retry-after: the copy or 503 meanwhile */
	if (gw_doc_current(m) || m->closing ||
		(!m->fetching && m->failed && m->since_failure < m->retry_after))
	{
		ma = gw_doc_servable(m);
		if (ma < 0)
			return GW_DOC_UNAVAILABLE;
		*max_age = ma;
		return GW_DOC_SERVE;
	}
	return GW_DOC_WAIT;
}

/* NEXT_UPDATE: seconds until the refresh at 3/4 of the validity; see doc_cache.h. */
double
gw_doc_refresh_in(time_t this_update, time_t next_update, time_t now)
{
	return 0.75 * difftime(next_update, this_update) - difftime(now, this_update);
}

/* What the cache knows now, for the decision. */
static void
moment(const struct gw_doc_cache *c, struct gw_doc_moment *m)
{
	double		now = gw_mono_now();

	memset(m, 0, sizeof(*m));
	m->rule = c->spec->rule;
	m->has_copy = c->copy.body != NULL;
	m->max_age = c->spec->max_age != NULL ? c->spec->max_age(c->cfg) :
		(double) c->cfg->service_keys_max_age_s;
	m->stale_max = c->spec->stale_factor > 0 ? c->spec->stale_factor * m->max_age : 0;
	m->channel = c->spec->channel != NULL;
	m->failed = c->failed;
	m->since_failure = now - c->failed_mono;
	m->retry_after = (double) c->cfg->retry_after_s;
	m->fetching = c->fetching;
	m->closing = c->closing;
	if (!m->has_copy)
		return;
	m->age = now - c->started_mono;
	if (c->spec->channel != NULL)
	{
		unsigned long p = gw_db_pool_listen_period(c->pool);

		if (m->rule == GW_DOC_MAX_AGE)
		{
			/* not listening now: a short max age (GW_DOC_UNLISTENED_MAX_AGE), not a fetch per request */
			m->unlistened = p == 0;
			m->unseen = c->seq != c->notify_seq || (p != 0 && p != c->period);
		}
		else
			m->unseen = c->seq != c->notify_seq || p == 0 || p != c->period;
	}
	if (m->rule == GW_DOC_NEXT_UPDATE)
	{
		m->wall_left = difftime(c->copy.next_update, time(NULL));
		m->mono_left = c->expires_mono - now;
	}
}

/* Answer one request with the copy while it may be served, else with nothing (503). */
static void
answer(struct gw_doc_cache *c, gw_doc_cb cb, void *arg)
{
	struct gw_doc_moment m;
	long		max_age;

	moment(c, &m);
	max_age = gw_doc_servable(&m);
	if (max_age >= 0)
	{
		c->served++;
		cb(c->copy.body, c->copy.len, max_age, c->copy.etag, arg);
	}
	else
	{
		c->unavailable++;
		cb(NULL, 0, 0, NULL, arg);
	}
}

/* NEXT_UPDATE: arm the timer in secs seconds (at least one). */
static void
arm(struct gw_doc_cache *c, double secs)
{
	struct timeval tv;

	if (c->closing || c->timer == NULL)
		return;
	if (secs < 1)
		secs = 1;
	tv.tv_sec = (time_t) secs;
	tv.tv_usec = (suseconds_t) ((secs - (double) tv.tv_sec) * 1e6);
	evtimer_add(c->timer, &tv);
}

/* A log line's message: "<log_as> <what>", or "cached document <what>". */
static const char *
log_msg(const struct gw_doc_cache *c, const char *what, char *buf, size_t len)
{
	snprintf(buf, len, "%s %s", c->spec->log_as ? c->spec->log_as : "cached document", what);
	return buf;
}

/* Make copy (checked, fetched by the fetch that started at notify_seq seq) the one served. */
static void
keep(struct gw_doc_cache *c, struct gw_doc_copy *copy, uint64_t seq)
{
	free(c->copy.body);
	c->copy = *copy;
	gw_etag(c->copy.body, c->copy.len, c->copy.etag);
	c->started_mono = c->fetch_started;
	c->kept_mono = gw_mono_now();
	c->seq = seq;
	if (c->spec->channel != NULL)
		c->period = gw_db_pool_listen_period(c->pool);
	if (c->spec->rule == GW_DOC_NEXT_UPDATE)
		c->expires_mono = c->kept_mono + difftime(copy->next_update, time(NULL));
}

/* The fetch finished: keep its copy, answer the waiters it satisfies, go on if needed. */
static void
fetch_done(const struct gw_db_result *r, void *arg)
{
	struct gw_doc_cache *c = arg;
	const struct gw_doc_spec *d = c->spec;
	struct gw_doc_copy copy = {0};
	const char *why = NULL;
	uint64_t	seq = c->fetch_seq;
	char		msg[64];
	TAILQ_HEAD(, waiter) done;
	struct waiter *w,
			   *next;

	c->fetching = 0;
	if (r->status == GW_DB_OK)
		why = d->check(r->value, r->value_len, c->cfg, &copy);
	else
		why = r->reason ? r->reason : "database error";
	if (why == NULL)
	{
		json_t	   *f;

		keep(c, &copy, seq);
		c->fetch_ok++;
		c->failed = 0;
		f = json_pack("{s:s,s:I}", "document", d->name, "bytes", (json_int_t) c->copy.len);
		if (f != NULL && d->rule == GW_DOC_NEXT_UPDATE)
		{
			json_object_set_new(f, "this_update", json_integer((json_int_t) c->copy.this_update));
			json_object_set_new(f, "next_update", json_integer((json_int_t) c->copy.next_update));
		}
		/* a NEXT_UPDATE fetch is rare (a notification, 3/4 of the validity); a MAX_AGE one is not */
		gw_log(d->rule == GW_DOC_NEXT_UPDATE ? GW_LOG_INFO : GW_LOG_DEBUG,
			   log_msg(c, "fetched", msg, sizeof(msg)), f);
		if (d->rule == GW_DOC_NEXT_UPDATE)
			arm(c, gw_doc_refresh_in(c->copy.this_update, c->copy.next_update, time(NULL)));
	}
	else
	{
		struct gw_doc_moment m;

		c->fetch_error++;
		c->failed = 1;
		c->failed_mono = gw_mono_now();
		moment(c, &m);
		gw_log(r->status == GW_DB_OK ? GW_LOG_ERROR : GW_LOG_WARN,
			   log_msg(c, "fetch failed", msg, sizeof(msg)),
			   json_pack("{s:s,s:s,s:s?,s:s?,s:b}", "document", d->name, "reason", why, "sqlstate",
						 r->status == GW_DB_ERROR ? r->sqlstate : NULL,
						 /* the query takes no input: its error names the cause (a setting, a key) */
						 "message", r->status == GW_DB_ERROR ? r->message : NULL,
						 "serving_cached", gw_doc_servable(&m) >= 0));
		if (c->copy.body != NULL)
			arm(c, c->cfg->retry_after_s);
	}

	/*
	 * A waiter that arrived after a notification newer than this fetch's
	 * start waits for the next fetch, unless the fetch failed (then it gets
	 * the copy or a 503 now, rather than a retry loop) or we close.
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
	/* NEXT_UPDATE refreshes after a notification at once; MAX_AGE only for a waiter */
	if (!c->closing && !c->fetching && why == NULL &&
		(!TAILQ_EMPTY(&c->waiters) || (d->rule == GW_DOC_NEXT_UPDATE && c->seq != c->notify_seq)))
		start_fetch(c);
}

/* Start the one fetch (nothing when one runs or we close). */
static void
start_fetch(struct gw_doc_cache *c)
{
	const char *why = NULL;

	if (c->fetching || c->closing)
		return;
	c->fetching = 1;
	c->fetch_started = gw_mono_now();
	c->fetch_seq = c->notify_seq;
	if (gw_db_submit(c->pool, c->spec->sql, NULL, fetch_done, c, &why) != 0)
	{
		struct gw_db_result r = {.status = GW_DB_UNAVAILABLE, .reason = why};

		fetch_done(&r, c);
	}
}

/* A notification on the spec's channel (bc_join_crl: a revocation committed): the copy is stale. */
static void
on_notify(const char *channel, const char *extra, void *arg)
{
	struct gw_doc_cache *c = arg;
	char		msg[64];

	(void) extra;
	if (strcmp(channel, c->spec->channel) != 0)
		return;
	c->notify_seq++;
	gw_log(GW_LOG_DEBUG, log_msg(c, "stale: notified", msg, sizeof(msg)),
		   json_pack("{s:s,s:s}", "document", c->spec->name, "channel", channel));
	/* NEXT_UPDATE: refresh now, so the next request finds it done; MAX_AGE: the next request fetches */
	if (c->spec->rule == GW_DOC_NEXT_UPDATE && c->copy.body != NULL)
		start_fetch(c);
}

/* NEXT_UPDATE: the refresh timer. */
static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void) fd;
	(void) what;
	start_fetch(arg);
}

/* A cache of spec fed by pool; see doc_cache.h. */
struct gw_doc_cache *
gw_doc_cache_new(struct event_base *base, struct gw_db_pool *pool, const struct gw_config *cfg,
				 const struct gw_doc_spec *spec, const char *path)
{
	struct gw_doc_cache *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->spec = spec;
	c->path = path;
	c->pool = pool;
	c->cfg = cfg;
	TAILQ_INIT(&c->waiters);
	if (spec->rule == GW_DOC_NEXT_UPDATE)
	{
		c->timer = evtimer_new(base, timer_cb, c);
		if (c->timer == NULL)
		{
			free(c);
			return NULL;
		}
	}
	if (spec->channel != NULL && gw_db_pool_listen(pool, spec->channel, on_notify, c) != 0)
	{
		if (c->timer != NULL)
			event_free(c->timer);
		free(c);
		return NULL;
	}
	return c;
}

/* Stop fetching and refreshing; see doc_cache.h. */
void
gw_doc_cache_close(struct gw_doc_cache *c)
{
	if (c == NULL)
		return;
	c->closing = 1;
	if (c->timer != NULL)
		evtimer_del(c->timer);
}

/* Free the cache; see doc_cache.h. */
void
gw_doc_cache_free(struct gw_doc_cache *c)
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
	if (c->timer != NULL)
		event_free(c->timer);
	free(c->copy.body);
	free(c);
}

/* Answer cb with the document; see doc_cache.h. */
int
gw_doc_cache_get(struct gw_doc_cache *c, gw_doc_cb cb, void *arg)
{
	struct gw_doc_moment m;
	struct waiter *w;
	long		max_age;

	moment(c, &m);
	switch (gw_doc_decide(&m, &max_age))
	{
		case GW_DOC_SERVE:
			c->served++;
			cb(c->copy.body, c->copy.len, max_age, c->copy.etag, arg);
			return 0;
		case GW_DOC_UNAVAILABLE:
			c->unavailable++;
			cb(NULL, 0, 0, NULL, arg);
			return 0;
		case GW_DOC_WAIT:
			break;
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

/* Whether the cache has a copy and the last fetch succeeded; see doc_cache.h. */
int
gw_doc_cache_up(const struct gw_doc_cache *c)
{
	return c != NULL && c->copy.body != NULL && !c->failed;
}

/* Append the cache's metrics; see doc_cache.h. */
int
gw_doc_cache_render_metrics(const struct gw_doc_cache *c, struct evbuffer *buf)
{
	const struct gw_doc_spec *d = c->spec;
	const struct gw_doc_metric_text *t = d->metric_text;
	const char *n = d->name;
	const char *a = t && t->answers_name ? t->answers_name : "answers";
	char		fetches[128],
				answers[128],
				age[128];
	int			rc = 0;

	snprintf(fetches, sizeof(fetches), "Fetches of the %s document from the database, by result.", n);
	snprintf(answers, sizeof(answers), "GET %s answered from the cache, by result.", c->path);
	snprintf(age, sizeof(age), "Age of the cached %s document.", n);
	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_%s_fetches_total %s\n"
							  "# TYPE bc_gateway_%s_fetches_total counter\n"
							  "bc_gateway_%s_fetches_total{result=\"ok\"} %llu\n"
							  "bc_gateway_%s_fetches_total{result=\"error\"} %llu\n",
							  n, t && t->fetches ? t->fetches : fetches, n,
							  n, (unsigned long long) c->fetch_ok,
							  n, (unsigned long long) c->fetch_error) < 0;
	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_%s_%s_total %s\n"
							  "# TYPE bc_gateway_%s_%s_total counter\n"
							  "bc_gateway_%s_%s_total{result=\"served\"} %llu\n"
							  "bc_gateway_%s_%s_total{result=\"unavailable\"} %llu\n",
							  n, a, t && t->answers ? t->answers : answers, n, a,
							  n, a, (unsigned long long) c->served,
							  n, a, (unsigned long long) c->unavailable) < 0;
	if (t && t->up)
		rc |= evbuffer_add_printf(buf,
								  "# HELP bc_gateway_%s_up %s\n"
								  "# TYPE bc_gateway_%s_up gauge\n"
								  "bc_gateway_%s_up %d\n",
								  n, t->up, n, n, gw_doc_cache_up(c)) < 0;
	if (c->copy.body == NULL)
		return rc ? -1 : 0;

	/* the age the rule counts: MAX_AGE from the fetch's start, NEXT_UPDATE from when it was kept */
	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_%s_age_seconds %s\n"
							  "# TYPE bc_gateway_%s_age_seconds gauge\n"
							  "bc_gateway_%s_age_seconds %.3f\n",
							  n, t && t->age ? t->age : age, n, n,
							  gw_mono_now() - (d->rule == GW_DOC_MAX_AGE ? c->started_mono : c->kept_mono)) < 0;
	if (d->rule == GW_DOC_NEXT_UPDATE && t && t->next_update)
	{
		struct gw_doc_moment m;

		moment(c, &m);
		rc |= evbuffer_add_printf(buf,
								  "# HELP bc_gateway_%s_next_update_seconds %s\n"
								  "# TYPE bc_gateway_%s_next_update_seconds gauge\n"
								  "bc_gateway_%s_next_update_seconds %.0f\n",
								  n, t->next_update, n, n, next_update_left(&m)) < 0;
	}
	if (t && t->bytes)
		rc |= evbuffer_add_printf(buf,
								  "# HELP bc_gateway_%s_bytes %s\n"
								  "# TYPE bc_gateway_%s_bytes gauge\n"
								  "bc_gateway_%s_bytes %zu\n",
								  n, t->bytes, n, n, c->copy.len) < 0;
	return rc ? -1 : 0;
}
