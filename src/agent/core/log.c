/*
 * log.c: bcd's log, one line on stderr per event (log.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/log.h"

/* Log one line on stderr, prefixed "bcd: " (never keys or tokens), in one write. */
void
bcd_log(const char *fmt,...)
{
	char		line[2048];
	va_list		ap;
	int			n;

	memcpy(line, "bcd: ", 5);
	va_start(ap, fmt);
	n = vsnprintf(line + 5, sizeof(line) - 6, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t) n > sizeof(line) - 7)
		n = (int) (sizeof(line) - 7);
	line[5 + n] = '\n';
	line[6 + n] = '\0';
	fputs(line, stderr);
	fflush(stderr);
}

/* Log the line unless *said holds it from less than BCD_SAY_AGAIN_S ago (log.h). */
void
bcd_vlog_again(bcd_said *said, const char *prefix, const char *fmt, va_list ap)
{
	char		line[sizeof(said->line)];
	time_t		now = time(NULL);

	vsnprintf(line, sizeof(line), fmt, ap);
	if (strcmp(line, said->line) == 0 && now - said->at < BCD_SAY_AGAIN_S)
		return;
	snprintf(said->line, sizeof(said->line), "%s", line);
	said->at = now;
	bcd_log("%s: %s", prefix, line);
}
