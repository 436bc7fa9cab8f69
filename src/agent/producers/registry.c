/*
 * registry.c: every producer bcd has, and which one serves which attestor
 * id.  Adding a producer is its file and one line below.
 */
#include <stdlib.h>
#include <string.h>

#include "producers/producer.h"

/* Every producer bcd has, in the order --help lists them. */
static const bcd_producer *const producers[] = {
	&bcd_producer_join_token,
	&bcd_producer_provisioned,
	&bcd_producer_tpm,
	&bcd_producer_x509pop,
	&bcd_producer_cloud_iid,
	&bcd_producer_discovery,
	&bcd_producer_exec,
};

#define N_PRODUCERS (sizeof(producers) / sizeof(producers[0]))

/* Every producer (producer.h). */
const bcd_producer *const *
bcd_producers(size_t *n)
{
	*n = N_PRODUCERS;
	return producers;
}

/* bcd's own producer of attestor, or NULL: the attestor is a custom one (producer.h). */
const bcd_producer *
bcd_producer_builtin(const char *attestor)
{
	for (size_t i = 0; i < N_PRODUCERS; i++)
		if (attestor != NULL && producers[i]->attestor != NULL &&
			strcmp(producers[i]->attestor, attestor) == 0)
			return producers[i];
	return NULL;
}

/* The producer for attestor (producer.h). */
const bcd_producer *
bcd_producer_for(const char *attestor)
{
	const bcd_producer *p = bcd_producer_builtin(attestor);

	return p != NULL ? p : &bcd_producer_join_token;
}

/* The producer that proves a credential held (producer.h). */
const bcd_producer *
bcd_producer_held(void)
{
	for (size_t i = 0; i < N_PRODUCERS; i++)
		if (producers[i]->proves_held)
			return producers[i];
	return NULL;
}

/* The default attestor of command (producer.h). */
const char *
bcd_producer_default_attestor(unsigned command)
{
	for (size_t i = 0; i < N_PRODUCERS; i++)
		if (producers[i]->default_for & command)
			return producers[i]->attestor;
	return NULL;
}
