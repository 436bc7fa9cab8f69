/*
 * request.c: parse and bound a JoinRequest (docs/protocol.md, "JoinRequest").
 *
 * Every field has one check and one bound, here and nowhere else.  Anything
 * malformed is INVALID_INPUT (SQLSTATE 22023), raised before the join
 * touches a table, so nothing is written and nothing is recorded as a
 * refusal.
 */
#include "bc_join.h"

#include "utils/builtins.h"

/* ereport(ERROR) with SQLSTATE 22023 and INVALID_INPUT in the detail. */
void
bc_invalid_input(const char *fmt,...)
{
	char		msg[256];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid join request: %s", msg),
			 errdetail("INVALID_INPUT: the request was refused before anything was written.")));
}

/* ereport(ERROR) with INVALID_CONFIG: an attestor or the setup is wrong. */
void
bc_invalid_config(const char *fmt,...)
{
	char		msg[256];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ereport(ERROR,
			(errcode(ERRCODE_BC_INVALID_CONFIG),
			 errmsg("%s", msg),
			 errdetail("INVALID_CONFIG: the join failed and nothing was written.")));
}

/* A jbvString as a NUL-terminated copy, bounded to max bytes. */
char *
bc_json_string_value(const JsonbValue *v, const char *field, int max)
{
	if (v->type != jbvString)
		bc_invalid_input("\"%s\" must be a string", field);
	if (v->val.string.len > max)
		bc_invalid_input("\"%s\" is longer than %d bytes", field, max);
	if (memchr(v->val.string.val, '\0', v->val.string.len) != NULL)
		bc_invalid_input("\"%s\" contains a NUL character", field);
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* 1 when c is in the base64url alphabet. */
static bool
is_b64url_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		(c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* 1 when s holds only characters of the base64url alphabet. */
bool
bc_is_b64url(const char *s)
{
	for (; *s; s++)
	{
		if (!is_b64url_char(*s))
			return false;
	}
	return true;
}

/* Check the claims object: known members only, bounded strings and arrays. */
static void
check_claims(JsonbValue *obj)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;
	int			depth = 0;

	it = JsonbIteratorInit(obj->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		switch (tok)
		{
			case WJB_BEGIN_OBJECT:
				if (depth++ != 0)
					bc_invalid_input("claims hold no nested objects");
				break;
			case WJB_END_OBJECT:
				depth--;
				break;
			case WJB_KEY:
				key = pnstrdup(v.val.string.val, v.val.string.len);
				if (strcmp(key, "productUuid") != 0 && strcmp(key, "serial") != 0 &&
					strcmp(key, "hostname") != 0 && strcmp(key, "arch") != 0 &&
					strcmp(key, "macs") != 0 && strcmp(key, "gpuUuids") != 0)
					bc_invalid_input("unknown claim \"%.64s\"", key);
				break;
			case WJB_VALUE:
				if (strcmp(key, "macs") == 0 || strcmp(key, "gpuUuids") == 0)
					bc_invalid_input("claim \"%s\" must be an array of strings", key);
				(void) bc_json_string_value(&v, key, BC_CLAIM_STRING_MAX);
				break;
			case WJB_BEGIN_ARRAY:
				if (key == NULL || depth != 1 ||
					(strcmp(key, "macs") != 0 && strcmp(key, "gpuUuids") != 0))
					bc_invalid_input("claim \"%s\" must be a string", key ? key : "?");
				if (v.val.array.nElems > BC_CLAIM_ARRAY_MAX)
					bc_invalid_input("claim \"%s\" has more than %d entries", key, BC_CLAIM_ARRAY_MAX);
				depth++;
				break;
			case WJB_ELEM:
				if (depth != 2)
					bc_invalid_input("claims hold no nested arrays");
				(void) bc_json_string_value(&v, key, BC_CLAIM_STRING_MAX);
				break;
			case WJB_END_ARRAY:
				depth--;
				break;
			default:
				bc_invalid_input("claims must be a JSON object");
		}
	}
}

/*
 * The "csr" field: base64url of a DER PKCS#10 request with a P-256 key,
 * parsed and hashed into req (csr_der, csr, csr_sha256, csr_spki_sha256).
 */
void
bc_parse_csr(const char *csr_b64, BcJoinRequest *req, MemoryContext owner)
{
	int			st;
	bc_csr	   *csr = NULL;

	if (csr_b64 == NULL)
		bc_invalid_input("\"csr\" is required");
	if (!bc_is_b64url(csr_b64) || csr_b64[0] == '\0')
		bc_invalid_input("\"csr\" is not base64url");
	req->csr_der = palloc(bc_b64url_decoded_maxlen(strlen(csr_b64)) + 1);
	if (bc_b64url_decode(csr_b64, strlen(csr_b64), req->csr_der,
						 bc_b64url_decoded_maxlen(strlen(csr_b64)), &req->csr_der_len) != BC_OK)
		bc_invalid_input("\"csr\" is not base64url");
	st = bc_csr_parse(req->csr_der, req->csr_der_len, &csr);
	if (st == BC_EUNSUPPORTED)
		bc_invalid_input("the CSR's key must be an ECDSA P-256 key");
	if (st != BC_OK)
		bc_invalid_input("\"csr\" is not a DER PKCS#10 certificate request");
	req->csr = bc_own_csr(owner, &csr);

	if (bc_sha256(req->csr_der, req->csr_der_len, req->csr_sha256) != BC_OK ||
		bc_csr_spki_sha256(req->csr, req->csr_spki_sha256) != BC_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not hash the CSR"),
				 bc_errdetail_openssl("SHA-256")));
	bc_b64url_encode(req->csr_sha256, BC_SHA256_LEN, req->csr_sha256_b64);
	bc_b64url_encode(req->csr_spki_sha256, BC_SHA256_LEN, req->csr_spki_sha256_b64);
}

