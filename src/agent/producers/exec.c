/*
 * exec.c: the external producer (exec.h), the evidence of a custom attestor
 * made by an executable the operator names with --producer PATH.
 *
 * The file is opened once, when the options are checked (bcd_exec_open_checked):
 * PATH must be absolute, and it and every directory above it (each real
 * component, symbolic links followed from the directory that holds them)
 * owned by root or bcd's user and writable by neither group nor others, as
 * ssh and sudo hold their helpers; it is checked on the descriptor, and
 * that descriptor is what every round runs (fexecve), so a file or link
 * swapped under PATH later is not what runs.
 *
 * Each round that needs evidence (round 1, and round 2 with the service's
 * challenge) runs it once: argv [PATH] and an environment of the documented
 * variables only (PATH, LC_ALL, BCD_PRODUCER_API_VERSION, BCD_ATTESTOR,
 * BCD_ROUND), in its own process group, cwd /, stdin the request object,
 * stdout the answer object (at most BCD_EXEC_OUTPUT_MAX bytes), stderr kept
 * up to BCD_EXEC_STDERR_MAX bytes for the log.  Its answer is taken when it
 * has exited and its JSON object is complete, whoever still holds its
 * stdout (a setsid() child is logged and left running).  After --producer-timeout (default 30 s) or
 * more output than that, its process group is killed; so is what it left
 * in its process group when it exits.
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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/pem.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/child.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/signals.h"
#include "producers/exec.h"
#include "producers/producer.h"

/* Its own state: --producer PATH (and the file opened), --producer-timeout S. */
static struct
{
	const char *path;
	int			fd;				/* PATH opened and checked (O_PATH), what runs */
	double		timeout;
} st = {NULL, -1, BCD_EXEC_TIMEOUT_DEFAULT};

/* Symbolic links followed in --producer PATH at most (as the kernel's ELOOP). */
#define LINKS_MAX 40

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

/* --------------------------------------------------------------- the file */

/*
 * Whether sb (of the component at real, "" for /) is one bcd trusts: owned
 * by root or bcd's user, writable by neither group nor others; 0, else -1
 * with err saying which and why.
 */
static int
check_owner_mode(const char *opt, const char *path, const char *real, const struct stat *sb,
				 char *err, size_t errlen)
{
	uid_t		me = geteuid();

	if (sb->st_uid != 0 && sb->st_uid != me)
	{
		snprintf(err, errlen, "%s %s is refused: %s is owned by uid %u, neither root nor "
				 "bcd's user (uid %u)", opt, path, real[0] != '\0' ? real : "/",
				 (unsigned) sb->st_uid, (unsigned) me);
		return -1;
	}
	if ((sb->st_mode & (S_IWGRP | S_IWOTH)) != 0)
	{
		snprintf(err, errlen, "%s %s is refused: %s is writable by %s (mode %04o); "
				 "the file and every directory above it must be writable by root or "
				 "bcd's user only", opt, path, real[0] != '\0' ? real : "/",
				 (sb->st_mode & S_IWOTH) != 0 ? "others" : "its group",
				 (unsigned) (sb->st_mode & 07777));
		return -1;
	}
	return 0;
}

/*
 * Open the producer at the absolute path as ssh and sudo treat their
 * helpers: resolved one component at a time from / (O_PATH|O_NOFOLLOW), each
 * directory reached and the file itself checked on its descriptor
 * (check_owner_mode), a symbolic link followed from the directory it is in
 * (already checked), so every real component is checked; the file must be
 * a regular file bcd's user may execute (want_dir 0), or a directory bcd's
 * user owns (want_dir 1).  Its descriptor (O_PATH, close-on-exec, at least
 * 3), or -1 with err naming the path and why.
 */
