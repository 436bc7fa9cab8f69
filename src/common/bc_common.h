/*
 * bc_common.h: code shared by the bc_join extension, bcd and bc-gateway.
 *
 * No PostgreSQL headers here and no ereport: every function reports through
 * its return value (a bc_status) and frees what it allocated before it
 * returns, so a caller inside the server can turn a failure into an ereport
 * without leaking.  Buffers handed back to the caller are malloc()ed and are
 * released with bc_free() (or bc_free_secret() for key material).
 *
 * Crypto, X.509, CSR and base64 come from OpenSSL 3; JSON outside the server
 * from jansson.  Nothing here is a hand-written primitive.
 */
#ifndef BC_COMMON_H
#define BC_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

/* Status codes: 0 is success, every failure is negative. */
typedef enum bc_status
{
	BC_OK = 0,
	BC_EINVAL = -1,			/* malformed input (bad encoding, wrong shape) */
	BC_EVERIFY = -2,		/* well formed, but a signature/tag/check failed */
	BC_ECRYPTO = -3,		/* OpenSSL failed for a reason not caused by input */
	BC_ENOMEM = -4,
	BC_ETOOBIG = -5,		/* input or output over its bound */
	BC_EUNSUPPORTED = -6,	/* an algorithm or key type we do not accept */
	BC_EKEY = -7			/* a private key we hold cannot be used: its own operation
							 * (sign, derive) or a question to it failed in its provider
							 * or engine; never the input's doing (a TPM or a PKCS#11
							 * token that went away); OpenSSL's queue kept */
} bc_status;

/* A short, static, lower-case description of a status. */
const char *bc_status_str(int status);

/*
 * Drain OpenSSL's error queue into buf (NUL-terminated, truncated to len).
 * Leaves buf empty when the queue was empty.
 */
void		bc_ossl_errors(char *buf, size_t len);

void		bc_free(void *p);
/* Cleanse n bytes, then free. */
void		bc_free_secret(void *p, size_t n);

/* ---------------------------------------------------------------- base64 */

/* Length of the unpadded base64url encoding of n bytes (without NUL). */
size_t		bc_b64url_encoded_len(size_t n);

/*
 * Unpadded base64url (RFC 4648 section 5) of in[0..n) into out, which must
 * hold bc_b64url_encoded_len(n) + 1 bytes; NUL-terminates; returns the length.
 */
size_t		bc_b64url_encode(const unsigned char *in, size_t n, char *out);
/* The same into a new malloc()ed string; NULL when out of memory. */
char	   *bc_b64url_encode_alloc(const unsigned char *in, size_t n);

/*
 * Decode n characters of unpadded base64url.  Refuses (BC_EINVAL) padding,
 * characters outside the url alphabet, a length of 1 mod 4 and non-zero
 * trailing bits; BC_ETOOBIG when the result would not fit in outcap.
 */
int			bc_b64url_decode(const char *in, size_t n, unsigned char *out,
							 size_t outcap, size_t *outlen);

/* Upper bound of the decoded length of n base64url characters. */
size_t		bc_b64url_decoded_maxlen(size_t n);

/* Standard padded base64 (RFC 4648 section 4), no line breaks. */
size_t		bc_b64_encoded_len(size_t n);
size_t		bc_b64_encode(const unsigned char *in, size_t n, char *out);
int			bc_b64_decode(const char *in, size_t n, unsigned char *out,
						  size_t outcap, size_t *outlen);

/* ------------------------------------------------------------------ hash */

#define BC_SHA256_LEN 32
int			bc_sha256(const void *data, size_t n, unsigned char out[BC_SHA256_LEN]);

/* base64url of SHA-256 of data (a CSR's csrSha256, say) into out (44 bytes, NUL-terminated). */
int			bc_sha256_b64url(const void *data, size_t n, char out[44]);

/* ecdsa.c: the DER ECDSA-Sig-Value of big-endian r and s (each 1..66 bytes), malloc()ed. */
int			bc_ecdsa_sig_to_der(const unsigned char *r, size_t r_len, const unsigned char *s,
								size_t s_len, unsigned char **der_out, size_t *der_len);

/* Constant-time comparison of two equal-length buffers: 1 when equal. */
int			bc_ct_equal(const void *a, const void *b, size_t n);

/* ------------------------------------------------------------------ keys */

