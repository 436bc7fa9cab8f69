/* join_loop.h: join through the gateway until issued, refused or stopped. */
#ifndef BCD_JOIN_LOOP_H
#define BCD_JOIN_LOOP_H

#include "core/agent.h"
#include "core/store.h"

/*
 * Join until issued (cred filled), refused, failed or stopped.  held NULL:
 * with --attestor's producer (join-token by default); held a credential (an
 * expired one): come back as its node by x509pop, with a new key.
 */
bcd_rc		bcd_join_loop(bcd_agent *a, const bcd_credential *held, bcd_credential *cred);

#endif							/* BCD_JOIN_LOOP_H */
