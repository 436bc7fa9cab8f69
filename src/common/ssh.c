/*
 * ssh.c: OpenSSH public keys, certificates and KRLs (bc_ssh.h): the RFC 4251
 * encodings of PROTOCOL.certkeys and PROTOCOL.krl.  OpenSSL does every hash,
 * signature and curve check; this file only lays out and reads the fields.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "bc_ssh.h"

#define CERT_SUFFIX "-cert-v01@openssh.com"
#define NONCE_LEN 32
#define KRL_MAGIC 0x5353484b524c0a00ULL

/* The key types we certify, parse and accept as a CA. */
static const struct key_type
{
	const char *name;			/* SSH key type */
	const char *curve;			/* SSH curve name, NULL for Ed25519 */
	const char *group;			/* OpenSSL group name */
	size_t		field;			/* bytes of a coordinate (EC) or the key (Ed25519) */
}			key_types[] = {
	{"ssh-ed25519", NULL, NULL, 32},
	{"ecdsa-sha2-nistp256", "nistp256", "prime256v1", 32},
	{"ecdsa-sha2-nistp384", "nistp384", "secp384r1", 48},
	{"ecdsa-sha2-nistp521", "nistp521", "secp521r1", 66},
};
#define N_KEY_TYPES (sizeof(key_types) / sizeof(key_types[0]))

/* ------------------------------------------------------------ writer */

typedef struct wbuf
{
	unsigned char *p;
	size_t		len,
				cap,
				max;
	int			err;
} wbuf;

/* Make room for n more bytes; sets err on overflow of max or allocation. */
static int
w_room(wbuf *w, size_t n)
{
	unsigned char *np;
	size_t		cap;

	if (w->err)
		return 0;
	if (n > w->max || w->len > w->max - n)
	{
		w->err = BC_ETOOBIG;
		return 0;
	}
	if (w->len + n <= w->cap)
		return 1;
	cap = w->cap ? w->cap : 256;
	while (cap < w->len + n)
		cap *= 2;
	np = realloc(w->p, cap);
	if (np == NULL)
	{
		w->err = BC_ENOMEM;
		return 0;
	}
	w->p = np;
	w->cap = cap;
	return 1;
}

/* Append n raw bytes. */
static void
w_raw(wbuf *w, const void *d, size_t n)
{
	if (n && w_room(w, n))
	{
		memcpy(w->p + w->len, d, n);
		w->len += n;
	}
}

/* Append a byte. */
static void
w_u8(wbuf *w, unsigned v)
{
	unsigned char b = (unsigned char) v;

	w_raw(w, &b, 1);
}

/* Append a big-endian uint32. */
static void
w_u32(wbuf *w, uint32_t v)
{
	unsigned char b[4] = {v >> 24, v >> 16, v >> 8, v};

	w_raw(w, b, 4);
}

/* Append a big-endian uint64. */
static void
w_u64(wbuf *w, uint64_t v)
{
	w_u32(w, (uint32_t) (v >> 32));
	w_u32(w, (uint32_t) v);
}

/* Append an RFC 4251 string. */
static void
w_str(wbuf *w, const void *d, size_t n)
{
	if (n > UINT32_MAX)
	{
		w->err = BC_ETOOBIG;
		return;
	}
	w_u32(w, (uint32_t) n);
	w_raw(w, d, n);
}

/* Append a C string as an RFC 4251 string. */
static void
w_cstr(wbuf *w, const char *s)
{
	w_str(w, s, strlen(s));
}

/* ------------------------------------------------------------ reader */

typedef struct rbuf
{
	const unsigned char *p;
	size_t		len;
	int			err;
} rbuf;

/* Take n bytes; NULL (and err) when fewer are left. */
static const unsigned char *
r_take(rbuf *r, size_t n)
{
	const unsigned char *p;

	if (r->err || n > r->len)
	{
		r->err = 1;
		return NULL;
	}
	p = r->p;
	r->p += n;
	r->len -= n;
	return p;
}

/* A big-endian uint32 (0 and err when short). */
static uint32_t
r_u32(rbuf *r)
{
	const unsigned char *p = r_take(r, 4);

	if (p == NULL)
		return 0;
	return ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16) | ((uint32_t) p[2] << 8) | p[3];
}