/* A freshly generated P-256 key pair, or NULL. */
EVP_PKEY   *bc_p256_generate(void);

/* 1 when key is an EC key on P-256 (prime256v1), else 0. */
int			bc_pkey_is_p256(const EVP_PKEY *key);

/*
 * The property query that signs with key (EVP_DigestSignInit_ex): NULL for a
 * key of the default (or fips, base) provider, else "?provider=<its
 * provider>" in buf, so that a key held by another provider (the agent's
 * TPM keys, tpm2-openssl) signs in that provider even when the process
 * prefers the default one (EVP_set_default_properties "?provider=default").
 */
const char *bc_pkey_sign_props(const EVP_PKEY *key, char *buf, size_t buflen);

/*
 * The library context a key held by another provider lives in, and its
 * operations run in: NULL (OpenSSL's default context) unless a process set
 * one with bc_set_key_libctx.  The server keeps its TPM keys in a context of
 * their own (src/ext/hwkeys.c), so that freeing it closes the tpm2
 * provider's TPM connection, which tpm2-tss cannot use again after a
 * transport failure; bcd sets none.
 */
void		bc_set_key_libctx(OSSL_LIB_CTX *libctx);
OSSL_LIB_CTX *bc_pkey_libctx(const EVP_PKEY *key);

/*
 * Read a PEM key from path.  want_private: 1 reads a private key (PKCS#8 or
 * SEC1), 0 a public key (SubjectPublicKeyInfo).  The key must be P-256.
 * On failure returns NULL and writes a reason into err.
 */
EVP_PKEY   *bc_pkey_read_pem_file(const char *path, int want_private,
								  char *err, size_t errlen);

/* Write a private key as PKCS#8 PEM to path, created with mode 0600. */
int			bc_pkey_write_pem_file(EVP_PKEY *key, const char *path);

/*
 * The public JWK of a P-256 key, canonical per RFC 7638 (members crv, kty,
 * x, y in that order, no white space): {"crv":"P-256","kty":"EC","x":..,"y":..}
 */
int			bc_jwk_from_pkey(const EVP_PKEY *key, char **json_out);

/* RFC 7638 thumbprint (base64url of SHA-256 of the canonical JWK); out holds 44 bytes. */
int			bc_jwk_thumbprint(const EVP_PKEY *key, char out[44]);

/*
 * Parse a public P-256 JWK (kty EC, crv P-256, x, y; other members such as
 * kid, use, alg are ignored; d is refused).  Bounded to 4 KiB of JSON.
 */
int			bc_pkey_from_jwk(const char *json, size_t n, EVP_PKEY **out);
struct json_t;
int			bc_pkey_from_jwk_object(struct json_t *jwk, EVP_PKEY **out);

/* A P-256 public key from an encoded point, checked to be on the curve. */
int			bc_p256_from_point(const unsigned char *point, size_t point_len, EVP_PKEY **out);

/* ------------------------------------------------------- ossl_cache.c */

/*
 * Reuse of OpenSSL contexts across calls, for single-threaded processes (the
 * PostgreSQL backend): off unless enabled; see ossl_cache.c.
 */
void		bc_ossl_cache_enable(void);
#ifdef BC_TEST_BUILD			/* test builds only (mk/host.mk, mk/fuzz.mk) */
void		bc_ossl_cache_release(void);
#endif
/* Drop a key's contexts and reference (before its owner frees it). */
void		bc_ossl_cache_forget(EVP_PKEY *key);
EVP_PKEY   *bc_ossl_cache_p256_params(void);
EVP_MD_CTX *bc_ossl_cache_sign_ctx(EVP_PKEY *key);
EVP_PKEY_CTX *bc_ossl_cache_derive_ctx(EVP_PKEY *priv);
int			bc_ossl_cache_ca_checked(X509 *ca_cert, EVP_PKEY *ca_key);
void		bc_ossl_cache_ca_check_passed(X509 *ca_cert, EVP_PKEY *ca_key);

/* ------------------------------------------------------------------ JOSE */

/* No compact serialization over this many bytes is accepted or produced. */
#define BC_JOSE_MAX (256 * 1024)

/*
 * JWS compact serialization (RFC 7515) with alg ES256 over payload, signed
 * by the P-256 private key.  Protected header: {"alg":"ES256","kid":kid}
 * (kid omitted when NULL).  *jws_out is NUL-terminated.
 */
