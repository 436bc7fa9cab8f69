/*
 * producer.h: the interface of an attestor's producer, the agent's half of
 * an attestor: it makes the evidence of round 1 of a join and answers the
 * service's challenges.  One file per producer (join_token.c; later tpm,
 * x509pop, provisioned, cloud-iid, discovery), each exporting one
 * bcd_producer; registry.c finds the one for an attestor id.
 */
#ifndef BCD_PRODUCER_H
#define BCD_PRODUCER_H

#include <stddef.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include "core/service_keys.h"

/* The attestor id of the tpm producer (tpm.c). */
#define BCD_ATTESTOR_TPM "tpm"

/* What the tpm producer works with (--tcti, --tpm-ek, --tpm-pcrs, the state directory). */
typedef struct bcd_tpm_config
{
	const char *tcti;			/* Tss2_TctiLdr_Initialize's conf */
	const char *ek;				/* "rsa" or "p384" */
	const char *pcrs;			/* the quote's PCR selection, "sha256:0-7" */
	const char *state_dir;		/* holds the AK's blobs */
} bcd_tpm_config;

/* What a producer works from: the service's keys, the join's CSR, the operator's inputs. */
typedef struct bcd_producer_input
{
	const bcd_service_keys *keys;
	const unsigned char *csr;	/* DER, the same for every round of the join */
	size_t		csr_len;
	const char *token;			/* --token, or NULL */
	const char *token_file;		/* --token-file (read at every round), or NULL */
	const char *node_id;		/* --node-id (provisioned), or NULL */
	const bcd_tpm_config *tpm;	/* the tpm producer's configuration, or NULL */
	const char *key_path;		/* the CSR's key file (tpm: its TSS2 PRIVATE KEY) */
	/* x509pop: the certificate held (node-chain.pem's leaf) and its key (node.key) */
	EVP_PKEY   *held_key;
	X509	   *held_leaf;
	const char *held_node_id;
	const char *cloud;			/* --cloud aws|gcp|azure (cloud-iid), or NULL */
	const char *metadata_url;	/* --metadata-url (cloud-iid), or NULL: the cloud's own */
	const char *cloud_audience;	/* --cloud-audience (cloud-iid, gcp), or NULL */
	const char *site_agent;		/* discovery: the site agent's https://HOST:PORT */
	const char *mac;			/* discovery: this machine's MAC */
	/* the external producer (exec.c): --attestor, --role, the claims, --producer */
	const char *attestor;
	const char *role;
	const json_t *claims;		/* the claims bcd sends, or NULL */
	const char *producer;		/* --producer PATH, or NULL */
	double		producer_timeout;	/* --producer-timeout, seconds */
} bcd_producer_input;

/*
 * What produce() returns, beside BC_OK and a BC_E* failure (final): the
 * evidence cannot be made now but may be later (a site agent that did not
 * answer); the join loop backs off and asks again.
 */
#define BCD_PRODUCER_RETRY 1

/* What a producer made for one round (each malloc()ed, or NULL). */
typedef struct bcd_evidence
{
	char	   *attestation;	/* the JoinRequest's "attestation" (base64url) */
	char	   *sealed_token;	/* the JoinRequest's "sealedToken" (JWE compact) */
	json_t	   *claims;			/* claims to add to the JoinRequest's (a reference), or NULL */
} bcd_evidence;

typedef struct bcd_producer
{
	const char *attestor;		/* the attestor id it produces for */

	/* The evidence of round 1 (and of every round before a challenge). */
	int			(*produce) (const bcd_producer_input *in, bcd_evidence *out,
							char *err, size_t errlen);

	/* The answer to a challenge (base64url); NULL: it answers none. */
	int			(*answer) (const bcd_producer_input *in, const char *challenge,
						   bcd_evidence *out, char *err, size_t errlen);
} bcd_producer;

/* The producers (one file each). */
extern const bcd_producer bcd_producer_join_token;
extern const bcd_producer bcd_producer_provisioned;
extern const bcd_producer bcd_producer_tpm;
extern const bcd_producer bcd_producer_x509pop;
extern const bcd_producer bcd_producer_cloud_iid;
extern const bcd_producer bcd_producer_discovery;
/* The external producer (exec.c): --producer PATH, for the attestor --attestor names. */
extern const bcd_producer bcd_producer_exec;

/*
 * The producer for attestor: its own, or the join-token producer (a token
 * sealed to the service, the evidence every registered SQL attestor takes).
 */
const bcd_producer *bcd_producer_for(const char *attestor);

/* bcd's own producer of attestor, or NULL when it has none (a custom attestor). */
const bcd_producer *bcd_producer_builtin(const char *attestor);

/*
 * exec.c: check --producer PATH and --producer-timeout S for attestor:
 * NULL when they can serve, else what is wrong (a usage error).
 */
const char *bcd_exec_producer_check(const char *attestor, int attestor_set, const char *path,
									const char *timeout_arg, double *timeout);

/* Release what a producer made. */
void		bcd_evidence_free(bcd_evidence *ev);

/* join_token.c: the join token, as given or read from its file (see there). */
int			bcd_join_token_load(const char *token, const char *token_file,
								char **out, size_t *len);

/* join_token.c: the token, when there is one, sealed to the service for this CSR. */
int			bcd_seal_token(const bcd_producer_input *in, bcd_evidence *out, char *err,
						   size_t errlen);

/*
 * tpm.c: the "tpm" member of a tpm node's renewal, {"akPub", "nodeKeyPub",
 * "certifyInfo", "certifySignature"}: the node's AK (the one in its
 * certificate's statement) certifying the new key in key_path.
 */
int			bcd_tpm_renewal_member(const bcd_tpm_config *cfg, const char *key_path,
								   const unsigned char *csr, size_t csr_len,
								   json_t **out, char *err, size_t errlen);

#endif							/* BCD_PRODUCER_H */
