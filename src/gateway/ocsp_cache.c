/*
 * ocsp_cache.c: bc_join.ocsp_response()'s answers, checked, kept per CertID.
 *
 * Every OCSP call of the gateway goes through here: gw_ocsp_call for a
 * request that is not cached (a nonce, several CertIDs), gw_ocsp_cache_get
 * for a cacheable one (one CertID, no nonce).  The database's answer is
 * decoded (PQunescapeBytea) and parsed with OpenSSL (d2i_OCSP_RESPONSE): an
 * answer that is not one DER OCSPResponse becomes an unsigned internalError,
 * a database failure an unsigned tryLater (SQLSTATEs the relay answers 503)
 * or internalError (any other).
 *
 * The cache.  Key: the CertID's DER (bc_ocsp_certid.der, as the request
 * carries it: a SHA-1 and a SHA-256 CertID of the same certificate are two
 * keys).  Value: the answer's DER when it is `successful` with exactly one
 * SingleResponse whose CertID is the key and whose nextUpdate is ahead.
 * Current: the document cache's NEXT_UPDATE rule (gw_doc_current), fed with
 * the answer's nextUpdate (wall clock and monotonic clock from the fetch),
 * whether a NOTIFY bc_join_crl arrived since its fetch started, and whether
 * the pool has listened without a gap since then.  A notification (any
 * revocation commits one) drops every kept answer at once: the next request
 * for any CertID calls the database, so a revocation is answered `revoked` as
 * soon as it commits.  One call in flight per key: requests for a key whose
 * call is running wait for it; one that arrived after a notification newer
 * than the call's start waits for the next call, started when that one ends.
 * Bounded: at most --ocsp-cache-entries keys and --ocsp-cache-bytes bytes of
 * answers; the least recently used key whose call is not in flight goes
 * first; a request the table cannot take calls the database uncached.
 */
#include "ocsp_cache.h"
#include "clock.h"
#include "config.h"
#include "db_pool.h"
#include "log.h"
#include "relay.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/random.h>

#include <event2/buffer.h>
#include <libpq-fe.h>
#include <openssl/ocsp.h>
#include <openssl/x509.h>

struct waiter
{
	TAILQ_ENTRY(waiter) link;
	gw_ocsp_cb	cb;
	void	   *arg;
	const char *param;			/* its request (bytea hex text) */
	uint64_t	seq;			/* notifications seen when it arrived */
};

struct entry
{
	struct gw_ocsp_cache *cache;
	struct entry *chain;		/* next in the same hash bucket */
	TAILQ_ENTRY(entry) lru;		/* head: most recently used */
	uint32_t	hash;
	unsigned char key[256];
	size_t		key_len;

	/* the kept answer (der NULL: none) */
	unsigned char *der;
	size_t		len;
	time_t		this_update;
	time_t		next_update;
	double		expires_mono;	/* nextUpdate on the monotonic clock */
	uint64_t	seq;			/* notify_seq when its fetch started */
	unsigned long period;		/* the pool's listening period then */
	char		etag[GW_ETAG_LEN];

	/* the call in flight */
	int			fetching;
	uint64_t	fetch_seq;
	unsigned long fetch_period;
	TAILQ_HEAD(, waiter) waiters;
};

struct gw_ocsp_cache
{
	struct gw_db_pool *pool;
	const struct gw_config *cfg;
	int			closing;
	uint32_t	seed;
	uint32_t	nbuckets;
	struct entry **buckets;
	TAILQ_HEAD(entry_lru, entry) lru;
	size_t		nentries;
	size_t		bytes;			/* of kept answers */
	uint64_t	notify_seq;

	uint64_t	count[GW_OCSP_COUNT_N];
	uint64_t	calls_ok;
	uint64_t	calls_error;
	uint64_t	evictions;
	uint64_t	invalidations;
};

/* A call not through the cache: its request's callback. */
struct direct
{
	gw_ocsp_cb	cb;
	void	   *arg;
	struct gw_ocsp_cache *cache;
};

static void start_fetch(struct entry *e);
static void on_notify(const char *channel, const char *extra, void *arg);

