/*
 * jwt_svids.c: the JWT-SVIDs bcd's FetchJWTSVID answers (docs/agent.md,
 * "JWT-SVIDs: caching, limits, errors"; docs/security.md).
 *
 * Fetching.  A JWT-SVID is a kind of provisioning of the provisioner
 * (bcd_provisioner_ask; core/provision_jwt.c): queued in its FIFO, run by
 * its --max-provisioning workers and their HTTPS clients, so however many
 * calls come no thread and no gateway connection is added for them.
 *
 * The key.  (session, context, audiences sorted): the caller's rule names
 * the session and context, and they and the node decide the SPIFFE ID, so
 * the key is SPIRE's (SPIFFE ID, audiences) in this agent's terms.  One
 * entry per key holds the last JWT-SVID, whether a fetch is in flight, and
 * the calls waiting for it: a call for a key whose fetch is in flight waits
 * on it, and every waiter is answered with its one result.
 *
 * The cache.  A JWT-SVID is answered again until half its life is over
 * (its lifetime is the service's expiresAt - issuedAt, counted on bcd's
 * monotonic clock from its arrival), as SPIRE's agent does; then the next
 * call fetches a new one.  A cached JWT-SVID of another node (bcd joined
 * again as another node) is dropped.  A fetch that fails is remembered for
 * a backoff (1 s doubling to 30 s): calls meanwhile get its answer at once,
 * or the previous JWT-SVID while it is still valid (SPIRE's agent does the
 * same), and no new fetch.
 *
 * Bounds.  A fetch started for a call costs its uid a token of its bucket
 * (JWT_RATE_BURST at once, JWT_RATE_PER_S a second after); answers from
 * the cache and calls joining a fetch in flight cost nothing.  At most
 * JWT_FETCHES_MAX fetches in flight, JWT_WAITERS_MAX calls waiting
 * (JWT_WAITERS_PER_UID of one uid), JWT_ENTRIES_MAX keys kept (the least
 * recently used idle one makes room), JWT_UIDS_MAX uids' buckets.  Past any
 * of them: RESOURCE_EXHAUSTED at once, counted and logged as a summary at
 * most every JWT_LOG_INTERVAL seconds.
 *
 * Locking.  Every function runs under the Workload API's mutex; the
 * provisioning call-back (the provisioner's thread) takes it to store
 * a result, and the completion-queue thread answers the waiters on its next
 * tick (bcd_wl_jwt_svids_answer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/node_credential.h"
#include "workload/jwt_svids.h"

/* Keys kept, fetches in flight, calls waiting (in all and of one uid), uids with a bucket. */
#define JWT_ENTRIES_MAX 1024
#define JWT_FETCHES_MAX 64
#define JWT_WAITERS_MAX 1024
#define JWT_WAITERS_PER_UID 256
#define JWT_UIDS_MAX 1024
/* The fetches one uid may start: a burst, then a rate per second. */
#define JWT_RATE_BURST 20.0
#define JWT_RATE_PER_S 2.0
/* Backoff after a failed fetch, in seconds. */
#define RETRY_MIN 1.0
#define RETRY_MAX 30.0
/* Seconds between two summaries of calls answered RESOURCE_EXHAUSTED. */
#define JWT_LOG_INTERVAL 10.0

/* A call waiting for a fetch. */
typedef struct waiter
{
	void	   *w;				/* the Workload API's call */
	uid_t		uid;
	char	   *want_id;		/* its spiffe_id, "" for any */
	struct waiter *next;
} waiter;

struct bcd_wl_jwt_svids;

/* One key: its last JWT-SVID, its fetch, its waiters. */
typedef struct entry
{
	struct bcd_wl_jwt_svids *c;
	char		session[BC_SELECTOR_MAX + 1];
	char		context[BC_SELECTOR_MAX + 1];
	bcd_audiences aud;
	char		spiffe_id[512];
	char	   *token;			/* the last JWT-SVID (a bearer token: wiped), or NULL */
	double		fresh_until;	/* monotonic: answered from the cache until then */
	double		valid_until;	/* monotonic: the token expires then */
	double		last_used;
	int			in_flight;		/* a fetch asked of the workers */
	int			done;			/* a fetch ended: waiters to answer */
	grpc_status_code fail_code; /* the last fetch's failure (GRPC_STATUS_OK: none) */
	char		fail_msg[512];
	double		retry_at;		/* monotonic: no new fetch before */
	double		backoff;
	waiter	   *waiters;
	int			n_waiters;
	struct entry *next;
} entry;