static int
open_checked(const char *opt, const char *path, int want_dir, char *err, size_t errlen)
{
	char		todo[2 * PATH_MAX];	/* what is left to resolve */
	char		real[PATH_MAX];	/* the real path resolved so far ("" for /) */
	char		target[PATH_MAX];
	char		name[NAME_MAX + 1];
	const char *p;
	struct stat sb;
	int			dir;
	int			fd = -1;
	int			links = 0;

	if (path[0] != '/')
	{
		snprintf(err, errlen, "%s %s must be an absolute path (it is run without a "
				 "shell or PATH)", opt, path);
		return -1;
	}
	if (strlen(path) >= PATH_MAX)
	{
		snprintf(err, errlen, "%s is longer than %d bytes", opt, PATH_MAX - 1);
		return -1;
	}
	snprintf(todo, sizeof(todo), "%s", path);
	real[0] = '\0';
	dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0 || fstat(dir, &sb) != 0)
	{
		snprintf(err, errlen, "%s %s: cannot open / (%s)", opt, path, strerror(errno));
		goto fail;
	}
	if (check_owner_mode(opt, path, real, &sb, err, errlen) != 0)
		goto fail;
	p = todo;
	for (;;)
	{
		size_t		n;
		size_t		rl;
		int			last;
		int			slash;

		while (*p == '/')
			p++;
		n = strcspn(p, "/");
		if (n == 0 || n > NAME_MAX)
		{
			snprintf(err, errlen, n == 0 ? "%s %s is not a regular file" :
					 "%s %s has a name over NAME_MAX bytes", opt, path);
			goto fail;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		p += n;
		slash = *p == '/';
		while (*p == '/')
			p++;
		last = *p == '\0';
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		{
			if (last)
			{
				snprintf(err, errlen, "%s %s is not a regular file", opt, path);
				goto fail;
			}
			if (name[1] == '.')
			{
				char	   *cut = strrchr(real, '/');

				fd = openat(dir, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
				if (fd < 0 || fstat(fd, &sb) != 0)
				{
					snprintf(err, errlen, "%s %s cannot be resolved (%s)", opt, path,
							 strerror(errno));
					goto fail;
				}
				if (cut != NULL)
					*cut = '\0';
				if (check_owner_mode(opt, path, real, &sb, err, errlen) != 0)
					goto fail;
				close(dir);
				dir = fd;
				fd = -1;
			}
			continue;
		}
		rl = strlen(real);
		if (rl + 1 + n >= sizeof(real))
		{
			snprintf(err, errlen, "%s %s resolves to a path over %d bytes", opt, path,
					 PATH_MAX - 1);
			goto fail;
		}
		real[rl] = '/';
		memcpy(real + rl + 1, name, n + 1);
		fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &sb) != 0)
		{
			if (errno == ENOENT)
				snprintf(err, errlen, "%s %s does not exist (no %s)", opt, path, real);
			else
				snprintf(err, errlen, "%s %s cannot be opened at %s (%s)", opt, path, real,
						 strerror(errno));
			goto fail;
		}
		if (S_ISLNK(sb.st_mode))
		{
			/* its directory is checked: only root or bcd's user can have made it */
			ssize_t		tl = readlinkat(fd, "", target, sizeof(target));
			char		rest[2 * PATH_MAX];

			close(fd);
			fd = -1;
			if (++links > LINKS_MAX || tl <= 0 || (size_t) tl >= sizeof(target) ||
				(size_t) tl + 1 + strlen(p) >= sizeof(rest))
			{
				snprintf(err, errlen, "%s %s cannot be resolved (%s at %s)", opt, path,
						 links > LINKS_MAX ? "too many symbolic links" : "a link too long", real);
				goto fail;
			}
			target[tl] = '\0';
			snprintf(rest, sizeof(rest), "%s%s%s", target, slash ? "/" : "", p);
			memcpy(todo, rest, strlen(rest) + 1);
			p = todo;
			real[rl] = '\0';	/* back in the link's directory */
			if (target[0] == '/')
			{
				close(dir);
				real[0] = '\0';
				dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
				if (dir < 0)
				{
					snprintf(err, errlen, "%s %s: cannot open / (%s)", opt, path,
							 strerror(errno));
					goto fail;
				}
			}
			continue;
		}
		if (check_owner_mode(opt, path, real, &sb, err, errlen) != 0)
			goto fail;
		if (S_ISDIR(sb.st_mode) && !last)
		{
			close(dir);
			dir = fd;
			fd = -1;
			continue;
		}
		if (!last || slash)
		{
			snprintf(err, errlen, "%s %s cannot be resolved (%s is not a directory)", opt,
					 path, real);
			goto fail;
		}
		break;
	}
	if (want_dir)
	{
		if (!S_ISDIR(sb.st_mode))
		{
			snprintf(err, errlen, "%s %s is not a directory (%s)", opt, path, real);
			goto fail;
		}
		if (sb.st_uid != geteuid())
		{
			snprintf(err, errlen, "%s %s is refused: %s is owned by uid %u, not by bcd's user "
					 "(uid %u)", opt, path, real, (unsigned) sb.st_uid, (unsigned) geteuid());
			goto fail;
		}
	}
	else if (!S_ISREG(sb.st_mode))
	{
		snprintf(err, errlen, "%s %s is not a regular file (%s)", opt, path, real);
		goto fail;
	}
	else if (faccessat(fd, "", X_OK, AT_EMPTY_PATH | AT_EACCESS) != 0)
	{
		snprintf(err, errlen, "%s %s is not an executable file (%s)", opt, path, real);
		goto fail;
	}
	close(dir);
	if (fd < 3)
	{
		/* never 0, 1 or 2: the child's stdin, stdout and stderr are set over them */
		int			high = fcntl(fd, F_DUPFD_CLOEXEC, 3);

		close(fd);
		fd = high;
		if (fd < 0)
		{
			snprintf(err, errlen, "%s %s: %s", opt, path, strerror(errno));
			return -1;
		}
	}
	return fd;

