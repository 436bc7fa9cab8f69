/* join_loop.h: join through the gateway until issued, refused or stopped. */
#ifndef BCD_JOIN_LOOP_H
#define BCD_JOIN_LOOP_H

#include "core/daemon.h"
#include "core/store.h"

bcd_rc		bcd_join_loop(bcd_agent *a, bcd_credential *cred);

#endif							/* BCD_JOIN_LOOP_H */
