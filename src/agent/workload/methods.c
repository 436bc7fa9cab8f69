/*
 * methods.c: the Workload API's methods (SPIFFE Workload API; docs/agent.md,
 * "The SPIFFE Workload API"; Envoy's SDS, whose handlers are sds.c's): one
 * table, a row per method (its service and name, the descriptor its request
 * is unpacked against, what its answer is, its handler and, for a stream,
 * what it is sent now and what a later request does), and their handlers.  A
 * new method is one row and its handler (docs/design.md, "Adding a
 * Workload API method").  The handlers run on the completion-queue thread
 * under the Workload API's mutex, with the call's caller already matched
 * to an identity (r->id; authorize.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/x509.h>

#include "bc_common.h"
#include "core/log.h"
#include "workload/internal.h"

/* ------------------------------------------------------------ X.509 */

/*
 * The federated trust domains r's rule names whose bundles bcd holds, into
 * out (at most BCD_WL_FEDERATES_MAX, each its own, never merged); how many.
 */
static int
allowed_domains(const bcd_workload *w, const wl_call *r, const bcd_trust_domain **out)
{
	int			n = 0;

	for (int i = 0; w->fed != NULL && i < w->fed->n && n < BCD_WL_FEDERATES_MAX; i++)
		if (r->federates != NULL && bcd_wl_federates_has(r->federates, w->fed->d[i].td))
			out[n++] = &w->fed->d[i];
	return n;
}

/* "spiffe://td" (malloc()ed, or NULL). */
static char *
td_key(const char *td)
{
	size_t		n = strlen(BC_SPIFFE_SCHEME) + strlen(td) + 1;
	char	   *key = malloc(n);

	if (key != NULL)
		snprintf(key, n, BC_SPIFFE_SCHEME "%s", td);
	return key;
}

/* Free the keys of n bundle map entries (X509 and JWT entries alike: the key first). */
static void
free_keys(char **keys, int n)
{
	for (int i = 0; i < n; i++)
		free(keys[i]);
}

/*
 * FetchX509SVID's message: the identity's X509-SVID (chain, key), the
 * bundle, and the bundles of the federated trust domains its rule names
 * (federated_bundles, keyed spiffe://TD, each domain's roots DER).
 */
static grpc_byte_buffer *
x509_svid_response(bcd_workload *w, const wl_call *r, const wl_identity *id)
{
	X509SVIDResponse resp = X509_SVIDRESPONSE__INIT;
	X509SVID	svid = X509_SVID__INIT;
	X509SVID   *svids[1] = {&svid};
	const bcd_trust_domain *fed[BCD_WL_FEDERATES_MAX];
	X509SVIDResponse__FederatedBundlesEntry fe[BCD_WL_FEDERATES_MAX];
	X509SVIDResponse__FederatedBundlesEntry *fes[BCD_WL_FEDERATES_MAX];
	char	   *keys[BCD_WL_FEDERATES_MAX];
	int			nfed = allowed_domains(w, r, fed);
	grpc_byte_buffer *bb;

	svid.spiffe_id = (char *) id->spiffe_id;
	svid.x509_svid.data = id->chain;
	svid.x509_svid.len = id->chain_len;
	svid.x509_svid_key.data = id->key;
	svid.x509_svid_key.len = id->key_len;
	ProtobufCBinaryData crl = {w->crl_len, w->crl};

	svid.bundle.data = w->bundle;
	svid.bundle.len = w->bundle_len;
	resp.n_svids = 1;
	resp.svids = svids;
	if (w->crl != NULL)
	{
		/* the node CA's CRL, DER (workload.proto: repeated bytes crl = 2) */
		resp.n_crl = 1;
		resp.crl = &crl;
	}
	for (int i = 0; i < nfed; i++)
	{
		x509_svidresponse__federated_bundles_entry__init(&fe[i]);
		keys[i] = fe[i].key = td_key(fed[i]->td);
		fe[i].value.data = fed[i]->x509;
		fe[i].value.len = fed[i]->x509_len;
		fes[i] = &fe[i];
		if (keys[i] == NULL)
		{
			free_keys(keys, i);
			return NULL;
		}
	}
	resp.n_federated_bundles = (size_t) nfed;
	resp.federated_bundles = nfed > 0 ? fes : NULL;
	bb = wl_pack(&resp.base);
	free_keys(keys, nfed);
	return bb;
}

/*
 * The key of a bundle in the bundles maps: the trust domain's SPIFFE ID
 * (spiffe://example.org), as workload.proto says and SPIRE sends
 * (malloc()ed, or NULL).
 */
