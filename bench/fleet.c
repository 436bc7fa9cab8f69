/*
 * fleet.c: the fleet load generator of bench/run's section `fleet` (issue 49,
 * done-when 2).  Many simulated nodes, each with its own P-256 key and node
 * certificate, speak the protocol to the real bc-gateway as bcd would:
 *
 *   - join once through the custom attestor sim-restricted (registered by
 *     bench/sections/fleet.sh with the documented SQL; it answers a
 *     restricted certificate: allowedKinds, certTtlSeconds);
 *   - renew at half-life (POST /v1/renew: a fresh key and CSR, a proof by the
 *     current key; the new key and serial are taken up from the signed answer);
 *   - ask session certificates (POST /v1/session: a fresh key and CSR, a proof)
 *     and JWT-SVIDs (POST /v1/jwt-svid: a proof) at configured rates per node.
 *
 * The load is open-loop: every request has a scheduled time, and its latency
 * runs from that time to the answer, so a slow service is not hidden by a
 * generator that waits for it (no coordinated omission).  Sessions and
 * JWT-SVIDs are Poisson processes of rate N / interval over the nodes; each
 * node renews once per half-life T/2, its phase uniform in that cycle (the
 * steady state of a fleet whose nodes joined at random times).  A node's
 * requests never race its own renewal: a session or JWT-SVID due while the
 * node renews waits for the new certificate, and a renewal due while requests
 * of the node are in flight waits for them (that wait is in the latency).
 *
 * One point: N nodes (joined as needed), W seconds of warm-up, S seconds
 * measured.  --search: N doubles from --nodes until a point fails (p99 of a
 * kind >= --p99-ms, or any answer 503/429, or any error), then bisection to
 * within --resolution (not below a sixteenth of --nodes); the largest passing
 * N is the result.  Every point is
 * one JSON line on stdout; progress on stderr.
 *
 * Keys and CSRs a point will need are made before it (not timed); proofs are
 * signed when a request is sent, with the current time.  Answers are verified
 * with the service's signing key (as bcd does) unless --no-verify.  The
 * generator's own CPU (getrusage) and the machine's (/proc/stat) are in every
 * point.
 *
 *   fleet --url https://127.0.0.1:PORT --cacert TLS.crt --service-keys KEYS.json
 *         [--nodes N] [--search] [--max-nodes N] [--secs S] [--warm W]
 *         [--cert-ttl T] [--session-every S] [--jwt-every S] [--conns C]
 *         [--xff] [--p99-ms 50] [--resolution 0.1] [--no-verify] [--seed N]
 *
 * Built by bench/sections/fleet.sh from src/common:
 *   cc -O2 -D_GNU_SOURCE -Isrc/common bench/fleet.c src/common/[*].c \
 *      -lcurl -lssl -lcrypto -ljansson (+ tss2-mu for src/common/tpm.c)
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "bc_common.h"

enum
{
	K_JOIN, K_RENEW, K_SESSION, K_JWT, NKINDS
};
static const char *const kind_name[NKINDS] = {"join", "renew", "session", "jwt-svid"};
static const char *const kind_path[NKINDS] = {"/v1/join", "/v1/renew", "/v1/session", "/v1/jwt-svid"};

#define SESSIONS_PER_NODE 4
#define MAX_DEFERRED 8

/* What a node defers while it renews. */
typedef struct deferred
{
	double		t;
	int			kind;
} deferred;

/* One simulated node. */
typedef struct node
{
	EVP_PKEY   *key;
	char		serial[40];
	int64_t		not_after;
	int			joined;
	int			inflight;		/* sessions and JWT-SVIDs in flight */
	int			renewing;		/* a renewal in flight */
	int			renew_pending;	/* a renewal due, waiting for inflight to drain */
	double		renew_t;		/* its scheduled time */
	int			ndef;
	deferred	def[MAX_DEFERRED];
} node;

/* A key and its CSR, made in advance. */
typedef struct keycsr
{
	EVP_PKEY   *key;
	char	   *csr64;
	char		csr_sha256[44];
} keycsr;