/* Parse and bound a JoinRequest; raises 22023 for anything malformed. */
void
bc_parse_join_request(Jsonb *jb, BcJoinRequest *req, MemoryContext owner)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *csr_b64 = NULL;
	size_t		n;

	memset(req, 0, sizeof(*req));

	if (bc_jsonb_text_over(jb, BC_REQUEST_MAX))
		bc_invalid_input("the request is over %d bytes", BC_REQUEST_MAX);
	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
		bc_invalid_input("the request must be a JSON object");

	it = JsonbIteratorInit(&jb->root);
	tok = JsonbIteratorNext(&it, &v, true);
	Assert(tok == WJB_BEGIN_OBJECT);
	while ((tok = JsonbIteratorNext(&it, &v, true)) == WJB_KEY)
	{
		char	   *key = pnstrdup(v.val.string.val, v.val.string.len);

		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);

		if (strcmp(key, "csr") == 0)
			csr_b64 = bc_json_string_value(&v, key, BC_CSR_B64_MAX);
		else if (strcmp(key, "role") == 0)
			req->role = bc_json_string_value(&v, key, 16);
		else if (v.type == jbvNull &&
				 (strcmp(key, "attestor") == 0 || strcmp(key, "attestation") == 0 ||
				  strcmp(key, "sealedToken") == 0 || strcmp(key, "claims") == 0))
			continue;			/* an optional field given as null is absent */
		else if (strcmp(key, "attestor") == 0)
			req->attestor = bc_json_string_value(&v, key, BC_ATTESTOR_ID_MAX);
		else if (strcmp(key, "attestation") == 0)
			req->attestation_b64 = bc_json_string_value(&v, key, BC_ATTESTATION_B64_MAX);
		else if (strcmp(key, "sealedToken") == 0)
			req->sealed_token = bc_json_string_value(&v, key, BC_SEALED_TOKEN_MAX);
		else if (strcmp(key, "claims") == 0)
		{
			if (v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
				bc_invalid_input("\"claims\" must be a JSON object");
			check_claims(&v);
			req->claims = JsonbValueToJsonb(&v);
		}
		else
			bc_invalid_input("unknown field \"%.64s\"", key);
	}

	/* role */
	if (req->role == NULL)
		bc_invalid_input("\"role\" is required");
	if (!bc_role_valid(req->role))
		bc_invalid_input("\"role\" must be node, site or ramdisk");

	/* attestor: absent or empty means join-token */
	if (req->attestor == NULL || req->attestor[0] == '\0')
		req->attestor = BC_ATTESTOR_JOIN_TOKEN;
	if (!bc_attestor_id_valid(req->attestor))	/* its length is bounded above */
		bc_invalid_input("\"attestor\" may hold only a-z, 0-9, '.', '_' and '-'");

	/* claims: absent means {} */
	if (req->claims == NULL)
		req->claims = bc_jsonb("{}");

	/* attestation: base64url bytes */
	if (req->attestation_b64 != NULL && req->attestation_b64[0] != '\0')
	{
		size_t		cap = bc_b64url_decoded_maxlen(strlen(req->attestation_b64));

		req->attestation = palloc(VARHDRSZ + cap + 1);
		if (bc_b64url_decode(req->attestation_b64, strlen(req->attestation_b64),
							 (unsigned char *) VARDATA(req->attestation), cap, &n) != BC_OK)
			bc_invalid_input("\"attestation\" is not base64url");
		SET_VARSIZE(req->attestation, VARHDRSZ + n);
	}

	/* sealedToken: a JWE compact serialization has five base64url parts */
	if (req->sealed_token != NULL)
	{
		int			dots = 0;
		const char *p;

		for (p = req->sealed_token; *p; p++)
		{
			if (*p == '.')
				dots++;
			else if (!is_b64url_char(*p))
				bc_invalid_input("\"sealedToken\" is not a JWE compact serialization");
		}
		if (dots != 4)
			bc_invalid_input("\"sealedToken\" is not a JWE compact serialization");
	}

	bc_parse_csr(csr_b64, req, owner);
}
