/*
 * evidence.c: what every producer hands back (bcd_evidence, producer.h) and
 * its release, below the registry: producers free their evidence without
 * depending on the list of producers.
 */
#include <stdlib.h>

#include <jansson.h>

#include "producers/producer.h"

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

/* Release a quote's members (producer.h). */
void
bcd_quote_free(bcd_quote *q)
{
	if (q == NULL)
		return;
	free(q->ak_pub);
	free(q->attest);
	free(q->sig);
	q->ak_pub = q->attest = q->sig = NULL;
	q->ak_pub_len = q->attest_len = q->sig_len = 0;
}
