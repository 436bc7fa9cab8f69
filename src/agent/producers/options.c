/*
 * options.c: the shared command-line parser of bcd run, bcd renew and bcd
 * ramdisk (producer.h, bcd_optparser): the command declares its own options,
 * each producer its own (bcd_producer.options), and getopt_long sees them
 * all at once.  A producer's option goes to that producer's set_option, into
 * its own state; the command never names one.  Then finish picks the
 * producer of the join and has it check its state (configure).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producers/producer.h"

/* The getopt value of the k-th producer option. */
#define PRODUCER_OPT_BASE 0x1000

/* Build the parser for command (producer.h). */
int
bcd_optparser_init(bcd_optparser *p, const struct option *common, unsigned command)
{
	size_t		n_producers;
	const bcd_producer *const *all = bcd_producers(&n_producers);
	size_t		n_common = 0;
	size_t		total = 0;
	size_t		k;

	memset(p, 0, sizeof(*p));
	while (common[n_common].name != NULL)
		n_common++;
	for (size_t i = 0; i < n_producers; i++)
		for (const bcd_producer_option *o = all[i]->options; (all[i]->commands & command) && o != NULL &&
			 o->name != NULL; o++)
			total++;
	p->longopts = calloc(n_common + total + 1, sizeof(*p->longopts));
	p->owner = calloc(total + 1, sizeof(*p->owner));
	if (p->longopts == NULL || p->owner == NULL)
	{
		bcd_optparser_free(p);
		return -1;
	}
	memcpy(p->longopts, common, n_common * sizeof(*common));
	k = 0;
	for (size_t i = 0; i < n_producers; i++)
		for (const bcd_producer_option *o = all[i]->options; (all[i]->commands & command) && o != NULL &&
			 o->name != NULL; o++)
		{
			p->longopts[n_common + k] = (struct option) {
				o->name, o->arg != NULL ? required_argument : no_argument, NULL,
				(int) (PRODUCER_OPT_BASE + k)
			};
			p->owner[k] = all[i];
			k++;
		}
	p->n_common = n_common;
	p->n = total;
	p->command = command;
	optind = 1;
	return 0;
}

/* Remember that p's option name was given. */
static void
note_used(bcd_optparser *p, const bcd_producer *producer, const char *name)
{
	for (size_t i = 0; i < p->n_used; i++)
		if (p->used[i] == producer)
			return;
	if (p->n_used < BCD_OPTPARSER_USED_MAX)
	{
		p->used[p->n_used] = producer;
		p->used_opt[p->n_used] = name;
		p->n_used++;
	}
}

/* The next option (producer.h). */
int
bcd_optparser_next(bcd_optparser *p, int argc, char **argv, const char **bad)
{
	int			c = getopt_long(argc, argv, "h", p->longopts, NULL);
	size_t		k;
	const char *why;

	if (c < PRODUCER_OPT_BASE || (size_t) (c - PRODUCER_OPT_BASE) >= p->n)
		return c;
	k = (size_t) (c - PRODUCER_OPT_BASE);
	note_used(p, p->owner[k], p->longopts[p->n_common + k].name);
	why = p->owner[k]->set_option != NULL ?
		p->owner[k]->set_option(p->longopts[p->n_common + k].name, optarg) : NULL;
	if (why != NULL && *bad == NULL)
		*bad = why;
	return 0;
}

/* The producer of the join, configured (producer.h). */
const bcd_producer *
bcd_optparser_finish(bcd_optparser *p, bcd_producer_setup *setup, const char **bad)
{
	static char msg[256];
	const bcd_producer *chosen = NULL;
	const char *why;

	/* options that select their producer (--node-id: provisioned) */
	for (size_t i = 0; i < p->n_used && !setup->attestor_set; i++)
		if (p->used[i]->implied_by_options && p->used[i]->attestor != NULL)
		{
			setup->attestor = p->used[i]->attestor;
			chosen = p->used[i];
		}
	if (chosen == NULL)
		chosen = bcd_producer_builtin(setup->attestor);
	/* a custom attestor: the producer whose options were given for it (--producer) */
	for (size_t i = 0; i < p->n_used && chosen == NULL; i++)
		if (p->used[i]->attestor == NULL)
			chosen = p->used[i];
	if (chosen == NULL)
		chosen = bcd_producer_for(setup->attestor);
	if (!(chosen->commands & p->command))
	{
		snprintf(msg, sizeof(msg), "bcd %s has no producer of --attestor %s", setup->command,
				 setup->attestor);
		*bad = msg;
		return NULL;
	}
	for (size_t i = 0; i < p->n_used; i++)
	{
		if (p->used[i] == chosen)
			continue;
		if (p->used[i]->attestor != NULL)
			snprintf(msg, sizeof(msg), "--%s is for --attestor %s, not %s", p->used_opt[i],
					 p->used[i]->attestor, setup->attestor);
		else if (!setup->attestor_set)
			snprintf(msg, sizeof(msg), "--%s needs --attestor ID (the custom attestor it makes "
					 "the evidence of)", p->used_opt[i]);
		else
			snprintf(msg, sizeof(msg), "--%s is for a custom attestor; bcd has its own producer of %s",
					 p->used_opt[i], setup->attestor);
		*bad = msg;
		return NULL;
	}
	why = chosen->configure != NULL ? chosen->configure(setup) : NULL;
	if (why != NULL)
	{
		*bad = why;
		return NULL;
	}
	return chosen;
}

void
bcd_optparser_free(bcd_optparser *p)
{
	free(p->longopts);
	free(p->owner);
	p->longopts = NULL;
	p->owner = NULL;
}

/* Each producer serving command, with its options (producer.h). */
void
bcd_producers_usage(FILE *stream, unsigned command)
{
	size_t		n_producers;
	const bcd_producer *const *all = bcd_producers(&n_producers);

	fputs("Producers: the evidence of --attestor ID, each with its own options:\n", stream);
	for (size_t i = 0; i < n_producers; i++)
	{
		if (!(all[i]->commands & command))
			continue;
		fprintf(stream, "  %s: %s\n", all[i]->attestor != NULL ? all[i]->attestor : "any other ID",
				all[i]->summary != NULL ? all[i]->summary : "");
		for (const bcd_producer_option *o = all[i]->options; o != NULL && o->name != NULL; o++)
		{
			char		head[64];
			const char *h = o->help != NULL ? o->help : "";

			snprintf(head, sizeof(head), "--%s%s%s", o->name, o->arg != NULL ? " " : "",
					 o->arg != NULL ? o->arg : "");
			fprintf(stream, "    %-20s", head);
			if (strlen(head) > 20)
				fprintf(stream, "\n    %-20s", "");
			for (const char *nl; (nl = strchr(h, '\n')) != NULL; h = nl + 1)
				fprintf(stream, " %.*s\n    %-20s", (int) (nl - h), h, "");
			fprintf(stream, " %s\n", h);
		}
	}
}
