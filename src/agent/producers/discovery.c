/*
 * discovery.c: the producer of the discovery attestor, the ramdisk's half
 * (bcd ramdisk).  Its evidence is the join token, sealed for this CSR, and
 * the site assertion, asked of the site's agent (bcd serve-discovery,
 * core/site_server.c) at every round, so a long wait for an operator's
 * approval never outlives the assertion.
 *
 * The request (core/discovery_assertion.h): TLS to --site-agent HOST:PORT,
 * whose peer must present a certificate that verifies against the pinned
 * node CA (the site agent's node certificate: it names no host, so no host
 * name is checked; the service decides whether its signer is a site agent
 * of the token's site), one line {"csr","mac"} out, one line back.  No
 * answer, a failed handshake or {"error":"unavailable"}: BCD_PRODUCER_RETRY.
 * It answers no challenge.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/clock.h"
#include "core/discovery_assertion.h"
#include "producers/producer.h"

/* Its own state: --site-agent, --mac. */
static struct
{
	const char *site_agent;
	const char *mac;
} st;

/* Seconds the connection to the site agent may take: connect, and all the rest. */
#define SITE_AGENT_TIMEOUT 15

/* A TCP connection to "host:port" ("[v6]:port"), timeouts set; -1 otherwise. */
static int
connect_to(const char *spec, char *err, size_t errlen)
{
	char		host[256];
	const char *colon = strrchr(spec, ':');
	const char *h = spec;
	size_t		hl;
	struct addrinfo hints, *res = NULL, *ai;
	struct timeval tv = {SITE_AGENT_TIMEOUT, 0};
	int			fd = -1;
	int			rc;

	hl = colon != NULL ? (size_t) (colon - spec) : 0;
	if (hl >= 2 && spec[0] == '[' && spec[hl - 1] == ']')
	{
		h = spec + 1;
		hl -= 2;
	}
	if (colon == NULL || colon[1] == '\0' || hl == 0 || hl >= sizeof(host))
	{
		snprintf(err, errlen, "--site-agent must be HOST:PORT");
		return -1;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0)
	{
		snprintf(err, errlen, "the site agent %s: %s", spec, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next)
	{
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		/* On Linux SO_SNDTIMEO bounds connect() too. */
		if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
			setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0 &&
			connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		snprintf(err, errlen, "cannot connect to the site agent %s: %s", spec, strerror(errno));
	freeaddrinfo(res);
	return fd;
}

/*
 * What went wrong in a TLS handshake with the site agent at spec that
 * SSL_connect ended with r (not 1), into err: its certificate did not
 * verify against the pinned node CA, it sent none, the handshake did not
 * finish within SITE_AGENT_TIMEOUT, the connection closed, or a TLS error
 * (OpenSSL's reason).  Never "not a node of the node CA" unless the
 * certificate was checked and refused.
 */
static void
handshake_failure(SSL *ssl, int r, const char *spec, char *err, size_t errlen)
{
	long		v = SSL_get_verify_result(ssl);
	int			e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, r);
	unsigned long code = ERR_peek_last_error();

	if (v != X509_V_OK)
		snprintf(err, errlen, "the site agent %s is not a node of the pinned node CA "
				 "(its certificate: %s)", spec, X509_verify_cert_error_string(v));
	else if (r == 1)
		snprintf(err, errlen, "the site agent %s sent no certificate", spec);
	else if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		snprintf(err, errlen, "the site agent %s did not finish the TLS handshake within %d s "
				 "(the connection is open, but it stopped answering)", spec, SITE_AGENT_TIMEOUT);
	else if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && code == 0))
		snprintf(err, errlen, "the site agent %s closed the connection during the TLS handshake",
				 spec);
	else
		snprintf(err, errlen, "the TLS handshake with the site agent %s failed: %s", spec,
				 code != 0 ? ERR_reason_error_string(code) != NULL ?
				 ERR_reason_error_string(code) : "an OpenSSL error" : strerror(errno));
}

