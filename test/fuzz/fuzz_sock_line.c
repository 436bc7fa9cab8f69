/*
 * fuzz_sock_line.c: bcd's local-socket protocol as a local caller (any
 * process that may connect) drives it: the request line read, framed and
 * answered by the socket server's own code (core/sessions.c,
 * bcd_sessions_fuzz_line: conn_read and handle_request).  Every request
 * gets exactly one answer line, a JSON object with a boolean "ok".
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/sessions.h"
#include "fuzz_common.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char answer[64 * 1024];
	long		n = bcd_sessions_fuzz_line(data, size, answer, sizeof(answer));
	json_t	   *doc;

	/* nothing sent at all: closed without an answer */
	if (size == 0)
	{
		BC_FUZZ_ASSERT(n == -1);
		return 0;
	}
	BC_FUZZ_ASSERT(n > 0 && answer[n - 1] == '\n' && memchr(answer, '\n', (size_t) n) == answer + n - 1);
	doc = json_loadb(answer, (size_t) n - 1, 0, NULL);
	BC_FUZZ_ASSERT(json_is_object(doc) && json_is_boolean(json_object_get(doc, "ok")));
	json_decref(doc);
	return 0;
}
