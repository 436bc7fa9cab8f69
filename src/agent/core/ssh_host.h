/*
 * ssh_host.h: the host side of SSH (issue 47; docs/agent.md, "SSH"), a
 * module the daemon composes (daemon.c) like the revocation watch: its own
 * thread and HTTPS client.
 *
 *   host certificates  for each --ssh-host-key FILE.pub (and the key of
 *                      --ssh-own-host-key DIR) POST /v1/ssh/host, proven by
 *                      the node key, at start when the certificate held is
 *                      not right and after each join or renewal; the answer
 *                      checked (bcd_ssh_host_answer) and written as
 *                      <key name>-cert.pub; then --ssh-reload, once;
 *   CA keys and KRL    GET /v1/ssh/signed (bcd_ssh_signed_take) and GET
 *                      /v1/ssh/krl (bcd_ssh_krl_check) at start and every
 *                      --status-interval, into --ssh-krl, --ssh-user-ca,
 *                      --ssh-host-ca, replaced atomically, never removed.
 *
 * The checks (ssh_docs.c) are apart from the thread (ssh_host.c) so that
 * test/unit/test_bcd_ssh.c reaches them.
 */
#ifndef BCD_SSH_HOST_H
#define BCD_SSH_HOST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "bc_ssh.h"
#include "core/agent.h"
#include "core/provisioner.h"
#include "core/service_keys.h"

/* Bound of GET /v1/ssh/signed's body; most CA lines of each kind believed. */
#define BCD_SSH_SIGNED_MAX (256 * 1024)
#define BCD_SSH_CA_LINES_MAX 8
/* Bound of a .pub or -cert.pub file read. */
#define BCD_SSH_LINE_MAX (64 * 1024)
/*
 * The oldest signed document taken up: issuedAt at most this many seconds
 * before bcd's clock (the service signs each copy the gateway fetches, at
 * most --service-keys-max-age = 3600 s apart; an older one is a replay that
 * would freeze the KRL).
 */
#define BCD_SSH_SIGNED_MAX_AGE 3600
/* The floor kept in bcd's state directory across restarts (issuedAt, krlVersion). */
#define BCD_SSH_FLOOR_FILE "ssh-signed-floor"

/* GET /v1/ssh/signed as believed: what bcd writes and what it compares later ones with. */
typedef struct bcd_ssh_signed
{
	int64_t		issued;			/* issuedAt, Unix seconds (0: none held) */
	int64_t		krl_version;	/* krlVersion (-1: none held) */
	char		krl_sha256[44]; /* base64url of the KRL's SHA-256 */
	char	   *host_ca;		/* "@cert-authority * <key line>\n"... (--ssh-host-ca), malloc()ed */
	char	   *user_ca;		/* "<key line>\n"... (--ssh-user-ca), malloc()ed */
	int			n_host_ca;
	int			n_user_ca;
	unsigned char *host_ca_blob[BCD_SSH_CA_LINES_MAX];	/* each hostCa key's blob, malloc()ed */
	size_t		host_ca_blob_len[BCD_SSH_CA_LINES_MAX];
} bcd_ssh_signed;

/*
 * Take up text, the body of GET /v1/ssh/signed ({"keys":[JWS...]}): the
 * first JWS a pinned signing key verifies (bcd_service_keys_first_verified),
 * its payload {trustDomain (ours), issuedAt (RFC 3339, never older than
 * held's, nor than now - BCD_SSH_SIGNED_MAX_AGE), krlVersion (an integer, never lower than held's), krlSha256
 * (base64url of 32 bytes), hostCa, userCa (arrays of at most 8 plain public
 * key lines each, every one parsed and written again by bc_ssh.h)}.  held
 * may be NULL (nothing held).  BC_OK with out filled (bcd_ssh_signed_clear
 * it), or BC_EVERIFY / BC_EINVAL / BC_ETOOBIG / BC_ENOMEM with err.
 */
int			bcd_ssh_signed_take(const bcd_service_keys *keys, const char *text, size_t len,
								const bcd_ssh_signed *held, int64_t now, bcd_ssh_signed *out,
								char *err, size_t errlen);
void		bcd_ssh_signed_clear(bcd_ssh_signed *s);

/*
 * 1 when ca_blob is one of s's hostCa keys, or s holds none (no signed
 * document taken up yet, or one without host CA keys): a host certificate
 * signed by a CA no longer published is asked for again.
 */
int			bcd_ssh_host_ca_published(const bcd_ssh_signed *s, const unsigned char *ca_blob,
									  size_t ca_blob_len);

