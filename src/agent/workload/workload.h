/*
 * workload.h: bcd's SPIFFE Workload API (docs/agent.md, "The SPIFFE
 * Workload API"): a gRPC server (libgrpc's C core, protobuf-c) on its own
 * unix socket, each connection accepted by bcd and attributed by its
 * SO_PEERCRED (one grpc_server per connection), its callers mapped to a
 * session and context by --workload-rule, their X509-SVIDs and JWT-SVIDs
 * provisioned through the provisioner's coalesced provisionings
 * (core/provisioner.c), which the daemon hands it.
 */
#ifndef BCD_WORKLOAD_H
#define BCD_WORKLOAD_H

#include <stddef.h>

#include "core/agent.h"
#include "core/provisioner.h"
#include "core/service_keys.h"

/* The Workload API server of bcd run. */
typedef struct bcd_workload bcd_workload;

/* Listen (nothing runs yet): BC_OK with *out, or an error in err. */
int			bcd_workload_start(const bcd_run_opts *o, const bcd_service_keys *keys,
							   const char *socket_path, const char *runtime_dir, int rtfd,
							   bcd_provisioner *prov, bcd_workload **out,
							   char *err, size_t errlen);
/* Start its threads (once the provisioner runs). */
void		bcd_workload_run(bcd_workload *w);
/* Stop its threads: nothing is asked of the provisioner after this. */
void		bcd_workload_stop(bcd_workload *w);
/* Free it (after the provisioner has stopped: every call back has been made). */
void		bcd_workload_free(bcd_workload *w);

#endif							/* BCD_WORKLOAD_H */