/* A big-endian uint64. */
static uint64_t
r_u64(rbuf *r)
{
	uint64_t	hi = r_u32(r);

	return (hi << 32) | r_u32(r);
}

/* An RFC 4251 string: its bytes in *d, its length in *n. */
static int
r_str(rbuf *r, const unsigned char **d, size_t *n)
{
	uint32_t	len = r_u32(r);
	const unsigned char *p = r_take(r, len);

	if (p == NULL)
	{
		*d = NULL;
		*n = 0;
		return 0;
	}
	*d = p;
	*n = len;
	return 1;
}

/* 1 when the span (d, n) equals the C string s. */
static int
span_is(const unsigned char *d, size_t n, const char *s)
{
	return d != NULL && strlen(s) == n && memcmp(d, s, n) == 0;
}

/* The key type named (d, n), or NULL. */
static const struct key_type *
type_by_name(const unsigned char *d, size_t n)
{
	for (size_t i = 0; i < N_KEY_TYPES; i++)
		if (span_is(d, n, key_types[i].name))
			return &key_types[i];
	return NULL;
}

/* ------------------------------------------------------------ public keys */

/* Build an EVP_PKEY from the key fields after the type (r at them); checks the point. */
static int
read_key_fields(rbuf *r, const struct key_type *kt, EVP_PKEY **pk)
{
	const unsigned char *d,
			   *q;
	size_t		n,
				qn;
	EVP_PKEY   *key = NULL;

	if (kt->curve == NULL)
	{
		if (!r_str(r, &d, &n) || n != kt->field)
			return BC_EINVAL;
		if (pk)
		{
			key = EVP_PKEY_new_raw_public_key_ex(NULL, "ED25519", NULL, d, n);
			if (key == NULL)
				return BC_EINVAL;
		}
	}
	else
	{
		if (!r_str(r, &d, &n) || !span_is(d, n, kt->curve))
			return BC_EINVAL;
		if (!r_str(r, &q, &qn) || qn != 2 * kt->field + 1 || q[0] != 0x04)
			return BC_EINVAL;
		if (pk)
		{
			OSSL_PARAM	params[3];
			EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
			int			ok;

			params[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
														 (char *) kt->group, 0);
			params[1] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY,
														  (void *) q, qn);
			params[2] = OSSL_PARAM_construct_end();
			/* fromdata decodes the point with EC_POINT_oct2point: off-curve refused. */
			ok = ctx != NULL && EVP_PKEY_fromdata_init(ctx) == 1 &&
				EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) == 1;
			EVP_PKEY_CTX_free(ctx);
			if (!ok)
			{
				EVP_PKEY_free(key);
				return BC_EINVAL;
			}
			ctx = EVP_PKEY_CTX_new_from_pkey(NULL, key, NULL);
			ok = ctx != NULL && EVP_PKEY_public_check(ctx) == 1;
			EVP_PKEY_CTX_free(ctx);
			if (!ok)
			{
				EVP_PKEY_free(key);
				return BC_EINVAL;
			}
		}
	}
	if (pk)
		*pk = key;
	return BC_OK;
}

/* The wire blob of pk: EC P-256/384/521, Ed25519. */
/*
 * The public half of key as a plain key of the default provider: an
 * engine's key (a PKCS#11 token's, through libp11) answers no parameters,
 * its public half encoded and decoded does (as keys.c reads it); NULL when
 * it cannot be had.
 */
static EVP_PKEY *
public_half(EVP_PKEY *key)
{
	unsigned char *der = NULL;
	const unsigned char *p;
	int			n = i2d_PUBKEY(key, &der);
	EVP_PKEY   *pub = NULL;

	p = der;
	if (n > 0)
		pub = d2i_PUBKEY(NULL, &p, n);
	OPENSSL_free(der);
	return pub;
}

