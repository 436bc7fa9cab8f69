/*
 * tpm.c: the producer of the tpm attestor (docs/protocol.md, "The tpm attestor, round by round"): two rounds,
 * the CSR's key made in the TPM (core/tpm_key.c), the TPM's side through
 * ESAPI (core/tpm_esys.c).
 *
 * Round 1: base64url of {"ekPub", "ekCert"?, "akPub", "nodeKeyPub",
 * "certifyInfo", "certifySignature"}: the EK's TPM2B_PUBLIC and the
 * certificate of that EK found in NV (the DER without NV padding; absent
 * when the TPM has none: the EK must then be enrolled), the AK's
 * TPM2B_PUBLIC, the node key's TPM2B_PUBLIC (the bytes in its TSS2 PRIVATE
 * KEY, the TPM's marshalling) and TPM2_Certify of the node key by the AK.
 * The join token, when one is configured, is sealed to the service beside
 * it in both rounds (it resolves the tenant of an EK that is not enrolled).
 *
 * The challenge, base64url of {"credentialBlob", "encryptedSecret",
 * "state"}, is answered with every round-1 member and "state" as received,
 * "secret" (what TPM2_ActivateCredential returns) and a quote by the AK over
 * the configured PCRs with extraData SHA-256(secret || SHA-256(CSR DER)).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/tpm_esys.h"
#include "core/tpm_key.h"
#include "producers/producer.h"

/* Bound of a challenge (base64url of the JSON) we decode. */
#define CHALLENGE_MAX 8192

/* Its own state: --tcti, --tpm-ek, --tpm-pcrs and the state directory (the AK's blobs). */
typedef struct bcd_tpm_config
{
	const char *tcti;			/* Tss2_TctiLdr_Initialize's conf */
	const char *ek;				/* "rsa" or "p384" */
	const char *pcrs;			/* the quote's PCR selection, "sha256:0-7" */
	const char *state_dir;		/* holds the AK's blobs */
} bcd_tpm_config;

static bcd_tpm_config st = {BCD_TCTI_DEFAULT, BCD_TPM_EK_RSA, "sha256:0-7", NULL};

static const bcd_producer_option options[] = {
	{"tcti", "CONF", "the TPM's TCTI (default device:/dev/tpmrm0); it\n"
	 "must go through a resource manager (tpmrm, tabrmd)"},
	{"tpm-ek", "rsa|p384", "the endorsement key (default rsa, 0x81010001)"},
	{"tpm-pcrs", "SEL", "the quote's PCRs (default sha256:0-7)"},
	{NULL, NULL, NULL}
};

/* One of its options (producer.h). */
static const char *
set_option(const char *name, const char *arg)
{
	TPML_PCR_SELECTION sel;

	if (strcmp(name, "tcti") == 0)
		st.tcti = arg;
	else if (strcmp(name, "tpm-ek") == 0)
	{
		if (strcmp(arg, BCD_TPM_EK_RSA) != 0 && strcmp(arg, BCD_TPM_EK_P384) != 0)
			return "--tpm-ek must be rsa or p384";
		st.ek = arg;
	}
	else if (strcmp(name, "tpm-pcrs") == 0)
	{
		if (bcd_tpm_parse_pcrs(arg, &sel) != 0)
			return "--tpm-pcrs must be BANK:LIST[+BANK:LIST...], e.g. sha256:0-7 or sha256:0,2,4-7";
		st.pcrs = arg;
	}
	return NULL;
}

/* It serves the join: the TCTI is one it may use; the AK lives in the state directory. */
static const char *
configure(const bcd_producer_setup *setup)
{
	static char msg[512];
	const char *why = bcd_tpm_tcti_refused(st.tcti);

	if (why != NULL)
	{
		snprintf(msg, sizeof(msg), "--tcti %s: %s", st.tcti, why);
		return msg;
	}
	st.state_dir = setup->state_dir;
	return NULL;
}

/* The node's keys live in the TPM: the provider before any key is read. */
static int
start(char *err, size_t errlen)
{
	return bcd_tpm_keys_init(st.tcti, err, errlen);
}

