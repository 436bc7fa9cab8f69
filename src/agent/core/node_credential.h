/*
 * node_credential.h: the node credential as the provisioner's threads and
 * clients see it (provisioner.c): the main thread publishes it after a
 * load, a join or a renewal; the others take a snapshot that holds a
 * reference to the key, so a renewal never frees a key in use.
 */
#ifndef BCD_NODE_CREDENTIAL_H
#define BCD_NODE_CREDENTIAL_H

#include <stdint.h>

#include <openssl/evp.h>

#include "core/store.h"

/* A snapshot of the published node credential. */
typedef struct bcd_node_snapshot
{
	int			present;
	EVP_PKEY   *key;			/* referenced; NULL when absent */
	char		serial[41];
	char		spiffe_id[512];
	char		not_after_text[64];
	int64_t		not_after;
	unsigned long generation;	/* bumped by every publish */
} bcd_node_snapshot;

/* Where it is published (a mutex and the current snapshot). */
typedef struct bcd_published_node bcd_published_node;

bcd_published_node *bcd_node_new(void);
void		bcd_node_free(bcd_published_node *p);
void		bcd_node_publish(bcd_published_node *p, const bcd_credential *cred);
void		bcd_node_renewing(bcd_published_node *p, int on);
int			bcd_node_wait_renewal(bcd_published_node *p, unsigned long generation, double timeout);
void		bcd_node_take(bcd_published_node *p, bcd_node_snapshot *out);
void		bcd_node_release(bcd_node_snapshot *n);
int			bcd_node_usable(const bcd_node_snapshot *n);

#endif							/* BCD_NODE_CREDENTIAL_H */
