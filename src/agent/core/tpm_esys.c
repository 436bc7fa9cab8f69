/*
 * tpm_esys.c: bcd's ESAPI session with the TPM (tpm_esys.h).
 *
 * The EK: RSA-2048 of the TCG low range (template L-1, persistent at
 * 0x81010001 on most machines: swtpm_setup and the firmware put it there),
 * or the ECC P-384 EK of the high range swtpm persists at 0x81010016.  The
 * RSA EK has no userWithAuth: every use (Create and Load of the AK under it,
 * ActivateCredential) goes through a policy session satisfied by
 * PolicySecret(TPM_RH_ENDORSEMENT), the EK's policy A; the P-384 EK has
 * userWithAuth and takes the empty password.
 *
 * The AK is made once with TPM2_Create under the EK and its blobs are kept
 * in the state directory (DIR/tpm-ak.pub, DIR/tpm-ak.priv): Create makes a
 * new key every time, and the AK's Name must stay the one in the node's
 * certificate for renewals.  It is loaded for each use and flushed.
 *
 * No resource manager is assumed for the objects: everything loaded or
 * started here is flushed in bcd_tpm_close (and sooner where it can be).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_tctildr.h>

#include "bc_common.h"
#include "core/fileio.h"
#include "core/tpm_esys.h"

#define EK_RSA_HANDLE 0x81010001u
#define EK_P384_HANDLE 0x81010016u
#define NV_EK_CERT_FIRST 0x01c00000u
#define NV_EK_CERT_LAST 0x01c07fffu
#define NV_CHUNK_DEFAULT 512

struct bcd_tpm
{
	TSS2_TCTI_CONTEXT *tcti;
	ESYS_CONTEXT *ctx;
	int			rsa;			/* the EK is the RSA one (policy session) */
	ESYS_TR		ek;
	int			ek_persistent;	/* ek is a persistent handle: closed, not flushed */
	ESYS_TR		ak;
	bcd_tpm_bytes ek_pub;
};

/* "what: TPM error text" into err; BC_ECRYPTO. */
static int
tpm_error(char *err, size_t errlen, const char *what, TSS2_RC rc)
{
	snprintf(err, errlen, "%s: TPM error 0x%x (%s)", what, (unsigned) rc, Tss2_RC_Decode(rc));
	return BC_ECRYPTO;
}

/* The AK: ECDSA P-256 / SHA-256, restricted sign, never leaves this TPM. */
static void
ak_template(TPM2B_PUBLIC *t)
{
	memset(t, 0, sizeof(*t));
	t->publicArea.type = TPM2_ALG_ECC;
	t->publicArea.nameAlg = TPM2_ALG_SHA256;
	t->publicArea.objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT |
		TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_USERWITHAUTH |
		TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_SIGN_ENCRYPT;
	t->publicArea.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_NULL;
	t->publicArea.parameters.eccDetail.scheme.scheme = TPM2_ALG_ECDSA;
	t->publicArea.parameters.eccDetail.scheme.details.ecdsa.hashAlg = TPM2_ALG_SHA256;
	t->publicArea.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
	t->publicArea.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
}

/*
 * The owner-hierarchy primary tpm2-openssl 1.1 makes its keys under (its
 * primaryEccTemplate; the RSA one only on a TPM without ECC): same template,
 * same key, so a TSS2 key it wrote loads under it.
 */
static void
provider_primary_template(TPM2B_PUBLIC *t, int rsa)
{
	memset(t, 0, sizeof(*t));
	t->publicArea.type = rsa ? TPM2_ALG_RSA : TPM2_ALG_ECC;
	t->publicArea.nameAlg = TPM2_ALG_SHA256;
	t->publicArea.objectAttributes = TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_RESTRICTED |
		TPMA_OBJECT_DECRYPT | TPMA_OBJECT_NODA | TPMA_OBJECT_FIXEDTPM |
		TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN;
	if (rsa)
	{
		t->publicArea.parameters.rsaDetail.symmetric.algorithm = TPM2_ALG_AES;
		t->publicArea.parameters.rsaDetail.symmetric.keyBits.aes = 128;
		t->publicArea.parameters.rsaDetail.symmetric.mode.aes = TPM2_ALG_CFB;
		t->publicArea.parameters.rsaDetail.scheme.scheme = TPM2_ALG_NULL;
		t->publicArea.parameters.rsaDetail.keyBits = 2048;
	}
	else
	{
		t->publicArea.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_AES;
		t->publicArea.parameters.eccDetail.symmetric.keyBits.aes = 128;
		t->publicArea.parameters.eccDetail.symmetric.mode.aes = TPM2_ALG_CFB;
		t->publicArea.parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL;
		t->publicArea.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
		t->publicArea.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
	}
}