static void
stop(void)
{
	bcd_tpm_keys_done();
}

/* Set doc[name] to base64url of the bytes; 0 on success. */
static int
set_b64(json_t *doc, const char *name, const unsigned char *data, size_t len)
{
	char	   *b64 = bc_b64url_encode_alloc(data, len);

	return b64 == NULL || json_object_set_new(doc, name, json_string(b64)) != 0 ?
		(free(b64), -1) : (free(b64), 0);
}

/*
 * Open the TPM, load the AK and certify the node key of key_path: into doc,
 * akPub, nodeKeyPub, certifyInfo, certifySignature, and with with_ek ekPub
 * and (when the TPM has one) ekCert.  *tpm stays open (the AK loaded).
 */
static int
certify_members(const bcd_tpm_config *cfg, const char *key_path, int with_ek,
				bcd_tpm **tpm, json_t *doc, char *err, size_t errlen)
{
	bcd_tpm_key_blobs *blobs = NULL;
	bcd_tpm_bytes *ak = NULL;
	bcd_tpm_bytes *attest = NULL;
	bcd_tpm_bytes *sig = NULL;
	bcd_tpm_bytes *cert = NULL;
	const bcd_tpm_bytes *ek;
	int			rc = BC_ENOMEM;

	*tpm = NULL;
	blobs = malloc(sizeof(*blobs));
	ak = malloc(sizeof(*ak));
	attest = malloc(sizeof(*attest));
	sig = malloc(sizeof(*sig));
	cert = malloc(sizeof(*cert));
	if (blobs == NULL || ak == NULL || attest == NULL || sig == NULL || cert == NULL)
		goto out;
	rc = bcd_tpm_key_blobs_read(key_path, blobs, err, errlen);
	if (rc != BC_OK)
		goto out;
	rc = bcd_tpm_open(cfg->tcti, cfg->ek, tpm, err, errlen);
	if (rc == BC_OK)
		rc = bcd_tpm_ak(*tpm, cfg->state_dir, ak, err, errlen);
	if (rc == BC_OK)
		rc = bcd_tpm_certify(*tpm, blobs->pub, blobs->pub_len, blobs->priv, blobs->priv_len,
							 attest, sig, err, errlen);
	if (rc == BC_OK && with_ek)
	{
		ek = bcd_tpm_ek_pub(*tpm);
		rc = bcd_tpm_ek_cert(*tpm, cert, err, errlen);
		if (rc == BC_OK &&
			(set_b64(doc, "ekPub", ek->data, ek->len) != 0 ||
			 (cert->len > 0 && set_b64(doc, "ekCert", cert->data, cert->len) != 0)))
			rc = BC_ENOMEM;
	}
	if (rc == BC_OK &&
		(set_b64(doc, "akPub", ak->data, ak->len) != 0 ||
		 set_b64(doc, "nodeKeyPub", blobs->pub, blobs->pub_len) != 0 ||
		 set_b64(doc, "certifyInfo", attest->data, attest->len) != 0 ||
		 set_b64(doc, "certifySignature", sig->data, sig->len) != 0))
		rc = BC_ENOMEM;
	if (rc == BC_ENOMEM)
		snprintf(err, errlen, "out of memory");
out:
	if (rc != BC_OK)
	{
		bcd_tpm_close(*tpm);
		*tpm = NULL;
	}
	if (blobs != NULL)
		OPENSSL_cleanse(blobs, sizeof(*blobs));
	free(blobs);
	free(ak);
	free(attest);
	free(sig);
	free(cert);
	return rc;
}

/* out->attestation = base64url of doc's compact JSON. */
static int
encode_evidence(json_t *doc, bcd_evidence *out)
{
	char	   *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);

	if (text == NULL)
		return BC_ENOMEM;
	out->attestation = bc_b64url_encode_alloc((const unsigned char *) text, strlen(text));
	free(text);
	return out->attestation == NULL ? BC_ENOMEM : BC_OK;
}