/* One request in flight. */
typedef struct request
{
	int			kind;
	long		node;
	double		t;				/* scheduled */
	keycsr		kc;				/* join, renew, session: the new key and CSR */
	char	   *body;
	char	   *resp;
	size_t		resp_len;
	struct curl_slist *hdr;
	CURL	   *easy;
} request;

/* One scheduled event of a point. */
typedef struct event
{
	double		t;
	int			kind;
	long		node;
} event;

/* The tally of one kind in one point. */
typedef struct tally
{
	double	   *lat;			/* ms, ok answers scheduled in the window */
	long		nlat, caplat;
	long		sent, ok, s503, s429, s403, other, neterr;
} tally;

static struct
{
	const char *url;
	const char *cacert;
	const char *keys_path;
	long		nodes;
	long		max_nodes;
	int			search;
	double		secs;
	double		warm;
	double		cert_ttl;
	double		session_every;
	double		jwt_every;
	long		conns;
	int			xff;
	double		p99_ms;
	double		resolution;
	int			verify;
	unsigned	seed;
} opt = {
	.url = NULL, .nodes = 1000, .max_nodes = 1000000, .secs = 20, .warm = 5,
	.cert_ttl = 600, .session_every = 60, .jwt_every = 30, .conns = 64, .p99_ms = 50,
	.resolution = 0.1, .verify = 1, .seed = 1
};

static CURLM *multi;
static node *nodes;
static long nnodes_alloc;
static long njoined;
static EVP_PKEY *signing_pub;
static tally tal[NKINDS];
static double win_lo, win_hi;	/* the measured window, in point time */
static double t_origin;			/* monotonic time of the point's zero */
static long inflight_total;
static keycsr *pool;
static long pool_n, pool_next;
static const char *run_tag;

#define MAX_FREE_EASY 4096
static CURL *free_easy[MAX_FREE_EASY];	/* easy handles of finished requests, reused */
static int	nfree_easy;

/* Monotonic seconds. */
static double
now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Exit with a message. */
static void
die(const char *what)
{
	fprintf(stderr, "fleet: %s\n", what);
	exit(1);
}

/* Uniform in [0, 1). */
static double
urand(void)
{
	return (double) random() / ((double) RAND_MAX + 1.0);
}

/* A fresh P-256 key and its CSR, base64url, with the CSR's SHA-256. */
static keycsr
make_keycsr(void)
{
	keycsr		kc;
	unsigned char *der = NULL;
	size_t		len = 0;

	kc.key = bc_p256_generate();
	if (kc.key == NULL || bc_csr_create(kc.key, NULL, &der, &len) != BC_OK ||
		bc_sha256_b64url(der, len, kc.csr_sha256) != BC_OK ||
		(kc.csr64 = bc_b64url_encode_alloc(der, len)) == NULL)
		die("cannot make a key and CSR");
	bc_free(der);
	return kc;
}

/* Fill the pool of keys and CSRs to n unused. */
static void
pool_fill(long n)
{
	long		i,
				left = pool_n - pool_next;

	if (left >= n)
		return;
	memmove(pool, pool + pool_next, sizeof(keycsr) * left);
	pool = realloc(pool, sizeof(keycsr) * n);
	if (pool == NULL)
		die("out of memory");
	for (i = left; i < n; i++)
		pool[i] = make_keycsr();
	pool_n = n;
	pool_next = 0;
}

/* The next key and CSR of the pool (made now if the pool is empty). */
static keycsr
pool_take(void)
{
	if (pool_next < pool_n)
		return pool[pool_next++];
	return make_keycsr();
}

/* Append to a tally's latencies. */
static void
tally_lat(tally *t, double ms)
{
	if (t->nlat == t->caplat)
	{
		t->caplat = t->caplat ? t->caplat * 2 : 4096;
		t->lat = realloc(t->lat, sizeof(double) * t->caplat);
		if (t->lat == NULL)
			die("out of memory");
	}
	t->lat[t->nlat++] = ms;
}

/* Ascending doubles for qsort. */
static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* The p-th percentile (nearest rank) of sorted v. */
static double
pct(const double *v, long n, double p)
{
	long		i;

	if (n == 0)
		return NAN;
	i = (long) ceil(n * p / 100.0);
	if (i < 1)
		i = 1;
	if (i > n)
		i = n;
	return v[i - 1];
}

