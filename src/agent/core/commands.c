/*
 * commands.c: the commands the service queued for this node (docs/agent.md,
 * "Commands").
 *
 * Fetch: POST /v1/commands {"proof": JWS ES256 by the node key over
 * {"purpose":"commands","serial","iat"}}.  The answer {"status":"issued",
 * "response": JWS} is verified against the pinned signing key; its payload
 * must be {"purpose":"commands","nodeId": <ours>,"serial": <ours>,"iat":
 * <within BC_PROOF_WINDOW>,"commands":[{"id","kind","payload","expiresAt"}]}.
 * Each command runs the handler whose prefix is the longest that starts its
 * kind: EXECUTABLE KIND ID, the payload (JSON) on stdin, stdout and stderr
 * together kept up to OUTPUT_MAX bytes, killed (its process group) after
 * --command-timeout.  Exit 0 is done, anything else failed.  The result
 * {"exitCode","output","truncated"[,"reason"]} goes back through POST
 * /v1/commands/complete {"proof": JWS over {"purpose":"complete","serial",
 * "iat","commandId","status","resultSha256"},"result": base64url(result)}.
 * A command whose kind no handler takes fails with reason no-handler.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/child.h"
#include "core/clock.h"
#include "core/commands.h"
#include "core/proof.h"
#include "core/log.h"
#include "core/tpm_key.h"
#include "core/transport.h"

/* A handler's output (stdout and stderr) kept, in bytes. */
#define OUTPUT_MAX 8192

/* --command-handler PREFIX=EXECUTABLE (commands.h). */
const char *
bcd_commands_add_handler(bcd_run_opts *o, const char *arg)
{
	const char *eq = strchr(arg, '=');
	size_t		n;

	if (eq == NULL || eq[1] != '/')
		return "--command-handler must be PREFIX=/absolute/executable";
	if (o->n_handlers >= BCD_COMMAND_HANDLERS_MAX)
		return "at most 16 --command-handler";
	n = (size_t) (eq - arg);
	/* "diag.*" is the prefix "diag."; "*" or "" every kind */
	if (n > 0 && arg[n - 1] == '*')
		n--;
	if (n > 128 || strspn(arg, "abcdefghijklmnopqrstuvwxyz0123456789-.") < n)
		return "--command-handler PREFIX is dotted lower-case words (disk.wipe, diag.*, deploy.)";
	for (int i = 0; i < o->n_handlers; i++)
		if (o->handlers[i].prefix_len == n && strncmp(o->handlers[i].prefix, arg, n) == 0)
			return "--command-handler names the same PREFIX twice";
	if (access(eq + 1, X_OK) != 0)
		return "--command-handler EXECUTABLE is not executable";
	o->handlers[o->n_handlers].prefix = arg;
	o->handlers[o->n_handlers].prefix_len = n;
	o->handlers[o->n_handlers].exe = eq + 1;
	o->n_handlers++;
	return NULL;
}

/* The handler for kind: the longest prefix; NULL when none. */
static const bcd_command_handler *
handler_for(const bcd_run_opts *o, const char *kind)
{
	const bcd_command_handler *best = NULL;

	for (int i = 0; i < o->n_handlers; i++)
	{
		size_t		n = o->handlers[i].prefix_len;

		if (strncmp(kind, o->handlers[i].prefix, n) == 0 &&
			(best == NULL || n > best->prefix_len))
			best = &o->handlers[i];
	}
	return best;
}

/* Bytes JSON strings can hold: printable ASCII, newline and tab; '?' for the rest. */
static void
sanitize(char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if ((c < 0x20 && c != '\n' && c != '\t') || c >= 0x7f)
			s[i] = '?';
	}
}

/* In a handler's child: BCD_COMMAND_ID and BCD_COMMAND_KIND (arg: id, kind). */
static int
handler_setup(void *arg)
{
	const char *const *idkind = arg;

	setenv("BCD_COMMAND_ID", idkind[0], 1);
	setenv("BCD_COMMAND_KIND", idkind[1], 1);
	return 0;
}

