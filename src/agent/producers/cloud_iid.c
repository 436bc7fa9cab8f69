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
 * It answers no challenge.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "producers/producer.h"

#define META_MAX (64 * 1024)
#define META_TIMEOUT_S 10L

typedef struct body
{
	char	   *data;
	size_t		len;
	int			over;
} body;

/* Its own state: --cloud, --metadata-url, --cloud-audience. */
static struct
{
	const char *cloud;
	const char *metadata_url;
	const char *cloud_audience;
} st;

/* libcurl's write callback: keep at most META_MAX bytes. */
static size_t
keep(char *p, size_t size, size_t n, void *arg)
{
	body	   *b = arg;
	size_t		k = size * n;
	char	   *grown;

	if (b->len + k > META_MAX)
	{
		b->over = 1;
		return 0;
	}
	grown = realloc(b->data, b->len + k + 1);
	if (grown == NULL)
		return 0;
	b->data = grown;
	memcpy(b->data + b->len, p, k);
	b->len += k;
	b->data[b->len] = '\0';
	return k;
}

/* One request to the metadata service; the body malloc()ed and NUL-terminated. */
static int
fetch(const char *method, const char *url, const char *h1, const char *h2, char **out,
	  size_t *outlen, char *err, size_t errlen)
{
	CURL	   *c = curl_easy_init();
	struct curl_slist *hs = NULL;
	body		b = {NULL, 0, 0};
	long		status = 0;
	CURLcode	cc;

	*out = NULL;
	if (c == NULL)
	{
		snprintf(err, errlen, "cannot start an HTTP request (out of memory)");
		return BC_ENOMEM;
	}
	if (h1 != NULL)
		hs = curl_slist_append(hs, h1);
	if (h2 != NULL)
		hs = curl_slist_append(hs, h2);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");	/* link-local: never through a proxy */
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, META_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	if (strcmp(method, "PUT") == 0)
	{
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	}
	cc = curl_easy_perform(c);
	if (cc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hs);
	curl_easy_cleanup(c);
	if (cc != CURLE_OK || status != 200 || b.data == NULL)
	{
		snprintf(err, errlen, "the metadata service: %s %s: %s", method, url,
				 b.over ? "answer over 64 KiB" :
				 cc != CURLE_OK ? curl_easy_strerror(cc) :
				 status != 200 ? "HTTP status other than 200" : "empty answer");
		free(b.data);
		return BC_EINVAL;
	}
	*out = b.data;
	*outlen = b.len;
	return BC_OK;
}

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
aws(const char *base, json_t *ev, char *err, size_t errlen)
{
	char		url[1024];
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

	snprintf(url, sizeof(url), "%s/latest/api/token", base);
	rc = fetch("PUT", url, "X-aws-ec2-metadata-token-ttl-seconds: 60", NULL, &tok, &toklen,
			   err, errlen);
	if (rc != BC_OK)
		goto out;
	while (toklen > 0 && isspace((unsigned char) tok[toklen - 1]))
		tok[--toklen] = '\0';
	snprintf(hdr, sizeof(hdr), "X-aws-ec2-metadata-token: %s", tok);
	snprintf(url, sizeof(url), "%s/latest/dynamic/instance-identity/document", base);
	rc = fetch("GET", url, hdr, NULL, &doc, &doclen, err, errlen);
	if (rc != BC_OK)
		goto out;
	snprintf(url, sizeof(url), "%s/latest/dynamic/instance-identity/rsa2048", base);
	rc = fetch("GET", url, hdr, NULL, &rsa, &rsalen, err, errlen);
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
gcp(const bcd_producer_input *in, const char *base, json_t *ev, char *err, size_t errlen)
{
	char		csr_sha[44];
	char	   *aud;
	char	   *enc = NULL;
	char	   *url = NULL;
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
	enc = curl_easy_escape(NULL, aud, 0);	/* '#' -> %23, ':' -> %3A, '/' -> %2F */
	if (enc == NULL)
		goto out;
	url = malloc(strlen(base) + strlen(enc) + 128);
	if (url == NULL)
		goto out;
	sprintf(url, "%s/computeMetadata/v1/instance/service-accounts/default/identity"
			"?audience=%s&format=full&licenses=FALSE", base, enc);
	rc = fetch("GET", url, "Metadata-Flavor: Google", NULL, &jwt, &len, err, errlen);
	if (rc != BC_OK)
		goto out;
	while (len > 0 && isspace((unsigned char) jwt[len - 1]))
		jwt[--len] = '\0';
	rc = json_object_set_new(ev, "token", json_string(jwt)) == 0 ? BC_OK : BC_EINVAL;
	if (rc != BC_OK)
		snprintf(err, errlen, "the metadata service's identity token is no text");
out:
	free(aud);
	curl_free(enc);
	free(url);
	free(jwt);
	return rc;
}

/* Azure: the attested document for the nonce of this CSR. */
static int
azure(const bcd_producer_input *in, const char *base, json_t *ev, char *err, size_t errlen)
{
	unsigned char h[BC_SHA256_LEN];
	char		nonce[33];
	char		url[1024];
	char	   *answer = NULL;
	size_t		len;
	json_t	   *doc = NULL;
	const char *sig;
	unsigned char *p7 = NULL;
	size_t		p7len;
	int			i;
	int			rc;

	bc_sha256(in->csr, in->csr_len, h);
	for (i = 0; i < 16; i++)
		snprintf(nonce + 2 * i, 3, "%02x", h[i]);
	snprintf(url, sizeof(url), "%s/metadata/attested/document?api-version=2025-04-07&nonce=%s",
			 base, nonce);
	rc = fetch("GET", url, "Metadata: true", NULL, &answer, &len, err, errlen);
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
	{"cloud", "CLOUD", "aws, gcp or azure; the evidence is the cloud's\n"
	 "signed word from its metadata service (aws also\n"
	 "sends the token, sealed, if given)"},
	{"metadata-url", "URL", "the metadata service (default the cloud's own:\n"
	 "http://169.254.169.254, gcp\n"
	 "http://metadata.google.internal)"},
	{"cloud-audience", "A", "gcp: the audience the service is configured with\n"
	 "(bc_join.cloud_providers); the token asks for\n"
	 "A#<csrSha256>"},
	{NULL, NULL, NULL}
};

static const char *
set_option(const char *name, const char *arg)
{
	if (strcmp(name, "cloud") == 0)
		st.cloud = arg;
	else if (strcmp(name, "metadata-url") == 0)
		st.metadata_url = arg;
	else if (strcmp(name, "cloud-audience") == 0)
		st.cloud_audience = arg;
	return NULL;
}

/* It serves the join: a cloud it knows, what that cloud needs. */
static const char *
configure(const bcd_producer_setup *setup)
{
	(void) setup;
	if (st.cloud == NULL || (strcmp(st.cloud, "aws") != 0 && strcmp(st.cloud, "gcp") != 0 &&
							 strcmp(st.cloud, "azure") != 0))
		return "--attestor cloud-iid needs --cloud aws, gcp or azure";
	if (strcmp(st.cloud, "gcp") == 0 && (st.cloud_audience == NULL || st.cloud_audience[0] == '\0'))
		return "--cloud gcp needs --cloud-audience (the audience bc_join.cloud_providers names)";
	if (st.cloud_audience != NULL && strcmp(st.cloud, "gcp") != 0)
		return "--cloud-audience is for --cloud gcp";
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
	const char *base;
	json_t	   *ev;
	char	   *text = NULL;
	int			rc;

	if (cloud == NULL)
	{
		snprintf(err, errlen, "the cloud-iid attestor needs --cloud aws, gcp or azure");
		return BC_EINVAL;
	}
	base = st.metadata_url != NULL ? st.metadata_url :
		strcmp(cloud, "gcp") == 0 ? "http://metadata.google.internal" : "http://169.254.169.254";
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
	if (strcmp(cloud, "aws") == 0)
		rc = aws(base, ev, err, errlen);
	else if (strcmp(cloud, "gcp") == 0)
		rc = gcp(in, base, ev, err, errlen);
	else if (strcmp(cloud, "azure") == 0)
		rc = azure(in, base, ev, err, errlen);
	else
	{
		snprintf(err, errlen, "--cloud must be aws, gcp or azure");
		rc = BC_EINVAL;
	}
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
