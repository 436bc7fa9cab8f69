/*
 * exec.c: the external producer (exec.h), the evidence of a custom attestor
 * made by an executable the operator names with --producer PATH.
 *
 * Each round that needs evidence (round 1, and round 2 with the service's
 * challenge) runs PATH once: execve() with argv [PATH] and an environment of
 * the documented variables only (PATH, LC_ALL, BCD_PRODUCER_API_VERSION,
 * BCD_ATTESTOR, BCD_ROUND), in its own process group, cwd /, stdin the
 * request object, stdout the answer object (at most BCD_EXEC_OUTPUT_MAX
 * bytes), stderr kept up to BCD_EXEC_STDERR_MAX bytes for the log.  After
 * --producer-timeout (default 30 s) or more output than that, its process
 * group is killed; so is what it left behind when it exits.
 *
 * What comes of it: exit 0 and a valid answer: the evidence.  Exit 78
 * (EX_CONFIG): it never can on this machine; the join fails (final).
 * Anything else (exit 75 EX_TEMPFAIL "not now", another status, a signal,
 * a timeout, garbage, too much output): BCD_PRODUCER_RETRY, the join loop
 * backs off and runs it again; nothing of bcd's state changes.
 *
 * The join token, when there is one, is sealed by bcd (join_token.c) as for
 * every attestor: the producer never sees it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/pem.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/child.h"
#include "core/clock.h"
#include "core/signals.h"
#include "producers/exec.h"
#include "producers/producer.h"

/* Its own state: --producer PATH, --producer-timeout S. */
static struct
{
	const char *path;
	double		timeout;
} st = {NULL, BCD_EXEC_TIMEOUT_DEFAULT};

/* ------------------------------------------------------------ the answer */

/* The producer's stdout (exec.h). */
int
bcd_exec_output_parse(const char *buf, size_t len, char **attestation, json_t **claims,
					  char *err, size_t errlen)
{
	json_error_t jerr;
	json_t	   *doc;
	json_t	   *v;
	const char *key;
	const char *att;
	unsigned char *raw = NULL;
	size_t		att_len;
	size_t		raw_len;
	int			rc = BC_EINVAL;

	*attestation = NULL;
	*claims = NULL;
	if (len > BCD_EXEC_OUTPUT_MAX)
	{
		snprintf(err, errlen, "its answer is over %d bytes", BCD_EXEC_OUTPUT_MAX);
		return BC_EINVAL;
	}
	if (len == 0)
	{
		snprintf(err, errlen, "it wrote nothing on stdout");
		return BC_EINVAL;
	}
	doc = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (doc == NULL)
	{
		snprintf(err, errlen, "its answer is not one JSON object (%s at offset %d)", jerr.text,
				 jerr.position);
		return BC_EINVAL;
	}
	if (!json_is_object(doc))
	{
		snprintf(err, errlen, "its answer is not a JSON object");
		goto out;
	}
	json_object_foreach(doc, key, v)
	{
		if (strcmp(key, "apiVersion") != 0 && strcmp(key, "attestation") != 0 &&
			strcmp(key, "claims") != 0)
		{
			snprintf(err, errlen, "its answer has an unknown member (only apiVersion, "
					 "attestation and claims)");
			goto out;
		}
	}
	v = json_object_get(doc, "apiVersion");
	if (!json_is_string(v) || strcmp(json_string_value(v), BCD_EXEC_API_VERSION) != 0)
	{
		snprintf(err, errlen, "its answer's apiVersion is not \"%s\"", BCD_EXEC_API_VERSION);
		goto out;
	}
	v = json_object_get(doc, "attestation");
	att = json_string_value(v);
	att_len = json_string_length(v);
	if (att == NULL || att_len == 0 || att_len > BC_ATTESTATION_B64_MAX ||
		strlen(att) != att_len)
	{
		snprintf(err, errlen, "its answer's attestation is not a string of 1 to %d characters",
				 BC_ATTESTATION_B64_MAX);
		goto out;
	}
	raw = malloc(bc_b64url_decoded_maxlen(att_len) + 1);
	if (raw == NULL)
	{
		rc = BC_ENOMEM;
		goto out;
	}
	if (bc_b64url_decode(att, att_len, raw, bc_b64url_decoded_maxlen(att_len) + 1,
						 &raw_len) != BC_OK)
	{
		snprintf(err, errlen, "its answer's attestation is not canonical base64url "
				 "(RFC 4648 section 5, no padding)");
		goto out;
	}
	v = json_object_get(doc, "claims");
	if (v != NULL)
	{
		char	   *text;
		size_t		n;

		if (!json_is_object(v))
		{
			snprintf(err, errlen, "its answer's claims is not a JSON object");
			goto out;
		}
		text = json_dumps(v, JSON_COMPACT);
		n = text != NULL ? strlen(text) : 0;
		free(text);
		if (text == NULL || n > BCD_EXEC_CLAIMS_MAX)
		{
			snprintf(err, errlen, "its answer's claims are over %d bytes", BCD_EXEC_CLAIMS_MAX);
			goto out;
		}
	}
	*attestation = strdup(att);
	if (*attestation == NULL)
	{
		rc = BC_ENOMEM;
		goto out;
	}
	if (v != NULL)
		*claims = json_incref(v);
	rc = BC_OK;
out:
	free(raw);
	json_decref(doc);
	return rc;
}

