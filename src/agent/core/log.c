/*
 * log.c: bcd's log, one line on stderr per event (log.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