int
bc_ssh_pubkey_blob(EVP_PKEY *pk, unsigned char **blob, size_t *len)
{
	wbuf		w = {.max = BC_SSH_BLOB_MAX};

	*blob = NULL;
	*len = 0;
	if (pk == NULL)
		return BC_EINVAL;
	if (EVP_PKEY_get0_provider(pk) == NULL)
	{
		/* a legacy (engine) key: its public half, which a provider holds */
		EVP_PKEY   *pub = public_half(pk);
		int			rc;

		ERR_clear_error();
		if (pub == NULL || EVP_PKEY_get0_provider(pub) == NULL)
		{
			EVP_PKEY_free(pub);
			return BC_ECRYPTO;
		}
		rc = bc_ssh_pubkey_blob(pub, blob, len);
		EVP_PKEY_free(pub);
		return rc;
	}
	if (EVP_PKEY_is_a(pk, "ED25519"))
	{
		unsigned char raw[32];
		size_t		rn = sizeof(raw);

		if (EVP_PKEY_get_raw_public_key(pk, raw, &rn) != 1 || rn != 32)
			return BC_ECRYPTO;
		w_cstr(&w, "ssh-ed25519");
		w_str(&w, raw, rn);
	}
	else if (EVP_PKEY_is_a(pk, "EC"))
	{
		char		group[64];
		unsigned char q[1 + 2 * 66];
		size_t		qn = 0;
		const struct key_type *kt = NULL;

		if (EVP_PKEY_get_utf8_string_param(pk, OSSL_PKEY_PARAM_GROUP_NAME, group,
										   sizeof(group), NULL) != 1)
			return BC_EINVAL;
		for (size_t i = 0; i < N_KEY_TYPES; i++)
			if (key_types[i].group && strcmp(key_types[i].group, group) == 0)
				kt = &key_types[i];
		if (kt == NULL)
			return BC_EINVAL;
		if (EVP_PKEY_get_octet_string_param(pk, OSSL_PKEY_PARAM_PUB_KEY, q, sizeof(q), &qn) != 1)
			return BC_ECRYPTO;
		if (qn != 2 * kt->field + 1 || q[0] != 0x04)
			return BC_EINVAL;	/* a compressed point: not what SSH carries */
		w_cstr(&w, kt->name);
		w_cstr(&w, kt->curve);
		w_str(&w, q, qn);
	}
	else
		return BC_EINVAL;
	if (w.err)
	{
		free(w.p);
		return w.err;
	}
	*blob = w.p;
	*len = w.len;
	return BC_OK;
}

/* The key of a wire blob: on-curve via EVP_PKEY_fromdata; exact length. */
int
bc_ssh_pubkey_parse(const unsigned char *blob, size_t len, EVP_PKEY **pk)
{
	rbuf		r = {blob, len, 0};
	const unsigned char *d;
	size_t		n;
	const struct key_type *kt;
	EVP_PKEY   *key = NULL;
	int			rc;

	if (pk)
		*pk = NULL;
	if (blob == NULL || len > BC_SSH_BLOB_MAX)
		return BC_EINVAL;
	if (!r_str(&r, &d, &n) || (kt = type_by_name(d, n)) == NULL)
		return BC_EINVAL;
	/* the key is always built: that is the point's check, even when the caller wants no key */
	rc = read_key_fields(&r, kt, &key);
	if (rc != BC_OK)
		return rc;
	if (r.len != 0)
	{
		EVP_PKEY_free(key);
		return BC_EINVAL;
	}
	if (pk)
		*pk = key;
	else
		EVP_PKEY_free(key);
	return BC_OK;
}

/* The key type of a blob (its first string), NUL-terminated into out. */
static int
blob_type(const unsigned char *blob, size_t len, char *out, size_t outcap)
{
	rbuf		r = {blob, len, 0};
	const unsigned char *d;
	size_t		n;

	if (!r_str(&r, &d, &n) || n == 0 || n >= outcap || memchr(d, '\0', n))
		return BC_EINVAL;
	memcpy(out, d, n);
	out[n] = '\0';
	return BC_OK;
}

/* 1 when the key type name is a certificate type. */
static int
is_cert_type(const char *t)
{
	size_t		n = strlen(t),
				s = strlen(CERT_SUFFIX);

	return n > s && strcmp(t + n - s, CERT_SUFFIX) == 0;
}