int			bc_jws_sign_es256(EVP_PKEY *key, const char *kid,
							  const unsigned char *payload, size_t n,
							  char **jws_out);
/*
 * The same with a "typ" member after kid: {"alg":"ES256","kid":kid,"typ":typ}
 * (each omitted when NULL), e.g. typ "JWT" for a JWT-SVID.
 */
int			bc_jws_sign_es256_typ(EVP_PKEY *key, const char *kid, const char *typ,
								  const unsigned char *payload, size_t n,
								  char **jws_out);

/*
 * The "kid" of a JWS compact serialization's protected header, not verified
 * (to choose the key to verify with): "" when it has none; BC_EINVAL when it
 * is not a string shorter than kidlen or the JWS is malformed.
 */
int			bc_jws_header_kid(const char *jws, size_t n, char *kid, size_t kidlen);

/*
 * Verify a JWS compact serialization of n bytes against a P-256 public key.
 * The protected header must be a JSON object with "alg":"ES256" (anything
 * else, "none" included, is BC_EUNSUPPORTED) and no "crit".  On success the
 * decoded payload (NUL-terminated for convenience, *payload_len excludes it)
 * is handed back; over max_payload is BC_ETOOBIG.  A bad signature is
 * BC_EVERIFY, a malformed serialization BC_EINVAL.
 */
int			bc_jws_verify_es256(EVP_PKEY *pub, const char *jws, size_t n,
								size_t max_payload,
								unsigned char **payload_out, size_t *payload_len);

/*
 * A public JWK of kty EC (crv P-256, P-384 or P-521; the point checked on
 * its curve) or RSA (n of 2048 to 8192 bits, e) as a key, through OpenSSL
 * (EVP_PKEY_fromdata, EVP_PKEY_public_check).  A private member (d, p) is
 * BC_EUNSUPPORTED, as is another kty or curve; malformed is BC_EINVAL.
 */
int			bc_pkey_from_jwk_any(struct json_t *jwk, EVP_PKEY **out);

/*
 * Verify a JWS compact serialization whose header alg is one of RS256,
 * RS384, RS512, PS256, PS384, PS512 (RSASSA-PSS, MGF1 of the same digest,
 * salt its length), ES256, ES384, ES512 (the curve that alg names), and
 * fits pub's type (anything else, "none" included, BC_EUNSUPPORTED; "crit"
 * refused).  Otherwise as bc_jws_verify_es256.
 */
int			bc_jws_verify_any(EVP_PKEY *pub, const char *jws, size_t n, size_t max_payload,
							  unsigned char **payload_out, size_t *payload_len);

/*
 * Verify sig (sig_len bytes as a JWS carries it: r || s for ECDSA) over
 * data with pub under alg, one of bc_jws_verify_any's: BC_OK, BC_EVERIFY,
 * BC_EUNSUPPORTED (alg unknown or not pub's kind), BC_ECRYPTO.  The one
 * place a JWS signature is checked for RS/PS/ES (jose_x5c.c uses it too).
 */
int			bc_jws_alg_verify(const char *alg, EVP_PKEY *pub, const char *data, size_t n,
							  const unsigned char *sig, size_t sig_len);

/*
 * JWE compact serialization (RFC 7516/7518): alg ECDH-ES (direct key
 * agreement, Concat KDF), enc A256GCM, to a P-256 public key.  The protected
 * header is {"alg":"ECDH-ES","enc":"A256GCM","epk":{...}} plus, when hdr_name
 * is not NULL, the string member hdr_name:hdr_value.  *jwe_out is
 * NUL-terminated.  apu/apv are empty.
 */
int			bc_jwe_seal(EVP_PKEY *recipient, const char *hdr_name,
						const char *hdr_value, const unsigned char *pt,
						size_t n, char **jwe_out);

/*
 * Open a JWE made as above with the recipient's private key.  The header
 * must have alg ECDH-ES and enc A256GCM, an epk on P-256 (a point on the
 * curve), no "zip" and no "crit"; the encrypted key part must be empty.
 * When hdr_name is not NULL the header must carry it as a string member and
 * its value is handed back in *hdr_value_out (malloc, NUL-terminated);
 * missing is BC_EINVAL.  Plaintext over max_pt is BC_ETOOBIG; a failed tag
 * is BC_EVERIFY.  *pt_out is NUL-terminated (not counted in *pt_len) and is
 * released with bc_free_secret(*pt_out, *pt_len + 1).
 */