static char *
bundle_key(const bcd_workload *w)
{
	size_t		n = strlen(BC_SPIFFE_SCHEME) + strlen(w->trust_domain) + 1;
	char	   *key = malloc(n);

	if (key != NULL)
		snprintf(key, n, BC_SPIFFE_SCHEME "%s", w->trust_domain);
	return key;
}

/*
 * FetchX509Bundles' message: {spiffe://TD: DER of the root}, and each
 * federated trust domain the caller's rule names, {spiffe://FTD: its roots}.
 */
static grpc_byte_buffer *
x509_bundles_response(bcd_workload *w, const wl_call *r)
{
	X509BundlesResponse resp = X509_BUNDLES_RESPONSE__INIT;
	X509BundlesResponse__BundlesEntry e[1 + BCD_WL_FEDERATES_MAX];
	X509BundlesResponse__BundlesEntry *es[1 + BCD_WL_FEDERATES_MAX];
	const bcd_trust_domain *fed[BCD_WL_FEDERATES_MAX];
	char	   *keys[1 + BCD_WL_FEDERATES_MAX];
	int			nfed = allowed_domains(w, r, fed);
	ProtobufCBinaryData crl = {w->crl_len, w->crl};
	grpc_byte_buffer *bb;

	for (int i = 0; i <= nfed; i++)
	{
		x509_bundles_response__bundles_entry__init(&e[i]);
		keys[i] = e[i].key = i == 0 ? bundle_key(w) : td_key(fed[i - 1]->td);
		e[i].value.data = i == 0 ? w->bundle : fed[i - 1]->x509;
		e[i].value.len = i == 0 ? w->bundle_len : fed[i - 1]->x509_len;
		es[i] = &e[i];
		if (keys[i] == NULL)
		{
			free_keys(keys, i);
			return NULL;
		}
	}
	resp.n_bundles = (size_t) nfed + 1;
	resp.bundles = es;
	if (w->crl != NULL)
	{
		/* the node CA's CRL, DER (workload.proto: repeated bytes crl = 1) */
		resp.n_crl = 1;
		resp.crl = &crl;
	}
	bb = wl_pack(&resp.base);
	free_keys(keys, nfed + 1);
	return bb;
}

/* FetchX509SVID: the stream counts among its identity's, which keep its X509-SVID provisioned. */
static void
fetch_x509_svid(bcd_workload *w, wl_call *r, const ProtobufCMessage *req)
{
	(void) w;
	(void) req;
	r->id->streams++;
	r->streams_of = r->id;
}

/*
 * FetchX509SVID's stream: every new X509-SVID of its identity, and the
 * current one again with every new CRL, while its caller may have it; not
 * one the CRL lists (a new one is on its way: x509_svids.c).
 */
static void
serve_x509_svid(bcd_workload *w, wl_call *r, double now)
{
	wl_identity *id = r->id;

	if (id->gen != 0 &&
		(id->gen != r->sent_gen || w->crl_gen != r->sent_crl || w->trust_gen != r->sent_trust) &&
		id->not_after > now && !id->listed)
	{
		if (wl_call_secret_may_go(r) != 0)
		{
			wl_call_finish(r, 0, NULL, GRPC_STATUS_PERMISSION_DENIED, "no identity issued");
			return;
		}
		r->sent_gen = id->gen;
		r->sent_crl = w->crl_gen;
		r->sent_trust = w->trust_gen;
		wl_call_push(r, x509_svid_response(w, r, id));
	}
}

/* FetchX509Bundles' stream: the bundles, and again with every new CRL or bundle. */
static void
serve_x509_bundles(bcd_workload *w, wl_call *r, double now)
{
	(void) now;
	if (!r->sent_once || r->sent_crl != w->crl_gen || r->sent_trust != w->trust_gen)
	{
		r->sent_once = 1;
		r->sent_crl = w->crl_gen;
		r->sent_trust = w->trust_gen;
		wl_call_push(r, x509_bundles_response(w, r));
	}
}

/* ------------------------------------------------------------ JWT */

/* End a FetchJWTSVID: OK with one JWTSVID (spiffe_id, token), else code and message. */
static void
jwt_finish(wl_call *r, grpc_status_code code, const char *spiffe_id, const char *token,
		   const char *message)
{
	JWTSVIDResponse resp = JWTSVIDRESPONSE__INIT;
	JWTSVID		js = JWTSVID__INIT;
	JWTSVID    *arr[1] = {&js};
	grpc_byte_buffer *bb;

	if (code != GRPC_STATUS_OK)
	{
		wl_call_finish(r, 0, NULL, code, message);
		return;
	}
	js.spiffe_id = (char *) spiffe_id;
	js.svid = (char *) token;
	resp.n_svids = 1;
	resp.svids = arr;
	bb = wl_pack(&resp.base);
	wl_call_finish(r, 0, bb, bb != NULL ? GRPC_STATUS_OK : GRPC_STATUS_RESOURCE_EXHAUSTED,
				   bb != NULL ? "" : "out of memory");
}

