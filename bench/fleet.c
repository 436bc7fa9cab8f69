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

#include <libpq-fe.h>

#include "bc_common.h"
#include "soft_tpm.h"

enum
{
	K_JOIN, K_JOIN2, K_RENEW, K_SESSION, K_JWT, K_ATT1, K_ATT2, NKINDS
};
static const char *const kind_name[NKINDS] = {"join", "join-tpm2", "renew", "session", "jwt-svid",
"attest-challenge", "attest-quote"};
static const char *const kind_path[NKINDS] = {"/v1/join", "/v1/join", "/v1/renew", "/v1/session",
"/v1/jwt-svid", "/v1/attest", "/v1/attest"};

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
	/* a TPM machine (--tpm-share): its simulated TPM and what a round left */
	int			tpm;
	st_obj	   *ek,				/* allocated for TPM machines only */
			   *ak;
	char	   *state;			/* the last challenge's sealed state */
	unsigned char secret[64];	/* the join's activated credential */
	size_t		secret_len;
	unsigned char nonce[32];	/* attest round 1's nonce */
	int			pcrs[24];		/* and its PCRs */
	int			npcrs;
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
	double		tpm_share;
	double		attest_every;
	const char *eventlog;
	const char *pcr_values;
	const char *admin_db;
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
static char *eventlog64;			/* the TPM machines' UEFI event log, base64url */
static unsigned char pcrval[24][32];	/* its replay: the SHA-256 bank's PCRs (others zero) */
static PGconn *admin;			/* --admin-db: enrolls the TPM machines' EKs */
static char tenant_id[64], pool_id[64];

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

/* ------------------------------------------------ the TPM machines' rounds */

/* Set o[name] to the base64url of n bytes. */
static void
set_b64(json_t *o, const char *name, const unsigned char *b, size_t n)
{
	char	   *v = bc_b64url_encode_alloc(b, n);

	if (v == NULL || json_object_set_new(o, name, json_string(v)) != 0)
		die("out of memory");
	free(v);
}

/* The simulated TPM's clock, ms: moving forward, never reset (resetCount 1). */
static uint64_t
tpm_clock(void)
{
	return (uint64_t) (now_mono() * 1000.0) + 1000000;
}

/*
 * The TPM members of a join round or a renewal into o: akPub, the node key
 * (the CSR's, key) as a TPM key, and its TPM2_Certify by the AK.
 */
static void
tpm_key_members(json_t *o, node *nd, EVP_PKEY *key)
{
	st_obj		nk;
	unsigned char att[BC_TPM_STRUCT_MAX],
				sig[BC_TPM_STRUCT_MAX];
	size_t		al,
				sl;

	EVP_PKEY_up_ref(key);
	if (st_make(&nk, ST_NODE_KEY, key) != 0 ||
		st_certify(nd->ak, &nk, tpm_clock(), 1, att, &al, sig, &sl) != 0)
		die("cannot certify a node key");
	set_b64(o, "akPub", nd->ak->wire, nd->ak->wire_len);
	set_b64(o, "nodeKeyPub", nk.wire, nk.wire_len);
	set_b64(o, "certifyInfo", att, al);
	set_b64(o, "certifySignature", sig, sl);
	st_free(&nk);
}

/* A quote by the node's AK over pcrs[0..n) with qualifyingData extra into o. */
static void
tpm_quote_members(json_t *o, node *nd, const unsigned char extra[32], const int *pcrs, int n)
{
	unsigned char vals[24][32];
	unsigned char att[BC_TPM_STRUCT_MAX],
				sig[BC_TPM_STRUCT_MAX];
	size_t		al,
				sl;
	int			i;

	for (i = 0; i < n; i++)
		memcpy(vals[i], pcrval[pcrs[i]], 32);
	if (st_quote(nd->ak, extra, pcrs, n, (const unsigned char (*)[32]) vals, tpm_clock(), 1,
				 att, &al, sig, &sl) != 0)
		die("cannot quote");
	set_b64(o, "quote", att, al);
	set_b64(o, "quoteSignature", sig, sl);
}

