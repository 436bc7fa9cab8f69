/*
 * transport.c: the agent's HTTP client (libcurl, OpenSSL flavour).  Of the
 * gateway: its CA pinned (no system store), TLS 1.2 or newer, https only,
 * no redirects, no proxy, bounded time and a bounded response body; a
 * pending stop signal aborts a transfer at once.  Of a cloud's link-local
 * metadata service (producers/cloud_iid.c), the one plain-HTTP use: http://
 * to that service's own address only (or 127.0.0.1, the tests' stand-in),
 * no redirects, no proxy, 10 s and 64 KiB at most, 200 or nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <jansson.h>

#include "bc_common.h"
#include "core/signals.h"
#include "core/transport.h"

/* Connect and whole-transfer timeouts, in seconds. */
#define CONNECT_TIMEOUT 10L
#define TOTAL_TIMEOUT 60L
/* Whole-transfer timeout of a metadata request, in seconds. */
#define METADATA_TIMEOUT 10L

/*
 * The hosts of the metadata mode: 169.254.169.254 (AWS, Azure, GCP), AWS's
 * over IPv6, GCP's name, and the loopback a stand-in listens on in tests
 * (127.0.0.1, [::1], localhost): addresses that never leave the machine.
 */
static const char *const metadata_hosts[] = {
	"169.254.169.254", "[fd00:ec2::254]", "metadata.google.internal",
	"127.0.0.1", "[::1]", "localhost", NULL
};

/* A client of one gateway, or of a metadata service (ca_file NULL). */
struct bcd_http
{
	CURL	   *curl;
	char	   *base;			/* without a trailing '/' (a metadata base: as given) */
	char	   *ca_file;		/* NULL: the metadata mode */
};

/* The body being received, bounded by max. */
typedef struct body_buf
{
	char	   *data;
	size_t		len;
	size_t		max;
	int			too_big;
} body_buf;

/* curl write callback: append to the bounded body, or fail the transfer. */
static size_t
on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	body_buf   *b = userdata;
	size_t		n = size * nmemb;
	char	   *grown;

	if (n > b->max - b->len)
	{
		b->too_big = 1;
		return 0;
	}
	grown = realloc(b->data, b->len + n + 1);
	if (grown == NULL)
		return 0;
	b->data = grown;
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

/* curl progress callback: abort when a stop signal is pending. */
static int
on_progress(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
			curl_off_t ultotal, curl_off_t ulnow)
{
	(void) clientp;
	(void) dltotal;
	(void) dlnow;
	(void) ultotal;
	(void) ulnow;
	return bcd_stop_requested();
}

/* A client for base_url; ca_file NULL: the metadata mode (checked by the callers). */
static bcd_http *
http_new(const char *base_url, const char *ca_file, char *err, size_t errlen)
{
	bcd_http   *h = NULL;

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
	{
		snprintf(err, errlen, "cannot initialise libcurl");
		return NULL;
	}
	h = calloc(1, sizeof(*h));
	if (h == NULL || (h->base = strdup(base_url)) == NULL ||
		(ca_file != NULL && (h->ca_file = strdup(ca_file)) == NULL) ||
		(h->curl = curl_easy_init()) == NULL)
	{
		snprintf(err, errlen, "out of memory");
		bcd_http_free(h);
		return NULL;
	}
	return h;
}

/* A client for base_url (https://...) pinning the CA certificates in ca_file. */
bcd_http *
bcd_http_new(const char *base_url, const char *ca_file, char *err, size_t errlen)
{
	bcd_http   *h;
	size_t		n;

	if (strncmp(base_url, "https://", 8) != 0)
	{
		snprintf(err, errlen, "--gateway must be an https:// URL");
		return NULL;
	}
	h = http_new(base_url, ca_file, err, errlen);
	if (h == NULL)
		return NULL;
	n = strlen(h->base);
	while (n > 8 && h->base[n - 1] == '/')
		h->base[--n] = '\0';
	return h;
}

