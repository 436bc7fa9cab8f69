/*
 * site_server.c: the site agent's TLS server (site_server.h), what `bcd
 * serve-discovery` (cmd/serve_discovery.c) runs on the provisioning network:
 * a PXE-booted ramdisk (bcd ramdisk) asks it for the discovery assertion of
 * its MAC, bound to the CSR of the key it made in memory
 * (core/discovery_assertion.h has the protocol).
 *
 * Next to the site agent's bcd run, on its state directory (read, never
 * locked or written: the credential is read again at most a second after
 * it was last read, so a renewal takes effect at once).  TLS with the site
 * agent's node certificate and key.  For each request it asks the service
 * for the site's current epoch (POST /v1/site-epoch, proven by the node key,
 * the signed answer verified), then signs.  The node key must be a key file
 * (not a TPM key).
 *
 * Anyone on the provisioning network can connect, so connections are served
 * concurrently, each by a thread of its own, within bounds (issue 26.6:
 * three idle sockets used to stop PXE provisioning):
 *   - at most --max-connections (default BCD_SITE_MAX_CONNECTIONS, 64) at
 *     once and --per-source (default BCD_SITE_PER_SOURCE, 4) from one source
 *     address; one more from that address is closed at once;
 *   - of them, at most three quarters (pending_budget) that have not sent
 *     their whole request line yet: a new connection beyond that budget, or
 *     finding every slot taken, closes the one of them that has waited
 *     longest, and takes its place (issue 42.7: 20 addresses with 4 idle
 *     sockets each used to fill every slot); only when every slot holds a
 *     request being answered is it closed at once;
 *   - the TLS handshake must be done within HANDSHAKE_MS (3 s) of the
 *     accept, the request line (16 KiB at most) in within LINE_MS (3 s) of
 *     the handshake, and the whole connection within TOTAL_TIMEOUT (10 s, the
 *     gateway round trip for the epoch aside); every TLS call waits through
 *     bcd_ssl_wait against those deadlines, so bytes trickled slowly buy
 *     nothing;
 *   - at most GATEWAY_CLIENTS (4) gateway round trips at once, one HTTPS
 *     client each, reused.
 * So an idle or slow client holds one slot of its source's for at most
 * 3 s (6 s with a handshake), and less as soon as newer ones need the room;
 * others are answered meanwhile.  What comes to nothing (a handshake not
 * done, a request refused) is logged one line each for the first
 * FAILED_LOGGED of every TURNED_AWAY_LOG_S, then counted in one line: a
 * stranger churning connections does not flood the log.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/clock.h"
#include "core/discovery_assertion.h"
#include "core/log.h"
#include "core/proof.h"
#include "core/service_keys.h"
#include "core/site_server.h"
#include "core/signals.h"
#include "core/store.h"
#include "core/transport.h"

/* Seconds a connection may last in all, the handshake included. */
#define TOTAL_TIMEOUT 10
/* Milliseconds from the accept to the end of the TLS handshake. */
#define HANDSHAKE_MS 3000
/* Milliseconds from the handshake to the end of the request line. */
#define LINE_MS 3000
/* Gateway clients (round trips for the epoch at once). */
#define GATEWAY_CLIENTS 4
/* Milliseconds a credential read from the state directory is used for. */
#define CRED_REUSE_MS 1000
/* Seconds between two log lines about connections turned away. */
#define TURNED_AWAY_LOG_S 10
/* Connections that came to nothing logged one by one in each TURNED_AWAY_LOG_S. */
#define FAILED_LOGGED 5
/* Stack of a connection's thread. */
#define CONN_STACK (256 * 1024)
/* Milliseconds a new connection waits for the slot of the one closed to make room. */
#define EVICT_WAIT_MS 1000

/* The node credential and the TLS context made from it, shared by connections. */
typedef struct served_cred
{
	int			refs;			/* under server.mu */
	bcd_credential cred;
	SSL_CTX    *ctx;
	long long	loaded_ms;
} served_cred;