/* Marshal a TPM2B_PUBLIC into out. */
static int
marshal_public(const TPM2B_PUBLIC *pub, bcd_tpm_bytes *out)
{
	size_t		off = 0;

	if (Tss2_MU_TPM2B_PUBLIC_Marshal(pub, out->data, sizeof(out->data), &off) != TSS2_RC_SUCCESS)
		return BC_EINVAL;
	out->len = off;
	return BC_OK;
}

/* Marshal a TPMT_SIGNATURE into out. */
static int
marshal_signature(const TPMT_SIGNATURE *sig, bcd_tpm_bytes *out)
{
	size_t		off = 0;

	if (Tss2_MU_TPMT_SIGNATURE_Marshal(sig, out->data, sizeof(out->data), &off) != TSS2_RC_SUCCESS)
		return BC_EINVAL;
	out->len = off;
	return BC_OK;
}

/* The TPMS_ATTEST bytes of a TPM2B_ATTEST (what the AK signed). */
static int
copy_attest(const TPM2B_ATTEST *a, bcd_tpm_bytes *out)
{
	if (a->size > sizeof(out->data))
		return BC_ETOOBIG;
	memcpy(out->data, a->attestationData, a->size);
	out->len = a->size;
	return BC_OK;
}

/*
 * The session that authorises a use of the EK: a policy session satisfied by
 * PolicySecret(TPM_RH_ENDORSEMENT) for the RSA EK, the password otherwise.
 */
static int
ek_session(bcd_tpm *t, ESYS_TR *sess, char *err, size_t errlen)
{
	TPMT_SYM_DEF sym = {.algorithm = TPM2_ALG_NULL};
	TSS2_RC		r;

	*sess = ESYS_TR_PASSWORD;
	if (!t->rsa)
		return BC_OK;
	r = Esys_StartAuthSession(t->ctx, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
							  ESYS_TR_NONE, NULL, TPM2_SE_POLICY, &sym, TPM2_ALG_SHA256, sess);
	if (r != TSS2_RC_SUCCESS)
	{
		*sess = ESYS_TR_NONE;
		return tpm_error(err, errlen, "cannot start the EK's policy session", r);
	}
	r = Esys_PolicySecret(t->ctx, ESYS_TR_RH_ENDORSEMENT, *sess, ESYS_TR_PASSWORD,
						  ESYS_TR_NONE, ESYS_TR_NONE, NULL, NULL, NULL, 0, NULL, NULL);
	if (r != TSS2_RC_SUCCESS)
	{
		Esys_FlushContext(t->ctx, *sess);
		*sess = ESYS_TR_NONE;
		return tpm_error(err, errlen, "PolicySecret(endorsement) for the EK failed", r);
	}
	return BC_OK;
}

/* Flush a session ek_session started. */
static void
end_session(bcd_tpm *t, ESYS_TR sess)
{
	if (sess != ESYS_TR_PASSWORD && sess != ESYS_TR_NONE)
		Esys_FlushContext(t->ctx, sess);
}