fail:
	if (fd >= 0)
		close(fd);
	if (dir >= 0)
		close(dir);
	return -1;
}

/* An executable, opened and checked (exec.h). */
int
bcd_exec_open_checked(const char *opt, const char *path, char *err, size_t errlen)
{
	return open_checked(opt, path, 0, err, errlen);
}

/* A directory, opened and checked the same way (exec.h). */
int
bcd_exec_open_checked_dir(const char *opt, const char *path, char *err, size_t errlen)
{
	return open_checked(opt, path, 1, err, errlen);
}

/* ------------------------------------------------------------ the process */

/* Milliseconds to wait, once it exited, for what it left in its process group to die. */
#define LEFT_BEHIND_MS 200
/* Bytes of stderr read and dropped in one drain beyond what is kept. */
#define STDERR_DRAIN_MAX (64 * 1024)

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
	pid_t		left_running;	/* it exited, this process it left (out of its process
								 * group) still holds its stdout or stderr; -1: one
								 * not found; 0: none */
} exec_run;

/* In the producer's child: every other descriptor closed (3 is the file to run), cwd /. */
static int
producer_setup(void *arg)
{
	(void) arg;
	close_range(4, ~0U, 0);
	return chdir("/") != 0 ? -1 : 0;
}

/*
 * One read of the producer's stdout into r (cap: the bound and one byte):
 * > 0 bytes read (r->too_big once at cap), 0 at its end (closed then), -1
 * nothing now.
 */
static ssize_t
read_stdout(bcd_child *c, exec_run *r, size_t cap)
{
	ssize_t		got = read(c->out, r->out + r->out_len, cap - r->out_len);

	if (got > 0)
	{
		r->out_len += (size_t) got;
		if (r->out_len >= cap)
			r->too_big = 1;
		return got;
	}
	if (got == 0 || (errno != EINTR && errno != EAGAIN))
	{
		bcd_child_close(&c->out);
		return 0;
	}
	return -1;
}

/* One read of its stderr: the first BCD_EXEC_STDERR_MAX bytes kept (as read_stdout). */
static ssize_t
read_stderr(bcd_child *c, exec_run *r)
{
	char		junk[4096];
	ssize_t		got;

	if (r->err_len < BCD_EXEC_STDERR_MAX)
		got = read(c->err, r->errtext + r->err_len, BCD_EXEC_STDERR_MAX - r->err_len);
	else
		got = read(c->err, junk, sizeof(junk));
	if (got > 0)
	{
		if (r->err_len < BCD_EXEC_STDERR_MAX)
			r->err_len += (size_t) got;
		return got;
	}
	if (got == 0 || (errno != EINTR && errno != EAGAIN))
	{
		bcd_child_close(&c->err);
		return 0;
	}
	return -1;
}

/*
 * Whether r's stdout is a JSON text begun and not ended yet (jansson's
 * premature end of input), what a producer's child may still be writing.
 */