/* What a DER OCSPResponse is; see ocsp_cache.h. */
void
gw_ocsp_examine_der(const unsigned char *der, size_t len, const unsigned char *key,
					size_t key_len, time_t now, struct gw_ocsp_answer *a)
{
	const unsigned char *p = der;
	OCSP_RESPONSE *resp;
	OCSP_BASICRESP *bs = NULL;

	a->der = der;
	a->len = len;
	a->cacheable = 0;
	resp = len > 0 && len <= GW_OCSP_RESPONSE_MAX ? d2i_OCSP_RESPONSE(NULL, &p, (long) len) : NULL;
	if (resp == NULL || p != der + len)
	{
		a->der = NULL;
		a->len = 0;
		a->status = GW_OCSP_INTERNAL_ERROR;
		a->reason = "the database's answer is not one DER OCSPResponse";
		goto out;
	}
	a->status = OCSP_response_status(resp);
	if (a->status != OCSP_RESPONSE_STATUS_SUCCESSFUL || key == NULL)
		goto out;
	bs = OCSP_response_get1_basic(resp);
	if (bs != NULL && OCSP_resp_count(bs) == 1)
	{
		OCSP_SINGLERESP *single = OCSP_resp_get0(bs, 0);
		const OCSP_CERTID *cid = OCSP_SINGLERESP_get0_id(single);
		unsigned char buf[256],
				   *q = buf;
		int			n = cid ? i2d_OCSP_CERTID((OCSP_CERTID *) cid, NULL) : -1;
		int			reason;
		ASN1_GENERALIZEDTIME *rev = NULL,
				   *tu = NULL,
				   *nu = NULL;

		if (n <= 0 || (size_t) n != key_len || n > (int) sizeof(buf) ||
			i2d_OCSP_CERTID((OCSP_CERTID *) cid, &q) != n || memcmp(buf, key, key_len) != 0)
			goto out;
		if (OCSP_single_get0_status(single, &reason, &rev, &tu, &nu) < 0)
			goto out;
		a->this_update = gw_asn1_epoch(tu);
		a->next_update = gw_asn1_epoch(nu);
		if (a->this_update == (time_t) -1 || a->next_update == (time_t) -1 ||
			difftime(a->next_update, now) <= 0)
			goto out;
		a->cacheable = 1;
		a->max_age = difftime(a->next_update, now) < GW_DOC_NEXT_UPDATE_CC_MAX ?
			(long) difftime(a->next_update, now) : GW_DOC_NEXT_UPDATE_CC_MAX;
	}
out:
	OCSP_BASICRESP_free(bs);
	OCSP_RESPONSE_free(resp);
}

/* What a database answer is; see ocsp_cache.h. */
void
gw_ocsp_examine(const struct gw_db_result *r, const unsigned char *key, size_t key_len,
				time_t now, struct gw_ocsp_answer *a, unsigned char **owned)
{
	unsigned char *der;
	size_t		len = 0;
	int			outcome;

	memset(a, 0, sizeof(*a));
	*owned = NULL;
	switch (r->status)
	{
		case GW_DB_OK:
			break;
		case GW_DB_ERROR:
			a->sqlstate = r->sqlstate;
			a->reason = "bc_join.ocsp_response() failed";
			a->status = gw_http_status_for_sqlstate(r->sqlstate, &outcome) == 503 ?
				GW_OCSP_TRY_LATER : GW_OCSP_INTERNAL_ERROR;
			return;
		default:
			a->reason = r->reason ? r->reason : "database unavailable";
			a->status = GW_OCSP_TRY_LATER;
			return;
	}
	a->status = GW_OCSP_INTERNAL_ERROR;
	if (r->value == NULL)
	{
		a->reason = "bc_join.ocsp_response() returned NULL";
		return;
	}
	/* hex form: "\x" and two digits a byte; refuse before decoding anything big */
	if (r->value_len > 2 + 2 * (size_t) GW_OCSP_RESPONSE_MAX)
	{
		a->reason = "the database's OCSP answer is too large";
		return;
	}
	der = PQunescapeBytea((const unsigned char *) r->value, &len);
	if (der == NULL)
	{
		a->reason = "out of memory";
		return;
	}
	*owned = der;
	gw_ocsp_examine_der(der, len, key, key_len, now, a);
}