/* The tpm attestor's evidence of a join round (round 2: with the activated secret and the quote). */
static char *
tpm_join_attestation(node *nd, const keycsr *kc, int round2)
{
	json_t	   *ev = json_object();
	char	   *out;
	char	   *js;

	set_b64(ev, "ekPub", nd->ek->wire, nd->ek->wire_len);
	tpm_key_members(ev, nd, kc->key);
	if (round2)
	{
		static const int pcrs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
		unsigned char csr_h[64];
		unsigned char buf[64 + 32];
		unsigned char extra[32];
		size_t		hl = 0;

		/* extraData = SHA-256(secret || SHA-256(CSR DER)) */
		if (bc_b64url_decode(kc->csr_sha256, strlen(kc->csr_sha256), csr_h, sizeof(csr_h), &hl) != BC_OK ||
			hl != 32 || nd->secret_len != 32)
			die("a join's second round without its secret");
		memcpy(buf, nd->secret, 32);
		memcpy(buf + 32, csr_h, 32);
		bc_sha256(buf, 64, extra);
		json_object_set_new(ev, "state", json_string(nd->state));
		set_b64(ev, "secret", nd->secret, nd->secret_len);
		tpm_quote_members(ev, nd, extra, pcrs, 8);
	}
	js = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	if (js == NULL || (out = bc_b64url_encode_alloc((const unsigned char *) js, strlen(js))) == NULL)
		die("out of memory");
	free(js);
	return out;
}

/* Attest round 2: the quote over round 1's PCRs and nonce, their values, the event log. */
static json_t *
attest_quote_body(node *nd, char *proof)
{
	json_t	   *o = json_object();
	json_t	   *vals = json_object();
	unsigned char buf[14 + 32];
	unsigned char extra[32];
	char		hex[65];
	char		idx[8];
	int			i,
				j;

	memcpy(buf, "bc_join/attest", 14);
	memcpy(buf + 14, nd->nonce, 32);
	bc_sha256(buf, sizeof(buf), extra);
	json_object_set_new(o, "proof", json_string(proof));
	json_object_set_new(o, "state", json_string(nd->state));
	set_b64(o, "akPub", nd->ak->wire, nd->ak->wire_len);
	tpm_quote_members(o, nd, extra, nd->pcrs, nd->npcrs);
	for (i = 0; i < nd->npcrs; i++)
	{
		for (j = 0; j < 32; j++)
			snprintf(hex + 2 * j, 3, "%02x", pcrval[nd->pcrs[i]][j]);
		snprintf(idx, sizeof(idx), "%d", nd->pcrs[i]);
		json_object_set_new(vals, idx, json_string(hex));
	}
	json_object_set_new(o, "pcrValues", json_pack("{s:o}", "sha256", vals));
	json_object_set_new(o, "eventLog", json_string(eventlog64));
	return o;
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
				att = nd->tpm ? tpm_join_attestation(nd, &r->kc, 0) :
					bc_b64url_encode_alloc((const unsigned char *) name, strlen(name));
				doc = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s}}", "csr", r->kc.csr64,
								"role", "node", "attestor", nd->tpm ? "tpm" : "sim-restricted",
								"attestation", att, "claims", "hostname", host, "arch", "x86_64");
				free(att);
				break;
			}
		case K_JOIN2:
			{
				char	   *att = tpm_join_attestation(nd, &r->kc, 1);
				char		host[32];

				snprintf(host, sizeof(host), "sim-%ld", r->node);
				doc = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s}}", "csr", r->kc.csr64,
								"role", "node", "attestor", "tpm", "attestation", att,
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
			if (nd->tpm)
			{
				json_t	   *t = json_object();

				tpm_key_members(t, nd, r->kc.key);
				json_object_set_new(doc, "tpm", t);
			}
			break;
		case K_ATT1:
		case K_ATT2:
			proof = sign_doc(nd->key, json_pack("{s:s, s:s, s:I}", "purpose", "attest",
												"serial", nd->serial, "iat", iat));
			doc = r->kind == K_ATT1 ? json_pack("{s:s}", "proof", proof) : attest_quote_body(nd, proof);
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

/*
 * Send one request of kind for node n, scheduled at t; carry: the key and CSR
 * of a join's first round for its second (taken over), else NULL.
 */
