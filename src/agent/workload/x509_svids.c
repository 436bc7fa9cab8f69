/*
 * x509_svids.c: the X509-SVIDs the Workload API keeps, one per session
 * identity (session, context) that a rule names: provisioned through the
 * provisioner (bcd_provisioner_ask: a session credential, coalesced with
 * the hooks' asks of the same key) while FetchX509SVID streams want it,
 * kept as DER, provisioned again at half of its remaining life and pushed
 * on every open stream (methods.c); while the gateway is down the last one
 * is still served until it expires, and the provisioning is retried with a
 * backoff (1 s doubling to 30 s).  Under the Workload API's mutex; the
 * provisioner's call-back takes it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "bc_common.h"
#include "core/clock.h"
#include "core/log.h"
#include "workload/internal.h"

/* Backoff of a failed provisioning, in seconds. */
#define RETRY_MIN 1.0
#define RETRY_MAX 30.0

/*
 * The identity of (session, context): found, or made (its first caller's
 * claim kept for the proofs); NULL when out of memory.
 */
wl_identity *
wl_identity_get(bcd_workload *w, const char *session, const char *context,
				const bcd_peer *caller)
{
	wl_identity *id;

	for (id = w->identities; id != NULL; id = id->next)
		if (strcmp(id->session, session) == 0 && strcmp(id->context, context) == 0)
			return id;
	id = calloc(1, sizeof(*id));
	if (id == NULL)
		return NULL;
	snprintf(id->session, sizeof(id->session), "%s", session);
	snprintf(id->context, sizeof(id->context), "%s", context);
	id->caller = *caller;
	id->mu = &w->mu;
	id->backoff = RETRY_MIN;
	id->next = w->identities;
	w->identities = id;
	return id;
}

/* Append the DER of cert to *buf. */
static int
append_der(X509 *cert, unsigned char **buf, size_t *len)
{
	int			n = i2d_X509(cert, NULL);
	unsigned char *grown;
	unsigned char *p;

	if (n <= 0 || (grown = realloc(*buf, *len + (size_t) n)) == NULL)
		return -1;
	*buf = grown;
	p = grown + *len;
	if (i2d_X509(cert, &p) != n)
		return -1;
	*len += (size_t) n;
	return 0;
}

/* An ASN.1 time in seconds of the real-time clock (0 when unreadable). */
static double
asn1_time_real(const ASN1_TIME *t)
{
	struct tm	tm;

	if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
		return 0;
	return (double) timegm(&tm);
}

/*
 * A provisioning is done (the provisioner's thread): take its key and
 * chain as the identity's new SVID (PEM to DER, the root left out), or
 * schedule a retry with a backoff.
 */
