/*
 * linger.h: is lingering enabled for bcd's user (linger.c)?  With lingering,
 * systemd keeps the user's manager, and so bcd and the node credential it
 * holds, running while nobody is logged in: what bcd's user units exist to
 * avoid (docs/agent.md, "Running it under systemd").
 */
#ifndef BCD_LINGER_H
#define BCD_LINGER_H

#include <stddef.h>

/* Where logind records lingering: one empty file per user name. */
#define BCD_LINGER_DIR "/var/lib/systemd/linger"

/*
 * 1 when lingering is enabled for the calling user (BCD_LINGER_DIR/<name>
 * exists), 0 when not, -1 when it cannot be told (no user name, an unreadable
 * directory); the user's
 * name and the file's path in user and path either way.
 */
int			bcd_linger_enabled(char *user, size_t userlen, char *path, size_t pathlen);

#endif							/* BCD_LINGER_H */