/* curl's write callback: append to the request's answer (at most 1 MiB). */
static size_t
on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	request    *r = userdata;
	size_t		n = size * nmemb;

	if (r->resp_len + n > (1 << 20))
		return 0;
	r->resp = realloc(r->resp, r->resp_len + n + 1);
	if (r->resp == NULL)
		die("out of memory");
	memcpy(r->resp + r->resp_len, ptr, n);
	r->resp_len += n;
	r->resp[r->resp_len] = '\0';
	return n;
}

/* A JWS by key over the JSON doc (consumed); malloc()ed. */
static char *
sign_doc(EVP_PKEY *key, json_t *doc)
{
	char	   *claims = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	char	   *jws = NULL;

	json_decref(doc);
	if (claims == NULL || bc_jws_sign_es256(key, NULL, (const unsigned char *) claims,
											 strlen(claims), &jws) != BC_OK)
		die("cannot sign a proof");
	free(claims);
	return jws;
}

/* The request body of kind for node n (the key and CSR in r->kc when the kind has one). */
static char *
make_body(request *r)
{
	node	   *nd = &nodes[r->node];
	json_t	   *doc;
	char	   *proof;
	char	   *body;
	char		sid[16];
	json_int_t	iat = (json_int_t) time(NULL);

	snprintf(sid, sizeof(sid), "s%ld", random() % SESSIONS_PER_NODE);
	switch (r->kind)
	{
		case K_JOIN:
			{
				char		name[96];
				char	   *att;
				char		host[32];

				snprintf(name, sizeof(name), "%s:%ld", run_tag, r->node);
				snprintf(host, sizeof(host), "sim-%ld", r->node);
				att = bc_b64url_encode_alloc((const unsigned char *) name, strlen(name));
				doc = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s}}", "csr", r->kc.csr64,
								"role", "node", "attestor", "sim-restricted", "attestation", att,
								"claims", "hostname", host, "arch", "x86_64");
				free(att);
				break;
			}
		case K_RENEW:
			proof = sign_doc(nd->key, json_pack("{s:s, s:s, s:s, s:I}", "purpose", "renew",
												"serial", nd->serial, "csrSha256",
												r->kc.csr_sha256, "iat", iat));
			doc = json_pack("{s:s, s:s}", "csr", r->kc.csr64, "proof", proof);
			free(proof);
			break;
		case K_SESSION:
			proof = sign_doc(nd->key, json_pack("{s:s, s:s, s:s, s:I, s:s}", "purpose", "session",
												"serial", nd->serial, "csrSha256",
												r->kc.csr_sha256, "iat", iat, "session", sid));
			doc = json_pack("{s:s, s:s}", "csr", r->kc.csr64, "proof", proof);
			free(proof);
			break;
		default:
			proof = sign_doc(nd->key, json_pack("{s:s, s:s, s:I, s:[s], s:s}", "purpose", "jwt-svid",
												"serial", nd->serial, "iat", iat, "audience",
												"spiffe://bench.example/svc/db", "session", sid));
			doc = json_pack("{s:s}", "proof", proof);
			free(proof);
			break;
	}
	if (doc == NULL || (body = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
		die("cannot make a request body");
	json_decref(doc);
	return body;
}

/* Send one request of kind for node n, scheduled at t. */
static void
send_req(int kind, long n, double t)
{
	request    *r = calloc(1, sizeof(request));
	char		url[512];

	if (r == NULL)
		die("out of memory");
	r->kind = kind;
	r->node = n;
	r->t = t;
	if (kind != K_JWT)
		r->kc = pool_take();
	r->body = make_body(r);
	if (kind == K_RENEW)
		nodes[n].renewing = 1;
	else if (kind != K_JOIN)
		nodes[n].inflight++;
	snprintf(url, sizeof(url), "%s%s", opt.url, kind_path[kind]);
	r->hdr = curl_slist_append(NULL, "Content-Type: application/json");
	if (opt.xff)
	{
		char		h[64];

		/* one client address per node: the gateway's per-address buckets (--trusted-proxy) */
		snprintf(h, sizeof(h), "X-Forwarded-For: 10.%ld.%ld.%ld", (n >> 16) & 255, (n >> 8) & 255, n & 255);
		r->hdr = curl_slist_append(r->hdr, h);
	}
	r->easy = nfree_easy > 0 ? free_easy[--nfree_easy] : curl_easy_init();
	if (r->easy == NULL)
		die("curl_easy_init");
	curl_easy_setopt(r->easy, CURLOPT_URL, url);
	curl_easy_setopt(r->easy, CURLOPT_CAINFO, opt.cacert);
	curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->hdr);
	curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, r->body);
	curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
	curl_easy_setopt(r->easy, CURLOPT_TIMEOUT, 30L);
	curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(r->easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
	if (curl_multi_add_handle(multi, r->easy) != CURLM_OK)
		die("curl_multi_add_handle");
	inflight_total++;
	if (t >= win_lo && t < win_hi)
		tal[kind].sent++;
}

