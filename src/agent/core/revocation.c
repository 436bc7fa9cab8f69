/*
 * revocation.c: bcd run's revocation watch (revocation.h; issue 45;
 * docs/agent.md, "Revocation").
 *
 * Every --status-interval seconds (default 10), on its own thread with its
 * own HTTPS client, with the node certificate of node-chain.pem (the one
 * published to the provisioner; a round that reads another one, a renewal
 * in between, is skipped):
 *
 *   the CRL   (while the Workload API is served, or --hook-crl) GET /v1/crl
 *             with If-None-Match (the ETag of the last one taken): 304 or
 *             the same bytes change nothing; a new CRL is verified
 *             (revcheck.c: issued by a CA of the node's chain that chains
 *             to the pinned root, its signature, thisUpdate never older
 *             than the one held), handed to the provisioner (the Workload
 *             API pushes it, hooks get crl.pem), and the node certificate
 *             looked up in it;
 *   OCSP      POST /v1/ocsp of one SHA-256 CertID of the node certificate,
 *             no nonce; the answer verified (revcheck.c: signed by an
 *             id-kp-OCSPSigning responder chaining to the pinned root,
 *             current, thisUpdate never older than the newest taken).
 *
 * A node certificate revoked, by either: for cACompromise the main thread
 * is asked to renew at once (renewal.c: a new key; the service lets a
 * certificate revoked so renew once, under the new intermediate); for any
 * other reason the provisioner refuses every ask and the Workload API ends
 * its streams (bcd_provisioner_revoke) until a credential of another serial
 * is published.  An answer that does not come or does not verify changes
 * nothing: logged, the same line at most once in ten minutes.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/x509.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/log.h"
#include "core/revcheck.h"
#include "core/revocation.h"
#include "core/store.h"
#include "core/ticker.h"
#include "core/transport.h"
#include "core/trust_bundles.h"
#include "core/verify.h"

/* The service's intermediates are fetched again at most this often (the gateway's copy lives 10 s). */
#define CAS_AGAIN_S 10
/*
 * The service keys (GET /v1/service-keys) taken up every this many status
 * intervals, unless --keys-interval says otherwise: a signing key an operator marked compromised (and so no longer
 * published) is dropped by every bcd within that time, not at its next
 * renewal (bcd_service_keys_refresh: the rollover rules of service_keys.c).
 * So are the jwt-svid keys (their jwtKeys) and, beside them, the federated
 * trust domains' bundles (GET /v1/trust-bundles, trust_bundles.c).
 */
#define KEYS_EVERY_ROUNDS 6

struct bcd_revwatch
{
	const bcd_run_opts *o;
	const bcd_service_keys *keys;
	bcd_provisioner *prov;
	bcd_http   *http;
	int			want_crl;
	long		interval;
	bcd_ticker	ticker;			/* the thread: watch_round every interval */
	atomic_int	renew;			/* a CA compromise: renew at once (daemon.c) */
	atomic_int	rejoin;			/* revoked, --token-file changed: join again (daemon.c) */
	int			revoked_seen;	/* the node's revocation seen (a publish of another serial resets it) */
	struct stat token_st;		/* --token-file as it was then, or at the last join asked for */
	/* the thread's own */
	char		renew_asked[41];	/* the serial a renewal was asked for */
	char		serial[41];		/* the node certificate of the last round */
	STACK_OF(X509) *extra_cas;	/* the service's current intermediates (GET /v1/service-keys) */
	int			want_cas;		/* something did not verify: fetch them */
	time_t		keys_taken;		/* when the service keys were last taken up */
	time_t		cas_fetched;	/* when they were last fetched */
	unsigned char *crl;			/* the CRL taken last (DER) */
	size_t		crl_len;
	X509_CRL   *crl_parsed;
	int64_t		crl_this_update;
	char		etag[256];
	char		ocsp_serial[41];	/* the certificate ocsp_newest is of */
	int64_t		ocsp_newest;	/* the newest thisUpdate taken */
	int			ocsp_said;		/* the state of the last answer logged: 1 good, 2 unknown */
	int			not_modified_said;	/* the first 304 logged */
	bcd_said	said[2];		/* the last line said, per topic (0 CRL, 1 OCSP) */
};

