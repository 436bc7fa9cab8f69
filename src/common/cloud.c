/*
 * cloud.c: the provider-independent OpenSSL checks of the cloud-iid
 * attestor (docs/attestors.md, "The built-in cloud-iid attestor"): the AWS and Azure PKCS#7
 * SignedData, the GCP JWT's RS256 key from a JWKS, and the documents'
 * time formats.  No PostgreSQL here: the extension turns the reasons into
 * refusals, the unit tests call it directly.
 *
 * The PKCS#7 pitfalls: with PKCS7_NOVERIFY
 * the signer must come only from the certificates given (PKCS7_NOINTERN),
 * else any certificate in the bag signs; and for Azure the chain is built
 * for the signer PKCS7_get0_signers matched, never the bag's first
 * certificate, from configured roots and intermediates only.
 *
 * PKCS7_verify takes any digest OpenSSL knows (MD5, SHA-1 ...) and never
 * looks at the SignerInfo's signature algorithm or at the versions, so the
 * envelope is held to what each cloud really signs with first
 * (envelope_ok): an allow-list of digest and signature algorithms per
 * provider, MD5 and SHA-1 never.
 */
#include <string.h>

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/x509v3.h>

#include "bc_common.h"

#define JWKS_MAX (64 * 1024)

/* PEM text holding one or more certificates: every one parses, or BC_EINVAL. */
int
bc_cloud_certs_from_pem(const char *pem, size_t n, STACK_OF(X509) **out)
{
	BIO		   *bio;
	STACK_OF(X509) *sk;
	X509	   *c;
	int			rc = BC_EINVAL;

	*out = NULL;
	if (pem == NULL || n == 0 || n > 64 * 1024)
		return BC_EINVAL;
	bio = BIO_new_mem_buf(pem, (int) n);
	sk = sk_X509_new_null();
	if (bio == NULL || sk == NULL)
	{
		rc = BC_ENOMEM;
		goto out;
	}
	while ((c = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL)
	{
		if (!sk_X509_push(sk, c))
		{
			X509_free(c);
			rc = BC_ENOMEM;
			goto out;
		}
	}
	/* The loop ends at the end of the text (no start line) or at a bad block. */
	if (ERR_GET_REASON(ERR_peek_last_error()) == PEM_R_NO_START_LINE && sk_X509_num(sk) > 0)
	{
		/* Anything but white space after the last certificate is refused. */
		char		rest[2];

		if (BIO_read(bio, rest, 1) <= 0)
			rc = BC_OK;
	}
out:
	ERR_clear_error();
	BIO_free(bio);
	if (rc == BC_OK)
		*out = sk;
	else
		sk_X509_pop_free(sk, X509_free);
	return rc;
}

/*
 * What each provider really signs with (docs/attestors.md, "cloud-iid"):
 * AWS's rsa2048 document, "SHA256 hash ... encrypted using an RSA-2048 key
 * pair", a digestAlgorithm id-sha256 and rsaEncryption (or
 * sha256WithRSAEncryption, the same PKCS#1 v1.5 signature); Azure's
 * attested document, digestAlgorithm sha256WithRSAEncryption in place of
 * id-sha256 (as the sample of Azure's documentation carries it; OpenSSL
 * reads it as SHA-256) or id-sha256, signed rsaEncryption (or
 * sha256WithRSAEncryption).  Nothing else: never MD5, never SHA-1.
 */
static const int aws_digests[] = {NID_sha256, 0};
static const int azure_digests[] = {NID_sha256, NID_sha256WithRSAEncryption, 0};
static const int rsa_signatures[] = {NID_rsaEncryption, NID_sha256WithRSAEncryption, 0};

/* 1 when nid is in the 0-terminated list. */
static int
nid_in(int nid, const int *list)
{
	for (; *list != 0; list++)
		if (*list == nid)
			return 1;
	return 0;
}

/* 1 when an AlgorithmIdentifier's parameters are absent or NULL. */
static int
null_params(const X509_ALGOR *alg)
{
	int			ptype;
	const void *pval;

	X509_ALGOR_get0(NULL, &ptype, &pval, alg);
	return ptype == V_ASN1_UNDEF || ptype == V_ASN1_NULL;
}

/*
 * The SignedData's envelope as the provider makes it: version 1, no CRLs,
 * one digestAlgorithm equal to the SignerInfo's, SignerInfo version 1,
 * parameters absent or NULL, the digest and signature algorithms in the
 * provider's allow-list ("digest-algorithm", "signature-algorithm"), no
 * unsigned attributes, and signed attributes, when present, with a
 * contentType of id-data and a messageDigest (PKCS7_verify checks its
 * value).  Anything else is "malformed-pkcs7".
 */
static int
envelope_ok(PKCS7 *p7, int provider, const char **reason)
{
	PKCS7_SIGNED *sd = p7->d.sign;
	PKCS7_SIGNER_INFO *si = sk_PKCS7_SIGNER_INFO_value(PKCS7_get_signer_info(p7), 0);
	X509_ALGOR *dig = NULL;
	X509_ALGOR *sig = NULL;
	const ASN1_OBJECT *outer;
	const ASN1_OBJECT *inner;
	int			dnid;
	int			snid;

	*reason = "malformed-pkcs7";
	if (si == NULL || ASN1_INTEGER_get(sd->version) != 1 ||
		ASN1_INTEGER_get(si->version) != 1 ||
		(sd->crl != NULL && sk_X509_CRL_num(sd->crl) > 0) ||
		sk_X509_ALGOR_num(sd->md_algs) != 1)
		return 0;
	PKCS7_SIGNER_INFO_get0_algs(si, NULL, &dig, &sig);
	if (dig == NULL || sig == NULL)
		return 0;
	X509_ALGOR_get0(&outer, NULL, NULL, sk_X509_ALGOR_value(sd->md_algs, 0));
	X509_ALGOR_get0(&inner, NULL, NULL, dig);
	if (OBJ_cmp(outer, inner) != 0 || !null_params(sk_X509_ALGOR_value(sd->md_algs, 0)) ||
		!null_params(dig))
		return 0;
	dnid = OBJ_obj2nid(inner);
	if (!nid_in(dnid, provider == BC_CLOUD_AZURE ? azure_digests : aws_digests))
	{
		*reason = "digest-algorithm";
		return 0;
	}
	X509_ALGOR_get0(&inner, NULL, NULL, sig);
	snid = OBJ_obj2nid(inner);
	if (!nid_in(snid, rsa_signatures) || !null_params(sig))
	{
		*reason = "signature-algorithm";
		return 0;
	}
	if (si->unauth_attr != NULL && sk_X509_ATTRIBUTE_num(si->unauth_attr) > 0)
		return 0;
	if (si->auth_attr != NULL && sk_X509_ATTRIBUTE_num(si->auth_attr) > 0)
	{
		ASN1_TYPE  *ct = PKCS7_get_signed_attribute(si, NID_pkcs9_contentType);

		if (ct == NULL || ct->type != V_ASN1_OBJECT ||
			OBJ_obj2nid(ct->value.object) != NID_pkcs7_data ||
			PKCS7_get_signed_attribute(si, NID_pkcs9_messageDigest) == NULL)
			return 0;
	}
	return 1;
}

/*
 * d2i_PKCS7 consuming every byte; signed, one SignerInfo, content attached;
 * the envelope as provider makes it.
 */
static int
signed_data(const unsigned char *der, size_t n, int provider, PKCS7 **out, const char **reason)
{
	const unsigned char *p = der;
	PKCS7	   *p7;

	*out = NULL;
	*reason = "malformed-pkcs7";
	if (n == 0 || n > BC_CLOUD_DOC_MAX)
		return BC_EINVAL;
	p7 = d2i_PKCS7(NULL, &p, (long) n);
	if (p7 == NULL || (size_t) (p - der) != n || !PKCS7_type_is_signed(p7) ||
		p7->d.sign == NULL || PKCS7_get_detached(p7) ||
		sk_PKCS7_SIGNER_INFO_num(PKCS7_get_signer_info(p7)) != 1 ||
		!PKCS7_type_is_data(p7->d.sign->contents) ||
		p7->d.sign->contents->d.data == NULL ||
		!envelope_ok(p7, provider, reason))
	{
		PKCS7_free(p7);
		ERR_clear_error();
		return BC_EINVAL;
	}
	*out = p7;
	return BC_OK;
}


/*
 * 1 when the SignerInfo names the signer's issuer byte for byte: OpenSSL
 * finds the signer by a canonical (case-folding) comparison, which would let
 * a changed issuer name name the same certificate.
 */
static int
issuer_exact(PKCS7 *p7, STACK_OF(X509) *certs)
{
	PKCS7_SIGNER_INFO *si = sk_PKCS7_SIGNER_INFO_value(PKCS7_get_signer_info(p7), 0);
	STACK_OF(X509) *signers = PKCS7_get0_signers(p7, certs, PKCS7_NOINTERN);
	const unsigned char *a = NULL;
	const unsigned char *b = NULL;
	size_t		al = 0;
	size_t		bl = 0;
	int			ok = 0;

	if (si != NULL && si->issuer_and_serial != NULL && signers != NULL &&
		sk_X509_num(signers) == 1 &&
		X509_NAME_get0_der(si->issuer_and_serial->issuer, &a, &al) == 1 &&
		X509_NAME_get0_der(X509_get_issuer_name(sk_X509_value(signers, 0)), &b, &bl) == 1)
		ok = al == bl && memcmp(a, b, al) == 0;
	sk_X509_free(signers);
	ERR_clear_error();
	return ok;
}

/* PKCS7_verify(p7, certs, NULL, NULL, out, NOINTERN | NOVERIFY); the content malloc()ed. */
static int
verify_content(PKCS7 *p7, STACK_OF(X509) *certs, unsigned char **content, size_t *len,
			   const char **reason)
{
	BIO		   *out = BIO_new(BIO_s_mem());
	char	   *data;
	long		dlen;
	int			rc = BC_EVERIFY;

	*content = NULL;
	*len = 0;
	if (out == NULL)
		return BC_ENOMEM;
	*reason = "bad-signature";
	if (issuer_exact(p7, certs) &&
		PKCS7_verify(p7, certs, NULL, NULL, out, PKCS7_NOINTERN | PKCS7_NOVERIFY) == 1)
	{
		dlen = BIO_get_mem_data(out, &data);
		*content = malloc((size_t) dlen + 1);
		if (*content == NULL)
			rc = BC_ENOMEM;
		else
		{
			memcpy(*content, data, (size_t) dlen);
			(*content)[dlen] = '\0';
			*len = (size_t) dlen;
			rc = BC_OK;
		}
	}
	ERR_clear_error();
	BIO_free(out);
	return rc;
}

/* AWS (bc_common.h). */
int
bc_cloud_aws_verify(const unsigned char *der, size_t n, STACK_OF(X509) *certs,
					unsigned char **content, size_t *content_len, const char **reason)
{
	PKCS7	   *p7;
	int			rc;

	*content = NULL;
	*content_len = 0;
	rc = signed_data(der, n, BC_CLOUD_AWS, &p7, reason);
	if (rc != BC_OK)
		return rc;
	if (certs == NULL || sk_X509_num(certs) == 0)
	{
		*reason = "bad-signature";
		rc = BC_EVERIFY;
	}
	else
		rc = verify_content(p7, certs, content, content_len, reason);
	PKCS7_free(p7);
	return rc;
}

/* 1 when cert has a dNSName equal to domain or ending in "." domain. */
static int
dns_name_under(X509 *cert, const char *domain)
{
	GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
	size_t		dl = strlen(domain);
	int			found = 0;
	int			i;

	for (i = 0; names != NULL && i < sk_GENERAL_NAME_num(names) && !found; i++)
	{
		GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
		const char *s;
		size_t		l;

		if (g->type != GEN_DNS)
			continue;
		s = (const char *) ASN1_STRING_get0_data(g->d.dNSName);
		l = (size_t) ASN1_STRING_length(g->d.dNSName);
		if (memchr(s, '\0', l) != NULL || dl == 0)
			continue;
		if ((l == dl && strncasecmp(s, domain, dl) == 0) ||
			(l > dl + 1 && s[l - dl - 1] == '.' && strncasecmp(s + l - dl, domain, dl) == 0))
			found = 1;
	}
	GENERAL_NAMES_free(names);
	ERR_clear_error();
	return found;
}

/* How the signer's chain verified (chains()). */
enum chain_result
{
	CHAIN_OK,
	CHAIN_EXPIRED,				/* verifies but for the time: a certificate expired */
	CHAIN_NOT_YET_VALID,		/* verifies but for the time: a certificate not yet valid */
	CHAIN_BAD
};

/* One X509_verify_cert of signer to roots through intermediates, purpose ANY; its error. */
static int
verify_chain(X509 *signer, STACK_OF(X509) *roots, STACK_OF(X509) *intermediates,
			 int64_t at_unix, int no_time, int *error)
{
	X509_STORE *store = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	X509_VERIFY_PARAM *param;
	int			ok = 0;
	int			i;

	*error = X509_V_ERR_UNSPECIFIED;
	if (store == NULL || ctx == NULL)
		goto out;
	for (i = 0; i < sk_X509_num(roots); i++)
		if (X509_STORE_add_cert(store, sk_X509_value(roots, i)) != 1)
			goto out;
	if (X509_STORE_CTX_init(ctx, store, signer, intermediates) != 1)
		goto out;
	if (X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_ANY) != 1)
		goto out;
	/* A time set (X509_V_FLAG_USE_CHECK_TIME) would win over NO_CHECK_TIME. */
	param = X509_STORE_CTX_get0_param(ctx);
	if (no_time)
		X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_NO_CHECK_TIME);
	else
		X509_VERIFY_PARAM_set_time(param, (time_t) at_unix);
	ok = X509_verify_cert(ctx) == 1;
	*error = X509_STORE_CTX_get_error(ctx);
