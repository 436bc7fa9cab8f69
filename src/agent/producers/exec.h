/*
 * exec.h: the external producer, `--attestor ID --producer PATH`: an
 * executable that makes the evidence of a custom attestor (docs/agent.md,
 * "Writing a producer"; the protocol, docs/protocol.md "The producer exec
 * protocol").  bcd runs it like a Kubernetes exec credential plugin or a git
 * credential helper: no shell, a clean environment, one JSON object on
 * stdin, one JSON object on stdout, bounded in size and time; and holds it
 * to the trust rules ssh and sudo apply to their helpers: opened once by an
 * absolute path whose every component only root or bcd's user can change,
 * checked and run by that descriptor.
 */
#ifndef BCD_PRODUCER_EXEC_H
#define BCD_PRODUCER_EXEC_H

#include <stddef.h>

#include <jansson.h>

/* The apiVersion of both objects (stdin and stdout), and BCD_PRODUCER_API_VERSION. */
#define BCD_EXEC_API_VERSION "bc-join.dev/producer/v1"
/* Bound of what the producer writes on stdout (bytes). */
#define BCD_EXEC_OUTPUT_MAX (64 * 1024)
/* Bound of what bcd keeps of its stderr for the log (bytes). */
#define BCD_EXEC_STDERR_MAX 2048
/* Bound of the claims object the producer may add (its compact JSON, bytes). */
#define BCD_EXEC_CLAIMS_MAX (8 * 1024)
/* --producer-timeout: default and upper bound, seconds. */
#define BCD_EXEC_TIMEOUT_DEFAULT 30
#define BCD_EXEC_TIMEOUT_MAX 600
/* Exit status of the producer: the evidence cannot be made now, ask again later. */
#define BCD_EXEC_EXIT_RETRY 75		/* EX_TEMPFAIL */
/* Exit status of the producer: it never can on this machine; bcd gives up the join. */
#define BCD_EXEC_EXIT_FINAL 78		/* EX_CONFIG */

/*
 * Read the producer's stdout, buf[0..len): exactly one JSON object
 * {"apiVersion": BCD_EXEC_API_VERSION, "attestation": <canonical base64url,
 * at most BC_ATTESTATION_B64_MAX characters>, "claims"?: <object>}, no other
 * member, no duplicate name, at most BCD_EXEC_OUTPUT_MAX bytes.  BC_OK with
 * *attestation (malloc()ed) and *claims (a new reference, or NULL); else
 * BC_EINVAL (or BC_ENOMEM) with err saying what is wrong, and both NULL.
 */
int			bcd_exec_output_parse(const char *buf, size_t len, char **attestation,
								  json_t **claims, char *err, size_t errlen);

/*
 * bcd join-request's --producer PATH and --producer-timeout S (either may
 * be NULL) for attestor: NULL when they can serve (PATH opened and
 * checked), else the usage error (naming PATH and what is wrong with it).
 */
const char *bcd_exec_producer_set(const char *path, const char *timeout, const char *attestor,
								  int attestor_set);

/*
 * Open the executable at the absolute path as ssh and sudo hold their
 * helpers: resolved one component at a time from /, it and every real
 * directory above it owned by root or bcd's user and writable by neither
 * group nor others, a regular file bcd may execute; checked on the
 * descriptor that is then what runs (bcd_child_spawn_fd).  Its descriptor
 * (O_PATH, close-on-exec, at least 3), or -1 with err naming opt (the
 * option, "--producer"), the path and why.
 */
int			bcd_exec_open_checked(const char *opt, const char *path, char *err, size_t errlen);
/*
 * The same walk for a directory (--svid-files DIR): it and every real
 * directory above it owned by root or bcd's user and writable by neither
 * group nor others, itself owned by bcd's user.  Its descriptor (O_PATH,
 * close-on-exec), or -1 with err.
 */
int			bcd_exec_open_checked_dir(const char *opt, const char *path, char *err,
									  size_t errlen);

#endif							/* BCD_PRODUCER_EXEC_H */