/* Log a line of topic (0 CRL, 1 OCSP) unless it is the one said last (bcd_vlog_again). */
static void
say(bcd_revwatch *rw, int topic, const char *fmt,...) __attribute__((format(printf, 3, 4)));

static void
say(bcd_revwatch *rw, int topic, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	bcd_vlog_again(&rw->said[topic], "revocation", fmt, ap);
	va_end(ap);
}

/* 1 when o's daemon runs the watch (revocation.h). */
int
bcd_revwatch_wanted(const bcd_run_opts *o)
{
	return !o->once && !o->memory_only && o->status_interval > 0;
}

/* 1 when the watch fetches the CRL (revocation.h). */
int
bcd_crl_wanted(const bcd_run_opts *o)
{
	int			workload = (o->workload_api != NULL ? strcmp(o->workload_api, "off") != 0 :
							o->n_workload_rules > 0) || o->n_svid_files > 0;

	return bcd_revwatch_wanted(o) && (workload || o->hook_crl);
}

/*
 * The node is revoked: it stays so until an operator lets it back.  With
 * --token-file, that is a new token written there: the file as it was when
 * the revocation was seen is remembered, and each change of it (inode,
 * size, mtime) asks the main thread to join again once; a token the node
 * held already never brings it back by itself.  Without one, said once.
 */
static void
maybe_rejoin(bcd_revwatch *rw)
{
	const bcd_run_opts *o = rw->o;
	struct stat st;

	/* a quarantine revokes too: its readmission is the attestation loop's (attest.c) */
	if (bcd_provisioner_quarantined(rw->prov))
		return;
	memset(&st, 0, sizeof(st));
	if (o->token_file != NULL)
		(void) stat(o->token_file, &st);
	if (!rw->revoked_seen)
	{
		rw->revoked_seen = 1;
		rw->token_st = st;
		bcd_log("revocation: the node stays revoked until an operator lets it back: %s%s",
				o->token_file != NULL ? "a new join token written into " :
				"bcd run --token-file FILE with a new join token",
				o->token_file != NULL ? o->token_file : "");
		return;
	}
	if (o->token_file == NULL ||
		(st.st_ino == rw->token_st.st_ino && st.st_size == rw->token_st.st_size &&
		 st.st_mtim.tv_sec == rw->token_st.st_mtim.tv_sec &&
		 st.st_mtim.tv_nsec == rw->token_st.st_mtim.tv_nsec))
		return;
	rw->token_st = st;
	atomic_store(&rw->rejoin, 1);
}

/*
 * The node certificate serial is revoked (reason, at), as source says: a CA
 * compromise asks for a renewal at once (once per serial), anything else is
 * the provisioner's refusal.
 */
static void
node_revoked(bcd_revwatch *rw, const char *serial, int reason, int64_t at, const char *source)
{
	if (reason == BCD_REASON_CA_COMPROMISE)
	{
		if (strcmp(rw->renew_asked, serial) != 0)
		{
			snprintf(rw->renew_asked, sizeof(rw->renew_asked), "%s", serial);
			bcd_log("revocation: the node certificate %s was revoked for cACompromise (%s): "
					"its CA's key is compromised; renewing at once, with a new key", serial,
					source);
			atomic_store(&rw->renew, 1);
		}
		return;
	}
	bcd_provisioner_revoke(rw->prov, serial, bcd_reason_name(reason), at, source);
	maybe_rejoin(rw);
}

/* cert's serial (32 hex digits, bcd_cert_serial_hex) into out; 0, or -1. */
static int
serial_of(X509 *cert, char out[41])
{
	return bcd_cert_serial_hex(cert, out) == BC_OK ? 0 : -1;
}