out:
	ERR_clear_error();
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	return ok;
}

/*
 * The signer chains at at_unix, purpose ANY, to roots through intermediates
 * (CHAIN_OK); or it would but for the time, a certificate of the chain
 * expired or not yet valid then (CHAIN_EXPIRED, CHAIN_NOT_YET_VALID: the
 * same chain verifies with X509_V_FLAG_NO_CHECK_TIME); or it does not.
 */
static enum chain_result
chains(X509 *signer, STACK_OF(X509) *roots, STACK_OF(X509) *intermediates, int64_t at_unix)
{
	int			error;
	int			ignored;

	if (verify_chain(signer, roots, intermediates, at_unix, 0, &error))
		return CHAIN_OK;
	if ((error == X509_V_ERR_CERT_HAS_EXPIRED || error == X509_V_ERR_CERT_NOT_YET_VALID) &&
		verify_chain(signer, roots, intermediates, at_unix, 1, &ignored))
		return error == X509_V_ERR_CERT_HAS_EXPIRED ? CHAIN_EXPIRED : CHAIN_NOT_YET_VALID;
	return CHAIN_BAD;
}

/* Azure (bc_common.h). */
int
bc_cloud_azure_verify(const unsigned char *der, size_t n, STACK_OF(X509) *roots,
					  STACK_OF(X509) *intermediates, const char *domain, int64_t at_unix,
					  unsigned char **content, size_t *content_len, const char **reason)
{
	PKCS7	   *p7;
	STACK_OF(X509) *signers = NULL;
	STACK_OF(X509) *one = NULL;
	X509	   *signer;
	enum chain_result chain = CHAIN_BAD;
	int			rc;

	*content = NULL;
	*content_len = 0;
	rc = signed_data(der, n, BC_CLOUD_AZURE, &p7, reason);
	if (rc != BC_OK)
		return rc;
	/* The certificate the SignerInfo names, looked up in the bag. */
	signers = PKCS7_get0_signers(p7, NULL, 0);
	if (signers == NULL || sk_X509_num(signers) != 1)
	{
		*reason = "untrusted-signer";
		rc = BC_EVERIFY;
		goto out;
	}
	signer = sk_X509_value(signers, 0);
	if (roots != NULL && sk_X509_num(roots) > 0)
		chain = chains(signer, roots, intermediates, at_unix);
	if (chain == CHAIN_BAD)
	{
		*reason = "untrusted-signer";
		rc = BC_EVERIFY;
		goto out;
	}
	if (domain == NULL || !dns_name_under(signer, domain))
	{
		*reason = "wrong-domain";
		rc = BC_EVERIFY;
		goto out;
	}
	one = sk_X509_new_null();
	if (one == NULL || !sk_X509_push(one, signer))
	{
		rc = BC_ENOMEM;
		goto out;
	}
	rc = verify_content(p7, one, content, content_len, reason);

	/*
	 * A chain that verifies but for the time, its signature good: a genuine
	 * document whose signer (or a CA above it) had expired, or was not yet
	 * valid, at at_unix; told apart from a tampered one (bad-signature) and
	 * from a signer that does not chain at all (untrusted-signer).
	 */
	if (rc == BC_OK && chain != CHAIN_OK)
	{
		free(*content);
		*content = NULL;
		*content_len = 0;
		*reason = chain == CHAIN_EXPIRED ? "signer-expired" : "signer-not-yet-valid";
		rc = BC_EVERIFY;
	}
out:
	ERR_clear_error();
	sk_X509_free(one);
	sk_X509_free(signers);
	PKCS7_free(p7);
	return rc;
}

