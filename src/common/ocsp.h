/*
 * ocsp.h: an OCSP request (RFC 6960 4.1) as bc_join's responders take it:
 * parsed by OpenSSL (d2i_OCSP_REQUEST), bounded, and reduced to what an
 * answer needs: each CertID's hash algorithm, issuer name and key hashes,
 * serial (as bc_join writes serials) and own DER, and the nonce (RFC 9654).
 *
 * Shared by the extension (bc_join.ocsp_response) and bc-gateway (its
 * malformedRequest answers and its cache key); no PostgreSQL headers.
 * Fuzzed: test/fuzz/fuzz_ocsp_request.c.
 *
 * The answer is built here too, by OpenSSL's OCSP responder API: the
 * delegated responder certificate (RFC 6960 4.2.2.2) the extension mints
 * in memory, the signed BasicOCSPResponse and the unsigned error responses.
 * Those return a bc_status (bc_common.h); DER comes back malloc()ed.
 */
#ifndef BC_OCSP_H
#define BC_OCSP_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#define BC_OCSP_REQUEST_MAX   4096	/* bytes of DER; larger: malformedRequest / 413 */
#define BC_OCSP_MAX_CERTIDS   16
#define BC_OCSP_NONCE_MAX     128	/* RFC 9654 (1..128 octets); 0 or more: malformedRequest */

/* One CertID of a request. */
typedef struct bc_ocsp_certid
{
	int			hash_nid;		/* NID_sha1, NID_sha256, or another (then never
								 * matched) */
	unsigned char name_hash[64];
	size_t		name_hash_len;
	unsigned char key_hash[64];
	size_t		key_hash_len;
	char		serial_hex[65]; /* lower-case, zero-padded to 32 hex when <=16
								 * bytes; "" when negative/zero/longer than 32
								 * bytes (never matches) */
	unsigned char der[256];
	size_t		der_len;		/* the CertID's own DER: the gateway's cache key */
} bc_ocsp_certid;

/* A request: its CertIDs in request order and its nonce, if any. */
typedef struct bc_ocsp_request
{
	int			n;
	bc_ocsp_certid ids[BC_OCSP_MAX_CERTIDS];
	int			has_nonce;
	size_t		nonce_len;
	unsigned char nonce[BC_OCSP_NONCE_MAX];
} bc_ocsp_request;

/*
 * Parse len bytes of DER into *out.  0: parsed; -1: malformed (err, when
 * not NULL, says why in lower case).  OpenSSL's d2i_OCSP_REQUEST does the
 * parsing.  Malformed: over BC_OCSP_REQUEST_MAX bytes, not exactly one DER
 * OCSPRequest, no CertID or over BC_OCSP_MAX_CERTIDS, a hash over 64 bytes,
 * a CertID whose DER is over 256 bytes, a nonce extension whose value is not
 * one OCTET STRING of 1..BC_OCSP_NONCE_MAX octets or that appears twice, an
 * unknown critical extension.  A request signature and a requestorName are
 * ignored (RFC 5019).  Leaves OpenSSL's error queue empty.
 */
int			bc_ocsp_parse_request(const unsigned char *der, size_t len, bc_ocsp_request *out,
								  char *err, size_t errlen);

/* The status of one CertID in an answer. */
typedef struct bc_ocsp_single
{
	int			status;			/* V_OCSP_CERTSTATUS_GOOD, _REVOKED or _UNKNOWN */
	int			reason;			/* revoked: an RFC 5280 reason code; -1: none */
	int64_t		revoked_at;		/* revoked: unix seconds */
} bc_ocsp_single;

/*
 * 1 when the CertID names ca as its issuer: a SHA-1 or SHA-256 CertID whose
 * issuerNameHash is the hash of ca's subject and issuerKeyHash the hash of
 * ca's public key bits (RFC 6960 4.1.1); 0 otherwise (other algorithms too).
 */
int			bc_ocsp_issuer_matches(const bc_ocsp_certid *id, X509 *ca);

/*
 * A delegated OCSP responder certificate for key's public half, issued by ca
 * (signed ECDSA-SHA256 with ca_key): v3, 128 random serial bits, subject CN
 * "bc_join OCSP responder", basicConstraints CA:FALSE and keyUsage
 * digitalSignature (critical), extendedKeyUsage id-kp-OCSPSigning only,
 * id-pkix-ocsp-nocheck (non-critical), subject and authority key
 * identifiers; valid from not_before to not_after (unix seconds).
 * BC_EKEY: ca_key's signature failed (OpenSSL's queue kept).
 */
int			bc_ocsp_responder_cert(X509 *ca, EVP_PKEY *ca_key, EVP_PKEY *key,
								   int64_t not_before, int64_t not_after, X509 **out);

/*
 * The DER OCSPResponse "successful" answering req: one SingleResponse per
 * CertID in request order (the CertID as parsed, singles[i] its status),
 * thisUpdate and nextUpdate as given (unix seconds), the nonce echoed when
 * req has one, ResponderID byKey, the responder certificate in certs and
 * after it issuer when not NULL (the CA that issued the responder: a client
 * holding only the root, or the chain of an earlier intermediate, builds the
 * responder's chain from the answer), signed ECDSA-SHA256 by key (the
 * responder's; producedAt is the signing time).  BC_EKEY: key's signature
 * failed (OpenSSL's queue kept).
 */
int			bc_ocsp_response_der(const bc_ocsp_request *req, const bc_ocsp_single *singles,
								 int64_t this_update, int64_t next_update,
								 X509 *responder, X509 *issuer, EVP_PKEY *key,
								 unsigned char **der_out, size_t *der_len);

/*
 * An unsigned OCSPResponse of an error status (OCSP_RESPONSE_STATUS_
 * MALFORMEDREQUEST, _INTERNALERROR, _TRYLATER, _SIGREQUIRED, _UNAUTHORIZED):
 * no responseBytes (RFC 6960 4.2.1).
 */
int			bc_ocsp_error_der(int status, unsigned char **der_out, size_t *der_len);

#endif