/* ----------------------------------------------------------- the request */

/* PEM of the node CA root and of the current encryption key, malloc()ed. */
static char *
pem_of(X509 *cert, EVP_PKEY *key)
{
	BIO		   *bio = BIO_new(BIO_s_mem());
	char	   *data;
	char	   *out = NULL;
	long		n;

	if (bio == NULL)
		return NULL;
	if ((cert != NULL ? PEM_write_bio_X509(bio, cert) : PEM_write_bio_PUBKEY(bio, key)) == 1 &&
		(n = BIO_get_mem_data(bio, &data)) > 0 && (out = malloc((size_t) n + 1)) != NULL)
	{
		memcpy(out, data, (size_t) n);
		out[n] = '\0';
	}
	BIO_free(bio);
	return out;
}

/* The object on the producer's stdin, compact JSON (malloc()ed), or NULL. */
static char *
request_text(const bcd_producer_input *in, int round, const char *challenge)
{
	char		csr_sha256[44];
	char		spki_sha256[44];
	unsigned char spki[BC_SHA256_LEN];
	bc_csr	   *csr = NULL;
	EVP_PKEY   *enc = bcd_service_keys_encryption(in->keys);
	char	   *ca_pem = pem_of(in->keys->node_ca, NULL);
	char	   *enc_pem = enc != NULL ? pem_of(NULL, enc) : NULL;
	char	   *csr_b64 = bc_b64url_encode_alloc(in->csr, in->csr_len);
	json_t	   *claims = in->claims != NULL ? json_incref((json_t *) in->claims) : json_object();
	json_t	   *doc = NULL;
	char	   *text = NULL;

	if (claims == NULL || ca_pem == NULL || enc_pem == NULL || csr_b64 == NULL ||
		bc_sha256_b64url(in->csr, in->csr_len, csr_sha256) != BC_OK ||
		bc_csr_parse(in->csr, in->csr_len, &csr) != BC_OK ||
		bc_csr_spki_sha256(csr, spki) != BC_OK)
		goto out;
	bc_b64url_encode(spki, sizeof(spki), spki_sha256);
	doc = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:s, s:o, s:{s:s, s:s, s:s}}",
					"apiVersion", BCD_EXEC_API_VERSION,
					"attestor", in->attestor,
					"round", round,
					"role", in->role != NULL ? in->role : BC_ROLE_NODE,
					"csr", csr_b64,
					"csrSha256", csr_sha256,
					"csrSpkiSha256", spki_sha256,
					"claims", claims,
					"serviceKeys",
					"trustDomain", in->keys->trust_domain,
					"nodeCa", ca_pem,
					"encryptionKey", enc_pem);
	claims = NULL;				/* doc holds it now, or json_pack released it */
	if (doc != NULL && challenge != NULL &&
		json_object_set_new(doc, "challenge", json_string(challenge)) != 0)
		goto out;
	if (doc != NULL)
		text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
out:
	json_decref(claims);
	json_decref(doc);
	bc_csr_free(csr);
	EVP_PKEY_free(enc);
	free(ca_pem);
	free(enc_pem);
	free(csr_b64);
	return text;
}

