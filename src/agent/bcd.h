/*
 * bcd.h: declarations shared by the files of the agent bcd.
 */
#ifndef BCD_H
#define BCD_H

#include <stddef.h>
#include <sys/types.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

/* Process exit codes of bcd subcommands. */
#define BCD_EXIT_OK 0
#define BCD_EXIT_FAIL 1			/* any error or verification failure */
#define BCD_EXIT_REFUSED 2		/* the service refused the join */
#define BCD_EXIT_DEFERRED 3		/* pending or challenge: not (yet) a join */
#define BCD_EXIT_USAGE 64		/* bad command line (sysexits EX_USAGE) */

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

/* join_request.c */
int			bcd_cmd_join_request(int argc, char **argv);

/* verify_response.c */
int			bcd_cmd_verify_response(int argc, char **argv);

#endif							/* BCD_H */
