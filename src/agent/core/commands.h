/*
 * commands.h: the commands the service queues for this node (commands.c):
 * fetched through POST /v1/commands with a proof by the node key, verified
 * against the pinned signing key, run by the handler for the longest
 * matching kind prefix, reported through POST /v1/commands/complete.
 */
#ifndef BCD_COMMANDS_H
#define BCD_COMMANDS_H

#include "core/agent.h"
#include "core/store.h"

/* One fetch, its commands run and reported; errors are logged, never fatal. */
void		bcd_commands_poll(bcd_agent *a, const bcd_credential *cred);
/* Parse --command-handler PREFIX=EXECUTABLE into o; NULL or what is wrong. */
const char *bcd_commands_add_handler(bcd_run_opts *o, const char *arg);

#endif							/* BCD_COMMANDS_H */