/*
 * The floor of the signed documents taken up (issuedAt, krlVersion), kept in
 * state_dir/BCD_SSH_FLOOR_FILE across restarts: save writes it atomically
 * (BC_OK or an error); load sets *issued and *krl_version to the file's
 * when higher (a missing or unreadable file changes nothing).
 */
int			bcd_ssh_floor_save(const char *state_dir, int64_t issued, int64_t krl_version);
void		bcd_ssh_floor_load(const char *state_dir, int64_t *issued, int64_t *krl_version);

/*
 * The hostname claim of the proof, normalized in place as DNS names compare:
 * lower case, one trailing dot dropped.
 */
void		bcd_ssh_hostname_norm(char *name);

/*
 * The body of GET /v1/ssh/krl against s: at most BC_SSH_KRL_MAX bytes, an
 * OpenSSH KRL's magic and format 1, its SHA-256 s's krlSha256.  BC_OK, or
 * BC_ETOOBIG / BC_EINVAL / BC_EVERIFY (the hash differs) with err.
 */
int			bcd_ssh_krl_check(const bcd_ssh_signed *s, const unsigned char *krl, size_t len,
							  char *err, size_t errlen);

/*
 * The krl_version of a KRL's header (magic, format 1, then krl_version
 * big-endian: PROTOCOL.krl), or -1 when krl is not one: the floor bcd takes
 * from the --ssh-krl file already there at start.
 */
int64_t		bcd_ssh_krl_version(const unsigned char *krl, size_t len);

/*
 * The signed payload of POST /v1/ssh/host's answer for the host key blob:
 * sshKeySha256 that of blob, sshCertificate the standard base64 of a
 * certificate (at most BC_SSH_CERT_MAX) that bc_ssh_cert_parse reads, of
 * type host, certifying blob, valid before at most node_not_after + 1 (the
 * same end: X.509's notAfter is inclusive, valid_before exclusive), its
 * serial sshSerial (decimal); when principals were asked (n_asked > 0),
 * none beyond them.  BC_OK with *cert (malloc()ed), *cert_len and info
 * (bc_ssh_cert_info_free it), or BC_EVERIFY / BC_EINVAL with err.
 */
int			bcd_ssh_host_answer(json_t *payload, const unsigned char *blob, size_t blob_len,
								int64_t node_not_after, const char *const *asked, size_t n_asked,
								unsigned char **cert, size_t *cert_len, bc_ssh_cert_info *info,
								char *err, size_t errlen);

/*
 * A certificate file's text (a -cert.pub line) held for blob: BC_OK when it
 * parses as a host certificate of blob valid before node_not_after or
 * node_not_after + 1 (one got with the node certificate held), signed by a
 * CA of published's hostCa (bcd_ssh_host_ca_published; published NULL: not
 * checked), with info filled
 * (bc_ssh_cert_info_free it); else BC_EINVAL with why in err (a new one is
 * asked for).
 */
int			bcd_ssh_host_cert_held(const char *text, size_t len, const unsigned char *blob,
								   size_t blob_len, int64_t node_not_after,
								   const bcd_ssh_signed *published, bc_ssh_cert_info *info,
								   char *err, size_t errlen);

/* The daemon's SSH module. */
typedef struct bcd_ssh bcd_ssh;

/* 1 when bcd run with o runs it: the daemon with any --ssh-* option above. */
int			bcd_ssh_wanted(const bcd_run_opts *o);
/* o's --ssh-* options, their syntax and bounds (bcd run's check): NULL, or what is wrong. */
const char *bcd_ssh_opts_check(const bcd_run_opts *o);

/*
 * Open and check every directory and the reload (bcd refuses to start
 * otherwise), make --ssh-own-host-key's key when it is missing, start the
 * thread: BC_OK with *out, or an error with err.
 */
int			bcd_ssh_start(const bcd_run_opts *o, const bcd_service_keys *keys,
						  bcd_provisioner *prov, bcd_ssh **out, char *err, size_t errlen);
/* A node credential was published: look at the host certificates now.  NULL: nothing. */
void		bcd_ssh_kick(bcd_ssh *s);
/*
 * bcd status's members: sshHostCertificates [{path, serial, validBefore}],
 * sshKrlVersion (null before a KRL was written); with a file of the signed
 * document asked for, sshSignedIssuedAt (null before one was taken up) and
 * sshSignedError (null: the last one was taken up); set into doc.  NULL: nothing.
 */
void		bcd_ssh_status(bcd_ssh *s, json_t *doc);
void		bcd_ssh_stop(bcd_ssh *s);
void		bcd_ssh_free(bcd_ssh *s);

#endif							/* BCD_SSH_HOST_H */