/* The EK: its persistent handle, or (RSA) created from template L-1. */
static int
load_ek(bcd_tpm *t, const char *kind, char *err, size_t errlen)
{
	TPM2B_SENSITIVE_CREATE sens;
	TPM2B_PUBLIC tmpl;
	TPM2B_DATA	outside = {.size = 0};
	TPML_PCR_SELECTION pcrs = {.count = 0};
	TPM2B_PUBLIC *pub = NULL;
	bc_tpm_public parsed;
	const char *reason = NULL;
	TSS2_RC		r;
	int			rc;

	t->rsa = strcmp(kind, BCD_TPM_EK_RSA) == 0;
	r = Esys_TR_FromTPMPublic(t->ctx, t->rsa ? EK_RSA_HANDLE : EK_P384_HANDLE,
							  ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, &t->ek);
	if (r == TSS2_RC_SUCCESS)
	{
		t->ek_persistent = 1;
		r = Esys_ReadPublic(t->ctx, t->ek, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
							&pub, NULL, NULL);
		if (r != TSS2_RC_SUCCESS)
			return tpm_error(err, errlen, "cannot read the EK's public area", r);
	}
	else if (!t->rsa)
	{
		snprintf(err, errlen, "no P-384 EK at its persistent handle 0x%08x (TPM error 0x%x, "
				 "%s); bcd creates only the RSA EK from its template", EK_P384_HANDLE,
				 (unsigned) r, Tss2_RC_Decode(r));
		return BC_EINVAL;
	}
	else
	{
		t->ek = ESYS_TR_NONE;
		memset(&sens, 0, sizeof(sens));
		if (bc_tpm_ek_template(BC_TPM_EK_L1_RSA2048, &tmpl) != BC_OK)
			return BC_EINVAL;
		r = Esys_CreatePrimary(t->ctx, ESYS_TR_RH_ENDORSEMENT, ESYS_TR_PASSWORD, ESYS_TR_NONE,
							   ESYS_TR_NONE, &sens, &tmpl, &outside, &pcrs, &t->ek, &pub,
							   NULL, NULL, NULL);
		if (r != TSS2_RC_SUCCESS)
			return tpm_error(err, errlen, "cannot create the RSA EK from its template", r);
	}
	rc = marshal_public(pub, &t->ek_pub);
	Esys_Free(pub);
	if (rc == BC_OK)
		rc = bc_tpm_public_parse(t->ek_pub.data, t->ek_pub.len, &parsed);
	if (rc == BC_OK && bc_tpm_check_ek(&parsed, &reason) != BC_OK)
	{
		snprintf(err, errlen, "the EK at 0x%08x is no endorsement key the tpm attestor takes "
				 "(%s)", t->rsa ? EK_RSA_HANDLE : EK_P384_HANDLE, reason);
		return BC_EINVAL;
	}
	if (rc != BC_OK)
		snprintf(err, errlen, "cannot marshal the EK's public area");
	return rc;
}

