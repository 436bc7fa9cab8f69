/*
 * log.h: bcd's log: one line on stderr per event, prefixed "bcd: ", never a
 * key or a token.
 */
#ifndef BCD_LOG_H
#define BCD_LOG_H

/* Log one line on stderr: "bcd: " and the message, in one write. */
void		bcd_log(const char *fmt,...) __attribute__((format(printf, 1, 2)));

#endif							/* BCD_LOG_H */
