/* metrics.h: request counters and latency histograms, Prometheus text format. */
#ifndef BC_GATEWAY_METRICS_H
#define BC_GATEWAY_METRICS_H

#include <stdint.h>

struct evbuffer;

enum gw_endpoint
{
	GW_EP_JOIN = 0,
	GW_EP_RENEW,
	GW_EP_SESSION,
	GW_EP_COMMANDS,
	GW_EP_COMMANDS_COMPLETE,
	GW_EP_SITE_EPOCH,
	GW_EP_AUDIT_ANCHOR,
	GW_EP_SERVICE_KEYS,
	GW_EP_JWT_SVID,
	GW_EP_SPIFFE_BUNDLE,
	GW_EP_OTHER,			/* unknown path or method */
	GW_EP_COUNT
};

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

struct gw_metrics
{
	uint64_t	requests[GW_EP_COUNT][GW_OUT_COUNT];
	uint64_t	hist[GW_EP_COUNT][GW_HIST_BUCKETS];	/* cumulative at render time */
	uint64_t	hist_count[GW_EP_COUNT];
	double		hist_sum[GW_EP_COUNT];
	uint64_t	accept_paused[GW_PAUSE_COUNT];	/* times accepting was paused */
};

/* The label value of an endpoint. */
const char *gw_endpoint_name(enum gw_endpoint ep);

/* The label value of an outcome. */
const char *gw_outcome_name(enum gw_outcome out);

/* Count one finished request that took seconds. */
void		gw_metrics_observe(struct gw_metrics *m, enum gw_endpoint ep,
							   enum gw_outcome out, double seconds);

/* Append the Prometheus text exposition to buf; 0 on success. */
int			gw_metrics_render(const struct gw_metrics *m, const struct gw_gauges *g,
							  struct evbuffer *buf);

#endif
