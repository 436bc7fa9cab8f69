/*
 * sds.c: Envoy's Secret Discovery Service v3 (docs/agent.md, "Envoy: SDS")
 * on the Workload API socket, as SPIRE's agent serves it: StreamSecrets
 * (state of the world, bidirectional) and FetchSecrets (unary), their
 * messages those of sds.proto.  A call's caller is matched by the same
 * rules as every Workload API call (authorize.c); its identity's X509-SVID
 * is the one FetchX509SVID streams (x509_svids.c: the stream keeps it
 * provisioned).
 *
 * Resource names: "default" and the identity's SPIFFE ID are its SVID (a
 * TlsCertificate named as asked); "ROOTCA" is bcd's own trust domain, and
 * "spiffe://TD" a trust domain the call may see (wl_trust_domains), as a
 * CertificateValidationContext; "ALL" is one SPIFFE validator holding every
 * domain the call may see; no name at all is every one of them.  Any other
 * name ends the stream with INVALID_ARGUMENT, as SPIRE does.
 *
 * A stream's answers: version a counter from "1", a nonce of 4 random
 * bytes in hex; every answer carries every resource subscribed.  A request
 * whose response_nonce is not the last nonce sent is ignored; an ACK takes
 * the version, a NACK (error_detail) is logged and that version never sent
 * again; a changed set of names is answered.  The first answer waits for
 * the first SVID; a new SVID or CRL is pushed.  At most SDS_NAMES_MAX
 * names of SDS_NAME_MAX bytes, SDS_RATE requests a second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include "bc_common.h"
#include "core/clock.h"
#include "core/log.h"
#include "workload/internal.h"

/* The type of every resource (DiscoveryRequest/Response.type_url, the Any's). */
#define SDS_TYPE_URL "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
/* Envoy's SPIFFE certificate validator: its name and its configuration's type. */
#define SPIFFE_VALIDATOR "envoy.tls.cert_validator.spiffe"
#define SPIFFE_VALIDATOR_TYPE_URL \
	"type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.SPIFFECertValidatorConfig"
/* The names with a meaning of their own (SPIRE's defaults). */
#define SDS_DEFAULT "default"
#define SDS_ROOTCA "ROOTCA"
#define SDS_ALL "ALL"
/* Bounds of a request: names, a name's bytes; requests a second on one stream. */
#define SDS_NAMES_MAX 16
#define SDS_NAME_MAX 2048
#define SDS_RATE 10
/* A stream's NACKs: logged once in this many seconds, the others counted. */
#define SDS_NACK_LOG_SECONDS 10.0
/* The most resources one answer holds: the names, or (none) default, ROOTCA and each domain. */
#define SDS_RESOURCES_MAX (SDS_NAMES_MAX + WL_TRUST_DOMAINS_MAX + 2)

/* An SDS call's state. */
typedef struct wl_sds
{
	char	   *names[SDS_NAMES_MAX];	/* subscribed (none: every resource) */
	int			n_names;
	int			rootca;			/* validation contexts as trusted_ca, not the SPIFFE validator */
	int			answer;			/* a request waits for its answer */
	unsigned long version;		/* the last version sent (0: none) */
	char		nonce[9];		/* the last nonce sent ("" none) */
	unsigned long acked;		/* the last version the client took */
	double		window;			/* monotonic: the rate's second began */
	int			in_window;
	double		nack_logged;	/* monotonic */
	unsigned long nacks_unlogged;
} wl_sds;

/* Free s and its names. */
void
wl_sds_free(wl_sds *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < s->n_names; i++)
		free(s->names[i]);
	free(s);
}

/* ------------------------------------------------------------ PEM */

/* What bio holds, as a malloc()ed buffer of *len bytes (wiped in bio); NULL on OOM. */
static uint8_t *
bio_take(BIO *bio, size_t *len)
{
	char	   *p;
	long		n = BIO_get_mem_data(bio, &p);
	uint8_t    *out = n > 0 ? malloc((size_t) n) : NULL;

	*len = 0;
	if (out != NULL)
	{
		memcpy(out, p, (size_t) n);
		*len = (size_t) n;
	}
	if (n > 0)
		OPENSSL_cleanse(p, (size_t) n);
	return out;
}

