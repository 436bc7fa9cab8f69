/* client_addr.h: the client address of a request, with trusted proxies. */
#ifndef BC_GATEWAY_CLIENT_ADDR_H
#define BC_GATEWAY_CLIENT_ADDR_H

#include <stddef.h>

#include "config.h"

struct evkeyvalq;

/* An IPv4 (first 4 bytes) or IPv6 address; IPv4-mapped IPv6 is stored as IPv4. */
struct gw_addr
{
	int				family;
	unsigned char	b[16];
};

/* Parse "1.2.3.4", "1.2.3.4:5", "::1" or "[::1]:5" (spaces around allowed); 0 on success. */
int			gw_addr_parse(const char *s, size_t n, struct gw_addr *out);

/* Whether addr lies inside range. */
int			gw_addr_in_cidr(const struct gw_addr *addr, const struct gw_cidr *range);

/* Write addr in its usual text form to buf. */
void		gw_addr_format(const struct gw_addr *addr, char *buf, size_t len);

/*
 * The client address: the TCP peer, unless the peer is a trusted proxy, in
 * which case X-Forwarded-For is walked right to left, skipping trusted
 * proxies; the first untrusted address is the client.  0 on success.
 */
int			gw_client_address(const struct gw_config *cfg, const char *peer,
							  const struct evkeyvalq *headers, struct gw_addr *out);

#endif