/* ------------------------------------------------------------ the process */

/* What became of one run. */
typedef struct exec_run
{
	char	   *out;			/* stdout, NUL-terminated (malloc()ed) */
	size_t		out_len;
	char		errtext[BCD_EXEC_STDERR_MAX + 1];	/* stderr kept, NUL-terminated */
	size_t		err_len;
	int			status;			/* waitpid's, when reaped */
	int			timed_out;
	int			too_big;
	int			stopped;		/* SIGTERM/SIGINT arrived meanwhile */
	int			spawn_errno;	/* the fork/pipe failed */
} exec_run;

/* In the producer's child: every other descriptor closed, cwd /. */
static int
producer_setup(void *arg)
{
	(void) arg;
	close_range(3, ~0U, 0);
	return chdir("/") != 0 ? -1 : 0;
}

/*
 * Run path with input on its stdin (see the top of this file); r filled.
 * BC_OK when it ran (whatever its exit), else BC_ENOMEM / BC_EINVAL.
 */
static int
run_producer(const char *path, double timeout, const char *attestor, int round,
			 const char *input, exec_run *r)
{
	bcd_child	c;
	char		env_attestor[160];
	char		env_round[32];
	char	   *envp[6];
	char	   *argv[2];
	size_t		in_len = strlen(input);
	size_t		in_off = 0;
	size_t		cap = BCD_EXEC_OUTPUT_MAX + 1;
	double		deadline = bcd_now_ms() / 1000.0 + timeout;
	void		(*old_pipe) (int);
	int			reaped = 0;

	memset(r, 0, sizeof(*r));
	r->out = malloc(cap + 1);
	if (r->out == NULL)
		return BC_ENOMEM;
	snprintf(env_attestor, sizeof(env_attestor), "BCD_ATTESTOR=%s", attestor);
	snprintf(env_round, sizeof(env_round), "BCD_ROUND=%d", round);
	envp[0] = (char *) "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	envp[1] = (char *) "LC_ALL=C";
	envp[2] = (char *) "BCD_PRODUCER_API_VERSION=" BCD_EXEC_API_VERSION;
	envp[3] = env_attestor;
	envp[4] = env_round;
	envp[5] = NULL;
	argv[0] = (char *) path;
	argv[1] = NULL;
	if (bcd_child_spawn(&c, path, argv, envp, 1, producer_setup, NULL) != BC_OK)
	{
		r->spawn_errno = errno;
		return BC_OK;
	}
	(void) fcntl(c.in, F_SETFL, fcntl(c.in, F_GETFL) | O_NONBLOCK);
	old_pipe = signal(SIGPIPE, SIG_IGN);
	while (c.out >= 0 || c.err >= 0)
	{
		struct pollfd pfd[3];
		int			n = 0;
		int			i_out = -1,
					i_err = -1,
					i_in = -1;
		double		left = deadline - bcd_now_ms() / 1000.0;
		int			slice;

		if (bcd_stop_requested())
		{
			r->stopped = 1;
			break;
		}
		if (left <= 0)
		{
			r->timed_out = 1;
			break;
		}
		slice = left > 0.2 ? 200 : (int) (left * 1000) + 1;
		if (c.out >= 0)
		{
			pfd[n] = (struct pollfd) {.fd = c.out, .events = POLLIN};
			i_out = n++;
		}
		if (c.err >= 0)
		{
			pfd[n] = (struct pollfd) {.fd = c.err, .events = POLLIN};
			i_err = n++;
		}
		if (c.in >= 0)
		{
			pfd[n] = (struct pollfd) {.fd = c.in, .events = POLLOUT};
			i_in = n++;
		}
		if (poll(pfd, (nfds_t) n, slice) <= 0)
			continue;
		if (i_in >= 0 && pfd[i_in].revents != 0)
		{
			ssize_t		w = write(c.in, input + in_off, in_len - in_off);

			if (w > 0)
				in_off += (size_t) w;
			if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == in_len)
				bcd_child_close(&c.in);	/* all written, or it closed its stdin */
		}
		if (i_out >= 0 && pfd[i_out].revents != 0)
		{
			ssize_t		got = read(c.out, r->out + r->out_len, cap - r->out_len);

			if (got > 0)
				r->out_len += (size_t) got;
			if (r->out_len >= cap)
			{
				r->too_big = 1;
				break;
			}
			if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
				bcd_child_close(&c.out);
		}
		if (i_err >= 0 && pfd[i_err].revents != 0)
		{
			char		junk[4096];
			ssize_t		got;

			if (r->err_len < BCD_EXEC_STDERR_MAX)
				got = read(c.err, r->errtext + r->err_len, BCD_EXEC_STDERR_MAX - r->err_len);
			else
				got = read(c.err, junk, sizeof(junk));
			if (got > 0 && r->err_len < BCD_EXEC_STDERR_MAX)
				r->err_len += (size_t) got;
			if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
				bcd_child_close(&c.err);
		}
	}
	bcd_child_close(&c.in);
	signal(SIGPIPE, old_pipe);
	/* Its output closed: the exit, within the same deadline. */
	if (!r->timed_out && !r->too_big && !r->stopped)
	{
		int			w = bcd_child_wait(&c, deadline, 1, &r->status);

		reaped = w == BCD_CHILD_EXITED;
		r->timed_out = w == BCD_CHILD_TIMED_OUT;
		r->stopped = w == BCD_CHILD_STOPPED;
	}
	/* Its process group, whatever it left behind; it too when not reaped. */
	if (reaped)
		kill(-c.pid, SIGKILL);
	bcd_child_end(&c, reaped, &r->status);
	r->out[r->out_len] = '\0';
	r->errtext[r->err_len] = '\0';
	return BC_OK;
}