static void
send_req_kc(int kind, long n, double t, keycsr *carry)
{
	request    *r = calloc(1, sizeof(request));
	char		url[512];

	if (r == NULL)
		die("out of memory");
	r->kind = kind;
	r->node = n;
	r->t = t;
	if (carry != NULL)
	{
		r->kc = *carry;
		memset(carry, 0, sizeof(*carry));
	}
	else if (kind == K_JOIN || kind == K_RENEW || kind == K_SESSION)
		r->kc = pool_take();
	r->body = make_body(r);
	if (kind == K_RENEW)
		nodes[n].renewing = 1;
	else if (kind != K_JOIN && kind != K_JOIN2)
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

static void
send_req(int kind, long n, double t)
{
	send_req_kc(kind, n, t, NULL);
}

/* The verified (or, with --no-verify, decoded) payload of a signed answer, any status; NULL if not. */
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

/* A string member of a payload copied into a node's field (malloc), 0 if absent. */
static int
take_state(node *nd, const char *st)
{
	if (st == NULL)
		return 0;
	free(nd->state);
	nd->state = strdup(st);
	return nd->state != NULL;
}

/*
 * A signed answer of r's kind taken up: a certificate (join, renewal), a
 * credential, or a challenge whose second round is sent now (a TPM join's:
 * the credential activated; an attestation's: the quote); 1 when it is the
 * answer this kind expects.
 */
static int
taken(request *r, json_t *p)
{
	node	   *nd = &nodes[r->node];
	const char *status = json_string_value(json_object_get(p, "status"));

	if (status == NULL)
		return 0;
	switch (r->kind)
	{
		case K_JOIN:
			if (nd->tpm && strcmp(status, "challenge") == 0)
			{
				const char *c64 = json_string_value(json_object_get(p, "challenge"));
				unsigned char buf[4096],
							blob[1024],
							enc[1024];
				size_t		bl = 0,
							bn = 0,
							en = 0;
				json_t	   *ch;
				int			ok;

				if (c64 == NULL || bc_b64url_decode(c64, strlen(c64), buf, sizeof(buf), &bl) != BC_OK ||
					(ch = json_loadb((const char *) buf, bl, 0, NULL)) == NULL)
					return 0;
				ok = take_state(nd, json_string_value(json_object_get(ch, "state"))) &&
					json_string_value(json_object_get(ch, "credentialBlob")) != NULL &&
					json_string_value(json_object_get(ch, "encryptedSecret")) != NULL &&
					bc_b64url_decode(json_string_value(json_object_get(ch, "credentialBlob")),
									 strlen(json_string_value(json_object_get(ch, "credentialBlob"))),
									 blob, sizeof(blob), &bn) == BC_OK &&
					bc_b64url_decode(json_string_value(json_object_get(ch, "encryptedSecret")),
									 strlen(json_string_value(json_object_get(ch, "encryptedSecret"))),
									 enc, sizeof(enc), &en) == BC_OK &&
					bc_tpm_activate_credential(&nd->ek->pub, nd->ek->key, nd->ak->name, nd->ak->name_len,
											   blob, bn, enc, en, nd->secret, &nd->secret_len) == BC_OK;
				json_decref(ch);
				if (!ok)
					return 0;
				send_req_kc(K_JOIN2, r->node, now_mono() - t_origin, &r->kc);
				return 1;
			}
			/* FALLTHROUGH */
		case K_JOIN2:
		case K_RENEW:
			return strcmp(status, "issued") == 0 && take_cert(r, p);
		case K_SESSION:
		case K_JWT:
			return strcmp(status, "issued") == 0;
		case K_ATT1:
			{
				const char *n64 = json_string_value(json_object_get(p, "nonce"));
				json_t	   *pcrs = json_object_get(p, "pcrs");
				size_t		nl = 0,
							i;
				json_t	   *v;

				if (strcmp(status, "challenge") != 0 || n64 == NULL ||
					bc_b64url_decode(n64, strlen(n64), nd->nonce, sizeof(nd->nonce), &nl) != BC_OK ||
					nl != 32 || !json_is_array(pcrs) || json_array_size(pcrs) > 24 ||
					!take_state(nd, json_string_value(json_object_get(p, "state"))))
					return 0;
				nd->npcrs = 0;
				json_array_foreach(pcrs, i, v)
				{
					if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 23)
						return 0;
					nd->pcrs[nd->npcrs++] = (int) json_integer_value(v);
				}
				send_req(K_ATT2, r->node, now_mono() - t_origin);
				return 1;
			}
		case K_ATT2:
			return strcmp(status, "attested") == 0;
	}
	return 0;
}

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

		ok = p != NULL && taken(r, p);
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
	else if (r->kind != K_JOIN && r->kind != K_JOIN2)
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
	if (r->kind != K_JOIN && r->kind != K_JOIN2)
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

/* Node i is a TPM machine (--tpm-share: spread evenly over the indexes). */
static int
is_tpm(long i)
{
	return opt.tpm_share > 0 && floor((i + 1) * opt.tpm_share) > floor(i * opt.tpm_share);
}

/*
 * The operator's step before TPM machines join: their EKs enrolled to the
 * bench tenant's pool (bc_join.enroll_tpm_ek, the documented SQL), hex[0..n)
 * the EKs' SPKI SHA-256.
 */