/* The verified (or, with --no-verify, decoded) payload of a signed answer; NULL if not. */
static json_t *
answer_payload(const request *r)
{
	json_t	   *doc = json_loadb(r->resp, r->resp_len, 0, NULL);
	const char *jws;
	json_t	   *out = NULL;
	unsigned char *payload = NULL;
	size_t		plen = 0;

	if (doc == NULL || (jws = json_string_value(json_object_get(doc, "response"))) == NULL)
		goto done;
	if (opt.verify)
	{
		if (bc_jws_verify_es256(signing_pub, jws, strlen(jws), BC_JOSE_MAX, &payload, &plen) != BC_OK)
			goto done;
	}
	else
	{
		const char *p1 = strchr(jws, '.');
		const char *p2 = p1 ? strchr(p1 + 1, '.') : NULL;

		if (p2 == NULL)
			goto done;
		payload = malloc(bc_b64url_decoded_maxlen(p2 - p1 - 1) + 1);
		if (payload == NULL || bc_b64url_decode(p1 + 1, p2 - p1 - 1, payload,
												bc_b64url_decoded_maxlen(p2 - p1 - 1), &plen) != BC_OK)
			goto done;
	}
	out = json_loadb((const char *) payload, plen, 0, NULL);
	if (out != NULL && strcmp(json_string_value(json_object_get(out, "status")) ?: "", "issued") != 0)
	{
		json_decref(out);
		out = NULL;
	}
done:
	free(payload);
	json_decref(doc);
	return out;
}

/* Take up a new certificate (join, renewal): key, serial, notAfter. */
static int
take_cert(request *r, json_t *payload)
{
	node	   *nd = &nodes[r->node];
	const char *serial = json_string_value(json_object_get(payload, "serial"));
	const char *na = json_string_value(json_object_get(payload, "notAfter"));
	int64_t		t;

	if (serial == NULL || strlen(serial) >= sizeof(nd->serial) || na == NULL ||
		bc_cloud_parse_rfc3339(na, &t) != BC_OK)
		return 0;
	EVP_PKEY_free(nd->key);
	nd->key = r->kc.key;
	r->kc.key = NULL;
	strcpy(nd->serial, serial);
	nd->not_after = t;
	if (!nd->joined)
	{
		nd->joined = 1;
		njoined++;
	}
	return 1;
}

static void release_node(long n);