/* The blob of a "type b64 [comment]" line; type must match the blob's. */
int
bc_ssh_pubkey_line_parse(const char *line, size_t len, unsigned char **blob, size_t *blob_len)
{
	size_t		i = 0,
				ts,
				te,
				bs,
				be;
	unsigned char *out;
	size_t		outlen;
	char		type[128];
	int			rc;

	*blob = NULL;
	*blob_len = 0;
	if (line == NULL || len > 4 * BC_SSH_CERT_MAX)
		return BC_EINVAL;
	while (i < len && (line[i] == ' ' || line[i] == '\t'))
		i++;
	ts = i;
	while (i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '\n' && line[i] != '\r' && line[i] != '\0')
		i++;
	te = i;
	while (i < len && (line[i] == ' ' || line[i] == '\t'))
		i++;
	bs = i;
	while (i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '\n' && line[i] != '\r' && line[i] != '\0')
		i++;
	be = i;
	/* the rest: an optional comment up to an optional end of line, no NUL */
	for (; i < len; i++)
	{
		if (line[i] == '\0')
			return BC_EINVAL;
		if (line[i] == '\n' || line[i] == '\r')
			break;
	}
	for (; i < len; i++)
		if (line[i] != '\n' && line[i] != '\r')
			return BC_EINVAL;	/* one line only */
	if (te == ts || be == bs || te - ts >= sizeof(type))
		return BC_EINVAL;
	out = malloc(BC_SSH_CERT_MAX);
	if (out == NULL)
		return BC_ENOMEM;
	if (bc_b64_decode(line + bs, be - bs, out, BC_SSH_CERT_MAX, &outlen) != BC_OK ||
		blob_type(out, outlen, type, sizeof(type)) != BC_OK ||
		strlen(type) != te - ts || memcmp(type, line + ts, te - ts) != 0)
	{
		free(out);
		return BC_EINVAL;
	}
	if (is_cert_type(type))
	{
		bc_ssh_cert_info info;

		rc = bc_ssh_cert_parse(out, outlen, &info);
		bc_ssh_cert_info_free(&info);
	}
	else
		rc = bc_ssh_pubkey_parse(out, outlen, NULL);
	if (rc != BC_OK)
	{
		free(out);
		return BC_EINVAL;
	}
	*blob = out;
	*blob_len = outlen;
	return BC_OK;
}

/* "type b64 [comment]\n", malloc()ed; NULL on a malformed blob. */
char *
bc_ssh_pubkey_line(const unsigned char *blob, size_t len, const char *comment)
{
	char		type[128];
	char	   *out;
	size_t		tn,
				bn,
				cn,
				o;

	if (blob == NULL || len > BC_SSH_CERT_MAX || blob_type(blob, len, type, sizeof(type)) != BC_OK)
		return NULL;
	if (comment && (strchr(comment, '\n') || strchr(comment, '\r')))
		return NULL;
	tn = strlen(type);
	bn = bc_b64_encoded_len(len);
	cn = comment && *comment ? strlen(comment) : 0;
	out = malloc(tn + 1 + bn + (cn ? cn + 1 : 0) + 2);
	if (out == NULL)
		return NULL;
	memcpy(out, type, tn);
	out[tn] = ' ';
	o = tn + 1 + bc_b64_encode(blob, len, out + tn + 1);
	if (cn)
	{
		out[o++] = ' ';
		memcpy(out + o, comment, cn);
		o += cn;
	}
	out[o++] = '\n';
	out[o] = '\0';
	return out;
}

/* "SHA256:<base64 without padding>", as ssh-keygen -l prints it. */
int
bc_ssh_fingerprint(const unsigned char *blob, size_t len, char out[64])
{
	unsigned char h[BC_SHA256_LEN];
	char		b[48];
	size_t		n;

	out[0] = '\0';
	if (blob == NULL || len > BC_SSH_CERT_MAX)
		return BC_EINVAL;
	if (bc_sha256(blob, len, h) != BC_OK)
		return BC_ECRYPTO;
	n = bc_b64_encode(h, sizeof(h), b);
	while (n > 0 && b[n - 1] == '=')
		n--;
	memcpy(out, "SHA256:", 7);
	memcpy(out + 7, b, n);
	out[7 + n] = '\0';
	return BC_OK;
}

/* ------------------------------------------------------------ certificates */

/* The names of BC_SSH_EXT_* bits. */
static const struct
{
	unsigned	bit;
	const char *name;
}			ext_names[] = {
	{BC_SSH_EXT_X11, "permit-X11-forwarding"},
	{BC_SSH_EXT_AGENT, "permit-agent-forwarding"},
	{BC_SSH_EXT_PORT, "permit-port-forwarding"},
	{BC_SSH_EXT_PTY, "permit-pty"},
	{BC_SSH_EXT_USER_RC, "permit-user-rc"},
};
#define N_EXT (sizeof(ext_names) / sizeof(ext_names[0]))

