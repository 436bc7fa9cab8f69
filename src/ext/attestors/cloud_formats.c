/*
 * attestors/cloud_formats.c: the document formats the cloud-iid attestor
 * verifies (bc_join.cloud_providers.format; docs/attestors.md, "cloud-iid"):
 * aws-pkcs7 (AWS's /rsa2048), azure-pkcs7 (Azure's attested document) and
 * gcp-jwt (GCP's identity token).  Each checks a provider's evidence with
 * that provider's trust material (bc_join.cloud_trust; the OpenSSL work is
 * src/common/cloud.c), binds it to the CSR the way its format does, and
 * reads the account, the instance and its start from the members the
 * provider's row names.  attestors/cloud_iid.c finds the provider and does
 * what follows for every one.
 */
#include "bc_join.h"

#include "miscadmin.h"
#include "utils/builtins.h"

#define CLOUD BC_ATTESTOR_CLOUD_IID

static BcPlan provider_trust = {
	"SELECT kind, material FROM bc_join.cloud_trust WHERE provider = $1 ORDER BY id",
	1, {TEXTOID}
};

enum
{
	Anum_trust_kind = 1,
	Anum_trust_material
};

/* Refuse cloud-iid:<reason>; nobody authenticated yet. */
static void pg_attribute_noreturn()
refuse(const char *reason)
{
	bc_refuse_join(psprintf(CLOUD ":%s", reason), NULL);
}

/* A base64url member decoded (at most 16,384 bytes), or malformed. */
static bytea *
member_bytes(const char *b64)
{
	size_t		len = strlen(b64);
	size_t		n;
	bytea	   *out = palloc(VARHDRSZ + bc_b64url_decoded_maxlen(len) + 1);

	if (len == 0 ||
		bc_b64url_decode(b64, len, (unsigned char *) VARDATA(out),
						 bc_b64url_decoded_maxlen(len), &n) != BC_OK ||
		n > BC_CLOUD_DOC_MAX)
		refuse("malformed");
	SET_VARSIZE(out, VARHDRSZ + n);
	return out;
}

/* The trust material of kind for provider, every row concatenated (NULL: none). */
static char *
trust_material(const char *provider, const char *kind)
{
	Datum		v = CStringGetTextDatum(provider);
	StringInfoData buf;
	uint64		rows;
	uint64		i;

	initStringInfo(&buf);
	rows = bc_spi_exec(&provider_trust, &v, NULL, true, 0);
	for (i = 0; i < rows; i++)
	{
		char	   *k = bc_spi_row_text(i, Anum_trust_kind);

		if (strcmp(k, kind) == 0)
		{
			appendStringInfoString(&buf, bc_spi_row_text(i, Anum_trust_material));
			appendStringInfoChar(&buf, '\n');
		}
	}
	return buf.len > 0 ? buf.data : NULL;
}

/* The JWKS documents of a provider, one per row. */
static List *
trust_documents(const char *provider, const char *kind)
{
	Datum		v = CStringGetTextDatum(provider);
	List	   *out = NIL;
	uint64		rows;
	uint64		i;

	rows = bc_spi_exec(&provider_trust, &v, NULL, true, 0);
	for (i = 0; i < rows; i++)
	{
		char	   *k = bc_spi_row_text(i, Anum_trust_kind);

		if (strcmp(k, kind) == 0)
			out = lappend(out, bc_spi_row_text(i, Anum_trust_material));
	}
	return out;
}

/*
 * Certificates from configured PEM (NULL: none), owned by the current
 * memory context (borrowed: never freed here); INVALID_CONFIG when unreadable.
 */
static STACK_OF(X509) *
cert_stack(const char *pem)
{
	STACK_OF(X509) *sk = NULL;

	if (pem == NULL)
		return NULL;
	if (bc_cloud_certs_from_pem(pem, strlen(pem), &sk) != BC_OK)
		bc_invalid_config("cloud-iid trust material that is no PEM certificate is configured");
	return bc_own_x509_stack(CurrentMemoryContext, &sk);
}

/*
 * The provider's members to read from a signed document, after the format's
 * own first ones (fixed, already in f[0..nfixed-1]): account, instance,
 * started when there is one (integer when started_int), then require_members.
 * Returns how many fields f holds.
 */