/* The decision for one key; see ocsp_cache.h. */
enum gw_ocsp_step
gw_ocsp_decide(const struct gw_doc_moment *m, int fetching)
{
	if (gw_doc_current(m))
		return GW_OCSP_HIT;
	return fetching ? GW_OCSP_WAIT : GW_OCSP_FETCH;
}

/* Seeded FNV-1a over a key. */
static uint32_t
hash_key(const struct gw_ocsp_cache *c, const unsigned char *k, size_t n)
{
	uint32_t	h = 2166136261u ^ c->seed;

	for (size_t i = 0; i < n; i++)
		h = (h ^ k[i]) * 16777619u;
	return h;
}

/* A cache; see ocsp_cache.h. */
struct gw_ocsp_cache *
gw_ocsp_cache_new(struct gw_db_pool *pool, const struct gw_config *cfg)
{
	struct gw_ocsp_cache *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->pool = pool;
	c->cfg = cfg;
	TAILQ_INIT(&c->lru);
	c->nbuckets = 16;
	while (c->nbuckets < (uint32_t) cfg->ocsp_cache_entries && c->nbuckets < (1u << 24))
		c->nbuckets <<= 1;
	c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
	if (c->buckets == NULL || gw_db_pool_listen(pool, GW_OCSP_CHANNEL, on_notify, c) != 0)
	{
		free(c->buckets);
		free(c);
		return NULL;
	}
	if (getrandom(&c->seed, sizeof(c->seed), 0) != (ssize_t) sizeof(c->seed))
		c->seed = 0x9e3779b9u;
	return c;
}

/* Drop e's kept answer. */
static void
drop_copy(struct entry *e)
{
	if (e->der == NULL)
		return;
	e->cache->bytes -= e->len;
	free(e->der);
	e->der = NULL;
	e->len = 0;
}

/* Unlink and free e (no call in flight). */
static void
remove_entry(struct entry *e)
{
	struct gw_ocsp_cache *c = e->cache;
	struct entry **pp = &c->buckets[e->hash & (c->nbuckets - 1)];

	while (*pp != NULL && *pp != e)
		pp = &(*pp)->chain;
	if (*pp == e)
		*pp = e->chain;
	TAILQ_REMOVE(&c->lru, e, lru);
	drop_copy(e);
	c->nentries--;
	free(e);
}

/* Evict least recently used idle entries until there is room for one more entry (extra 1) and need bytes; 0 when there is. */
static int
make_room(struct gw_ocsp_cache *c, int extra, size_t need, const struct entry *keep)
{
	struct entry *e = TAILQ_LAST(&c->lru, entry_lru),
			   *prev;

	/* an answer larger than the whole budget: evict nothing for it */
	if (need > c->cfg->ocsp_cache_bytes)
		return -1;
	while ((c->nentries + (size_t) extra > (size_t) c->cfg->ocsp_cache_entries ||
			c->bytes + need > c->cfg->ocsp_cache_bytes) && e != NULL)
	{
		prev = TAILQ_PREV(e, entry_lru, lru);
		if (e != keep && !e->fetching)
		{
			if (e->der != NULL)
				c->evictions++;
			remove_entry(e);
		}
		e = prev;
	}
	return c->nentries + (size_t) extra <= (size_t) c->cfg->ocsp_cache_entries &&
		c->bytes + need <= c->cfg->ocsp_cache_bytes ? 0 : -1;
}

/* The document cache's NEXT_UPDATE moment of e's kept answer now. */
static void
moment(const struct entry *e, struct gw_doc_moment *m)
{
	unsigned long p = gw_db_pool_listen_period(e->cache->pool);

	memset(m, 0, sizeof(*m));
	m->rule = GW_DOC_NEXT_UPDATE;
	m->has_copy = e->der != NULL;
	m->fetching = e->fetching;
	m->closing = e->cache->closing;
	if (!m->has_copy)
		return;
	m->wall_left = difftime(e->next_update, time(NULL));
	m->mono_left = e->expires_mono - gw_mono_now();
	m->unseen = e->seq != e->cache->notify_seq || p == 0 || p != e->period;
}