/* One (name, value) of an options or extensions list; value NULL: empty flag. */
typedef struct named
{
	const char *name;
	const char *value;
} named;

/* qsort order of option names: memcmp of the names, as PROTOCOL.certkeys asks. */
static int
named_cmp(const void *a, const void *b)
{
	const char *x = ((const named *) a)->name,
			   *y = ((const named *) b)->name;
	size_t		xn = strlen(x),
				yn = strlen(y);
	int			c = memcmp(x, y, xn < yn ? xn : yn);

	return c ? c : (xn > yn) - (xn < yn);
}

/* Write n options sorted by name, each value double-wrapped: string(string(value)), flag: empty string. */
static void
w_options(wbuf *w, named *opts, size_t n)
{
	wbuf		in = {.max = BC_SSH_CERT_MAX};

	qsort(opts, n, sizeof(*opts), named_cmp);
	for (size_t i = 0; i < n; i++)
	{
		w_cstr(&in, opts[i].name);
		if (opts[i].value == NULL)
			w_str(&in, NULL, 0);
		else
		{
			w_u32(&in, (uint32_t) (4 + strlen(opts[i].value)));
			w_cstr(&in, opts[i].value);
		}
	}
	if (in.err)
		w->err = in.err;
	else
		w_str(w, in.p, in.len);
	free(in.p);
}

/* 1 when s is a principal we write: 1..255 bytes, no NUL, ',', whitespace, '*' or '?'. */
static int
principal_ok(const char *s)
{
	size_t		n;

	if (s == NULL)
		return 0;
	n = strlen(s);
	if (n == 0 || n > BC_SSH_PRINCIPAL_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c <= ' ' || c == 0x7f || c == ',' || c == '*' || c == '?')
			return 0;
	}
	return 1;
}

/* 1 when s is an option value we write: no control characters, at most 1024 bytes. */
static int
value_ok(const char *s)
{
	size_t		n = strlen(s);

	if (n == 0 || n > 1024)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char) s[i] < ' ' || s[i] == 0x7f)
			return 0;
	return 1;
}

/* Append the SSH signature of data by ca (ECDSA P-256): string(string type, string(mpint r, mpint s)). */
static int
w_signature(wbuf *w, EVP_PKEY *ca, const unsigned char *data, size_t n)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	char		props[128];
	unsigned char der[160];
	size_t		der_len = sizeof(der);
	const unsigned char *p = der;
	ECDSA_SIG  *esig = NULL;
	const BIGNUM *r,
			   *s;
	unsigned char mr[40],
				ms[40];
	int			lr,
				ls;
	wbuf		in = {.max = 512};
	int			rc = BC_ECRYPTO;

	if (md == NULL)
		return BC_ENOMEM;
	if (EVP_DigestSignInit_ex(md, NULL, "SHA256", bc_pkey_libctx(ca),
							  bc_pkey_sign_props(ca, props, sizeof(props)), ca, NULL) != 1)
		goto out;
	if (EVP_DigestSign(md, der, &der_len, data, n) != 1)
		goto out;
	esig = d2i_ECDSA_SIG(NULL, &p, (long) der_len);
	if (esig == NULL || p != der + der_len)
		goto out;
	ECDSA_SIG_get0(esig, &r, &s);
	/* BN_bn2mpi: u32 length + big-endian magnitude with a leading 0 when the top bit is set = SSH mpint */
	if (BN_num_bytes(r) > 32 || BN_num_bytes(s) > 32)
		goto out;
	lr = BN_bn2mpi(r, mr);
	ls = BN_bn2mpi(s, ms);
	if (lr < 4 || ls < 4)
		goto out;
	w_raw(&in, mr, (size_t) lr);
	w_raw(&in, ms, (size_t) ls);
	{
		wbuf		sig = {.max = 512};

		w_cstr(&sig, "ecdsa-sha2-nistp256");
		w_str(&sig, in.p, in.len);
		if (!sig.err && !in.err)
		{
			w_str(w, sig.p, sig.len);
			rc = w->err ? w->err : BC_OK;
		}
		free(sig.p);
	}
out:
	free(in.p);
	ECDSA_SIG_free(esig);
	EVP_MD_CTX_free(md);
	return rc;
}

