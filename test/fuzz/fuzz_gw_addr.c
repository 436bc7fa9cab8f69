/*
 * fuzz_gw_addr.c: bc-gateway's client address: gw_addr_parse (the TCP peer
 * and every X-Forwarded-For hop), gw_cidr_parse, and gw_client_address's
 * walk of X-Forwarded-For behind fixed trusted proxies.  Input: the first
 * line is the peer, every further line one X-Forwarded-For header value (at
 * most 32), any other header name when the line starts with '!'.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "client_addr.h"
#include "config.h"
#include "fuzz_common.h"

static struct gw_config cfg;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char *const proxies[] = {"10.0.0.0/8", "127.0.0.1", "::1", "2001:db8::/33",
	"192.168.1.0/25"};

	(void) argc;
	(void) argv;
	for (size_t i = 0; i < sizeof(proxies) / sizeof(proxies[0]); i++)
		BC_FUZZ_ASSERT(gw_cidr_parse(proxies[i], &cfg.proxies[cfg.nproxies++]) == 0);
	return 0;
}

/* A parsed address formats to text that parses back to itself. */
static void
round_trip(const struct gw_addr *a)
{
	char		buf[64];
	struct gw_addr b;

	gw_addr_format(a, buf, sizeof(buf));
	BC_FUZZ_ASSERT(buf[0] != '\0');
	BC_FUZZ_ASSERT(gw_addr_parse(buf, strlen(buf), &b) == 0);
	BC_FUZZ_ASSERT(a->family == b.family && memcmp(a->b, b.b, 16) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = malloc(size + 1);
	char	   *line;
	char	   *save = NULL;
	char	   *peer;
	struct evkeyvalq headers;
	struct gw_addr a;
	struct gw_addr peer_addr;
	struct gw_cidr cidr;
	int			n = 0;

	BC_FUZZ_ASSERT(text != NULL);
	memcpy(text, data, size);
	text[size] = '\0';
	/* the raw bytes, NULs included, as one address */
	if (gw_addr_parse((const char *) data, size, &a) == 0)
		round_trip(&a);
	TAILQ_INIT(&headers);
	peer = strtok_r(text, "\n", &save);
	if (peer != NULL)
	{
		if (gw_addr_parse(peer, strlen(peer), &a) == 0)
			round_trip(&a);
		if (gw_cidr_parse(peer, &cidr) == 0)
			BC_FUZZ_ASSERT(cidr.prefix >= 0 && cidr.prefix <= (cidr.family == AF_INET ? 32 : 128));
		while (n < 32 && (line = strtok_r(NULL, "\n", &save)) != NULL)
		{
			if (line[0] == '!')
				(void) evhttp_add_header(&headers, "X-Other", line + 1);
			else
				(void) evhttp_add_header(&headers, n % 2 ? "x-forwarded-for" : "X-Forwarded-For", line);
			n++;
		}
		if (gw_client_address(&cfg, peer, &headers, &a) == 0)
		{
			round_trip(&a);
			BC_FUZZ_ASSERT(gw_addr_parse(peer, strlen(peer), &peer_addr) == 0);
			/* an untrusted peer is the client, whatever the headers say */
			{
				int			trusted = 0;

				for (int i = 0; i < cfg.nproxies; i++)
					trusted |= gw_addr_in_cidr(&peer_addr, &cfg.proxies[i]);
				if (!trusted)
					BC_FUZZ_ASSERT(memcmp(&a, &peer_addr, sizeof(a)) == 0);
			}
		}
	}
	evhttp_clear_headers(&headers);
	free(text);
	return 0;
}
