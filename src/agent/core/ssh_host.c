/*
 * ssh_host.c: the host side of SSH (ssh_host.h; issue 47; docs/agent.md,
 * "SSH"): its own thread (a ticker at --status-interval, woken at once when
 * a node credential is published) and HTTPS client.
 *
 * Host certificates.  Each host key is a public key file, --ssh-host-key
 * FILE.pub (sshd's: bcd never reads the private key), or the one bcd makes
 * once in --ssh-own-host-key DIR (ssh_host_ecdsa_key, P-256 PKCS#8 PEM, 0600,
 * and its .pub: OpenSSH 9.2 reads that key as a HostKey).  Its certificate
 * is <key name>-cert.pub in --ssh-cert-dir or the key's directory.  A round
 * with a usable node credential looks at each: the file held is kept when it
 * is a host certificate of that key valid before the node
 * certificate's notAfter (or a second later, the same end; one got with
 * this node certificate:
 * bcd_ssh_host_cert_held); else POST /v1/ssh/host {"sshPublicKey": <base64
 * blob>, "proof": <JWS by the node key over {"purpose":"ssh-host", "serial",
 * "sshKeySha256", "iat", "hostname", "principals"?}>}, the answer verified
 * (signed by the pinned key, for this node: bcd_node_exchange_status; then
 * bcd_ssh_host_answer) and written.  After a renewal the node certificate's
 * notAfter moves, so every certificate is asked for again; so it is when
 * the signed document's host CA keys change and the one held was signed
 * by a CA no longer among them (bcd_ssh_host_ca_published).  When one
 * changed, --ssh-reload runs once (core/reload.c).  A failure is logged and
 * tried again after FAIL_AGAIN_S.
 *
 * CA keys and KRL.  Every round GET /v1/ssh/signed, taken up only as
 * bcd_ssh_signed_take says (a pinned signing key, at most an hour old,
 * never older, krlVersion never lower: at start the floor is the one kept
 * in the state directory, BCD_SSH_FLOOR_FILE, and the krl_version of the
 * --ssh-krl file already there); when its krlSha256 is not that of the KRL written, GET
 * /v1/ssh/krl, which must hash to it (a KRL newer than the signed document
 * fetched just before: the signed document is fetched once more).  Files are
 * written only when their content changes.
 *
 * Files.  Every directory is opened once at start and checked as files
 * mode's (bcd_delivery_open_checked: owned by bcd's uid, it and every
 * directory above writable by root or bcd's uid only); every write is
 * relative to it (and every read: a host key file through its own
 * directory, also with --ssh-cert-dir, by bcd_read_file_at: O_NOFOLLOW,
 * a regular file), a new file O_CREAT | O_EXCL | O_NOFOLLOW under a random
 * name, fsync()ed and renamed over the name (bcd_delivery_write_file_mode):
 * sshd never sees a missing or partial RevokedKeys, HostCertificate or
 * TrustedUserCAKeys file, and bcd never removes one.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "bc_ssh.h"
#include "core/clock.h"
#include "core/delivery.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/proof.h"
#include "core/reload.h"
#include "core/ssh_host.h"
#include "core/ticker.h"
#include "core/transport.h"
#include "producers/exec.h"

/* The key --ssh-own-host-key makes, and its public key file. */
#define OWN_KEY "ssh_host_ecdsa_key"
#define OWN_PUB OWN_KEY ".pub"
/* A host key whose certificate could not be got is tried again after this long (s). */
#define FAIL_AGAIN_S 30.0
/* The floor (issuedAt) is saved again once it moved this much (s). */
#define FLOOR_SAVE_S 300
/* The round's interval without a revocation watch (s). */
#define INTERVAL_DEFAULT 10

/* One host key and its certificate. */
typedef struct ssh_key
{
	char	   *pub_path;		/* FILE.pub */
	char		pub_name[NAME_MAX + 1];	/* its name in pub_dirfd */
	int			pub_dirfd;		/* its directory, checked (owned by struct bcd_ssh's fds) */
	char	   *cert_path;		/* the certificate's path, as logged and in bcd status */
	char		cert_name[NAME_MAX + 1];	/* <key name>-cert.pub in cert_dirfd */
	int			cert_dirfd;		/* its directory (owned by struct bcd_ssh's fds) */
	char		ok_for[41];		/* the node certificate the file held is right for ("" none) */
	double		next_try;		/* monotonic seconds: after a failure */
	char		tried_for[41];	/* the node certificate of that failure */
	/* bcd status, under mu */
	int			have;
	uint64_t	serial;
	int64_t		valid_before;
} ssh_key;

/* One of the files of the signed document. */
typedef struct ssh_file
{
	const char *opt;			/* "--ssh-krl", ... */
	const char *path;			/* as given, NULL: not asked for */
	char		name[NAME_MAX + 1];
	int			dirfd;
	char	   *written;		/* the text written last (CA files) */
} ssh_file;

