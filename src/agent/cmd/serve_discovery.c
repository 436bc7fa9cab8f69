/*
 * serve_discovery.c: `bcd serve-discovery`, the site agent's endpoint on the
 * provisioning network: a PXE-booted ramdisk (bcd ramdisk) asks it for the
 * discovery assertion of its MAC, bound to the CSR of the key it made in
 * memory (core/discovery.h has the protocol).
 *
 * Next to the site agent's bcd run, on its state directory (read, never
 * locked or written: the credential is read again for every connection, so
 * a renewal takes effect at once).  TLS with the site agent's node
 * certificate and key; one connection at a time, each bounded (a request
 * line of 16 KiB, 10 s in all, the handshake included: every TLS call waits
 * through bcd_ssl_wait against that deadline), so a client can delay the
 * next one by at most that (the gateway round trip for the epoch aside).  For each request it asks the service for
 * the site's current epoch (POST /v1/site-epoch, proven by the node key, the
 * signed answer verified), then signs.  The node key must be a key file
 * (not a TPM key).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "cmd/cmd.h"
#include "core/discovery.h"
#include "core/log.h"
#include "core/proof.h"
#include "core/service_keys.h"
#include "core/signals.h"
#include "core/store.h"
#include "core/transport.h"

/* Seconds a connection may last in all, the handshake included. */
#define TOTAL_TIMEOUT 10

typedef struct server
{
	const char *dir;
	long		ttl;
	bcd_service_keys keys;
	bcd_http   *http;
	SSL_CTX    *ctx;			/* for the serial below */
	char		serial[41];
	unsigned long served;
	unsigned long refused;
} server;

static void
serve_usage(FILE *stream)
{
	fputs("usage: bcd serve-discovery --state-dir DIR --service-keys FILE --gateway URL\n"
		  "                           --gateway-ca FILE --listen HOST:PORT [--ttl SECONDS]\n"
		  "\n"
		  "The site agent's endpoint for PXE-booted ramdisks (docs/agent.md, \"bcd\n"
		  "serve-discovery\"): TLS with the node certificate in DIR; a ramdisk sends\n"
		  "one line {\"csr\":\"<base64url DER>\",\"mac\":\"aa:bb:cc:dd:ee:ff\"} and gets\n"
		  "{\"assertion\":\"<JWS>\"}, signed with the node key for the site's current\n"
		  "epoch (asked of the service through the gateway), or {\"error\":WORD}.\n"
		  "  --state-dir DIR   the site agent's bcd run state directory (read only)\n"
		  "  --listen H:P      the address to listen on ([v6]:port for IPv6)\n"
		  "  --ttl S           lifetime of each assertion (default 600, [1, 3600])\n"
		  "Runs until SIGTERM or SIGINT (exit 0).\n", stream);
}

