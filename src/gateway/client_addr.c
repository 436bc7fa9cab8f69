/* client_addr.c: the client address of a request, with trusted proxies. */
#include "client_addr.h"

#include <arpa/inet.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#define XFF_MAX_HOPS 64

/* Turn an IPv4-mapped IPv6 address into plain IPv4. */
static void
unmap_v4(struct gw_addr *a)
{
	static const unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (a->family == AF_INET6 && memcmp(a->b, prefix, 12) == 0)
	{
		memmove(a->b, a->b + 12, 4);
		memset(a->b + 4, 0, 12);
		a->family = AF_INET;
	}
}

/* Parse "1.2.3.4", "1.2.3.4:5", "::1" or "[::1]:5"; 0 on success. */
int
gw_addr_parse(const char *s, size_t n, struct gw_addr *out)
{
	char		buf[64];
	char	   *p;
	char	   *colon;

	while (n > 0 && (*s == ' ' || *s == '\t'))
		s++, n--;
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	p = buf;
	memset(out, 0, sizeof(*out));
	if (p[0] == '[')
	{
		char	   *close = strchr(p, ']');

		if (close == NULL)
			return -1;
		*close = '\0';
		p++;
	}
	else
	{
		colon = strchr(p, ':');
		/* exactly one colon: IPv4 with a port */
		if (colon != NULL && strchr(colon + 1, ':') == NULL)
			*colon = '\0';
	}
	if (inet_pton(AF_INET, p, out->b) == 1)
		out->family = AF_INET;
	else if (inet_pton(AF_INET6, p, out->b) == 1)
		out->family = AF_INET6;
	else
		return -1;
	unmap_v4(out);
	return 0;
}

/* Whether addr lies inside range. */
int
gw_addr_in_cidr(const struct gw_addr *addr, const struct gw_cidr *range)
{
	int			full;
	int			rest;

	if (addr->family != range->family)
		return 0;
	full = range->prefix / 8;
	rest = range->prefix % 8;
	if (memcmp(addr->b, range->addr, (size_t) full) != 0)
		return 0;
	if (rest != 0)
	{
		unsigned char mask = (unsigned char) (0xff << (8 - rest));

		if ((addr->b[full] & mask) != (range->addr[full] & mask))
			return 0;
	}
	return 1;
}

/* Write addr in its usual text form to buf. */
void
gw_addr_format(const struct gw_addr *addr, char *buf, size_t len)
{
	if (inet_ntop(addr->family, addr->b, buf, (socklen_t) len) == NULL && len > 0)
		buf[0] = '\0';
}

/* Whether addr is inside one of the configured trusted proxy ranges. */
static int
is_trusted(const struct gw_config *cfg, const struct gw_addr *addr)
{
	for (int i = 0; i < cfg->nproxies; i++)
		if (gw_addr_in_cidr(addr, &cfg->proxies[i]))
			return 1;
	return 0;
}

/* Collect the hops of every X-Forwarded-For header, left to right; their count. */
static int
collect_hops(const struct evkeyvalq *headers, const char **start, size_t *len)
{
	const struct evkeyval *h;
	int			n = 0;

	TAILQ_FOREACH(h, headers, next)
	{
		const char *p;

		if (strcasecmp(h->key, "X-Forwarded-For") != 0)
			continue;
		p = h->value;
		for (;;)
		{
			const char *comma = strchr(p, ',');
			size_t		l = comma != NULL ? (size_t) (comma - p) : strlen(p);

			/* keep the right-most XFF_MAX_HOPS: they are the ones walked */
			if (n == XFF_MAX_HOPS)
			{
				memmove(start, start + 1, sizeof(*start) * (XFF_MAX_HOPS - 1));
				memmove(len, len + 1, sizeof(*len) * (XFF_MAX_HOPS - 1));
				n--;
			}
			start[n] = p;
			len[n] = l;
			n++;
			if (comma == NULL)
				break;
			p = comma + 1;
		}
	}
	return n;
}

/* The client address of a request: the peer, or the first untrusted XFF hop from the right. */
int
gw_client_address(const struct gw_config *cfg, const char *peer,
				  const struct evkeyvalq *headers, struct gw_addr *out)
{
	const char *start[XFF_MAX_HOPS];
	size_t		len[XFF_MAX_HOPS];
	struct gw_addr hop;
	int			n;

	if (peer == NULL || gw_addr_parse(peer, strlen(peer), out) != 0)
		return -1;
	if (!is_trusted(cfg, out) || headers == NULL)
		return 0;
	n = collect_hops(headers, start, len);
	for (int i = n - 1; i >= 0; i--)
	{
		/* an unparsable hop ends the walk: the last address we trust to be right stands */
		if (gw_addr_parse(start[i], len[i], &hop) != 0)
			return 0;
		*out = hop;
		if (!is_trusted(cfg, &hop))
			return 0;
	}
	return 0;
}