static void
enroll_eks(char (*hex)[65], long n)
{
	long		i = 0;

	while (i < n)
	{
		long		m = n - i < 10000 ? n - i : 10000,
					j;
		char	   *arr = malloc(m * 66 + 3);
		char	   *w = arr;
		const char *vals[3];
		PGresult   *res;

		if (arr == NULL)
			die("out of memory");
		*w++ = '{';
		for (j = 0; j < m; j++)
		{
			memcpy(w, hex[i + j], 64);
			w += 64;
			*w++ = j + 1 < m ? ',' : '}';
		}
		*w = '\0';
		vals[0] = tenant_id;
		vals[1] = pool_id;
		vals[2] = arr;
		res = PQexecParams(admin, "SELECT count(bc_join.enroll_tpm_ek(x, $1, $2)) FROM unnest($3::text[]) x",
						   3, NULL, vals, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			fprintf(stderr, "fleet: enrolling EKs: %s", PQerrorMessage(admin));
			die("cannot enroll the TPM machines' EKs");
		}
		PQclear(res);
		free(arr);
		i += m;
	}
}

/* Make node i a TPM machine: an EK and an AK of its own; its EK's SPKI SHA-256 in hex. */
static void
make_tpm(node *nd, char hex[65])
{
	unsigned char h[BC_SHA256_LEN];
	int			j;

	nd->tpm = 1;
	nd->ek = malloc(sizeof(st_obj));
	nd->ak = malloc(sizeof(st_obj));
	if (nd->ek == NULL || nd->ak == NULL ||
		st_make(nd->ek, ST_EK, bc_p256_generate()) != 0 ||
		st_make(nd->ak, ST_AK, bc_p256_generate()) != 0 ||
		bc_tpm_ek_spki_sha256(&nd->ek->pub, h) != BC_OK)
		die("cannot make a simulated TPM");
	for (j = 0; j < BC_SHA256_LEN; j++)
		snprintf(hex + 2 * j, 3, "%02x", h[j]);
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
		char		(*hex)[65] = malloc(sizeof(*hex) * k);
		long		ne = 0;

		if (hex == NULL)
			die("out of memory");
		for (i = 0; i < k; i++)
			if (is_tpm(which[i]) && !nodes[which[i]].tpm)
				make_tpm(&nodes[which[i]], hex[ne++]);
		if (ne > 0)
			enroll_eks(hex, ne);
		free(hex);

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
	/* attestation: each TPM machine once per --attest-every, its phase uniform */
	if (opt.attest_every > 0)
		for (i = 0; i < n; i++)
			if (nodes[i].tpm)
				for (t = urand() * opt.attest_every; t < len; t += opt.attest_every)
				{
					if (ne == cap)
					{
						cap *= 2;
						ev = realloc(ev, sizeof(event) * cap);
						if (ev == NULL)
							die("out of memory");
					}
					ev[ne++] = (event) {t, K_ATT1, i};
				}
	qsort(ev, ne, sizeof(event), cmp_event);
	{
		long		need = 0;

		for (i = 0; i < ne; i++)
			if (ev[i].kind == K_RENEW || ev[i].kind == K_SESSION)
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
	{
		long		ntpm = 0;

		for (i = 0; i < n; i++)
			ntpm += nodes[i].tpm;
		fprintf(stderr, "fleet: point %ld nodes (%ld TPM machines): %.0f renewals/s, %.0f sessions/s, "
				"%.0f JWT-SVIDs/s, %.1f attestations/s offered, %.0f s\n",
				n, ntpm, n / half, rs, rj, opt.attest_every > 0 ? ntpm / opt.attest_every : 0.0, len);
	}
	machine_cpu(&b0, &tot0);
	c0 = own_cpu();
	w0 = now_mono();
	run_events(ev, ne);
	w1 = now_mono();
	c1 = own_cpu();
	machine_cpu(&b1, &tot1);
	free(ev);

	printf("{\"phase\":\"point\",\"nodes\":%ld,\"secs\":%.1f,\"warm\":%.1f,\"certTtl\":%.0f,"
		   "\"sessionEvery\":%.1f,\"jwtEvery\":%.1f,\"conns\":%ld,\"tpmShare\":%.3f,\"attestEvery\":%.1f",
		   n, opt.secs, opt.warm, opt.cert_ttl, opt.session_every, opt.jwt_every, opt.conns,
		   opt.tpm_share, opt.attest_every);
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
			   (c1 - c0) * 1e6 / fmax(1, tal[K_RENEW].sent + tal[K_SESSION].sent + tal[K_JWT].sent +
									  tal[K_ATT1].sent + tal[K_ATT2].sent) * opt.secs / len,
			   (b1 - b0) / sysconf(_SC_CLK_TCK) * 1e6 / fmax(1, all_ok) * opt.secs / len,
			   pass ? "true" : "false");
	}
	fflush(stdout);
	fprintf(stderr, "fleet: point %ld nodes: %s (renew p99 %.1f, session p99 %.1f, jwt p99 %.1f, "
			"attest p99 %.1f + %.1f ms)\n",
			n, pass ? "pass" : "FAIL", pct(tal[K_RENEW].lat, tal[K_RENEW].nlat, 99),
			pct(tal[K_SESSION].lat, tal[K_SESSION].nlat, 99), pct(tal[K_JWT].lat, tal[K_JWT].nlat, 99),
			pct(tal[K_ATT1].lat, tal[K_ATT1].nlat, 99), pct(tal[K_ATT2].lat, tal[K_ATT2].nlat, 99));
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

