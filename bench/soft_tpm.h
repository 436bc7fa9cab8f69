/*
 * soft_tpm.h: the simulated TPMs of the fleet generator (bench/fleet.c).
 *
 * A fleet of thousands of TPM machines cannot be thousands of swtpm
 * processes on two cores, so each simulated node's TPM is its keys in
 * OpenSSL: an EK (TCG template L-2, P-256), an AK (restricted ECDSA/SHA-256,
 * as tpm2_createak makes it) and node keys (sign, not restricted, as the
 * tpm2-openssl provider makes them).  The structures the service reads are
 * marshalled by libtss2-mu exactly as a TPM writes them (TPM2B_PUBLIC,
 * TPMS_ATTEST, TPMT_SIGNATURE) and signed by OpenSSL; TPM2_ActivateCredential
 * is src/common's bc_tpm_activate_credential.  The service's verification is
 * the same code that checks real TPMs (test/tap/tpm.t, attest.t: swtpm).
 * Bench code only: a process that holds an EK's private key is no TPM.
 */
#ifndef SOFT_TPM_H
#define SOFT_TPM_H

#include <stdint.h>

#include <openssl/evp.h>

#include "bc_tpm.h"

enum
{
	ST_EK, ST_AK, ST_NODE_KEY
};

/* A key of a simulated TPM: the OpenSSL key, its TPM2B_PUBLIC and Name. */
typedef struct st_obj
{
	EVP_PKEY   *key;
	bc_tpm_public pub;			/* parsed as the service parses it */
	unsigned char wire[sizeof(TPM2B_PUBLIC)];	/* TPM2B_PUBLIC, size field included */
	size_t		wire_len;
	unsigned char name[BC_TPM_NAME_MAX];
	size_t		name_len;
} st_obj;

/* o made around key (a P-256 key; o keeps the reference given): kind ST_*. 0 on success. */
int			st_make(st_obj *o, int kind, EVP_PKEY *key);

/* Free o's key (the rest is plain memory). */
void		st_free(st_obj *o);

/*
 * TPM2_Certify of obj by ak: TPMS_ATTEST (type ATTEST_CERTIFY, extraData
 * 00ff55aa as tpm2-tools sends it) and the TPMT_SIGNATURE, marshalled into
 * att (and att_len) and sig (and sig_len), each at most BC_TPM_STRUCT_MAX.
 */
int			st_certify(const st_obj *ak, const st_obj *obj, uint64_t clock, uint32_t reset,
					   unsigned char *att, size_t *att_len, unsigned char *sig, size_t *sig_len);

/*
 * TPM2_Quote by ak over the SHA-256 bank's PCRs pcrs[0..n) (ascending) whose
 * values are vals[i], with qualifyingData extra[0..32).
 */
int			st_quote(const st_obj *ak, const unsigned char extra[32], const int *pcrs, int n,
					 const unsigned char (*vals)[32], uint64_t clock, uint32_t reset,
					 unsigned char *att, size_t *att_len, unsigned char *sig, size_t *sig_len);

#endif							/* SOFT_TPM_H */