/* Round 1: the join token sealed (when configured) and the TPM's evidence. */
static int
produce(const bcd_producer_input *in, bcd_evidence *out, char *err, size_t errlen)
{
	bcd_tpm    *tpm = NULL;
	json_t	   *doc = NULL;
	int			rc;

	memset(out, 0, sizeof(*out));
	if (st.state_dir == NULL || in->key_path == NULL)
	{
		snprintf(err, errlen, "the tpm producer needs --tcti and the TPM node key");
		return BC_EINVAL;
	}
	rc = bcd_producer_join_token.produce(in, out, err, errlen);
	if (rc != BC_OK)
		return rc;
	doc = json_object();
	bcd_tpm_key_lock();			/* one user of the TPM at a time (quote) */
	rc = doc == NULL ? BC_ENOMEM : certify_members(&st, in->key_path, 1, &tpm, doc,
												   err, errlen);
	bcd_tpm_close(tpm);
	bcd_tpm_key_unlock();
	if (rc == BC_OK && (rc = encode_evidence(doc, out)) != BC_OK)
		snprintf(err, errlen, "out of memory");
	json_decref(doc);
	if (rc != BC_OK)
		bcd_evidence_free(out);
	return rc;
}

/* Decode the base64url string member name of doc into a malloc()ed buffer. */
static int
get_b64(json_t *doc, const char *name, unsigned char **buf, size_t *len)
{
	const char *s = json_string_value(json_object_get(doc, name));
	size_t		n;

	*buf = NULL;
	*len = 0;
	if (s == NULL)
		return BC_EINVAL;
	n = strlen(s);
	*buf = malloc(bc_b64url_decoded_maxlen(n) + 1);
	if (*buf == NULL)
		return BC_ENOMEM;
	return bc_b64url_decode(s, n, *buf, bc_b64url_decoded_maxlen(n) + 1, len);
}

/* The challenge: {credentialBlob, encryptedSecret, state}, decoded. */
static json_t *
decode_challenge(const char *challenge, char *err, size_t errlen)
{
	size_t		n = strlen(challenge);
	unsigned char *raw = NULL;
	size_t		raw_len = 0;
	json_t	   *doc = NULL;

	if (n > CHALLENGE_MAX || (raw = malloc(bc_b64url_decoded_maxlen(n) + 1)) == NULL ||
		bc_b64url_decode(challenge, n, raw, bc_b64url_decoded_maxlen(n) + 1, &raw_len) != BC_OK)
		snprintf(err, errlen, "the challenge is not base64url (or over %d characters)",
				 CHALLENGE_MAX);
	else
	{
		doc = json_loadb((const char *) raw, raw_len, JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_object(doc) ||
			!json_is_string(json_object_get(doc, "credentialBlob")) ||
			!json_is_string(json_object_get(doc, "encryptedSecret")) ||
			!json_is_string(json_object_get(doc, "state")))
		{
			json_decref(doc);
			doc = NULL;
			snprintf(err, errlen, "the challenge is not {credentialBlob, encryptedSecret, "
					 "state}");
		}
	}
	free(raw);
	return doc;
}