static int
identity_fields(const BcCloudProvider *p, BcDocField *f, int nfixed, bool started_int)
{
	int			n = nfixed;
	int			i;

	f[n++] = (BcDocField) {.path = p->account_member};
	f[n++] = (BcDocField) {.path = p->instance_member};
	if (p->started_member != NULL)
		f[n++] = (BcDocField) {.path = p->started_member, .integer = started_int};
	for (i = 0; i < p->n_require; i++)
		f[n++] = (BcDocField) {.path = p->require[i]};
	return n;
}

/* Whether every require_members field (after the identity's) is there. */
static bool
required_present(const BcCloudProvider *p, BcDocField *f, int first)
{
	int			i;

	for (i = 0; i < p->n_require; i++)
		if (f[first + i].value == NULL)
			return false;
	return true;
}

/* -------------------------------------------------------- aws-pkcs7 */

/*
 * aws-pkcs7 (AWS's /rsa2048): the pkcs7 verified with the provider's
 * certificates, its content the document; the identity from the content.
 */
static void
aws_pkcs7_verify(const BcJoinRequest *req, BcEvidenceMember *m, const BcCloudProvider *p,
				 int64 now, BcCloudIdentity *id)
{
	bytea	   *document = member_bytes(m[BC_CLOUD_M_DOCUMENT].value);
	bytea	   *p7 = member_bytes(m[BC_CLOUD_M_PKCS7].value);
	char	   *pem = trust_material(p->name, "certificate");
	STACK_OF(X509) *certs;
	unsigned char *content = NULL;
	size_t		content_len = 0;
	const char *reason = NULL;
	int			st;
	BcDocField *f = palloc0(sizeof(BcDocField) * (3 + p->n_require));
	int			nf = identity_fields(p, f, 0, false);
	int			first_required = p->started_member != NULL ? 3 : 2;
	bool		same;

	if (pem == NULL)
		refuse("provider-disabled");
	certs = cert_stack(pem);
	st = bc_cloud_aws_verify((const unsigned char *) VARDATA(p7), VARSIZE(p7) - VARHDRSZ,
							 certs, &content, &content_len, &reason);
	if (st != BC_OK)
		refuse(reason ? reason : "bad-signature");
	/* Only the signed bytes count, and they must be the document sent. */
	same = content_len == VARSIZE(document) - VARHDRSZ &&
		memcmp(content, VARDATA(document), content_len) == 0;
	if (!same)
	{
		bc_free(content);
		refuse("content-mismatch");
	}
	{
		char	   *text = pnstrdup((char *) content, content_len);

		bc_free(content);
		if (!bc_doc_fields(text, content_len, f, nf) || !required_present(p, f, first_required))
			refuse("malformed-document");
	}
	id->account = f[0].value;
	id->instance = f[1].value;
	if (p->started_member != NULL)
	{
		if (bc_cloud_parse_rfc3339(f[2].value, &id->started) != BC_OK)
			refuse("malformed-document");
		id->has_started = true;
	}
}

/* ---------------------------------------------------------- gcp-jwt */

/* A JWT segment decoded as text, or malformed-token. */
static char *
segment(const char *s, size_t n, size_t cap, size_t *len)
{
	unsigned char *buf = palloc(bc_b64url_decoded_maxlen(n) + 1);

	if (n == 0 || bc_b64url_decode(s, n, buf, bc_b64url_decoded_maxlen(n), len) != BC_OK ||
		*len > cap)
		refuse("malformed-token");
	buf[*len] = '\0';
	return (char *) buf;
}

/*
 * gcp-jwt (GCP's identity token): RS256 by the one configured key its kid
 * names, the provider's issuer, the audience bound to the CSR, its times
 * and the identity from its claims.
 */