/* One answer: tally it, take up a certificate, release what the node held back. */
static void
complete(request *r, CURLcode res)
{
	long		code = 0;
	double		done = now_mono() - t_origin;
	int			in_win = r->t >= win_lo && r->t < win_hi;
	tally	   *t = &tal[r->kind];
	int			ok = 0;

	curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
	if (res != CURLE_OK)
	{
		if (in_win)
			t->neterr++;
		if (t->neterr <= 3 && in_win)
			fprintf(stderr, "fleet: %s: %s\n", kind_name[r->kind], curl_easy_strerror(res));
	}
	else if (code == 200)
	{
		json_t	   *p = answer_payload(r);

		if (p != NULL && (r->kind == K_SESSION || r->kind == K_JWT || take_cert(r, p)))
			ok = 1;
		json_decref(p);
		if (in_win)
		{
			if (ok)
			{
				t->ok++;
				tally_lat(t, (done - r->t) * 1000.0);
			}
			else
				t->other++;
		}
	}
	else if (in_win)
	{
		if (code == 503)
			t->s503++;
		else if (code == 429)
			t->s429++;
		else if (code == 403)
			t->s403++;
		else
			t->other++;
	}
	if (!ok && code != 503 && code != 429 && in_win && t->other + t->s403 <= 3)
		fprintf(stderr, "fleet: %s of node %ld: HTTP %ld %.200s\n", kind_name[r->kind], r->node,
				code, r->resp ? r->resp : "");
	if (r->kind == K_RENEW)
		nodes[r->node].renewing = 0;
	else if (r->kind != K_JOIN)
		nodes[r->node].inflight--;
	curl_multi_remove_handle(multi, r->easy);
	/* kept for the next request: its buffers stay allocated (every option is set again) */
	if (nfree_easy < MAX_FREE_EASY)
	{
		curl_easy_reset(r->easy);
		free_easy[nfree_easy++] = r->easy;
	}
	else
		curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->hdr);
	EVP_PKEY_free(r->kc.key);
	free(r->kc.csr64);
	free(r->body);
	free(r->resp);
	inflight_total--;
	if (r->kind != K_JOIN)
		release_node(r->node);
	free(r);
}

/* What node n held back: a renewal once nothing is in flight, then what waited for it. */
static void
release_node(long n)
{
	node	   *nd = &nodes[n];
	int			i;

	if (nd->renewing)
		return;
	if (nd->renew_pending)
	{
		if (nd->inflight > 0)
			return;
		nd->renew_pending = 0;
		send_req(K_RENEW, n, nd->renew_t);
		return;
	}
	for (i = 0; i < nd->ndef; i++)
		send_req(nd->def[i].kind, n, nd->def[i].t);
	nd->ndef = 0;
}

/* An event is due: send it, or hold it back behind the node's renewal. */
static void
dispatch(const event *e)
{
	node	   *nd = &nodes[e->node];

	if (e->kind == K_RENEW)
	{
		if (nd->inflight > 0 || nd->renewing || nd->renew_pending)
		{
			nd->renew_pending = 1;
			nd->renew_t = e->t;
		}
		else
			send_req(K_RENEW, e->node, e->t);
		return;
	}
	if (nd->renewing || nd->renew_pending)
	{
		if (nd->ndef < MAX_DEFERRED)
			nd->def[nd->ndef++] = (deferred) {e->t, e->kind};
		else if (e->t >= win_lo && e->t < win_hi)
			tal[e->kind].other++;
		return;
	}
	send_req(e->kind, e->node, e->t);
}

/* Run curl until something is due at point time `until` (or nothing is in flight). */
static void
pump(double until)
{
	int			running;
	CURLMsg    *m;
	int			left;

	for (;;)
	{
		double		wait = until - (now_mono() - t_origin);
		int			ms;

		curl_multi_perform(multi, &running);
		while ((m = curl_multi_info_read(multi, &left)) != NULL)
			if (m->msg == CURLMSG_DONE)
			{
				request    *r;

				curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **) &r);
				complete(r, m->data.result);
			}
		wait = until - (now_mono() - t_origin);
		if (wait <= 0)
			return;
		ms = (int) ceil(wait * 1000.0);	/* never 0: no spinning before a due event */
		if (ms > 50)
			ms = 50;
		curl_multi_poll(multi, NULL, 0, ms, NULL);
	}
}

/* Drain: wait until nothing is in flight (at most 60 s). */
static void
drain(void)
{
	double		end = now_mono() - t_origin + 60;

	while (inflight_total > 0 && now_mono() - t_origin < end)
		pump(now_mono() - t_origin + 0.05);
}

/* Run events (sorted) with their times relative to now. */
static void
run_events(event *ev, long n)
{
	long		i = 0;

	t_origin = now_mono();
	while (i < n)
	{
		double		now = now_mono() - t_origin;

		while (i < n && ev[i].t <= now)
			dispatch(&ev[i++]);
		if (i < n)
			pump(ev[i].t);
	}
	drain();
}

/* Events by time. */
static int
cmp_event(const void *a, const void *b)
{
	double		x = ((const event *) a)->t,
				y = ((const event *) b)->t;

	return (x > y) - (x < y);
}

