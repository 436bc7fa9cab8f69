/*
 * workers.h: the provisioner's --max-provisioning worker threads, each
 * with its own HTTPS client, running provisionings (provision.c) taken from
 * a queue and handed back on a done list.
 */
#ifndef BCD_WORKERS_H
#define BCD_WORKERS_H

#include <stddef.h>

#include "core/node_credential.h"
#include "core/service_keys.h"
#include "core/job.h"

typedef struct bcd_workers bcd_workers;

/* n workers for gateway (its CA pinned) signing with node; wake_fd is written when one is done. */
int			bcd_workers_start(long n, const char *gateway, const char *gateway_ca,
							  const bcd_service_keys *keys, bcd_published_node *node,
							  int wake_fd, bcd_workers **out, char *err, size_t errlen);
void		bcd_workers_submit(bcd_workers *w, bcd_job *job);
bcd_job    *bcd_workers_take_done(bcd_workers *w);
void		bcd_workers_stop(bcd_workers *w);
void		bcd_workers_free(bcd_workers *w);

#endif							/* BCD_WORKERS_H */