static int
answer_unfinished(const exec_run *r)
{
	json_error_t jerr;
	json_t	   *doc;

	if (r->out_len == 0)
		return 0;
	doc = json_loadb(r->out, r->out_len, JSON_DISABLE_EOF_CHECK, &jerr);
	if (doc != NULL)
	{
		json_decref(doc);
		return 0;
	}
	return json_error_code(&jerr) == json_error_premature_end_of_input;
}

/*
 * The process other than bcd that holds the pipe fd leads to (the write end
 * of the producer's stdout or stderr), from /proc: its pid, or -1.
 */
static pid_t
pipe_holder(int fd)
{
	char		want[64];
	char		link[64];
	char		path[96];
	struct stat sb;
	DIR		   *proc;
	struct dirent *de;
	pid_t		me = getpid();
	pid_t		found = -1;

	if (fstat(fd, &sb) != 0 || (proc = opendir("/proc")) == NULL)
		return -1;
	snprintf(want, sizeof(want), "pipe:[%llu]", (unsigned long long) sb.st_ino);
	while (found < 0 && (de = readdir(proc)) != NULL)
	{
		char	   *end;
		long		pid = strtol(de->d_name, &end, 10);
		DIR		   *fds;
		struct dirent *fe;

		if (*end != '\0' || pid <= 0 || pid == me)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
		if ((fds = opendir(path)) == NULL)
			continue;
		while (found < 0 && (fe = readdir(fds)) != NULL)
		{
			ssize_t		n;

			snprintf(path, sizeof(path), "/proc/%ld/fd/%.20s", pid, fe->d_name);
			n = readlink(path, link, sizeof(link) - 1);
			if (n > 0 && (link[n] = '\0', strcmp(link, want) == 0))
				found = (pid_t) pid;
		}
		closedir(fds);
	}
	closedir(proc);
	return found;
}

/*
 * Run the file open at fd (path: its name, argv[0]) with input on its
 * stdin (see the top of this file); r filled.  Its answer is taken when it
 * has exited and its JSON object is complete: what it wrote on stdout by
 * its exit, and, after an exit 0 with the object begun and not ended, what
 * follows until it ends; never waiting for the end of the pipe, which a
 * process it left (a setsid() child) may hold (r->left_running).  BC_OK
 * when it ran (whatever its exit), else BC_ENOMEM.
 */
