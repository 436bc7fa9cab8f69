/*
 * job.c: the names of a provisioning's answer codes and results (the
 * socket protocol's words, bc_protocol.h BC_SOCK_*; the metrics labels),
 * whether a caller may ask again, a job's making, its references and the
 * release of its result.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bc_common.h"
#include "core/job.h"

/* The answer codes, in bcd_code order, and whether a caller may try again. */
static const struct
{
	const char *name;
	int			retryable;
}			codes[BCD_CODE_COUNT] = {
	{BC_SOCK_OK, 0},
	{BC_SOCK_NO_NODE_CREDENTIAL, 0},
	{BC_SOCK_BUSY, 1},
	{BC_SOCK_REFUSED, 0},
	{BC_SOCK_UNAVAILABLE, 1},
	{BC_SOCK_BAD_REQUEST, 0},
	{BC_SOCK_BAD_DIR, 0},
	{BC_SOCK_FORBIDDEN, 0},
	{BC_SOCK_FAILED, 0},
	{BC_SOCK_NO_SSH_CERTIFICATE, 0},
};

/* The provisioning results (the metrics' outcome labels), in bcd_job_result order. */
static const char *const results[BCD_RESULT_COUNT] = {
	"issued", "refused", "unavailable", "failed"
};

/* 1 when a and b are the same audiences in the same order. */
int
bcd_audiences_equal(const bcd_audiences *a, const bcd_audiences *b)
{
	if (a->n != b->n)
		return 0;
	for (int i = 0; i < a->n; i++)
		if (strcmp(a->v[i], b->v[i]) != 0)
			return 0;
	return 1;
}

/* The protocol name of an answer code. */
const char *
bcd_code_name(bcd_code code)
{
	return code < BCD_CODE_COUNT ? codes[code].name : BC_SOCK_FAILED;
}

/* 1 when a caller answered code may ask again later. */
int
bcd_code_retryable(bcd_code code)
{
	return code < BCD_CODE_COUNT && codes[code].retryable;
}

/* The metrics' outcome label of a provisioning's result. */
const char *
bcd_job_result_name(bcd_job_result result)
{
	return result < BCD_RESULT_COUNT ? results[result] : "failed";
}

/* Release a job's result (the key and the token are wiped). */
void
bcd_job_clear_result(bcd_job *job)
{
	if (job->key_pem != NULL)
		bc_free_secret(job->key_pem, job->key_len);
	if (job->token != NULL)
		bc_free_secret(job->token, strlen(job->token));
	job->token = NULL;
	job->token_ttl = 0;
	free(job->chain_pem);
	free(job->ssh_cert);
	job->ssh_cert = NULL;
	job->ssh_serial[0] = '\0';
	job->ssh_why[0] = '\0';
	job->key_pem = NULL;
	job->key_len = 0;
	job->chain_pem = NULL;
	job->chain_len = 0;
}

/* A new job of kind for (session, context[, aud]) asked by caller, one reference held; NULL on OOM. */
bcd_job *
bcd_job_new(bcd_job_kind kind, const char *session, const char *context,
			const bcd_audiences *aud, const bcd_peer *caller)
{
	bcd_job    *job = calloc(1, sizeof(*job));

	if (job == NULL)
		return NULL;
	job->kind = kind;
	if (kind == BCD_JOB_JWT_SVID && aud != NULL)
		job->audience = *aud;
	snprintf(job->session, sizeof(job->session), "%s", session);
	snprintf(job->context, sizeof(job->context), "%s", context);
	if (caller != NULL)
		job->caller = *caller;
	atomic_init(&job->refs, 1);
	return job;
}

/* Another reference to a finished job (its result is read only from now on). */
const bcd_job *
bcd_job_hold(const bcd_job *job)
{
	atomic_fetch_add(&((bcd_job *) job)->refs, 1);
	return job;
}

/* Drop a reference; the last one releases the result (the key and the token wiped) and the job. */
void
bcd_job_release(const bcd_job *job)
{
	bcd_job    *j = (bcd_job *) job;

	if (j == NULL || atomic_fetch_sub(&j->refs, 1) != 1)
		return;
	bcd_job_clear_result(j);
	free(j);
}

/* Set job's result to a failure: code, result and a message for the caller. */
void
bcd_job_fail(bcd_job *job, bcd_code code, bcd_job_result result, const char *fmt,...)
{
	va_list		ap;

	job->code = code;
	job->result = result;
	va_start(ap, fmt);
	vsnprintf(job->message, sizeof(job->message), fmt, ap);
	va_end(ap);
}