int			bc_jwe_open(EVP_PKEY *recipient_priv, const char *jwe, size_t n,
						size_t max_pt, const char *hdr_name,
						char **hdr_value_out,
						unsigned char **pt_out, size_t *pt_len);

/* ------------------------------------------------------- JWS with x5c (jose_x5c.c) */

/* The algorithms of a JWS that carries its signer's chain (x509pop evidence). */
enum bc_jws_alg
{
	BC_JWS_ES256 = 0,			/* P-256, SHA-256, R||S of 64 bytes */
	BC_JWS_ES384 = 1,			/* P-384, SHA-384, R||S of 96 bytes */
	BC_JWS_RS256 = 2,			/* RSA PKCS#1 v1.5, SHA-256 */
	BC_JWS_PS256 = 3			/* RSA-PSS, SHA-256, MGF1-SHA-256, 32-byte salt */
};

/* At most a leaf and 4 intermediates, each at most 16,384 bytes of DER. */
#define BC_X5C_INTERMEDIATES_MAX 4
#define BC_X5C_CERTS_MAX (1 + BC_X5C_INTERMEDIATES_MAX)
#define BC_X5C_CERT_MAX 16384
/* RSA keys of a chain: 2048 to 8192 bits; the longest signature. */
#define BC_X5C_RSA_MIN_BITS 2048
#define BC_X5C_RSA_MAX_BITS 8192
#define BC_X5C_SIG_MAX (BC_X5C_RSA_MAX_BITS / 8)

/* What failed in bc_jws_x5c_parse (beside its status). */
enum bc_x5c_fault
{
	BC_X5C_NONE = 0,
	BC_X5C_MALFORMED,			/* encoding, JSON, header members, alg */
	BC_X5C_TOO_MANY_INTERMEDIATES,
	BC_X5C_OVERSIZED_CERT,
	BC_X5C_WEAK_KEY,			/* RSA under 2048 bits */
	BC_X5C_HUGE_KEY,			/* RSA over 8192 bits */
	BC_X5C_KEY_TYPE,			/* neither P-256, P-384 nor RSA */
	BC_X5C_ALG_MISMATCH			/* alg does not fit the leaf's key */
};

/* A parsed x5c JWS: the chain (leaf first), the payload, the signature. */
typedef struct bc_x5c_jws
{
	int			alg;			/* enum bc_jws_alg */
	X509	   *certs[BC_X5C_CERTS_MAX];	/* owned; certs[0] the leaf */
	size_t		ncerts;
	unsigned char *payload;		/* decoded, NUL-terminated (not counted) */
	size_t		payload_len;
	unsigned char *sig;
	size_t		sig_len;
	size_t		signing_input_len;	/* jws[0..this) is what was signed */
} bc_x5c_jws;

/* "ES256", "ES384", "RS256", "PS256" for an enum bc_jws_alg, else NULL. */
const char *bc_jws_alg_name(int alg);

/* The key limits of a chain certificate: BC_X5C_NONE or the fault. */
int			bc_x5c_key_fault(const EVP_PKEY *key);

/*
 * Parse a JWS compact serialization whose protected header is exactly alg
 * and x5c (optionally typ), in this order of checks: the count of x5c
 * entries and the decoded size of each (before anything is parsed), each
 * certificate parsed and its key within the limits, the header's members,
 * alg fitting the leaf key; then the payload (at most max_payload bytes)
 * and the signature are decoded, not verified.  On failure *fault says what
 * failed and j holds nothing.  Release with bc_x5c_jws_free().
 */
int			bc_jws_x5c_parse(const char *jws, size_t n, size_t max_payload,
							 bc_x5c_jws *j, int *fault);
/* Verify j's signature over jws (as parsed) with the leaf's key: BC_OK or BC_EVERIFY. */
int			bc_jws_x5c_verify(const bc_x5c_jws *j, const char *jws);
void		bc_x5c_jws_free(bc_x5c_jws *j);

/*
 * Sign payload as an x5c JWS: alg (enum bc_jws_alg) fitting key, the header
 * {"alg", "x5c": chain[0..nchain) in standard base64 DER}, chain[0] the
 * certificate of key.  *jws_out is NUL-terminated (malloc).
 */