/* Connect and take the EK (tpm_esys.h). */
int
bcd_tpm_open(const char *tcti, const char *ek, bcd_tpm **out, char *err, size_t errlen)
{
	bcd_tpm    *t;
	TSS2_RC		r;
	int			rc;

	*out = NULL;
	if (strcmp(ek, BCD_TPM_EK_RSA) != 0 && strcmp(ek, BCD_TPM_EK_P384) != 0)
	{
		snprintf(err, errlen, "unknown EK \"%s\" (rsa or p384)", ek);
		return BC_EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (t == NULL)
		return BC_ENOMEM;
	t->ek = ESYS_TR_NONE;
	t->ak = ESYS_TR_NONE;
	r = Tss2_TctiLdr_Initialize(tcti, &t->tcti);
	if (r != TSS2_RC_SUCCESS)
	{
		free(t);
		return tpm_error(err, errlen, "cannot open the TCTI", r);
	}
	r = Esys_Initialize(&t->ctx, t->tcti, NULL);
	if (r != TSS2_RC_SUCCESS)
	{
		Tss2_TctiLdr_Finalize(&t->tcti);
		free(t);
		return tpm_error(err, errlen, "cannot start ESAPI on the TCTI", r);
	}
	rc = load_ek(t, ek, err, errlen);
	if (rc != BC_OK)
	{
		bcd_tpm_close(t);
		return rc;
	}
	*out = t;
	return BC_OK;
}

/* Flush and close (tpm_esys.h). */
void
bcd_tpm_close(bcd_tpm *t)
{
	if (t == NULL)
		return;
	if (t->ctx != NULL)
	{
		if (t->ak != ESYS_TR_NONE)
			Esys_FlushContext(t->ctx, t->ak);
		if (t->ek != ESYS_TR_NONE)
		{
			if (t->ek_persistent)
				Esys_TR_Close(t->ctx, &t->ek);
			else
				Esys_FlushContext(t->ctx, t->ek);
		}
		Esys_Finalize(&t->ctx);
	}
	if (t->tcti != NULL)
		Tss2_TctiLdr_Finalize(&t->tcti);
	free(t);
}

const bcd_tpm_bytes *
bcd_tpm_ek_pub(const bcd_tpm *t)
{
	return &t->ek_pub;
}

/* The largest NV read the TPM takes at once. */
static uint16_t
nv_chunk(bcd_tpm *t)
{
	TPMS_CAPABILITY_DATA *cap = NULL;
	uint16_t	chunk = NV_CHUNK_DEFAULT;

	if (Esys_GetCapability(t->ctx, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
						   TPM2_CAP_TPM_PROPERTIES, TPM2_PT_NV_BUFFER_MAX, 1, NULL,
						   &cap) == TSS2_RC_SUCCESS &&
		cap->data.tpmProperties.count == 1 &&
		cap->data.tpmProperties.tpmProperty[0].property == TPM2_PT_NV_BUFFER_MAX &&
		cap->data.tpmProperties.tpmProperty[0].value > 0 &&
		cap->data.tpmProperties.tpmProperty[0].value < NV_CHUNK_DEFAULT)
		chunk = (uint16_t) cap->data.tpmProperties.tpmProperty[0].value;
	Esys_Free(cap);
	return chunk;
}

/* Read NV index handle whole into buf (at most cap bytes); 0 on success. */
static int
nv_read_all(bcd_tpm *t, TPM2_HANDLE handle, uint16_t chunk, unsigned char *buf,
			size_t cap, size_t *len)
{
	ESYS_TR		nv = ESYS_TR_NONE;
	TPM2B_NV_PUBLIC *pub = NULL;
	TPM2B_MAX_NV_BUFFER *data = NULL;
	ESYS_TR		auth;
	uint16_t	size;
	uint16_t	off = 0;
	int			rc = -1;

	*len = 0;
	if (Esys_TR_FromTPMPublic(t->ctx, handle, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
							  &nv) != TSS2_RC_SUCCESS)
		return -1;
	if (Esys_NV_ReadPublic(t->ctx, nv, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, &pub,
						   NULL) != TSS2_RC_SUCCESS)
		goto out;
	size = pub->nvPublic.dataSize;
	if (size == 0 || size > cap)
		goto out;
	if (pub->nvPublic.attributes & TPMA_NV_AUTHREAD)
		auth = nv;
	else if (pub->nvPublic.attributes & TPMA_NV_OWNERREAD)
		auth = ESYS_TR_RH_OWNER;
	else
		goto out;
	while (off < size)
	{
		uint16_t	n = (uint16_t) (size - off) < chunk ? (uint16_t) (size - off) : chunk;

		if (Esys_NV_Read(t->ctx, auth, nv, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE,
						 n, off, &data) != TSS2_RC_SUCCESS || data->size != n)
			goto out;
		memcpy(buf + off, data->buffer, n);
		off = (uint16_t) (off + n);
		Esys_Free(data);
		data = NULL;
	}
	*len = size;
	rc = 0;
out:
	Esys_Free(data);
	Esys_Free(pub);
	Esys_TR_Close(t->ctx, &nv);
	return rc;
}

/* The EK's certificate from NV (tpm_esys.h). */
int
bcd_tpm_ek_cert(bcd_tpm *t, bcd_tpm_bytes *cert, char *err, size_t errlen)
{
	TPMS_CAPABILITY_DATA *cap = NULL;
	bc_tpm_public ek;
	EVP_PKEY   *ekkey = NULL;
	unsigned char buf[BC_TPM_EKCERT_MAX];
	uint16_t	chunk;
	size_t		len;
	uint32_t	i;
	TSS2_RC		r;
	int			rc;

	cert->len = 0;
	rc = bc_tpm_public_parse(t->ek_pub.data, t->ek_pub.len, &ek);
	if (rc == BC_OK)
		rc = bc_tpm_public_pkey(&ek, &ekkey);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "cannot read the EK's key");
		return rc;
	}
	r = Esys_GetCapability(t->ctx, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
						   TPM2_CAP_HANDLES, NV_EK_CERT_FIRST, TPM2_MAX_CAP_HANDLES, NULL, &cap);
	if (r != TSS2_RC_SUCCESS)
	{
		EVP_PKEY_free(ekkey);
		return tpm_error(err, errlen, "cannot list the NV indices", r);
	}
	chunk = nv_chunk(t);
	for (i = 0; i < cap->data.handles.count && cert->len == 0; i++)
	{
		TPM2_HANDLE h = cap->data.handles.handle[i];
		const unsigned char *p = buf;
		X509	   *x;

		if (h < NV_EK_CERT_FIRST || h > NV_EK_CERT_LAST ||
			nv_read_all(t, h, chunk, buf, sizeof(buf), &len) != 0)
			continue;
		/* One DER certificate, then NV padding: keep the certificate's bytes exactly. */
		x = d2i_X509(NULL, &p, (long) len);
		if (x != NULL && EVP_PKEY_eq(X509_get0_pubkey(x), ekkey) == 1)
		{
			cert->len = (size_t) (p - buf);
			memcpy(cert->data, buf, cert->len);
		}
		X509_free(x);
		ERR_clear_error();
	}
	Esys_Free(cap);
	EVP_PKEY_free(ekkey);
	return BC_OK;
}

/* Read dir/name (a marshalled TPM2B) into out; BC_OK, or BC_EINVAL when absent. */
static int
read_blob(const char *dir, const char *name, bcd_tpm_bytes *out)
{
	char	   *path = bcd_path_join(dir, name);
	char	   *data = NULL;
	size_t		len = 0;
	int			rc = path == NULL ? BC_ENOMEM : bcd_read_file(path, sizeof(out->data), &data, &len);

	if (rc == BC_OK)
	{
		memcpy(out->data, data, len);
		out->len = len;
	}
	free(data);
	free(path);
	return rc;
}