/* Answer one waiter from e's kept answer. */
static void
answer_copy(struct entry *e, gw_ocsp_cb cb, void *arg)
{
	struct gw_doc_moment m;
	struct gw_ocsp_answer a = {0};

	moment(e, &m);
	a.der = e->der;
	a.len = e->len;
	a.status = OCSP_RESPONSE_STATUS_SUCCESSFUL;
	a.cacheable = 1;
	a.this_update = e->this_update;
	a.next_update = e->next_update;
	a.max_age = gw_doc_servable(&m);
	if (a.max_age < 0)
		a.max_age = 0;
	a.etag = e->etag;
	a.hit = 1;
	cb(&a, arg);
}

/* Keep a checked answer for e, fetched by the call that started at (seq, period). */
static void
keep(struct entry *e, const struct gw_ocsp_answer *a)
{
	struct gw_ocsp_cache *c = e->cache;
	unsigned long p = gw_db_pool_listen_period(c->pool);

	drop_copy(e);
	/* a notification or a gap in listening during the call: the answer may predate a revocation */
	if (c->closing || !a->cacheable || e->fetch_seq != c->notify_seq || p == 0 ||
		p != e->fetch_period || make_room(c, 0, a->len, e) != 0)
		return;
	e->der = malloc(a->len);
	if (e->der == NULL)
		return;
	memcpy(e->der, a->der, a->len);
	e->len = a->len;
	c->bytes += a->len;
	e->this_update = a->this_update;
	e->next_update = a->next_update;
	e->expires_mono = gw_mono_now() + difftime(a->next_update, time(NULL));
	e->seq = e->fetch_seq;
	e->period = e->fetch_period;
	gw_etag(e->der, e->len, e->etag);
}

/* The call for e finished: keep its answer, answer the waiters it satisfies, go on if needed. */
static void
fetch_done(const struct gw_db_result *r, void *arg)
{
	struct entry *e = arg;
	struct gw_ocsp_cache *c = e->cache;
	struct gw_ocsp_answer a;
	unsigned char *owned = NULL;
	int			failed;
	uint64_t	seq = e->fetch_seq;
	TAILQ_HEAD(, waiter) done;
	struct waiter *w,
			   *next;

	e->fetching = 0;
	gw_ocsp_examine(r, e->key, e->key_len, time(NULL), &a, &owned);
	failed = a.der == NULL;
	if (failed)
		c->calls_error++;
	else
		c->calls_ok++;
	keep(e, &a);
	if (e->der != NULL)
		a.etag = e->etag;

	/* the waiters that arrived before a notification newer than this call's start, or all on failure */
	TAILQ_INIT(&done);
	for (w = TAILQ_FIRST(&e->waiters); w != NULL; w = next)
	{
		next = TAILQ_NEXT(w, link);
		if (w->seq <= seq || failed || c->closing)
		{
			TAILQ_REMOVE(&e->waiters, w, link);
			TAILQ_INSERT_TAIL(&done, w, link);
		}
	}
	while ((w = TAILQ_FIRST(&done)) != NULL)
	{
		char		etag[GW_ETAG_LEN];

		TAILQ_REMOVE(&done, w, link);
		if (a.cacheable && a.etag == NULL)
		{
			gw_etag(a.der, a.len, etag);
			a.etag = etag;
		}
		w->cb(&a, w->arg);
		if (a.etag == etag)
			a.etag = NULL;
		free(w);
	}
	PQfreemem(owned);
	if (!TAILQ_EMPTY(&e->waiters))
		start_fetch(e);
	else if (e->der == NULL)
		remove_entry(e);
}

/* Start the one call for e with its first waiter's request. */
static void
start_fetch(struct entry *e)
{
	struct gw_ocsp_cache *c = e->cache;
	struct waiter *w = TAILQ_FIRST(&e->waiters);
	const char *why = NULL;

	e->fetching = 1;
	e->fetch_seq = c->notify_seq;
	e->fetch_period = gw_db_pool_listen_period(c->pool);
	if (gw_db_submit(c->pool, GW_OCSP_SQL, w->param, fetch_done, e, &why) != 0)
	{
		struct gw_db_result r = {.status = GW_DB_UNAVAILABLE, .reason = why};

		fetch_done(&r, e);
	}
}

