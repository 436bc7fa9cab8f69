/*
 * signals.h: stopping bcd.  SIGTERM and SIGINT are blocked in every thread
 * and taken only where the main thread waits (bcd_sleep) or seen pending
 * (an HTTPS request in flight), so none is lost between a check and a sleep.
 */
#ifndef BCD_SIGNALS_H
#define BCD_SIGNALS_H

/* Block SIGTERM and SIGINT: from now on they are taken only where we wait. */
void		bcd_signals_block(void);
/* 1 when SIGTERM or SIGINT was taken or is pending, or bcd_stop_now was called. */
int			bcd_stop_requested(void);
/* Make every later bcd_stop_requested() true: the daemon is stopping. */
void		bcd_stop_now(void);
/* Sleep for seconds unless a stop signal arrives first: 1 then, else 0. */
int			bcd_sleep(double seconds);

#endif							/* BCD_SIGNALS_H */