/* 1 when dir/name exists. */
static int
blob_exists(const char *dir, const char *name)
{
	char	   *path = bcd_path_join(dir, name);
	FILE	   *f = path != NULL ? fopen(path, "r") : NULL;

	if (f != NULL)
		fclose(f);
	free(path);
	return f != NULL;
}

/* Make the AK under the EK and save its blobs in dir. */
static int
create_ak(bcd_tpm *t, const char *dir, char *err, size_t errlen)
{
	TPM2B_SENSITIVE_CREATE sens;
	TPM2B_PUBLIC tmpl;
	TPM2B_DATA	outside = {.size = 0};
	TPML_PCR_SELECTION pcrs = {.count = 0};
	TPM2B_PUBLIC *pub = NULL;
	TPM2B_PRIVATE *priv = NULL;
	bcd_tpm_bytes pb;
	unsigned char privbuf[sizeof(TPM2B_PRIVATE)];
	size_t		privlen = 0;
	ESYS_TR		sess;
	TSS2_RC		r;
	int			rc;

	memset(&sens, 0, sizeof(sens));
	ak_template(&tmpl);
	rc = ek_session(t, &sess, err, errlen);
	if (rc != BC_OK)
		return rc;
	r = Esys_Create(t->ctx, t->ek, sess, ESYS_TR_NONE, ESYS_TR_NONE, &sens, &tmpl, &outside,
					&pcrs, &priv, &pub, NULL, NULL, NULL);
	end_session(t, sess);
	if (r != TSS2_RC_SUCCESS)
		return tpm_error(err, errlen, "cannot create the AK under the EK", r);
	rc = marshal_public(pub, &pb);
	if (rc == BC_OK &&
		Tss2_MU_TPM2B_PRIVATE_Marshal(priv, privbuf, sizeof(privbuf), &privlen) != TSS2_RC_SUCCESS)
		rc = BC_EINVAL;
	/* The private blob first: a lone public blob is no AK. */
	if (rc == BC_OK)
		rc = bcd_write_file_atomic(dir, "tpm-ak.priv", privbuf, privlen, 0600);
	if (rc == BC_OK)
		rc = bcd_write_file_atomic(dir, "tpm-ak.pub", pb.data, pb.len, 0644);
	if (rc != BC_OK)
		snprintf(err, errlen, "cannot save the AK's blobs in %s", dir);
	Esys_Free(pub);
	Esys_Free(priv);
	return rc;
}

/* The AK, loaded (tpm_esys.h). */
int
bcd_tpm_ak(bcd_tpm *t, const char *dir, bcd_tpm_bytes *pub_out, char *err, size_t errlen)
{
	bcd_tpm_bytes pb;
	bcd_tpm_bytes vb;
	TPM2B_PUBLIC pub;
	TPM2B_PRIVATE priv;
	size_t		off;
	ESYS_TR		sess;
	TSS2_RC		r;
	int			have_pub = blob_exists(dir, "tpm-ak.pub");
	int			have_priv = blob_exists(dir, "tpm-ak.priv");
	int			rc;

	if (t->ak != ESYS_TR_NONE)
	{
		Esys_FlushContext(t->ctx, t->ak);
		t->ak = ESYS_TR_NONE;
	}
	if (!have_pub || !have_priv)
	{
		if (have_pub != have_priv)
		{
			snprintf(err, errlen, "%s holds only half of the AK (tpm-ak.pub, tpm-ak.priv); "
					 "remove both to make a new AK (the node then joins again)", dir);
			return BC_EINVAL;
		}
		rc = create_ak(t, dir, err, errlen);
		if (rc != BC_OK)
			return rc;
	}
	rc = read_blob(dir, "tpm-ak.pub", &pb);
	if (rc == BC_OK)
		rc = read_blob(dir, "tpm-ak.priv", &vb);
	off = 0;
	memset(&pub, 0, sizeof(pub));
	memset(&priv, 0, sizeof(priv));
	if (rc == BC_OK &&
		(Tss2_MU_TPM2B_PUBLIC_Unmarshal(pb.data, pb.len, &off, &pub) != TSS2_RC_SUCCESS ||
		 off != pb.len))
		rc = BC_EINVAL;
	off = 0;
	if (rc == BC_OK &&
		(Tss2_MU_TPM2B_PRIVATE_Unmarshal(vb.data, vb.len, &off, &priv) != TSS2_RC_SUCCESS ||
		 off != vb.len))
		rc = BC_EINVAL;
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "cannot read the AK's blobs %s/tpm-ak.pub and tpm-ak.priv", dir);
		return rc;
	}
	rc = ek_session(t, &sess, err, errlen);
	if (rc != BC_OK)
		return rc;
	r = Esys_Load(t->ctx, t->ek, sess, ESYS_TR_NONE, ESYS_TR_NONE, &priv, &pub, &t->ak);
	end_session(t, sess);
	if (r != TSS2_RC_SUCCESS)
	{
		t->ak = ESYS_TR_NONE;
		return tpm_error(err, errlen, "the TPM does not load the AK in the state directory "
						 "under this EK (another TPM's, or another EK's?)", r);
	}
	memcpy(pub_out, &pb, sizeof(pb));
	return BC_OK;
}