static void
gcp_jwt_verify(const BcJoinRequest *req, BcEvidenceMember *m, const BcCloudProvider *p,
			   int64 now, BcCloudIdentity *id)
{
	const char *jwt = m[BC_CLOUD_M_TOKEN].value;
	const char *dot1 = strchr(jwt, '.');
	const char *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
	char	   *header;
	char	   *payload;
	unsigned char *sig;
	size_t		hlen;
	size_t		plen;
	size_t		slen;
	BcDocField	h[] = {{.path = "alg"}, {.path = "kid"}};
	BcDocField *c = palloc0(sizeof(BcDocField) * (7 + p->n_require));
	int			nc;
	List	   *jwks = trust_documents(p->name, "jwks");
	ListCell   *lc;
	EVP_PKEY   *key = NULL;
	int			matches = 0;
	int64		iat;
	int64		exp;

	c[0] = (BcDocField) {.path = "iss"};
	c[1] = (BcDocField) {.path = "aud"};
	c[2] = (BcDocField) {.path = "iat", .integer = true};
	c[3] = (BcDocField) {.path = "exp", .integer = true};
	nc = identity_fields(p, c, 4, true);

	if (jwks == NIL || p->audience == NULL || p->issuer == NULL)
		refuse("provider-disabled");
	if (dot2 == NULL || strchr(dot2 + 1, '.') != NULL)
		refuse("malformed-token");
	header = segment(jwt, dot1 - jwt, 1024, &hlen);
	if (!bc_doc_fields(header, hlen, h, lengthof(h)))
		refuse("malformed-token");
	/* exactly RS256: never none, HS256 keyed with a public key, ES256, PS256 */
	if (h[0].value == NULL || strcmp(h[0].value, "RS256") != 0)
		refuse("wrong-alg");
	if (h[1].value == NULL)
		refuse("unknown-key");
	payload = segment(dot1 + 1, dot2 - dot1 - 1, 8192, &plen);
	sig = (unsigned char *) segment(dot2 + 1, strlen(dot2 + 1), 1024, &slen);

	/*
	 * Exactly one configured key has this kid, across every row as within
	 * one, and it is an RSA key.  A key found is the context's at once
	 * (borrowed here, never freed by hand); a second match anywhere is
	 * unknown-key, whichever rows hold them.
	 */
	foreach(lc, jwks)
	{
		const char *doc = (const char *) lfirst(lc);
		EVP_PKEY   *k = NULL;
		int			n = 0;

		CHECK_FOR_INTERRUPTS();
		if (bc_cloud_jwks_rsa_key(doc, strlen(doc), h[1].value, &n, &k) != BC_OK)
			bc_invalid_config("a JWKS of provider %s in bc_join.cloud_trust is unreadable", p->name);
		matches += n;
		if (k != NULL)
			key = bc_own_pkey(CurrentMemoryContext, &k);
		if (matches > 1)
			refuse("unknown-key");
	}
	if (matches != 1 || key == NULL)
		refuse("unknown-key");
	if (bc_cloud_rs256_verify(key, jwt, dot2 - jwt, sig, slen) != BC_OK)
		refuse("bad-signature");

	/* The claims: signed, so read as they are. */
	if (!bc_doc_fields(payload, plen, c, nc))
		refuse("malformed-token");
	if (c[0].value == NULL || strcmp(c[0].value, p->issuer) != 0)
		refuse("wrong-issuer");
	if (c[1].value == NULL ||
		(strcmp(c[1].value, psprintf("%s#%s", p->audience, req->csr_sha256_b64)) != 0 &&
		 !bc_check_no_csr("the audience is <audience>#<csrSha256>")))
		refuse("wrong-audience");
	if (c[2].value == NULL || c[3].value == NULL)
		refuse("malformed-token");
	iat = strtoll(c[2].value, NULL, 10);
	exp = strtoll(c[3].value, NULL, 10);
	if (iat > now + 60)
		refuse("not-yet-valid");
	if (now >= exp + 60)
		refuse("expired");
	if (exp - iat > 3600)
		refuse("lifetime");
	if (!required_present(p, c, p->started_member != NULL ? 7 : 6))
		refuse("no-instance");
	id->account = c[4].value;
	id->instance = c[5].value;
	if (p->started_member != NULL && c[6].value != NULL)
	{
		id->has_started = true;
		id->started = strtoll(c[6].value, NULL, 10);
	}
}

/* ------------------------------------------------------ azure-pkcs7 */