/* Round 2: activate the credential, quote over the secret and the CSR, send it all. */
static int
answer(const bcd_producer_input *in, const char *challenge, bcd_evidence *out,
	   char *err, size_t errlen)
{
	TPML_PCR_SELECTION sel;
	bcd_tpm    *tpm = NULL;
	json_t	   *ch = NULL;
	json_t	   *doc = NULL;
	unsigned char *blob = NULL;
	unsigned char *enc = NULL;
	size_t		blob_len = 0;
	size_t		enc_len = 0;
	unsigned char secret[64];
	size_t		secret_len = 0;
	unsigned char buf[BC_TPM_SECRET_LEN + BC_SHA256_LEN];
	unsigned char nonce[BC_SHA256_LEN];
	bcd_tpm_bytes *attest = NULL;
	bcd_tpm_bytes *sig = NULL;
	int			locked = 0;
	int			rc = BC_EINVAL;

	memset(out, 0, sizeof(*out));
	if (st.state_dir == NULL || in->key_path == NULL)
	{
		snprintf(err, errlen, "the tpm producer needs --tcti and the TPM node key");
		return BC_EINVAL;
	}
	if (bcd_tpm_parse_pcrs(st.pcrs, &sel) != 0)
	{
		snprintf(err, errlen, "bad PCR selection \"%s\"", st.pcrs);
		return BC_EINVAL;
	}
	ch = decode_challenge(challenge, err, errlen);
	if (ch == NULL)
		goto out;
	if (get_b64(ch, "credentialBlob", &blob, &blob_len) != BC_OK ||
		get_b64(ch, "encryptedSecret", &enc, &enc_len) != BC_OK)
	{
		snprintf(err, errlen, "the challenge's credentialBlob or encryptedSecret is not "
				 "base64url");
		goto out;
	}
	rc = bcd_producer_join_token.produce(in, out, err, errlen);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	doc = json_object();
	attest = malloc(sizeof(*attest));
	sig = malloc(sizeof(*sig));
	if (doc == NULL || attest == NULL || sig == NULL)
		goto out;
	bcd_tpm_key_lock();			/* one user of the TPM at a time (quote) */
	locked = 1;
	rc = certify_members(&st, in->key_path, 1, &tpm, doc, err, errlen);
	if (rc == BC_OK)
		rc = bcd_tpm_activate(tpm, blob, blob_len, enc, enc_len, secret, &secret_len,
							  err, errlen);
	if (rc == BC_OK && secret_len != BC_TPM_SECRET_LEN)
	{
		snprintf(err, errlen, "the challenge's secret has %zu bytes, not %d", secret_len,
				 BC_TPM_SECRET_LEN);
		rc = BC_EINVAL;
	}
	if (rc == BC_OK)
	{
		memcpy(buf, secret, BC_TPM_SECRET_LEN);
		rc = bc_sha256(in->csr, in->csr_len, buf + BC_TPM_SECRET_LEN);
		if (rc == BC_OK)
			rc = bc_sha256(buf, sizeof(buf), nonce);
	}
	if (rc == BC_OK)
		rc = bcd_tpm_quote(tpm, &sel, nonce, sizeof(nonce), attest, sig, err, errlen);
	if (rc == BC_OK &&
		(json_object_set(doc, "state", json_object_get(ch, "state")) != 0 ||
		 set_b64(doc, "secret", secret, secret_len) != 0 ||
		 set_b64(doc, "quote", attest->data, attest->len) != 0 ||
		 set_b64(doc, "quoteSignature", sig->data, sig->len) != 0 ||
		 encode_evidence(doc, out) != BC_OK))
	{
		snprintf(err, errlen, "out of memory");
		rc = BC_ENOMEM;
	}
out:
	bcd_tpm_close(tpm);
	if (locked)
		bcd_tpm_key_unlock();
	OPENSSL_cleanse(secret, sizeof(secret));
	OPENSSL_cleanse(buf, sizeof(buf));
	json_decref(doc);
	json_decref(ch);
	free(blob);
	free(enc);
	free(attest);
	free(sig);
	if (rc != BC_OK)
		bcd_evidence_free(out);
	return rc;
}

/*
 * The "tpm" member of a renewal (producer.h): the AK's Certify of the new
 * key, and a Quote of the configured PCRs with extraData
 * SHA-256("bc_join/tpm/renew" || SHA-256(new CSR DER)), which the service
 * checks where a PCR policy applies to the node (and ignores elsewhere).
 */
