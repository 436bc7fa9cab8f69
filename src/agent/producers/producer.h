/*
 * producer.h: the interface of an attestor's producer, the agent's half of
 * an attestor: it makes the evidence of round 1 of a join and answers the
 * service's challenges.  One file per producer (join_token.c, tpm.c,
 * x509pop.c, provisioned.c, cloud_iid.c, discovery.c, exec.c), each
 * declaring its options to the shared parser (options.c), keeping them in
 * its own state and exporting one bcd_producer; registry.c lists them.
 * Adding a producer is one file and one line there.
 */
#ifndef BCD_PRODUCER_H
#define BCD_PRODUCER_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include "core/service_keys.h"

/*
 * What a producer works from, beside its own options (kept in its own
 * state): the service's keys, the join's CSR, the common inputs.
 */
struct bcd_quote;

typedef struct bcd_producer_input
{
	const bcd_service_keys *keys;
	const unsigned char *csr;	/* DER, the same for every round of the join */
	size_t		csr_len;
	const char *token;			/* --token, or NULL */
	const char *token_file;		/* --token-file (read at every round), or NULL */
	const char *key_path;		/* the CSR's key file (tpm: its TSS2 PRIVATE KEY) */
	/* a credential held (expired or not): its key, leaf and node, or NULL */
	EVP_PKEY   *held_key;
	X509	   *held_leaf;
	const char *held_node_id;
	const char *attestor;		/* the attestor of the join */
	const char *role;
	const json_t *claims;		/* the claims bcd sends, or NULL */
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

/* One command-line option of a producer: --name [ARG], and its help text. */
typedef struct bcd_producer_option
{
	const char *name;			/* without the leading "--" */
	const char *arg;			/* "CONF": takes an argument; NULL: a flag */
	const char *help;			/* lines separated by '\n', no indentation */
} bcd_producer_option;

/* The commands a producer serves (bcd_producer.commands). */
#define BCD_CMD_RUN			0x1		/* bcd run and bcd renew */
#define BCD_CMD_RAMDISK		0x2		/* bcd ramdisk */

/* The common command line, for a producer's configure(). */
typedef struct bcd_producer_setup
{
	const char *command;		/* "run", "renew" or "ramdisk", for messages */
	const char *attestor;		/* --attestor (or the one a producer's options imply) */
	int			attestor_set;	/* --attestor was given */
	const char *role;
	const char *state_dir;		/* --state-dir, or NULL (bcd ramdisk) */
	int			has_token;		/* --token or --token-file */
} bcd_producer_setup;

/*
 * A producer: one file (join_token.c, tpm.c, ...) that declares its options,
 * parses them into its own state, makes round 1's evidence, answers a
 * challenge if it can and adds what a renewal needs; registry.c lists them.
 * Every hook but produce may be NULL.
 */
typedef struct bcd_producer
{
	const char *attestor;		/* the attestor id; NULL: any custom one (exec.c) */
	const char *summary;		/* one line, in --help above its options */
	unsigned	commands;		/* BCD_CMD_* it serves */
	const bcd_producer_option *options;	/* ended by {NULL}; NULL: none */
	/* a given option selects this producer when --attestor is not given (--node-id) */
	int			implied_by_options;
	/* it proves a credential held: how an expired node comes back (x509pop) */
	int			proves_held;
	/* BCD_CMD_* whose attestor it is when --attestor is not given */
	unsigned	default_for;

	/* Take one of its options into its own state: NULL, or the usage error. */
	const char *(*set_option) (const char *name, const char *arg);

	/* It serves this join: check its state against the common command line. */
	const char *(*configure) (const bcd_producer_setup *setup);

	/* The daemon starts (before any key is read) and stops. */
	int			(*start) (char *err, size_t errlen);
	void		(*stop) (void);

	/* The evidence of round 1 (and of every round before a challenge). */
	int			(*produce) (const bcd_producer_input *in, bcd_evidence *out,
							char *err, size_t errlen);

	/* The answer to a challenge (base64url); NULL: it answers none. */
	int			(*answer) (const bcd_producer_input *in, const char *challenge,
						   bcd_evidence *out, char *err, size_t errlen);

	/* Add to a renewal's body (doc, holding "csr" and "proof") what the new key needs. */
	int			(*renewal) (const bcd_producer_input *in, json_t *doc, char *err,
							size_t errlen);

	/*
	 * Continuous attestation (core/attest.c): a quote of the PCRs of bank
	 * (a TPM algorithm id) in pcrs (bit i: PCR i) with extraData extra, by
	 * the node's attestation key, into out (its members malloc()ed, freed
	 * with bcd_quote_free).  NULL: the attestor's nodes do not attest.
	 */
	int			(*quote) (uint16_t bank, uint32_t pcrs, const unsigned char *extra,
						  size_t extra_len, struct bcd_quote *out, char *err, size_t errlen);
} bcd_producer;

/*
 * A quote for continuous attestation: the AK's TPM2B_PUBLIC, the TPMS_ATTEST
 * and TPMT_SIGNATURE as the TPM marshals them, and the quoted PCRs' values
 * (values[i] PCR i's, digest_len bytes), read so that the quote's pcrDigest
 * is theirs.
 */
typedef struct bcd_quote
{
	unsigned char *ak_pub;
	size_t		ak_pub_len;
	unsigned char *attest;
	size_t		attest_len;
	unsigned char *sig;
	size_t		sig_len;
	unsigned char values[24][64];
	size_t		digest_len;
} bcd_quote;

/* Free a quote's members (evidence.c). */
void		bcd_quote_free(bcd_quote *q);

/* The producers (one file each). */
extern const bcd_producer bcd_producer_join_token;
extern const bcd_producer bcd_producer_provisioned;
extern const bcd_producer bcd_producer_tpm;
extern const bcd_producer bcd_producer_x509pop;
extern const bcd_producer bcd_producer_cloud_iid;
extern const bcd_producer bcd_producer_discovery;
/* The external producer (exec.c): --producer PATH, for a custom attestor. */
extern const bcd_producer bcd_producer_exec;

/* Every producer, in registry order (count in *n). */
const bcd_producer *const *bcd_producers(size_t *n);

/*
 * The producer for attestor: its own, or the join-token producer (a token
 * sealed to the service, the evidence a registered SQL attestor takes when
 * no --producer makes its evidence).
 */
const bcd_producer *bcd_producer_for(const char *attestor);

/* bcd's own producer of attestor, or NULL when it has none (a custom attestor). */
const bcd_producer *bcd_producer_builtin(const char *attestor);

/* The producer that proves a credential held (proves_held), or NULL. */
const bcd_producer *bcd_producer_held(void);

/* The attestor of command (BCD_CMD_*) when --attestor is not given (default_for). */
const char *bcd_producer_default_attestor(unsigned command);

/* Most producers a command line may name options of. */
#define BCD_OPTPARSER_USED_MAX 16

/*
 * The shared command-line parser (options.c): getopt_long over a command's
 * own options and every option of the producers serving the command.
 * init builds it; next returns the command's option (getopt's value), or 0
 * after a producer's option (taken into that producer's state; its usage
 * error into *bad, the first only), -1 at the end, '?' for an unknown one.
 * finish picks the producer of the join (the one its options imply, the
 * attestor's own, else bcd_producer_for), refuses another producer's
 * options, and configures it: the producer, or NULL with *bad set.
 */
typedef struct bcd_optparser
{
	struct option *longopts;	/* the command's, then the producers' */
	size_t		n_common;
	unsigned	command;		/* BCD_CMD_* */
	const bcd_producer **owner;	/* per producer option: its producer */
	size_t		n;
	const bcd_producer *used[BCD_OPTPARSER_USED_MAX];	/* producers whose options were given */
	const char *used_opt[BCD_OPTPARSER_USED_MAX];	/* the first option given of each */
	size_t		n_used;
} bcd_optparser;

int			bcd_optparser_init(bcd_optparser *p, const struct option *common,
							   unsigned command);
int			bcd_optparser_next(bcd_optparser *p, int argc, char **argv, const char **bad);
const bcd_producer *bcd_optparser_finish(bcd_optparser *p, bcd_producer_setup *setup,
										 const char **bad);
void		bcd_optparser_free(bcd_optparser *p);

/* Print each producer serving command: its attestor, summary, options and their help. */
void		bcd_producers_usage(FILE *stream, unsigned command);

/* Release what a producer made. */
void		bcd_evidence_free(bcd_evidence *ev);

/* join_token.c: the join token, as given or read from its file (see there). */
int			bcd_join_token_load(const char *token, const char *token_file,
								char **out, size_t *len);

/* join_token.c: the token, when there is one, sealed to the service for this CSR. */
int			bcd_seal_token(const bcd_producer_input *in, bcd_evidence *out, char *err,
						   size_t errlen);

#endif							/* BCD_PRODUCER_H */