/* One round of the CRL: fetched, verified when new, taken; the node looked up in it. */
static void
crl_round(bcd_revwatch *rw, X509 *leaf, STACK_OF(X509) *cas, const char *serial)
{
	bcd_http_reply reply;
	bcd_crl_checked got;
	char		etag[256];
	char		err[512];
	bcd_rc		rc;

	rc = bcd_http_fetch(rw->http, BCD_PATH_CRL, NULL, NULL, 0,
						rw->crl != NULL ? rw->etag : NULL, BCD_CRL_MAX, &reply, etag,
						sizeof(etag), err, sizeof(err));
	if (rc == BCD_RC_STOPPED)
		return;
	if (rc != BCD_RC_OK)
	{
		say(rw, 0, "GET %s: no answer (%s); the CRL held is kept", BCD_PATH_CRL, err);
		goto lookup;
	}
	if (reply.status == 304)
	{
		if (!rw->not_modified_said)
			bcd_log("revocation: GET %s: 304 Not Modified (If-None-Match with the gateway's "
					"ETag): the CRL held is current", BCD_PATH_CRL);
		rw->not_modified_said = 1;
		goto lookup;
	}
	if (reply.status != 200)
	{
		bcd_http_describe(&reply, err, sizeof(err));
		say(rw, 0, "GET %s: %s; the CRL held is kept", BCD_PATH_CRL, err);
		goto lookup;
	}
	/* the same bytes (a gateway without ETag): nothing new */
	if (rw->crl != NULL && reply.len == rw->crl_len && memcmp(reply.body, rw->crl, reply.len) == 0)
	{
		snprintf(rw->etag, sizeof(rw->etag), "%s", etag);
		goto lookup;
	}
	if (bcd_crl_verify((const unsigned char *) reply.body, reply.len, rw->keys->node_ca, cas,
					   &got, err, sizeof(err)) != 0)
	{
		say(rw, 0, "the CRL of GET %s does not verify (%s): ignored, the one held is kept",
			BCD_PATH_CRL, err);
		rw->want_cas = 1;
		goto lookup;
	}
	if (got.this_update < rw->crl_this_update)
	{
		say(rw, 0, "the CRL of GET %s is older than the one held (thisUpdate %lld < %lld): "
			"ignored", BCD_PATH_CRL, (long long) got.this_update,
			(long long) rw->crl_this_update);
		X509_CRL_free(got.crl);
		goto lookup;
	}
	free(rw->crl);
	X509_CRL_free(rw->crl_parsed);
	rw->crl = (unsigned char *) reply.body;
	rw->crl_len = reply.len;
	reply.body = NULL;
	rw->crl_parsed = got.crl;
	rw->crl_this_update = got.this_update;
	snprintf(rw->etag, sizeof(rw->etag), "%s", etag);
	bcd_provisioner_set_crl(rw->prov, rw->crl, rw->crl_len);
	rw->said[0].line[0] = '\0';
	bcd_log("revocation: a new CRL taken (%zu bytes, %d revoked, thisUpdate %lld)", rw->crl_len,
			sk_X509_REVOKED_num(X509_CRL_get_REVOKED(rw->crl_parsed)) > 0 ?
			sk_X509_REVOKED_num(X509_CRL_get_REVOKED(rw->crl_parsed)) : 0,
			(long long) rw->crl_this_update);
lookup:
	bcd_http_reply_free(&reply);
	if (leaf != NULL && rw->crl_parsed != NULL)
	{
		int			reason;
		int64_t		at;

		if (bcd_crl_lists(rw->crl_parsed, leaf, &reason, &at))
			node_revoked(rw, serial, reason, at, "the CRL");
	}
}

