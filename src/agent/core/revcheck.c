/*
 * revcheck.c: the node CA's CRL and OCSP answers, verified against the
 * pinned root (revcheck.h; docs/agent.md, "Revocation").  OpenSSL does
 * every parse and every signature; what is ours is the policy:
 *
 *   CRL   one DER CRL (nothing after it), issued by a CA certificate of the
 *         node's chain that itself chains to the pinned root (X509_verify_cert,
 *         the root the only trust anchor), may sign CRLs (cRLSign when it
 *         says its key usage), and whose key verifies it (X509_CRL_verify).
 *   OCSP  a successful BasicOCSPResponse whose signature verifies and whose
 *         signer chains to the pinned root (OCSP_basic_verify with
 *         OCSP_NOCHECKS: RFC 6960's "issued directly by the CA of the
 *         certificate" is replaced by our rule, so that answers about
 *         certificates of the previous intermediate, signed by the current
 *         intermediate's responder, are taken), the signer's extended key
 *         usage id-kp-OCSPSigning, an answer for the SHA-256 CertID we asked
 *         about, current within BCD_OCSP_SKEW (OCSP_check_validity), and
 *         never older than the newest answer taken before (no replay of an
 *         older "good").
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ocsp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "core/revcheck.h"

/* An ASN.1 time in Unix seconds (0 when absent or unreadable). */
static int64_t
asn1_seconds(const ASN1_TIME *t)
{
	struct tm	tm;

	if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
		return 0;
	return (int64_t) timegm(&tm);
}

/* err = what, and OpenSSL's last error when there is one (the queue cleared). */
static void
ossl_err(char *err, size_t errlen, const char *what)
{
	unsigned long e = ERR_peek_last_error();
	char		buf[256] = "";

	if (e != 0)
		ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	snprintf(err, errlen, "%s%s%s", what, buf[0] ? ": " : "", buf);
}

/* A store whose one trust anchor is root; NULL when out of memory. */
static X509_STORE *
root_store(X509 *root)
{
	X509_STORE *st = X509_STORE_new();

	if (st != NULL && X509_STORE_add_cert(st, root) != 1)
	{
		X509_STORE_free(st);
		st = NULL;
	}
	return st;
}

/* 1 when ca chains to the root of st through cas (the root the only anchor). */
static int
chains_to_root(X509_STORE *st, X509 *ca, STACK_OF(X509) *cas)
{
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	int			ok = 0;

	if (ctx != NULL && X509_STORE_CTX_init(ctx, st, ca, cas) == 1)
		ok = X509_verify_cert(ctx) == 1;
	X509_STORE_CTX_free(ctx);
	ERR_clear_error();
	return ok;
}

/* Verify a CRL (revcheck.h). */
int
bcd_crl_verify(const unsigned char *der, size_t len, X509 *root, STACK_OF(X509) *cas,
			   bcd_crl_checked *out, char *err, size_t errlen)
{
	const unsigned char *p = der;
	X509_CRL   *crl;
	X509_STORE *st = NULL;
	const char *why = "no CA certificate of this node's chain issued it";
	int			found = 0;

	memset(out, 0, sizeof(out[0]));
	crl = d2i_X509_CRL(NULL, &p, (long) len);
	if (crl == NULL || p != der + len)
	{
		X509_CRL_free(crl);
		ossl_err(err, errlen, "not one DER CRL");
		return -1;
	}
	if (X509_CRL_get0_lastUpdate(crl) == NULL || asn1_seconds(X509_CRL_get0_lastUpdate(crl)) == 0)
	{
		X509_CRL_free(crl);
		snprintf(err, errlen, "the CRL has no thisUpdate");
		return -1;
	}
	st = root_store(root);
	for (int i = 0; st != NULL && !found && i < sk_X509_num(cas); i++)
	{
		X509	   *ca = sk_X509_value(cas, i);

		if (X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(ca)) != 0)
			continue;
		if (X509_check_ca(ca) == 0)
			why = "its issuer is not a CA certificate";
		else if ((X509_get_extension_flags(ca) & EXFLAG_KUSAGE) &&
				 !(X509_get_key_usage(ca) & KU_CRL_SIGN))
			why = "its issuer may not sign CRLs (no cRLSign)";
		else if (!chains_to_root(st, ca, cas))
			why = "its issuer does not chain to the pinned root";
		else if (X509_CRL_verify(crl, X509_get0_pubkey(ca)) != 1)
			why = "its signature does not verify with its issuer's key";
		else
			found = 1;
		ERR_clear_error();
	}
	X509_STORE_free(st);
	if (!found)
	{
		X509_CRL_free(crl);
		snprintf(err, errlen, "%s", st == NULL ? "out of memory" : why);
		return -1;
	}
	out->crl = crl;
	out->this_update = asn1_seconds(X509_CRL_get0_lastUpdate(crl));
	out->next_update = asn1_seconds(X509_CRL_get0_nextUpdate(crl));
	return 0;
}

/* Is cert on crl (revcheck.h)? */
int
bcd_crl_lists(X509_CRL *crl, X509 *cert, int *reason, int64_t *revoked_at)
{
	X509_REVOKED *rev = NULL;
	ASN1_ENUMERATED *code;
	int			crit = 0;

	*reason = -1;
	*revoked_at = 0;
	if (crl == NULL || cert == NULL ||
		X509_CRL_get0_by_serial(crl, &rev, (ASN1_INTEGER *) X509_get0_serialNumber(cert)) != 1 ||
		rev == NULL)
		return 0;
	code = X509_REVOKED_get_ext_d2i(rev, NID_crl_reason, &crit, NULL);
	if (code != NULL)
	{
		*reason = (int) ASN1_ENUMERATED_get(code);
		ASN1_ENUMERATED_free(code);
	}
	*revoked_at = asn1_seconds(X509_REVOKED_get0_revocationDate(rev));
	return 1;
}

