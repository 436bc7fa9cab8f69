/*
 * bc_tpm.h: the TPM 2.0 half shared by the server (the tpm attestor) and the
 * agent: parsing the structures of docs/protocol.md, "The tpm attestor, round by round" with tpm2-tss's
 * libtss2-mu, Names, keys, the checks (each returning a precise reason),
 * EK certificates and MakeCredential done in software.
 *
 * House rules as in bc_common.h: functions never raise, report a bc_status,
 * free what they allocated; every parser is bounded and takes (bytes, length)
 * so it can be fed by a fuzzer directly.  The check functions return BC_OK,
 * or BC_EVERIFY with *reason set to a static lower-case string (the part
 * after "tpm:" of the refusal), or another status for a caller error
 * (*reason then set too).
 */
#ifndef BC_TPM_H
#define BC_TPM_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <tss2/tss2_tpm2_types.h>

#include "bc_common.h"

/* The contract's caps: each TPM structure, and an EK certificate. */
#define BC_TPM_STRUCT_MAX 1024
#define BC_TPM_EKCERT_MAX 4096
/* Bytes of the MakeCredential secret the attestor uses. */
#define BC_TPM_SECRET_LEN 32
/* Largest Name: u16 algorithm and a SHA-512 digest. */
#define BC_TPM_NAME_MAX (2 + 64)

/* A TPM2B_PUBLIC as received: the structure and the TPMT_PUBLIC bytes. */
typedef struct bc_tpm_public
{
	TPM2B_PUBLIC pub;
	size_t		len;			/* bytes of the TPMT_PUBLIC (the size field) */
	unsigned char bytes[BC_TPM_STRUCT_MAX];	/* the TPMT_PUBLIC exactly as received */
} bc_tpm_public;

/* A TPMS_ATTEST as received: the structure and its bytes (what is signed). */
typedef struct bc_tpm_attest
{
	TPMS_ATTEST attest;
	size_t		len;
	unsigned char bytes[BC_TPM_STRUCT_MAX];
} bc_tpm_attest;

/* ------------------------------------------------------------- parsing */

/*
 * Unmarshal a TPM2B_PUBLIC of n bytes: every byte consumed, the size field
 * equal to n - 2 and not zero.  Over BC_TPM_STRUCT_MAX is BC_ETOOBIG, anything
 * else wrong BC_EINVAL.
 */
int			bc_tpm_public_parse(const unsigned char *buf, size_t n, bc_tpm_public *out);

/* Unmarshal a TPMS_ATTEST of n bytes (every byte consumed; capped). */
int			bc_tpm_attest_parse(const unsigned char *buf, size_t n, bc_tpm_attest *out);

/* Unmarshal a TPMT_SIGNATURE of n bytes (every byte consumed; capped). */
int			bc_tpm_signature_parse(const unsigned char *buf, size_t n, TPMT_SIGNATURE *out);

/* ---------------------------------------------------------- names, keys */

/*
 * The Name of a public area: u16be(nameAlg) || H_nameAlg(TPMT_PUBLIC bytes as
 * received).  nameAlg SHA-256, SHA-384 or SHA-512, else BC_EUNSUPPORTED.
 */
int			bc_tpm_name(const bc_tpm_public *pub, unsigned char out[BC_TPM_NAME_MAX],
						size_t *out_len);

/*
 * The public key of a public area as an EVP_PKEY (EVP_PKEY_fromdata): RSA
 * 2048..4096 (exponent 0 meaning 65537), ECC P-256 or P-384 (the point
 * checked to be on the curve).  Anything else is BC_EUNSUPPORTED.
 */
int			bc_tpm_public_pkey(const bc_tpm_public *pub, EVP_PKEY **out);

/* The EK SPKI: DER SubjectPublicKeyInfo of the key (i2d_PUBKEY), malloc()ed. */
int			bc_tpm_ek_spki(const bc_tpm_public *ek, unsigned char **der_out, size_t *der_len);

/* SHA-256 of the EK SPKI: the tpm attestor's bind and enrollment key. */
int			bc_tpm_ek_spki_sha256(const bc_tpm_public *ek, unsigned char out[BC_SHA256_LEN]);