/*
 * An RSA public key from a JWK's base64url n and e, 2048 to 8192 bits: the
 * one JWK reader of src/common (jose.c, bc_pkey_from_jwk_any; EVP_PKEY_fromdata
 * and OpenSSL's public-key check); callers have checked kty is RSA.
 */
static int
rsa_from_jwk(json_t *jwk, EVP_PKEY **out)
{
	*out = NULL;
	if (bc_pkey_from_jwk_any(jwk, out) == BC_OK)
		return BC_OK;
	return BC_EINVAL;
}

/* The "keys" array of a JWKS document, or NULL. */
static json_t *
jwks_keys(const char *jwks, size_t n, json_t **root)
{
	json_t	   *keys;

	*root = NULL;
	if (jwks == NULL || n == 0 || n > JWKS_MAX)
		return NULL;
	*root = json_loadb(jwks, n, JSON_REJECT_DUPLICATES, NULL);
	if (*root == NULL || !json_is_object(*root))
		return NULL;
	keys = json_object_get(*root, "keys");
	return json_is_array(keys) ? keys : NULL;
}

/* A JWKS document (bc_common.h). */
int
bc_cloud_jwks_check(const char *jwks, size_t n, int *rsa_keys)
{
	json_t	   *root;
	json_t	   *keys = jwks_keys(jwks, n, &root);
	json_t	   *k;
	size_t		i;
	int			rc = BC_OK;

	*rsa_keys = 0;
	if (keys == NULL)
		rc = BC_EINVAL;
	json_array_foreach(keys, i, k)
	{
		const char *kty = json_string_value(json_object_get(k, "kty"));
		EVP_PKEY   *key = NULL;

		if (!json_is_object(k) || kty == NULL || !json_is_string(json_object_get(k, "kid")))
		{
			rc = BC_EINVAL;
			break;
		}
		if (strcmp(kty, "RSA") != 0)
			continue;
		if (rsa_from_jwk(k, &key) != BC_OK)
		{
			rc = BC_EINVAL;
			break;
		}
		EVP_PKEY_free(key);
		(*rsa_keys)++;
	}
	json_decref(root);
	return rc;
}

