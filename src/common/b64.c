/*
 * b64.c: base64url and base64 (on OpenSSL's EVP_EncodeBlock/EVP_DecodeBlock),
 * SHA-256, constant-time comparison, status strings and OpenSSL error text.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "bc_common.h"

/* Largest input (in bytes) handed to one EVP_EncodeBlock call: a multiple of 3. */
#define B64_ENCODE_CHUNK (3 * 1024 * 1024)

/* Largest encoded text we decode in one go (far above every bound in use). */
#define B64_DECODE_MAX ((size_t) INT_MAX / 2)

/* A short, static, lower-case description of a status. */
const char *
bc_status_str(int status)
{
	switch (status)
	{
		case BC_OK:
			return "ok";
		case BC_EINVAL:
			return "malformed input";
		case BC_EVERIFY:
			return "verification failed";
		case BC_ECRYPTO:
			return "cryptographic library failure";
		case BC_ENOMEM:
			return "out of memory";
		case BC_ETOOBIG:
			return "input or output too large";
		case BC_EUNSUPPORTED:
			return "unsupported algorithm or key type";
		case BC_EKEY:
			return "the private key's operation failed in its provider or engine";
		default:
			return "unknown error";
	}
}

/* Drain OpenSSL's error queue into buf, "; "-separated, truncated to len. */
void
bc_ossl_errors(char *buf, size_t len)
{
	unsigned long code;
	size_t		used = 0;
	char		one[256];

	if (buf == NULL || len == 0)
	{
		ERR_clear_error();
		return;
	}
	buf[0] = '\0';
	while ((code = ERR_get_error()) != 0)
	{
		size_t		n;

		ERR_error_string_n(code, one, sizeof(one));
		n = strlen(one);
		if (used > 0 && used + 2 < len)
		{
			memcpy(buf + used, "; ", 2);
			used += 2;
		}
		if (used + 1 < len)
		{
			size_t		room = len - 1 - used;

			if (n > room)
				n = room;
			memcpy(buf + used, one, n);
			used += n;
		}
		buf[used] = '\0';
	}
}

/* free() that accepts NULL. */
void
bc_free(void *p)
{
	free(p);
}

/* Cleanse n bytes, then free. */
void
bc_free_secret(void *p, size_t n)
{
	if (p == NULL)
		return;
	OPENSSL_cleanse(p, n);
	free(p);
}

/* Length of the padded base64 encoding of n bytes. */
size_t
bc_b64_encoded_len(size_t n)
{
	return (n + 2) / 3 * 4;
}

/* Padded base64 of in[0..n) into out (bc_b64_encoded_len(n) + 1 bytes). */
size_t
bc_b64_encode(const unsigned char *in, size_t n, char *out)
{
	size_t		done = 0;
	size_t		written = 0;

	out[0] = '\0';
	while (done < n)
	{
		size_t		chunk = n - done;

		if (chunk > B64_ENCODE_CHUNK)
			chunk = B64_ENCODE_CHUNK;
		written += (size_t) EVP_EncodeBlock((unsigned char *) out + written,
											in + done, (int) chunk);
		done += chunk;
	}
	out[written] = '\0';
	return written;
}

/* Length of the unpadded base64url encoding of n bytes (without NUL). */
size_t
bc_b64url_encoded_len(size_t n)
{
	return n / 3 * 4 + (n % 3 == 0 ? 0 : n % 3 + 1);
}

/* Unpadded base64url of in[0..n) into out; NUL-terminates; returns the length. */
size_t
bc_b64url_encode(const unsigned char *in, size_t n, char *out)
{
	size_t		whole = n / 3 * 3;
	size_t		len = bc_b64url_encoded_len(n);
	size_t		done;
	char		tail[5];
	size_t		i;

	/* out has no room for padding: encode the last partial group aside. */
	done = bc_b64_encode(in, whole, out);
	if (whole < n)
	{
		bc_b64_encode(in + whole, n - whole, tail);
		memcpy(out + done, tail, len - done);
	}
	for (i = 0; i < len; i++)
	{
		if (out[i] == '+')
			out[i] = '-';
		else if (out[i] == '/')
			out[i] = '_';
	}
	out[len] = '\0';
	return len;
}

/* Unpadded base64url of in[0..n) in a new malloc()ed string; NULL when out of memory. */
char *
bc_b64url_encode_alloc(const unsigned char *in, size_t n)
{
	char	   *out = malloc(bc_b64url_encoded_len(n) + 1);

	if (out != NULL)
		bc_b64url_encode(in, n, out);
	return out;
}

/* Upper bound of the decoded length of n base64url characters. */
size_t
bc_b64url_decoded_maxlen(size_t n)
{
	return n / 4 * 3 + (n % 4 >= 2 ? n % 4 - 1 : 0);
}

