/* renewal.h: renewing the node certificate: when, once, and until it is done. */
#ifndef BCD_RENEWAL_H
#define BCD_RENEWAL_H

#include "core/agent.h"
#include "core/store.h"

/* Seconds from now until the renewal of cred is due (0: now), +-10%. */
double		bcd_renewal_delay(const bcd_run_opts *o, const bcd_credential *cred);
/* One renewal through POST /v1/renew. */
bcd_rc		bcd_renew(bcd_agent *a, const bcd_credential *cur, bcd_credential *next,
					  long *retry_after);
/* Renew cred until it is renewed, backing off on failures. */
bcd_rc		bcd_renew_until_done(bcd_agent *a, bcd_credential *cred);

#endif							/* BCD_RENEWAL_H */
