/*
 * bcd.h: declarations shared by the files of the agent bcd.
 */
#ifndef BCD_H
#define BCD_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "outcome.h"


/* Bound of the service-keys JSON file. */
#define BCD_SERVICE_KEYS_MAX (64 * 1024)

/* The pinned public keys of a JoinService (bc_join.service_keys()). */
typedef struct bcd_service_keys
{
	char	   *trust_domain;	/* malloc()ed */
	EVP_PKEY   *signing_key;	/* verifies responses (JWS ES256) */
	EVP_PKEY   *encryption_key; /* sealed tokens are encrypted to it */
	X509	   *node_ca;		/* issues node certificates */
} bcd_service_keys;

/* service_keys.c */
int			bcd_service_keys_load(const char *path, bcd_service_keys *keys,
								  char *err, size_t errlen);
void		bcd_service_keys_free(bcd_service_keys *keys);

/* fileio.c */
int			bcd_read_file(const char *path, size_t max, char **out, size_t *len);
int			bcd_ensure_dir(const char *path);
int			bcd_write_file_atomic(const char *dir, const char *name,
								  const void *data, size_t len, mode_t mode);
char	   *bcd_path_join(const char *dir, const char *name);

/* store.c: the one lock of a state directory (DIR/lock) */
int			bcd_state_lock(const char *dir, int *lock_fd, long *holder);
void		bcd_state_lock_error(const char *dir, int rc, long holder, char *err, size_t errlen);

/* join_request.c */
bcd_rc		bcd_cmd_join_request(int argc, char **argv);
int			bcd_load_token(const char *token, const char *token_file,
						   char **out, size_t *len);
json_t	   *bcd_build_claims(const char *claims_json, const char *hostname);
int			bcd_node_key_and_csr(const char *dir, EVP_PKEY **key,
								 unsigned char **csr, size_t *csr_len,
								 const char **what);
int			bcd_join_request_json(const bcd_service_keys *keys,
								  const unsigned char *csr, size_t csr_len,
								  const char *role, const char *attestor,
								  const char *attestation_b64,
								  const char *token, size_t token_len,
								  json_t *claims, char **text_out);

/* verify_response.c */
bcd_rc		bcd_cmd_verify_response(int argc, char **argv);

/* answer.c: a bc_join() / bc_join.renew() / bc_join.issue_session() answer, verified */

/* Bound of a response document (a JWS plus the outer JSON). */
#define BCD_RESPONSE_MAX (BC_JOSE_MAX + 4096)

/* What a verified answer says; pointers into payload live as long as it. */
typedef struct bcd_answer
{
	json_t	   *payload;		/* the signed payload, verified */
	const char *status;			/* "issued", "pending" or "challenge" */
	/* issued */
	X509	   *leaf;			/* certifies our key, chains to the pinned CA */
	char	   *spiffe_id;		/* malloc()ed */
	char		serial[41];		/* of the leaf, lower-case hex, >= 32 digits */
	char		not_after[64];	/* RFC 3339, as answered (or from the leaf) */
	char	   *chain_pem;		/* leaf then the pinned CA, malloc()ed */
	size_t		chain_pem_len;
	/* pending and challenge */
	long		retry_after;	/* retryAfterSeconds, -1 when absent */
	const char *request_id;
	const char *challenge;
	const char *attestor;
	/* refused: the outer error code (never from a signed payload) */
	char		refusal[72];
} bcd_answer;

bcd_rc		bcd_answer_verify(const bcd_service_keys *keys, const char *text,
							  size_t len, const unsigned char *csr,
							  size_t csr_len, EVP_PKEY *key, bcd_answer *ans,
							  char *err, size_t errlen);
void		bcd_answer_free(bcd_answer *ans);
int			bcd_cert_serial_hex(X509 *cert, char out[41]);
void		bcd_cert_not_after(X509 *cert, char *buf, size_t len);

/* run.c: bcd run and bcd renew */
bcd_rc		bcd_cmd_run(int argc, char **argv);
bcd_rc		bcd_cmd_renew(int argc, char **argv);

/* hook.c: the clients of the local socket */
bcd_rc		bcd_cmd_credential(int argc, char **argv);
bcd_rc		bcd_cmd_status(int argc, char **argv);

#endif							/* BCD_H */