static void
on_provisioned(void *arg, const bcd_job *job)
{
	wl_identity *id = arg;
	BIO		   *bio = NULL;
	X509	   *cert;
	EVP_PKEY   *pkey = NULL;
	PKCS8_PRIV_KEY_INFO *p8 = NULL;
	unsigned char *chain = NULL;
	size_t		chain_len = 0;
	unsigned char *key = NULL;
	int			key_len = 0;
	double		not_after = 0;
	ASN1_INTEGER *serial = NULL;
	double		now = bcd_now_real();
	int			ok = job->code == BCD_CODE_OK;

	if (ok)
	{
		bio = BIO_new_mem_buf(job->chain_pem, (int) job->chain_len);
		while (bio != NULL && (cert = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL)
		{
			int			self = X509_check_issued(cert, cert) == X509_V_OK;

			if (chain_len == 0)
			{
				not_after = asn1_time_real(X509_get0_notAfter(cert));
				ASN1_INTEGER_free(serial);
				serial = ASN1_INTEGER_dup(X509_get0_serialNumber(cert));
			}
			if (!self && append_der(cert, &chain, &chain_len) != 0)
				ok = 0;
			X509_free(cert);
		}
		BIO_free(bio);
		bio = BIO_new_mem_buf(job->key_pem, (int) job->key_len);
		pkey = bio != NULL ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
		p8 = pkey != NULL ? EVP_PKEY2PKCS8(pkey) : NULL;
		key_len = p8 != NULL ? i2d_PKCS8_PRIV_KEY_INFO(p8, &key) : -1;
		if (chain_len == 0 || key_len <= 0 || not_after <= now)
			ok = 0;
		BIO_free(bio);
		EVP_PKEY_free(pkey);
		PKCS8_PRIV_KEY_INFO_free(p8);
	}
	pthread_mutex_lock(id->mu);
	id->in_flight = 0;
	if (ok)
	{
		free(id->chain);
		bc_free_secret(id->key, id->key_len);
		id->chain = chain;
		id->chain_len = chain_len;
		id->key = malloc((size_t) key_len);
		if (id->key != NULL)
			memcpy(id->key, key, (size_t) key_len);
		id->key_len = id->key != NULL ? (size_t) key_len : 0;
		snprintf(id->spiffe_id, sizeof(id->spiffe_id), "%s", job->spiffe_id);
		id->not_after = not_after;
		ASN1_INTEGER_free(id->serial);
		id->serial = serial;
		serial = NULL;
		id->listed = 0;
		id->renew_at = now + (not_after - now) / 2;
		id->backoff = RETRY_MIN;
		id->next_try = 0;
		id->gen++;
		chain = NULL;
	}
	else
	{
		id->next_try = now + id->backoff;
		id->backoff = id->backoff * 2 > RETRY_MAX ? RETRY_MAX : id->backoff * 2;
	}
	pthread_mutex_unlock(id->mu);
	if (ok)
		bcd_log("workload api: session %s%s%s: X509-SVID %s (serial %s, not after %s)",
				job->session, job->context[0] ? " context " : "", job->context,
				job->spiffe_id, job->serial, job->not_after);
	else
		bcd_log("workload api: session %s%s%s: no new X509-SVID (%s: %s); retrying",
				job->session, job->context[0] ? " context " : "", job->context,
				bcd_code_name(job->code), job->code == BCD_CODE_OK ? "cannot read it" : job->message);
	free(chain);
	ASN1_INTEGER_free(serial);
	if (key != NULL)
	{
		OPENSSL_cleanse(key, (size_t) key_len);
		OPENSSL_free(key);
	}
}


/* Ask for a provisioning of every identity a stream wants that is due. */
void
wl_x509_provision_due(bcd_workload *w, double now)
{
	for (wl_identity *id = w->identities; id != NULL; id = id->next)
	{
		if (id->streams <= 0 || id->in_flight || now < id->next_try)
			continue;
		if (id->gen != 0 && now < id->renew_at)
			continue;
		id->in_flight = 1;
		if (bcd_provisioner_ask(w->prov, BCD_JOB_SESSION, id->session, id->context, NULL,
								&id->caller, on_provisioned, id) != BC_OK)
		{
			id->in_flight = 0;
			id->next_try = now + RETRY_MIN;
		}
	}
}

/* Close the connections gRPC has closed, and those idle past their deadline. */

/* Free every identity and its SVID (the key wiped). */
void
wl_identities_free(bcd_workload *w)
{
	wl_identity *id;

	while ((id = w->identities) != NULL)
	{
		w->identities = id->next;
		free(id->chain);
		bc_free_secret(id->key, id->key_len);
		ASN1_INTEGER_free(id->serial);
		free(id);
	}
	free(w->crl);
	X509_CRL_free(w->crl_parsed);
	w->crl = NULL;
	w->crl_parsed = NULL;
}

/*
 * The CRL the watch verified (core/revocation.c), taken from the provisioner
 * when it changed: kept (DER for the responses, parsed for the checks), and
 * every identity whose X509-SVID it lists is provisioned again at once and
 * not served meanwhile; the streams push it (methods.c).
 */
void
wl_crl_take(bcd_workload *w)
{
	unsigned char *der = NULL;
	size_t		len = 0;
	const unsigned char *p;
	X509_CRL   *crl;
	unsigned long gen;

	if (bcd_provisioner_crl_gen(w->prov) == w->crl_gen)
		return;
	gen = bcd_provisioner_crl(w->prov, &der, &len);
	p = der;
	crl = der != NULL ? d2i_X509_CRL(NULL, &p, (long) len) : NULL;
	if (crl == NULL)
	{
		free(der);
		return;
	}
	free(w->crl);
	X509_CRL_free(w->crl_parsed);
	w->crl = der;
	w->crl_len = len;
	w->crl_parsed = crl;
	w->crl_gen = gen;
	for (wl_identity *id = w->identities; id != NULL; id = id->next)
	{
		X509_REVOKED *rev = NULL;

		if (id->gen == 0 || id->serial == NULL || id->listed ||
			X509_CRL_get0_by_serial(crl, &rev, id->serial) != 1)
			continue;
		id->listed = 1;
		id->renew_at = 0;
		id->next_try = 0;
		bcd_log("workload api: session %s%s%s: its X509-SVID %s is on the CRL (revoked): not "
				"served, a new one asked for", id->session, id->context[0] ? " context " : "",
				id->context, id->spiffe_id);
	}
}