/* Nodes [from, to) get one request of kind each, at most `window` in flight (not measured). */
static double
bulk(int kind, long *which, long count, long window)
{
	long		i = 0;
	double		t0 = now_mono();

	win_lo = win_hi = -1;
	t_origin = t0;
	pool_fill(count);
	while (i < count || inflight_total > 0)
	{
		while (i < count && inflight_total < window)
		{
			send_req(kind, which[i], now_mono() - t_origin);
			i++;
		}
		pump(now_mono() - t_origin + 0.01);
	}
	return now_mono() - t0;
}

/* Machine CPU jiffies (busy, total) from /proc/stat. */
static void
machine_cpu(double *busy, double *total)
{
	FILE	   *f = fopen("/proc/stat", "r");
	unsigned long long v[10] = {0};

	*busy = *total = 0;
	if (f == NULL)
		return;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
			   &v[4], &v[5], &v[6], &v[7]) == 8)
	{
		int			i;

		for (i = 0; i < 8; i++)
			*total += v[i];
		*busy = *total - v[3] - v[4];
	}
	fclose(f);
}

/* Own CPU seconds. */
static double
own_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Make sure nodes [0, n) are joined and their certificates outlive the point. */
static void
prepare_nodes(long n, double point_len)
{
	long	   *which = malloc(sizeof(long) * (n > 0 ? n : 1));
	long		k = 0,
				i;
	double		secs;
	time_t		wall = time(NULL);

	if (which == NULL)
		die("out of memory");
	if (n > nnodes_alloc)
	{
		nodes = realloc(nodes, sizeof(node) * n);
		if (nodes == NULL)
			die("out of memory");
		memset(nodes + nnodes_alloc, 0, sizeof(node) * (n - nnodes_alloc));
		nnodes_alloc = n;
	}
	for (i = 0; i < n; i++)
		if (!nodes[i].joined)
			which[k++] = i;
	if (k > 0)
	{
		long		before = njoined;

		secs = bulk(K_JOIN, which, k, opt.conns);
		fprintf(stderr, "fleet: joined %ld nodes in %.1f s (%.0f/s)\n", njoined - before, secs,
				(njoined - before) / secs);
		printf("{\"phase\":\"join\",\"joined\":%ld,\"asked\":%ld,\"secs\":%.2f,\"perSec\":%.1f}\n",
			   njoined - before, k, secs, (njoined - before) / secs);
		fflush(stdout);
		for (i = 0; i < n; i++)
			if (!nodes[i].joined)
				die("a node did not join (see above)");
	}
	/* upkeep: renew (not measured) every node whose certificate ends before the point does */
	k = 0;
	for (i = 0; i < n; i++)
		if (nodes[i].not_after < wall + point_len + 60)
			which[k++] = i;
	if (k > 0)
	{
		secs = bulk(K_RENEW, which, k, opt.conns);
		fprintf(stderr, "fleet: upkeep: renewed %ld nodes in %.1f s\n", k, secs);
	}
	free(which);
}