/* The one key of a JWKS named kid (bc_common.h). */
int
bc_cloud_jwks_rsa_key(const char *jwks, size_t n, const char *kid, int *matches,
					  EVP_PKEY **key)
{
	json_t	   *root;
	json_t	   *keys = jwks_keys(jwks, n, &root);
	json_t	   *k;
	json_t	   *found = NULL;
	size_t		i;
	int			rc = BC_OK;

	*matches = 0;
	*key = NULL;
	if (keys == NULL)
	{
		json_decref(root);
		return BC_EINVAL;
	}
	json_array_foreach(keys, i, k)
	{
		const char *id = json_string_value(json_object_get(k, "kid"));

		if (id != NULL && strcmp(id, kid) == 0)
		{
			(*matches)++;
			found = k;
		}
	}
	if (*matches == 1)
	{
		const char *kty = json_string_value(json_object_get(found, "kty"));

		if (kty != NULL && strcmp(kty, "RSA") == 0)
			rc = rsa_from_jwk(found, key);
	}
	json_decref(root);
	return rc;
}

/* RS256 over input (bc_common.h). */
int
bc_cloud_rs256_verify(EVP_PKEY *key, const char *input, size_t n,
					  const unsigned char *sig, size_t sig_len)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_PKEY_CTX *pctx = NULL;
	int			rc = BC_EVERIFY;

	if (md == NULL)
		return BC_ENOMEM;
	if (EVP_PKEY_is_a(key, "RSA") &&
		EVP_DigestVerifyInit(md, &pctx, EVP_sha256(), NULL, key) == 1 &&
		EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) == 1 &&
		EVP_DigestVerify(md, sig, sig_len, (const unsigned char *) input, n) == 1)
		rc = BC_OK;
	ERR_clear_error();
	EVP_MD_CTX_free(md);
	return rc;
}

