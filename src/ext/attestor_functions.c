/*
 * attestor_functions.c: the SQL functions custom attestors call: base64url,
 * ECDSA verification and the join token check without spending.
 */
#include "bc_join.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/pem.h>

PG_FUNCTION_INFO_V1(bc_b64url_encode_sql);

/* b64url_encode(bytea): unpadded base64url. */
Datum
bc_b64url_encode_sql(PG_FUNCTION_ARGS)
{
	bytea	   *in = PG_GETARG_BYTEA_PP(0);
	size_t		n = VARSIZE_ANY_EXHDR(in);
	char	   *out;

	if (n > 64 * 1024 * 1024)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("b64url_encode takes at most 64 MiB")));
	out = palloc(bc_b64url_encoded_len(n) + 1);
	bc_b64url_encode((const unsigned char *) VARDATA_ANY(in), n, out);
	PG_RETURN_TEXT_P(cstring_to_text(out));
}

PG_FUNCTION_INFO_V1(bc_b64url_decode_sql);

/* b64url_decode(text): bytes of unpadded base64url; 22023 when malformed. */
Datum
bc_b64url_decode_sql(PG_FUNCTION_ARGS)
{
	text	   *in = PG_GETARG_TEXT_PP(0);
	size_t		n = VARSIZE_ANY_EXHDR(in);
	size_t		cap = bc_b64url_decoded_maxlen(n);
	size_t		len;
	bytea	   *out = palloc(VARHDRSZ + cap + 1);

	if (bc_b64url_decode(VARDATA_ANY(in), n, (unsigned char *) VARDATA(out), cap, &len) != BC_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid base64url"),
				 errdetail("INVALID_INPUT: base64url without padding, alphabet A-Z a-z 0-9 - _.")));
	SET_VARSIZE(out, VARHDRSZ + len);
	PG_RETURN_BYTEA_P(out);
}

PG_FUNCTION_INFO_V1(bc_ecdsa_verify_sql);

/* ecdsa_verify(pem, message, signature): ECDSA P-256 with SHA-256. */
Datum
bc_ecdsa_verify_sql(PG_FUNCTION_ARGS)
{
	text	   *pem = PG_GETARG_TEXT_PP(0);
	bytea	   *msg = PG_GETARG_BYTEA_PP(1);
	bytea	   *sig = PG_GETARG_BYTEA_PP(2);
	BIO		   *bio = NULL;
	EVP_PKEY   *key = NULL;
	EVP_MD_CTX *md = NULL;
	unsigned char *der = NULL;
	const unsigned char *sigp;
	size_t		siglen;
	int			ok = -1;

	if (VARSIZE_ANY_EXHDR(pem) > 8192)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("public key PEM over 8 KiB")));
	bio = BIO_new_mem_buf(VARDATA_ANY(pem), VARSIZE_ANY_EXHDR(pem));
	if (bio != NULL)
		key = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
	BIO_free(bio);
	if (key == NULL || !bc_pkey_is_p256(key))
	{
		EVP_PKEY_free(key);
		ERR_clear_error();
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("public key is not a PEM P-256 SubjectPublicKeyInfo")));
	}

	sigp = (const unsigned char *) VARDATA_ANY(sig);
	siglen = VARSIZE_ANY_EXHDR(sig);
	if (siglen == 64)
	{
		/* raw r||s, as JOSE writes it: re-encode as DER */
		size_t		derlen = 0;
		int			st = bc_ecdsa_sig_to_der(sigp, 32, sigp + 32, 32, &der, &derlen);

		if (st == BC_EVERIFY)
		{
			ok = 0;
			goto out;
		}
		if (st != BC_OK)
			goto out;
		sigp = der;
		siglen = derlen;
	}
	md = EVP_MD_CTX_new();
	if (md == NULL || EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key) != 1)
		goto out;
	ok = EVP_DigestVerify(md, sigp, siglen, (const unsigned char *) VARDATA_ANY(msg),
						  VARSIZE_ANY_EXHDR(msg)) == 1 ? 1 : 0;
out:
	EVP_MD_CTX_free(md);
	free(der);
	EVP_PKEY_free(key);
	ERR_clear_error();
	if (ok < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not verify an ECDSA signature")));
	PG_RETURN_BOOL(ok == 1);
}

PG_FUNCTION_INFO_V1(bc_check_join_token_sql);

/* check_join_token(attestor, token, context): check without spending. */
Datum
bc_check_join_token_sql(PG_FUNCTION_ARGS)
{
	char	   *who = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *token = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Jsonb	   *context = PG_GETARG_JSONB_P(2);
	JsonbValue *claims;
	Jsonb	   *claims_jb;
	BcToken		tok;
	StringInfoData buf;
	char	   *role_s;
	MemoryContext outer = CurrentMemoryContext;
	Jsonb	   *result;

	role_s = bc_jsonb_string(context, "role");
	if (role_s == NULL)
		bc_invalid_input("context has no role");
	claims = getKeyJsonValueFromContainer(&context->root, "claims", 6, NULL);
	if (claims != NULL && claims->type == jbvBinary)
		claims_jb = JsonbValueToJsonb(claims);
	else
		claims_jb = bc_jsonb("{}");

	bc_spi_connect();
	bc_check_join_token(who, token, role_s, claims_jb, &tok);
	OPENSSL_cleanse(token, strlen(token));

	MemoryContextSwitchTo(outer);
	initStringInfo(&buf);
	bc_json_begin(&buf);
	bc_json_member(&buf, "tokenId", tok.token_id);
	bc_json_member(&buf, "tenantId", tok.tenant_id);
	bc_json_member(&buf, "poolId", tok.pool_id);
	bc_json_member(&buf, "siteId", tok.site_id);
	bc_json_member(&buf, "role", tok.role);
	bc_json_member_bool(&buf, "allowReclaim", tok.allow_reclaim);
	bc_json_end(&buf);
	result = bc_jsonb(buf.data);
	SPI_finish();
	PG_RETURN_JSONB_P(result);
}
