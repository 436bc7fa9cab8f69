/*
 * cloud_iid.c: the producer of the cloud-iid attestor (docs/attestors.md,
 * "cloud-iid"): the cloud's signed word about this machine, fetched from
 * its link-local metadata service (bcd run --attestor cloud-iid --cloud
 * aws|gcp|azure [--metadata-url URL]) at every round:
 *
 *   aws    IMDSv2: PUT /latest/api/token, then /latest/dynamic/instance-identity/
 *          document and /rsa2048 with the token; pkcs7 = the rsa2048 answer
 *          base64-decoded, whitespace removed.  AWS binds nothing to the CSR:
 *          the join token (--token, --token-file) is sealed to it as usual.
 *   gcp    .../service-accounts/default/identity?audience=<A>&format=full&
 *          licenses=FALSE, A = <--cloud-audience>#<csrSha256> percent-encoded.
 *   azure  /metadata/attested/document?api-version=2025-04-07&nonce=<n>,
 *          n = the first 32 hex digits of SHA-256(CSR DER).
 *
 * A cloud an operator registered in SQL (bc_join.cloud_providers, one of the
 * three document formats) is --cloud NAME --cloud-protocol aws|gcp|azure
 * --metadata-url URL: its metadata service answers as that cloud's does, the
 * evidence is that cloud's with "provider": NAME.
 *
 * Every request goes through core/transport.c's metadata mode (plain HTTP
 * to the metadata service's own address only, 10 s, 64 KiB at most).  It
 * answers no challenge.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/transport.h"
#include "producers/producer.h"

/* Its own state: --cloud, --cloud-protocol, --metadata-url, --cloud-audience. */
static struct
{
	const char *cloud;
	const char *protocol;		/* aws, gcp or azure: --cloud-protocol, else --cloud */
	const char *metadata_url;
	const char *cloud_audience;
} st;

/* Standard base64 text with its white space removed, decoded (malloc()ed). */
static int
b64_text(const char *text, unsigned char **out, size_t *outlen)
{
	size_t		n = strlen(text);
	char	   *s = malloc(n + 1);
	size_t		k = 0;
	size_t		i;
	int			rc;

	*out = NULL;
	if (s == NULL)
		return BC_ENOMEM;
	for (i = 0; i < n; i++)
		if (!isspace((unsigned char) text[i]))
			s[k++] = text[i];
	*out = malloc(k + 1);
	rc = *out == NULL ? BC_ENOMEM : bc_b64_decode(s, k, *out, k + 1, outlen);
	free(s);
	if (rc != BC_OK)
	{
		free(*out);
		*out = NULL;
	}
	return rc;
}

/* The member name: base64url of data, into ev. */
static int
set_b64url(json_t *ev, const char *name, const unsigned char *data, size_t n)
{
	char	   *s = bc_b64url_encode_alloc(data, n);
	int			rc = s != NULL && json_object_set_new(ev, name, json_string(s)) == 0 ? BC_OK : BC_ENOMEM;

	free(s);
	return rc;
}

/* AWS: IMDSv2 token, then the document and its rsa2048 PKCS#7. */
static int
aws(bcd_http *h, json_t *ev, char *err, size_t errlen)
{
	char		hdr[1024];
	char	   *tok = NULL;
	char	   *doc = NULL;
	char	   *rsa = NULL;
	unsigned char *p7 = NULL;
	size_t		toklen;
	size_t		doclen;
	size_t		rsalen;
	size_t		p7len = 0;
	int			rc;

	rc = bcd_http_metadata_fetch(h, "PUT", "/latest/api/token",
								 "X-aws-ec2-metadata-token-ttl-seconds: 60", &tok, &toklen,
								 err, errlen);
	if (rc != BC_OK)
		goto out;
	while (toklen > 0 && isspace((unsigned char) tok[toklen - 1]))
		tok[--toklen] = '\0';
	snprintf(hdr, sizeof(hdr), "X-aws-ec2-metadata-token: %s", tok);
	rc = bcd_http_metadata_fetch(h, "GET", "/latest/dynamic/instance-identity/document", hdr,
								 &doc, &doclen, err, errlen);
	if (rc != BC_OK)
		goto out;
	rc = bcd_http_metadata_fetch(h, "GET", "/latest/dynamic/instance-identity/rsa2048", hdr,
								 &rsa, &rsalen, err, errlen);
	if (rc != BC_OK)
		goto out;
	rc = b64_text(rsa, &p7, &p7len);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "the metadata service's rsa2048 answer is no base64");
		goto out;
	}
	rc = set_b64url(ev, "document", (unsigned char *) doc, doclen);
	if (rc == BC_OK)
		rc = set_b64url(ev, "pkcs7", p7, p7len);
out:
	if (tok != NULL)
		bc_free_secret(tok, strlen(tok));
	free(doc);
	free(rsa);
	free(p7);
	return rc;
}

