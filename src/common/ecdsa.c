/*
 * ecdsa.c: ECDSA signature encodings.  JOSE (RFC 7518 §3.4) and TPM 2.0
 * (TPMS_SIGNATURE_ECDSA) carry r and s as big-endian integers; OpenSSL
 * verifies the DER ECDSA-Sig-Value.  One conversion for every caller.
 */
#include <string.h>

#include <openssl/bn.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>

#include "bc_common.h"

/*
 * The DER ECDSA-Sig-Value of (r, s), big-endian integers of at most 66
 * bytes each, malloc()ed into *der_out (free with free()).  BC_EVERIFY
 * when r or s is zero (no valid signature has one), BC_EINVAL for a bad
 * length.
 */
int
bc_ecdsa_sig_to_der(const unsigned char *r, size_t r_len, const unsigned char *s,
					size_t s_len, unsigned char **der_out, size_t *der_len)
{
	ECDSA_SIG  *esig = NULL;
	BIGNUM	   *br = NULL;
	BIGNUM	   *bs = NULL;
	unsigned char *der = NULL;
	int			n;
	int			rc = BC_ECRYPTO;

	*der_out = NULL;
	*der_len = 0;
	if (r_len == 0 || s_len == 0 || r_len > 66 || s_len > 66)
		return BC_EINVAL;
	esig = ECDSA_SIG_new();
	br = BN_bin2bn(r, (int) r_len, NULL);
	bs = BN_bin2bn(s, (int) s_len, NULL);
	if (esig == NULL || br == NULL || bs == NULL)
		goto out;
	if (BN_is_zero(br) || BN_is_zero(bs))
	{
		rc = BC_EVERIFY;
		goto out;
	}
	if (ECDSA_SIG_set0(esig, br, bs) != 1)
		goto out;
	br = bs = NULL;
	n = i2d_ECDSA_SIG(esig, &der);
	if (n <= 0)
		goto out;
	*der_out = malloc((size_t) n);
	if (*der_out == NULL)
		goto out;
	memcpy(*der_out, der, (size_t) n);
	*der_len = (size_t) n;
	rc = BC_OK;
out:
	if (rc != BC_OK)
		ERR_clear_error();
	OPENSSL_free(der);
	BN_free(br);
	BN_free(bs);
	ECDSA_SIG_free(esig);
	return rc;
}