/* The request (revcheck.h). */
int
bcd_ocsp_request(X509 *leaf, X509 *issuer, unsigned char **der, size_t *len)
{
	OCSP_REQUEST *req = OCSP_REQUEST_new();
	OCSP_CERTID *id = OCSP_cert_to_id(EVP_sha256(), leaf, issuer);
	int			n = -1;

	*der = NULL;
	*len = 0;
	if (req != NULL && id != NULL && OCSP_request_add0_id(req, id) != NULL)
	{
		id = NULL;				/* the request's now */
		n = i2d_OCSP_REQUEST(req, der);
	}
	OCSP_CERTID_free(id);
	OCSP_REQUEST_free(req);
	ERR_clear_error();
	if (n <= 0)
		return -1;
	*len = (size_t) n;
	return 0;
}

/* Verify an OCSP answer (revcheck.h). */
int
bcd_ocsp_verify(const unsigned char *der, size_t len, X509 *leaf, X509 *issuer, X509 *root,
				STACK_OF(X509) *cas, int64_t newest, bcd_ocsp_status *out,
				char *err, size_t errlen)
{
	const unsigned char *p = der;
	OCSP_RESPONSE *resp = d2i_OCSP_RESPONSE(NULL, &p, (long) len);
	OCSP_BASICRESP *bs = NULL;
	OCSP_CERTID *id = NULL;
	X509_STORE *st = NULL;
	X509	   *signer = NULL;
	ASN1_GENERALIZEDTIME *rev = NULL;
	ASN1_GENERALIZEDTIME *thisupd = NULL;
	ASN1_GENERALIZEDTIME *nextupd = NULL;
	int			status = -1;
	int			reason = -1;
	int			rc = -1;

	memset(out, 0, sizeof(out[0]));
	if (resp == NULL || p != der + len)
	{
		ossl_err(err, errlen, "not one DER OCSP response");
		goto out;
	}
	if (OCSP_response_status(resp) != OCSP_RESPONSE_STATUS_SUCCESSFUL)
	{
		snprintf(err, errlen, "the responder answered %s (unsigned)",
				 OCSP_response_status_str(OCSP_response_status(resp)));
		goto out;
	}
	if ((bs = OCSP_response_get1_basic(resp)) == NULL)
	{
		ossl_err(err, errlen, "not a basic OCSP response");
		goto out;
	}
	if ((st = root_store(root)) == NULL)
	{
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	/* the signature, and the signer's chain to the pinned root */
	if (OCSP_basic_verify(bs, cas, st, OCSP_NOCHECKS) <= 0)
	{
		ossl_err(err, errlen, "its signature or its signer's chain to the pinned root does "
				 "not verify");
		goto out;
	}
	if (OCSP_resp_get0_signer(bs, &signer, cas) != 1 || signer == NULL)
	{
		snprintf(err, errlen, "its signer is not in the answer");
		goto out;
	}
	if (!(X509_get_extension_flags(signer) & EXFLAG_XKUSAGE) ||
		!(X509_get_extended_key_usage(signer) & XKU_OCSP_SIGN))
	{
		snprintf(err, errlen, "its signer is no OCSP responder (no extended key usage "
				 "id-kp-OCSPSigning)");
		goto out;
	}
	if ((id = OCSP_cert_to_id(EVP_sha256(), leaf, issuer)) == NULL)
	{
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (OCSP_resp_find_status(bs, id, &status, &reason, &rev, &thisupd, &nextupd) != 1)
	{
		snprintf(err, errlen, "it says nothing about the certificate asked about (its CertID)");
		goto out;
	}
	if (OCSP_check_validity(thisupd, nextupd, BCD_OCSP_SKEW, -1) != 1)
	{
		ossl_err(err, errlen, "it is not current (thisUpdate in the future or nextUpdate past)");
		goto out;
	}
	out->this_update = asn1_seconds(thisupd);
	out->next_update = asn1_seconds(nextupd);
	if (out->this_update < newest)
	{
		snprintf(err, errlen, "its thisUpdate (%lld) is older than that of an answer taken "
				 "before (%lld): a replay", (long long) out->this_update, (long long) newest);
		goto out;
	}
	out->status = status;
	out->reason = status == V_OCSP_CERTSTATUS_REVOKED ? reason : -1;
	out->revoked_at = status == V_OCSP_CERTSTATUS_REVOKED ? asn1_seconds(rev) : 0;
	rc = 0;
out:
	OCSP_CERTID_free(id);
	X509_STORE_free(st);
	OCSP_BASICRESP_free(bs);
	OCSP_RESPONSE_free(resp);
	ERR_clear_error();
	return rc;
}

/*
 * The RFC 5280 name of a reason code (revcheck.h): the names bc_join's
 * revocations use (OpenSSL 3.0's OCSP_crl_reason_str knows 0 to 8 only).
 */
const char *
bcd_reason_name(int reason)
{
	static const char *const names[] = {
		"unspecified", "keyCompromise", "cACompromise", "affiliationChanged", "superseded",
		"cessationOfOperation", "certificateHold", "(7)", "removeFromCRL",
		"privilegeWithdrawn", "aACompromise"
	};

	if (reason < 0)
		return "unspecified";
	return reason < (int) (sizeof(names) / sizeof(names[0])) ? names[reason] : "(unknown)";
}
