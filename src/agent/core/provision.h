/*
 * provision.h: one provisioning, run by a worker: a session credential
 * through POST /v1/session (provision.c), a JWT-SVID through POST
 * /v1/jwt-svid (provision_jwt.c).
 */
#ifndef BCD_PROVISION_H
#define BCD_PROVISION_H

#include "core/node_credential.h"
#include "core/service_keys.h"
#include "core/job.h"
#include "core/transport.h"

void		bcd_provision(const bcd_service_keys *keys, bcd_http *http,
						  const bcd_node_snapshot *node, bcd_job *job);
void		bcd_provision_jwt(const bcd_service_keys *keys, bcd_http *http,
							  const bcd_node_snapshot *node, bcd_job *job);

#endif							/* BCD_PROVISION_H */