/* 1 when url (libcurl parses it) is http:// to one of metadata_hosts. */
static int
metadata_url_ok(const char *url)
{
	CURLU	   *u = curl_url();
	char	   *scheme = NULL;
	char	   *host = NULL;
	int			ok = 0;

	if (u != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
		strcmp(scheme, "http") == 0)
		for (int i = 0; metadata_hosts[i] != NULL && !ok; i++)
			ok = strcasecmp(host, metadata_hosts[i]) == 0;
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return ok;
}

/*
 * A client of the cloud's link-local metadata service at base_url: plain
 * HTTP, nothing pinned, so refused unless base_url is http:// to one of
 * metadata_hosts.
 */
bcd_http *
bcd_http_new_metadata(const char *base_url, char *err, size_t errlen)
{
	if (!metadata_url_ok(base_url))
	{
		snprintf(err, errlen, "the metadata service %s: only http:// to 169.254.169.254, "
				 "[fd00:ec2::254], metadata.google.internal (or the loopback) is asked "
				 "without TLS", base_url);
		return NULL;
	}
	return http_new(base_url, NULL, err, errlen);
}

/* Release the client. */
void
bcd_http_free(bcd_http *h)
{
	if (h == NULL)
		return;
	if (h->curl != NULL)
		curl_easy_cleanup(h->curl);
	free(h->base);
	free(h->ca_file);
	free(h);
	curl_global_cleanup();
}

/* Release a reply's body. */
void
bcd_http_reply_free(bcd_http_reply *reply)
{
	free(reply->body);
	memset(reply, 0, sizeof(*reply));
}

/*
 * Set every option of one POST of body (len bytes) to url, or of a GET when
 * body is NULL; answers of at most max bytes.
 */
static int
set_options(bcd_http *h, const char *url, const char *body, size_t len, size_t max,
			struct curl_slist *headers, body_buf *b, char *errbuf)
{
	CURL	   *c = h->curl;

	curl_easy_reset(c);
	return curl_easy_setopt(c, CURLOPT_URL, url) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https") != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_CAINFO, h->ca_file) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_CAPATH, NULL) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_SSLVERSION, (long) CURL_SSLVERSION_TLSv1_2) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_PROXY, "") != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_TIMEOUT, TOTAL_TIMEOUT) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_MAXFILESIZE, (long) max) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers) != CURLE_OK ||
		(body != NULL ?
		 (curl_easy_setopt(c, CURLOPT_POSTFIELDS, body) != CURLE_OK ||
		  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long) len) != CURLE_OK) :
		 curl_easy_setopt(c, CURLOPT_HTTPGET, 1L) != CURLE_OK) ||
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_WRITEDATA, b) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L) != CURLE_OK ||
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf) != CURLE_OK ? BC_EINVAL : BC_OK;
}

/*
 * POST body (len bytes of content_type, NULL: no Content-Type; GET when
 * body is NULL) to base_url + path,
 * with the extra header (NULL: none), answers of at most max bytes.
 * BCD_RC_OK with any HTTP status in reply (its ETag, when etag is not NULL,
 * in etag: "" when absent); BCD_RC_STOPPED when a stop signal aborted it;
 * BCD_RC_RETRY (reason in err) when no answer came (connection, TLS,
 * timeout, body over the bound, or the request could not even be made).
 */