/* DER certificates, concatenated, as PEM (malloc()ed, *len bytes); NULL when none or on error. */
static uint8_t *
certs_pem(const unsigned char *der, size_t der_len, size_t *len)
{
	BIO		   *bio = BIO_new(BIO_s_mem());
	const unsigned char *p = der;
	const unsigned char *end = der + der_len;
	uint8_t    *out = NULL;
	int			ok = bio != NULL && der_len > 0;

	*len = 0;
	while (ok && p < end)
	{
		X509	   *c = d2i_X509(NULL, &p, (long) (end - p));

		ok = c != NULL && PEM_write_bio_X509(bio, c) == 1;
		X509_free(c);
	}
	if (ok)
		out = bio_take(bio, len);
	BIO_free(bio);
	return out;
}

/* A PKCS#8 DER key as PKCS#8 PEM ("PRIVATE KEY"; malloc()ed, *len bytes, a secret); NULL on error. */
static uint8_t *
key_pem(const unsigned char *der, size_t der_len, size_t *len)
{
	const unsigned char *p = der;
	PKCS8_PRIV_KEY_INFO *p8 = d2i_PKCS8_PRIV_KEY_INFO(NULL, &p, (long) der_len);
	BIO		   *bio = BIO_new(BIO_s_secmem());	/* its buffers wiped when freed */
	uint8_t    *out = NULL;

	*len = 0;
	if (p8 != NULL && bio != NULL && PEM_write_bio_PKCS8_PRIV_KEY_INFO(bio, p8) == 1)
		out = bio_take(bio, len);
	PKCS8_PRIV_KEY_INFO_free(p8);
	BIO_free(bio);
	return out;
}

/* The CRL held as PEM (malloc()ed, *len bytes); NULL when none. */
static uint8_t *
crl_pem(const bcd_workload *w, size_t *len)
{
	BIO		   *bio;
	uint8_t    *out = NULL;

	*len = 0;
	if (w->crl_parsed == NULL || (bio = BIO_new(BIO_s_mem())) == NULL)
		return NULL;
	if (PEM_write_bio_X509_CRL(bio, w->crl_parsed) == 1)
		out = bio_take(bio, len);
	BIO_free(bio);
	return out;
}

/* ------------------------------------------------------------ the answer */

/*
 * An answer being made: its Secrets, each packed into an Any, and every
 * buffer they point at (freed, secrets wiped, by answer_free).
 */
typedef struct sds_answer
{
	Google__Protobuf__Any anys[SDS_RESOURCES_MAX];
	Google__Protobuf__Any *anyp[SDS_RESOURCES_MAX];
	int			n;
	int			failed;			/* out of memory, or a certificate unreadable */
	/* what the SVID is, made once */
	uint8_t    *chain;
	size_t		chain_len;
	uint8_t    *key;
	size_t		key_len;
} sds_answer;

/* Free what a's resources hold, the key and every packed Secret wiped. */
static void
answer_free(sds_answer *a)
{
	for (int i = 0; i < a->n; i++)
	{
		OPENSSL_cleanse(a->anys[i].value.data, a->anys[i].value.len);
		free(a->anys[i].value.data);
	}
	free(a->chain);
	if (a->key != NULL)
		OPENSSL_cleanse(a->key, a->key_len);
	free(a->key);
}

/* Pack sec as a's next resource. */
static void
answer_add(sds_answer *a, const Secret *sec)
{
	size_t		n = protobuf_c_message_get_packed_size(&sec->base);
	uint8_t    *buf;

	if (a->n >= SDS_RESOURCES_MAX || (buf = malloc(n ? n : 1)) == NULL)
	{
		a->failed = 1;
		return;
	}
	protobuf_c_message_pack(&sec->base, buf);
	google__protobuf__any__init(&a->anys[a->n]);
	a->anys[a->n].type_url = (char *) SDS_TYPE_URL;
	a->anys[a->n].value.data = buf;
	a->anys[a->n].value.len = n;
	a->anyp[a->n] = &a->anys[a->n];
	a->n++;
}

