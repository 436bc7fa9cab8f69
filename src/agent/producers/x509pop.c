/*
 * x509pop.c: the producer of the x509pop attestor, how a machine that was
 * away comes back as itself.  It proves the certificate it holds
 * (node-chain.pem's leaf, expired or not) with that certificate's key
 * (node.key): a JWS made by src/common (bc_jws_sign_x5c), ES256 with
 * x5c = [leaf], over {"purpose":"x509pop","nodeId":<the leaf's node>,
 * "csrSha256":<this join's CSR>,"iat":<now>}.  The CSR is a NEW key's (one
 * key, one join): the old key only proves.  It answers no challenge.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "producers/producer.h"

/* The evidence: base64url of the JWS, no sealed token. */
static int
produce(const bcd_producer_input *in, bcd_evidence *out, char *err, size_t errlen)
{
	char		csr_sha256[44];
	char		payload[512];
	char	   *jws = NULL;
	X509	   *chain[1];
	int			n;
	int			rc;

	memset(out, 0, sizeof(*out));
	if (in->held_key == NULL || in->held_leaf == NULL || in->held_node_id == NULL)
	{
		snprintf(err, errlen, "x509pop needs the certificate held in the state directory "
				 "(node.key and node-chain.pem)");
		return BC_EINVAL;
	}
	rc = bc_sha256_b64url(in->csr, in->csr_len, csr_sha256);
	if (rc != BC_OK)
		return rc;
	n = snprintf(payload, sizeof(payload),
				 "{\"purpose\":\"x509pop\",\"nodeId\":\"%s\",\"csrSha256\":\"%s\",\"iat\":%lld}",
				 in->held_node_id, csr_sha256, (long long) time(NULL));
	if (n < 0 || (size_t) n >= sizeof(payload) || strpbrk(in->held_node_id, "\"\\") != NULL)
	{
		snprintf(err, errlen, "the held certificate's node id is not one to send");
		return BC_EINVAL;
	}
	chain[0] = in->held_leaf;
	rc = bc_jws_sign_x5c(in->held_key, BC_JWS_ES256, chain, 1, (const unsigned char *) payload,
						 (size_t) n, &jws);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "cannot sign the x509pop proof with node.key (%s)",
				 bc_status_str(rc));
		return rc;
	}
	out->attestation = bc_b64url_encode_alloc((const unsigned char *) jws, strlen(jws));
	free(jws);
	if (out->attestation == NULL)
		return BC_ENOMEM;
	return BC_OK;
}

const bcd_producer bcd_producer_x509pop = {
	.attestor = BC_ATTESTOR_X509POP,
	.summary = "how a node whose certificate expired comes back as\n"
	"    itself, by itself (the certificate held proves it; no option)",
	.commands = BCD_CMD_RUN,
	.proves_held = 1,
	.produce = produce,
};
