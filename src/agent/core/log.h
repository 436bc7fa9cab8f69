/*
 * log.h: bcd's log: one line on stderr per event, prefixed "bcd: ", never a
 * key or a token.
 */
#ifndef BCD_LOG_H
#define BCD_LOG_H

#include <stdarg.h>
#include <time.h>

/* The same line is logged again after this many seconds at most (bcd_vlog_again). */
#define BCD_SAY_AGAIN_S 600

/* The line a loop said last and when (bcd_vlog_again); line[0] = '\0' forgets it. */
typedef struct bcd_said
{
	char		line[512];
	time_t		at;
} bcd_said;

/* Log one line on stderr: "bcd: " and the message, in one write. */
void		bcd_log(const char *fmt,...) __attribute__((format(printf, 1, 2)));

/*
 * Log "prefix: " and the message, unless it is the line *said holds, said
 * less than BCD_SAY_AGAIN_S ago: a loop that fails the same way every
 * round says so once in ten minutes.
 */
void		bcd_vlog_again(bcd_said *said, const char *prefix, const char *fmt, va_list ap)
			__attribute__((format(printf, 3, 0)));

#endif							/* BCD_LOG_H */
