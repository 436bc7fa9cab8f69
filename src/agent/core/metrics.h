/*
 * metrics.h: the socket server's numbers, as the JSON of {"op":"status"}
 * and as Prometheus text (the answer to {"op":"metrics"} and --metrics-file).
 */
#ifndef BCD_METRICS_H
#define BCD_METRICS_H

#include <jansson.h>

#include "core/node_credential.h"
#include "core/job.h"

json_t	   *bcd_status_json(const bcd_counters *c, const bcd_node_snapshot *node);
char	   *bcd_metrics_text(const bcd_counters *c, const bcd_node_snapshot *node);
int			bcd_metrics_write(const char *path, const bcd_counters *c,
							  const bcd_node_snapshot *node);

#endif							/* BCD_METRICS_H */
