/*
 * daemon.h: `bcd run` once its command line is read (the options and the
 * state its parts share are in agent.h).
 */
#ifndef BCD_DAEMON_H
#define BCD_DAEMON_H

#include "core/agent.h"
#include "core/outcome.h"

/* The daemon: load the pinned keys, lock DIR, serve the socket, join and renew. */
bcd_rc		bcd_daemon_run(const bcd_run_opts *opts);

#endif							/* BCD_DAEMON_H */