/* Certify a tpm2-openssl key by the AK (tpm_esys.h). */
int
bcd_tpm_certify(bcd_tpm *t, const unsigned char *pub, size_t pub_len,
				const unsigned char *priv, size_t priv_len,
				bcd_tpm_bytes *attest, bcd_tpm_bytes *sig, char *err, size_t errlen)
{
	TPM2B_SENSITIVE_CREATE sens;
	TPM2B_PUBLIC tmpl;
	TPM2B_DATA	outside = {.size = 0};
	TPML_PCR_SELECTION pcrs = {.count = 0};
	TPM2B_DATA	qualifying = {.size = 0};
	TPMT_SIG_SCHEME scheme = {.scheme = TPM2_ALG_NULL};
	TPM2B_PUBLIC kpub;
	TPM2B_PRIVATE kpriv;
	TPM2B_ATTEST *info = NULL;
	TPMT_SIGNATURE *signature = NULL;
	ESYS_TR		primary = ESYS_TR_NONE;
	ESYS_TR		key = ESYS_TR_NONE;
	size_t		off = 0;
	TSS2_RC		r = TSS2_RC_SUCCESS;
	int			rsa;
	int			rc = BC_EINVAL;

	if (t->ak == ESYS_TR_NONE)
	{
		snprintf(err, errlen, "no AK loaded");
		return BC_EINVAL;
	}
	memset(&kpub, 0, sizeof(kpub));
	memset(&kpriv, 0, sizeof(kpriv));
	if (Tss2_MU_TPM2B_PUBLIC_Unmarshal(pub, pub_len, &off, &kpub) != TSS2_RC_SUCCESS ||
		off != pub_len)
	{
		snprintf(err, errlen, "the node key's TPM2B_PUBLIC does not unmarshal");
		return BC_EINVAL;
	}
	off = 0;
	if (Tss2_MU_TPM2B_PRIVATE_Unmarshal(priv, priv_len, &off, &kpriv) != TSS2_RC_SUCCESS ||
		off != priv_len)
	{
		snprintf(err, errlen, "the node key's TPM2B_PRIVATE does not unmarshal");
		return BC_EINVAL;
	}
	memset(&sens, 0, sizeof(sens));
	/* The provider's ECC primary, or its RSA one on a TPM without ECC. */
	for (rsa = 0; rsa <= 1 && key == ESYS_TR_NONE; rsa++)
	{
		provider_primary_template(&tmpl, rsa);
		r = Esys_CreatePrimary(t->ctx, ESYS_TR_RH_OWNER, ESYS_TR_PASSWORD, ESYS_TR_NONE,
							   ESYS_TR_NONE, &sens, &tmpl, &outside, &pcrs, &primary, NULL,
							   NULL, NULL, NULL);
		if (r != TSS2_RC_SUCCESS)
			continue;
		r = Esys_Load(t->ctx, primary, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE,
					  &kpriv, &kpub, &key);
		if (r != TSS2_RC_SUCCESS)
			key = ESYS_TR_NONE;
		Esys_FlushContext(t->ctx, primary);
		primary = ESYS_TR_NONE;
	}
	if (key == ESYS_TR_NONE)
		return tpm_error(err, errlen, "the TPM does not load the node key under the owner "
						 "primary of tpm2-openssl", r);
	r = Esys_Certify(t->ctx, key, t->ak, ESYS_TR_PASSWORD, ESYS_TR_PASSWORD, ESYS_TR_NONE,
					 &qualifying, &scheme, &info, &signature);
	Esys_FlushContext(t->ctx, key);
	if (r != TSS2_RC_SUCCESS)
		return tpm_error(err, errlen, "TPM2_Certify of the node key by the AK failed", r);
	rc = copy_attest(info, attest);
	if (rc == BC_OK)
		rc = marshal_signature(signature, sig);
	if (rc != BC_OK)
		snprintf(err, errlen, "cannot marshal the certification");
	Esys_Free(info);
	Esys_Free(signature);
	return rc;
}