/* id's SVID as a TlsCertificate named name: the chain (leaf first, no root) and PKCS#8 key, PEM. */
static void
add_svid(sds_answer *a, const wl_identity *id, const char *name)
{
	Secret		sec = SECRET__INIT;
	TlsCertificate tls = TLS_CERTIFICATE__INIT;
	DataSource	chain = DATA_SOURCE__INIT;
	DataSource	key = DATA_SOURCE__INIT;

	if (a->chain == NULL)
		a->chain = certs_pem(id->chain, id->chain_len, &a->chain_len);
	if (a->key == NULL)
		a->key = key_pem(id->key, id->key_len, &a->key_len);
	if (a->chain == NULL || a->key == NULL)
	{
		a->failed = 1;
		return;
	}
	chain.specifier_case = DATA_SOURCE__SPECIFIER_INLINE_BYTES;
	chain.inline_bytes.data = a->chain;
	chain.inline_bytes.len = a->chain_len;
	key.specifier_case = DATA_SOURCE__SPECIFIER_INLINE_BYTES;
	key.inline_bytes.data = a->key;
	key.inline_bytes.len = a->key_len;
	tls.certificate_chain = &chain;
	tls.private_key = &key;
	sec.name = (char *) name;
	sec.type_case = SECRET__TYPE_TLS_CERTIFICATE;
	sec.tls_certificate = &tls;
	answer_add(a, &sec);
}

/*
 * The trust domains tds[0..n) as a CertificateValidationContext named
 * name: Envoy's SPIFFE validator with one entry per domain (never their
 * roots merged), or, rootca (one domain), trusted_ca with, for bcd's own,
 * the node CA's CRL (only_verify_leaf_cert_crl: bcd holds no other).  The
 * SPIFFE validator reads no crl field (docs/agent.md): none is sent to it.
 */
static void
add_validation(sds_answer *a, const bcd_workload *w, const wl_trust_domain *tds, int n,
			   int rootca, const char *name)
{
	Secret		sec = SECRET__INIT;
	CertificateValidationContext vc = CERTIFICATE_VALIDATION_CONTEXT__INIT;
	DataSource	crl = DATA_SOURCE__INIT;
	TypedExtensionConfig tec = TYPED_EXTENSION_CONFIG__INIT;
	Google__Protobuf__Any cfg_any = GOOGLE__PROTOBUF__ANY__INIT;
	SPIFFECertValidatorConfig cfg = SPIFFECERT_VALIDATOR_CONFIG__INIT;
	SPIFFECertValidatorConfig__TrustDomain tdm[WL_TRUST_DOMAINS_MAX];
	SPIFFECertValidatorConfig__TrustDomain *tdp[WL_TRUST_DOMAINS_MAX];
	DataSource	bundles[WL_TRUST_DOMAINS_MAX];
	uint8_t    *pems[WL_TRUST_DOMAINS_MAX] = {0};
	uint8_t    *crl_buf = NULL;
	uint8_t    *cfg_buf = NULL;

	for (int i = 0; i < n && !a->failed; i++)
	{
		size_t		len;

		pems[i] = certs_pem(tds[i].roots, tds[i].roots_len, &len);
		if (pems[i] == NULL)
		{
			a->failed = 1;
			break;
		}
		data_source__init(&bundles[i]);
		bundles[i].specifier_case = DATA_SOURCE__SPECIFIER_INLINE_BYTES;
		bundles[i].inline_bytes.data = pems[i];
		bundles[i].inline_bytes.len = len;
		spiffecert_validator_config__trust_domain__init(&tdm[i]);
		tdm[i].name = (char *) tds[i].name;
		tdm[i].trust_bundle = &bundles[i];
		tdp[i] = &tdm[i];
	}
	if (a->failed)
		goto done;
	if (rootca)
	{
		size_t		crl_len;

		vc.trusted_ca = &bundles[0];
		if (tds[0].own && (crl_buf = crl_pem(w, &crl_len)) != NULL)
		{
			crl.specifier_case = DATA_SOURCE__SPECIFIER_INLINE_BYTES;
			crl.inline_bytes.data = crl_buf;
			crl.inline_bytes.len = crl_len;
			vc.crl = &crl;
			vc.only_verify_leaf_cert_crl = 1;
		}
	}
	else
	{
		cfg.n_trust_domains = (size_t) n;
		cfg.trust_domains = tdp;
		cfg_any.type_url = (char *) SPIFFE_VALIDATOR_TYPE_URL;
		cfg_any.value.len = protobuf_c_message_get_packed_size(&cfg.base);
		cfg_buf = malloc(cfg_any.value.len ? cfg_any.value.len : 1);
		if (cfg_buf == NULL)
		{
			a->failed = 1;
			goto done;
		}
		protobuf_c_message_pack(&cfg.base, cfg_buf);
		cfg_any.value.data = cfg_buf;
		tec.name = (char *) SPIFFE_VALIDATOR;
		tec.typed_config = &cfg_any;
		vc.custom_validator_config = &tec;
	}
	sec.name = (char *) name;
	sec.type_case = SECRET__TYPE_VALIDATION_CONTEXT;
	sec.validation_context = &vc;
	answer_add(a, &sec);
done:
	for (int i = 0; i < n; i++)
		free(pems[i]);
	free(crl_buf);
	free(cfg_buf);
}

