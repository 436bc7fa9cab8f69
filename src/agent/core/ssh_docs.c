/*
 * ssh_docs.c: what bcd believes of the service about SSH (ssh_host.h): the
 * signed CA keys and KRL hash (GET /v1/ssh/signed), the KRL itself (GET
 * /v1/ssh/krl), a host certificate answered (POST /v1/ssh/host) or held on
 * disk.  No thread, no file: ssh_host.c does those.
 *
 * The gateway is not trusted with any of it: the CA keys and the KRL's
 * hash come only from a JWS a pinned signing key verifies, for our trust
 * domain, never older (issuedAt) nor with a lower krlVersion than the one
 * held (a replay would bring back a certificate since revoked), nor issued
 * more than BCD_SSH_SIGNED_MAX_AGE before now (a replay of an old copy, over
 * and over, would freeze the KRL); the floor (issuedAt, krlVersion) is kept
 * in bcd's state directory across restarts (bcd_ssh_floor_*); the KRL
 * must hash to the signed krlSha256 (the KRL itself is unsigned: OpenSSH
 * 9.4 and later refuse signed KRLs).  Every CA line is parsed
 * (bc_ssh_pubkey_line_parse: a plain Ed25519 or ECDSA key) and written
 * again from its blob with our own comment, so no byte of the gateway's
 * text reaches sshd's files.  A host certificate is a JWS-signed answer's,
 * parsed by bc_ssh_cert_parse and compared with the key it is for, and one
 * held is kept only while its CA is among the signed hostCa keys.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "bc_ssh.h"
#include "core/fileio.h"
#include "core/ssh_host.h"

/* The KRL's magic ("SSHKRL\n\0") and format version (PROTOCOL.krl). */
static const unsigned char krl_magic[8] = {'S', 'S', 'H', 'K', 'R', 'L', '\n', '\0'};
#define KRL_FORMAT 1

/* Forget s. */
void
bcd_ssh_signed_clear(bcd_ssh_signed *s)
{
	free(s->host_ca);
	free(s->user_ca);
	for (int i = 0; i < BCD_SSH_CA_LINES_MAX; i++)
		free(s->host_ca_blob[i]);
	memset(s, 0, sizeof(*s));
	s->krl_version = -1;
}

/*
 * The lines of arr (at most BCD_SSH_CA_LINES_MAX plain public keys) written
 * again into *out, each prefixed by prefix, with comment; each key's blob
 * into blobs[] (NULL: not kept): BC_OK, or BC_EINVAL / BC_ENOMEM with *what.
 */
static int
ca_lines(json_t *arr, const char *prefix, const char *comment, char **out, int *n,
		 unsigned char **blobs, size_t *blob_lens, const char **what)
{
	size_t		i;
	json_t	   *v;
	size_t		have = 0;
	char	   *text = calloc(1, 1);

	*out = NULL;
	*n = 0;
	if (text == NULL)
		return BC_ENOMEM;
	if (!json_is_array(arr) || json_array_size(arr) > BCD_SSH_CA_LINES_MAX)
	{
		*what = "hostCa and userCa must be arrays of at most 8 key lines";
		free(text);
		return BC_EINVAL;
	}
	json_array_foreach(arr, i, v)
	{
		unsigned char *blob = NULL;
		size_t		blob_len = 0;
		char	   *line;
		char	   *grown;
		size_t		ln;

		if (!json_is_string(v) ||
			bc_ssh_pubkey_line_parse(json_string_value(v), json_string_length(v), &blob,
									 &blob_len) != BC_OK ||
			bc_ssh_pubkey_parse(blob, blob_len, NULL) != BC_OK)
		{
			free(blob);
			free(text);
			*what = "a CA line is not one plain Ed25519 or ECDSA public key";
			return BC_EINVAL;
		}
		line = bc_ssh_pubkey_line(blob, blob_len, comment);
		if (blobs != NULL && line != NULL)
		{
			blobs[*n] = blob;
			blob_lens[*n] = blob_len;
		}
		else
			free(blob);
		if (line == NULL)
		{
			free(text);
			return BC_ENOMEM;
		}
		ln = strlen(prefix) + strlen(line);
		grown = realloc(text, have + ln + 1);
		if (grown == NULL)
		{
			free(line);
			free(text);
			return BC_ENOMEM;
		}
		text = grown;
		snprintf(text + have, ln + 1, "%s%s", prefix, line);
		have += ln;
		free(line);
		(*n)++;
	}
	*out = text;
	return BC_OK;
}