/* One point with n nodes; 1 when it passes. */
static int
run_point(long n)
{
	double		len = opt.warm + opt.secs;
	double		half = opt.cert_ttl / 2;
	double		rs = n / opt.session_every,
				rj = n / opt.jwt_every;
	long		cap = (long) ((rs + rj) * len * 1.3 + 1000 + n),
				ne = 0,
				i;
	event	   *ev;
	double		t;
	double		b0, tot0, b1, tot1, c0, c1, w0, w1;
	int			k,
				pass = 1;

	prepare_nodes(n, len);
	ev = malloc(sizeof(event) * cap);
	if (ev == NULL)
		die("out of memory");
	/* renewals: each node once per half-life, its phase uniform in that cycle */
	for (i = 0; i < n; i++)
	{
		t = urand() * half;
		if (t < len)
			ev[ne++] = (event) {t, K_RENEW, i};
	}
	/* sessions and JWT-SVIDs: Poisson processes over the nodes */
	for (t = -log(1 - urand()) / rs; t < len && ne < cap; t += -log(1 - urand()) / rs)
		ev[ne++] = (event) {t, K_SESSION, random() % n};
	for (t = -log(1 - urand()) / rj; t < len && ne < cap; t += -log(1 - urand()) / rj)
		ev[ne++] = (event) {t, K_JWT, random() % n};
	qsort(ev, ne, sizeof(event), cmp_event);
	{
		long		need = 0;

		for (i = 0; i < ne; i++)
			if (ev[i].kind != K_JWT)
				need++;
		pool_fill(need + 64);
	}
	for (k = 0; k < NKINDS; k++)
	{
		free(tal[k].lat);
		memset(&tal[k], 0, sizeof(tally));
	}
	win_lo = opt.warm;
	win_hi = len;
	fprintf(stderr, "fleet: point %ld nodes: %.0f renewals/s, %.0f sessions/s, %.0f JWT-SVIDs/s offered, %.0f s\n",
			n, n / half, rs, rj, len);
	machine_cpu(&b0, &tot0);
	c0 = own_cpu();
	w0 = now_mono();
	run_events(ev, ne);
	w1 = now_mono();
	c1 = own_cpu();
	machine_cpu(&b1, &tot1);
	free(ev);

	printf("{\"phase\":\"point\",\"nodes\":%ld,\"secs\":%.1f,\"warm\":%.1f,\"certTtl\":%.0f,"
		   "\"sessionEvery\":%.1f,\"jwtEvery\":%.1f,\"conns\":%ld",
		   n, opt.secs, opt.warm, opt.cert_ttl, opt.session_every, opt.jwt_every, opt.conns);
	{
		long		all_ok = 0;

		for (k = K_RENEW; k < NKINDS; k++)
		{
			tally	   *tk = &tal[k];
			double		p50,
						p99,
						mx;

			qsort(tk->lat, tk->nlat, sizeof(double), cmp_double);
			p50 = pct(tk->lat, tk->nlat, 50);
			p99 = pct(tk->lat, tk->nlat, 99);
			mx = tk->nlat ? tk->lat[tk->nlat - 1] : NAN;
			all_ok += tk->ok;
			printf(",\"%s\":{\"sent\":%ld,\"ok\":%ld,\"perSec\":%.1f,\"p50\":%.2f,\"p99\":%.2f,\"max\":%.2f,"
				   "\"s503\":%ld,\"s429\":%ld,\"s403\":%ld,\"other\":%ld,\"neterr\":%ld}",
				   kind_name[k], tk->sent, tk->ok, tk->ok / opt.secs, isnan(p50) ? -1 : p50,
				   isnan(p99) ? -1 : p99, isnan(mx) ? -1 : mx, tk->s503, tk->s429, tk->s403,
				   tk->other, tk->neterr);
			if (tk->nlat > 0 && p99 >= opt.p99_ms)
				pass = 0;
			if (tk->s503 || tk->s429 || tk->s403 || tk->other || tk->neterr)
				pass = 0;
		}
		/* the generator's CPU over the whole point (warm-up included), against the machine's */
		printf(",\"okPerSec\":%.1f,\"wallS\":%.2f,\"genCpuS\":%.2f,\"machineBusyS\":%.2f,\"genUsPerReq\":%.0f,"
			   "\"machineUsPerReq\":%.0f,\"pass\":%s}\n",
			   all_ok / opt.secs, w1 - w0, c1 - c0, (b1 - b0) / sysconf(_SC_CLK_TCK),
			   (c1 - c0) * 1e6 / fmax(1, tal[K_RENEW].sent + tal[K_SESSION].sent + tal[K_JWT].sent) * opt.secs / len,
			   (b1 - b0) / sysconf(_SC_CLK_TCK) * 1e6 / fmax(1, all_ok) * opt.secs / len,
			   pass ? "true" : "false");
	}
	fflush(stdout);
	fprintf(stderr, "fleet: point %ld nodes: %s (renew p99 %.1f, session p99 %.1f, jwt p99 %.1f ms)\n",
			n, pass ? "pass" : "FAIL", pct(tal[K_RENEW].lat, tal[K_RENEW].nlat, 99),
			pct(tal[K_SESSION].lat, tal[K_SESSION].nlat, 99), pct(tal[K_JWT].lat, tal[K_JWT].nlat, 99));
	return pass;
}