/* A name, printable and short, for a log line or a message (into buf). */
static const char *
printable(const char *s, char *buf, size_t len)
{
	size_t		i = 0;

	for (; *s != '\0' && i + 4 < len; s++)
		buf[i++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
	if (*s != '\0' && i + 4 <= len)
	{
		memcpy(buf + i, "...", 3);
		i += 3;
	}
	buf[i] = '\0';
	return buf;
}

/*
 * r's answer now (its names resolved against its identity and the trust
 * domains it may see): the DiscoveryResponse, version and nonce as given
 * ("" none), or NULL with *code and why (a name it may not have, out of
 * memory).
 */
static grpc_byte_buffer *
sds_response(bcd_workload *w, wl_call *r, const char *version, const char *nonce,
			 grpc_status_code *code, char *why, size_t whylen)
{
	wl_sds	   *s = r->sds;
	const wl_identity *id = r->id;
	DiscoveryResponse resp = DISCOVERY_RESPONSE__INIT;
	sds_answer	a;
	wl_trust_domain tds[WL_TRUST_DOMAINS_MAX];
	int			ntd = wl_trust_domains(w, r, tds, WL_TRUST_DOMAINS_MAX);
	char		unknown[512] = "";
	size_t		ulen = 0;
	grpc_byte_buffer *bb = NULL;

	memset(&a, 0, sizeof(a));
	if (s->n_names == 0)
	{
		/* no name: every resource (SPIRE: the SVIDs, the bundle, each federated one) */
		add_svid(&a, id, SDS_DEFAULT);
		add_validation(&a, w, &tds[0], 1, s->rootca, SDS_ROOTCA);
		for (int i = 1; i < ntd; i++)
		{
			char		nm[320];

			snprintf(nm, sizeof(nm), BC_SPIFFE_SCHEME "%s", tds[i].name);
			add_validation(&a, w, &tds[i], 1, s->rootca, nm);
		}
	}
	for (int k = 0; k < s->n_names && !a.failed; k++)
	{
		const char *nm = s->names[k];
		int			td = -1;

		if (strncmp(nm, BC_SPIFFE_SCHEME, strlen(BC_SPIFFE_SCHEME)) == 0)
			for (int i = 0; i < ntd; i++)
				if (strcmp(nm + strlen(BC_SPIFFE_SCHEME), tds[i].name) == 0)
					td = i;
		if (strcmp(nm, SDS_DEFAULT) == 0 || strcmp(nm, id->spiffe_id) == 0)
			add_svid(&a, id, nm);
		else if (strcmp(nm, SDS_ROOTCA) == 0)
			add_validation(&a, w, &tds[0], 1, s->rootca, nm);
		else if (td >= 0)
			add_validation(&a, w, &tds[td], 1, s->rootca, nm);
		else if (strcmp(nm, SDS_ALL) == 0 && !s->rootca)
			add_validation(&a, w, tds, ntd, 0, nm);
		else if (strcmp(nm, SDS_ALL) == 0)
		{
			*code = GRPC_STATUS_INTERNAL;
			snprintf(why, whylen, "\"ALL\" needs Envoy's SPIFFE certificate validator, not used "
					 "here (Envoy 1.17 or older, disable_spiffe_cert_validation, or bcd's "
					 "--sds-validation rootca)");
			answer_free(&a);
			return NULL;
		}
		else
		{
			char		pr[128];

			ulen += (size_t) snprintf(unknown + ulen, sizeof(unknown) - ulen, "%s%s",
									  ulen ? " " : "", printable(nm, pr, sizeof(pr)));
			if (ulen >= sizeof(unknown))
				ulen = sizeof(unknown) - 1;
		}
	}
	if (unknown[0] != '\0')
	{
		/* SPIRE's message and status: the stream ends (docs/agent.md, "Envoy: SDS") */
		*code = GRPC_STATUS_INVALID_ARGUMENT;
		snprintf(why, whylen, "workload is not authorized for the requested identities [%s]",
				 unknown);
		answer_free(&a);
		return NULL;
	}
	if (!a.failed)
	{
		resp.version_info = (char *) version;
		resp.nonce = (char *) nonce;
		resp.type_url = (char *) SDS_TYPE_URL;
		resp.n_resources = (size_t) a.n;
		resp.resources = a.anyp;
		bb = wl_pack(&resp.base);
	}
	answer_free(&a);
	if (bb == NULL)
	{
		*code = GRPC_STATUS_RESOURCE_EXHAUSTED;
		snprintf(why, whylen, "out of memory");
	}
	return bb;
}

/* ------------------------------------------------------------ requests */

/*
 * Does node ask for rootCA validation contexts: Envoy 1.17 or older
 * (user_agent_build_version), or metadata disable_spiffe_cert_validation
 * true (a bool, or the string "true"), as SPIRE reads it?
 */
static int
node_rootca(const Node *node)
{
	const BuildVersion *bv = node->user_agent_version_type_case ==
		NODE__USER_AGENT_VERSION_TYPE_USER_AGENT_BUILD_VERSION ?
		node->user_agent_build_version : NULL;

	if (bv != NULL && bv->version != NULL && bv->version->major_number == 1 &&
		bv->version->minor_number <= 17)
		return 1;
	if (node->metadata == NULL)
		return 0;
	for (size_t i = 0; i < node->metadata->n_fields; i++)
	{
		const Google__Protobuf__Struct__FieldsEntry *f = node->metadata->fields[i];

		if (f->key == NULL || strcmp(f->key, "disable_spiffe_cert_validation") != 0 ||
			f->value == NULL)
			continue;
		if (f->value->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE)
			return f->value->bool_value != 0;
		if (f->value->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE)
			return f->value->string_value != NULL && strcmp(f->value->string_value, "true") == 0;
	}
	return 0;
}

/* Is name among names[0..n)? */
static int
has_name(char *const *names, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return 1;
	return 0;
}

/*
 * The names of req, if they are within the bounds, taken as r's set when
 * they differ from it (compared as sets): 1 (a change), 0, or -1 with the
 * call ended.
 */
static int
take_names(wl_call *r, const DiscoveryRequest *req)
{
	wl_sds	   *s = r->sds;
	char	   *names[SDS_NAMES_MAX];
	int			n = 0;
	int			same;
	char		why[160];

	if (req->n_resource_names > SDS_NAMES_MAX)
	{
		snprintf(why, sizeof(why), "at most %d resource names may be asked for; this request has %zu",
				 SDS_NAMES_MAX, req->n_resource_names);
		wl_call_finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT, why);
		return -1;
	}
	for (size_t i = 0; i < req->n_resource_names; i++)
		if (strlen(req->resource_names[i]) > SDS_NAME_MAX)
		{
			snprintf(why, sizeof(why), "resource name %zu is longer than %d bytes", i + 1,
					 SDS_NAME_MAX);
			wl_call_finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT, why);
			return -1;
		}
	for (size_t i = 0; i < req->n_resource_names; i++)
		if (!has_name(names, n, req->resource_names[i]))
			names[n++] = req->resource_names[i];
	same = n == s->n_names;
	for (int i = 0; i < n && same; i++)
		same = has_name(s->names, s->n_names, names[i]);
	if (same)
		return 0;
	for (int i = 0; i < s->n_names; i++)
		free(s->names[i]);
	s->n_names = 0;
	for (int i = 0; i < n; i++)
	{
		if ((s->names[i] = strdup(names[i])) == NULL)
		{
			wl_call_finish(r, 0, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
			return -1;
		}
		s->n_names++;
	}
	return 1;
}