/* ---------------------------------------------------------------- checks */

/*
 * The TCG EK Credential Profile templates (v2.5, annex B) the attestor
 * takes: L-1 RSA-2048 (SHA-256, objectAttributes 0x000300b2, PolicyA
 * SHA-256, AES-128-CFB, exponent 0), L-2 ECC P-256 (the same with P-256),
 * H-2 ECC P-256 (0x000300f2: userWithAuth, PolicyB SHA-256, AES-128-CFB)
 * and H-3 ECC P-384 (SHA-384, 0x000300f2, PolicyB SHA-384, AES-256-CFB).
 */
enum bc_tpm_ek_template
{
	BC_TPM_EK_L1_RSA2048 = 1,
	BC_TPM_EK_L2_P256,
	BC_TPM_EK_H2_P256,
	BC_TPM_EK_H3_P384
};

/* The template as TPM2_CreatePrimary takes it (bcd creates the RSA EK from L-1). */
int			bc_tpm_ek_template(int id, TPM2B_PUBLIC *out);

/*
 * An EK the attestor accepts: made from one of those templates, every field
 * of its public area but the key equal to the template's.  The template is
 * the key's (RSA-2048: L-1; P-384: H-3; P-256: H-2 with userWithAuth, else
 * L-2).  Reasons "ek-type" (another key type, size, curve, exponent, scheme
 * or KDF), "ek-name-alg", "ek-attributes" (objectAttributes not exactly the
 * template's), "ek-policy" (authPolicy not the template's digest),
 * "ek-symmetric".
 */
int			bc_tpm_check_ek(const bc_tpm_public *ek, const char **reason);

/*
 * The AK: nameAlg SHA-256 ("ak-name-alg"); restricted, sign, fixedTPM,
 * fixedParent, sensitiveDataOrigin, not decrypt ("ak-attributes"); ECDSA
 * SHA-256 on P-256 or RSASSA SHA-256 on RSA-2048 with exponent 65537, PSS
 * refused ("ak-scheme").
 */
int			bc_tpm_check_ak(const bc_tpm_public *ak, const char **reason);

/*
 * The AK's signature over a TPMS_ATTEST.  Checks the AK first (as above);
 * then the signature's algorithm and hash must be the AK's scheme
 * ("signature-scheme"; SHA-1 never passes), ECDSA r and s at most 32 bytes
 * each, and the signature verifies over H(attest bytes) ("bad-signature").
 */
int			bc_tpm_verify_attest(const bc_tpm_public *ak, const bc_tpm_attest *att,
								 const TPMT_SIGNATURE *sig, const char **reason);

/*
 * certifyInfo: magic TPM2_GENERATED_VALUE ("certify-magic"), type
 * ATTEST_CERTIFY ("certify-type"), attested.certify.name equal to the Name of
 * node ("certify-name").  extraData and qualifiedName are not looked at.
 * Does not verify the signature: bc_tpm_verify_attest does.
 */
int			bc_tpm_check_certify(const bc_tpm_attest *att, const bc_tpm_public *node,
								 const char **reason);

/*
 * The node key's public area: ECC P-256 ("node-key-type"), nameAlg SHA-256 or
 * SHA-384 ("node-key-name-alg"), scheme NULL or ECDSA/SHA-256
 * ("node-key-scheme"), fixedTPM, fixedParent, sensitiveDataOrigin, sign and
 * not restricted; decrypt allowed ("node-key-attributes").
 */
int			bc_tpm_check_node_key(const bc_tpm_public *node, const char **reason);

/* The node key equals key (EVP_PKEY_eq, never encodings): "node-key-mismatch". */
int			bc_tpm_node_key_matches(const bc_tpm_public *node, EVP_PKEY *key,
									const char **reason);

/* One bank of a PCR policy: which PCRs, and their expected values. */
typedef struct bc_tpm_pcr_bank
{
	uint16_t	hash_alg;		/* TPM2_ALG_SHA1, _SHA256, _SHA384, _SHA512 */
	uint32_t	pcrs;			/* bit i set: PCR i selected */
	const unsigned char *values;	/* the selected PCRs' values, ascending
									 * index, each the bank's digest size */
	size_t		values_len;
} bc_tpm_pcr_bank;

