/* metrics.h: request counters and latency histograms, Prometheus text format. */
#ifndef BC_GATEWAY_METRICS_H
#define BC_GATEWAY_METRICS_H

#include <stdint.h>

#include "routes.h"

struct evbuffer;

enum gw_outcome
{
	GW_OUT_ISSUED = 0,
	GW_OUT_PENDING,
	GW_OUT_CHALLENGE,
	GW_OUT_REFUSED,
	GW_OUT_INVALID,
	GW_OUT_UNSUPPORTED,
	GW_OUT_UNAVAILABLE,
	GW_OUT_ERROR,
	GW_OUT_TOO_LARGE,
	GW_OUT_RATE_LIMITED,
	GW_OUT_TIMEOUT,
	GW_OUT_ATTESTED,			/* /v1/attest's round 2: attested */
	GW_OUT_QUARANTINED,			/* /v1/attest's round 2: the node quarantined */
	GW_OUT_COUNT
};

#define GW_HIST_BUCKETS 13

/* Why accepting was paused. */
enum gw_pause
{
	GW_PAUSE_LIMIT = 0,			/* --max-connections reached */
	GW_PAUSE_NOFD,				/* accept(): EMFILE or ENFILE */
	GW_PAUSE_ERROR,				/* accept(): another error (ENOBUFS, ENOMEM, ...) */
	GW_PAUSE_COUNT
};

/* The gauges /metrics shows besides the counters. */
struct gw_gauges
{
	int			pool_in_use;
	int			pool_size;
	unsigned	connections;
	unsigned	max_connections;
};

/* Per endpoint: a route table row (routes.h), or GW_ENDPOINT_OTHER. */
#define GW_ENDPOINTS (GW_ROUTES_MAX + 1)

struct gw_metrics
{
	uint64_t	requests[GW_ENDPOINTS][GW_OUT_COUNT];
	uint64_t	hist[GW_ENDPOINTS][GW_HIST_BUCKETS];	/* cumulative at render time */
	uint64_t	hist_count[GW_ENDPOINTS];
	double		hist_sum[GW_ENDPOINTS];
	uint64_t	accept_paused[GW_PAUSE_COUNT];	/* times accepting was paused */
};

/* The label value of an outcome. */
const char *gw_outcome_name(enum gw_outcome out);

/* Count one finished request on endpoint (routes.h) that took seconds. */
void		gw_metrics_observe(struct gw_metrics *m, int endpoint,
							   enum gw_outcome out, double seconds);

/*
 * Append the Prometheus text exposition to buf: the requests of every
 * endpoint counted (the route table's rows marked GW_ROUTE_OBSERVED, in its
 * order, then "other"), then the gauges; 0 on success.
 */
int			gw_metrics_render(const struct gw_metrics *m, const struct gw_gauges *g,
							  struct evbuffer *buf);

#endif