/* A uid's token bucket and its waiting calls. */
typedef struct bucket
{
	uid_t		uid;
	double		tokens;
	double		at;				/* monotonic: tokens counted then */
	int			waiters;
} bucket;

struct bcd_wl_jwt_svids
{
	pthread_mutex_t *mu;
	bcd_provisioner *prov;
	entry	   *entries;
	int			n_entries;
	int			n_fetches;
	int			n_waiters;
	int			stopping;
	bucket		buckets[JWT_UIDS_MAX];
	int			n_buckets;
	/* calls answered RESOURCE_EXHAUSTED since the last summary */
	unsigned long refused;
	double		refused_logged;
	char		refused_why[256];
};

/* Wipe and free a token. */
static void
token_free(char *t)
{
	if (t != NULL)
		bc_free_secret(t, strlen(t));
}

/* The JWT-SVIDs of a Workload API whose mutex is mu, fetched by prov's workers. */
bcd_wl_jwt_svids *
bcd_wl_jwt_svids_new(pthread_mutex_t *mu, bcd_provisioner *prov)
{
	bcd_wl_jwt_svids *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->mu = mu;
	c->prov = prov;
	c->refused_logged = bcd_now_s() - JWT_LOG_INTERVAL;
	return c;
}

/* Free an entry and its token (it has no waiter). */
static void
entry_free(entry *e)
{
	token_free(e->token);
	free(e);
}

/* Free c and every entry (no fetch in flight any more). */
void
bcd_wl_jwt_svids_free(bcd_wl_jwt_svids *c)
{
	entry	   *e;

	if (c == NULL)
		return;
	while ((e = c->entries) != NULL)
	{
		c->entries = e->next;
		while (e->waiters != NULL)
		{
			waiter	   *x = e->waiters;

			e->waiters = x->next;
			free(x->want_id);
			free(x);
		}
		entry_free(e);
	}
	free(c);
}

/* The entry of (session, context, aud), or NULL. */
static entry *
entry_find(bcd_wl_jwt_svids *c, const char *session, const char *context,
		   const bcd_audiences *aud)
{
	for (entry *e = c->entries; e != NULL; e = e->next)
		if (strcmp(e->session, session) == 0 && strcmp(e->context, context) == 0 &&
			bcd_audiences_equal(&e->aud, aud))
			return e;
	return NULL;
}

/* Take e out of c's list and free it. */
static void
entry_drop(bcd_wl_jwt_svids *c, entry *e)
{
	for (entry **pp = &c->entries; *pp != NULL; pp = &(*pp)->next)
		if (*pp == e)
		{
			*pp = e->next;
			break;
		}
	c->n_entries--;
	entry_free(e);
}

/*
 * A new entry for (session, context, aud); at JWT_ENTRIES_MAX the least
 * recently used idle one (no fetch, no waiter) makes room.  NULL when none
 * can (or out of memory).
 */
