/*
 * revcheck.h: what bcd accepts as news of a revocation (issue 45;
 * docs/agent.md, "Revocation"): the node CA's CRL and OCSP answers about
 * the node certificate, each verified against the pinned root with
 * OpenSSL alone (no parsing of our own).  Pure functions of their inputs:
 * the watch (revocation.c) and the test tool test/tools/ocsp-verify.c call
 * them.
 */
#ifndef BCD_REVCHECK_H
#define BCD_REVCHECK_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/ocsp.h>
#include <openssl/x509.h>

/* Clock skew allowed on an OCSP answer's thisUpdate / nextUpdate, seconds. */
#define BCD_OCSP_SKEW 300
/* The CRL reason code of a CA compromise (RFC 5280): renew at once with a new key. */
#define BCD_REASON_CA_COMPROMISE 2

/* A CRL that verified (bcd_crl_verify). */
typedef struct bcd_crl_checked
{
	X509_CRL   *crl;			/* owned: X509_CRL_free */
	int64_t		this_update;	/* Unix seconds */
	int64_t		next_update;	/* 0 when absent */
} bcd_crl_checked;

/*
 * der (len bytes) as one DER CRL whose issuer is one of the CA certificates
 * in cas (from the node's chain) that chains to root, and whose signature
 * that CA's key verifies (X509_CRL_verify).  0 with *out, or -1 with why in
 * err.
 */
int			bcd_crl_verify(const unsigned char *der, size_t len, X509 *root,
						   STACK_OF(X509) *cas, bcd_crl_checked *out, char *err, size_t errlen);

/*
 * Is cert listed on crl?  1 with the reason code (-1 when none is given)
 * and the revocation time, else 0.
 */
int			bcd_crl_lists(X509_CRL *crl, X509 *cert, int *reason, int64_t *revoked_at);

/* The DER of an OCSP request for leaf issued by issuer: one SHA-256 CertID, no nonce. */
int			bcd_ocsp_request(X509 *leaf, X509 *issuer, unsigned char **der, size_t *len);

/* What a verified OCSP answer says about the certificate. */
typedef struct bcd_ocsp_status
{
	int			status;			/* V_OCSP_CERTSTATUS_GOOD, _REVOKED, _UNKNOWN */
	int			reason;			/* a CRL reason code, -1 when none (revoked only) */
	int64_t		revoked_at;		/* revoked only */
	int64_t		this_update;
	int64_t		next_update;	/* 0 when absent */
} bcd_ocsp_status;

/*
 * der (len bytes) as the OCSP answer about leaf (issued by issuer), taken
 * only when: a successful BasicOCSPResponse; its signature verified and its
 * signer chaining to root through its certs and cas (OCSP_basic_verify with
 * OCSP_NOCHECKS, the delegation rule replaced by what follows); the signer's
 * extended key usage id-kp-OCSPSigning; a SingleResponse for leaf's SHA-256
 * CertID; current (OCSP_check_validity, BCD_OCSP_SKEW); its thisUpdate no
 * older than newest (the newest one taken before; 0: none).  0 with *out,
 * or -1 with why in err.
 */
int			bcd_ocsp_verify(const unsigned char *der, size_t len, X509 *leaf, X509 *issuer,
							X509 *root, STACK_OF(X509) *cas, int64_t newest,
							bcd_ocsp_status *out, char *err, size_t errlen);

/* The RFC 5280 name of a CRL reason code ("keyCompromise"; "unspecified" for -1). */
const char *bcd_reason_name(int reason);

#endif							/* BCD_REVCHECK_H */