/* Quote by the AK (tpm_esys.h). */
int
bcd_tpm_quote(bcd_tpm *t, const TPML_PCR_SELECTION *sel, const unsigned char *nonce,
			  size_t nonce_len, bcd_tpm_bytes *attest, bcd_tpm_bytes *sig,
			  char *err, size_t errlen)
{
	TPM2B_DATA	qualifying;
	TPMT_SIG_SCHEME scheme = {.scheme = TPM2_ALG_NULL};
	TPM2B_ATTEST *quoted = NULL;
	TPMT_SIGNATURE *signature = NULL;
	TSS2_RC		r;
	int			rc;

	if (t->ak == ESYS_TR_NONE || nonce_len > sizeof(qualifying.buffer))
	{
		snprintf(err, errlen, "no AK loaded, or a nonce too long");
		return BC_EINVAL;
	}
	qualifying.size = (UINT16) nonce_len;
	memcpy(qualifying.buffer, nonce, nonce_len);
	r = Esys_Quote(t->ctx, t->ak, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &qualifying,
				   &scheme, sel, &quoted, &signature);
	if (r != TSS2_RC_SUCCESS)
		return tpm_error(err, errlen, "TPM2_Quote by the AK failed", r);
	rc = copy_attest(quoted, attest);
	if (rc == BC_OK)
		rc = marshal_signature(signature, sig);
	if (rc != BC_OK)
		snprintf(err, errlen, "cannot marshal the quote");
	Esys_Free(quoted);
	Esys_Free(signature);
	return rc;
}

/* The PCRs of bank in pcrs (bit i: PCR i) read, ascending (tpm_esys.h). */
int
bcd_tpm_pcr_read(bcd_tpm *t, uint16_t bank, uint32_t pcrs, unsigned char values[24][64],
				 size_t *digest_len, char *err, size_t errlen)
{
	size_t		dsz = bc_tpm_digest_size(bank);
	uint32_t	left = pcrs & 0xffffffu;

	*digest_len = dsz;
	if (dsz == 0 || dsz > 64 || left == 0)
	{
		snprintf(err, errlen, "no PCR selected, or an unknown bank 0x%04x", bank);
		return BC_EINVAL;
	}
	/* TPM2_PCR_Read answers at most 8 digests a call: ask again for what is left. */
	for (int round = 0; left != 0 && round < 24; round++)
	{
		TPML_PCR_SELECTION sel = {.count = 1};
		UINT32		counter = 0;
		TPML_PCR_SELECTION *got_sel = NULL;
		TPML_DIGEST *got = NULL;
		uint32_t	got_mask;
		TSS2_RC		r;
		uint32_t	k = 0;

		sel.pcrSelections[0].hash = bank;
		sel.pcrSelections[0].sizeofSelect = 3;
		for (int i = 0; i < 24; i++)
			if (left & (1u << i))
				sel.pcrSelections[0].pcrSelect[i / 8] |= (uint8_t) (1u << (i % 8));
		r = Esys_PCR_Read(t->ctx, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, &sel, &counter,
						  &got_sel, &got);
		if (r != TSS2_RC_SUCCESS)
			return tpm_error(err, errlen, "TPM2_PCR_Read failed", r);
		got_mask = 0;
		if (got_sel->count == 1 && got_sel->pcrSelections[0].hash == bank)
			for (int i = 0; i < 24 && i / 8 < got_sel->pcrSelections[0].sizeofSelect; i++)
				if (got_sel->pcrSelections[0].pcrSelect[i / 8] & (1u << (i % 8)))
					got_mask |= 1u << i;
		/* the values come in ascending order of the PCRs read */
		for (int i = 0; i < 24; i++)
			if (got_mask & (1u << i))
			{
				if (k >= got->count || got->digests[k].size != dsz || !(left & (1u << i)))
				{
					Esys_Free(got_sel);
					Esys_Free(got);
					snprintf(err, errlen, "TPM2_PCR_Read answered other PCRs than asked");
					return BC_ECRYPTO;
				}
				memcpy(values[i], got->digests[k].buffer, dsz);
				k++;
			}
		Esys_Free(got_sel);
		Esys_Free(got);
		if (got_mask == 0)
		{
			snprintf(err, errlen, "the TPM has no bank 0x%04x for the PCRs asked", bank);
			return BC_EINVAL;
		}
		left &= ~got_mask;
	}
	return left == 0 ? BC_OK : BC_ECRYPTO;
}