static bcd_rc
http_request(bcd_http *h, const char *path, const char *content_type, const char *body,
			 size_t len, const char *extra, size_t max, bcd_http_reply *reply,
			 char *etag, size_t etaglen, char *err, size_t errlen)
{
	struct curl_slist *headers = NULL;
	struct curl_slist *more;
	struct curl_header *hdr = NULL;
	body_buf	b = {NULL, 0, max, 0};
	char		errbuf[CURL_ERROR_SIZE] = "";
	char		ctype[128];
	char	   *url = NULL;
	size_t		url_len = strlen(h->base) + strlen(path) + 1;
	curl_off_t	retry = -1;
	CURLcode	cc;
	bcd_rc		rc = BCD_RC_RETRY;

	memset(reply, 0, sizeof(*reply));
	reply->retry_after = -1;
	if (etag != NULL && etaglen > 0)
		etag[0] = '\0';
	snprintf(err, errlen, "out of memory");
	url = malloc(url_len);
	if (url == NULL)
		goto out;
	snprintf(url, url_len, "%s%s", h->base, path);
	if (content_type != NULL)
		snprintf(ctype, sizeof(ctype), "Content-Type: %s", content_type);
	headers = curl_slist_append(NULL, "Expect:");
	if (headers == NULL)
		goto out;
	if (content_type != NULL)
	{
		if ((more = curl_slist_append(headers, ctype)) == NULL)
			goto out;
		headers = more;
	}
	if (extra != NULL)
	{
		if ((more = curl_slist_append(headers, extra)) == NULL)
			goto out;
		headers = more;
	}
	if (set_options(h, url, body, len, max, headers, &b, errbuf) != BC_OK)
	{
		snprintf(err, errlen, "cannot set up libcurl");
		goto out;
	}
	cc = curl_easy_perform(h->curl);
	if (cc == CURLE_ABORTED_BY_CALLBACK && bcd_stop_requested())
	{
		rc = BCD_RC_STOPPED;
		goto out;
	}
	if (cc != CURLE_OK)
	{
		if (b.too_big || cc == CURLE_FILESIZE_EXCEEDED)
			snprintf(err, errlen, "%s: the answer is over %zu %s", url,
					 max >= 1024 * 1024 ? max / (1024 * 1024) : max / 1024,
					 max >= 1024 * 1024 ? "MiB" : "KiB");
		else
			snprintf(err, errlen, "%s: %s", url, errbuf[0] != '\0' ? errbuf : curl_easy_strerror(cc));
		goto out;
	}
	curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &reply->status);
	if (curl_easy_getinfo(h->curl, CURLINFO_RETRY_AFTER, &retry) == CURLE_OK && retry > 0)
		reply->retry_after = retry > 86400 ? 86400 : (long) retry;
	if (etag != NULL && etaglen > 0 &&
		curl_easy_header(h->curl, "ETag", 0, CURLH_HEADER, -1, &hdr) == CURLHE_OK &&
		hdr != NULL && strlen(hdr->value) < etaglen)
		snprintf(etag, etaglen, "%s", hdr->value);
	if (b.data == NULL && (b.data = calloc(1, 1)) == NULL)
	{
		reply->status = 0;
		goto out;
	}
	reply->body = b.data;
	reply->len = b.len;
	b.data = NULL;
	rc = BCD_RC_OK;
out:
	free(b.data);
	curl_slist_free_all(headers);
	free(url);
	return rc;
}

/* POST body (JSON; GET when NULL) to base_url + path (http_request). */
static bcd_rc
http_post(bcd_http *h, const char *path, const char *body,
		  bcd_http_reply *reply, char *err, size_t errlen)
{
	return http_request(h, path, "application/json", body, body != NULL ? strlen(body) : 0,
						NULL, BCD_HTTP_BODY_MAX, reply, NULL, 0, err, errlen);
}

/* One request of bytes, not JSON (transport.h). */
bcd_rc
bcd_http_fetch(bcd_http *h, const char *path, const char *content_type,
			   const unsigned char *body, size_t len, const char *if_none_match, size_t max,
			   bcd_http_reply *reply, char *etag, size_t etaglen, char *err, size_t errlen)
{
	char		inm[300];

	if (if_none_match != NULL && if_none_match[0] != '\0')
		snprintf(inm, sizeof(inm), "If-None-Match: %s", if_none_match);
	return http_request(h, path, content_type, (const char *) body, len,
						if_none_match != NULL && if_none_match[0] != '\0' ? inm : NULL, max,
						reply, etag, etaglen, err, errlen);
}

/*
 * One request of a metadata client (bcd_http_new_metadata): method "GET",
 * or "PUT" with an empty body, of its base + path, with header (NULL: none).
 * BC_OK with a 200's non-empty body in *out (malloc()ed, NUL-terminated),
 * *outlen; else BC_EINVAL or BC_ENOMEM, why in err.
 */
