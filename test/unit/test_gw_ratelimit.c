/*
 * test_gw_ratelimit.c: cmocka tests of bc-gateway's rate limit
 * (ratelimit.c: a token bucket per client address in a bounded LRU table)
 * and of the address it is keyed by (client_addr.c: the TCP peer, or with a
 * trusted proxy the right-most untrusted X-Forwarded-For hop).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <cmocka.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "client_addr.h"
#include "config.h"
#include "ratelimit.h"

/* The address s (parsed by the gateway's own parser). */
static struct gw_addr
addr(const char *s)
{
	struct gw_addr a;

	assert_int_equal(gw_addr_parse(s, strlen(s), &a), 0);
	return a;
}

/* A burst of B is taken at once; then a token every 1/rate seconds, retry-after the wait for it. */
static void
test_take_and_refill(void **state)
{
	struct gw_ratelimit *rl = gw_ratelimit_new(2, 3, 16);
	struct gw_addr a = addr("192.0.2.1");
	double		retry = -1;

	(void) state;
	assert_non_null(rl);
	for (int i = 0; i < 3; i++)
	{
		assert_int_equal(gw_ratelimit_take(rl, &a, 100.0, &retry), 1);
		assert_true(retry == 0);
	}
	assert_int_equal(gw_ratelimit_take(rl, &a, 100.0, &retry), 0);
	assert_true(retry > 0.499 && retry < 0.501);
	/* a quarter second later: half a token, still limited, a quarter second to go */
	assert_int_equal(gw_ratelimit_take(rl, &a, 100.25, &retry), 0);
	assert_true(retry > 0.249 && retry < 0.251);
	assert_int_equal(gw_ratelimit_take(rl, &a, 100.5, &retry), 1);
	assert_int_equal(gw_ratelimit_take(rl, &a, 100.5, &retry), 0);
	/* a long pause refills to the burst, not beyond */
	for (int i = 0; i < 3; i++)
		assert_int_equal(gw_ratelimit_take(rl, &a, 1000.0, &retry), 1);
	assert_int_equal(gw_ratelimit_take(rl, &a, 1000.0, &retry), 0);
	/* a clock that goes back adds nothing */
	assert_int_equal(gw_ratelimit_take(rl, &a, 900.0, &retry), 0);
	gw_ratelimit_free(rl);
}

/* Each address has its own bucket; an IPv4-mapped IPv6 address is its IPv4 one. */
static void
test_buckets_per_address(void **state)
{
	struct gw_ratelimit *rl = gw_ratelimit_new(1, 1, 16);
	struct gw_addr a = addr("192.0.2.1");
	struct gw_addr b = addr("192.0.2.2");
	struct gw_addr v6 = addr("2001:db8::1");
	struct gw_addr mapped = addr("::ffff:192.0.2.1");
	double		retry;

	(void) state;
	assert_non_null(rl);
	assert_int_equal(gw_ratelimit_take(rl, &a, 1.0, &retry), 1);
	assert_int_equal(gw_ratelimit_take(rl, &b, 1.0, &retry), 1);
	assert_int_equal(gw_ratelimit_take(rl, &v6, 1.0, &retry), 1);
	assert_int_equal(gw_ratelimit_take(rl, &a, 1.0, &retry), 0);
	assert_int_equal(gw_ratelimit_take(rl, &mapped, 1.0, &retry), 0);
	gw_ratelimit_free(rl);
}

/* A full table evicts the least recently seen address: it comes back with a full bucket. */
static void
test_lru_eviction(void **state)
{
	struct gw_ratelimit *rl = gw_ratelimit_new(0.001, 1, 2);
	struct gw_addr a = addr("192.0.2.1");
	struct gw_addr b = addr("192.0.2.2");
	struct gw_addr c = addr("192.0.2.3");
	double		retry;

	(void) state;
	assert_non_null(rl);
	assert_int_equal(gw_ratelimit_take(rl, &a, 1.0, &retry), 1);
	assert_int_equal(gw_ratelimit_take(rl, &b, 1.0, &retry), 1);
	assert_int_equal(gw_ratelimit_take(rl, &a, 1.0, &retry), 0);	/* a seen last */
	assert_int_equal(gw_ratelimit_take(rl, &c, 1.0, &retry), 1);	/* evicts b */
	assert_int_equal(gw_ratelimit_take(rl, &a, 1.0, &retry), 0);	/* a kept its empty bucket */
	assert_int_equal(gw_ratelimit_take(rl, &b, 1.0, &retry), 1);	/* b is new again; evicts c */
	assert_int_equal(gw_ratelimit_take(rl, &c, 1.0, &retry), 1);
	gw_ratelimit_free(rl);
}