/* A certificate signed by ca (ECDSA P-256). */
int
bc_ssh_cert_sign(const bc_ssh_cert_params *p, EVP_PKEY *ca, unsigned char **cert, size_t *len)
{
	wbuf		w = {.max = BC_SSH_CERT_MAX};
	wbuf		pr = {.max = BC_SSH_CERT_MAX};
	unsigned char nonce[NONCE_LEN];
	unsigned char *ca_blob = NULL;
	size_t		ca_len = 0;
	char		type[128];
	named		crit[2],
				ext[N_EXT];
	size_t		n_crit = 0,
				n_ext = 0;
	const unsigned char *d;
	size_t		n;
	int			rc;

	*cert = NULL;
	*len = 0;
	if (p == NULL || ca == NULL)
		return BC_EINVAL;
	if (p->type != BC_SSH_CERT_USER && p->type != BC_SSH_CERT_HOST)
		return BC_EINVAL;
	if (p->serial == 0 || p->valid_after >= p->valid_before)
		return BC_EINVAL;
	if (p->key_id == NULL || !value_ok(p->key_id) || strlen(p->key_id) > 255)
		return BC_EINVAL;		/* sshd logs it: no control characters */
	if (p->n_principals == 0 || p->n_principals > BC_SSH_PRINCIPALS_MAX || p->principals == NULL)
		return BC_EINVAL;
	for (size_t i = 0; i < p->n_principals; i++)
		if (!principal_ok(p->principals[i]))
			return BC_EINVAL;
	if (p->extensions & ~(unsigned) (BC_SSH_EXT_X11 | BC_SSH_EXT_AGENT | BC_SSH_EXT_PORT |
									 BC_SSH_EXT_PTY | BC_SSH_EXT_USER_RC))
		return BC_EINVAL;
	if (p->type == BC_SSH_CERT_HOST &&
		(p->force_command || p->source_address || p->extensions))
		return BC_EINVAL;		/* host certificates carry neither */
	if ((p->force_command && !value_ok(p->force_command)) ||
		(p->source_address && !value_ok(p->source_address)))
		return BC_EINVAL;
	if (bc_ssh_pubkey_parse(p->key_blob, p->key_blob_len, NULL) != BC_OK ||
		blob_type(p->key_blob, p->key_blob_len, type, sizeof(type) - strlen(CERT_SUFFIX)) != BC_OK)
		return BC_EINVAL;
	if (!bc_pkey_is_p256(ca))
		return BC_EINVAL;
	rc = bc_ssh_pubkey_blob(ca, &ca_blob, &ca_len);
	if (rc != BC_OK)
		return rc;
	if (RAND_bytes(nonce, sizeof(nonce)) != 1)
	{
		free(ca_blob);
		return BC_ECRYPTO;
	}
	strcat(type, CERT_SUFFIX);

	w_cstr(&w, type);
	w_str(&w, nonce, sizeof(nonce));
	/* the key's fields: the blob after its type string */
	d = p->key_blob + 4 + (strlen(type) - strlen(CERT_SUFFIX));
	n = p->key_blob_len - 4 - (strlen(type) - strlen(CERT_SUFFIX));
	w_raw(&w, d, n);
	w_u64(&w, p->serial);
	w_u32(&w, (uint32_t) p->type);
	w_cstr(&w, p->key_id);
	for (size_t i = 0; i < p->n_principals; i++)
		w_cstr(&pr, p->principals[i]);
	if (pr.err)
		w.err = pr.err;
	else
		w_str(&w, pr.p, pr.len);
	free(pr.p);
	w_u64(&w, p->valid_after);
	w_u64(&w, p->valid_before);
	if (p->force_command)
		crit[n_crit++] = (named) {"force-command", p->force_command};
	if (p->source_address)
		crit[n_crit++] = (named) {"source-address", p->source_address};
	w_options(&w, crit, n_crit);
	for (size_t i = 0; i < N_EXT; i++)
		if (p->extensions & ext_names[i].bit)
			ext[n_ext++] = (named) {ext_names[i].name, NULL};
	w_options(&w, ext, n_ext);
	w_str(&w, NULL, 0);			/* reserved */
	w_str(&w, ca_blob, ca_len);
	free(ca_blob);
	if (w.err)
	{
		free(w.p);
		return w.err;
	}
	rc = w_signature(&w, ca, w.p, w.len);
	if (rc != BC_OK)
	{
		free(w.p);
		return rc;
	}
	*cert = w.p;
	*len = w.len;
	return BC_OK;
}