/* One connection being served: its slot in the table (under server.mu). */
typedef struct conn_slot
{
	int			fd;				/* -1: free */
	char		source[NI_MAXHOST];
	char		peer[NI_MAXHOST + NI_MAXSERV + 4];
	struct server *s;
	unsigned long long accepted;	/* accept order (server.accepts when it came): the oldest is the lowest */
	int			pending;		/* its request line not all in yet */
	int			evicted;		/* shut down to make room for a newer one */
} conn_slot;

typedef struct server
{
	const char *dir;
	long		ttl;
	const char *gateway;
	const char *gateway_ca;
	bcd_service_keys keys;
	int			max_conns;
	int			per_source;
	int			pending_budget; /* of max_conns, without their request line */

	pthread_mutex_t mu;			/* guards everything below */
	pthread_cond_t changed;		/* a slot freed, a gateway client returned */
	served_cred *cur;			/* the credential in use (a reference) */
	conn_slot  *slots;			/* max_conns of them */
	int			active;
	bcd_http   *http_idle[GATEWAY_CLIENTS];
	int			n_idle;
	int			n_http;			/* gateway clients made (idle or lent) */
	unsigned long served;
	unsigned long refused;
	unsigned long turned_away;	/* over --max-connections or --per-source */
	unsigned long turned_away_logged;
	time_t		turned_away_at;
	unsigned long evicted;		/* pending ones closed to make room */
	unsigned long long accepts;	/* connections given a slot so far */
	unsigned long evicted_logged;
	time_t		evicted_at;
	/* connections dropped (handshake) or refused (request) in this interval */
	time_t		failed_since;	/* the interval began (0: none yet) */
	unsigned long failed_full;	/* logged one by one */
	unsigned long failed_counted;	/* only counted, told at the interval's end */
} server;

