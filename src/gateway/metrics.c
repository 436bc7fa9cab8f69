/* metrics.c: request counters and latency histograms, Prometheus text format. */
#include "metrics.h"

#include "bc_protocol.h"

#include <event2/buffer.h>

static const char *const endpoint_names[GW_EP_COUNT] = {
	"join", "renew", "session", "commands", "commands_complete", "site_epoch", "audit_anchor", "service_keys", "jwt_svid", "spiffe_bundle", "other"
};

static const char *const outcome_names[GW_OUT_COUNT] = {
	BC_STATUS_ISSUED, BC_STATUS_PENDING, BC_STATUS_CHALLENGE, BC_STATUS_REFUSED, "invalid",
	"unsupported",
	"unavailable", "error", "too_large", "rate_limited", "timeout"
};

static const char *const pause_names[GW_PAUSE_COUNT] = {
	"limit", "no_fd", "error"
};

static const double bucket_bounds[GW_HIST_BUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
};

static const char *const bucket_labels[GW_HIST_BUCKETS] = {
	"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
	"1", "2.5", "5", "10"
};

/* The label value of an endpoint. */
const char *
gw_endpoint_name(enum gw_endpoint ep)
{
	return (ep >= 0 && ep < GW_EP_COUNT) ? endpoint_names[ep] : "other";
}

/* The label value of an outcome. */
const char *
gw_outcome_name(enum gw_outcome out)
{
	return (out >= 0 && out < GW_OUT_COUNT) ? outcome_names[out] : "error";
}

/* Count one finished request that took seconds. */
void
gw_metrics_observe(struct gw_metrics *m, enum gw_endpoint ep,
				   enum gw_outcome out, double seconds)
{
	if (ep < 0 || ep >= GW_EP_COUNT || out < 0 || out >= GW_OUT_COUNT)
		return;
	m->requests[ep][out]++;
	m->hist_count[ep]++;
	m->hist_sum[ep] += seconds;
	for (int b = 0; b < GW_HIST_BUCKETS; b++)
		if (seconds <= bucket_bounds[b])
		{
			m->hist[ep][b]++;
			break;
		}
}

/* Append the Prometheus text exposition to buf; 0 on success. */
int
gw_metrics_render(const struct gw_metrics *m, const struct gw_gauges *g,
				  struct evbuffer *buf)
{
	int			rc = 0;

	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_requests_total Requests answered, by endpoint and outcome.\n"
							  "# TYPE bc_gateway_requests_total counter\n") < 0;
	for (int e = 0; e < GW_EP_COUNT; e++)
		for (int o = 0; o < GW_OUT_COUNT; o++)
			rc |= evbuffer_add_printf(buf,
									  "bc_gateway_requests_total{endpoint=\"%s\",outcome=\"%s\"} %llu\n",
									  endpoint_names[e], outcome_names[o],
									  (unsigned long long) m->requests[e][o]) < 0;

	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_request_duration_seconds Time from dispatch to response, by endpoint.\n"
							  "# TYPE bc_gateway_request_duration_seconds histogram\n") < 0;
	for (int e = 0; e < GW_EP_COUNT; e++)
	{
		uint64_t	cum = 0;

		for (int b = 0; b < GW_HIST_BUCKETS; b++)
		{
			cum += m->hist[e][b];
			rc |= evbuffer_add_printf(buf,
									  "bc_gateway_request_duration_seconds_bucket{endpoint=\"%s\",le=\"%s\"} %llu\n",
									  endpoint_names[e], bucket_labels[b],
									  (unsigned long long) cum) < 0;
		}
		rc |= evbuffer_add_printf(buf,
								  "bc_gateway_request_duration_seconds_bucket{endpoint=\"%s\",le=\"+Inf\"} %llu\n"
								  "bc_gateway_request_duration_seconds_sum{endpoint=\"%s\"} %.6f\n"
								  "bc_gateway_request_duration_seconds_count{endpoint=\"%s\"} %llu\n",
								  endpoint_names[e], (unsigned long long) m->hist_count[e],
								  endpoint_names[e], m->hist_sum[e],
								  endpoint_names[e], (unsigned long long) m->hist_count[e]) < 0;
	}

	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_db_pool_in_use Database connections running a statement.\n"
							  "# TYPE bc_gateway_db_pool_in_use gauge\n"
							  "bc_gateway_db_pool_in_use %d\n"
							  "# HELP bc_gateway_db_pool_size Database connections allowed (--db-pool).\n"
							  "# TYPE bc_gateway_db_pool_size gauge\n"
							  "bc_gateway_db_pool_size %d\n",
							  g->pool_in_use, g->pool_size) < 0;
	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_connections Client connections open.\n"
							  "# TYPE bc_gateway_connections gauge\n"
							  "bc_gateway_connections %u\n"
							  "# HELP bc_gateway_connections_max Client connections allowed at once (--max-connections within RLIMIT_NOFILE).\n"
							  "# TYPE bc_gateway_connections_max gauge\n"
							  "bc_gateway_connections_max %u\n"
							  "# HELP bc_gateway_accept_paused_total Times accepting was paused, by reason.\n"
							  "# TYPE bc_gateway_accept_paused_total counter\n",
							  g->connections, g->max_connections) < 0;
	for (int k = 0; k < GW_PAUSE_COUNT; k++)
		rc |= evbuffer_add_printf(buf, "bc_gateway_accept_paused_total{reason=\"%s\"} %llu\n",
								  pause_names[k], (unsigned long long) m->accept_paused[k]) < 0;
	return rc ? -1 : 0;
}
