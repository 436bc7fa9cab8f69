/*
 * fuzz_gw_http.c: what of bc-gateway's request handling runs without a
 * network: the status mapping of a database error (SQLSTATE and server
 * message to HTTP status, outcome and client message) and the bounds of a
 * request body.  Input: the first byte is the length of the SQLSTATE text
 * (mod 8), then that text, then the server's message.  The whole input is
 * also a request body.
 */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "metrics.h"
#include "relay.h"
#include "fuzz_common.h"

/* The client message of a database error: the 400's, else none (as relay.c answers). */
static int
db_error(const char *ss, const char *server_msg, int *outcome, const char **message)
{
	int			code = gw_http_status_for_sqlstate(ss, outcome);

	*message = code == 400 ? gw_http_invalid_input_message(ss, server_msg) : NULL;
	return code;
}

/* 0 when a body is relayed, else the HTTP status it is refused with (checked by length, then whole; the default bound, 64 KiB: the fuzzer's inputs are below 66,000 bytes). */
static int
body_status(const char *body, size_t n)
{
	int			http;

	return gw_http_body_refusal(NULL, n, 0, &http) != NULL ||
		gw_http_body_refusal(body, n, 0, &http) != NULL ? http : 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char		ss[8];
	char	   *msg;
	size_t		sl;
	int			outcome = -1;
	const char *client = NULL;
	int			code;
	int			body;

	/* a body: relayed exactly when 1..65536 bytes without a NUL */
	body = body_status((const char *) data, size);
	if (size == 0 || memchr(data, '\0', size) != NULL)
		BC_FUZZ_ASSERT(body == 400);
	else if (size > GW_MAX_BODY)
		BC_FUZZ_ASSERT(body == 413);
	else
		BC_FUZZ_ASSERT(body == 0);

	if (size == 0)
		return 0;
	sl = data[0] % 8;
	if (sl > size - 1)
		sl = size - 1;
	memcpy(ss, data + 1, sl);
	ss[sl] = '\0';
	msg = malloc(size - 1 - sl + 1);
	BC_FUZZ_ASSERT(msg != NULL);
	memcpy(msg, data + 1 + sl, size - 1 - sl);
	msg[size - 1 - sl] = '\0';

	code = db_error((data[0] & 0x80) ? NULL : ss, msg, &outcome, &client);
	BC_FUZZ_ASSERT(code == 400 || code == 404 || code == 500 || code == 503);
	if ((data[0] & 0x80) || strlen(ss) != 5)
		BC_FUZZ_ASSERT(code == 500);
	else if (strncmp(ss, "22", 2) == 0 || strcmp(ss, "54000") == 0 || strcmp(ss, "54001") == 0)
		BC_FUZZ_ASSERT(code == 400 && outcome == GW_OUT_INVALID);
	if (code == 400)
	{
		BC_FUZZ_ASSERT(client != NULL);
		/* the server's own words reach the client only for the relayed codes */
		if (client == msg)
			BC_FUZZ_ASSERT(strcmp(ss, "22023") == 0 || strcmp(ss, "22P02") == 0 ||
						   strcmp(ss, "22021") == 0 || strcmp(ss, "22P05") == 0);
	}
	else
		BC_FUZZ_ASSERT(client == NULL);
	free(msg);
	return 0;
}