/*
 * The TPM machines' inputs: the event log (base64url once), its replay's
 * PCR values ("<pcr> <64 hex>" lines), and the bench tenant's pool to enroll
 * their EKs to.
 */
static void
load_tpm_inputs(void)
{
	FILE	   *f = fopen(opt.eventlog, "rb");
	unsigned char *buf = malloc(1 << 20);
	size_t		n;
	int			pcr;
	char		hex[80];
	PGresult   *res;

	if (f == NULL || buf == NULL)
		die("cannot read the event log");
	n = fread(buf, 1, 1 << 20, f);
	fclose(f);
	if (n == 0 || (eventlog64 = bc_b64url_encode_alloc(buf, n)) == NULL)
		die("cannot read the event log");
	free(buf);
	if ((f = fopen(opt.pcr_values, "r")) == NULL)
		die("cannot read the PCR values");
	while (fscanf(f, "%d %79s", &pcr, hex) == 2)
	{
		int			j;

		if (pcr < 0 || pcr > 23 || strlen(hex) != 64)
			die("a malformed PCR value line");
		for (j = 0; j < 32; j++)
			if (sscanf(hex + 2 * j, "%2hhx", &pcrval[pcr][j]) != 1)
				die("a malformed PCR value");
	}
	fclose(f);
	admin = PQconnectdb(opt.admin_db);
	if (PQstatus(admin) != CONNECTION_OK)
		die("cannot connect to --admin-db");
	res = PQexec(admin, "SELECT t.id, p.id FROM bc_join.tenants t JOIN bc_join.pools p ON p.tenant_id = t.id "
				 "WHERE t.name = 'bench' ORDER BY p.id LIMIT 1");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		die("no tenant bench with a pool");
	snprintf(tenant_id, sizeof(tenant_id), "%s", PQgetvalue(res, 0, 0));
	snprintf(pool_id, sizeof(pool_id), "%s", PQgetvalue(res, 0, 1));
	PQclear(res);
}

/* Print usage and exit. */
static void
usage(void)
{
	fprintf(stderr, "usage: fleet --url URL --cacert FILE --service-keys FILE --tag TAG [--nodes N] [--search]\n"
			"  [--max-nodes N] [--secs S] [--warm W] [--cert-ttl T] [--session-every S] [--jwt-every S]\n"
			"  [--conns C] [--xff] [--p99-ms MS] [--resolution F] [--no-verify] [--seed N]\n"
			"  [--tpm-share F --admin-db CONNINFO --eventlog FILE --pcr-values FILE [--attest-every S]]\n");
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
		else if (ARG("--tpm-share"))
			opt.tpm_share = atof(v);
		else if (ARG("--attest-every"))
			opt.attest_every = atof(v);
		else if (ARG("--eventlog"))
			opt.eventlog = v;
		else if (ARG("--pcr-values"))
			opt.pcr_values = v;
		else if (ARG("--admin-db"))
			opt.admin_db = v;
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
		opt.jwt_every <= 0 || opt.conns < 1 || opt.tpm_share < 0 || opt.tpm_share > 1 ||
		opt.attest_every < 0 ||
		(opt.tpm_share > 0 && (opt.eventlog == NULL || opt.pcr_values == NULL || opt.admin_db == NULL)))
		usage();
	srandom(opt.seed);
	load_keys();
	if (opt.tpm_share > 0)
		load_tpm_inputs();
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
