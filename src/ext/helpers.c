/*
 * helpers.c: what SQL attestors call: base64url, ECDSA verification, the
 * token check, and the single-use bookkeeping that lets JoinService refuse
 * to commit a deferring round that consumed single-use evidence.
 */
#include "bc_join.h"

#include "commands/trigger.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"

#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/pem.h>

/* Single-use evidence consumed since the running round began. */
static int	single_use_count = 0;

/* A join round begins: nothing consumed yet. */
void
bc_single_use_reset(void)
{
	single_use_count = 0;
}

/* Whether the running round consumed single-use evidence. */
bool
bc_single_use_consumed(void)
{
	return single_use_count > 0;
}

PG_FUNCTION_INFO_V1(bc_note_single_use);

/* Trigger on attestation_uses and join_tokens.uses_left: evidence consumed. */
Datum
bc_note_single_use(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "bc_join.note_single_use() is a trigger");
	single_use_count++;
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(bc_note_single_use_round);

/* note_single_use_round(): the same, for a consumption no trigger sees. */
Datum
bc_note_single_use_round(PG_FUNCTION_ARGS)
{
	single_use_count++;
	PG_RETURN_VOID();
}

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

/* A new bytea holding data[0..n), in the current memory context. */
bytea *
bc_bytea(const void *data, size_t n)
{
	bytea	   *b = palloc(VARHDRSZ + n);

	SET_VARSIZE(b, VARHDRSZ + n);
	memcpy(VARDATA(b), data, n);
	return b;
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
	ECDSA_SIG  *es = NULL;
	BIGNUM	   *r = NULL;
	BIGNUM	   *s = NULL;
	unsigned char *der = NULL;
	const unsigned char *sigp;
	size_t		siglen;
	int			derlen;
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
		es = ECDSA_SIG_new();
		r = BN_bin2bn(sigp, 32, NULL);
		s = BN_bin2bn(sigp + 32, 32, NULL);
		if (es == NULL || r == NULL || s == NULL || ECDSA_SIG_set0(es, r, s) != 1)
			goto out;
		r = s = NULL;
		derlen = i2d_ECDSA_SIG(es, &der);
		if (derlen <= 0)
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
	ECDSA_SIG_free(es);
	BN_free(r);
	BN_free(s);
	OPENSSL_free(der);
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
	JsonbValue *role;
	JsonbValue *claims;
	Jsonb	   *claims_jb;
	BcToken		tok;
	StringInfoData buf;
	char	   *role_s;
	MemoryContext outer = CurrentMemoryContext;
	Jsonb	   *result;

	role = getKeyJsonValueFromContainer(&context->root, "role", 4, NULL);
	if (role == NULL || role->type != jbvString)
		bc_invalid_input("context has no role");
	role_s = pnstrdup(role->val.string.val, role->val.string.len);
	claims = getKeyJsonValueFromContainer(&context->root, "claims", 6, NULL);
	if (claims != NULL && claims->type == jbvBinary)
		claims_jb = JsonbValueToJsonb(claims);
	else
		claims_jb = bc_jsonb("{}");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	bc_check_join_token(who, token, role_s, claims_jb, &tok);
	OPENSSL_cleanse(token, strlen(token));

	MemoryContextSwitchTo(outer);
	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"tokenId\":");
	escape_json(&buf, tok.token_id);
	bc_json_member(&buf, "tenantId", tok.tenant_id);
	bc_json_member(&buf, "poolId", tok.pool_id);
	bc_json_member(&buf, "siteId", tok.site_id);
	bc_json_member(&buf, "role", tok.role);
	appendStringInfo(&buf, ",\"allowReclaim\":%s}", tok.allow_reclaim ? "true" : "false");
	result = bc_jsonb(buf.data);
	SPI_finish();
	PG_RETURN_JSONB_P(result);
}

PG_FUNCTION_INFO_V1(bc_attestors_changed);

/* Trigger on bc_join.attestors: every backend forgets the registry it cached. */
Datum
bc_attestors_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trig = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "bc_join.attestors_changed() is a trigger");
	CacheInvalidateRelcache(trig->tg_relation);
	return PointerGetDatum(NULL);
}