struct bcd_ssh
{
	const bcd_run_opts *o;
	const bcd_service_keys *keys;
	bcd_provisioner *prov;
	bcd_http   *http;
	ssh_key		hk[BCD_SSH_HOST_KEYS_MAX + 1];
	int			n;
	int			fds[BCD_SSH_HOST_KEYS_MAX + 8];	/* every directory opened */
	int			n_fds;
	int			reload_fd;
	char		hostname[254];	/* the claim of the proof: --hostname, or gethostname() */
	ssh_file	krl,
				user_ca,
				host_ca;
	bcd_ssh_signed held;		/* the signed document taken up last */
	int64_t		floor_saved;	/* issuedAt of the floor last saved in the state directory */
	char		krl_written[44];	/* krlSha256 of the KRL written ("" none yet) */
	long		interval;
	bcd_ticker	ticker;
	atomic_int	stopping;
	pthread_mutex_t mu;			/* bcd status's: hk[].have/serial/valid_before, krl_version */
	int64_t		krl_version;	/* of the KRL written, -1 none */
	int64_t		signed_issued;	/* issuedAt of the signed document taken up, 0 none */
	char		signed_error[700];	/* why the last one was not taken up ("" it was) */
	bcd_said	said[2];		/* the last line said: 0 host certificates, 1 signed document */
};

/* Log a line of topic unless it is the one said last (bcd_vlog_again). */
static void
say(bcd_ssh *s, int topic, const char *fmt,...) __attribute__((format(printf, 3, 4)));

static void
say(bcd_ssh *s, int topic, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	bcd_vlog_again(&s->said[topic], "ssh", fmt, ap);
	va_end(ap);
}

/* 1 when o asks for any of it (ssh_host.h). */
int
bcd_ssh_wanted(const bcd_run_opts *o)
{
	return !o->once && !o->memory_only &&
		(o->n_ssh_host_keys > 0 || o->ssh_own_host_key != NULL || o->ssh_krl != NULL ||
		 o->ssh_user_ca != NULL || o->ssh_host_ca != NULL);
}

/* 1 when p is a principal bc_ssh_cert_sign takes (no ',', white space, '*', '?'). */
static int
principal_ok(const char *p)
{
	size_t		n = strlen(p);

	if (n == 0 || n > BC_SSH_PRINCIPAL_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char) p[i] <= ' ' || p[i] == ',' || p[i] == '*' || p[i] == '?' ||
			(unsigned char) p[i] == 0x7f)
			return 0;
	return 1;
}

/* 1 when path is absolute, names a file (not a directory), and fits. */
static int
file_path_ok(const char *path)
{
	size_t		n = strlen(path);
	const char *slash = strrchr(path, '/');

	return path[0] == '/' && n < PATH_MAX && slash != NULL && slash[1] != '\0' &&
		strlen(slash + 1) <= NAME_MAX - 16 && strcmp(slash + 1, ".") != 0 &&
		strcmp(slash + 1, "..") != 0;
}

/* The --ssh-* options' syntax (ssh_host.h). */
const char *
bcd_ssh_opts_check(const bcd_run_opts *o)
{
	int			keys = o->n_ssh_host_keys + (o->ssh_own_host_key != NULL);

	for (int i = 0; i < o->n_ssh_host_keys; i++)
	{
		const char *k = o->ssh_host_keys[i];
		size_t		n = strlen(k);

		if (!file_path_ok(k) || n < 5 || strcmp(k + n - 4, ".pub") != 0 ||
			strcmp(strrchr(k, '/') + 1, ".pub") == 0)
			return "--ssh-host-key must be the absolute path of a public key file FILE.pub";
		for (int j = 0; j < i; j++)
			if (strcmp(o->ssh_host_keys[j], k) == 0)
				return "--ssh-host-key: each key once";
	}
	if (keys > BCD_SSH_HOST_KEYS_MAX)
		return "--ssh-host-key and --ssh-own-host-key: 4 host keys at most";
	if (o->ssh_own_host_key != NULL &&
		(o->ssh_own_host_key[0] != '/' || strlen(o->ssh_own_host_key) >= PATH_MAX - 64))
		return "--ssh-own-host-key must be an absolute directory path";
	if (o->ssh_cert_dir != NULL && (o->ssh_cert_dir[0] != '/' ||
									strlen(o->ssh_cert_dir) >= PATH_MAX - 64))
		return "--ssh-cert-dir must be an absolute directory path";
	for (int i = 0; i < o->n_ssh_principals; i++)
	{
		if (!principal_ok(o->ssh_principals[i]))
			return "--ssh-principal must be 1 to 255 bytes without white space, ',', '*' or '?'";
		for (int j = 0; j < i; j++)
			if (strcmp(o->ssh_principals[j], o->ssh_principals[i]) == 0)
				return "--ssh-principal: each name once";
	}
	if (o->hostname != NULL && keys > 0 && (strlen(o->hostname) == 0 || strlen(o->hostname) > 253))
		return "--hostname: 1 to 253 bytes (the host certificate's claimed hostname)";
	if (keys == 0 && (o->ssh_cert_dir != NULL || o->n_ssh_principals > 0 || o->ssh_reload != NULL))
		return "--ssh-cert-dir, --ssh-principal and --ssh-reload need --ssh-host-key or "
			"--ssh-own-host-key";
	if (o->ssh_reload != NULL && o->ssh_reload[0] != '/')
		return "--ssh-reload must be an absolute path";
	if ((o->ssh_krl != NULL && !file_path_ok(o->ssh_krl)) ||
		(o->ssh_user_ca != NULL && !file_path_ok(o->ssh_user_ca)) ||
		(o->ssh_host_ca != NULL && !file_path_ok(o->ssh_host_ca)))
		return "--ssh-krl, --ssh-user-ca and --ssh-host-ca must be absolute file paths";
	return NULL;
}