/* A FetchJWTSVID that waited for a fetch is answered (jwt_svids.c calls it, under w->mu). */
static void
jwt_answered(void *arg, void *waiter, grpc_status_code code, const char *spiffe_id,
			 const char *token, const char *message)
{
	bcd_workload *w = arg;
	wl_call    *r = waiter;

	if (!r->closed)				/* else the caller went away */
		jwt_finish(r, code, spiffe_id, token, message);
	wl_call_batch_done(w, r);	/* the hold fetch_jwt_svid took */
}

/* Answer the FetchJWTSVIDs whose fetch has ended (the tick). */
void
wl_jwt_take_done(bcd_workload *w)
{
	bcd_wl_jwt_svids_answer(w->jwt_svids, jwt_answered, w);
}

/* 1 when a cached JWT-SVID's kid is one of the jwt-svid keys now. */
static int
jwt_kid_known(void *arg, const char *kid)
{
	return bcd_wl_jwt_known(arg, kid);
}

/*
 * The tick: a new generation of the jwt-svid keys (a rollover the
 * revocation watch took up) is a new trust generation, which the bundle
 * streams push; cached JWT-SVIDs of a retired key are forgotten.
 */
void
wl_trust_take(bcd_workload *w)
{
	if (bcd_wl_jwt_take(w->jwt))
	{
		w->trust_gen++;
		bcd_wl_jwt_svids_forget(w->jwt_svids, jwt_kid_known, w->jwt);
		bcd_log("workload api: %d jwt-svid key(s) now; the JWT bundle streams are sent them",
				bcd_wl_jwt_keys(w->jwt));
	}
	/* a new generation of the federated trust domains' bundles: every bundle stream pushes */
	if (w->fed != NULL && bcd_trust_bundles_gen(w->keys->trust) != w->fed->gen)
	{
		bcd_trust_set *s = bcd_trust_bundles_get(w->keys->trust);

		bcd_trust_set_release(w->keys->trust, w->fed);
		w->fed = s;
		w->trust_gen++;
	}
}

/* Stopping: every FetchJWTSVID waiting for a fetch answered UNAVAILABLE. */
void
wl_jwt_drain(bcd_workload *w)
{
	bcd_wl_jwt_svids_drain(w->jwt_svids, jwt_answered, w);
}

/*
 * FetchJWTSVID: its audiences checked here (INVALID_ARGUMENT, nothing
 * asked of anyone), then answered from the cache or refused at once, or
 * held (a pending count) until its fetch ends (jwt_svids.c).
 */
static void
fetch_jwt_svid(bcd_workload *w, wl_call *r, const ProtobufCMessage *msg)
{
	const JWTSVIDRequest *req = (const JWTSVIDRequest *) msg;
	bcd_audiences aud;
	grpc_status_code code;
	const char *spiffe_id;
	const char *token;
	char		why[640];

	if (bcd_wl_jwt_audiences(req->audience, req->n_audience, &aud, why, sizeof(why)) != BC_OK)
	{
		wl_call_finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT, why);
		return;
	}
	if (bcd_wl_jwt_svids_fetch(w->jwt_svids, &r->conn->caller.peer, r->id->session,
							   r->id->context, &aud, req->spiffe_id != NULL ? req->spiffe_id : "",
							   r, &code, &spiffe_id, &token, why, sizeof(why)))
	{
		r->pending++;			/* held until jwt_answered */
		return;
	}
	jwt_finish(r, code, spiffe_id, token, why);
}

/* ValidateJWTSVID: the token verified (jwt.c), its SPIFFE ID and claims answered. */
static void
validate_jwt_svid(bcd_workload *w, wl_call *r, const ProtobufCMessage *msg)
{
	const ValidateJWTSVIDRequest *req = (const ValidateJWTSVIDRequest *) msg;
	ValidateJWTSVIDResponse resp = VALIDATE_JWTSVIDRESPONSE__INIT;
	char	   *spiffe_id = NULL;
	json_t	   *claims = NULL;
	char		err[512];

	if (bcd_wl_jwt_validate(w->jwt, w->trust_domain, w->fed, r->federates, req->svid,
							req->audience, &spiffe_id, &claims, err, sizeof(err)) != BC_OK)
	{
		wl_call_finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT, err);
		return;
	}
	resp.spiffe_id = spiffe_id;
	resp.claims = wl_json_to_struct(claims);
	wl_call_finish(r, 0, wl_pack(&resp.base), resp.claims != NULL ? GRPC_STATUS_OK :
				   GRPC_STATUS_RESOURCE_EXHAUSTED, "");
	if (resp.claims != NULL)
		protobuf_c_message_free_unpacked(&resp.claims->base, NULL);
	json_decref(claims);
	free(spiffe_id);
}