/* Run h for one command; the result object (never NULL unless out of memory). */
static json_t *
run_handler(const bcd_run_opts *o, const bcd_command_handler *h, const char *id,
			const char *kind, const char *payload)
{
	const char *idkind[2] = {id, kind};
	char	   *argv[4] = {(char *) h->exe, (char *) kind, (char *) id, NULL};
	bcd_child	c;
	char		buf[OUTPUT_MAX + 1];
	size_t		len = 0;
	int			truncated = 0;
	int			timed_out = 0;
	int			status = 0;
	double		deadline = bcd_now_ms() / 1000.0 + o->command_timeout;
	json_t	   *res;
	int			reaped = 0;

	if (bcd_child_spawn(&c, h->exe, argv, NULL, 0, handler_setup, idkind) != BC_OK)
		return json_pack("{s:i, s:s, s:b, s:s}", "exitCode", -1, "output", "", "truncated", 0,
						 "reason", "spawn");
	/* The payload is at most 16 KiB: it fits the pipe, the write does not block. */
	{
		size_t		n = strlen(payload);
		size_t		off = 0;
		void		(*old) (int) = signal(SIGPIPE, SIG_IGN);

		while (off < n)
		{
			ssize_t		w = write(c.in, payload + off, n - off);

			if (w <= 0)
				break;
			off += (size_t) w;
		}
		signal(SIGPIPE, old);
		bcd_child_close(&c.in);
	}
	for (;;)
	{
		struct pollfd pfd = {.fd = c.out, .events = POLLIN};
		double		left = deadline - bcd_now_ms() / 1000.0;
		char		junk[4096];
		ssize_t		r;

		if (left <= 0)
		{
			timed_out = 1;
			break;
		}
		if (poll(&pfd, 1, (int) (left * 1000) + 1) <= 0)
			continue;
		if (len < OUTPUT_MAX)
			r = read(c.out, buf + len, OUTPUT_MAX - len);
		else
		{
			r = read(c.out, junk, sizeof(junk));
			if (r > 0)
				truncated = 1;
		}
		if (r == 0)
			break;
		if (r < 0 && errno != EINTR && errno != EAGAIN)
			break;
		if (r > 0 && len < OUTPUT_MAX)
			len += (size_t) r;
	}
	/* Output closed: wait for the exit within the same deadline. */
	if (!timed_out)
	{
		reaped = bcd_child_wait(&c, deadline, 0, &status) == BCD_CHILD_EXITED;
		timed_out = !reaped;
	}
	bcd_child_end(&c, reaped, &status);
	buf[len] = '\0';
	sanitize(buf, len);
	res = json_pack("{s:i, s:s, s:b}", "exitCode",
					!timed_out && WIFEXITED(status) ? WEXITSTATUS(status) : -1,
					"output", buf, "truncated", truncated);
	if (res != NULL && timed_out)
		json_object_set_new(res, "reason", json_string("timeout"));
	else if (res != NULL && WIFSIGNALED(status))
		json_object_set_new(res, "reason", json_string("signal"));
	return res;
}