/* n decimal digits at s as an int, or -1. */
static int
digits(const char *s, int n)
{
	int			v = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* Unix seconds of a UTC civil time, or BC_EINVAL when a field is out of range. */
static int
civil(int y, int mo, int d, int h, int mi, int se, int64_t *out)
{
	static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int			leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	int64_t		yy;
	int64_t		era;
	int64_t		yoe;
	int64_t		doy;
	int64_t		doe;

	if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap) ||
		h > 23 || mi > 59 || se > 59 || h < 0 || mi < 0 || se < 0)
		return BC_EINVAL;
	/* days from civil (H. Hinnant) */
	yy = y - (mo <= 2);
	era = yy / 400;
	yoe = yy - era * 400;
	doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	*out = ((era * 146097 + doe - 719468) * 86400) + h * 3600 + mi * 60 + se;
	return BC_OK;
}

/* "YYYY-MM-DDTHH:MM:SSZ" (bc_common.h). */
int
bc_cloud_parse_rfc3339(const char *s, int64_t *out)
{
	if (s == NULL || strlen(s) != 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
		s[13] != ':' || s[16] != ':' || s[19] != 'Z')
		return BC_EINVAL;
	return civil(digits(s, 4), digits(s + 5, 2), digits(s + 8, 2), digits(s + 11, 2),
				 digits(s + 14, 2), digits(s + 17, 2), out);
}