int
bcd_http_metadata_fetch(bcd_http *h, const char *method, const char *path,
						const char *header, char **out, size_t *outlen,
						char *err, size_t errlen)
{
	CURL	   *c = h->curl;
	struct curl_slist *hs = NULL;
	body_buf	b = {NULL, 0, BCD_HTTP_METADATA_MAX, 0};
	size_t		url_len = strlen(h->base) + strlen(path) + 1;
	char	   *url;
	long		status = 0;
	CURLcode	cc;

	*out = NULL;
	if (h->ca_file != NULL)
	{
		snprintf(err, errlen, "a gateway client asks no metadata service");
		return BC_EINVAL;
	}
	url = malloc(url_len);
	if (url == NULL)
	{
		snprintf(err, errlen, "cannot start an HTTP request (out of memory)");
		return BC_ENOMEM;
	}
	snprintf(url, url_len, "%s%s", h->base, path);
	if (header != NULL)
		hs = curl_slist_append(hs, header);
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");	/* link-local: never through a proxy */
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, METADATA_TIMEOUT);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	if (strcmp(method, "PUT") == 0)
	{
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	}
	cc = curl_easy_perform(c);
	if (cc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hs);
	if (cc != CURLE_OK || status != 200 || b.data == NULL)
	{
		snprintf(err, errlen, "the metadata service: %s %s: %s", method, url,
				 b.too_big ? "answer over 64 KiB" :
				 cc != CURLE_OK ? curl_easy_strerror(cc) :
				 status != 200 ? "HTTP status other than 200" : "empty answer");
		free(url);
		free(b.data);
		return BC_EINVAL;
	}
	free(url);
	*out = b.data;
	*outlen = b.len;
	return BC_OK;
}

/* s percent-encoded for a URL (libcurl's escape), malloc()ed, or NULL. */
char *
bcd_http_escape(const char *s)
{
	char	   *enc = curl_easy_escape(NULL, s, 0);
	char	   *copy = enc != NULL ? strdup(enc) : NULL;

	curl_free(enc);
	return copy;
}

/* Copy s into buf keeping only printable ASCII, at most 120 characters. */
static void
printable(const char *s, char *buf, size_t len)
{
	size_t		i = 0;

	for (; *s != '\0' && i + 1 < len && i < 120; s++)
		buf[i++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
	buf[i] = '\0';
}

/*
 * "HTTP <status> <code>: <message>" for an error answer of the gateway
 * ({"status":..,"error":{"code","message"}}), only printable ASCII kept.
 */
void
bcd_http_describe(const bcd_http_reply *reply, char *buf, size_t len)
{
	json_t	   *doc = NULL;
	json_t	   *error;
	json_error_t jerr;
	char		code[128] = "";
	char		message[128] = "";

	if (reply->body != NULL)
		doc = json_loadb(reply->body, reply->len, 0, &jerr);
	error = json_object_get(doc, "error");
	if (json_is_string(json_object_get(error, "code")))
		printable(json_string_value(json_object_get(error, "code")), code, sizeof(code));
	if (json_is_string(json_object_get(error, "message")))
		printable(json_string_value(json_object_get(error, "message")), message, sizeof(message));
	snprintf(buf, len, "HTTP %ld%s%s%s%s", reply->status, code[0] ? " " : "", code,
			 message[0] ? ": " : "", message);
	json_decref(doc);
}

/*
 * POST body to path (GET when body is NULL) and classify what came back: the one place that tells
 * an answer to verify from one to retry or to give up on (the join loop,
 * renewal and session provisioning all ask here).
 *
 *   BCD_RC_OK       200 or 403 in reply: verify it (bcd_answer_verify);
 *   BCD_RC_RETRY    no answer (reply->status is 0; why in err), or 429 or
 *                   5xx (described in err; reply->retry_after, -1 when
 *                   absent): transient, try again later;
 *   BCD_RC_FAILED   any other status (400, 404, 413, ...; described in err):
 *                   retrying would get the same answer;
 *   BCD_RC_STOPPED  a stop signal aborted the request.
 */
bcd_rc
bcd_http_exchange(bcd_http *h, const char *path, const char *body,
				  bcd_http_reply *reply, char *err, size_t errlen)
{
	bcd_rc		rc = http_post(h, path, body, reply, err, errlen);

	if (rc != BCD_RC_OK)
		return rc;
	if (reply->status == 200 || reply->status == 403)
		return BCD_RC_OK;
	bcd_http_describe(reply, err, errlen);
	return reply->status == 429 || reply->status >= 500 ? BCD_RC_RETRY : BCD_RC_FAILED;
}