/* The last non-empty line of the producer's stderr, printable ASCII, for the log. */
static void
stderr_tail(exec_run *r, char *tail, size_t taillen)
{
	char	   *s = r->errtext;
	char	   *end = s + r->err_len;
	char	   *line;

	while (end > s && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
		end--;
	*end = '\0';
	line = end;
	while (line > s && line[-1] != '\n')
		line--;
	for (char *p = line; *p != '\0'; p++)
		if ((unsigned char) *p < 0x20 || (unsigned char) *p > 0x7e)
			*p = '?';
	if (*line == '\0')
		tail[0] = '\0';
	else
		snprintf(tail, taillen, "; its stderr: %.200s", line);
}

/*
 * One run for round (1, or 2 with the challenge): the evidence into out
 * (the token sealed by bcd, the attestation and claims of the producer).
 */
static int
exec_round(const bcd_producer_input *in, int round, const char *challenge, bcd_evidence *out,
		   char *err, size_t errlen)
{
	exec_run	r;
	char		why[300];
	char		tail[240];
	char	   *input;
	int			rc;

	memset(out, 0, sizeof(*out));
	if (st.path == NULL)
	{
		snprintf(err, errlen, "no --producer for attestor %s", in->attestor);
		return BC_EINVAL;
	}
	input = request_text(in, round, challenge);
	if (input == NULL)
	{
		snprintf(err, errlen, "cannot build the producer's input");
		return BC_ENOMEM;
	}
	rc = run_producer(st.path, st.timeout, in->attestor, round, input, &r);
	free(input);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "cannot run the producer %s (out of memory)", st.path);
		return BCD_PRODUCER_RETRY;
	}
	stderr_tail(&r, tail, sizeof(tail));
	rc = BCD_PRODUCER_RETRY;
	if (r.spawn_errno != 0)
		snprintf(err, errlen, "cannot start the producer %s (%s)", st.path,
				 strerror(r.spawn_errno));
	else if (r.stopped)
		snprintf(err, errlen, "the producer %s was stopped: bcd is stopping", st.path);
	else if (r.timed_out)
		snprintf(err, errlen, "the producer %s did not finish within %.0f s; killed%s",
				 st.path, st.timeout, tail);
	else if (r.too_big)
		snprintf(err, errlen, "the producer %s wrote more than %d bytes on stdout; killed%s",
				 st.path, BCD_EXEC_OUTPUT_MAX, tail);
	else if (WIFSIGNALED(r.status))
		snprintf(err, errlen, "the producer %s was killed by signal %d (%s)%s", st.path,
				 WTERMSIG(r.status), strsignal(WTERMSIG(r.status)), tail);
	else if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 127 && r.out_len == 0)
		snprintf(err, errlen, "the producer %s exited 127 (it may not be executable)%s",
				 st.path, tail);
	else if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == BCD_EXEC_EXIT_RETRY)
		snprintf(err, errlen, "the producer %s cannot make the evidence now (exit %d)%s",
				 st.path, BCD_EXEC_EXIT_RETRY, tail);
	else if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == BCD_EXEC_EXIT_FINAL)
	{
		snprintf(err, errlen, "the producer %s says this machine cannot make the evidence of "
				 "%s (exit %d, final)%s", st.path, in->attestor, BCD_EXEC_EXIT_FINAL, tail);
		rc = BC_EINVAL;
	}
	else if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
		snprintf(err, errlen, "the producer %s exited %d%s", st.path,
				 WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1, tail);
	else if (bcd_exec_output_parse(r.out, r.out_len, &out->attestation, &out->claims, why,
								   sizeof(why)) != BC_OK)
		snprintf(err, errlen, "the producer %s wrote no valid answer: %s", st.path, why);
	else
		rc = BC_OK;
	free(r.out);
	if (rc != BC_OK)
		return rc;
	/* The token, when given, sealed by bcd for this CSR. */
	{
		bcd_evidence sealed;

		rc = bcd_seal_token(in, &sealed, err, errlen);
		out->sealed_token = sealed.sealed_token;
		if (rc != BC_OK)
			bcd_evidence_free(out);
	}
	return rc;
}