/* Check an options or extensions list: names strictly ascending, each value a string of strings. */
static int
options_ok(const unsigned char *d, size_t n, int critical)
{
	rbuf		r = {d, n, 0};
	const unsigned char *prev = NULL,
			   *name,
			   *val;
	size_t		prev_n = 0,
				name_n,
				val_n;

	while (r.len > 0)
	{
		if (!r_str(&r, &name, &name_n) || name_n == 0 || !r_str(&r, &val, &val_n))
			return 0;
		if (prev)
		{
			int			c = memcmp(prev, name, prev_n < name_n ? prev_n : name_n);

			if (c > 0 || (c == 0 && prev_n >= name_n))
				return 0;		/* unsorted or repeated */
		}
		if (critical)
		{
			/* the only critical options we know each hold one string */
			rbuf		v = {val, val_n, 0};
			const unsigned char *s;
			size_t		sn;

			if (!span_is(name, name_n, "force-command") && !span_is(name, name_n, "source-address"))
				return 0;		/* an unknown critical option refuses the certificate */
			if (!r_str(&v, &s, &sn) || v.len != 0)
				return 0;
		}
		prev = name;
		prev_n = name_n;
	}
	return r.err == 0;
}

/* Structure only; no signature check. */
int
bc_ssh_cert_parse(const unsigned char *cert, size_t len, bc_ssh_cert_info *out)
{
	rbuf		r = {cert, len, 0};
	const unsigned char *d,
			   *fields;
	size_t		n,
				tn;
	const struct key_type *kt = NULL;
	wbuf		kb = {.max = BC_SSH_BLOB_MAX};
	uint32_t	type;
	rbuf		pr;
	int			rc = BC_EINVAL;

	memset(out, 0, sizeof(*out));
	if (cert == NULL || len > BC_SSH_CERT_MAX)
		return BC_EINVAL;
	if (!r_str(&r, &d, &tn))
		return BC_EINVAL;
	for (size_t i = 0; i < N_KEY_TYPES; i++)
	{
		size_t		kn = strlen(key_types[i].name);

		if (tn == kn + strlen(CERT_SUFFIX) && memcmp(d, key_types[i].name, kn) == 0 &&
			memcmp(d + kn, CERT_SUFFIX, strlen(CERT_SUFFIX)) == 0)
			kt = &key_types[i];
	}
	if (kt == NULL)
		return BC_EINVAL;
	if (!r_str(&r, &d, &n) || n < 16 || n > 64)	/* nonce: ssh-keygen and we write 32 */
		return BC_EINVAL;
	fields = r.p;
	if (read_key_fields(&r, kt, NULL) != BC_OK)
		return BC_EINVAL;
	w_cstr(&kb, kt->name);
	w_raw(&kb, fields, (size_t) (r.p - fields));
	if (kb.err || bc_ssh_pubkey_parse(kb.p, kb.len, NULL) != BC_OK)
		goto fail;
	out->key_blob = kb.p;
	out->key_blob_len = kb.len;
	kb.p = NULL;
	out->serial = r_u64(&r);
	type = r_u32(&r);
	if (r.err || (type != BC_SSH_CERT_USER && type != BC_SSH_CERT_HOST))
		goto fail;
	out->type = (int) type;
	if (!r_str(&r, &d, &n) || n >= sizeof(out->key_id) || memchr(d, '\0', n))
		goto fail;
	memcpy(out->key_id, d, n);
	out->key_id[n] = '\0';
	if (!r_str(&r, &d, &n))
		goto fail;
	pr = (rbuf) {d, n, 0};
	while (pr.len > 0)
	{
		const unsigned char *s;
		size_t		sn;

		if (!r_str(&pr, &s, &sn) || sn == 0 || sn > BC_SSH_PRINCIPAL_MAX || memchr(s, '\0', sn) ||
			out->n_principals == BC_SSH_PRINCIPALS_MAX)
			goto fail;
		out->principals[out->n_principals] = strndup((const char *) s, sn);
		if (out->principals[out->n_principals] == NULL)
		{
			rc = BC_ENOMEM;
			goto fail;
		}
		out->n_principals++;
	}
	if (out->n_principals == 0)
		goto fail;				/* empty = any principal: never accepted */
	out->valid_after = r_u64(&r);
	out->valid_before = r_u64(&r);
	if (!r_str(&r, &d, &n) || !options_ok(d, n, 1) || (type == BC_SSH_CERT_HOST && n != 0))
		goto fail;
	if (!r_str(&r, &d, &n) || !options_ok(d, n, 0) || (type == BC_SSH_CERT_HOST && n != 0))
		goto fail;
	if (!r_str(&r, &d, &n))		/* reserved */
		goto fail;
	if (!r_str(&r, &d, &n) || bc_ssh_pubkey_parse(d, n, NULL) != BC_OK)
		goto fail;
	out->ca_blob = d;
	out->ca_blob_len = n;
	/* signature: string(string type, string blob), and nothing after it */
	if (!r_str(&r, &d, &n))
		goto fail;
	{
		rbuf		s = {d, n, 0};
		const unsigned char *st,
				   *sb;
		size_t		stn,
					sbn;

		if (!r_str(&s, &st, &stn) || stn == 0 || !r_str(&s, &sb, &sbn) || sbn == 0 || s.len != 0)
			goto fail;
	}
	if (r.len != 0 || r.err)
		goto fail;
	return BC_OK;
fail:
	free(kb.p);
	bc_ssh_cert_info_free(out);
	return rc;
}

