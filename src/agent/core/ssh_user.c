/*
 * ssh_user.c: a session's OpenSSH user certificate, taken from the
 * service's session answer (docs/agent.md, "SSH").  When the session proof
 * says "sshUser": true (provision.c; signed, so the gateway can neither add
 * nor drop it), the service's signed payload carries sshCertificate and
 * sshSerial when the pool's rule allowed one.  The signature over the
 * payload is already verified (verify.c); what is checked here is that the
 * certificate is what bcd asked for: a well-formed user certificate
 * (bc_ssh_cert_parse, src/common/ssh.c: exact length, bounded fields) of
 * the session's own key, with the serial the payload states.  Anything
 * else is taken as no certificate, and the caller logs why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "bc_ssh.h"
#include "core/ssh_user.h"

/* The SSH user certificate of a verified session answer (ssh_user.h). */
bcd_ssh_user_rc
bcd_ssh_user_take(json_t *payload, EVP_PKEY *key, const char *comment, char **line,
				  char serial[21], char *why, size_t whylen)
{
	json_t	   *jcert = json_object_get(payload, "sshCertificate");
	json_t	   *jserial = json_object_get(payload, "sshSerial");
	const char *b64 = json_string_value(jcert);
	const char *dec = json_string_value(jserial);
	unsigned char *cert = NULL;
	unsigned char *blob = NULL;
	size_t		cert_len = 0;
	size_t		blob_len = 0;
	bc_ssh_cert_info info;
	char		want[21];
	bcd_ssh_user_rc rc = BCD_SSH_USER_BAD;

	*line = NULL;
	serial[0] = '\0';
	why[0] = '\0';
	memset(&info, 0, sizeof(info));
	if (jcert == NULL && jserial == NULL)
	{
		snprintf(why, whylen, "the service issued no SSH certificate (no user rule for the "
				 "pool, or no principal allowed: bc_join.events ssh.user.refused says why)");
		return BCD_SSH_USER_NONE;
	}
	if (b64 == NULL || dec == NULL)
	{
		snprintf(why, whylen, "sshCertificate and sshSerial are not both strings");
		return BCD_SSH_USER_BAD;
	}
	if (strlen(b64) > bc_b64_encoded_len(BC_SSH_CERT_MAX))
	{
		snprintf(why, whylen, "sshCertificate is over %d bytes", BC_SSH_CERT_MAX);
		return BCD_SSH_USER_BAD;
	}
	if ((cert = malloc(BC_SSH_CERT_MAX)) == NULL)
	{
		snprintf(why, whylen, "out of memory");
		return BCD_SSH_USER_BAD;
	}
	if (bc_b64_decode(b64, strlen(b64), cert, BC_SSH_CERT_MAX, &cert_len) != BC_OK)
		snprintf(why, whylen, "sshCertificate is not base64");
	else if (bc_ssh_cert_parse(cert, cert_len, &info) != BC_OK)
		snprintf(why, whylen, "sshCertificate is not an OpenSSH certificate bcd reads");
	else if (info.type != BC_SSH_CERT_USER)
		snprintf(why, whylen, "sshCertificate is a host certificate, not a user certificate");
	else if (bc_ssh_pubkey_blob(key, &blob, &blob_len) != BC_OK)
		snprintf(why, whylen, "cannot encode the session key as an SSH key");
	else if (info.key_blob_len != blob_len || memcmp(info.key_blob, blob, blob_len) != 0)
		snprintf(why, whylen, "sshCertificate certifies another key than the session's");
	else if (snprintf(want, sizeof(want), "%llu", (unsigned long long) info.serial) <= 0 ||
			 strcmp(want, dec) != 0)
		snprintf(why, whylen, "sshSerial %.24s is not the certificate's serial %s", dec, want);
	else if ((*line = bc_ssh_pubkey_line(cert, cert_len, comment)) == NULL)
		snprintf(why, whylen, "cannot write the certificate line (out of memory?)");
	else
	{
		snprintf(serial, 21, "%s", want);
		rc = BCD_SSH_USER_OK;
	}
	bc_ssh_cert_info_free(&info);	/* zeroed when it did not parse */
	free(blob);
	free(cert);
	return rc;
}