int			bc_jws_sign_x5c(EVP_PKEY *key, int alg, X509 *const *chain, size_t nchain,
							const unsigned char *payload, size_t n, char **jws_out);

/* ------------------------------------------------------------------- PKI */

/* Upper bound on a CSR or certificate in DER. */
#define BC_DER_MAX (16 * 1024)

/* A parsed PKCS#10 CSR (csr.c): opaque. */
typedef struct bc_csr bc_csr;

/*
 * Parse a DER PKCS#10 CSR of n bytes (no trailing bytes).  The key must be
 * P-256 (else BC_EUNSUPPORTED).  Does not check the signature.  Free with
 * bc_csr_free().
 */
int			bc_csr_parse(const unsigned char *der, size_t n, bc_csr **out);
void		bc_csr_free(bc_csr *csr);

/* The CSR's public key (borrowed: valid while the CSR lives). */
EVP_PKEY   *bc_csr_pubkey(const bc_csr *csr);

/* BC_OK when the CSR's own signature verifies with its key (proof of possession). */
int			bc_csr_verify_pop(const bc_csr *csr);

/* SHA-256 over the DER SubjectPublicKeyInfo of the CSR's key. */
int			bc_csr_spki_sha256(const bc_csr *csr, unsigned char out[BC_SHA256_LEN]);
/* The DER SubjectPublicKeyInfo of the CSR's key, as OpenSSL encoded it (borrowed). */
void		bc_csr_spki_der(const bc_csr *csr, const unsigned char **der, size_t *len);
/* The CSR key's public key bits: the uncompressed point (borrowed). */
void		bc_csr_key_bits(const bc_csr *csr, const unsigned char **bits, size_t *len);

#ifdef BC_TEST_BUILD			/* test builds only: for bc_cert_issue */
/* Give cert the CSR's SubjectPublicKeyInfo, copied as it is. */
int			bc_csr_set_cert_pubkey(const bc_csr *csr, X509 *cert);
#endif

/* SHA-256 over the DER SubjectPublicKeyInfo of key. */
int			bc_pkey_spki_sha256(EVP_PKEY *key, unsigned char out[BC_SHA256_LEN]);
/* The same over a certificate's SubjectPublicKeyInfo, from its own encoding (no provider encoder). */
int			bc_cert_spki_sha256(X509 *cert, unsigned char out[BC_SHA256_LEN]);

/* A CSR for key (subject CN=cn when not NULL), signed with SHA-256, as DER. */
int			bc_csr_create(EVP_PKEY *key, const char *cn,
						  unsigned char **der_out, size_t *der_len);

/* What bc_cert_issue needs. */
typedef struct bc_cert_params
{
	X509	   *ca_cert;		/* issuer certificate */
	EVP_PKEY   *ca_key;			/* issuer private key */
	EVP_PKEY   *subject_key;	/* the public key to certify ... */
	const bc_csr *subject_csr;	/* ... or a CSR's: its key bits are copied,
								 * no key encoder runs */
	const char *subject_cn;		/* subject CN (may be NULL: empty subject) */
	const char *const *uris;	/* URI SANs, in order */
	size_t		n_uris;
	int64_t		not_before;		/* unix seconds */
	int64_t		not_after;		/* unix seconds */
	const char *crl_url;		/* a CRL distribution point URI, or NULL */
	const char *ocsp_url;		/* an OCSP responder URI (authorityInfoAccess), or NULL */
} bc_cert_params;

#ifdef BC_TEST_BUILD			/* test builds only: the unit tests' reference issuer */
/*
 * Issue an X.509 v3 end-entity certificate: 128 random serial bits, ECDSA
 * with SHA-256, basicConstraints CA:FALSE (critical), keyUsage
 * digitalSignature (critical), extendedKeyUsage clientAuth and serverAuth,
 * subject and authority key identifiers, the URI SANs, then the CRL
 * distribution point and the authorityInfoAccess OCSP URI when given.  The serial is handed
 * back big-endian in serial_out.  With subject_cn NULL the subject is empty,
 * so at least one URI is required (BC_EINVAL otherwise) and the SAN extension
 * is marked critical (RFC 5280 4.1.2.6 and 4.2.1.6).
 */