/*
 * FetchJWTBundles' message: {spiffe://TD: JWKS of the jwt-svid keys}, and
 * each federated trust domain the caller's rule names, {spiffe://FTD: its
 * jwt-svid keys' JWKS}.
 */
static grpc_byte_buffer *
jwt_bundles_response(bcd_workload *w, const wl_call *r)
{
	JWTBundlesResponse resp = JWTBUNDLES_RESPONSE__INIT;
	JWTBundlesResponse__BundlesEntry e[1 + BCD_WL_FEDERATES_MAX];
	JWTBundlesResponse__BundlesEntry *es[1 + BCD_WL_FEDERATES_MAX];
	const bcd_trust_domain *fed[BCD_WL_FEDERATES_MAX];
	char	   *keys[1 + BCD_WL_FEDERATES_MAX];
	int			nfed = allowed_domains(w, r, fed);
	grpc_byte_buffer *bb;
	size_t		len;

	for (int i = 0; i <= nfed; i++)
	{
		jwtbundles_response__bundles_entry__init(&e[i]);
		keys[i] = e[i].key = i == 0 ? bundle_key(w) : td_key(fed[i - 1]->td);
		if (i == 0)
			e[i].value.data = (uint8_t *) bcd_wl_jwt_bundle(w->jwt, &len);
		else
		{
			e[i].value.data = (uint8_t *) fed[i - 1]->jwks;
			len = fed[i - 1]->jwks_len;
		}
		e[i].value.len = len;
		es[i] = &e[i];
		if (keys[i] == NULL)
		{
			free_keys(keys, i);
			return NULL;
		}
	}
	resp.n_bundles = (size_t) nfed + 1;
	resp.bundles = es;
	bb = wl_pack(&resp.base);
	free_keys(keys, nfed + 1);
	return bb;
}

/* FetchJWTBundles' stream: the bundles, and again whenever they change (a key rollover). */
static void
serve_jwt_bundles(bcd_workload *w, wl_call *r, double now)
{
	(void) now;
	if (!r->sent_once || r->sent_trust != w->trust_gen)
	{
		r->sent_once = 1;
		r->sent_trust = w->trust_gen;
		wl_call_push(r, jwt_bundles_response(w, r));
	}
}

/* ------------------------------------------------------------ the table */

/* Every method of the Workload API, looked up by name (call.c). */
const wl_method wl_methods[] = {
	{WL_SERVICE_WORKLOAD, "FetchX509SVID", &x509_svidrequest__descriptor, WL_METHOD_SECRET,
	fetch_x509_svid, serve_x509_svid, NULL},
	{WL_SERVICE_WORKLOAD, "FetchX509Bundles", &x509_bundles_request__descriptor, 0, NULL,
	serve_x509_bundles, NULL},
	{WL_SERVICE_WORKLOAD, "FetchJWTSVID", &jwtsvidrequest__descriptor,
	WL_METHOD_SECRET | WL_METHOD_STRINGS, fetch_jwt_svid, NULL, NULL},
	{WL_SERVICE_WORKLOAD, "FetchJWTBundles", &jwtbundles_request__descriptor, 0, NULL,
	serve_jwt_bundles, NULL},
	{WL_SERVICE_WORKLOAD, "ValidateJWTSVID", &validate_jwtsvidrequest__descriptor,
	WL_METHOD_STRINGS, validate_jwt_svid, NULL, NULL},
	/* Envoy's SDS v3 (sds.c); DeltaSecrets is not one: UNIMPLEMENTED, as with SPIRE */
	{WL_SERVICE_SDS, "StreamSecrets", &discovery_request__descriptor,
	WL_METHOD_SECRET | WL_METHOD_STRINGS | WL_METHOD_BIDI, wl_sds_stream, wl_sds_stream_serve,
	wl_sds_stream_more},
	{WL_SERVICE_SDS, "FetchSecrets", &discovery_request__descriptor,
	WL_METHOD_SECRET | WL_METHOD_STRINGS, wl_sds_fetch, wl_sds_fetch_serve, NULL},
};

const int	wl_n_methods = sizeof(wl_methods) / sizeof(wl_methods[0]);
