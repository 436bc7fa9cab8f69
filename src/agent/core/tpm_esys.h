/*
 * tpm_esys.h: bcd's ESAPI session with the TPM (tpm2-tss over a TCTI): the
 * endorsement key and its certificate, the attestation key under it (kept in
 * the state directory), TPM2_Certify of a node key, TPM2_Quote and
 * TPM2_ActivateCredential.  Every transient object and session is flushed.
 */
#ifndef BCD_TPM_ESYS_H
#define BCD_TPM_ESYS_H

#include <stddef.h>
#include <stdint.h>

#include <tss2/tss2_tpm2_types.h>

#include "bc_tpm.h"

/* Bytes of one TPM structure or certificate as they go on the wire. */
typedef struct bcd_tpm_bytes
{
	size_t		len;
	unsigned char data[BC_TPM_EKCERT_MAX];
} bcd_tpm_bytes;

typedef struct bcd_tpm bcd_tpm;

/* Which EK: the RSA-2048 low-range one (default) or the ECC P-384 high-range one. */
#define BCD_TPM_EK_RSA "rsa"
#define BCD_TPM_EK_P384 "p384"

/*
 * Connect through tcti (Tss2_TctiLdr_Initialize) and take the EK of kind
 * ek ("rsa" or "p384"): its persistent handle (0x81010001, 0x81010016) when
 * it is there, else created from its TCG template.
 */
int			bcd_tpm_open(const char *tcti, const char *ek, bcd_tpm **out,
						 char *err, size_t errlen);

/* Flush everything transient, close the connection. */
void		bcd_tpm_close(bcd_tpm *t);

/* The EK's TPM2B_PUBLIC as the TPM marshals it. */
const bcd_tpm_bytes *bcd_tpm_ek_pub(const bcd_tpm *t);

/*
 * The EK certificate whose key is the EK's, from the NV indices
 * 0x01c00000-0x01c07fff (every one read), DER without the NV padding;
 * len 0 when the TPM has none for this EK.
 */
int			bcd_tpm_ek_cert(bcd_tpm *t, bcd_tpm_bytes *cert, char *err, size_t errlen);

/*
 * The AK under the EK (ECDSA P-256/SHA-256, restricted sign, fixedTPM,
 * fixedParent, sensitiveDataOrigin): loaded from dir/tpm-ak.pub and
 * dir/tpm-ak.priv, or made and saved there when both are missing.  *pub: its
 * TPM2B_PUBLIC.
 */
int			bcd_tpm_ak(bcd_tpm *t, const char *dir, bcd_tpm_bytes *pub,
					   char *err, size_t errlen);

/*
 * TPM2_Certify by the AK of the key whose TPM2B_PUBLIC / TPM2B_PRIVATE are
 * given (a tpm2-openssl key: loaded under the owner primary the provider
 * uses, then flushed): TPMS_ATTEST and TPMT_SIGNATURE.
 */
int			bcd_tpm_certify(bcd_tpm *t, const unsigned char *pub, size_t pub_len,
							const unsigned char *priv, size_t priv_len,
							bcd_tpm_bytes *attest, bcd_tpm_bytes *sig,
							char *err, size_t errlen);

/* TPM2_Quote by the AK of sel with extraData nonce: TPMS_ATTEST and TPMT_SIGNATURE. */
int			bcd_tpm_quote(bcd_tpm *t, const TPML_PCR_SELECTION *sel,
						  const unsigned char *nonce, size_t nonce_len,
						  bcd_tpm_bytes *attest, bcd_tpm_bytes *sig,
						  char *err, size_t errlen);

/*
 * TPM2_PCR_Read of the PCRs of bank (a TPM algorithm id) in pcrs (bit i: PCR
 * i, 0..23), as many calls as it takes: values[i] the value of PCR i,
 * *digest_len the bank's digest size.
 */
int			bcd_tpm_pcr_read(bcd_tpm *t, uint16_t bank, uint32_t pcrs,
							 unsigned char values[24][64], size_t *digest_len,
							 char *err, size_t errlen);

/*
 * TPM2_ActivateCredential of the AK with the EK: blob and enc are the
 * marshalled TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET (their sizes
 * included); the secret goes to secret (at most 64 bytes).
 */
int			bcd_tpm_activate(bcd_tpm *t, const unsigned char *blob, size_t blob_len,
							 const unsigned char *enc, size_t enc_len,
							 unsigned char *secret, size_t *secret_len,
							 char *err, size_t errlen);

/*
 * A PCR selection "bank:list[+bank:list...]", list "0-7" or "0,1,4-7"; bank
 * sha1, sha256, sha384 or sha512.  0 on success.
 */
int			bcd_tpm_parse_pcrs(const char *text, TPML_PCR_SELECTION *sel);

#endif							/* BCD_TPM_ESYS_H */