int			bc_cert_issue(const bc_cert_params *p,
						  unsigned char serial_out[16], X509 **out);
#endif

/*
 * The same certificate as bc_cert_issue, for a CSR's key (p->subject_csr;
 * BC_EINVAL without one), as DER (malloc) without an X509 object: built
 * with ASN.1 templates of our own (pki.c) from OpenSSL's types, the
 * issuer's name, the algorithm and the constant extensions as they are,
 * the CSR's SubjectPublicKeyInfo as OpenSSL encoded it, and the
 * TBSCertificate encoded once, signed and wrapped.  test_pki.c checks it
 * byte for byte against bc_cert_issue's.
 */
int			bc_cert_issue_der(const bc_cert_params *p, unsigned char serial_out[16],
							  unsigned char **der_out, size_t *der_len);

/* ------------------------------------------------------------- crl.c */

/* One revoked certificate of a CRL. */
typedef struct bc_crl_entry
{
	unsigned char serial[16];	/* big-endian, as bc_cert_issue hands it back */
	int64_t		revoked_at;		/* unix seconds */
	int			reason;			/* an RFC 5280 reason code (bc_crl_reason_code) */
} bc_crl_entry;

/* The RFC 5280 reason code of a bc_join revocation reason (unspecified when unknown). */
int			bc_crl_reason_code(const char *reason);

/*
 * The CRL of the CA: v2, thisUpdate/nextUpdate, the entries with their
 * reason codes, the CRL number and the authority key identifier, signed
 * ECDSA-SHA256 by ca_key; DER, malloc()ed.
 */
int			bc_crl_build(X509 *ca, EVP_PKEY *ca_key, const bc_crl_entry *entries, size_t n,
						 int64_t this_update, int64_t next_update, uint64_t number,
						 unsigned char **der_out, size_t *der_len);

/* DER of a certificate (malloc). */
int			bc_cert_der(X509 *cert, unsigned char **der_out, size_t *der_len);

/* Parse one DER certificate of n bytes (no trailing bytes). */
int			bc_cert_parse(const unsigned char *der, size_t n, X509 **out);

/* Read one PEM certificate from path. */
X509	   *bc_cert_read_pem_file(const char *path, char *err, size_t errlen);

/*
 * Verify leaf against the single trusted CA certificate (X509_verify_cert,
 * purpose any, at time at_unix, or now when 0).  BC_EVERIFY when it fails.
 */
#ifdef BC_TEST_BUILD			/* test builds only (mk/host.mk, mk/fuzz.mk) */
int			bc_cert_verify_chain(X509 *leaf, X509 *ca, int64_t at_unix);
#endif

/*
 * Verify leaf through the untrusted certificates untrusted[0..n) to the one
 * trust anchor (X509_verify_cert, strict, purpose any, the anchor trusted
 * even when not self-signed, no other store), at at_unix or now when 0.
 * BC_EVERIFY when it fails.
 */
int			bc_cert_verify_path(X509 *leaf, X509 *const *untrusted, size_t n, X509 *anchor,
								int64_t at_unix);

/*
 * Read the PEM certificates of a bundle (a file when path is not NULL, else
 * text[0..len)), in order, into out[0..max): at least one, at most max
 * (BC_ETOOBIG beyond); text outside PEM blocks and blocks of another kind
 * are skipped, as openssl does.  *n is how many; the caller frees each.  BC_EINVAL and err otherwise.
 */
int			bc_cert_read_pem_bundle(const char *path, const char *text, size_t len,
									X509 **out, size_t max, size_t *n,
									char *err, size_t errlen);

/* notAfter of cert in unix seconds. */
int			bc_cert_not_after(X509 *cert, int64_t *out);

/* How many URI SANs of cert start with prefix. */
int			bc_cert_uri_san_count(X509 *cert, const char *prefix);

/*
 * The first URI SAN of cert starting with prefix (e.g. "spiffe://"), as a
 * malloc()ed string, or BC_EINVAL when there is none.
 */
int			bc_cert_uri_san(X509 *cert, const char *prefix, char **out);

/* ---------------------------------------------------------- state.c */

/* Sealed challenge state: at most this many characters (docs/attestors.md). */
#define BC_STATE_MAX 1024
#define BC_STATE_KEY_LEN 32

