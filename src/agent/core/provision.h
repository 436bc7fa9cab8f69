/* provision.h: one provisioning of a session credential through POST /v1/session. */
#ifndef BCD_PROVISION_H
#define BCD_PROVISION_H

#include "core/node_credential.h"
#include "core/service_keys.h"
#include "core/job.h"
#include "core/transport.h"

void		bcd_provision(const bcd_service_keys *keys, bcd_http *http,
						  const bcd_node_snapshot *node, bcd_job *job);

#endif							/* BCD_PROVISION_H */