/* Remember fd among s's directories (closed by bcd_ssh_free); fd. */
static int
keep_fd(bcd_ssh *s, int fd)
{
	if (fd >= 0)
		s->fds[s->n_fds++] = fd;
	return fd;
}

/* The directory of path (a file path checked by file_path_ok) into dir. */
static void
dir_of(const char *path, char *dir, size_t len)
{
	size_t		n = (size_t) (strrchr(path, '/') - path);

	snprintf(dir, len, "%.*s", (int) (n == 0 ? 1 : n), path);
}

/* Open f's directory (checked) when asked for; BC_OK, or BC_EINVAL with err. */
static int
file_open(bcd_ssh *s, ssh_file *f, const char *opt, const char *path, char *err, size_t errlen)
{
	char		dir[PATH_MAX];

	f->opt = opt;
	f->path = path;
	f->dirfd = -1;
	if (path == NULL)
		return BC_OK;
	dir_of(path, dir, sizeof(dir));
	snprintf(f->name, sizeof(f->name), "%s", strrchr(path, '/') + 1);
	f->dirfd = keep_fd(s, bcd_delivery_open_checked(opt, dir, err, errlen));
	return f->dirfd >= 0 ? BC_OK : BC_EINVAL;
}

/*
 * --ssh-own-host-key DIR: made 0700 when missing, checked, and
 * ssh_host_ecdsa_key (P-256, PKCS#8 PEM, 0600) made there unless it is
 * there; its .pub written when missing (key first: a .pub means a key).
 */