static int
produce(const bcd_producer_input *in, bcd_evidence *out, char *err, size_t errlen)
{
	return exec_round(in, 1, NULL, out, err, errlen);
}

static int
answer(const bcd_producer_input *in, const char *challenge, bcd_evidence *out, char *err,
	   size_t errlen)
{
	return exec_round(in, 2, challenge, out, err, errlen);
}

static const bcd_producer_option options[] = {
	{"producer", "PATH", "run the executable PATH (no shell, a clean\n"
	 "environment) for the evidence of a custom --attestor\n"
	 "ID, a JSON object in and out (docs/agent.md,\n"
	 "\"Writing a producer\"); the token, if given, is\n"
	 "sealed by bcd and never shown to it"},
	{"producer-timeout", "S", "the producer is killed after S seconds (default 30,\n"
	 "[1, 600])"},
	{NULL, NULL, NULL}
};

static const char *
set_option(const char *name, const char *arg)
{
	char	   *end;

	if (strcmp(name, "producer") == 0)
		st.path = arg;
	else if (strcmp(name, "producer-timeout") == 0)
	{
		st.timeout = strtod(arg, &end);
		if (end == arg || *end != '\0' || !(st.timeout >= 1) || st.timeout > BCD_EXEC_TIMEOUT_MAX)
			return "--producer-timeout must be a number of seconds in [1, 600]";
	}
	return NULL;
}

/* It serves the join of a custom attestor: PATH is one to execve. */
static const char *
configure(const bcd_producer_setup *setup)
{
	if (st.path == NULL)
		return "--producer-timeout is for --producer";
	if (!setup->attestor_set)
		return "--producer needs --attestor ID (the custom attestor it makes the evidence of)";
	if (st.path[0] != '/')
		return "--producer must be an absolute path (it is run without a shell or PATH)";
	if (access(st.path, X_OK) != 0)
		return "--producer is not an executable file";
	return NULL;
}

/* Set --producer and --producer-timeout (bcd join-request, its own parser; producer.h). */
const char *
bcd_exec_producer_set(const char *path, const char *timeout, const char *attestor, int attestor_set)
{
	bcd_producer_setup setup = {.attestor = attestor, .attestor_set = attestor_set};
	const char *why;

	if (timeout != NULL && (why = set_option("producer-timeout", timeout)) != NULL)
		return why;
	if (path == NULL && timeout == NULL)
		return NULL;
	st.path = path;
	return configure(&setup);
}

/* Any custom attestor, the one --attestor names, when --producer is given. */
const bcd_producer bcd_producer_exec = {
	.attestor = NULL,
	.summary = "a custom attestor's evidence from an external producer",
	.commands = BCD_CMD_RUN | BCD_CMD_RAMDISK,
	.options = options,
	.set_option = set_option,
	.configure = configure,
	.produce = produce,
	.answer = answer,
};
