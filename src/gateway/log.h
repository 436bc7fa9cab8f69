/* log.h: structured logs, one JSON object per line on stderr. */
#ifndef BC_GATEWAY_LOG_H
#define BC_GATEWAY_LOG_H

#include <jansson.h>

enum gw_log_level
{
	GW_LOG_DEBUG = 0,
	GW_LOG_INFO,
	GW_LOG_WARN,
	GW_LOG_ERROR
};

/* Set the lowest level written. */
void		gw_log_set_level(int level);

/* Map "debug", "info", "warn" or "error" to a level; -1 when unknown. */
int			gw_log_parse_level(const char *s);

/* Whether a line at level would be written. */
int			gw_log_enabled(int level);

/* Write one line: ts, level, msg and the members of fields (stolen; may be NULL). */
void		gw_log(int level, const char *msg, json_t *fields);

/* Write one line whose msg is formatted with printf rules. */
void		gw_logf(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