/*
 * What every request of an SDS call is checked for first: the rate of its
 * stream, its type_url, its node (kept: a request without one keeps the
 * last).  0, or -1 with the call ended.
 */
static int
request_checks(bcd_workload *w, wl_call *r, const DiscoveryRequest *req)
{
	wl_sds	   *s = r->sds;
	double		now = bcd_now_s();

	if (now - s->window >= 1.0)
	{
		s->window = now;
		s->in_window = 0;
	}
	if (++s->in_window > SDS_RATE)
	{
		wl_call_finish(r, 0, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED,
					   "rate limit: more than 10 requests in a second on one SDS stream");
		return -1;
	}
	if (req->type_url != NULL && req->type_url[0] != '\0' && strcmp(req->type_url, SDS_TYPE_URL) != 0)
	{
		wl_call_finish(r, 0, NULL, GRPC_STATUS_INVALID_ARGUMENT,
					   "type_url must be " SDS_TYPE_URL " (or empty)");
		return -1;
	}
	if (req->node != NULL)
		s->rootca = w->sds_validation == BCD_SDS_VALIDATION_ROOTCA ||
			(w->sds_validation == BCD_SDS_VALIDATION_AUTO && node_rootca(req->node));
	return 0;
}

/* A new SDS call: its state, its identity's SVID kept provisioned while it is open. */
static int
sds_begin(wl_call *r)
{
	r->sds = calloc(1, sizeof(*r->sds));
	if (r->sds == NULL)
	{
		wl_call_finish(r, 0, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	r->sds->window = -1;
	r->sds->nack_logged = -SDS_NACK_LOG_SECONDS;
	r->id->streams++;
	r->streams_of = r->id;
	return 0;
}

/* StreamSecrets' first request: the names, the node; answered once the SVID is there. */
void
wl_sds_stream(bcd_workload *w, wl_call *r, const ProtobufCMessage *msg)
{
	const DiscoveryRequest *req = (const DiscoveryRequest *) msg;

	if (sds_begin(r) != 0 || request_checks(w, r, req) != 0 || take_names(r, req) < 0)
		return;
	r->sds->answer = 1;
}

/*
 * StreamSecrets' later requests: one whose nonce is not the last sent is
 * ignored (stale); a NACK is logged (once in SDS_NACK_LOG_SECONDS, the
 * rest counted); an ACK takes the version; changed names are answered.
 */
void
wl_sds_stream_more(bcd_workload *w, wl_call *r, const ProtobufCMessage *msg)
{
	const DiscoveryRequest *req = (const DiscoveryRequest *) msg;
	wl_sds	   *s = r->sds;
	int			changed;

	if (s == NULL || request_checks(w, r, req) != 0)
		return;
	if (strcmp(req->response_nonce != NULL ? req->response_nonce : "", s->nonce) != 0)
		return;					/* stale: an answer the client has not seen yet is on its way */
	if (req->error_detail != NULL)
	{
		double		now = bcd_now_s();
		char		pr[256];

		s->nacks_unlogged++;
		if (now - s->nack_logged >= SDS_NACK_LOG_SECONDS)
		{
			bcd_log("workload api: SDS: uid %ld's Envoy (session %s) rejected version %lu "
					"(%lu NACK(s) since the last line; it keeps version %s): %s",
					(long) r->conn->caller.peer.uid, r->id->session, s->version,
					s->nacks_unlogged, req->version_info != NULL && req->version_info[0] ?
					req->version_info : "none",
					printable(req->error_detail->message != NULL ?
							  req->error_detail->message : "", pr, sizeof(pr)));
			s->nack_logged = now;
			s->nacks_unlogged = 0;
		}
	}
	else if (req->version_info != NULL)
		s->acked = strtoul(req->version_info, NULL, 10);
	changed = take_names(r, req);
	if (changed > 0)
		s->answer = 1;
}

/*
 * StreamSecrets' stream: an answer (a new version, a new nonce) when a
 * request waits for one, or the SVID or CRL changed, once there is an SVID
 * the CRL does not list, while its caller may have it.
 */
void
wl_sds_stream_serve(bcd_workload *w, wl_call *r, double now)
{
	wl_sds	   *s = r->sds;
	wl_identity *id = r->id;
	unsigned char rnd[4];
	char		version[24];
	char		nonce[9];
	grpc_status_code code = GRPC_STATUS_OK;
	char		why[700];
	grpc_byte_buffer *bb;

	if (s == NULL || id->gen == 0 || id->not_after <= now || id->listed)
		return;
	/* what is pushed: an answer asked for, a new SVID, a new CRL, new trust bundles
	 * (w->trust_gen: the generation of what wl_trust_domains gives) */
	if (!s->answer && id->gen == r->sent_gen && w->crl_gen == r->sent_crl &&
		w->trust_gen == r->sent_trust)
		return;
	if (wl_call_secret_may_go(r) != 0)
	{
		wl_call_finish(r, 0, NULL, GRPC_STATUS_PERMISSION_DENIED, "no identity issued");
		return;
	}
	if (RAND_bytes(rnd, sizeof(rnd)) != 1)
		return;					/* the next tick tries again */
	snprintf(version, sizeof(version), "%lu", s->version + 1);
	snprintf(nonce, sizeof(nonce), "%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
	bb = sds_response(w, r, version, nonce, &code, why, sizeof(why));
	if (bb == NULL)
	{
		wl_call_finish(r, 0, NULL, code, why);
		return;
	}
	s->version++;
	memcpy(s->nonce, nonce, sizeof(s->nonce));
	s->answer = 0;
	r->sent_gen = id->gen;
	r->sent_crl = w->crl_gen;
	r->sent_trust = w->trust_gen;
	wl_call_push(r, bb);
}

/* FetchSecrets' request: the names, the node; answered once the SVID is there. */
void
wl_sds_fetch(bcd_workload *w, wl_call *r, const ProtobufCMessage *msg)
{
	const DiscoveryRequest *req = (const DiscoveryRequest *) msg;

	if (sds_begin(r) != 0 || request_checks(w, r, req) != 0)
		return;
	(void) take_names(r, req);
}

/* FetchSecrets' answer, once there is an SVID the CRL does not list: version "", no nonce. */
void
wl_sds_fetch_serve(bcd_workload *w, wl_call *r, double now)
{
	wl_identity *id = r->id;
	grpc_status_code code = GRPC_STATUS_OK;
	char		why[700] = "";
	grpc_byte_buffer *bb;

	if (r->sds == NULL || id->gen == 0 || id->not_after <= now || id->listed)
		return;
	bb = sds_response(w, r, "", "", &code, why, sizeof(why));
	wl_call_finish(r, 0, bb, code, why);	/* a secret: checked again there */
}