/* A notification (a revocation committed): every kept answer is stale; drop them. */
static void
on_notify(const char *channel, const char *extra, void *arg)
{
	struct gw_ocsp_cache *c = arg;
	struct entry *e,
			   *next;

	(void) extra;
	if (strcmp(channel, GW_OCSP_CHANNEL) != 0)
		return;
	c->notify_seq++;
	c->invalidations++;
	for (e = TAILQ_FIRST(&c->lru); e != NULL; e = next)
	{
		next = TAILQ_NEXT(e, lru);
		if (e->fetching)
			drop_copy(e);
		else
			remove_entry(e);
	}
	gw_log(GW_LOG_DEBUG, "ocsp cache: notified, every answer dropped",
		   json_pack("{s:s,s:I}", "channel", channel, "entries", (json_int_t) c->nentries));
}

/* Stop keeping answers; see ocsp_cache.h. */
void
gw_ocsp_cache_close(struct gw_ocsp_cache *c)
{
	if (c != NULL)
		c->closing = 1;
}

/* Free the cache; see ocsp_cache.h. */
void
gw_ocsp_cache_free(struct gw_ocsp_cache *c)
{
	struct entry *e;

	if (c == NULL)
		return;
	c->closing = 1;
	while ((e = TAILQ_FIRST(&c->lru)) != NULL)
	{
		struct waiter *w;

		/* the pool is gone: nothing is in flight any more, but be safe */
		while ((w = TAILQ_FIRST(&e->waiters)) != NULL)
		{
			struct gw_ocsp_answer a = {.status = GW_OCSP_TRY_LATER, .reason = "shutting down"};

			TAILQ_REMOVE(&e->waiters, w, link);
			w->cb(&a, w->arg);
			free(w);
		}
		e->fetching = 0;
		remove_entry(e);
	}
	free(c->buckets);
	free(c);
}

/* The entry of key, or NULL. */
static struct entry *
lookup(struct gw_ocsp_cache *c, const unsigned char *key, size_t key_len, uint32_t h)
{
	for (struct entry *e = c->buckets[h & (c->nbuckets - 1)]; e != NULL; e = e->chain)
		if (e->hash == h && e->key_len == key_len && memcmp(e->key, key, key_len) == 0)
			return e;
	return NULL;
}

/* Answer cb for a cacheable request; see ocsp_cache.h. */
int
gw_ocsp_cache_get(struct gw_ocsp_cache *c, const unsigned char *key, size_t key_len,
				  const char *param, gw_ocsp_cb cb, void *arg)
{
	uint32_t	h;
	struct entry *e;
	struct waiter *w;
	struct gw_doc_moment m;
	enum gw_ocsp_step step;

	if (c == NULL || c->closing || c->cfg->ocsp_cache_entries <= 0 || key_len == 0 ||
		key_len > sizeof(e->key))
		return -1;
	h = hash_key(c, key, key_len);
	e = lookup(c, key, key_len, h);
	if (e == NULL)
	{
		if (make_room(c, 1, 0, NULL) != 0 || (e = calloc(1, sizeof(*e))) == NULL)
			return -1;
		e->cache = c;
		e->hash = h;
		memcpy(e->key, key, key_len);
		e->key_len = key_len;
		TAILQ_INIT(&e->waiters);
		e->chain = c->buckets[h & (c->nbuckets - 1)];
		c->buckets[h & (c->nbuckets - 1)] = e;
		TAILQ_INSERT_HEAD(&c->lru, e, lru);
		c->nentries++;
	}
	else
	{
		TAILQ_REMOVE(&c->lru, e, lru);
		TAILQ_INSERT_HEAD(&c->lru, e, lru);
	}
	moment(e, &m);
	step = gw_ocsp_decide(&m, e->fetching);
	if (step == GW_OCSP_HIT)
	{
		c->count[GW_OCSP_COUNT_HIT]++;
		answer_copy(e, cb, arg);
		return 0;
	}
	w = calloc(1, sizeof(*w));
	if (w == NULL)
	{
		if (!e->fetching && e->der == NULL)
			remove_entry(e);
		return -1;
	}
	w->cb = cb;
	w->arg = arg;
	w->param = param;
	w->seq = c->notify_seq;
	TAILQ_INSERT_TAIL(&e->waiters, w, link);
	if (step == GW_OCSP_WAIT)
	{
		c->count[GW_OCSP_COUNT_SHARED]++;
		return 0;
	}
	c->count[GW_OCSP_COUNT_MISS]++;
	start_fetch(e);
	return 0;
}