/* GCP: the identity token for <audience>#<csrSha256>. */
static int
gcp(const bcd_producer_input *in, bcd_http *h, json_t *ev, char *err, size_t errlen)
{
	char		csr_sha[44];
	char	   *aud;
	char	   *enc = NULL;
	char	   *path = NULL;
	char	   *jwt = NULL;
	size_t		len;
	int			rc = BC_ENOMEM;

	if (st.cloud_audience == NULL)
	{
		snprintf(err, errlen, "cloud-iid on gcp needs --cloud-audience");
		return BC_EINVAL;
	}
	bc_sha256_b64url(in->csr, in->csr_len, csr_sha);
	aud = malloc(strlen(st.cloud_audience) + 45);
	if (aud == NULL)
		return BC_ENOMEM;
	sprintf(aud, "%s#%s", st.cloud_audience, csr_sha);
	enc = bcd_http_escape(aud);	/* '#' -> %23, ':' -> %3A, '/' -> %2F */
	if (enc == NULL)
		goto out;
	path = malloc(strlen(enc) + 128);
	if (path == NULL)
		goto out;
	sprintf(path, "/computeMetadata/v1/instance/service-accounts/default/identity"
			"?audience=%s&format=full&licenses=FALSE", enc);
	rc = bcd_http_metadata_fetch(h, "GET", path, "Metadata-Flavor: Google", &jwt, &len,
								 err, errlen);
	if (rc != BC_OK)
		goto out;
	while (len > 0 && isspace((unsigned char) jwt[len - 1]))
		jwt[--len] = '\0';
	rc = json_object_set_new(ev, "token", json_string(jwt)) == 0 ? BC_OK : BC_EINVAL;
	if (rc != BC_OK)
		snprintf(err, errlen, "the metadata service's identity token is no text");
out:
	free(aud);
	free(enc);
	free(path);
	free(jwt);
	return rc;
}

/* Azure: the attested document for the nonce of this CSR. */
static int
azure(const bcd_producer_input *in, bcd_http *h, json_t *ev, char *err, size_t errlen)
{
	unsigned char sha[BC_SHA256_LEN];
	char		nonce[33];
	char		path[128];
	char	   *answer = NULL;
	size_t		len;
	json_t	   *doc = NULL;
	const char *sig;
	unsigned char *p7 = NULL;
	size_t		p7len;
	int			i;
	int			rc;

	bc_sha256(in->csr, in->csr_len, sha);
	for (i = 0; i < 16; i++)
		snprintf(nonce + 2 * i, 3, "%02x", sha[i]);
	snprintf(path, sizeof(path), "/metadata/attested/document?api-version=2025-04-07&nonce=%s",
			 nonce);
	rc = bcd_http_metadata_fetch(h, "GET", path, "Metadata: true", &answer, &len, err, errlen);
	if (rc != BC_OK)
		return rc;
	doc = json_loadb(answer, len, 0, NULL);
	sig = json_string_value(json_object_get(doc, "signature"));
	rc = sig == NULL ? BC_EINVAL : b64_text(sig, &p7, &p7len);
	if (rc != BC_OK)
		snprintf(err, errlen, "the attested document is no {\"signature\": <base64>}");
	else
		rc = set_b64url(ev, "document", p7, p7len);
	json_decref(doc);
	free(answer);
	free(p7);
	return rc;
}

static const bcd_producer_option options[] = {
	{"cloud", "CLOUD", "aws, gcp or azure, or a cloud registered in SQL\n"
	 "(bc_join.cloud_providers); the evidence is the\n"
	 "cloud's signed word from its metadata service\n"
	 "(aws also sends the token, sealed, if given)"},
	{"cloud-protocol", "P", "a registered cloud: aws, gcp or azure, the\n"
	 "protocol its metadata service answers in (its\n"
	 "format in bc_join.cloud_providers: aws-pkcs7,\n"
	 "gcp-jwt or azure-pkcs7)"},
	{"metadata-url", "URL", "the metadata service (default the cloud's own:\n"
	 "http://169.254.169.254, gcp\n"
	 "http://metadata.google.internal; required for a\n"
	 "registered cloud)"},
	{"cloud-audience", "A", "gcp (or --cloud-protocol gcp): the audience the\n"
	 "service is configured with (bc_join.cloud_providers);\n"
	 "the token asks for A#<csrSha256>"},
	{NULL, NULL, NULL}
};

static const char *
set_option(const char *name, const char *arg)
{
	if (strcmp(name, "cloud") == 0)
		st.cloud = arg;
	else if (strcmp(name, "cloud-protocol") == 0)
		st.protocol = arg;
	else if (strcmp(name, "metadata-url") == 0)
		st.metadata_url = arg;
	else if (strcmp(name, "cloud-audience") == 0)
		st.cloud_audience = arg;
	return NULL;
}

/* 1 when p is one of the three protocols (and built-in providers) bcd speaks. */
static int
builtin(const char *p)
{
	return p != NULL && (strcmp(p, "aws") == 0 || strcmp(p, "gcp") == 0 || strcmp(p, "azure") == 0);
}