/* One OCSP round about leaf (issued by issuer). */
static void
ocsp_round(bcd_revwatch *rw, X509 *leaf, X509 *issuer, STACK_OF(X509) *cas, const char *serial)
{
	unsigned char *req = NULL;
	size_t		req_len = 0;
	bcd_http_reply reply;
	bcd_ocsp_status st;
	char		err[512];
	bcd_rc		rc;

	memset(&reply, 0, sizeof(reply));
	if (bcd_ocsp_request(leaf, issuer, &req, &req_len) != 0)
	{
		say(rw, 1, "cannot make an OCSP request (out of memory?)");
		return;
	}
	rc = bcd_http_fetch(rw->http, BCD_PATH_OCSP, "application/ocsp-request", req, req_len, NULL,
						BCD_OCSP_MAX, &reply, NULL, 0, err, sizeof(err));
	OPENSSL_free(req);
	if (rc == BCD_RC_STOPPED)
		goto out;
	if (rc != BCD_RC_OK)
	{
		say(rw, 1, "POST %s: no answer (%s); nothing changes", BCD_PATH_OCSP, err);
		goto out;
	}
	if (reply.status != 200)
	{
		bcd_http_describe(&reply, err, sizeof(err));
		say(rw, 1, "POST %s: %s%s; nothing changes", BCD_PATH_OCSP, err,
			reply.status == 404 ? " (a gateway without an OCSP responder)" : "");
		goto out;
	}
	if (strcmp(rw->ocsp_serial, serial) != 0)
	{
		snprintf(rw->ocsp_serial, sizeof(rw->ocsp_serial), "%s", serial);
		rw->ocsp_newest = 0;
	}
	if (bcd_ocsp_verify((const unsigned char *) reply.body, reply.len, leaf, issuer,
						rw->keys->node_ca, cas, rw->ocsp_newest, &st, err, sizeof(err)) != 0)
	{
		say(rw, 1, "the OCSP answer about %s does not verify (%s): ignored", serial, err);
		rw->want_cas = 1;
		goto out;
	}
	rw->ocsp_newest = st.this_update;
	if (st.status == V_OCSP_CERTSTATUS_REVOKED)
	{
		rw->ocsp_said = 0;
		node_revoked(rw, serial, st.reason, st.revoked_at, "OCSP");
	}
	else if (st.status == V_OCSP_CERTSTATUS_GOOD)
	{
		if (rw->ocsp_said != 1)
			bcd_log("revocation: OCSP says the node certificate %s is good (checked every "
					"%ld s)", serial, rw->interval);
		rw->ocsp_said = 1;
		rw->said[1].line[0] = '\0';
	}
	else if (rw->ocsp_said != 2)
	{
		bcd_log("revocation: OCSP does not know the node certificate %s (unknown); nothing "
				"changes", serial);
		rw->ocsp_said = 2;
	}
out:
	bcd_http_reply_free(&reply);
}

/*
 * The service's current intermediates, fetched again (GET /v1/service-keys,
 * verified by a pinned signing key) when a CRL or an OCSP answer did not
 * verify, at most every CAS_AGAIN_S: after an intermediate rotation they are
 * signed under an intermediate this node's chain does not hold yet.
 */
static void
refresh_cas(bcd_revwatch *rw)
{
	STACK_OF(X509) *got;
	bcd_http_reply reply;
	char		err[512];
	time_t		now = time(NULL);

	if (!rw->want_cas || (rw->cas_fetched != 0 && now - rw->cas_fetched < CAS_AGAIN_S))
		return;
	rw->want_cas = 0;
	rw->cas_fetched = now;
	if ((got = sk_X509_new_null()) == NULL)
		return;
	if (bcd_http_exchange(rw->http, BC_PATH_SERVICE_KEYS, NULL, &reply, err, sizeof(err)) ==
		BCD_RC_OK && reply.status == 200 &&
		bcd_service_keys_cas(rw->keys, reply.body, reply.len, got) == BC_OK)
	{
		int			same = sk_X509_num(got) == sk_X509_num(rw->extra_cas);

		for (int i = 0; same && i < sk_X509_num(got); i++)
			same = X509_cmp(sk_X509_value(got, i), sk_X509_value(rw->extra_cas, i)) == 0;
		if (!same)
			bcd_log("revocation: the service's current CA certificates taken from %s (%d), "
					"for what is signed under an intermediate this node's chain does not hold",
					BC_PATH_SERVICE_KEYS, sk_X509_num(got));
		sk_X509_pop_free(rw->extra_cas, X509_free);
		rw->extra_cas = got;
		got = NULL;
	}
	else
		say(rw, 0, "GET %s: the service's current intermediates not fetched", BC_PATH_SERVICE_KEYS);
	sk_X509_pop_free(got, X509_free);
	bcd_http_reply_free(&reply);
}

