/*
 * discovery_assertion.h: the site agent's discovery assertion and the
 * small protocol by which a ramdisk asks its site agent for one
 * (docs/agent.md, "bcd serve-discovery"), shared by bcd
 * sign-discovery-assertion, bcd serve-discovery and bcd ramdisk's producer
 * (producers/discovery.c; the extension's attestor is
 * src/ext/attestors/discovery.c).
 *
 * The protocol: over TLS (the site agent's node certificate, pinned by the
 * ramdisk to the node CA), the ramdisk sends one line
 *   {"csr": "<base64url DER>", "mac": "aa:bb:cc:dd:ee:ff"}\n
 * (at most BCD_DISCOVERY_LINE_MAX bytes with the newline) and the site agent
 * answers one line, {"assertion": "<JWS>"} or {"error": "<word>"}, then
 * closes.
 */
#ifndef BCD_DISCOVERY_ASSERTION_H
#define BCD_DISCOVERY_ASSERTION_H

#include <stddef.h>

#include "core/store.h"

/* One request line, the newline included, at most. */
#define BCD_DISCOVERY_LINE_MAX 16384
/* The "error" words of an answer. */
#define BCD_DISCOVERY_BAD_REQUEST "bad-request"
#define BCD_DISCOVERY_UNAVAILABLE "unavailable"

/*
 * After an OpenSSL call on a non-blocking socket fd returned ret: wait until
 * it may go on (0: call it again), or -1 when it failed for good or
 * deadline_ms (bcd_now_ms, core/clock.h) passed.  Every read, write and
 * handshake of the discovery protocol goes through it, so a peer that
 * trickles bytes cannot hold either side past its deadline.
 */
struct ssl_st;
int			bcd_ssl_wait(struct ssl_st *ssl, int fd, int ret, long long deadline_ms);

/*
 * The assertion: a JWS ES256 by cred's key over {"purpose":"discovery",
 * "serial","siteId","mac","epoch","csrSha256","iat","exp": iat + ttl};
 * malloc()ed into *jws.  BC_OK or a BC_E* status.
 */
int			bcd_discovery_sign(const bcd_credential *cred, const char *site, const char *mac,
							   long long epoch, const unsigned char *csr, size_t csr_len,
							   long ttl, char **jws);

/*
 * Parse one request line (without its newline): exactly "csr" (base64url of a
 * CSR whose signature verifies, at most BC_CSR_B64_MAX characters) and "mac"
 * (bc_mac_valid, bc_protocol.h).  BC_OK with *csr (malloc()ed DER) and mac filled, or
 * BC_EINVAL (nothing to free).
 */
int			bcd_discovery_parse_request(const char *line, size_t len, unsigned char **csr,
										size_t *csr_len, char mac[18]);

#endif							/* BCD_DISCOVERY_ASSERTION_H */