static int
own_key(bcd_ssh *s, const char *dir, int *dirfd, char *err, size_t errlen)
{
	EVP_PKEY   *key = NULL;
	BIO		   *bio = NULL;
	char	   *text = NULL;
	size_t		len = 0;
	unsigned char *blob = NULL;
	size_t		blob_len = 0;
	char	   *line = NULL;
	char		comment[300];
	int			rc = BC_EINVAL;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
	{
		snprintf(err, errlen, "--ssh-own-host-key %s cannot be made: %s", dir, strerror(errno));
		return BC_EINVAL;
	}
	*dirfd = keep_fd(s, bcd_delivery_open_checked("--ssh-own-host-key", dir, err, errlen));
	if (*dirfd < 0)
		return BC_EINVAL;
	if (faccessat(*dirfd, OWN_PUB, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
		faccessat(*dirfd, OWN_KEY, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return BC_OK;
	if (bcd_read_file_at(*dirfd, OWN_KEY, 64 * 1024, &text, &len) == BC_OK)
	{
		bio = BIO_new_mem_buf(text, (int) len);
		key = bio != NULL ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
		bc_free_secret(text, len);
		text = NULL;
		BIO_free(bio);
		bio = NULL;
		if (key == NULL)
		{
			snprintf(err, errlen, "--ssh-own-host-key %s/" OWN_KEY " is not a PEM private key",
					 dir);
			goto out;
		}
	}
	else if (errno != ENOENT)
	{
		snprintf(err, errlen, "--ssh-own-host-key %s/" OWN_KEY " cannot be read: %s", dir,
				 strerror(errno));
		goto out;
	}
	else
	{
		const char *pem;
		long		pem_len;

		key = EVP_EC_gen("P-256");
		bio = BIO_new(BIO_s_secmem());
		if (key == NULL || bio == NULL ||
			PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) != 1)
		{
			snprintf(err, errlen, "--ssh-own-host-key: cannot make a P-256 key");
			goto out;
		}
		pem_len = BIO_get_mem_data(bio, (char **) &pem);
		if (bcd_delivery_write_file_mode(*dirfd, OWN_KEY, pem, (size_t) pem_len, 0600, err,
										 errlen) != BC_OK)
			goto out;
		bcd_log("ssh: made the host key %s/" OWN_KEY " (P-256, PKCS#8)", dir);
	}
	snprintf(comment, sizeof(comment), "bcd@%s", s->hostname);
	if (bc_ssh_pubkey_blob(key, &blob, &blob_len) != BC_OK ||
		(line = bc_ssh_pubkey_line(blob, blob_len, comment)) == NULL)
	{
		snprintf(err, errlen, "--ssh-own-host-key: cannot write the public key");
		goto out;
	}
	rc = bcd_delivery_write_file_mode(*dirfd, OWN_PUB, line, strlen(line), 0644, err, errlen);
out:
	free(line);
	free(blob);
	BIO_free(bio);
	EVP_PKEY_free(key);
	return rc;
}

/*
 * Add the host key pub_path (its directory pub_dirfd, opened checked; -1:
 * opened and checked here, whatever --ssh-cert-dir says: the key is read
 * only through it), its certificate in cert_dir (NULL: the key's directory).
 */
static int
add_key(bcd_ssh *s, const char *pub_path, int pub_dirfd, int cert_dirfd, const char *cert_dir,
		char *err, size_t errlen)
{
	ssh_key    *k = &s->hk[s->n];
	const char *base = strrchr(pub_path, '/') + 1;
	char		dir[PATH_MAX];
	size_t		cn;

	memset(k, 0, sizeof(*k));
	snprintf(k->cert_name, sizeof(k->cert_name), "%.*s-cert.pub", (int) (strlen(base) - 4), base);
	snprintf(k->pub_name, sizeof(k->pub_name), "%s", base);
	dir_of(pub_path, dir, sizeof(dir));
	if (pub_dirfd < 0)
	{
		pub_dirfd = keep_fd(s, bcd_delivery_open_checked("--ssh-host-key's directory", dir, err,
														 errlen));
		if (pub_dirfd < 0)
			return BC_EINVAL;
	}
	k->pub_dirfd = pub_dirfd;
	if (cert_dirfd < 0)
	{
		cert_dir = dir;
		cert_dirfd = pub_dirfd;
	}
	k->cert_dirfd = cert_dirfd;
	k->pub_path = strdup(pub_path);
	cn = strlen(cert_dir) + 1 + strlen(k->cert_name) + 1;
	k->cert_path = malloc(cn);
	if (k->pub_path == NULL || k->cert_path == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	snprintf(k->cert_path, cn, "%s%s%s", cert_dir, strcmp(cert_dir, "/") == 0 ? "" : "/",
			 k->cert_name);
	s->n++;
	return BC_OK;
}

/*
 * The public key blob of k's file, read relative to its checked directory
 * (bcd_read_file_at: O_NOFOLLOW, O_NONBLOCK, a regular file only); BC_OK,
 * or an error (said).
 */
static int
key_blob(bcd_ssh *s, ssh_key *k, unsigned char **blob, size_t *len)
{
	char	   *text = NULL;
	size_t		n = 0;
	int			rc = bcd_read_file_at(k->pub_dirfd, k->pub_name, BCD_SSH_LINE_MAX, &text, &n);

	*blob = NULL;
	if (rc == BC_OK && (bc_ssh_pubkey_line_parse(text, n, blob, len) != BC_OK ||
						bc_ssh_pubkey_parse(*blob, *len, NULL) != BC_OK))
	{
		free(*blob);
		*blob = NULL;
		rc = BC_EINVAL;
	}
	free(text);
	if (rc != BC_OK)
		say(s, 0, "%s cannot be read as one Ed25519 or ECDSA public key line (a regular "
			"file, not a symbolic link); its certificate is not asked for", k->pub_path);
	return rc;
}

/* The request body of POST /v1/ssh/host for blob, proven by node's key; malloc()ed or NULL. */
static char *
host_request(bcd_ssh *s, const bcd_node_snapshot *node, const unsigned char *blob, size_t len)
{
	bcd_credential cred;
	char		sha[44];
	char	   *b64 = malloc(bc_b64_encoded_len(len) + 1);
	json_t	   *extra = NULL;
	json_t	   *doc = NULL;
	char	   *proof = NULL;
	char	   *body = NULL;

	memset(&cred, 0, sizeof(cred));
	cred.key = node->key;
	cred.spiffe_id = (char *) node->spiffe_id;
	memcpy(cred.serial, node->serial, sizeof(cred.serial));
	if (b64 == NULL || bc_sha256_b64url(blob, len, sha) != BC_OK)
		goto out;
	b64[bc_b64_encode(blob, len, b64)] = '\0';
	extra = json_pack("{s:s, s:s}", "sshKeySha256", sha, "hostname", s->hostname);
	if (extra == NULL)
		goto out;
	if (s->o->n_ssh_principals > 0)
	{
		json_t	   *p = json_array();

		for (int i = 0; p != NULL && i < s->o->n_ssh_principals; i++)
			json_array_append_new(p, json_string(s->o->ssh_principals[i]));
		if (p == NULL || json_object_set_new(extra, "principals", p) != 0)
			goto out;
	}
	proof = bcd_node_proof(&cred, BC_PURPOSE_SSH_HOST, extra);
	doc = proof != NULL ? json_pack("{s:s, s:s}", "sshPublicKey", b64, "proof", proof) : NULL;
	if (doc != NULL)
		body = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
out:
	json_decref(doc);
	json_decref(extra);
	free(proof);
	free(b64);
	return body;
}

/* The certificate of k for node: kept, or asked for and written.  1 when the file changed. */
static int
host_one(bcd_ssh *s, ssh_key *k, const bcd_node_snapshot *node)
{
	static const char *const issued[] = {BC_STATUS_ISSUED, NULL};
	unsigned char *blob = NULL;
	size_t		blob_len = 0;
	char	   *text = NULL;
	size_t		len = 0;
	char	   *body = NULL;
	json_t	   *payload = NULL;
	unsigned char *cert = NULL;
	size_t		cert_len = 0;
	char	   *line = NULL;
	bc_ssh_cert_info info;
	bcd_credential cred;
	char		why[512] = "";
	char		err[512];
	bcd_rc		rc;
	int			changed = 0;
	int			ok = 0;

	memset(&info, 0, sizeof(info));
	if (key_blob(s, k, &blob, &blob_len) != BC_OK)
		goto out;
	/* the certificate held, when it is right for this key and node certificate */
	if (bcd_read_file_at(k->cert_dirfd, k->cert_name, BCD_SSH_LINE_MAX, &text, &len) == BC_OK)
	{
		if (bcd_ssh_host_cert_held(text, len, blob, blob_len, node->not_after, &s->held, &info,
								   why, sizeof(why)) == BC_OK)
		{
			ok = 1;
			goto out;
		}
	}
	else
		snprintf(why, sizeof(why), "there is none");
	body = host_request(s, node, blob, blob_len);
	if (body == NULL)
	{
		say(s, 0, "cannot make the request of %s's certificate (out of memory?)", k->pub_path);
		goto out;
	}
	memset(&cred, 0, sizeof(cred));
	cred.key = node->key;
	cred.spiffe_id = (char *) node->spiffe_id;
	memcpy(cred.serial, node->serial, sizeof(cred.serial));
	payload = bcd_node_exchange_status(s->http, s->keys, &cred, BC_PATH_SSH_HOST, body, NULL,
									   issued, &rc, err, sizeof(err));
	if (payload == NULL)
	{
		say(s, 0, "%s: no host certificate for %s: %s", BC_PATH_SSH_HOST, k->pub_path, err);
		goto out;
	}
	if (bcd_ssh_host_answer(payload, blob, blob_len, node->not_after,
							(const char *const *) s->o->ssh_principals,
							(size_t) s->o->n_ssh_principals, &cert, &cert_len, &info, err,
							sizeof(err)) != BC_OK)
	{
		say(s, 0, "%s: the host certificate answered for %s is refused: %s", BC_PATH_SSH_HOST,
			k->pub_path, err);
		goto out;
	}
	line = bc_ssh_pubkey_line(cert, cert_len, info.key_id[0] != '\0' ? info.key_id : NULL);
	if (line == NULL)
		line = bc_ssh_pubkey_line(cert, cert_len, NULL);
	if (line == NULL)
		goto out;
	if (text == NULL || strcmp(text, line) != 0)
	{
		if (bcd_delivery_write_file_mode(k->cert_dirfd, k->cert_name, line, strlen(line), 0644,
										 err, sizeof(err)) != BC_OK)
		{
			say(s, 0, "%s: %s", k->cert_path, err);
			goto out;
		}
		changed = 1;
	}
	{
		char		names[1024] = "";
		char		until[32] = "?";
		time_t		t = (time_t) info.valid_before;
		struct tm	tm;

		for (size_t i = 0; i < info.n_principals; i++)
			snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
					 i > 0 ? "," : "", info.principals[i]);
		if (gmtime_r(&t, &tm) != NULL)
			strftime(until, sizeof(until), "%Y-%m-%dT%H:%M:%SZ", &tm);
		bcd_log("ssh: %s: host certificate serial %llu for %s, principals %s, valid before %s "
				"(%s)", k->cert_path, (unsigned long long) info.serial, k->pub_path, names, until,
				why);
	}
	s->said[0].line[0] = '\0';
	ok = 1;
out:
	if (ok)
	{
		pthread_mutex_lock(&s->mu);
		k->have = 1;
		k->serial = info.serial;
		k->valid_before = (int64_t) info.valid_before;
		pthread_mutex_unlock(&s->mu);
		memcpy(k->ok_for, node->serial, sizeof(k->ok_for));
	}
	else
	{
		k->next_try = bcd_now_ms() / 1000.0 + FAIL_AGAIN_S;
		memcpy(k->tried_for, node->serial, sizeof(k->tried_for));
	}
	bc_ssh_cert_info_free(&info);
	free(line);
	free(cert);
	json_decref(payload);
	free(body);
	free(text);
	free(blob);
	return changed;
}

/* The host certificates' round: each key not yet right for the node certificate published. */
static void
hosts_round(bcd_ssh *s)
{
	bcd_node_snapshot node;
	int			changed = 0;
	double		now = bcd_now_ms() / 1000.0;

	bcd_provisioner_node_take(s->prov, &node);
	if (bcd_node_usable(&node))
		for (int i = 0; i < s->n && !atomic_load(&s->stopping); i++)
		{
			ssh_key    *k = &s->hk[i];

			if (strcmp(k->ok_for, node.serial) == 0)
				continue;
			if (strcmp(k->tried_for, node.serial) == 0 && now < k->next_try)
				continue;
			changed |= host_one(s, k, &node);
		}
	bcd_node_release(&node);
	if (changed && s->o->ssh_reload != NULL && !atomic_load(&s->stopping))
		(void) bcd_reload_run("ssh", s->o->ssh_reload, s->reload_fd, NULL, &s->stopping);
}

/* Write text into f when it differs from what was written last; 0, or -1 (said). */
static int
file_write(bcd_ssh *s, ssh_file *f, const char *text, size_t len)
{
	char		err[512];
	char	   *copy;

	if (f->path == NULL || (f->written != NULL && strlen(f->written) == len &&
							memcmp(f->written, text, len) == 0))
		return 0;
	if (bcd_delivery_write_file_mode(f->dirfd, f->name, text, len, 0644, err, sizeof(err)) !=
		BC_OK)
	{
		say(s, 1, "%s %s: %s", f->opt, f->path, err);
		return -1;
	}
	copy = strndup(text, len);
	free(f->written);
	f->written = copy;
	return 0;
}

/* The signed document's round: fetched, taken up, the KRL fetched when new, the files. */
static void
docs_round(bcd_ssh *s)
{
	bcd_http_reply reply;
	bcd_ssh_signed next;
	char		err[640];

	memset(&next, 0, sizeof(next));
	for (int attempt = 0; attempt < 2 && !atomic_load(&s->stopping); attempt++)
	{
		bcd_rc		rc;

		memset(&reply, 0, sizeof(reply));
		rc = bcd_http_fetch(s->http, BC_PATH_SSH_SIGNED, NULL, NULL, 0, NULL, BCD_SSH_SIGNED_MAX,
							&reply, NULL, 0, err, sizeof(err));
		if (rc == BCD_RC_OK && reply.status != 200)
			bcd_http_describe(&reply, err, sizeof(err));
		if (rc != BCD_RC_OK || reply.status != 200)
		{
			bcd_http_reply_free(&reply);
			say(s, 1, "GET %s: %s; the SSH files are kept", BC_PATH_SSH_SIGNED, err);
			pthread_mutex_lock(&s->mu);
			snprintf(s->signed_error, sizeof(s->signed_error), "GET %s: %s", BC_PATH_SSH_SIGNED,
					 err);
			pthread_mutex_unlock(&s->mu);
			return;
		}
		rc = bcd_ssh_signed_take(s->keys, reply.body, reply.len, &s->held, (int64_t) time(NULL),
								 &next, err, sizeof(err)) == BC_OK ? BCD_RC_OK : BCD_RC_FAILED;
		bcd_http_reply_free(&reply);
		if (rc != BCD_RC_OK)
		{
			say(s, 1, "%s; the SSH files are kept", err);
			pthread_mutex_lock(&s->mu);
			snprintf(s->signed_error, sizeof(s->signed_error), "%s", err);
			pthread_mutex_unlock(&s->mu);
			return;
		}
		if (s->krl.path == NULL || strcmp(next.krl_sha256, s->krl_written) == 0)
			break;
		memset(&reply, 0, sizeof(reply));
		rc = bcd_http_fetch(s->http, BC_PATH_SSH_KRL, NULL, NULL, 0, NULL, BC_SSH_KRL_MAX, &reply,
							NULL, 0, err, sizeof(err));
		if (rc == BCD_RC_OK && reply.status != 200)
		{
			bcd_http_describe(&reply, err, sizeof(err));
			rc = BCD_RC_FAILED;
		}
		if (rc == BCD_RC_OK &&
			bcd_ssh_krl_check(&next, (const unsigned char *) reply.body, reply.len, err,
							  sizeof(err)) != BC_OK)
			rc = BCD_RC_FAILED;
		if (rc == BCD_RC_OK)
		{
			if (file_write(s, &s->krl, reply.body, reply.len) == 0)
			{
				memcpy(s->krl_written, next.krl_sha256, sizeof(s->krl_written));
				pthread_mutex_lock(&s->mu);
				s->krl_version = next.krl_version;
				pthread_mutex_unlock(&s->mu);
				bcd_log("ssh: %s: KRL version %lld written (%zu bytes)", s->krl.path,
						(long long) next.krl_version, reply.len);
			}
			bcd_http_reply_free(&reply);
			break;
		}
		bcd_http_reply_free(&reply);
		if (attempt == 0)
		{
			/* a revocation between the two GETs: the signed document once more */
			bcd_ssh_signed_clear(&next);
			continue;
		}
		say(s, 1, "GET %s: %s (and again after %s once more); the KRL held is kept",
			BC_PATH_SSH_KRL, err, BC_PATH_SSH_SIGNED);
	}
	if (next.issued == 0)
		return;
	(void) file_write(s, &s->user_ca, next.user_ca, strlen(next.user_ca));
	(void) file_write(s, &s->host_ca, next.host_ca, strlen(next.host_ca));
	/* other host CA keys: each certificate held is looked at again (a retired CA's is replaced) */
	if (s->held.host_ca == NULL || strcmp(s->held.host_ca, next.host_ca) != 0)
		for (int i = 0; i < s->n; i++)
			s->hk[i].ok_for[0] = '\0';
	/*
	 * The floor of what is taken up next (issuedAt, krlVersion), kept in the
	 * state directory for the next start: when the KRL version rises, and
	 * every FLOOR_SAVE_S of issuedAt (not at every round: a write each).
	 */
	if (next.krl_version > s->held.krl_version || next.issued >= s->floor_saved + FLOOR_SAVE_S)
	{
		if (bcd_ssh_floor_save(s->o->state_dir, next.issued, next.krl_version) == BC_OK)
			s->floor_saved = next.issued;
		else
			say(s, 1, "cannot keep the SSH documents' floor in %s/" BCD_SSH_FLOOR_FILE,
				s->o->state_dir);
	}
	pthread_mutex_lock(&s->mu);
	s->signed_issued = next.issued;
	s->signed_error[0] = '\0';
	pthread_mutex_unlock(&s->mu);
	bcd_ssh_signed_clear(&s->held);
	s->held = next;
}

/* The ticker's round. */
static long
ssh_round(void *arg)
{
	bcd_ssh    *s = arg;

	if (s->krl.path != NULL || s->user_ca.path != NULL || s->host_ca.path != NULL)
		docs_round(s);
	if (s->n > 0)
		hosts_round(s);
	return s->interval;
}

/*
 * The krlVersion of the --ssh-krl file already there (bcd_ssh_krl_version),
 * the floor of what is taken up; -1 when there is none.
 */
static int64_t
krl_version_on_disk(bcd_ssh *s)
{
	char	   *text = NULL;
	size_t		len = 0;
	int64_t		v = -1;

	if (s->krl.path == NULL ||
		bcd_read_file_at(s->krl.dirfd, s->krl.name, BC_SSH_KRL_MAX, &text, &len) != BC_OK)
		return -1;
	v = bcd_ssh_krl_version((const unsigned char *) text, len);
	free(text);
	return v;
}

/* Start (ssh_host.h). */
int
bcd_ssh_start(const bcd_run_opts *o, const bcd_service_keys *keys, bcd_provisioner *prov,
			  bcd_ssh **out, char *err, size_t errlen)
{
	bcd_ssh    *s = calloc(1, sizeof(*s));
	int			cert_dirfd = -1;
	int			rc = BC_EINVAL;

	*out = NULL;
	if (s == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	s->o = o;
	s->keys = keys;
	s->prov = prov;
	s->reload_fd = -1;
	s->krl_version = -1;
	bcd_ssh_signed_clear(&s->held);
	pthread_mutex_init(&s->mu, NULL);
	bcd_ticker_init(&s->ticker);
	s->interval = o->status_interval > 0 ? o->status_interval : INTERVAL_DEFAULT;
	if (o->hostname != NULL)
		snprintf(s->hostname, sizeof(s->hostname), "%s", o->hostname);
	else if (gethostname(s->hostname, sizeof(s->hostname) - 1) != 0)
		snprintf(s->hostname, sizeof(s->hostname), "localhost");
	if (s->hostname[0] == '\0')
		snprintf(s->hostname, sizeof(s->hostname), "localhost");
	bcd_ssh_hostname_norm(s->hostname);
	if (o->ssh_cert_dir != NULL &&
		(cert_dirfd = keep_fd(s, bcd_delivery_open_checked("--ssh-cert-dir", o->ssh_cert_dir,
														   err, errlen))) < 0)
		goto fail;
	for (int i = 0; i < o->n_ssh_host_keys; i++)
		if (add_key(s, o->ssh_host_keys[i], -1, cert_dirfd, o->ssh_cert_dir, err, errlen) !=
			BC_OK)
			goto fail;
	if (o->ssh_own_host_key != NULL)
	{
		char		pub[PATH_MAX];
		int			own_fd;

		if (own_key(s, o->ssh_own_host_key, &own_fd, err, errlen) != BC_OK)
			goto fail;
		snprintf(pub, sizeof(pub), "%s/" OWN_PUB, o->ssh_own_host_key);
		if (add_key(s, pub, own_fd, cert_dirfd,
					o->ssh_cert_dir != NULL ? o->ssh_cert_dir : o->ssh_own_host_key, err,
					errlen) != BC_OK)
			goto fail;
	}
	if (o->ssh_reload != NULL &&
		(s->reload_fd = bcd_exec_open_checked("--ssh-reload", o->ssh_reload, err, errlen)) < 0)
		goto fail;
	if (file_open(s, &s->krl, "--ssh-krl", o->ssh_krl, err, errlen) != BC_OK ||
		file_open(s, &s->user_ca, "--ssh-user-ca", o->ssh_user_ca, err, errlen) != BC_OK ||
		file_open(s, &s->host_ca, "--ssh-host-ca", o->ssh_host_ca, err, errlen) != BC_OK)
		goto fail;
	s->held.krl_version = krl_version_on_disk(s);
	bcd_ssh_floor_load(o->state_dir, &s->held.issued, &s->held.krl_version);
	s->floor_saved = s->held.issued;
	s->http = bcd_http_new(o->gateway, o->gateway_ca, err, errlen);
	if (s->http == NULL)
		goto fail;
	if (bcd_ticker_start(&s->ticker, ssh_round, s) != 0)
	{
		snprintf(err, errlen, "cannot start the SSH thread");
		goto fail;
	}
	bcd_log("ssh: %d host key(s)%s%s%s%s, every %ld s", s->n,
			o->ssh_krl != NULL ? ", the KRL into " : "", o->ssh_krl != NULL ? o->ssh_krl : "",
			o->ssh_user_ca != NULL || o->ssh_host_ca != NULL ? ", the CA keys" : "",
			s->held.krl_version >= 0 ? " (a KRL is there already)" : "", s->interval);
	*out = s;
	return BC_OK;
fail:
	bcd_ssh_free(s);
	return rc;
}

/* Look at the host certificates now (ssh_host.h). */
void
bcd_ssh_kick(bcd_ssh *s)
{
	if (s != NULL)
		bcd_ticker_kick(&s->ticker);
}

/* bcd status's members (ssh_host.h). */
void
bcd_ssh_status(bcd_ssh *s, json_t *doc)
{
	json_t	   *certs;

	if (s == NULL || doc == NULL)
		return;
	certs = json_array();
	pthread_mutex_lock(&s->mu);
	for (int i = 0; certs != NULL && i < s->n; i++)
	{
		const ssh_key *k = &s->hk[i];
		char		serial[24];
		char		until[32] = "?";
		time_t		t = (time_t) k->valid_before;
		struct tm	tm;

		if (!k->have)
			continue;
		snprintf(serial, sizeof(serial), "%llu", (unsigned long long) k->serial);
		if (gmtime_r(&t, &tm) != NULL)
			strftime(until, sizeof(until), "%Y-%m-%dT%H:%M:%SZ", &tm);
		json_array_append_new(certs, json_pack("{s:s, s:s, s:s}", "path", k->cert_path,
											   "serial", serial, "validBefore", until));
	}
	json_object_set_new(doc, "sshKrlVersion", s->krl_version >= 0 ?
						json_integer((json_int_t) s->krl_version) : json_null());
	if (s->krl.path != NULL || s->user_ca.path != NULL || s->host_ca.path != NULL)
	{
		char		at[32] = "";
		time_t		t = (time_t) s->signed_issued;
		struct tm	tm;

		if (s->signed_issued > 0 && gmtime_r(&t, &tm) != NULL)
			strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
		json_object_set_new(doc, "sshSignedIssuedAt", at[0] != '\0' ? json_string(at) :
							json_null());
		json_object_set_new(doc, "sshSignedError", s->signed_error[0] != '\0' ?
							json_string(s->signed_error) : json_null());
	}
	pthread_mutex_unlock(&s->mu);
	if (certs != NULL)
		json_object_set_new(doc, "sshHostCertificates", certs);
}

/* Stop its thread (ssh_host.h). */
void
bcd_ssh_stop(bcd_ssh *s)
{
	if (s == NULL)
		return;
	atomic_store(&s->stopping, 1);
	bcd_ticker_stop(&s->ticker);
}

/* Free it (ssh_host.h). */
void
bcd_ssh_free(bcd_ssh *s)
{
	if (s == NULL)
		return;
	bcd_ssh_stop(s);
	bcd_ticker_destroy(&s->ticker);
	bcd_http_free(s->http);
	for (int i = 0; i < s->n; i++)
	{
		free(s->hk[i].pub_path);
		free(s->hk[i].cert_path);
	}
	for (int i = 0; i < s->n_fds; i++)
		close(s->fds[i]);
	if (s->reload_fd >= 0)
		close(s->reload_fd);
	free(s->krl.written);
	free(s->user_ca.written);
	free(s->host_ca.written);
	bcd_ssh_signed_clear(&s->held);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