/*
 * azure-pkcs7 (Azure's attested document): the PKCS#7, its signer chained
 * to the provider's roots and named under its domain, the content's nonce
 * bound to the CSR, its times, the identity from the content.
 */
static void
azure_pkcs7_verify(const BcJoinRequest *req, BcEvidenceMember *m, const BcCloudProvider *p,
				   int64 now, BcCloudIdentity *id)
{
	bytea	   *p7 = member_bytes(m[BC_CLOUD_M_DOCUMENT].value);
	char	   *roots_pem = trust_material(p->name, "root");
	char	   *inter_pem = trust_material(p->name, "intermediate");
	STACK_OF(X509) *roots;
	STACK_OF(X509) *inter;
	unsigned char *content = NULL;
	size_t		content_len = 0;
	const char *reason = NULL;
	char		nonce[33];
	char	   *text;
	int			st;
	int			i;
	BcDocField *f = palloc0(sizeof(BcDocField) * (5 + p->n_require));
	int			nf;
	int64		created;
	int64		expires;

	if (roots_pem == NULL || p->domain == NULL || p->nonce_member == NULL)
		refuse("provider-disabled");
	f[0] = (BcDocField) {.path = p->nonce_member};
	f[1] = (BcDocField) {.path = "timeStamp.createdOn"};
	f[2] = (BcDocField) {.path = "timeStamp.expiresOn"};
	nf = identity_fields(p, f, 3, false);
	roots = cert_stack(roots_pem);
	inter = cert_stack(inter_pem);
	st = bc_cloud_azure_verify((const unsigned char *) VARDATA(p7), VARSIZE(p7) - VARHDRSZ,
							   roots, inter, p->domain, now, &content, &content_len, &reason);
	if (st != BC_OK)
		refuse(reason ? reason : "bad-signature");
	text = pnstrdup((char *) content, content_len);
	bc_free(content);

	if (!bc_doc_fields(text, content_len, f, nf))
		refuse("malformed-document");
	/* nonce: the first 32 hex digits of SHA-256(CSR DER) */
	for (i = 0; i < 16; i++)
		snprintf(nonce + 2 * i, 3, "%02x", req->csr_sha256[i]);
	if (f[0].value == NULL ||
		(strcmp(f[0].value, nonce) != 0 && !bc_check_no_csr("the nonce is the CSR's")))
		refuse("wrong-nonce");
	if (bc_cloud_parse_azure_time(f[1].value, &created) != BC_OK ||
		bc_cloud_parse_azure_time(f[2].value, &expires) != BC_OK)
		refuse("malformed-document");
	if (created > now + 60)
		refuse("not-yet-valid");
	if (now > expires)
		refuse("expired");
	if (!required_present(p, f, 5))
		refuse("malformed-document");
	id->account = f[3].value;
	id->instance = f[4].value;
}

static const BcCloudFormat formats[] = {
	{"aws-pkcs7", (1 << BC_CLOUD_M_DOCUMENT) | (1 << BC_CLOUD_M_PKCS7), aws_pkcs7_verify, "malformed-document", false},
	{"gcp-jwt", (1 << BC_CLOUD_M_TOKEN), gcp_jwt_verify, "no-instance", true},
	{"azure-pkcs7", (1 << BC_CLOUD_M_DOCUMENT), azure_pkcs7_verify, "malformed-document", true},
};

/* The format named name (bc_join.cloud_providers.format), or NULL. */
const BcCloudFormat *
bc_cloud_format(const char *name)
{
	int			i;

	for (i = 0; i < (int) lengthof(formats); i++)
		if (strcmp(formats[i].name, name) == 0)
			return &formats[i];
	return NULL;
}

/*
 * Whether a provider is defined as its format needs (what
 * cloud_providers_check holds a row to, should one have gone round it).
 */
bool
bc_cloud_provider_coherent(const BcCloudProvider *p)
{
	bool		jwt = p->format->verify == gcp_jwt_verify;
	bool		azure = p->format->verify == azure_pkcs7_verify;

	return jwt == (p->issuer != NULL) && azure == (p->nonce_member != NULL) &&
		!(azure && p->started_member != NULL) && p->n_require <= 8;
}