/* 1 when c is one of the 64 symbols of the standard base64 alphabet. */
static int
is_b64_symbol(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		(c >= '0' && c <= '9') || c == '+' || c == '/';
}

/*
 * Decode padded standard base64 text (length a multiple of 4, alphabet and
 * padding already checked) with EVP_DecodeBlock, then insist that the
 * re-encoding of the result is the input: that refuses non-zero trailing
 * bits, so every byte string has exactly one accepted encoding.
 */
static int
decode_canonical_b64(const char *text, size_t n, size_t npad,
					 unsigned char *out, size_t outcap, size_t *outlen)
{
	unsigned char *raw = NULL;
	char	   *again = NULL;
	size_t		len;
	int			got;
	int			rc = BC_EINVAL;

	if (n == 0)
	{
		*outlen = 0;
		return BC_OK;
	}
	len = n / 4 * 3 - npad;
	if (len > outcap)
		return BC_ETOOBIG;
	raw = malloc(n / 4 * 3);
	again = malloc(n + 1);
	if (raw == NULL || again == NULL)
	{
		rc = BC_ENOMEM;
		goto out;
	}
	got = EVP_DecodeBlock(raw, (const unsigned char *) text, (int) n);
	if (got < 0 || (size_t) got != n / 4 * 3)
		goto out;
	if (bc_b64_encode(raw, len, again) != n || memcmp(again, text, n) != 0)
		goto out;
	memcpy(out, raw, len);
	*outlen = len;
	rc = BC_OK;
out:
	if (raw != NULL)
		bc_free_secret(raw, n / 4 * 3);
	if (again != NULL)
		bc_free_secret(again, n + 1);
	return rc;
}

/* Decode n characters of unpadded base64url, strictly (see bc_common.h). */
int
bc_b64url_decode(const char *in, size_t n, unsigned char *out,
				 size_t outcap, size_t *outlen)
{
	char	   *std = NULL;
	size_t		padded;
	size_t		npad;
	size_t		i;
	int			rc;

	*outlen = 0;
	if (n > B64_DECODE_MAX)
		return BC_ETOOBIG;
	if (n % 4 == 1)
		return BC_EINVAL;
	if (bc_b64url_decoded_maxlen(n) > outcap)
		return BC_ETOOBIG;
	npad = (4 - n % 4) % 4;
	padded = n + npad;
	std = malloc(padded + 1);
	if (std == NULL)
		return BC_ENOMEM;
	for (i = 0; i < n; i++)
	{
		char		c = in[i];

		if (c == '-')
			c = '+';
		else if (c == '_')
			c = '/';
		else if (c == '+' || c == '/' || !is_b64_symbol(c))
		{
			bc_free_secret(std, padded + 1);
			return BC_EINVAL;
		}
		std[i] = c;
	}
	for (i = n; i < padded; i++)
		std[i] = '=';
	std[padded] = '\0';
	rc = decode_canonical_b64(std, padded, npad, out, outcap, outlen);
	bc_free_secret(std, padded + 1);
	return rc;
}

/* Decode n characters of padded standard base64 strictly (no white space). */
int
bc_b64_decode(const char *in, size_t n, unsigned char *out,
			  size_t outcap, size_t *outlen)
{
	size_t		npad = 0;
	size_t		i;

	*outlen = 0;
	if (n > B64_DECODE_MAX)
		return BC_ETOOBIG;
	if (n % 4 != 0)
		return BC_EINVAL;
	if (n > 0 && in[n - 1] == '=')
		npad++;
	if (n > 1 && in[n - 2] == '=')
		npad++;
	for (i = 0; i < n - npad; i++)
	{
		if (!is_b64_symbol(in[i]))
			return BC_EINVAL;
	}
	if (n > 0 && n / 4 * 3 - npad > outcap)
		return BC_ETOOBIG;
	return decode_canonical_b64(in, n, npad, out, outcap, outlen);
}

/* SHA-256 of data[0..n) into out. */
int
bc_sha256(const void *data, size_t n, unsigned char out[BC_SHA256_LEN])
{
	unsigned int len = 0;

	if (EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) != 1 ||
		len != BC_SHA256_LEN)
		return BC_ECRYPTO;
	return BC_OK;
}

/* Constant-time comparison of two equal-length buffers: 1 when equal. */
int
bc_ct_equal(const void *a, const void *b, size_t n)
{
	return CRYPTO_memcmp(a, b, n) == 0;
}

/* base64url of SHA-256 of data into out (43 characters and a NUL). */
int
bc_sha256_b64url(const void *data, size_t n, char out[44])
{
	unsigned char digest[BC_SHA256_LEN];
	int			rc = bc_sha256(data, n, digest);

	out[0] = '\0';
	if (rc == BC_OK)
		bc_b64url_encode(digest, sizeof(digest), out);
	return rc;
}