/* A listening socket on "host:port" ("[v6]:port"); -1 (err set) otherwise. */
static int
listen_on(const char *spec, char *err, size_t errlen)
{
	char		host[256];
	const char *colon = strrchr(spec, ':');
	const char *h = spec;
	size_t		hl;
	struct addrinfo hints, *res = NULL, *ai;
	int			fd = -1;
	int			one = 1;
	int			rc;

	if (colon == NULL || colon[1] == '\0')
	{
		snprintf(err, errlen, "--listen must be HOST:PORT");
		return -1;
	}
	hl = (size_t) (colon - spec);
	if (hl >= 2 && spec[0] == '[' && spec[hl - 1] == ']')
	{
		h = spec + 1;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
	{
		snprintf(err, errlen, "--listen must be HOST:PORT");
		return -1;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0)
	{
		snprintf(err, errlen, "--listen %s: %s", spec, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next)
	{
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
			bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0)
			break;
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(errno));
	freeaddrinfo(res);
	return fd;
}

/*
 * Add the certificates after the leaf of dir/node-chain.pem to ctx's chain,
 * when that leaf is leaf (a renewal in between: BC_EINVAL, made again later).
 */
static int
add_chain(SSL_CTX *ctx, const char *dir, X509 *leaf)
{
	X509	   *certs[BCD_CHAIN_MAX];
	size_t		n = 0;
	size_t		i;
	int			rc;

	rc = bcd_store_read_chain(dir, certs, BCD_CHAIN_MAX, &n);
	if (rc == BC_OK && X509_cmp(certs[0], leaf) != 0)
		rc = BC_EINVAL;
	for (i = 1; i < n && rc == BC_OK; i++)
		if (SSL_CTX_add1_chain_cert(ctx, certs[i]) != 1)
			rc = BC_ECRYPTO;
	for (i = 0; i < n; i++)
		X509_free(certs[i]);
	return rc;
}

/* A TLS server context for cred, or NULL. */
static SSL_CTX *
make_ctx(const char *dir, const bcd_credential *cred)
{
	SSL_CTX    *ctx = SSL_CTX_new(TLS_server_method());

	if (ctx == NULL || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
		SSL_CTX_use_certificate(ctx, cred->leaf) != 1 ||
		SSL_CTX_use_PrivateKey(ctx, cred->key) != 1 || SSL_CTX_check_private_key(ctx) != 1)
	{
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	/* The chain as answered (the issuing intermediate ..): a ramdisk pins the root only. */
	if (add_chain(ctx, dir, cred->leaf) != BC_OK)
	{
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

/* Drop one reference to c (under s->mu). */
static void
cred_release_locked(served_cred *c)
{
	if (c != NULL && --c->refs == 0)
	{
		SSL_CTX_free(c->ctx);
		bcd_credential_free(&c->cred);
		free(c);
	}
}

/* Drop one reference to c. */
static void
cred_release(server *s, served_cred *c)
{
	pthread_mutex_lock(&s->mu);
	cred_release_locked(c);
	pthread_mutex_unlock(&s->mu);
}

/*
 * The credential to serve with (a reference), read again from the state
 * directory when the one in use was read over CRED_REUSE_MS ago; NULL with
 * err when there is none, or it cannot serve TLS.
 */
static served_cred *
cred_acquire(server *s, char *err, size_t errlen)
{
	served_cred *c;
	long long	now = bcd_now_ms();

	pthread_mutex_lock(&s->mu);
	if (s->cur != NULL && now - s->cur->loaded_ms < CRED_REUSE_MS)
	{
		c = s->cur;
		c->refs++;
		pthread_mutex_unlock(&s->mu);
		return c;
	}
	pthread_mutex_unlock(&s->mu);
	c = calloc(1, sizeof(*c));
	if (c == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (bcd_store_load(s->dir, &s->keys, &c->cred, err, errlen) != BC_OK)
	{
		free(c);
		return NULL;
	}
	if ((c->ctx = make_ctx(s->dir, &c->cred)) == NULL)
	{
		snprintf(err, errlen, "cannot set up TLS with the node certificate");
		bcd_credential_free(&c->cred);
		free(c);
		return NULL;
	}
	c->loaded_ms = now;
	c->refs = 2;				/* s->cur's and the caller's */
	pthread_mutex_lock(&s->mu);
	cred_release_locked(s->cur);
	s->cur = c;
	pthread_mutex_unlock(&s->mu);
	return c;
}

/* Lend a gateway client (made when fewer than GATEWAY_CLIENTS exist), or NULL. */
static bcd_http *
http_borrow(server *s, long long deadline)
{
	bcd_http   *h = NULL;
	char		err[256];

	pthread_mutex_lock(&s->mu);
	while (s->n_idle == 0 && s->n_http >= GATEWAY_CLIENTS && !bcd_stop_requested())
	{
		struct timespec ts;
		long long	left = deadline - bcd_now_ms();

		if (left <= 0)
			break;
		clock_gettime(CLOCK_REALTIME, &ts);
		left = left > 200 ? 200 : left;
		ts.tv_sec += left / 1000;
		ts.tv_nsec += (left % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L)
		{
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		(void) pthread_cond_timedwait(&s->changed, &s->mu, &ts);
	}
	if (s->n_idle > 0)
		h = s->http_idle[--s->n_idle];
	else if (s->n_http < GATEWAY_CLIENTS)
	{
		s->n_http++;
		pthread_mutex_unlock(&s->mu);
		h = bcd_http_new(s->gateway, s->gateway_ca, err, sizeof(err));
		if (h == NULL)
			bcd_log("discovery: %s", err);
		pthread_mutex_lock(&s->mu);
		if (h == NULL)
			s->n_http--;
	}
	pthread_mutex_unlock(&s->mu);
	return h;
}

/* Give a gateway client back. */
static void
http_return(server *s, bcd_http *h)
{
	pthread_mutex_lock(&s->mu);
	s->http_idle[s->n_idle++] = h;
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->mu);
}

/* The site and its epoch, as the service signs them for cred; 0 on success. */
static int
site_epoch(server *s, const bcd_credential *cred, long long deadline, char **site,
		   long long *epoch)
{
	bcd_http   *http = http_borrow(s, deadline);
	char	   *proof = bcd_node_proof(cred, BC_PURPOSE_SITE_EPOCH, NULL);
	json_t	   *body = proof != NULL ? json_pack("{s:s}", "proof", proof) : NULL;
	char	   *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
	json_t	   *p = NULL;
	const char *sid;
	int			rc = -1;

	*site = NULL;
	if (text != NULL && http != NULL)
		p = bcd_node_exchange(http, &s->keys, cred, BC_PATH_SITE_EPOCH, text,
							  BC_PURPOSE_SITE_EPOCH);
	if (http != NULL)
		http_return(s, http);
	sid = json_string_value(json_object_get(p, "siteId"));
	if (sid != NULL && json_is_integer(json_object_get(p, "epoch")) &&
		strcmp(json_string_value(json_object_get(p, "serial")) != NULL ?
			   json_string_value(json_object_get(p, "serial")) : "", cred->serial) == 0 &&
		(*site = strdup(sid)) != NULL)
	{
		*epoch = (long long) json_integer_value(json_object_get(p, "epoch"));
		rc = 0;
	}
	json_decref(p);
	free(text);
	json_decref(body);
	free(proof);
	return rc;
}

/*
 * Read one line (at most BCD_DISCOVERY_LINE_MAX with its newline) within the
 * deadline: its length without the newline, -2 when it is over the bound,
 * -1 when it did not come whole in time (or the connection failed).
 */
static long
read_line(SSL *ssl, int fd, char *buf, size_t cap, long long deadline)
{
	size_t		len = 0;

	while (len < cap)
	{
		int			n = SSL_read(ssl, buf + len, (int) (cap - len));
		char	   *nl;

		if (n <= 0)
		{
			if (bcd_ssl_wait(ssl, fd, n, deadline) != 0)
				return -1;
			continue;
		}
		nl = memchr(buf + len, '\n', (size_t) n);
		len += (size_t) n;
		if (nl != NULL)
			return nl - buf;
	}
	return -2;					/* over the bound */
}

static void
answer(SSL *ssl, int fd, long long deadline, const char *key, const char *value)
{
	json_t	   *doc = json_pack("{s:s}", key, value);
	char	   *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;

	if (text != NULL)
	{
		size_t		n = strlen(text);
		int			r;

		text[n] = '\n';			/* json_dumps leaves room for its NUL */
		while ((r = SSL_write(ssl, text, (int) n + 1)) <= 0 &&
			   bcd_ssl_wait(ssl, fd, r, deadline) == 0)
			;
		text[n] = '\0';
	}
	free(text);
	json_decref(doc);
}

/*
 * After refusing a line still being sent: read (and drop) what else comes,
 * a bounded amount until the deadline, so that closing does not reset the
 * connection before the client has read the answer.
 */
static void
drain(SSL *ssl, int fd, long long deadline)
{
	char		sink[4096];
	size_t		total = 0;

	while (total < 4 * BCD_DISCOVERY_LINE_MAX)
	{
		int			n = SSL_read(ssl, sink, sizeof(sink));

		if (n <= 0)
		{
			if (bcd_ssl_wait(ssl, fd, n, deadline) != 0)
				break;
			continue;
		}
		total += (size_t) n;
		if (memchr(sink, '\n', (size_t) n) != NULL)
			break;
	}
}

/*
 * The slot's request line is all in: it is no longer pending (a newer
 * connection cannot close it any more).  1 when it was closed to make room
 * meanwhile.
 */
static int
slot_started(server *s, conn_slot *slot)
{
	int			evicted;

	pthread_mutex_lock(&s->mu);
	slot->pending = 0;
	evicted = slot->evicted;
	pthread_mutex_unlock(&s->mu);
	return evicted;
}

/* Whether the slot was closed to make room for a newer connection (counted, not logged each). */
static int
slot_evicted(server *s, conn_slot *slot)
{
	int			evicted;

	pthread_mutex_lock(&s->mu);
	evicted = slot->evicted;
	pthread_mutex_unlock(&s->mu);
	return evicted;
}

/*
 * Tell the connections that came to nothing and were only counted, once the
 * interval is over (or force: at the end).  Under s->mu.
 */
static void
log_failed_summary(server *s, time_t now, int force)
{
	if (s->failed_since == 0 || (!force && now - s->failed_since < TURNED_AWAY_LOG_S))
		return;
	if (s->failed_counted > 0)
		bcd_log("discovery: %lu more connection(s) dropped in the TLS handshake or refused "
				"in the last %ld s (the first %d logged one by one)", s->failed_counted,
				(long) (now - s->failed_since), FAILED_LOGGED);
	s->failed_since = 0;
	s->failed_full = 0;
	s->failed_counted = 0;
}

/* A connection came to nothing: 1 when it is to be logged in full, 0 when only counted. */
static int
failed_take(server *s)
{
	time_t		now = time(NULL);
	int			full;

	pthread_mutex_lock(&s->mu);
	log_failed_summary(s, now, 0);
	if (s->failed_since == 0)
		s->failed_since = now;
	full = s->failed_full < FAILED_LOGGED;
	if (full)
		s->failed_full++;
	else
		s->failed_counted++;
	pthread_mutex_unlock(&s->mu);
	return full;
}

/* One connection: TLS, one request line, one answer (the slot's thread). */
static void
serve_one(server *s, conn_slot *slot)
{
	int			fd = slot->fd;
	const char *peer = slot->peer;
	long long	start = bcd_now_ms();
	long long	deadline = start + TOTAL_TIMEOUT * 1000LL;
	long long	line_deadline;
	served_cred *sc = NULL;
	char	   *line = NULL;
	char		err[512];
	char		mac[18];
	unsigned char *csr = NULL;
	size_t		csr_len = 0;
	char	   *site = NULL;
	char	   *jws = NULL;
	long long	epoch = 0;
	SSL		   *ssl = NULL;
	long		n;
	int			r;

	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
		goto out;
	if ((sc = cred_acquire(s, err, sizeof(err))) == NULL)
	{
		bcd_log("discovery: %s: no credential to serve with: %s", peer, err);
		goto out;
	}
	if ((int64_t) time(NULL) >= sc->cred.not_after)
	{
		bcd_log("discovery: %s: the certificate %s expired at %s", peer, sc->cred.serial,
				sc->cred.not_after_text);
		goto out;
	}
	if ((ssl = SSL_new(sc->ctx)) == NULL || SSL_set_fd(ssl, fd) != 1 ||
		(line = malloc(BCD_DISCOVERY_LINE_MAX)) == NULL)
	{
		bcd_log("discovery: %s: cannot set up TLS with the node certificate", peer);
		goto out;
	}
	while ((r = SSL_accept(ssl)) != 1)
	{
		if (bcd_ssl_wait(ssl, fd, r, start + HANDSHAKE_MS) != 0)
		{
			if (!slot_evicted(s, slot) && failed_take(s))
				bcd_log("discovery: %s: dropped: TLS handshake failed or not done within %d s",
						peer, HANDSHAKE_MS / 1000);
			goto out;
		}
	}
	line_deadline = bcd_now_ms() + LINE_MS;
	n = read_line(ssl, fd, line, BCD_DISCOVERY_LINE_MAX, line_deadline);
	if ((n >= 0 ? slot_started(s, slot) : slot_evicted(s, slot)) != 0)
		goto out;
	if (n < 0 || bcd_discovery_parse_request(line, (size_t) n, &csr, &csr_len, mac) != BC_OK)
	{
		pthread_mutex_lock(&s->mu);
		s->refused++;
		pthread_mutex_unlock(&s->mu);
		if (failed_take(s))
			bcd_log("discovery: %s: refused %s", peer, n == -2 ? "a request line over 16 KiB" :
					n == -1 ? "a request line not sent whole within 3 s of the handshake" :
					"a request that is not {\"csr\",\"mac\"} with a valid CSR and MAC");
		answer(ssl, fd, deadline, "error", BCD_DISCOVERY_BAD_REQUEST);
		/* the rest of an over-long line, briefly, so the client reads the answer, not a reset */
		if (n == -2)
			drain(ssl, fd, bcd_now_ms() + 1000 < deadline ? bcd_now_ms() + 1000 : deadline);
		goto out;
	}
	if (site_epoch(s, &sc->cred, deadline, &site, &epoch) != 0)
	{
		bcd_log("discovery: %s: the service did not tell the site's epoch", peer);
		answer(ssl, fd, deadline, "error", BCD_DISCOVERY_UNAVAILABLE);
		goto out;
	}
	if (bcd_discovery_sign(&sc->cred, site, mac, epoch, csr, csr_len, s->ttl, &jws) != BC_OK)
	{
		answer(ssl, fd, deadline, "error", BCD_DISCOVERY_UNAVAILABLE);
		goto out;
	}
	answer(ssl, fd, deadline, "assertion", jws);
	pthread_mutex_lock(&s->mu);
	s->served++;
	pthread_mutex_unlock(&s->mu);
	bcd_log("discovery: %s: signed an assertion for %s (site %s, epoch %lld, %ld s)", peer,
			mac, site, epoch, s->ttl);
out:
	if (ssl != NULL)
	{
		(void) SSL_shutdown(ssl);
		SSL_free(ssl);
	}
	if (sc != NULL)
		cred_release(s, sc);
	free(line);
	free(site);
	free(jws);
	free(csr);
	ERR_clear_error();
}

/* A connection's thread: serve it, close it, free its slot. */
static void *
conn_main(void *arg)
{
	conn_slot  *slot = arg;
	server	   *s = slot->s;

	serve_one(s, slot);
	pthread_mutex_lock(&s->mu);
	close(slot->fd);			/* under the lock: the stop never shuts down a reused fd */
	slot->fd = -1;
	s->active--;
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->mu);
	OPENSSL_thread_stop();
	return NULL;
}

/*
 * Close the pending connection that has waited longest, to make room (under
 * s->mu): its thread sees its socket shut down and frees the slot.  0 when
 * there was one, -1 when none is pending.
 */
static int
evict_oldest_pending(server *s)
{
	conn_slot  *oldest = NULL;

	for (int i = 0; i < s->max_conns; i++)
	{
		conn_slot  *c = &s->slots[i];

		if (c->fd >= 0 && c->pending && !c->evicted &&
			(oldest == NULL || c->accepted < oldest->accepted))
			oldest = c;
	}
	if (oldest == NULL)
		return -1;
	oldest->evicted = 1;
	(void) shutdown(oldest->fd, SHUT_RDWR);
	s->evicted++;
	return 0;
}

/*
 * Take a slot for a connection from source (under s->mu): within
 * --per-source, making room within the pending budget and the table by
 * closing the pending connection that has waited longest (and waiting up to
 * EVICT_WAIT_MS for its slot); NULL when the connection is to be turned away.
 */
static conn_slot *
slot_take(server *s, const char *source)
{
	long long	until = bcd_now_ms() + EVICT_WAIT_MS;
	int			made_room = 0;

	for (;;)
	{
		conn_slot  *free_slot = NULL;
		int			same = 0;
		int			pending = 0;
		struct timespec ts;

		for (int i = 0; i < s->max_conns; i++)
		{
			conn_slot  *c = &s->slots[i];

			if (c->fd < 0)
			{
				if (free_slot == NULL)
					free_slot = c;
				continue;
			}
			if (strcmp(c->source, source) == 0)
				same++;
			if (c->pending && !c->evicted)
				pending++;
		}
		if (same >= s->per_source)
			return NULL;
		/* the budget of connections without their request: the new one counts */
		if (!made_room && pending >= s->pending_budget)
			made_room = evict_oldest_pending(s) == 0;
		if (free_slot != NULL)
			return free_slot;
		/* every slot taken: room made by the oldest pending one, or none to be had */
		if (!made_room && evict_oldest_pending(s) != 0)
			return NULL;
		made_room = 1;
		if (bcd_now_ms() >= until || bcd_stop_requested())
			return NULL;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000000L;
		if (ts.tv_nsec >= 1000000000L)
		{
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		(void) pthread_cond_timedwait(&s->changed, &s->mu, &ts);
	}
}

/*
 * Log the connections turned away and those closed to make room, each at
 * most once every TURNED_AWAY_LOG_S (under s->mu).
 */
static void
log_turned_away(server *s, int force)
{
	time_t		now = time(NULL);

	if (s->turned_away != s->turned_away_logged &&
		(force || now - s->turned_away_at >= TURNED_AWAY_LOG_S))
	{
		bcd_log("discovery: closed %lu connection(s) at once: over --per-source %d from one "
				"address or --max-connections %d in all (%lu since the start)",
				s->turned_away - s->turned_away_logged, s->per_source, s->max_conns,
				s->turned_away);
		s->turned_away_logged = s->turned_away;
		s->turned_away_at = now;
	}
	if (s->evicted != s->evicted_logged && (force || now - s->evicted_at >= TURNED_AWAY_LOG_S))
	{
		bcd_log("discovery: closed %lu connection(s) that had not sent their request, the "
				"longest waiting first, to make room for newer ones (at most %d of "
				"--max-connections %d without their request; %lu since the start)",
				s->evicted - s->evicted_logged, s->pending_budget, s->max_conns, s->evicted);
		s->evicted_logged = s->evicted;
		s->evicted_at = now;
	}
	log_failed_summary(s, now, force);
}

/* Serve fd from peer (source: its address) on a thread of its own, or close it. */
static void
dispatch(server *s, int fd, const char *source, const char *peer)
{
	pthread_attr_t attr;
	pthread_t	t;
	conn_slot  *slot;
	int			ok = 0;

	pthread_mutex_lock(&s->mu);
	slot = slot_take(s, source);
	if (slot != NULL)
	{
		slot->fd = fd;
		slot->s = s;
		/* an order, not a clock: many connections come in one millisecond */
		slot->accepted = ++s->accepts;
		slot->pending = 1;
		slot->evicted = 0;
		snprintf(slot->source, sizeof(slot->source), "%s", source);
		snprintf(slot->peer, sizeof(slot->peer), "%s", peer);
		s->active++;
		if (pthread_attr_init(&attr) == 0)
		{
			(void) pthread_attr_setstacksize(&attr, CONN_STACK);
			(void) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
			ok = pthread_create(&t, &attr, conn_main, slot) == 0;
			pthread_attr_destroy(&attr);
		}
		if (!ok)
		{
			slot->fd = -1;
			s->active--;
			bcd_log("discovery: %s: cannot start a thread for it; closed", peer);
		}
	}
	else
		s->turned_away++;
	log_turned_away(s, 0);
	pthread_mutex_unlock(&s->mu);
	if (!ok)
		close(fd);
}

/* Stopping: cut every connection short and wait until their threads are done. */
static void
drain_connections(server *s)
{
	int			i;

	pthread_mutex_lock(&s->mu);
	for (i = 0; i < s->max_conns; i++)
		if (s->slots[i].fd >= 0)
			(void) shutdown(s->slots[i].fd, SHUT_RDWR);
	while (s->active > 0)
		pthread_cond_wait(&s->changed, &s->mu);
	log_turned_away(s, 1);
	pthread_mutex_unlock(&s->mu);
}
/*
 * Serve ramdisks as o says until SIGTERM or SIGINT: BCD_RC_OK then,
 * BCD_RC_FAILED (logged) when it cannot start.
 */
bcd_rc
bcd_site_server_run(const bcd_site_server_opts *o)
{
	server		s;
	char		err[512];
	int			lfd = -1;
	int			have_keys = 0;
	int			have_mu = 0;
	bcd_rc		rc = BCD_RC_FAILED;
	int			i;

	memset(&s, 0, sizeof(s));
	s.dir = o->state_dir;
	s.ttl = o->ttl;
	s.gateway = o->gateway;
	s.gateway_ca = o->gateway_ca;
	s.max_conns = o->max_conns;
	s.per_source = o->per_source;
	s.pending_budget = o->max_conns - o->max_conns / 4;
	bcd_signals_block();
	signal(SIGPIPE, SIG_IGN);	/* a client gone mid-answer is not our end */
	if (bcd_service_keys_load(o->service_keys, &s.keys, err, sizeof(err)) != BC_OK)
	{
		bcd_log("%s", err);
		goto out;
	}
	have_keys = 1;
	/* the first gateway client here, before any thread (curl_global_init) */
	if ((s.http_idle[0] = bcd_http_new(s.gateway, s.gateway_ca, err, sizeof(err))) == NULL)
	{
		bcd_log("%s", err);
		goto out;
	}
	s.n_idle = s.n_http = 1;
	s.slots = calloc((size_t) s.max_conns, sizeof(*s.slots));
	if (s.slots == NULL || pthread_mutex_init(&s.mu, NULL) != 0)
	{
		bcd_log("out of memory");
		goto out;
	}
	if (pthread_cond_init(&s.changed, NULL) != 0)
	{
		pthread_mutex_destroy(&s.mu);
		bcd_log("out of memory");
		goto out;
	}
	have_mu = 1;
	for (i = 0; i < s.max_conns; i++)
		s.slots[i].fd = -1;
	if ((lfd = listen_on(o->listen, err, sizeof(err))) < 0)
	{
		bcd_log("%s", err);
		goto out;
	}
	bcd_log("discovery: listening on %s for ramdisks (assertions of %ld s; %d connections "
			"at once, %d per source, %d of them without their request)", o->listen, s.ttl,
			s.max_conns, s.per_source, s.pending_budget);
	while (!bcd_stop_requested())
	{
		struct pollfd pfd = {lfd, POLLIN, 0};
		struct sockaddr_storage sa;
		socklen_t	salen = sizeof(sa);
		char		host[NI_MAXHOST], port[NI_MAXSERV], peer[NI_MAXHOST + NI_MAXSERV + 4];
		int			fd;

		if (poll(&pfd, 1, 200) <= 0)
		{
			pthread_mutex_lock(&s.mu);
			log_turned_away(&s, 0);
			pthread_mutex_unlock(&s.mu);
			continue;
		}
		fd = accept4(lfd, (struct sockaddr *) &sa, &salen, SOCK_CLOEXEC);
		if (fd < 0)
		{
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				(void) bcd_sleep(0.2);	/* no spinning while descriptors are short */
			continue;
		}
		if (getnameinfo((struct sockaddr *) &sa, salen, host, sizeof(host), port, sizeof(port),
						NI_NUMERICHOST | NI_NUMERICSERV) != 0)
		{
			snprintf(host, sizeof(host), "?");
			snprintf(peer, sizeof(peer), "?");
		}
		else
			snprintf(peer, sizeof(peer), "%s:%s", host, port);
		dispatch(&s, fd, host, peer);
	}
	close(lfd);
	lfd = -1;
	drain_connections(&s);
	bcd_log("discovery: stopped by a signal (%lu assertions signed, %lu requests refused, "
			"%lu connections over the limits closed, %lu closed to make room)", s.served,
			s.refused, s.turned_away, s.evicted);
	rc = BCD_RC_OK;
out:
	if (lfd >= 0)
		close(lfd);
	if (have_mu)
	{
		cred_release(&s, s.cur);
		pthread_cond_destroy(&s.changed);
		pthread_mutex_destroy(&s.mu);
	}
	while (s.n_idle > 0)
		bcd_http_free(s.http_idle[--s.n_idle]);
	free(s.slots);
	if (have_keys)
		bcd_service_keys_free(&s.keys);
	return rc;
}