/*
 * Seal pt (n bytes) under a 32-byte key: AES-256-GCM under
 * HKDF-SHA256(key32, "bc_join/state/v1:" context), a random 96-bit IV;
 * *state_out is base64url (malloc, NUL-terminated).  context (1..64
 * printable ASCII, e.g. "tpm") separates uses: a state opens only under the
 * context it was sealed for.  Over BC_STATE_MAX characters is BC_ETOOBIG.
 */
int			bc_seal_state(const unsigned char key32[BC_STATE_KEY_LEN], const char *context,
						  const unsigned char *pt, size_t n, char **state_out);

/*
 * Open a state of n characters sealed by bc_seal_state with the same key and
 * context.  A failed tag (tampered, wrong key or context) is BC_EVERIFY,
 * bad encoding BC_EINVAL, over BC_STATE_MAX BC_ETOOBIG.  *pt_out is
 * NUL-terminated (not counted) and is released with
 * bc_free_secret(*pt_out, *pt_len + 1).
 */
int			bc_open_state(const unsigned char key32[BC_STATE_KEY_LEN], const char *context,
						  const char *state, size_t n,
						  unsigned char **pt_out, size_t *pt_len);

/*
 * The same for a P-256 challenge.key (what tools/bc-join-keygen writes): a
 * JWE (ECDH-ES, A256GCM) to the key, the context in its protected header.
 */
int			bc_seal_state_p256(EVP_PKEY *key, const char *context,
							   const unsigned char *pt, size_t n, char **state_out);
int			bc_open_state_p256(EVP_PKEY *priv, const char *context,
							   const char *state, size_t n,
							   unsigned char **pt_out, size_t *pt_len);

/*
 * Read challenge.key: a file of exactly 32 bytes fills key32 (*pkey_out
 * NULL); otherwise it must be a PEM P-256 private key, handed back in
 * *pkey_out.  BC_EINVAL and a reason in err otherwise.
 */
int			bc_state_key_read_file(const char *path, unsigned char key32[BC_STATE_KEY_LEN],
								   EVP_PKEY **pkey_out, char *err, size_t errlen);

/* ----------------------------------------------------------------- cloud.c */

/*
 * The provider-independent checks of the cloud-iid attestor (docs/attestors.md,
 * "cloud-iid").  Each verifier returns BC_OK, or a failure status with
 * *reason set to a static refusal reason ("malformed-pkcs7", "bad-signature",
 * ...); what it hands back is malloc()ed.
 */
#define BC_CLOUD_DOC_MAX (16 * 1024)

/* PEM text holding one or more certificates: every one parses, or BC_EINVAL. */
int			bc_cloud_certs_from_pem(const char *pem, size_t n, STACK_OF(X509) **out);

/* The providers whose PKCS#7 the verifiers hold to what they sign with. */
enum bc_cloud_provider
{
	BC_CLOUD_AWS,
	BC_CLOUD_AZURE
};

/*
 * The PKCS#7 envelope alone, as both verifiers check it first: a SignedData
 * consuming every byte, one SignerInfo, content attached ("malformed-pkcs7"),
 * versions 1, one digestAlgorithm equal to the SignerInfo's, parameters
 * absent or NULL, no CRLs, no unsigned attributes, signed attributes (if
 * any) with contentType id-data and a messageDigest ("malformed-pkcs7");
 * the digest algorithm in the provider's allow-list ("digest-algorithm":
 * AWS id-sha256; Azure id-sha256 or sha256WithRSAEncryption as its
 * documented sample writes it; never MD5 or SHA-1) and the signature
 * algorithm rsaEncryption or sha256WithRSAEncryption ("signature-algorithm").
 */
#ifdef BC_TEST_BUILD			/* test builds only (mk/host.mk, mk/fuzz.mk) */
int			bc_cloud_pkcs7_check(const unsigned char *der, size_t n, int provider,
								 const char **reason);
#endif

/*
 * AWS: a BER PKCS#7 SignedData with exactly one SignerInfo and its content
 * attached, its envelope as bc_cloud_pkcs7_check holds it, verified by
 * PKCS7_verify(p7, certs, NULL, NULL, out,
 * PKCS7_NOINTERN | PKCS7_NOVERIFY): only a configured certificate can be
 * the signer.  *content is the signed content (NUL-terminated, not counted).
 */