static int
tpm_renewal_member(const bcd_tpm_config *cfg, const char *key_path,
					   const unsigned char *csr, size_t csr_len, json_t **out,
					   char *err, size_t errlen)
{
	static const char label[] = "bc_join/tpm/renew";
	bcd_tpm    *tpm = NULL;
	json_t	   *doc = json_object();
	TPML_PCR_SELECTION sel;
	unsigned char buf[sizeof(label) - 1 + BC_SHA256_LEN];
	unsigned char nonce[BC_SHA256_LEN];
	bcd_tpm_bytes *attest = malloc(sizeof(*attest));
	bcd_tpm_bytes *sig = malloc(sizeof(*sig));
	int			rc;

	*out = NULL;
	bcd_tpm_key_lock();			/* one user of the TPM at a time (quote) */
	rc = (doc == NULL || attest == NULL || sig == NULL) ? BC_ENOMEM
		: certify_members(cfg, key_path, 0, &tpm, doc, err, errlen);
	if (rc == BC_OK && bcd_tpm_parse_pcrs(cfg->pcrs, &sel) != 0)
	{
		snprintf(err, errlen, "bad PCR selection \"%s\"", cfg->pcrs);
		rc = BC_EINVAL;
	}
	if (rc == BC_OK)
	{
		memcpy(buf, label, sizeof(label) - 1);
		rc = bc_sha256(csr, csr_len, buf + sizeof(label) - 1);
		if (rc == BC_OK)
			rc = bc_sha256(buf, sizeof(buf), nonce);
	}
	if (rc == BC_OK)
		rc = bcd_tpm_quote(tpm, &sel, nonce, sizeof(nonce), attest, sig, err, errlen);
	if (rc == BC_OK &&
		(set_b64(doc, "quote", attest->data, attest->len) != 0 ||
		 set_b64(doc, "quoteSignature", sig->data, sig->len) != 0))
	{
		snprintf(err, errlen, "out of memory");
		rc = BC_ENOMEM;
	}
	free(attest);
	free(sig);
	bcd_tpm_close(tpm);
	bcd_tpm_key_unlock();
	if (rc == BC_OK)
		*out = doc;
	else
		json_decref(doc);
	return rc;
}

/*
 * A renewal carries, beside csr and proof, "tpm": the node's AK certifying
 * the new key (made in the TPM too), docs/protocol.md "Renewal of such a
 * certificate".
 */
