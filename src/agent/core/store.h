/*
 * store.h: the credential store, bcd's state directory: its one lock, the
 * node key and chain, and the key and CSR of an exchange in progress.
 */
#ifndef BCD_STORE_H
#define BCD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "core/service_keys.h"

/* The node credential, as loaded or stored. */
typedef struct bcd_credential
{
	EVP_PKEY   *key;			/* node.key */
	X509	   *leaf;			/* first certificate of node-chain.pem */
	char	   *spiffe_id;
	char		serial[41];
	char		not_after_text[64];
	int64_t		not_before;		/* unix seconds */
	int64_t		not_after;
	int64_t		obtained;		/* when we got it: now, or node-chain.pem's mtime */
} bcd_credential;

/* The one lock of a state directory (DIR/lock). */
int			bcd_state_lock(const char *dir, int *lock_fd, long *holder);
void		bcd_state_lock_error(const char *dir, int rc, long holder, char *err, size_t errlen);

int			bcd_store_open(const char *dir, int *lock_fd, char *err, size_t errlen);
/* Most certificates read from node-chain.pem (the leaf, the issuing CA .. the root). */
#define BCD_CHAIN_MAX 8
/* dir/node-chain.pem's certificates, the leaf first; the caller frees each. */
int			bcd_store_read_chain(const char *dir, X509 **certs, size_t max, size_t *n);
int			bcd_store_load(const char *dir, const bcd_service_keys *keys,
						   bcd_credential *cred, char *err, size_t errlen);
int			bcd_store_commit(const char *dir, EVP_PKEY *key, const char *chain_pem,
							 size_t chain_len, char *err, size_t errlen);
int			bcd_credential_fill(bcd_credential *cred, EVP_PKEY *key, X509 *leaf);
void		bcd_credential_free(bcd_credential *cred);
void		bcd_node_key_free(EVP_PKEY *key);
int			bcd_key_pem(EVP_PKEY *key, char **out, size_t *len);

/* DIR/join, DIR/renew: the key and CSR of an exchange in progress. */
char	   *bcd_store_work_dir(const char *dir, const char *name);
void		bcd_store_forget_work(const char *dir, const char *name);
int			bcd_node_key_and_csr(const char *dir, EVP_PKEY **key,
								 unsigned char **csr, size_t *csr_len,
								 const char **what);

#endif							/* BCD_STORE_H */