/* Report one command's result. */
static void
complete(bcd_agent *a, const bcd_credential *cred, const char *id, json_t *result)
{
	json_int_t	code = json_integer_value(json_object_get(result, "exitCode"));
	const char *status = json_object_get(result, "reason") == NULL && code == 0 ? "done" : "failed";
	char	   *text = json_dumps(result, JSON_COMPACT | JSON_PRESERVE_ORDER);
	char		sha[44];
	char	   *b64 = NULL;
	char	   *proof = NULL;
	char	   *body = NULL;
	json_t	   *extra = NULL;
	json_t	   *doc = NULL;
	json_t	   *ans = NULL;

	if (text == NULL || bc_sha256_b64url(text, strlen(text), sha) != BC_OK ||
		(b64 = bc_b64url_encode_alloc((const unsigned char *) text, strlen(text))) == NULL ||
		(extra = json_pack("{s:s, s:s, s:s}", "commandId", id, "status", status,
						   "resultSha256", sha)) == NULL ||
		(proof = bcd_node_proof(cred, BC_PURPOSE_COMPLETE, extra)) == NULL ||
		(doc = json_pack("{s:s, s:s}", "proof", proof, "result", b64)) == NULL ||
		(body = json_dumps(doc, JSON_COMPACT)) == NULL)
	{
		bcd_log("command %s: cannot build the completion", id);
		goto out;
	}
	ans = bcd_node_exchange(a->http, &a->keys, cred, BC_PATH_COMMANDS_COMPLETE, body, BC_PURPOSE_COMPLETE);
	if (ans != NULL && json_is_string(json_object_get(ans, "commandId")) &&
		strcmp(json_string_value(json_object_get(ans, "commandId")), id) == 0)
		bcd_log("command %s: reported %s", id, status);
	else if (ans != NULL)
		bcd_log("command %s: the completion answer names another command", id);
out:
	json_decref(ans);
	json_decref(doc);
	json_decref(extra);
	free(body);
	free(proof);
	free(b64);
	free(text);
}

/* One fetch, its commands run and reported (commands.h). */
void
bcd_commands_poll(bcd_agent *a, const bcd_credential *cred)
{
	char	   *proof = bcd_node_proof(cred, BC_PURPOSE_COMMANDS, NULL);
	json_t	   *doc = proof ? json_pack("{s:s}", "proof", proof) : NULL;
	char	   *body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_t	   *ans = NULL;
	json_t	   *cmds;
	json_int_t	iat;
	size_t		i;
	json_t	   *c;

	if (body == NULL)
	{
		bcd_log("commands: cannot build the fetch");
		goto out;
	}
	ans = bcd_node_exchange(a->http, &a->keys, cred, BC_PATH_COMMANDS, body, BC_PURPOSE_COMMANDS);
	if (ans == NULL)
		goto out;
	iat = json_integer_value(json_object_get(ans, "iat"));
	cmds = json_object_get(ans, "commands");
	if (!json_is_string(json_object_get(ans, "serial")) ||
		strcmp(json_string_value(json_object_get(ans, "serial")), cred->serial) != 0 ||
		!json_is_integer(json_object_get(ans, "iat")) ||
		iat < (json_int_t) time(NULL) - BC_PROOF_WINDOW || iat > (json_int_t) time(NULL) + BC_PROOF_WINDOW ||
		!json_is_array(cmds) || json_array_size(cmds) > BC_COMMANDS_PER_FETCH)
	{
		bcd_log("commands: the signed answer is not for this certificate, or stale; ignored");
		goto out;
	}
	json_array_foreach(cmds, i, c)
	{
		const char *id = json_string_value(json_object_get(c, "id"));
		const char *kind = json_string_value(json_object_get(c, "kind"));
		json_t	   *pj = json_object_get(c, "payload");
		const bcd_command_handler *h;
		char	   *payload;
		json_t	   *result;

		if (id == NULL || kind == NULL || !json_is_object(pj) ||
			strlen(id) != BC_COMMAND_ID_LEN || strncmp(id, "cmd_", 4) != 0)
		{
			bcd_log("commands: a malformed command in the signed answer; skipped");
			continue;
		}
		h = handler_for(a->opts, kind);
		if (h == NULL)
		{
			bcd_log("command %s (%s): no --command-handler takes it", id, kind);
			result = json_pack("{s:i, s:s, s:b, s:s}", "exitCode", -1, "output", "",
							   "truncated", 0, "reason", "no-handler");
		}
		else
		{
			payload = json_dumps(pj, JSON_COMPACT | JSON_PRESERVE_ORDER);
			bcd_log("command %s (%s): running %s", id, kind, h->exe);
			result = payload ? run_handler(a->opts, h, id, kind, payload) : NULL;
			free(payload);
		}
		if (result != NULL)
			complete(a, cred, id, result);
		json_decref(result);
	}
out:
	json_decref(ans);
	json_decref(doc);
	free(body);
	free(proof);
}
