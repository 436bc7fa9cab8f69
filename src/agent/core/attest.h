/*
 * attest.h: continuous attestation (issue 44), a module the daemon composes
 * (daemon.c) for a node whose producer quotes (--attestor tpm) unless
 * --no-attest: its own thread and HTTPS client, at the interval the service
 * sets, POST /v1/attest in two rounds (docs/agent.md, "Continuous
 * attestation"); on "quarantined" it tells the provisioner, whose two
 * clients then refuse (provisioner.h, bcd_provisioner_quarantine).
 */
#ifndef BCD_ATTEST_H
#define BCD_ATTEST_H

#include <stddef.h>

#include "core/agent.h"
#include "core/provisioner.h"

/* The UEFI event log and the IMA list when --event-log / --ima-log are not given. */
#define BCD_EVENT_LOG_DEFAULT "/sys/kernel/security/tpm0/binary_bios_measurements"
#define BCD_IMA_LOG_DEFAULT "/sys/kernel/security/ima/binary_runtime_measurements"

typedef struct bcd_attest bcd_attest;

/* 1 when bcd run with o attests: its producer quotes and --no-attest is not given. */
int			bcd_attest_wanted(const bcd_run_opts *o);

/*
 * Start the loop of o's node (its thread, its HTTPS client), signing with
 * the node credential published to prov and checking answers against
 * keys: BC_OK with *out, or an error in err.
 */
int			bcd_attest_start(const bcd_run_opts *o, const bcd_service_keys *keys,
							 bcd_provisioner *prov, bcd_attest **out, char *err, size_t errlen);
/*
 * 1 (once) when the node should join again by its attestor: it is
 * quarantined and the service no longer takes the certificate its
 * quarantine revoked (an operator readmitted it).  From the main thread.
 */
int			bcd_attest_take_rejoin(bcd_attest *at);
/* Stop its thread (a request in flight is aborted by bcd_stop_now); NULL does nothing. */
void		bcd_attest_stop(bcd_attest *at);
/* Free it (stopped first); NULL does nothing. */
void		bcd_attest_free(bcd_attest *at);

#endif							/* BCD_ATTEST_H */