/* Read the service's signing key from service_keys() JSON. */
static void
load_keys(void)
{
	json_t	   *keys = json_load_file(opt.keys_path, 0, NULL);

	if (keys == NULL || bc_pkey_from_jwk_object(json_object_get(keys, "signingKey"), &signing_pub) != BC_OK)
		die("cannot read signingKey from the service keys");
	json_decref(keys);
}

/* Print usage and exit. */
static void
usage(void)
{
	fprintf(stderr, "usage: fleet --url URL --cacert FILE --service-keys FILE --tag TAG [--nodes N] [--search]\n"
			"  [--max-nodes N] [--secs S] [--warm W] [--cert-ttl T] [--session-every S] [--jwt-every S]\n"
			"  [--conns C] [--xff] [--p99-ms MS] [--resolution F] [--no-verify] [--seed N]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	int			i;
	long		lo = 0,
				hi = 0,
				n;

	for (i = 1; i < argc; i++)
	{
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

#define ARG(name) (strcmp(a, name) == 0 && v != NULL && ++i)
		if (ARG("--url"))
			opt.url = v;
		else if (ARG("--cacert"))
			opt.cacert = v;
		else if (ARG("--service-keys"))
			opt.keys_path = v;
		else if (ARG("--tag"))
			run_tag = v;
		else if (ARG("--nodes"))
			opt.nodes = atol(v);
		else if (ARG("--max-nodes"))
			opt.max_nodes = atol(v);
		else if (ARG("--secs"))
			opt.secs = atof(v);
		else if (ARG("--warm"))
			opt.warm = atof(v);
		else if (ARG("--cert-ttl"))
			opt.cert_ttl = atof(v);
		else if (ARG("--session-every"))
			opt.session_every = atof(v);
		else if (ARG("--jwt-every"))
			opt.jwt_every = atof(v);
		else if (ARG("--conns"))
			opt.conns = atol(v);
		else if (ARG("--p99-ms"))
			opt.p99_ms = atof(v);
		else if (ARG("--resolution"))
			opt.resolution = atof(v);
		else if (ARG("--seed"))
			opt.seed = (unsigned) atol(v);
		else if (strcmp(a, "--search") == 0)
			opt.search = 1;
		else if (strcmp(a, "--xff") == 0)
			opt.xff = 1;
		else if (strcmp(a, "--no-verify") == 0)
			opt.verify = 0;
		else
			usage();
#undef ARG
	}
	if (opt.url == NULL || opt.cacert == NULL || opt.keys_path == NULL || run_tag == NULL ||
		opt.nodes < 1 || opt.secs <= 0 || opt.cert_ttl < 60 || opt.session_every <= 0 ||
		opt.jwt_every <= 0 || opt.conns < 1)
		usage();
	srandom(opt.seed);
	load_keys();
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || (multi = curl_multi_init()) == NULL)
		die("curl init");
	curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, opt.conns);
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, opt.conns);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, opt.conns);

	if (!opt.search)
	{
		int			pass = run_point(opt.nodes);

		printf("{\"phase\":\"result\",\"largest\":%ld}\n", pass ? opt.nodes : 0L);
		return 0;
	}
	/* grow by doubling until a point fails, then bisect */
	n = opt.nodes;
	for (;;)
	{
		if (run_point(n))
		{
			lo = n;
			if (n >= opt.max_nodes)
				break;
			n = n * 2 > opt.max_nodes ? opt.max_nodes : n * 2;
		}
		else
		{
			hi = n;
			break;
		}
	}
	/* down to a sixteenth of the first N at most: below that, "fewer than hi" says it */
	while (hi > 0 && hi - lo > (long) fmax(1, lo * opt.resolution) && hi > opt.nodes / 16)
	{
		n = lo + (hi - lo) / 2;
		if (run_point(n))
			lo = n;
		else
			hi = n;
	}
	if (hi > 0)
		printf("{\"phase\":\"result\",\"largest\":%ld,\"firstFailing\":%ld}\n", lo, hi);
	else
		printf("{\"phase\":\"result\",\"largest\":%ld}\n", lo);
	return 0;
}