/* Take up GET /v1/ssh/signed (ssh_host.h). */
int
bcd_ssh_signed_take(const bcd_service_keys *keys, const char *text, size_t len,
					const bcd_ssh_signed *held, int64_t now, bcd_ssh_signed *out, char *err,
					size_t errlen)
{
	json_t	   *doc = NULL;
	json_t	   *payload = NULL;
	json_t	   *v;
	const char *what = "not {\"keys\": [JWS...]} with a JWS a pinned signing key verifies";
	const char *sha;
	char		why[256];
	char		comment[320];
	unsigned char digest[BC_SHA256_LEN + 4];
	size_t		dlen = 0;
	int			rc = BC_EVERIFY;

	memset(out, 0, sizeof(*out));
	out->krl_version = -1;
	if (len > BCD_SSH_SIGNED_MAX)
	{
		what = "over 256 KiB";
		rc = BC_ETOOBIG;
		goto out;
	}
	doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	payload = bcd_service_keys_first_verified(keys, doc, BCD_SSH_SIGNED_MAX);
	if (payload == NULL)
		goto out;
	rc = BC_EINVAL;
	v = json_object_get(payload, "trustDomain");
	what = "its trustDomain is not bcd's";
	if (!json_is_string(v) || strcmp(json_string_value(v), keys->trust_domain) != 0)
		goto out;
	v = json_object_get(payload, "issuedAt");
	what = "its issuedAt is not a time YYYY-MM-DDTHH:MM:SSZ";
	if (!json_is_string(v) || bc_cloud_parse_rfc3339(json_string_value(v), &out->issued) != BC_OK ||
		out->issued <= 0)
		goto out;
	v = json_object_get(payload, "krlVersion");
	what = "its krlVersion is not an integer in [0, 2^53]";
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		json_integer_value(v) > 9007199254740992LL)
		goto out;
	out->krl_version = (int64_t) json_integer_value(v);
	sha = json_string_value(json_object_get(payload, "krlSha256"));
	what = "its krlSha256 is not the base64url of 32 bytes";
	if (sha == NULL || strlen(sha) != 43 ||
		bc_b64url_decode(sha, 43, digest, sizeof(digest), &dlen) != BC_OK || dlen != BC_SHA256_LEN)
		goto out;
	memcpy(out->krl_sha256, sha, 44);
	snprintf(comment, sizeof(comment), "bc_join-host-ca@%s", keys->trust_domain);
	if ((rc = ca_lines(json_object_get(payload, "hostCa"), "@cert-authority * ", comment,
					   &out->host_ca, &out->n_host_ca, out->host_ca_blob, out->host_ca_blob_len,
					   &what)) != BC_OK)
		goto out;
	snprintf(comment, sizeof(comment), "bc_join-user-ca@%s", keys->trust_domain);
	if ((rc = ca_lines(json_object_get(payload, "userCa"), "", comment, &out->user_ca,
					   &out->n_user_ca, NULL, NULL, &what)) != BC_OK)
		goto out;
	rc = BC_EVERIFY;
	if (held != NULL && out->issued < held->issued)
	{
		snprintf(why, sizeof(why), "it is older than the one held (issuedAt %s)",
				 json_string_value(json_object_get(payload, "issuedAt")));
		what = why;
		goto out;
	}
	if (held != NULL && out->krl_version < held->krl_version)
	{
		snprintf(why, sizeof(why), "its krlVersion %lld is lower than the one held (%lld)",
				 (long long) out->krl_version, (long long) held->krl_version);
		what = why;
		goto out;
	}
	if (out->issued < now - BCD_SSH_SIGNED_MAX_AGE)
	{
		snprintf(why, sizeof(why), "its issuedAt %s is more than %d s old (a replay, or "
				 "bcd's clock is wrong)", json_string_value(json_object_get(payload, "issuedAt")),
				 BCD_SSH_SIGNED_MAX_AGE);
		what = why;
		goto out;
	}
	rc = BC_OK;
out:
	if (rc != BC_OK)
	{
		if (rc == BC_ENOMEM)
			what = "out of memory";
		snprintf(err, errlen, "%s refused: %s (%s)", BC_PATH_SSH_SIGNED, what, bc_status_str(rc));
		bcd_ssh_signed_clear(out);
	}
	json_decref(payload);
	json_decref(doc);
	return rc;
}

/* 1 when ca_blob is a published host CA key, or none is known (ssh_host.h). */
int
bcd_ssh_host_ca_published(const bcd_ssh_signed *s, const unsigned char *ca_blob,
						  size_t ca_blob_len)
{
	if (s == NULL || s->n_host_ca == 0)
		return 1;
	for (int i = 0; i < s->n_host_ca; i++)
		if (s->host_ca_blob[i] != NULL && s->host_ca_blob_len[i] == ca_blob_len &&
			memcmp(s->host_ca_blob[i], ca_blob, ca_blob_len) == 0)
			return 1;
	return 0;
}