/* "MM/DD/YY HH:MM:SS -0000" (bc_common.h). */
int
bc_cloud_parse_azure_time(const char *s, int64_t *out)
{
	int			yy;

	if (s == NULL || strlen(s) != 23 || s[2] != '/' || s[5] != '/' || s[8] != ' ' ||
		s[11] != ':' || s[14] != ':' || strcmp(s + 17, " -0000") != 0)
		return BC_EINVAL;
	yy = digits(s + 6, 2);
	if (yy < 0)
		return BC_EINVAL;
	return civil(2000 + yy, digits(s, 2), digits(s + 3, 2), digits(s + 9, 2),
				 digits(s + 12, 2), digits(s + 15, 2), out);
}

/* 8-4-4-4-12 hex digits (bc_common.h). */
int
bc_cloud_is_uuid(const char *s)
{
	int			i;

	if (s == NULL || strlen(s) != 36)
		return 0;
	for (i = 0; i < 36; i++)
	{
		if (i == 8 || i == 13 || i == 18 || i == 23)
		{
			if (s[i] != '-')
				return 0;
		}
		else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
				   (s[i] >= 'A' && s[i] <= 'F')))
			return 0;
	}
	return 1;
}

#ifdef BC_TEST_BUILD

/* The envelope checks alone (bc_common.h). */
int
bc_cloud_pkcs7_check(const unsigned char *der, size_t n, int provider, const char **reason)
{
	PKCS7	   *p7 = NULL;
	int			rc = signed_data(der, n, provider, &p7, reason);

	PKCS7_free(p7);
	return rc;
}

#endif							/* BC_TEST_BUILD */
