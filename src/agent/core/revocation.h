/*
 * revocation.h: bcd run's revocation watch (issue 45; docs/agent.md,
 * "Revocation"), a module the daemon composes (daemon.c) like the
 * attestation loop: its own thread and HTTPS client; every
 * --status-interval seconds it asks the gateway's OCSP responder about the
 * node certificate and, while the Workload API is served or --hook-crl is
 * given, fetches the node CA's CRL.  What verifies (revcheck.c) goes to the
 * provisioner: the CRL its clients hand out, the node's revocation that
 * makes them refuse; a CA compromise asks the main thread to renew at once.
 */
#ifndef BCD_REVOCATION_H
#define BCD_REVOCATION_H

#include <stddef.h>

#include "core/agent.h"
#include "core/provisioner.h"

/* The gateway's routes. */
#define BCD_PATH_CRL "/v1/crl"
#define BCD_PATH_OCSP "/v1/ocsp"
/* Bounds of what they answer: the gateway's --crl-max-size default; an OCSP answer. */
#define BCD_CRL_MAX (8 * 1024 * 1024)
#define BCD_OCSP_MAX (64 * 1024)

typedef struct bcd_revwatch bcd_revwatch;

/* 1 when bcd run with o runs the watch: the daemon, --status-interval above 0. */
int			bcd_revwatch_wanted(const bcd_run_opts *o);
/* 1 when the watch fetches the CRL: it runs, and the Workload API is served or --hook-crl. */
int			bcd_crl_wanted(const bcd_run_opts *o);

/*
 * Start the watch of o's node (its thread, its HTTPS client), verifying
 * against keys' pinned root, telling prov: BC_OK with *out, or an error.
 */
int			bcd_revwatch_start(const bcd_run_opts *o, const bcd_service_keys *keys,
							   bcd_provisioner *prov, bcd_revwatch **out, char *err,
							   size_t errlen);
/*
 * 1 (once per certificate) when the node certificate was revoked for a CA
 * compromise: the main thread renews at once, with a new key.  NULL: 0.
 */
int			bcd_revwatch_take_renew(bcd_revwatch *rw);
/* Stop its thread; NULL does nothing. */
void		bcd_revwatch_stop(bcd_revwatch *rw);
/* Free it (stopped first); NULL does nothing. */
void		bcd_revwatch_free(bcd_revwatch *rw);

#endif							/* BCD_REVOCATION_H */