/* Free what bc_ssh_cert_parse allocated (the key blob, the principals). */
void
bc_ssh_cert_info_free(bc_ssh_cert_info *i)
{
	if (i == NULL)
		return;
	free((void *) i->key_blob);
	for (size_t k = 0; k < i->n_principals && k < BC_SSH_PRINCIPALS_MAX; k++)
		free(i->principals[k]);
	memset(i, 0, sizeof(*i));
}

/* ------------------------------------------------------------ KRL */

/* An unsigned KRL: one CERTIFICATES section with one SERIAL_LIST per CA. */
int
bc_ssh_krl_build(uint64_t krl_version, uint64_t generated, const char *comment,
				 const bc_ssh_krl_ca *cas, size_t n, unsigned char **krl, size_t *len)
{
	wbuf		w = {.max = BC_SSH_KRL_MAX};

	*krl = NULL;
	*len = 0;
	if (n > 0 && cas == NULL)
		return BC_EINVAL;
	for (size_t i = 0; i < n; i++)
	{
		if (bc_ssh_pubkey_parse(cas[i].ca_blob, cas[i].ca_blob_len, NULL) != BC_OK)
			return BC_EINVAL;
		if (cas[i].n_serials > 0 && cas[i].serials == NULL)
			return BC_EINVAL;
		for (size_t k = 0; k < cas[i].n_serials; k++)
			if (cas[i].serials[k] == 0 || (k > 0 && cas[i].serials[k] <= cas[i].serials[k - 1]))
				return BC_EINVAL;
	}
	w_u64(&w, KRL_MAGIC);
	w_u32(&w, 1);
	w_u64(&w, krl_version);
	w_u64(&w, generated);
	w_u64(&w, 0);				/* flags */
	w_str(&w, NULL, 0);			/* reserved */
	w_cstr(&w, comment ? comment : "");
	for (size_t i = 0; i < n && !w.err; i++)
	{
		wbuf		sec = {.max = BC_SSH_KRL_MAX};

		if (cas[i].n_serials == 0)
			continue;
		w_str(&sec, cas[i].ca_blob, cas[i].ca_blob_len);
		w_str(&sec, NULL, 0);	/* reserved */
		w_u8(&sec, 0x20);		/* KRL_SECTION_CERT_SERIAL_LIST */
		if (cas[i].n_serials > (BC_SSH_KRL_MAX / 8))
			sec.err = BC_ETOOBIG;
		else
			w_u32(&sec, (uint32_t) (cas[i].n_serials * 8));
		for (size_t k = 0; k < cas[i].n_serials && !sec.err; k++)
			w_u64(&sec, cas[i].serials[k]);
		if (sec.err)
			w.err = sec.err;
		else
		{
			w_u8(&w, 1);		/* KRL_SECTION_CERTIFICATES */
			w_str(&w, sec.p, sec.len);
		}
		free(sec.p);
	}
	if (w.err)
	{
		free(w.p);
		return w.err;
	}
	*krl = w.p;
	*len = w.len;
	return BC_OK;
}