/* 1 when name can be a provider's name (bc_join.cloud_providers: [a-z0-9-], 1 to 32). */
static int
provider_name_valid(const char *name)
{
	size_t		n = strlen(name);

	if (n == 0 || n > 32)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
			  name[i] == '-'))
			return 0;
	return 1;
}

/* It serves the join: a cloud it knows, what that cloud needs. */
static const char *
configure(const bcd_producer_setup *setup)
{
	(void) setup;
	if (st.cloud == NULL)
		return "--attestor cloud-iid needs --cloud aws, gcp or azure (or a cloud registered in SQL "
			"with --cloud-protocol)";
	if (!provider_name_valid(st.cloud))
		return "--cloud is aws, gcp, azure or a registered provider's name (a-z, 0-9 and -, "
			"at most 32)";
	if (st.protocol != NULL && !builtin(st.protocol))
		return "--cloud-protocol must be aws, gcp or azure";
	if (builtin(st.cloud) && st.protocol != NULL && strcmp(st.protocol, st.cloud) != 0)
		return "--cloud-protocol is for a registered cloud; aws, gcp and azure speak their own";
	if (!builtin(st.cloud) && st.protocol == NULL)
		return "--cloud NAME, a cloud registered in SQL, needs --cloud-protocol aws, gcp or azure "
			"(how its metadata service answers)";
	if (!builtin(st.cloud) && st.metadata_url == NULL)
		return "--cloud NAME, a cloud registered in SQL, needs --metadata-url (its metadata service)";
	if (st.protocol == NULL)
		st.protocol = st.cloud;
	if (strcmp(st.protocol, "gcp") == 0 && (st.cloud_audience == NULL || st.cloud_audience[0] == '\0'))
		return "--cloud gcp (or --cloud-protocol gcp) needs --cloud-audience (the audience "
			"bc_join.cloud_providers names)";
	if (st.cloud_audience != NULL && strcmp(st.protocol, "gcp") != 0)
		return "--cloud-audience is for --cloud gcp (or --cloud-protocol gcp)";
	if (st.metadata_url != NULL && strncmp(st.metadata_url, "http://", 7) != 0 &&
		strncmp(st.metadata_url, "https://", 8) != 0)
		return "--metadata-url must be an http:// or https:// URL";
	return NULL;
}

/* Every round: the cloud's evidence, fetched afresh, and the token sealed when there is one. */
static int
produce(const bcd_producer_input *in, bcd_evidence *out, char *err, size_t errlen)
{
	const char *cloud = st.cloud;
	const char *proto = st.protocol != NULL ? st.protocol : st.cloud;
	const char *base;
	bcd_http   *h = NULL;
	json_t	   *ev;
	char	   *text = NULL;
	int			rc;

	if (cloud == NULL || proto == NULL)
	{
		snprintf(err, errlen, "the cloud-iid attestor needs --cloud aws, gcp or azure");
		return BC_EINVAL;
	}
	base = st.metadata_url != NULL ? st.metadata_url :
		strcmp(proto, "gcp") == 0 ? "http://metadata.google.internal" : "http://169.254.169.254";
	if (in->token != NULL || in->token_file != NULL)
	{
		rc = bcd_seal_token(in, out, err, errlen);
		if (rc != BC_OK)
			return rc;
	}
	ev = json_pack("{s:s}", "provider", cloud);
	if (ev == NULL)
	{
		bcd_evidence_free(out);
		return BC_ENOMEM;
	}
	if (!builtin(proto))
	{
		snprintf(err, errlen, "--cloud-protocol must be aws, gcp or azure");
		rc = BC_EINVAL;
	}
	else if ((h = bcd_http_new_metadata(base, err, errlen)) == NULL)
		rc = BC_EINVAL;
	else if (strcmp(proto, "aws") == 0)
		rc = aws(h, ev, err, errlen);
	else if (strcmp(proto, "gcp") == 0)
		rc = gcp(in, h, ev, err, errlen);
	else
		rc = azure(in, h, ev, err, errlen);
	bcd_http_free(h);
	if (rc == BC_OK)
	{
		text = json_dumps(ev, JSON_COMPACT);
		out->attestation = text ? bc_b64url_encode_alloc((unsigned char *) text, strlen(text)) : NULL;
		if (out->attestation == NULL)
		{
			snprintf(err, errlen, "cannot build the cloud-iid evidence (out of memory)");
			rc = BC_ENOMEM;
		}
	}
	free(text);
	json_decref(ev);
	if (rc != BC_OK)
		bcd_evidence_free(out);
	return rc;
}

const bcd_producer bcd_producer_cloud_iid = {
	.attestor = BC_ATTESTOR_CLOUD_IID,
	.summary = "a cloud VM: the instance identity from its metadata service",
	.commands = BCD_CMD_RUN,
	.options = options,
	.set_option = set_option,
	.configure = configure,
	.produce = produce,
};