static int
renewal(const bcd_producer_input *in, json_t *doc, char *err, size_t errlen)
{
	json_t	   *member = NULL;
	int			rc;

	rc = tpm_renewal_member(&st, in->key_path, in->csr, in->csr_len, &member, err, errlen);
	if (rc != BC_OK)
		return rc;
	if (json_object_set_new(doc, "tpm", member) != 0)
	{
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	return BC_OK;
}

/* A malloc()ed copy of n bytes into *dst; 0 on success. */
static int
dup_bytes(unsigned char **dst, size_t *dst_len, const unsigned char *src, size_t n)
{
	*dst = malloc(n > 0 ? n : 1);
	if (*dst == NULL)
		return -1;
	memcpy(*dst, src, n);
	*dst_len = n;
	return 0;
}

/*
 * Read the PCRs, quote them, and check with the common library's quote
 * check that the quote's pcrDigest is the digest of the values read: 1
 * when it is, 0 when a PCR was extended between the read and the quote
 * (IMA extends PCR 10 at any time), -1 on an error (err).
 */
static int
quote_once(bcd_tpm *tpm, const TPML_PCR_SELECTION *sel, uint16_t bank, uint32_t pcrs,
		   const unsigned char *extra, size_t extra_len, bcd_tpm_bytes *attest,
		   bcd_tpm_bytes *sig, bcd_quote *out, char *err, size_t errlen)
{
	bc_tpm_attest *att = malloc(sizeof(*att));
	TPMT_SIGNATURE ts;
	unsigned char values[24 * 64];
	size_t		n = 0;
	bc_tpm_pcr_bank b;
	const char *why = NULL;
	int			result = -1;

	if (att == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (bcd_tpm_pcr_read(tpm, bank, pcrs, out->values, &out->digest_len, err, errlen) != BC_OK ||
		bcd_tpm_quote(tpm, sel, extra, extra_len, attest, sig, err, errlen) != BC_OK)
		goto out;
	if (bc_tpm_attest_parse(attest->data, attest->len, att) != BC_OK ||
		bc_tpm_signature_parse(sig->data, sig->len, &ts) != BC_OK)
	{
		snprintf(err, errlen, "the TPM's quote does not parse");
		goto out;
	}
	for (int i = 0; i < 24; i++)
		if (pcrs & (1u << i))
		{
			memcpy(values + n, out->values[i], out->digest_len);
			n += out->digest_len;
		}
	b = (bc_tpm_pcr_bank) {.hash_alg = bank,.pcrs = pcrs,.values = values,.values_len = n};
	if (bc_tpm_check_quote(att, &ts, extra, extra_len, &b, 1, &why) == BC_OK)
		result = 1;
	else if (why != NULL && strcmp(why, "pcr-digest") == 0)
		result = 0;
	else
		snprintf(err, errlen, "the TPM's quote fails its own check (%s)", why ? why : "?");
out:
	free(att);
	return result;
}

/*
 * Continuous attestation's quote (producer.h): the AK loaded from its blobs
 * in the state directory (never a saved context: after a TPM Reset one is
 * unusable), the PCRs read and quoted, again when a PCR moved between the
 * two (three tries), everything transient flushed.
 */
static int
quote(uint16_t bank, uint32_t pcrs, const unsigned char *extra, size_t extra_len,
	  bcd_quote *out, char *err, size_t errlen)
{
	bcd_tpm    *tpm = NULL;
	bcd_tpm_bytes *ak = malloc(sizeof(*ak));
	bcd_tpm_bytes *attest = malloc(sizeof(*attest));
	bcd_tpm_bytes *sig = malloc(sizeof(*sig));
	TPML_PCR_SELECTION sel = {.count = 1};
	int			rc = BC_ENOMEM;
	int			got = -1;

	memset(out, 0, sizeof(*out));
	snprintf(err, errlen, "out of memory");
	if (ak == NULL || attest == NULL || sig == NULL)
		goto out;
	sel.pcrSelections[0].hash = bank;
	sel.pcrSelections[0].sizeofSelect = 3;
	for (int i = 0; i < 24; i++)
		if (pcrs & (1u << i))
			sel.pcrSelections[0].pcrSelect[i / 8] |= (uint8_t) (1u << (i % 8));
	/*
	 * The daemon's other threads sign with the node key through the
	 * provider's own TPM connection meanwhile: one user of the TPM at a time
	 * (a key load beside this session failed, seen with tpm2-abrmd).
	 */
	bcd_tpm_key_lock();
	rc = bcd_tpm_open(st.tcti, st.ek, &tpm, err, errlen);
	if (rc == BC_OK)
		rc = bcd_tpm_ak(tpm, st.state_dir, ak, err, errlen);
	for (int i = 0; rc == BC_OK && i < 3; i++)
	{
		got = quote_once(tpm, &sel, bank, pcrs, extra, extra_len, attest, sig, out, err, errlen);
		if (got != 0)
			break;
	}
	if (rc == BC_OK && got != 1)
	{
		if (got == 0)
			snprintf(err, errlen, "the PCRs kept changing between TPM2_PCR_Read and TPM2_Quote");
		rc = BC_ECRYPTO;
	}
	if (rc == BC_OK &&
		(dup_bytes(&out->ak_pub, &out->ak_pub_len, ak->data, ak->len) != 0 ||
		 dup_bytes(&out->attest, &out->attest_len, attest->data, attest->len) != 0 ||
		 dup_bytes(&out->sig, &out->sig_len, sig->data, sig->len) != 0))
	{
		snprintf(err, errlen, "out of memory");
		rc = BC_ENOMEM;
	}
out:
	bcd_tpm_close(tpm);
	if (ak != NULL && attest != NULL && sig != NULL)
		bcd_tpm_key_unlock();
	if (rc != BC_OK)
		bcd_quote_free(out);
	free(ak);
	free(attest);
	free(sig);
	return rc;
}

const bcd_producer bcd_producer_tpm = {
	.attestor = BC_ATTESTOR_TPM,
	.summary = "the node key is made in the TPM, the join proves it (two rounds)",
	.commands = BCD_CMD_RUN,
	.options = options,
	.set_option = set_option,
	.configure = configure,
	.start = start,
	.stop = stop,
	.produce = produce,
	.answer = answer,
	.renewal = renewal,
	.quote = quote,
};