/*
 * The assertion the site agent answers, or NULL with err set and *retry 1
 * when asking again later may help.
 */
static char *
ask_site_agent(const bcd_producer_input *in, int *retry, char *err, size_t errlen)
{
	static char buf[BCD_DISCOVERY_LINE_MAX];
	SSL_CTX    *ctx = NULL;
	SSL		   *ssl = NULL;
	char	   *csr64 = NULL;
	json_t	   *req = NULL;
	char	   *line = NULL;
	json_t	   *ans = NULL;
	const char *assertion;
	const char *word;
	char	   *out = NULL;
	size_t		len = 0;
	void		(*old_pipe) (int);
	long long	deadline = bcd_now_ms() + SITE_AGENT_TIMEOUT * 1000LL;
	int			r = 0;
	int			fd;

	*retry = 1;
	if (st.site_agent == NULL || !bc_mac_valid(st.mac))
	{
		*retry = 0;
		snprintf(err, errlen, "discovery needs --site-agent and --mac");
		return NULL;
	}
	old_pipe = signal(SIGPIPE, SIG_IGN);
	fd = connect_to(st.site_agent, err, errlen);
	if (fd < 0)
		goto out;
	csr64 = bc_b64url_encode_alloc(in->csr, in->csr_len);
	if (csr64 == NULL || (req = json_pack("{s:s, s:s}", "csr", csr64, "mac", st.mac)) == NULL ||
		(line = json_dumps(req, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL ||
		(ctx = SSL_CTX_new(TLS_client_method())) == NULL ||
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
		X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), in->keys->node_ca) != 1 ||
		(ssl = SSL_new(ctx)) == NULL || SSL_set_fd(ssl, fd) != 1)
	{
		snprintf(err, errlen, "cannot set up TLS to the site agent");
		goto out;
	}
	SSL_set_verify(ssl, SSL_VERIFY_PEER, NULL);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
	{
		snprintf(err, errlen, "cannot set up the connection to the site agent");
		goto out;
	}
	while ((r = SSL_connect(ssl)) != 1 && bcd_ssl_wait(ssl, fd, r, deadline) == 0)
		;
	if (r != 1 || SSL_get_verify_result(ssl) != X509_V_OK || SSL_get0_peer_certificate(ssl) == NULL)
	{
		handshake_failure(ssl, r, st.site_agent, err, errlen);
		goto out;
	}
	{
		size_t		n = strlen(line);

		line[n] = '\n';			/* json_dumps left room for its NUL */
		while ((r = SSL_write(ssl, line, (int) n + 1)) <= 0 && bcd_ssl_wait(ssl, fd, r, deadline) == 0)
			;
		if (r != (int) n + 1)
		{
			snprintf(err, errlen, "the site agent %s closed the connection", st.site_agent);
			goto out;
		}
		line[n] = '\0';
	}
	for (;;)
	{
		int			n = SSL_read(ssl, buf + len, (int) (sizeof(buf) - 1 - len));

		if (n <= 0)
		{
			if (bcd_ssl_wait(ssl, fd, n, deadline) == 0)
				continue;
			break;
		}
		len += (size_t) n;
		if (memchr(buf, '\n', len) != NULL || len == sizeof(buf) - 1)
			break;
	}
	if (len == 0 || buf[len - 1] != '\n')
	{
		snprintf(err, errlen, "the site agent %s sent no answer line", st.site_agent);
		goto out;
	}
	ans = json_loadb(buf, len - 1, JSON_REJECT_DUPLICATES, NULL);
	assertion = json_string_value(json_object_get(ans, "assertion"));
	word = json_string_value(json_object_get(ans, "error"));
	if (word != NULL && json_object_size(ans) == 1)
	{
		*retry = strcmp(word, BCD_DISCOVERY_UNAVAILABLE) == 0;
		snprintf(err, errlen, "the site agent answered %.64s", word);
		goto out;
	}
	if (assertion == NULL || json_object_size(ans) != 1 || strlen(assertion) > BC_PROOF_MAX ||
		strspn(assertion, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.") !=
		strlen(assertion))
	{
		*retry = 0;
		snprintf(err, errlen, "the site agent's answer is not {\"assertion\": JWS}");
		goto out;
	}
	out = strdup(assertion);
	if (out == NULL)
		snprintf(err, errlen, "out of memory");
out:
	if (ssl != NULL)
	{
		(void) SSL_shutdown(ssl);
		SSL_free(ssl);
	}
	SSL_CTX_free(ctx);
	if (fd >= 0)
		close(fd);
	ERR_clear_error();
	signal(SIGPIPE, old_pipe);
	json_decref(ans);
	json_decref(req);
	free(line);
	free(csr64);
	return out;
}

static const bcd_producer_option options[] = {
	{"site-agent", "H:P", "the site agent's bcd serve-discovery, HOST:PORT;\n"
	 "its TLS certificate must be one of the pinned node CA"},
	{"mac", "MAC", "this machine's MAC, aa:bb:cc:dd:ee:ff (lower-case)"},
	{NULL, NULL, NULL}
};

static const char *
set_option(const char *name, const char *arg)
{
	if (strcmp(name, "site-agent") == 0)
		st.site_agent = arg;
	else if (strcmp(name, "mac") == 0)
		st.mac = arg;
	return NULL;
}

/* It serves the join: a site agent to ask, this machine's MAC, the ramdisk's token. */
static const char *
configure(const bcd_producer_setup *setup)
{
	if (st.site_agent == NULL || st.mac == NULL)
		return "--gateway, --gateway-ca, --service-keys, --site-agent and --mac are required";
	if (!setup->has_token)
		return "one of --token-file and --token is required (the ramdisk's join token)";
	if (strchr(st.site_agent, ':') == NULL || strchr(st.site_agent, '/') != NULL)
		return "--site-agent must be HOST:PORT";
	if (!bc_mac_valid(st.mac))
		return "--mac must be six lower-case hex pairs, aa:bb:cc:dd:ee:ff";
	return NULL;
}

/* The evidence: the sealed token and base64url of {"assertion": JWS}. */
static int
produce(const bcd_producer_input *in, bcd_evidence *out, char *err, size_t errlen)
{
	char	   *assertion;
	char	   *doc;
	int			retry = 0;
	int			rc;

	memset(out, 0, sizeof(*out));
	rc = bcd_seal_token(in, out, err, errlen);
	if (rc != BC_OK)
		return rc;
	if (out->sealed_token == NULL)
	{
		snprintf(err, errlen, "discovery needs the ramdisk's join token (--token-file)");
		return BC_EINVAL;
	}
	assertion = ask_site_agent(in, &retry, err, errlen);
	if (assertion == NULL)
	{
		bcd_evidence_free(out);
		return retry ? BCD_PRODUCER_RETRY : BC_EINVAL;
	}
	doc = malloc(strlen(assertion) + sizeof("{\"assertion\":\"\"}"));
	if (doc != NULL)
	{
		sprintf(doc, "{\"assertion\":\"%s\"}", assertion);
		out->attestation = bc_b64url_encode_alloc((const unsigned char *) doc, strlen(doc));
	}
	free(doc);
	free(assertion);
	if (out->attestation == NULL)
	{
		bcd_evidence_free(out);
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	return BC_OK;
}

const bcd_producer bcd_producer_discovery = {
	.attestor = BC_ATTESTOR_DISCOVERY,
	.summary = "bcd ramdisk's default: the join token and a site agent's assertion",
	.commands = BCD_CMD_RAMDISK,
	.default_for = BCD_CMD_RAMDISK,
	.options = options,
	.set_option = set_option,
	.configure = configure,
	.produce = produce,
};
