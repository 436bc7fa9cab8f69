/*
 * provisioned.c: the producer of the provisioned attestor (docs/attestors.md, "The built-in provisioned attestor"):
 * a one-time provisioning token made by an operator for a node that exists
 * (bc_join.create_provisioning_token), sealed to the service for this CSR
 * like a join token, and the evidence {"nodeId": "<node id>"} naming the
 * node this machine comes back as (bcd run --node-id NODE).  It answers no
 * challenge.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "producers/producer.h"

/* Its own state: --node-id. */
static const char *node_id;

static const bcd_producer_option options[] = {
	{"node-id", "NODE", "come back as this existing node: the token is a\n"
	 "provisioning token an operator made for it\n"
	 "(bc_join.create_provisioning_token); implies\n"
	 "--attestor provisioned"},
	{NULL, NULL, NULL}
};

static const char *
set_option(const char *name, const char *arg)
{
	if (strcmp(name, "node-id") == 0)
		node_id = arg;
	return NULL;
}

/* It serves the join: a node named, and the provisioning token to prove it. */
static const char *
configure(const bcd_producer_setup *setup)
{
	if (node_id == NULL)
		return NULL;			/* --attestor provisioned alone: produce() says what is missing */
	if (node_id[0] == '\0')
		return "--node-id must name a node";
	if (!setup->has_token)
		return "--node-id needs the provisioning token (--token or --token-file)";
	return NULL;
}

/* Every round: the sealed token and {"nodeId": ...} as base64url. */
static int
produce(const bcd_producer_input *in, bcd_evidence *out, char *err, size_t errlen)
{
	json_t	   *ev;
	char	   *text = NULL;
	int			rc;

	if (node_id == NULL || node_id[0] == '\0')
	{
		snprintf(err, errlen, "the provisioned attestor needs --node-id");
		return BC_EINVAL;
	}
	if (in->token == NULL && in->token_file == NULL)
	{
		snprintf(err, errlen, "the provisioned attestor needs the provisioning token (--token or --token-file)");
		return BC_EINVAL;
	}
	rc = bcd_seal_token(in, out, err, errlen);
	if (rc != BC_OK)
		return rc;
	ev = json_pack("{s:s}", "nodeId", node_id);
	if (ev != NULL)
		text = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	if (text == NULL)
	{
		snprintf(err, errlen, "cannot build the provisioned evidence (out of memory)");
		bcd_evidence_free(out);
		return BC_ENOMEM;
	}
	out->attestation = bc_b64url_encode_alloc((const unsigned char *) text, strlen(text));
	free(text);
	if (out->attestation == NULL)
	{
		snprintf(err, errlen, "cannot build the provisioned evidence (out of memory)");
		bcd_evidence_free(out);
		return BC_ENOMEM;
	}
	return BC_OK;
}

const bcd_producer bcd_producer_provisioned = {
	.attestor = BC_ATTESTOR_PROVISIONED,
	.summary = "a one-time token for a node that exists (a re-imaged machine)",
	.commands = BCD_CMD_RUN,
	.options = options,
	.implied_by_options = 1,
	.set_option = set_option,
	.configure = configure,
	.produce = produce,
};