static int
run_producer(int fd, const char *path, double timeout, const char *attestor, int round,
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
	int			pidfd;

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
	if (bcd_child_spawn_fd(&c, fd, argv, envp, 1, producer_setup, NULL) != BC_OK)
	{
		r->spawn_errno = errno;
		return BC_OK;
	}
	/* its exit wakes the poll (Linux 5.3); else the poll looks every 10 ms */
	pidfd = (int) pidfd_open(c.pid, 0);
	(void) fcntl(c.in, F_SETFL, fcntl(c.in, F_GETFL) | O_NONBLOCK);
	(void) fcntl(c.out, F_SETFL, fcntl(c.out, F_GETFL) | O_NONBLOCK);
	(void) fcntl(c.err, F_SETFL, fcntl(c.err, F_GETFL) | O_NONBLOCK);
	old_pipe = signal(SIGPIPE, SIG_IGN);
	while (!reaped)
	{
		struct pollfd pfd[4];
		int			n = 0;
		int			i_out = -1,
					i_err = -1,
					i_in = -1,
					i_pid = -1;
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
		slice = pidfd < 0 ? 10 : left > 0.2 ? 200 : (int) (left * 1000) + 1;
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
		if (pidfd >= 0)
		{
			pfd[n] = (struct pollfd) {.fd = pidfd, .events = POLLIN};
			i_pid = n++;
		}
		if (poll(pfd, (nfds_t) n, slice) < 0)
			continue;
		if (i_in >= 0 && pfd[i_in].revents != 0)
		{
			ssize_t		w = write(c.in, input + in_off, in_len - in_off);

			if (w > 0)
				in_off += (size_t) w;
			if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == in_len)
				bcd_child_close(&c.in);	/* all written, or it closed its stdin */
		}
		if (i_out >= 0 && pfd[i_out].revents != 0 && read_stdout(&c, r, cap) > 0 && r->too_big)
			break;
		if (i_err >= 0 && pfd[i_err].revents != 0)
			(void) read_stderr(&c, r);
		if ((i_pid < 0 || pfd[i_pid].revents != 0) &&
			waitpid(c.pid, &r->status, WNOHANG) == c.pid)
			reaped = 1;
	}
	bcd_child_close(&c.in);
	if (reaped)
	{
		size_t		dropped = 0;
		ssize_t		got;

		/* what it wrote before it exited is in the pipes: the answer as it left it */
		while (c.out >= 0 && !r->too_big && read_stdout(&c, r, cap) > 0)
			;
		while (c.err >= 0 && dropped < STDERR_DRAIN_MAX && (got = read_stderr(&c, r)) > 0)
			dropped += (size_t) got;
		/* exit 0 with its JSON begun and not ended: the rest from whoever holds the pipe */
		while (c.out >= 0 && !r->too_big && WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0 &&
			   answer_unfinished(r) && bcd_now_ms() / 1000.0 < deadline && !bcd_stop_requested())
		{
			struct pollfd pfd[2] = {{.fd = c.out, .events = POLLIN},
			{.fd = c.err, .events = POLLIN}};
			double		left = deadline - bcd_now_ms() / 1000.0;

			if (poll(pfd, 2, left > 0.2 ? 200 : (int) (left * 1000) + 1) <= 0)
				continue;
			if (pfd[0].revents != 0)
				(void) read_stdout(&c, r, cap);
			if (c.err >= 0 && pfd[1].revents != 0)
				(void) read_stderr(&c, r);
		}
		/* what it left in its process group, and whoever still holds its pipes */
		kill(-c.pid, SIGKILL);
		if (c.out >= 0 || c.err >= 0)
		{
			double		until = bcd_now_ms() / 1000.0 + LEFT_BEHIND_MS / 1000.0;

			while ((c.out >= 0 || c.err >= 0) && bcd_now_ms() / 1000.0 < until)
			{
				struct pollfd pfd[2] = {{.fd = c.out, .events = POLLIN},
				{.fd = c.err, .events = POLLIN}};
				char		junk[4096];

				if (poll(pfd, 2, 20) <= 0)
					continue;
				for (int i = 0; i < 2; i++)
				{
					int		   *end = i == 0 ? &c.out : &c.err;

					if (*end >= 0 && pfd[i].revents != 0 &&
						((got = read(*end, junk, sizeof(junk))) == 0 ||
						 (got < 0 && errno != EAGAIN && errno != EINTR)))
						bcd_child_close(end);
				}
			}
			if (c.out >= 0 || c.err >= 0)
				r->left_running = pipe_holder(c.out >= 0 ? c.out : c.err);
		}
	}
	signal(SIGPIPE, old_pipe);
	if (pidfd >= 0)
		close(pidfd);
	/* not reaped (a timeout, too much output, a stop): its process group and it killed */
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
	rc = run_producer(st.fd, st.path, st.timeout, in->attestor, round, input, &r);
	free(input);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "cannot run the producer %s (out of memory)", st.path);
		return BCD_PRODUCER_RETRY;
	}
	if (r.left_running > 0)
		bcd_log("the producer %s exited leaving pid %ld, outside its process group (a setsid() "
				"child?), holding its stdout or stderr open: left running; its answer was taken "
				"as it stood when it exited", st.path, (long) r.left_running);
	else if (r.left_running < 0)
		bcd_log("the producer %s exited leaving a process outside its process group (a "
				"setsid() child?) holding its stdout or stderr open: left running; its answer "
				"was taken as it stood when it exited", st.path);
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
		snprintf(err, errlen, "the producer %s wrote no valid answer: %s%s", st.path, why, tail);
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
	{"producer", "PATH", "run the executable PATH (absolute; it and every\n"
	 "directory above it writable by root or bcd's user\n"
	 "only; opened once, at the start; no shell, a clean\n"
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

/*
 * It serves the join of a custom attestor: PATH opened and checked once
 * (bcd_exec_open_checked), the descriptor that every round runs.
 */
static const char *
configure(const bcd_producer_setup *setup)
{
	static char why[PATH_MAX + 512];

	if (st.path == NULL)
		return "--producer-timeout is for --producer";
	if (!setup->attestor_set)
		return "--producer needs --attestor ID (the custom attestor it makes the evidence of)";
	if (st.fd >= 0)
		close(st.fd);
	st.fd = bcd_exec_open_checked("--producer", st.path, why, sizeof(why));
	return st.fd < 0 ? why : NULL;
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