/* Keep the floor in state_dir (ssh_host.h). */
int
bcd_ssh_floor_save(const char *state_dir, int64_t issued, int64_t krl_version)
{
	char		text[64];
	int			n;

	if (state_dir == NULL)
		return BC_OK;
	n = snprintf(text, sizeof(text), "%lld %lld\n", (long long) issued, (long long) krl_version);
	return bcd_write_file_atomic(state_dir, BCD_SSH_FLOOR_FILE, text, (size_t) n, 0600);
}

/* Raise *issued, *krl_version to the floor kept in state_dir (ssh_host.h). */
void
bcd_ssh_floor_load(const char *state_dir, int64_t *issued, int64_t *krl_version)
{
	char	   *path;
	char	   *text = NULL;
	size_t		len = 0;
	long long	i = 0;
	long long	v = -1;
	char		extra;

	if (state_dir == NULL || (path = bcd_path_join(state_dir, BCD_SSH_FLOOR_FILE)) == NULL)
		return;
	if (bcd_read_file(path, 64, &text, &len) == BC_OK &&
		sscanf(text, "%lld %lld %c", &i, &v, &extra) == 2 && i >= 0 && v >= -1)
	{
		if (i > *issued)
			*issued = i;
		if (v > *krl_version)
			*krl_version = v;
	}
	free(text);
	free(path);
}

/* Lower case, one trailing dot dropped (ssh_host.h). */
void
bcd_ssh_hostname_norm(char *name)
{
	size_t		n = strlen(name);

	for (size_t i = 0; i < n; i++)
		name[i] = (char) tolower((unsigned char) name[i]);
	if (n > 1 && name[n - 1] == '.')
		name[n - 1] = '\0';
}

/* Check GET /v1/ssh/krl's body against s (ssh_host.h). */
int
bcd_ssh_krl_check(const bcd_ssh_signed *s, const unsigned char *krl, size_t len, char *err,
				  size_t errlen)
{
	char		sha[44];

	if (len > BC_SSH_KRL_MAX)
	{
		snprintf(err, errlen, "the KRL is over %d bytes", BC_SSH_KRL_MAX);
		return BC_ETOOBIG;
	}
	if (len < 12 || memcmp(krl, krl_magic, sizeof(krl_magic)) != 0 ||
		krl[8] != 0 || krl[9] != 0 || krl[10] != 0 || krl[11] != KRL_FORMAT)
	{
		snprintf(err, errlen, "the KRL is not an OpenSSH KRL of format 1");
		return BC_EINVAL;
	}
	if (bc_sha256_b64url(krl, len, sha) != BC_OK)
	{
		snprintf(err, errlen, "cannot hash the KRL");
		return BC_ECRYPTO;
	}
	if (strcmp(sha, s->krl_sha256) != 0)
	{
		snprintf(err, errlen, "the KRL's SHA-256 %s is not the signed krlSha256 %s", sha,
				 s->krl_sha256);
		return BC_EVERIFY;
	}
	return BC_OK;
}

/* The krl_version of a KRL's header (ssh_host.h). */
int64_t
bcd_ssh_krl_version(const unsigned char *krl, size_t len)
{
	uint64_t	v = 0;

	if (len < 20 || memcmp(krl, krl_magic, sizeof(krl_magic)) != 0 ||
		krl[8] != 0 || krl[9] != 0 || krl[10] != 0 || krl[11] != KRL_FORMAT)
		return -1;
	for (int i = 12; i < 20; i++)
		v = (v << 8) | krl[i];
	return v > (uint64_t) INT64_MAX ? INT64_MAX : (int64_t) v;
}

/*
 * The checks common to an answered and a held certificate: cert parses, a
 * host certificate of blob, valid before at most node_not_after + 1 (X.509's
 * notAfter is the last second of validity, OpenSSH's valid_before the first
 * second after it: notAfter + 1 ends both at the same instant); when exact,
 * no earlier than node_not_after.  BC_OK with info, else BC_EINVAL with err.
 */