/* A listening socket on "host:port" ("[v6]:port"); -1 (err set) otherwise. */
static int
listen_on(const char *spec, char *err, size_t errlen)
{
	char		host[256];
	const char *colon = strrchr(spec, ':');
	const char *h = spec;
	size_t		hl;
	struct addrinfo hints, *res = NULL, *ai;
	int			fd = -1;
	int			one = 1;
	int			rc;

	if (colon == NULL || colon[1] == '\0')
	{
		snprintf(err, errlen, "--listen must be HOST:PORT");
		return -1;
	}
	hl = (size_t) (colon - spec);
	if (hl >= 2 && spec[0] == '[' && spec[hl - 1] == ']')
	{
		h = spec + 1;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
	{
		snprintf(err, errlen, "--listen must be HOST:PORT");
		return -1;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0)
	{
		snprintf(err, errlen, "--listen %s: %s", spec, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next)
	{
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
			bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0)
			break;
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(errno));
	freeaddrinfo(res);
	return fd;
}

/*
 * Add the certificates after the leaf of dir/node-chain.pem to ctx's chain,
 * when that leaf is leaf (a renewal in between: BC_EINVAL, made again later).
 */
static int
add_chain(SSL_CTX *ctx, const char *dir, X509 *leaf)
{
	X509	   *certs[BCD_CHAIN_MAX];
	size_t		n = 0;
	size_t		i;
	int			rc;

	rc = bcd_store_read_chain(dir, certs, BCD_CHAIN_MAX, &n);
	if (rc == BC_OK && X509_cmp(certs[0], leaf) != 0)
		rc = BC_EINVAL;
	for (i = 1; i < n && rc == BC_OK; i++)
		if (SSL_CTX_add1_chain_cert(ctx, certs[i]) != 1)
			rc = BC_ECRYPTO;
	for (i = 0; i < n; i++)
		X509_free(certs[i]);
	return rc;
}

/* The TLS context for cred (made again when the serial changed). */
static SSL_CTX *
context_for(server *s, const bcd_credential *cred)
{
	SSL_CTX    *ctx;

	if (s->ctx != NULL && strcmp(s->serial, cred->serial) == 0)
		return s->ctx;
	ctx = SSL_CTX_new(TLS_server_method());
	if (ctx == NULL || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
		SSL_CTX_use_certificate(ctx, cred->leaf) != 1 ||
		SSL_CTX_use_PrivateKey(ctx, cred->key) != 1 || SSL_CTX_check_private_key(ctx) != 1)
	{
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	/* The chain as answered (the issuing intermediate ..): a ramdisk pins the root only. */
	if (add_chain(ctx, s->dir, cred->leaf) != BC_OK)
	{
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_free(s->ctx);
	s->ctx = ctx;
	memcpy(s->serial, cred->serial, sizeof(s->serial));
	return ctx;
}

/* The site and its epoch, as the service signs them for cred; 0 on success. */
static int
site_epoch(server *s, const bcd_credential *cred, char **site, long long *epoch)
{
	char	   *proof = bcd_node_proof(cred, BC_PURPOSE_SITE_EPOCH, NULL);
	json_t	   *body = proof != NULL ? json_pack("{s:s}", "proof", proof) : NULL;
	char	   *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
	json_t	   *p = NULL;
	const char *sid;
	int			rc = -1;

	*site = NULL;
	if (text != NULL)
		p = bcd_node_exchange(s->http, &s->keys, cred, BC_PATH_SITE_EPOCH, text,
							  BC_PURPOSE_SITE_EPOCH);
	sid = json_string_value(json_object_get(p, "siteId"));
	if (sid != NULL && json_is_integer(json_object_get(p, "epoch")) &&
		strcmp(json_string_value(json_object_get(p, "serial")) != NULL ?
			   json_string_value(json_object_get(p, "serial")) : "", cred->serial) == 0 &&
		(*site = strdup(sid)) != NULL)
	{
		*epoch = (long long) json_integer_value(json_object_get(p, "epoch"));
		rc = 0;
	}
	json_decref(p);
	free(text);
	json_decref(body);
	free(proof);
	return rc;
}

/* Read one line (at most BCD_DISCOVERY_LINE_MAX with its newline) within the deadline. */
static long
read_line(SSL *ssl, int fd, char *buf, size_t cap, long long deadline)
{
	size_t		len = 0;

	while (len < cap)
	{
		int			n = SSL_read(ssl, buf + len, (int) (cap - len));
		char	   *nl;

		if (n <= 0)
		{
			if (bcd_ssl_wait(ssl, fd, n, deadline) != 0)
				return -1;
			continue;
		}
		nl = memchr(buf + len, '\n', (size_t) n);
		len += (size_t) n;
		if (nl != NULL)
			return nl - buf;
	}
	return -1;					/* over the bound */
}

static void
answer(SSL *ssl, int fd, long long deadline, const char *key, const char *value)
{
	json_t	   *doc = json_pack("{s:s}", key, value);
	char	   *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;

	if (text != NULL)
	{
		size_t		n = strlen(text);
		int			r;

		text[n] = '\n';			/* json_dumps leaves room for its NUL */
		while ((r = SSL_write(ssl, text, (int) n + 1)) <= 0 &&
			   bcd_ssl_wait(ssl, fd, r, deadline) == 0)
			;
		text[n] = '\0';
	}
	free(text);
	json_decref(doc);
}

/*
 * After refusing a line still being sent: read (and drop) what else comes,
 * a bounded amount until the deadline, so that closing does not reset the
 * connection before the client has read the answer.
 */
static void
drain(SSL *ssl, int fd, long long deadline)
{
	char		sink[4096];
	size_t		total = 0;

	while (total < 4 * BCD_DISCOVERY_LINE_MAX)
	{
		int			n = SSL_read(ssl, sink, sizeof(sink));

		if (n <= 0)
		{
			if (bcd_ssl_wait(ssl, fd, n, deadline) != 0)
				break;
			continue;
		}
		total += (size_t) n;
		if (memchr(sink, '\n', (size_t) n) != NULL)
			break;
	}
}

/* One connection: TLS, one request line, one answer. */
static void
serve_one(server *s, int fd, const char *peer)
{
	static char line[BCD_DISCOVERY_LINE_MAX];
	long long	deadline = bcd_monotonic_ms() + TOTAL_TIMEOUT * 1000LL;
	bcd_credential cred;
	char		err[512];
	char		mac[18];
	unsigned char *csr = NULL;
	size_t		csr_len = 0;
	char	   *site = NULL;
	char	   *jws = NULL;
	long long	epoch = 0;
	SSL_CTX    *ctx;
	SSL		   *ssl = NULL;
	long		n;
	int			r;

	memset(&cred, 0, sizeof(cred));
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
		goto out;
	if (bcd_store_load(s->dir, &s->keys, &cred, err, sizeof(err)) != BC_OK)
	{
		bcd_log("discovery: %s: no credential to serve with: %s", peer, err);
		goto out;
	}
	if ((int64_t) time(NULL) >= cred.not_after)
	{
		bcd_log("discovery: %s: the certificate %s expired at %s", peer, cred.serial,
				cred.not_after_text);
		goto out;
	}
	if ((ctx = context_for(s, &cred)) == NULL || (ssl = SSL_new(ctx)) == NULL ||
		SSL_set_fd(ssl, fd) != 1)
	{
		bcd_log("discovery: %s: cannot set up TLS with the node certificate", peer);
		goto out;
	}
	while ((r = SSL_accept(ssl)) != 1)
	{
		if (bcd_ssl_wait(ssl, fd, r, deadline) != 0)
		{
			bcd_log("discovery: %s: TLS handshake failed or took over %d s", peer, TOTAL_TIMEOUT);
			goto out;
		}
	}
	n = read_line(ssl, fd, line, sizeof(line), deadline);
	if (n < 0 || bcd_discovery_parse_request(line, (size_t) n, &csr, &csr_len, mac) != BC_OK)
	{
		s->refused++;
		bcd_log("discovery: %s: refused %s", peer, n < 0 ?
				"a request line not sent whole within 16 KiB and 10 s" :
				"a request that is not {\"csr\",\"mac\"} with a valid CSR and MAC");
		answer(ssl, fd, deadline, "error", BCD_DISCOVERY_BAD_REQUEST);
		drain(ssl, fd, deadline);
		goto out;
	}
	if (site_epoch(s, &cred, &site, &epoch) != 0)
	{
		bcd_log("discovery: %s: the service did not tell the site's epoch", peer);
		answer(ssl, fd, deadline, "error", BCD_DISCOVERY_UNAVAILABLE);
		goto out;
	}
	if (bcd_discovery_sign(&cred, site, mac, epoch, csr, csr_len, s->ttl, &jws) != BC_OK)
	{
		answer(ssl, fd, deadline, "error", BCD_DISCOVERY_UNAVAILABLE);
		goto out;
	}
	answer(ssl, fd, deadline, "assertion", jws);
	s->served++;
	bcd_log("discovery: %s: signed an assertion for %s (site %s, epoch %lld, %ld s)", peer,
			mac, site, epoch, s->ttl);
out:
	if (ssl != NULL)
	{
		(void) SSL_shutdown(ssl);
		SSL_free(ssl);
	}
	if (cred.key != NULL || cred.leaf != NULL)
		bcd_credential_free(&cred);
	free(site);
	free(jws);
	free(csr);
	close(fd);
}

bcd_rc
bcd_cmd_serve_discovery(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"state-dir", required_argument, NULL, 'd'},
		{"service-keys", required_argument, NULL, 's'},
		{"gateway", required_argument, NULL, 'g'},
		{"gateway-ca", required_argument, NULL, 'C'},
		{"listen", required_argument, NULL, 'l'},
		{"ttl", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *keys_path = NULL, *gateway = NULL, *gateway_ca = NULL, *listen_spec = NULL;
	server		s;
	char		err[512];
	char	   *end;
	int			lfd = -1;
	int			have_keys = 0;
	bcd_rc		rc = BCD_RC_FAILED;
	int			c;

	memset(&s, 0, sizeof(s));
	s.ttl = 600;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd': s.dir = optarg; break;
			case 's': keys_path = optarg; break;
			case 'g': gateway = optarg; break;
			case 'C': gateway_ca = optarg; break;
			case 'l': listen_spec = optarg; break;
			case 't':
				s.ttl = strtol(optarg, &end, 10);
				if (end == optarg || *end != '\0' || s.ttl < 1 || s.ttl > 3600)
				{
					fputs("bcd serve-discovery: --ttl must be seconds in [1, 3600]\n", stderr);
					return BCD_RC_USAGE;
				}
				break;
			case 'h':
				serve_usage(stdout);
				return BCD_RC_OK;
			default:
				serve_usage(stderr);
				return BCD_RC_USAGE;
		}
	}
	if (optind != argc || s.dir == NULL || keys_path == NULL || gateway == NULL ||
		gateway_ca == NULL || listen_spec == NULL)
	{
		serve_usage(stderr);
		return BCD_RC_USAGE;
	}
	if (strncmp(gateway, "https://", 8) != 0)
	{
		fputs("bcd serve-discovery: --gateway must be an https:// URL\n", stderr);
		return BCD_RC_USAGE;
	}
	bcd_signals_block();
	signal(SIGPIPE, SIG_IGN);	/* a client gone mid-answer is not our end */
	if (bcd_service_keys_load(keys_path, &s.keys, err, sizeof(err)) != BC_OK)
	{
		bcd_log("%s", err);
		goto out;
	}
	have_keys = 1;
	if ((s.http = bcd_http_new(gateway, gateway_ca, err, sizeof(err))) == NULL ||
		(lfd = listen_on(listen_spec, err, sizeof(err))) < 0)
	{
		bcd_log("%s", err);
		goto out;
	}
	bcd_log("discovery: listening on %s for ramdisks (assertions of %ld s)", listen_spec, s.ttl);
	while (!bcd_stop_requested())
	{
		struct pollfd pfd = {lfd, POLLIN, 0};
		struct sockaddr_storage sa;
		socklen_t	salen = sizeof(sa);
		char		host[NI_MAXHOST], port[NI_MAXSERV], peer[NI_MAXHOST + NI_MAXSERV + 4];
		int			fd;

		if (poll(&pfd, 1, 200) <= 0)
			continue;
		fd = accept4(lfd, (struct sockaddr *) &sa, &salen, SOCK_CLOEXEC);
		if (fd < 0)
		{
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				(void) bcd_sleep(0.2);	/* no spinning while descriptors are short */
			continue;
		}
		if (getnameinfo((struct sockaddr *) &sa, salen, host, sizeof(host), port, sizeof(port),
						NI_NUMERICHOST | NI_NUMERICSERV) != 0)
			snprintf(peer, sizeof(peer), "?");
		else
			snprintf(peer, sizeof(peer), "%s:%s", host, port);
		serve_one(&s, fd, peer);
		ERR_clear_error();
	}
	bcd_log("discovery: stopped by a signal (%lu assertions signed, %lu requests refused)",
			s.served, s.refused);
	rc = BCD_RC_OK;
out:
	if (lfd >= 0)
		close(lfd);
	SSL_CTX_free(s.ctx);
	bcd_http_free(s.http);
	if (have_keys)
		bcd_service_keys_free(&s.keys);
	return rc;
}