int			bc_cloud_aws_verify(const unsigned char *p7, size_t n, STACK_OF(X509) *certs,
								unsigned char **content, size_t *content_len,
								const char **reason);

/*
 * Azure: the same shape; the signer is the certificate PKCS7_get0_signers
 * matches to the SignerInfo (never the bag's first), chain-verified at
 * at_unix with purpose ANY to roots through intermediates (nothing else,
 * nothing fetched), with a dNSName equal to domain or ending in "." domain;
 * then PKCS7_verify(p7, {signer}, NULL, NULL, out, NOINTERN | NOVERIFY).  A
 * chain that verifies but for the time (the signer or a CA expired, or not
 * yet valid, at at_unix) is refused "signer-expired" ("signer-not-yet-valid")
 * once the signature verified: a genuine document, only old.
 */
int			bc_cloud_azure_verify(const unsigned char *p7, size_t n, STACK_OF(X509) *roots,
								  STACK_OF(X509) *intermediates, const char *domain,
								  int64_t at_unix, unsigned char **content,
								  size_t *content_len, const char **reason);

/*
 * A JWKS document ({"keys": [...]}): BC_OK when every key has a string kid
 * and kty and every RSA key (2048 to 8192 bits) builds; *rsa_keys counts them.
 */
int			bc_cloud_jwks_check(const char *jwks, size_t n, int *rsa_keys);

/*
 * The keys of a JWKS whose kid is kid: *matches counts them; when exactly
 * one matches and it is an RSA key, *key is it (EVP_PKEY_fromdata from n, e).
 */
int			bc_cloud_jwks_rsa_key(const char *jwks, size_t n, const char *kid,
								  int *matches, EVP_PKEY **key);

/* RS256 (RSASSA-PKCS1-v1_5, SHA-256) over input: BC_OK or BC_EVERIFY. */
int			bc_cloud_rs256_verify(EVP_PKEY *key, const char *input, size_t n,
								  const unsigned char *sig, size_t sig_len);

/* "YYYY-MM-DDTHH:MM:SSZ" (AWS pendingTime) as Unix seconds. */
int			bc_cloud_parse_rfc3339(const char *s, int64_t *out);
/* "MM/DD/YY HH:MM:SS -0000" (Azure timeStamp, UTC) as Unix seconds. */
int			bc_cloud_parse_azure_time(const char *s, int64_t *out);
/* 1 when s is a UUID: 8-4-4-4-12 hex digits. */
int			bc_cloud_is_uuid(const char *s);

/* ------------------------------------------------- SPIFFE trust bundles (#46 federation) */

/* The largest bundle accepted from another trust domain, bytes. */
#define BC_SPIFFE_BUNDLE_MAX (256 * 1024)
/* The most keys a bundle may hold. */
#define BC_SPIFFE_BUNDLE_KEYS_MAX 64
/* The largest spiffe_sequence (2^53: every JSON implementation holds it exactly). */
#define BC_SPIFFE_SEQUENCE_MAX 9007199254740992LL

/*
 * Judge another trust domain's bundle (spiffe_bundle.c): BC_OK, or
 * BC_ETOOBIG (over BC_SPIFFE_BUNDLE_MAX bytes or BC_SPIFFE_BUNDLE_KEYS_MAX
 * keys) or BC_EINVAL (not a JWK Set, a sequence or hint that is not an
 * integer up to 2^53, an x509-svid key whose x5c is not exactly one DER CA
 * certificate holding the JWK's key, a jwt-svid key without kid), why then
 * saying which (NUL-terminated, when whylen > 0).  JWKs of an unknown use
 * or kty are ignored.
 */
int			bc_spiffe_bundle_check(const char *json, size_t n, char *why, size_t whylen);

/*
 * The one certificate of an x509-svid JWK's x5c (exactly one standard base64
 * DER certificate of at most 16 KiB, nothing after it), or NULL with why
 * naming key i.  The database's check above and bcd's trust bundles use it.
 */
X509	   *bc_spiffe_x5c_cert(struct json_t *jwk, char *why, size_t whylen, long i);

/* The certificates of a bundle's x509-svid keys (after the check above), a new stack. */
int			bc_spiffe_bundle_x509_roots(const char *json, size_t n, STACK_OF(X509) **out);

#endif							/* BC_COMMON_H */
