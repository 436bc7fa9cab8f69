/*
 * ocsp.h: an OCSP request (RFC 6960 4.1) as bc_join's responders take it:
 * parsed by OpenSSL (d2i_OCSP_REQUEST), bounded, and reduced to what an
 * answer needs: each CertID's hash algorithm, issuer name and key hashes,
 * serial (as bc_join writes serials) and own DER, and the nonce (RFC 9654).
 *
 * Shared by the extension (bc_join.ocsp_response) and bc-gateway (its
 * malformedRequest answers and its cache key); no PostgreSQL headers.
 * Fuzzed: test/fuzz/fuzz_ocsp_request.c.
 */
#ifndef BC_OCSP_H
#define BC_OCSP_H

#include <stddef.h>

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

#endif