static int
host_cert_check(const unsigned char *cert, size_t cert_len, const unsigned char *blob,
				size_t blob_len, int64_t node_not_after, int exact, bc_ssh_cert_info *info,
				char *err, size_t errlen)
{
	if (bc_ssh_cert_parse(cert, cert_len, info) != BC_OK)
	{
		snprintf(err, errlen, "the certificate does not parse");
		return BC_EINVAL;
	}
	if (info->type != BC_SSH_CERT_HOST)
		snprintf(err, errlen, "the certificate is not a host certificate");
	else if (info->key_blob_len != blob_len || memcmp(info->key_blob, blob, blob_len) != 0)
		snprintf(err, errlen, "the certificate certifies another key");
	else if (info->valid_before > (uint64_t) node_not_after + 1)
		snprintf(err, errlen, "the certificate is valid beyond the node certificate "
				 "(%llu > %lld)", (unsigned long long) info->valid_before,
				 (long long) node_not_after);
	else if (exact && info->valid_before < (uint64_t) node_not_after)
		snprintf(err, errlen, "the certificate ends before the node certificate (%llu < %lld)",
				 (unsigned long long) info->valid_before, (long long) node_not_after);
	else
		return BC_OK;
	bc_ssh_cert_info_free(info);
	return BC_EINVAL;
}

/* Check POST /v1/ssh/host's signed payload (ssh_host.h). */
int
bcd_ssh_host_answer(json_t *payload, const unsigned char *blob, size_t blob_len,
					int64_t node_not_after, const char *const *asked, size_t n_asked,
					unsigned char **cert, size_t *cert_len, bc_ssh_cert_info *info,
					char *err, size_t errlen)
{
	const char *sha = json_string_value(json_object_get(payload, "sshKeySha256"));
	const char *b64 = json_string_value(json_object_get(payload, "sshCertificate"));
	const char *serial = json_string_value(json_object_get(payload, "sshSerial"));
	char		ours[44];
	char		dec[32];
	unsigned char *buf = NULL;
	size_t		n = 0;

	*cert = NULL;
	*cert_len = 0;
	memset(info, 0, sizeof(*info));
	if (bc_sha256_b64url(blob, blob_len, ours) != BC_OK)
	{
		snprintf(err, errlen, "cannot hash the host key");
		return BC_ECRYPTO;
	}
	if (sha == NULL || strcmp(sha, ours) != 0)
	{
		snprintf(err, errlen, "the answer's sshKeySha256 is not our key's");
		return BC_EVERIFY;
	}
	if (b64 == NULL || serial == NULL || (buf = malloc(BC_SSH_CERT_MAX)) == NULL ||
		bc_b64_decode(b64, strlen(b64), buf, BC_SSH_CERT_MAX, &n) != BC_OK)
	{
		free(buf);
		snprintf(err, errlen, "the answer has no sshSerial, or no sshCertificate in base64 of "
				 "at most %d bytes", BC_SSH_CERT_MAX);
		return BC_EINVAL;
	}
	if (host_cert_check(buf, n, blob, blob_len, node_not_after, 0, info, err, errlen) != BC_OK)
	{
		free(buf);
		return BC_EINVAL;
	}
	snprintf(dec, sizeof(dec), "%llu", (unsigned long long) info->serial);
	if (strcmp(dec, serial) != 0)
	{
		snprintf(err, errlen, "the answer's sshSerial %.24s is not the certificate's %s",
				 serial, dec);
		goto refused;
	}
	for (size_t i = 0; n_asked > 0 && i < info->n_principals; i++)
	{
		size_t		j;

		for (j = 0; j < n_asked && strcmp(asked[j], info->principals[i]) != 0; j++)
			;
		if (j == n_asked)
		{
			snprintf(err, errlen, "the certificate names %.255s, a principal not asked for",
					 info->principals[i]);
			goto refused;
		}
	}
	*cert = buf;
	*cert_len = n;
	return BC_OK;
refused:
	bc_ssh_cert_info_free(info);
	memset(info, 0, sizeof(*info));
	free(buf);
	return BC_EVERIFY;
}

/* Check a certificate file held (ssh_host.h). */
int
bcd_ssh_host_cert_held(const char *text, size_t len, const unsigned char *blob, size_t blob_len,
					   int64_t node_not_after, const bcd_ssh_signed *published,
					   bc_ssh_cert_info *info, char *err, size_t errlen)
{
	unsigned char *cert = NULL;
	size_t		cert_len = 0;
	int			rc;

	memset(info, 0, sizeof(*info));
	if (bc_ssh_pubkey_line_parse(text, len, &cert, &cert_len) != BC_OK)
	{
		snprintf(err, errlen, "it is not one certificate line");
		return BC_EINVAL;
	}
	rc = host_cert_check(cert, cert_len, blob, blob_len, node_not_after, 1, info, err, errlen);
	if (rc == BC_OK && !bcd_ssh_host_ca_published(published, info->ca_blob, info->ca_blob_len))
	{
		snprintf(err, errlen, "its CA is no longer among the signed host CA keys");
		bc_ssh_cert_info_free(info);
		memset(info, 0, sizeof(*info));
		rc = BC_EINVAL;
	}
	free(cert);
	info->ca_blob = NULL;		/* it pointed into cert */
	info->ca_blob_len = 0;
	return rc;
}
