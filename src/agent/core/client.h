/*
 * client.h: the clients' half of bcd's local socket (client.c).
 */
#ifndef BCD_CLIENT_H
#define BCD_CLIENT_H

#include <jansson.h>

#include "core/outcome.h"

/* Report a refusal "bcd CMD: CODE: MESSAGE" on stderr; its outcome. */
bcd_rc		bcd_client_refuse(const char *cmd, const char *code, const char *message,
							  int retryable);
/* Send req to the daemon at path, read its answer within timeout seconds. */
bcd_rc		bcd_client_exchange(const char *cmd, const char *path, json_t *req,
								double timeout, json_t **answer);
/* Report an answer {"ok":false,...}; its outcome. */
bcd_rc		bcd_client_report(const char *cmd, json_t *answer);
/* Parse --timeout (seconds in (0, 86400]); 0 on success. */
int			bcd_client_parse_timeout(const char *s, double *out);

#endif							/* BCD_CLIENT_H */
