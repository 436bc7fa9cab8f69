/* log.c: structured logs, one JSON object per line on stderr. */
#include "log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int	min_level = GW_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

/* Set the lowest level written. */
void
gw_log_set_level(int level)
{
	min_level = level;
}

/* Map a level name to its value; -1 when unknown. */
int
gw_log_parse_level(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	if (strcmp(s, "warning") == 0)
		return GW_LOG_WARN;
	return -1;
}

/* Whether a line at level would be written. */
int
gw_log_enabled(int level)
{
	return level >= min_level;
}

/* Format the current UTC time as RFC 3339 with milliseconds. */
static void
format_ts(char *buf, size_t len)
{
	struct timespec now;
	struct tm	tm;
	char		base[32];

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, len, "%s.%03ldZ", base, now.tv_nsec / 1000000);
}

/* Write one line: ts, level, msg and the members of fields (stolen). */
void
gw_log(int level, const char *msg, json_t *fields)
{
	json_t	   *line = NULL;
	char	   *text = NULL;
	char		ts[48];

	if (level < min_level || level < 0 || level > GW_LOG_ERROR)
		goto out;
	format_ts(ts, sizeof(ts));
	line = json_object();
	if (line == NULL)
		goto out;
	json_object_set_new(line, "ts", json_string(ts));
	json_object_set_new(line, "level", json_string(level_names[level]));
	json_object_set_new(line, "msg", json_string(msg));
	if (fields != NULL)
		json_object_update_missing(line, fields);
	text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	if (text != NULL)
	{
		fputs(text, stderr);
		fputc('\n', stderr);
		fflush(stderr);
	}
out:
	free(text);
	json_decref(line);
	json_decref(fields);
}

/* Write one line whose msg is formatted with printf rules. */
void
gw_logf(int level, const char *fmt, ...)
{
	char		msg[1024];
	va_list		ap;

	if (level < min_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	gw_log(level, msg, NULL);
}