/* The client address of a request from peer with these X-Forwarded-For headers (NULL-terminated). */
static const char *
client(const struct gw_config *cfg, const char *peer, const char *const *xff, char *buf, size_t len)
{
	struct evkeyvalq headers;
	struct gw_addr out;

	TAILQ_INIT(&headers);
	evhttp_add_header(&headers, "Host", "gateway");
	for (int i = 0; xff != NULL && xff[i] != NULL; i++)
		evhttp_add_header(&headers, i % 2 ? "x-forwarded-for" : "X-Forwarded-For", xff[i]);
	if (gw_client_address(cfg, peer, &headers, &out) != 0)
		strcpy(buf, "(none)");
	else
		gw_addr_format(&out, buf, len);
	evhttp_clear_headers(&headers);
	return buf;
}

/* X-Forwarded-For counts only from a trusted proxy, walked right to left past trusted hops. */
static void
test_trusted_proxies(void **state)
{
	struct gw_config cfg;
	char		buf[64];

	(void) state;
	memset(&cfg, 0, sizeof(cfg));
	assert_int_equal(gw_cidr_parse("10.0.0.0/8", &cfg.proxies[0]), 0);
	assert_int_equal(gw_cidr_parse("2001:db8::/32", &cfg.proxies[1]), 0);
	cfg.nproxies = 2;

	/* a direct client cannot choose its bucket */
	assert_string_equal(client(&cfg, "198.51.100.7", (const char *[]) {"203.0.113.9", NULL}, buf, sizeof(buf)),
						"198.51.100.7");
	/* behind the balancer, the client's own address */
	assert_string_equal(client(&cfg, "10.1.1.1", (const char *[]) {"203.0.113.9", NULL}, buf, sizeof(buf)),
						"203.0.113.9");
	/* a forged left-most hop does not move it */
	assert_string_equal(client(&cfg, "10.1.1.1", (const char *[]) {"6.6.6.6, 203.0.113.9", NULL}, buf, sizeof(buf)),
						"203.0.113.9");
	/* trusted hops skipped, over several headers in order */
	assert_string_equal(client(&cfg, "10.1.1.1", (const char *[]) {"203.0.113.9, 10.2.2.2", "2001:db8::5", NULL},
								buf, sizeof(buf)), "203.0.113.9");
	/* an unparsable hop ends the walk: the last trusted hop stands */
	assert_string_equal(client(&cfg, "10.1.1.1", (const char *[]) {"203.0.113.9, junk, 10.2.2.2", NULL},
								buf, sizeof(buf)), "10.2.2.2");
	/* every hop trusted: the left-most */
	assert_string_equal(client(&cfg, "10.1.1.1", (const char *[]) {"10.3.3.3, 10.2.2.2", NULL}, buf, sizeof(buf)),
						"10.3.3.3");
	/* an IPv4-mapped peer is its IPv4 address, trusted as such */
	assert_string_equal(client(&cfg, "::ffff:10.1.1.1", (const char *[]) {"203.0.113.9", NULL}, buf, sizeof(buf)),
						"203.0.113.9");
	/* no headers, no peer */
	assert_string_equal(client(&cfg, "10.1.1.1", NULL, buf, sizeof(buf)), "10.1.1.1");
	assert_string_equal(client(&cfg, NULL, NULL, buf, sizeof(buf)), "(none)");
	/* without --trusted-proxy nobody is trusted */
	cfg.nproxies = 0;
	assert_string_equal(client(&cfg, "10.1.1.1", (const char *[]) {"203.0.113.9", NULL}, buf, sizeof(buf)),
						"10.1.1.1");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_and_refill),
		cmocka_unit_test(test_buckets_per_address),
		cmocka_unit_test(test_lru_eviction),
		cmocka_unit_test(test_trusted_proxies),
	};

	return cmocka_run_group_tests_name("gw_ratelimit", tests, NULL, NULL);
}
