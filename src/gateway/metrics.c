/* metrics.c: request counters and latency histograms, Prometheus text format. */
#include "metrics.h"

#include "bc_protocol.h"

#include <event2/buffer.h>

static const char *const outcome_names[GW_OUT_COUNT] = {
	BC_STATUS_ISSUED, BC_STATUS_PENDING, BC_STATUS_CHALLENGE, BC_STATUS_REFUSED, "invalid",
	"unsupported",
	"unavailable", "error", "too_large", "rate_limited", "timeout",
	BC_STATUS_ATTESTED, BC_STATUS_QUARANTINED
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

/* Whether requests on endpoint are counted (a row marked GW_ROUTE_OBSERVED, or "other"). */
static int
counted(int endpoint)
{
	if (endpoint == GW_ENDPOINT_OTHER)
		return 1;
	return endpoint >= 0 && (size_t) endpoint < gw_nroutes &&
		(gw_routes[endpoint].limits & GW_ROUTE_OBSERVED) != 0;
}

/* The label value of an outcome. */
const char *
gw_outcome_name(enum gw_outcome out)
{
	return (out >= 0 && out < GW_OUT_COUNT) ? outcome_names[out] : "error";
}

/* Count one finished request that took seconds. */
void
gw_metrics_observe(struct gw_metrics *m, int ep, enum gw_outcome out, double seconds)
{
	if (!counted(ep) || out < 0 || out >= GW_OUT_COUNT)
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
	for (int e = 0; e < GW_ENDPOINTS; e++)
		for (int o = 0; o < GW_OUT_COUNT && counted(e); o++)
			rc |= evbuffer_add_printf(buf,
									  "bc_gateway_requests_total{endpoint=\"%s\",outcome=\"%s\"} %llu\n",
									  gw_endpoint_name(e), outcome_names[o],
									  (unsigned long long) m->requests[e][o]) < 0;

	rc |= evbuffer_add_printf(buf,
							  "# HELP bc_gateway_request_duration_seconds Time from dispatch to response, by endpoint.\n"
							  "# TYPE bc_gateway_request_duration_seconds histogram\n") < 0;
	for (int e = 0; e < GW_ENDPOINTS; e++)
	{
		const char *name = gw_endpoint_name(e);
		uint64_t	cum = 0;

		if (!counted(e))
			continue;
		for (int b = 0; b < GW_HIST_BUCKETS; b++)
		{
			cum += m->hist[e][b];
			rc |= evbuffer_add_printf(buf,
									  "bc_gateway_request_duration_seconds_bucket{endpoint=\"%s\",le=\"%s\"} %llu\n",
									  name, bucket_labels[b],
									  (unsigned long long) cum) < 0;
		}
		rc |= evbuffer_add_printf(buf,
								  "bc_gateway_request_duration_seconds_bucket{endpoint=\"%s\",le=\"+Inf\"} %llu\n"
								  "bc_gateway_request_duration_seconds_sum{endpoint=\"%s\"} %.6f\n"
								  "bc_gateway_request_duration_seconds_count{endpoint=\"%s\"} %llu\n",
								  name, (unsigned long long) m->hist_count[e],
								  name, m->hist_sum[e],
								  name, (unsigned long long) m->hist_count[e]) < 0;
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