/* A direct call finished. */
static void
direct_done(const struct gw_db_result *r, void *arg)
{
	struct direct *d = arg;
	struct gw_ocsp_answer a;
	unsigned char *owned = NULL;

	gw_ocsp_examine(r, NULL, 0, time(NULL), &a, &owned);
	if (a.der == NULL)
		d->cache->calls_error++;
	else
		d->cache->calls_ok++;
	d->cb(&a, d->arg);
	PQfreemem(owned);
	free(d);
}

/* Call the database for a request that is not cached; see ocsp_cache.h. */
void
gw_ocsp_call(struct gw_ocsp_cache *c, const char *param, gw_ocsp_cb cb, void *arg)
{
	struct direct *d = calloc(1, sizeof(*d));
	const char *why = NULL;

	if (d == NULL)
	{
		struct gw_ocsp_answer a = {.status = GW_OCSP_INTERNAL_ERROR, .reason = "out of memory"};

		cb(&a, arg);
		return;
	}
	d->cb = cb;
	d->arg = arg;
	d->cache = c;
	if (gw_db_submit(c->pool, GW_OCSP_SQL, param, direct_done, d, &why) != 0)
	{
		struct gw_db_result r = {.status = GW_DB_UNAVAILABLE, .reason = why};

		direct_done(&r, d);
	}
}

/* Count a request; see ocsp_cache.h. */
void
gw_ocsp_cache_count(struct gw_ocsp_cache *c, enum gw_ocsp_count what)
{
	if (c != NULL && what >= 0 && what < GW_OCSP_COUNT_N)
		c->count[what]++;
}

/* Append the cache's metrics; see ocsp_cache.h. */
int
gw_ocsp_cache_render_metrics(const struct gw_ocsp_cache *c, struct evbuffer *buf)
{
	static const char *const names[GW_OCSP_COUNT_N] = {
		"hit", "miss", "shared", "uncacheable", "bypass", "malformed"
	};
	int			rc = 0;

	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_ocsp_cache_total OCSP requests by what the cache did: hit (no database call), miss (a call for the CertID), shared (waited for a call in flight), uncacheable (a nonce or several CertIDs), bypass (the table could not take it), malformed (answered by the gateway).\n"
							  "# TYPE bc_gateway_ocsp_cache_total counter\n") < 0;
	for (int i = 0; i < GW_OCSP_COUNT_N; i++)
		rc |= evbuffer_add_printf(buf, "bc_gateway_ocsp_cache_total{result=\"%s\"} %llu\n",
								  names[i], (unsigned long long) c->count[i]) < 0;
	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_ocsp_calls_total Calls of bc_join.ocsp_response(), by result (error: no OCSP answer from the database).\n"
							  "# TYPE bc_gateway_ocsp_calls_total counter\n"
							  "bc_gateway_ocsp_calls_total{result=\"ok\"} %llu\n"
							  "bc_gateway_ocsp_calls_total{result=\"error\"} %llu\n"
							  "# HELP bc_gateway_ocsp_cache_entries CertIDs in the OCSP cache (with an answer or a call in flight).\n"
							  "# TYPE bc_gateway_ocsp_cache_entries gauge\n"
							  "bc_gateway_ocsp_cache_entries %zu\n"
							  "# HELP bc_gateway_ocsp_cache_bytes Bytes of OCSP answers kept.\n"
							  "# TYPE bc_gateway_ocsp_cache_bytes gauge\n"
							  "bc_gateway_ocsp_cache_bytes %zu\n"
							  "# HELP bc_gateway_ocsp_cache_evictions_total Kept OCSP answers evicted for room (least recently used).\n"
							  "# TYPE bc_gateway_ocsp_cache_evictions_total counter\n"
							  "bc_gateway_ocsp_cache_evictions_total %llu\n"
							  "# HELP bc_gateway_ocsp_cache_invalidations_total Notifications on bc_join_crl that dropped every kept OCSP answer.\n"
							  "# TYPE bc_gateway_ocsp_cache_invalidations_total counter\n"
							  "bc_gateway_ocsp_cache_invalidations_total %llu\n",
							  (unsigned long long) c->calls_ok, (unsigned long long) c->calls_error,
							  c->nentries, c->bytes, (unsigned long long) c->evictions,
							  (unsigned long long) c->invalidations) < 0;
	return rc ? -1 : 0;
}
