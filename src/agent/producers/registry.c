/*
 * registry.c: which producer serves which attestor id.
 */
#include <stdlib.h>
#include <string.h>

#include "producers/producer.h"

/* Every producer bcd has. */
static const bcd_producer *const producers[] = {
	&bcd_producer_join_token,
	&bcd_producer_provisioned,
	&bcd_producer_tpm,
	&bcd_producer_x509pop,
	&bcd_producer_cloud_iid,
	&bcd_producer_discovery,
};

/* The producer for attestor (producer.h). */
const bcd_producer *
bcd_producer_for(const char *attestor)
{
	size_t		i;

	for (i = 0; i < sizeof(producers) / sizeof(producers[0]); i++)
		if (attestor != NULL && strcmp(producers[i]->attestor, attestor) == 0)
			return producers[i];
	return &bcd_producer_join_token;
}

/* bcd's own producer of attestor, or NULL: the attestor is a custom one (producer.h). */
const bcd_producer *
bcd_producer_builtin(const char *attestor)
{
	size_t		i;

	for (i = 0; i < sizeof(producers) / sizeof(producers[0]); i++)
		if (attestor != NULL && strcmp(producers[i]->attestor, attestor) == 0)
			return producers[i];
	return NULL;
}

/* Release what a producer made. */
void
bcd_evidence_free(bcd_evidence *ev)
{
	free(ev->attestation);
	free(ev->sealed_token);
	json_decref(ev->claims);
	ev->attestation = NULL;
	ev->sealed_token = NULL;
	ev->claims = NULL;
}