/*
 * A quote: magic ("quote-magic"), type ATTEST_QUOTE ("quote-type"), extraData
 * exactly extra[0..extra_len) ("quote-nonce").  When n_banks > 0 (a PCR
 * policy applies): the returned pcrSelect is the policy's list of (bank, set
 * of PCRs) in the policy's order, sizeofSelect padding ignored
 * ("pcr-selection"), and pcrDigest = H_sig(the banks' values concatenated in
 * that order), H_sig the hash of sig ("pcr-digest").  A policy whose values
 * do not fit its selection is BC_EINVAL ("pcr-policy").  Does not verify the
 * signature: bc_tpm_verify_attest does.
 */
int			bc_tpm_check_quote(const bc_tpm_attest *att, const TPMT_SIGNATURE *sig,
							   const unsigned char *extra, size_t extra_len,
							   const bc_tpm_pcr_bank *banks, size_t n_banks,
							   const char **reason);

/* ------------------------------------------------------ EK certificates */

/*
 * Parse an EK certificate of n bytes (at most BC_TPM_EKCERT_MAX): one DER
 * certificate by d2i_X509, after which only 0xff padding (NV index fill) may
 * follow; "ek-cert-malformed" otherwise.
 */
int			bc_tpm_ek_cert_parse(const unsigned char *der, size_t n, X509 **out,
								 const char **reason);

/*
 * The EK certificate is trusted and is this EK's: it chains at at_unix (now
 * when 0), purpose ANY, no partial chains, to one of roots (each used only
 * when self-signed) through intermediates (untrusted chain certificates)
 * ("ek-chain"), and its key is the EK's (EVP_PKEY_eq, "ek-cert-mismatch").
 */
int			bc_tpm_check_ek_cert(X509 *cert, const bc_tpm_public *ek,
								 X509 *const *roots, size_t n_roots,
								 X509 *const *intermediates, size_t n_intermediates,
								 int64_t at_unix, const char **reason);

/* ------------------------------------------------------- MakeCredential */

/*
 * TPM2_MakeCredential in software for the object called name (an AK's Name)
 * under the EK: the EK's nameAlg for KDFa/KDFe, OAEP and the HMAC, its
 * symmetric key bits for AES-CFB; RSA EKs by OAEP with label "IDENTITY\0",
 * ECC EKs by an ephemeral ECDH and KDFe.  secret is 1..digest size of the
 * EK's nameAlg bytes (32 in the attestor).  Hands back the marshalled
 * TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET, each with its 2-byte size
 * (malloc), so that badcc0de 00000001 || blob || enc is the file
 * tpm2_activatecredential -i reads.  The EK must pass bc_tpm_check_ek
 * (else BC_EUNSUPPORTED).
 */
int			bc_tpm_make_credential(const bc_tpm_public *ek,
								   const unsigned char *name, size_t name_len,
								   const unsigned char *secret, size_t secret_len,
								   unsigned char **blob_out, size_t *blob_len,
								   unsigned char **enc_out, size_t *enc_len);

/*
 * TPM2_ActivateCredential in software for an ECC EK whose private key is in
 * hand (the fleet generator's simulated TPMs, bench/fleet.c): blob and enc as
 * bc_tpm_make_credential hands them out.  The outer HMAC must be the one for
 * name (else BC_EINVAL, as a TPM refuses it); the credential (at most 64
 * bytes) goes to secret_out.  RSA EKs: BC_EUNSUPPORTED.
 */
int			bc_tpm_activate_credential(const bc_tpm_public *ek, EVP_PKEY *ek_private,
									   const unsigned char *name, size_t name_len,
									   const unsigned char *blob, size_t blob_len,
									   const unsigned char *enc, size_t enc_len,
									   unsigned char *secret_out, size_t *secret_len);

/* The bytes of a TPM hash algorithm's digest, or 0 (SHA-1 is 20). */
size_t		bc_tpm_digest_size(uint16_t hash_alg);

#endif							/* BC_TPM_H */
