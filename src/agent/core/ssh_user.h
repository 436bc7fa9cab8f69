/*
 * ssh_user.h: a session's OpenSSH user certificate (ssh_user.c): what bcd
 * takes from the service's verified session answer when the proof asked
 * for one ("sshUser": true), and the line of the .key-cert.pub file.
 */
#ifndef BCD_SSH_USER_H
#define BCD_SSH_USER_H

#include <stddef.h>

#include <jansson.h>
#include <openssl/evp.h>

/* What bcd_ssh_user_take found. */
typedef enum bcd_ssh_user_rc
{
	BCD_SSH_USER_OK = 0,		/* a user certificate of key: *line, serial */
	BCD_SSH_USER_NONE,			/* the answer carries none (the service issued none) */
	BCD_SSH_USER_BAD			/* it carries one bcd does not take (why) */
} bcd_ssh_user_rc;

/*
 * The SSH user certificate of a verified session answer's payload for the
 * session key key: sshCertificate (standard base64 of the certificate
 * blob, at most BC_SSH_CERT_MAX bytes) and sshSerial (its serial, decimal)
 * must be both present or both absent; the certificate must parse
 * (bc_ssh_cert_parse), be a user certificate, certify key (its key blob
 * equal to bc_ssh_pubkey_blob of key) and carry the serial sshSerial says.
 * On BCD_SSH_USER_OK *line is the `<type>-cert-v01@openssh.com <base64>
 * <comment>` line (malloc()ed, "\n"-terminated, as ssh-keygen writes a
 * -cert.pub file) and serial its serial; otherwise *line is NULL and why
 * says why (BCD_SSH_USER_NONE too).
 */
bcd_ssh_user_rc bcd_ssh_user_take(json_t *payload, EVP_PKEY *key, const char *comment,
								  char **line, char serial[21], char *why, size_t whylen);

#endif							/* BCD_SSH_USER_H */