/* ActivateCredential (tpm_esys.h). */
int
bcd_tpm_activate(bcd_tpm *t, const unsigned char *blob, size_t blob_len,
				 const unsigned char *enc, size_t enc_len, unsigned char *secret,
				 size_t *secret_len, char *err, size_t errlen)
{
	TPM2B_ID_OBJECT cred;
	TPM2B_ENCRYPTED_SECRET es;
	TPM2B_DIGEST *out = NULL;
	ESYS_TR		sess;
	size_t		off = 0;
	TSS2_RC		r;
	int			rc;

	*secret_len = 0;
	if (t->ak == ESYS_TR_NONE)
	{
		snprintf(err, errlen, "no AK loaded");
		return BC_EINVAL;
	}
	memset(&cred, 0, sizeof(cred));
	memset(&es, 0, sizeof(es));
	if (Tss2_MU_TPM2B_ID_OBJECT_Unmarshal(blob, blob_len, &off, &cred) != TSS2_RC_SUCCESS ||
		off != blob_len)
	{
		snprintf(err, errlen, "the challenge's credentialBlob is no TPM2B_ID_OBJECT");
		return BC_EINVAL;
	}
	off = 0;
	if (Tss2_MU_TPM2B_ENCRYPTED_SECRET_Unmarshal(enc, enc_len, &off, &es) != TSS2_RC_SUCCESS ||
		off != enc_len)
	{
		snprintf(err, errlen, "the challenge's encryptedSecret is no TPM2B_ENCRYPTED_SECRET");
		return BC_EINVAL;
	}
	rc = ek_session(t, &sess, err, errlen);
	if (rc != BC_OK)
		return rc;
	r = Esys_ActivateCredential(t->ctx, t->ak, t->ek, ESYS_TR_PASSWORD, sess, ESYS_TR_NONE,
								&cred, &es, &out);
	end_session(t, sess);
	if (r != TSS2_RC_SUCCESS)
		return tpm_error(err, errlen, "TPM2_ActivateCredential refused the challenge (not "
						 "made for this AK under this EK?)", r);
	if (out->size > 64)
		rc = BC_ETOOBIG;
	else
	{
		memcpy(secret, out->buffer, out->size);
		*secret_len = out->size;
	}
	Esys_Free(out);
	return rc;
}

/* A PCR bank's name as a TPM hash algorithm, or 0. */
static uint16_t
bank_alg(const char *name, size_t n)
{
	static const struct
	{
		const char *name;
		uint16_t	alg;
	}			banks[] = {
		{"sha1", TPM2_ALG_SHA1}, {"sha256", TPM2_ALG_SHA256},
		{"sha384", TPM2_ALG_SHA384}, {"sha512", TPM2_ALG_SHA512}
	};
	size_t		i;

	for (i = 0; i < sizeof(banks) / sizeof(banks[0]); i++)
		if (strlen(banks[i].name) == n && strncmp(banks[i].name, name, n) == 0)
			return banks[i].alg;
	return 0;
}

/* Parse a PCR selection (tpm_esys.h). */
int
bcd_tpm_parse_pcrs(const char *text, TPML_PCR_SELECTION *sel)
{
	const char *p = text;

	memset(sel, 0, sizeof(*sel));
	while (*p != '\0')
	{
		const char *colon = strchr(p, ':');
		TPMS_PCR_SELECTION *s;
		uint16_t	alg;

		if (colon == NULL || sel->count >= TPM2_NUM_PCR_BANKS ||
			(alg = bank_alg(p, (size_t) (colon - p))) == 0)
			return -1;
		s = &sel->pcrSelections[sel->count++];
		s->hash = alg;
		s->sizeofSelect = 3;
		p = colon + 1;
		for (;;)
		{
			char	   *end;
			long		lo = strtol(p, &end, 10);
			long		hi = lo;

			if (end == p || lo < 0 || lo > 23)
				return -1;
			p = end;
			if (*p == '-')
			{
				hi = strtol(p + 1, &end, 10);
				if (end == p + 1 || hi < lo || hi > 23)
					return -1;
				p = end;
			}
			for (; lo <= hi; lo++)
				s->pcrSelect[lo / 8] |= (uint8_t) (1u << (lo % 8));
			if (*p != ',')
				break;
			p++;
		}
		if (*p == '+')
			p++;
		else if (*p != '\0')
			return -1;
	}
	return sel->count > 0 ? 0 : -1;
}