/* One round: the node's chain read, the CRL when wanted, OCSP. */
static void
watch_once(bcd_revwatch *rw)
{
	X509	   *certs[BCD_CHAIN_MAX];
	size_t		n = 0;
	STACK_OF(X509) *cas = sk_X509_new_null();
	bcd_node_snapshot node;
	char		serial[41] = "";
	X509	   *leaf = NULL;

	bcd_provisioner_node_take(rw->prov, &node);
	if (cas != NULL && node.present &&
		bcd_store_read_chain(rw->o->state_dir, certs, BCD_CHAIN_MAX, &n) == BC_OK && n >= 2)
	{
		if (serial_of(certs[0], serial) == 0 && strcmp(serial, node.serial) == 0)
			leaf = certs[0];
		for (size_t i = 1; i < n; i++)
			sk_X509_push(cas, certs[i]);
		refresh_cas(rw);
		for (int i = 0; i < sk_X509_num(rw->extra_cas); i++)
			sk_X509_push(cas, sk_X509_value(rw->extra_cas, i));
	}
	if (leaf != NULL && strcmp(serial, rw->serial) != 0)
	{
		/* another node certificate: what was seen of the last one no longer holds */
		snprintf(rw->serial, sizeof(rw->serial), "%s", serial);
		rw->revoked_seen = 0;
	}
	if (rw->want_crl && cas != NULL)
		crl_round(rw, leaf, cas, serial);
	if (leaf != NULL)
		ocsp_round(rw, leaf, certs[1], cas, serial);
	if (time(NULL) - rw->keys_taken >= (rw->o->keys_interval > 0 ? rw->o->keys_interval :
										KEYS_EVERY_ROUNDS * rw->interval))
	{
		rw->keys_taken = time(NULL);
		(void) bcd_service_keys_refresh(rw->http, rw->keys);
		if (rw->keys->trust != NULL)
			(void) bcd_trust_bundles_refresh(rw->http, rw->keys->trust);
	}
	bcd_node_release(&node);
	for (size_t i = 0; i < n; i++)
		X509_free(certs[i]);
	sk_X509_free(cas);
}

/* The ticker's round: watch_once, then the interval. */
static long
watch_round(void *arg)
{
	bcd_revwatch *rw = arg;

	watch_once(rw);
	return rw->interval;
}

/* Start the watch (revocation.h). */
int
bcd_revwatch_start(const bcd_run_opts *o, const bcd_service_keys *keys, bcd_provisioner *prov,
				   bcd_revwatch **out, char *err, size_t errlen)
{
	bcd_revwatch *rw = calloc(1, sizeof(*rw));

	*out = NULL;
	if (rw == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	rw->o = o;
	rw->keys = keys;
	rw->prov = prov;
	rw->interval = o->status_interval;
	rw->keys_taken = time(NULL);	/* bcd run took them up as it started */
	rw->want_crl = bcd_crl_wanted(o);
	bcd_ticker_init(&rw->ticker);
	rw->http = bcd_http_new(o->gateway, o->gateway_ca, err, errlen);
	if (rw->http == NULL)
	{
		bcd_revwatch_free(rw);
		return BC_EINVAL;
	}
	if (bcd_ticker_start(&rw->ticker, watch_round, rw) != 0)
	{
		snprintf(err, errlen, "cannot start the revocation watch's thread");
		bcd_revwatch_free(rw);
		return BC_EINVAL;
	}
	bcd_log("revocation: the node certificate checked by OCSP (%s)%s every %ld s",
			BCD_PATH_OCSP, rw->want_crl ? " and the node CA's CRL fetched (" BCD_PATH_CRL ")" : "",
			rw->interval);
	*out = rw;
	return BC_OK;
}

/* 1 once when the main thread should renew at once (revocation.h). */
int
bcd_revwatch_take_renew(bcd_revwatch *rw)
{
	return rw != NULL && atomic_exchange(&rw->renew, 0) != 0;
}

/* 1 once when the revoked node should join again (revocation.h). */
int
bcd_revwatch_take_rejoin(bcd_revwatch *rw)
{
	return rw != NULL && atomic_exchange(&rw->rejoin, 0) != 0;
}

/* Stop its thread (revocation.h). */
void
bcd_revwatch_stop(bcd_revwatch *rw)
{
	if (rw != NULL)
		bcd_ticker_stop(&rw->ticker);
}

/* Free it (revocation.h). */
void
bcd_revwatch_free(bcd_revwatch *rw)
{
	if (rw == NULL)
		return;
	bcd_ticker_destroy(&rw->ticker);
	bcd_http_free(rw->http);
	free(rw->crl);
	X509_CRL_free(rw->crl_parsed);
	sk_X509_pop_free(rw->extra_cas, X509_free);
	free(rw);
}