static entry *
entry_new(bcd_wl_jwt_svids *c, const char *session, const char *context,
		  const bcd_audiences *aud)
{
	entry	   *e;

	if (c->n_entries >= JWT_ENTRIES_MAX)
	{
		entry	   *victim = NULL;

		for (e = c->entries; e != NULL; e = e->next)
			if (!e->in_flight && !e->done && e->waiters == NULL &&
				(victim == NULL || e->last_used < victim->last_used))
				victim = e;
		if (victim == NULL)
			return NULL;
		entry_drop(c, victim);
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return NULL;
	e->c = c;
	snprintf(e->session, sizeof(e->session), "%s", session);
	snprintf(e->context, sizeof(e->context), "%s", context);
	e->aud = *aud;
	e->backoff = RETRY_MIN;
	e->next = c->entries;
	c->entries = e;
	c->n_entries++;
	return e;
}

/*
 * The bucket of uid, refilled to now; a new one (full) for a uid without
 * one, in a free slot or one whose uid is idle (no waiter, full again);
 * NULL when every slot is busy.
 */
static bucket *
bucket_of(bcd_wl_jwt_svids *c, uid_t uid, double now)
{
	bucket	   *b = NULL;
	int			i;

	for (i = 0; i < c->n_buckets; i++)
		if (c->buckets[i].uid == uid)
		{
			b = &c->buckets[i];
			b->tokens += (now - b->at) * JWT_RATE_PER_S;
			if (b->tokens > JWT_RATE_BURST)
				b->tokens = JWT_RATE_BURST;
			b->at = now;
			return b;
		}
	if (c->n_buckets < JWT_UIDS_MAX)
		b = &c->buckets[c->n_buckets++];
	for (i = 0; b == NULL && i < c->n_buckets; i++)
		if (c->buckets[i].waiters == 0 &&
			c->buckets[i].tokens + (now - c->buckets[i].at) * JWT_RATE_PER_S >= JWT_RATE_BURST)
			b = &c->buckets[i];
	if (b == NULL)
		return NULL;
	b->uid = uid;
	b->tokens = JWT_RATE_BURST;
	b->at = now;
	b->waiters = 0;
	return b;
}

/* A call refused RESOURCE_EXHAUSTED for why (msg): counted, and logged as a summary now and then. */
static void
exhausted(bcd_wl_jwt_svids *c, uid_t uid, double now, grpc_status_code *code, char *msg,
		  size_t msglen, const char *why)
{
	*code = GRPC_STATUS_RESOURCE_EXHAUSTED;
	snprintf(msg, msglen, "%s", why);
	c->refused++;
	snprintf(c->refused_why, sizeof(c->refused_why), "uid %ld: %s", (long) uid, why);
	if (now - c->refused_logged >= JWT_LOG_INTERVAL)
	{
		bcd_log("workload api: FetchJWTSVID: %lu call(s) answered RESOURCE_EXHAUSTED in the "
				"last %.0f s (the last: %s)", c->refused, now - c->refused_logged,
				c->refused_why);
		c->refused = 0;
		c->refused_logged = now;
	}
}

/* 1 when spiffe_id is a session of the node whose SPIFFE ID the snapshot holds (or holds none). */
static int
of_node(const char *spiffe_id, const bcd_node_snapshot *node)
{
	size_t		n = strlen(node->spiffe_id);

	return !node->present ||
		(strncmp(spiffe_id, node->spiffe_id, n) == 0 && strncmp(spiffe_id + n, "/session/", 9) == 0);
}

/* The answer e gives now, when it has one: its token (fresh or, with fresh 0, still valid). */
static int
answer_token(const entry *e, double now, int fresh, const char *want_id,
			 grpc_status_code *code, const char **spiffe_id, const char **token,
			 char *msg, size_t msglen)
{
	if (e->token == NULL || now >= (fresh ? e->fresh_until : e->valid_until))
		return 0;
	if (want_id[0] != '\0' && strcmp(want_id, e->spiffe_id) != 0)
	{
		*code = GRPC_STATUS_PERMISSION_DENIED;
		snprintf(msg, msglen, "no identity issued for that SPIFFE ID");
		return 1;
	}
	*code = GRPC_STATUS_OK;
	*spiffe_id = e->spiffe_id;
	*token = e->token;
	return 1;
}

/* A fetch has ended (the provisioner's thread): keep its JWT-SVID or its failure. */
static void
on_fetched(void *arg, const bcd_job *job)
{
	entry	   *e = arg;
	bcd_wl_jwt_svids *c = e->c;
	double		now = bcd_now_s();
	char	   *token = job->code == BCD_CODE_OK && job->token != NULL && job->token_ttl > 0 ?
		strdup(job->token) : NULL;
	double		kept = (double) job->token_ttl / 2;

	pthread_mutex_lock(c->mu);
	e->in_flight = 0;
	e->done = 1;
	c->n_fetches--;
	if (token != NULL)
	{
		token_free(e->token);
		e->token = token;
		snprintf(e->spiffe_id, sizeof(e->spiffe_id), "%s", job->spiffe_id);
		e->fresh_until = now + kept;
		/* a second short of its exp (when it lives longer than 2 s): never handed out at the last moment */
		e->valid_until = now + (double) job->token_ttl - (job->token_ttl > 2 ? 1 : 0);
		e->fail_code = GRPC_STATUS_OK;
		e->retry_at = 0;
		e->backoff = RETRY_MIN;
	}
	else
	{
		e->fail_code = job->code == BCD_CODE_BUSY ? GRPC_STATUS_RESOURCE_EXHAUSTED :
			GRPC_STATUS_UNAVAILABLE;
		snprintf(e->fail_msg, sizeof(e->fail_msg), "%s",
				 job->code == BCD_CODE_OK ? "no JWT-SVID: out of memory" : job->message);
		e->retry_at = now + e->backoff;
		e->backoff = e->backoff * 2 > RETRY_MAX ? RETRY_MAX : e->backoff * 2;
	}
	pthread_mutex_unlock(c->mu);
	if (token != NULL)
		bcd_log("workload api: session %s%s%s: JWT-SVID of %s for %d audience(s), kept for "
				"%.0f s (half its life of %ld s)", job->session, job->context[0] ? " context " : "",
				job->context, job->spiffe_id, job->audience.n, kept, job->token_ttl);
}

/* FetchJWTSVID: answered now from the cache (or refused), or kept waiting for a fetch (jwt_svids.h). */
int
bcd_wl_jwt_svids_fetch(bcd_wl_jwt_svids *c, const bcd_peer *caller, const char *session,
					   const char *context, const bcd_audiences *aud, const char *want_id,
					   void *w, grpc_status_code *code, const char **spiffe_id,
					   const char **token, char *msg, size_t msglen)
{
	double		now = bcd_now_s();
	entry	   *e = entry_find(c, session, context, aud);
	bcd_node_snapshot node;
	bucket	   *b;
	waiter	   *x;
	char		why[256];

	*code = GRPC_STATUS_UNAVAILABLE;
	*spiffe_id = *token = NULL;
	if (c->stopping)
	{
		snprintf(msg, msglen, "bcd is stopping");
		return 0;
	}
	if (e != NULL && e->token != NULL)
	{
		bcd_provisioner_node_take(c->prov, &node);
		if (!of_node(e->spiffe_id, &node))
		{
			token_free(e->token);
			e->token = NULL;
		}
		bcd_node_release(&node);
	}
	if (e != NULL)
		e->last_used = now;
	/* a fresh JWT-SVID: from the cache, nothing asked of anyone */
	if (e != NULL && answer_token(e, now, 1, want_id, code, spiffe_id, token, msg, msglen))
		return 0;
	/* a failed fetch within its backoff: its answer, or the last JWT-SVID while it is valid */
	if (e != NULL && !e->in_flight && now < e->retry_at)
	{
		if (answer_token(e, now, 0, want_id, code, spiffe_id, token, msg, msglen))
			return 0;
		*code = e->fail_code;
		snprintf(msg, msglen, "%s (bcd asks again in %.0f s)", e->fail_msg, e->retry_at - now + 0.5);
		return 0;
	}
	b = bucket_of(c, caller->uid, now);
	if (b == NULL)
	{
		exhausted(c, caller->uid, now, code, msg, msglen,
				  "too many callers are asking for JWT-SVIDs; try again shortly");
		return 0;
	}
	if (c->n_waiters >= JWT_WAITERS_MAX || b->waiters >= JWT_WAITERS_PER_UID)
	{
		snprintf(why, sizeof(why), "too many FetchJWTSVID calls are waiting (%d of this uid, "
				 "%d in all); try again shortly", b->waiters, c->n_waiters);
		exhausted(c, caller->uid, now, code, msg, msglen, why);
		return 0;
	}
	if (e == NULL || !e->in_flight)
	{
		/* a new fetch: bounded in all, and charged to the caller's uid */
		if (c->n_fetches >= JWT_FETCHES_MAX)
		{
			snprintf(why, sizeof(why), "%d JWT-SVID fetches are in flight already; try again "
					 "shortly", c->n_fetches);
			exhausted(c, caller->uid, now, code, msg, msglen, why);
			return 0;
		}
		if (b->tokens < 1)
		{
			snprintf(why, sizeof(why), "rate limit: uid %ld may start %.0f new JWT-SVID fetches "
					 "at once and %.0f a second after that; try again shortly (a JWT-SVID "
					 "fetched already is answered from bcd's cache)", (long) caller->uid,
					 JWT_RATE_BURST, JWT_RATE_PER_S);
			exhausted(c, caller->uid, now, code, msg, msglen, why);
			return 0;
		}
		if (e == NULL && (e = entry_new(c, session, context, aud)) == NULL)
		{
			exhausted(c, caller->uid, now, code, msg, msglen,
					  "too many JWT-SVIDs are kept or being fetched; try again shortly");
			return 0;
		}
		e->last_used = now;
		if (bcd_provisioner_ask(c->prov, BCD_JOB_JWT_SVID, session, context, aud, caller,
								on_fetched, e) != BC_OK)
		{
			exhausted(c, caller->uid, now, code, msg, msglen, "out of memory");
			return 0;
		}
		b->tokens -= 1;
		e->in_flight = 1;
		c->n_fetches++;
	}
	x = calloc(1, sizeof(*x));
	if (x == NULL || (x->want_id = strdup(want_id)) == NULL)
	{
		free(x);
		exhausted(c, caller->uid, now, code, msg, msglen, "out of memory");
		return 0;
	}
	x->w = w;
	x->uid = caller->uid;
	x->next = e->waiters;
	e->waiters = x;
	e->n_waiters++;
	b->waiters++;
	c->n_waiters++;
	return 1;
}

/* Take waiter x off the counts and free it. */
static void
waiter_done(bcd_wl_jwt_svids *c, waiter *x)
{
	for (int i = 0; i < c->n_buckets; i++)
		if (c->buckets[i].uid == x->uid && c->buckets[i].waiters > 0)
		{
			c->buckets[i].waiters--;
			break;
		}
	c->n_waiters--;
	free(x->want_id);
	free(x);
}

/* Forget the cached JWT-SVIDs of keys known() no longer knows: a retired key's tokens validate nowhere. */
void
bcd_wl_jwt_svids_forget(bcd_wl_jwt_svids *c, int (*known) (void *arg, const char *kid), void *arg)
{
	for (entry *e = c->entries; e != NULL; e = e->next)
	{
		char		kid[64];

		if (e->token == NULL ||
			(bc_jws_header_kid(e->token, strlen(e->token), kid, sizeof(kid)) == BC_OK &&
			 known(arg, kid)))
			continue;
		token_free(e->token);
		e->token = NULL;
	}
}

/* Answer every waiter of the fetches that have ended. */
void
bcd_wl_jwt_svids_answer(bcd_wl_jwt_svids *c, bcd_wl_jwt_answer_fn fn, void *arg)
{
	double		now = bcd_now_s();

	for (entry *e = c->entries; e != NULL; e = e->next)
	{
		if (!e->done)
			continue;
		e->done = 0;
		while (e->waiters != NULL)
		{
			waiter	   *x = e->waiters;
			grpc_status_code code;
			const char *spiffe_id = NULL;
			const char *token = NULL;
			char		msg[640];

			e->waiters = x->next;
			e->n_waiters--;
			if (!answer_token(e, now, 0, x->want_id, &code, &spiffe_id, &token, msg, sizeof(msg)))
			{
				code = e->fail_code != GRPC_STATUS_OK ? e->fail_code : GRPC_STATUS_UNAVAILABLE;
				snprintf(msg, sizeof(msg), "%s", e->fail_code != GRPC_STATUS_OK ? e->fail_msg :
						 "no JWT-SVID");
			}
			fn(arg, x->w, code, spiffe_id, token, msg);
			waiter_done(c, x);
		}
	}
}

/* Stopping: every waiter answered UNAVAILABLE; no fetch answers anyone after this. */
void
bcd_wl_jwt_svids_drain(bcd_wl_jwt_svids *c, bcd_wl_jwt_answer_fn fn, void *arg)
{
	c->stopping = 1;
	for (entry *e = c->entries; e != NULL; e = e->next)
	{
		e->done = 0;
		while (e->waiters != NULL)
		{
			waiter	   *x = e->waiters;

			e->waiters = x->next;
			e->n_waiters--;
			fn(arg, x->w, GRPC_STATUS_UNAVAILABLE, NULL, NULL, "bcd is stopping");
			waiter_done(c, x);
		}
	}
}
