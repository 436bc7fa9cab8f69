/*
 * store.c: the credential store, the state directory of `bcd run`.
 *
 *   DIR/            0700, ours (another owner is refused; our own mode is
 *                   set back to 0700 on every start)
 *   DIR/lock        flock()ed by the one bcd that uses DIR
 *   DIR/node.key    the node key (P-256, PKCS#8 PEM, 0600)
 *   DIR/node-chain.pem  its certificate, then the node CA (0644)
 *   DIR/join/       the key and CSR of a join in progress (node.key,
 *                   node.csr.der): one key and CSR for the whole exchange,
 *                   across restarts; removed once the join is stored
 *
 * A new credential is committed in four steps: node.key.new and
 * node-chain.pem.new are each written atomically (temporary file, fsync,
 * rename, fsync of DIR), then renamed over node.key and node-chain.pem.  On
 * start, an interrupted commit is finished when both halves made it to disk
 * and undone otherwise, so node.key always matches node-chain.pem.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>

#include "bc_common.h"
#include "bc_protocol.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/store.h"
#include "core/tpm_key.h"
#include "core/verify.h"

/* Check that path is a directory we own; set its mode to 0700 if it is not. */
static int
check_own_dir(const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (lstat(path, &st) != 0)
	{
		snprintf(err, errlen, "cannot stat %s: %s", path, strerror(errno));
		return BC_EINVAL;
	}
	if (!S_ISDIR(st.st_mode))
	{
		snprintf(err, errlen, "%s is not a directory (a symbolic link is not accepted)", path);
		return BC_EINVAL;
	}
	if (st.st_uid != geteuid())
	{
		snprintf(err, errlen, "%s is owned by uid %ld, not by this bcd (uid %ld); "
				 "refusing to use it", path, (long) st.st_uid, (long) geteuid());
		return BC_EINVAL;
	}
	if ((st.st_mode & 07777) != 0700)
	{
		if (chmod(path, 0700) != 0)
		{
			snprintf(err, errlen, "cannot set the mode of %s to 0700: %s", path, strerror(errno));
			return BC_EINVAL;
		}
		bcd_log("%s had mode %04o; set it to 0700", path, (unsigned) (st.st_mode & 07777));
	}
	return BC_OK;
}

/* Create path 0700 when missing, then check it as ours. */
static int
ensure_own_dir(const char *path, char *err, size_t errlen)
{
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
	{
		snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
		return BC_EINVAL;
	}
	return check_own_dir(path, err, errlen);
}

/* fsync the directory dir. */
static void
sync_dir(const char *dir)
{
	int			fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0)
	{
		(void) fsync(fd);
		close(fd);
	}
}

/* Remove temporary files an interrupted atomic write left in dir. */
static void
remove_temporaries(const char *dir)
{
	DIR		   *d = opendir(dir);
	struct dirent *e;

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL)
	{
		if (strstr(e->d_name, ".tmp.") != NULL)
			(void) unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
}

/* 1 when dir/name exists. */
static int
exists_in(const char *dir, const char *name)
{
	char	   *path = bcd_path_join(dir, name);
	int			found = path != NULL && access(path, F_OK) == 0;

	free(path);
	return found;
}

/*
 * The node key in path, or NULL with a log line (err may be NULL).  A tpm
 * bcd (bcd_tpm_keys_on) reads TSS2 PRIVATE KEYs only and refuses any file
 * key; any other bcd refuses a TSS2 key legibly (it needs --attestor tpm).
 */
static EVP_PKEY *
read_node_key(const char *path, char *err, size_t errlen)
{
	char		buf[512];
	EVP_PKEY   *key;

	if (err == NULL)
	{
		err = buf;
		errlen = sizeof(buf);
	}
	err[0] = '\0';
	if (bcd_tpm_keys_on())
		key = bcd_tpm_key_read(path, err, errlen);
	else if (bcd_tpm_key_file_is_tss2(path))
	{
		snprintf(err, errlen, "%s is a key in a TPM (TSS2 PRIVATE KEY): run bcd with "
				 "--attestor tpm --tcti CONF", path);
		key = NULL;
	}
	else
		key = bc_pkey_read_pem_file(path, 1, err, errlen);
	if (key == NULL && access(path, F_OK) == 0)
		bcd_log("%s", err);
	return key;
}

/* The private key in dir/name, or NULL. */
static EVP_PKEY *
read_key_in(const char *dir, const char *name)
{
	char	   *path = bcd_path_join(dir, name);
	EVP_PKEY   *key = NULL;

	if (path != NULL)
		key = read_node_key(path, NULL, 0);
	free(path);
	return key;
}

/* Free a node key (a TPM key under the provider's lock). */
void
bcd_node_key_free(EVP_PKEY *key)
{
	bcd_tpm_key_lock();
	EVP_PKEY_free(key);
	bcd_tpm_key_unlock();
}

/* The first certificate in dir/name, or NULL. */
static X509 *
read_cert_in(const char *dir, const char *name)
{
	char	   *path = bcd_path_join(dir, name);
	char		err[256];
	X509	   *cert = NULL;

	if (path != NULL)
		cert = bc_cert_read_pem_file(path, err, sizeof(err));
	free(path);
	return cert;
}

/* rename dir/from to dir/to. */
static int
rename_in(const char *dir, const char *from, const char *to)
{
	char	   *a = bcd_path_join(dir, from);
	char	   *b = bcd_path_join(dir, to);
	int			rc = a != NULL && b != NULL && rename(a, b) == 0 ? BC_OK : BC_EINVAL;

	free(a);
	free(b);
	return rc;
}

/* unlink dir/name, ignoring a missing file. */
static void
unlink_in(const char *dir, const char *name)
{
	char	   *path = bcd_path_join(dir, name);

	if (path != NULL)
		(void) unlink(path);
	free(path);
}

/* Finish or undo a commit that a crash interrupted (see the file comment). */
static void
recover_commit(const char *dir)
{
	X509	   *leaf = NULL;
	EVP_PKEY   *key = NULL;
	int			have_new_key = exists_in(dir, "node.key.new");

	remove_temporaries(dir);
	if (!exists_in(dir, "node-chain.pem.new"))
	{
		if (have_new_key)
			bcd_log("undid an interrupted credential update (only its key was written)");
		unlink_in(dir, "node.key.new");
		return;
	}
	leaf = read_cert_in(dir, "node-chain.pem.new");
	key = read_key_in(dir, have_new_key ? "node.key.new" : "node.key");
	if (leaf != NULL && key != NULL && EVP_PKEY_eq(X509_get0_pubkey(leaf), key) == 1 &&
		(!have_new_key || rename_in(dir, "node.key.new", "node.key") == BC_OK) &&
		rename_in(dir, "node-chain.pem.new", "node-chain.pem") == BC_OK)
		bcd_log("finished an interrupted credential update");
	else
	{
		unlink_in(dir, "node.key.new");
		unlink_in(dir, "node-chain.pem.new");
		bcd_log("undid an interrupted credential update");
	}
	sync_dir(dir);
	bcd_node_key_free(key);
	X509_free(leaf);
	ERR_clear_error();
}

/*
 * Take DIR/lock (flock LOCK_EX | LOCK_NB), the one lock of a state
 * directory: bcd run and bcd renew hold it for their whole life, bcd
 * join-request and bcd verify-response while they read and write DIR.  The
 * holder writes its pid into the file, so a refused one can name it.
 * BC_OK with *lock_fd; BC_EVERIFY when another process holds it (*holder:
 * its pid, 0 when unknown); BC_EINVAL (errno kept) when it cannot be taken.
 */
int
bcd_state_lock(const char *dir, int *lock_fd, long *holder)
{
	char	   *lock_path = bcd_path_join(dir, "lock");
	char		buf[32];
	ssize_t		n;
	int			fd;
	int			e;

	*lock_fd = -1;
	*holder = 0;
	if (lock_path == NULL)
	{
		errno = ENOMEM;
		return BC_EINVAL;
	}
	fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	e = errno;
	free(lock_path);
	if (fd < 0)
	{
		errno = e;
		return BC_EINVAL;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
	{
		e = errno;
		if (e == EWOULDBLOCK && (n = pread(fd, buf, sizeof(buf) - 1, 0)) > 0)
		{
			buf[n] = '\0';
			*holder = strtol(buf, NULL, 10);
			if (*holder < 0)
				*holder = 0;
		}
		close(fd);
		errno = e;
		return e == EWOULDBLOCK ? BC_EVERIFY : BC_EINVAL;
	}
	n = snprintf(buf, sizeof(buf), "%ld\n", (long) getpid());
	if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t) n, 0) != n)
		bcd_log("cannot write our pid into %s/lock: %s", dir, strerror(errno));
	*lock_fd = fd;
	return BC_OK;
}

/* "another bcd holds DIR (pid N)" and the like, for a lock bcd_state_lock could not take. */
void
bcd_state_lock_error(const char *dir, int rc, long holder, char *err, size_t errlen)
{
	char		pid[48] = "";

	if (holder > 0)
		snprintf(pid, sizeof(pid), " (pid %ld)", holder);
	if (rc == BC_EVERIFY)
		snprintf(err, errlen, "the state directory %s is in use by another bcd%s: its lock "
				 "file %s/lock is locked", dir, pid, dir);
	else
		snprintf(err, errlen, "cannot lock the state directory %s (%s/lock): %s", dir, dir,
				 strerror(errno));
}

/*
 * Open the state directory: create it 0700 when missing, refuse another
 * owner, set our own mode back to 0700, take DIR/lock (held until exit:
 * *lock_fd stays open), finish or undo an interrupted commit.
 */
int
bcd_store_open(const char *dir, int *lock_fd, char *err, size_t errlen)
{
	char	   *key_path = NULL;
	struct stat st;
	char		pid[48] = "";
	long		holder;
	int			fd = -1;
	int			rc;

	*lock_fd = -1;
	rc = ensure_own_dir(dir, err, errlen);
	if (rc != BC_OK)
		goto out;
	rc = BC_ENOMEM;
	key_path = bcd_path_join(dir, "node.key");
	if (key_path == NULL)
		goto out;
	rc = bcd_state_lock(dir, &fd, &holder);
	if (rc == BC_EVERIFY)
	{
		if (holder > 0)
			snprintf(pid, sizeof(pid), ", pid %ld", holder);
		snprintf(err, errlen, "another bcd holds %s (its lock file %s/lock is locked%s); "
				 "refusing to start a second one", dir, dir, pid);
		rc = BC_EINVAL;
		goto out;
	}
	if (rc != BC_OK)
	{
		bcd_state_lock_error(dir, rc, holder, err, errlen);
		goto out;
	}
	if (lstat(key_path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		(st.st_mode & 07777) != 0600)
	{
		if (chmod(key_path, 0600) == 0)
			bcd_log("%s had mode %04o; set it to 0600", key_path, (unsigned) (st.st_mode & 07777));
	}
	recover_commit(dir);
	*lock_fd = fd;
	fd = -1;
	rc = BC_OK;
out:
	if (fd >= 0)
		close(fd);
	free(key_path);
	return rc;
}

/* An ASN1_TIME as unix seconds, or 0. */
static int64_t
asn1_unix(const ASN1_TIME *t)
{
	struct tm	tm;

	if (ASN1_TIME_to_tm(t, &tm) != 1)
		return 0;
	return (int64_t) timegm(&tm);
}

/* Fill cred from key and leaf (both are referenced, not taken). */
int
bcd_credential_fill(bcd_credential *cred, EVP_PKEY *key, X509 *leaf)
{
	int			rc;

	memset(cred, 0, sizeof(*cred));
	rc = bc_cert_uri_san(leaf, BC_SPIFFE_SCHEME, &cred->spiffe_id);
	if (rc == BC_OK)
		rc = bcd_cert_serial_hex(leaf, cred->serial);
	if (rc == BC_OK && (EVP_PKEY_up_ref(key) != 1 || X509_up_ref(leaf) != 1))
		rc = BC_ECRYPTO;
	if (rc != BC_OK)
	{
		free(cred->spiffe_id);
		memset(cred, 0, sizeof(*cred));
		return rc;
	}
	cred->key = key;
	cred->leaf = leaf;
	cred->not_before = asn1_unix(X509_get0_notBefore(leaf));
	cred->not_after = asn1_unix(X509_get0_notAfter(leaf));
	cred->obtained = (int64_t) time(NULL);
	bcd_cert_not_after(leaf, cred->not_after_text, sizeof(cred->not_after_text));
	return BC_OK;
}

/* Release a credential. */
void
bcd_credential_free(bcd_credential *cred)
{
	bcd_node_key_free(cred->key);
	X509_free(cred->leaf);
	free(cred->spiffe_id);
	memset(cred, 0, sizeof(*cred));
}

/* dir/node-chain.pem's certificates, the leaf first (store.h). */
int
bcd_store_read_chain(const char *dir, X509 **certs, size_t max, size_t *n)
{
	char	   *path = bcd_path_join(dir, "node-chain.pem");
	int			rc = BC_ENOMEM;

	*n = 0;
	if (path != NULL)
		rc = bc_cert_read_pem_bundle(path, NULL, 0, certs, max, n, NULL, 0);
	free(path);
	return rc;
}

/*
 * Verify leaf through the rest of dir/node-chain.pem (the issuing CA and its
 * chain, as answered) to the pinned root, at at.
 */
static int
verify_stored_chain(const char *dir, X509 *leaf, X509 *root, int64_t at)
{
	X509	   *certs[BCD_CHAIN_MAX];
	size_t		n = 0;
	size_t		i;
	int			rc;

	rc = bcd_store_read_chain(dir, certs, BCD_CHAIN_MAX, &n);
	if (rc == BC_OK)
		rc = bc_cert_verify_path(leaf, certs + 1, n - 1, root, at);
	for (i = 0; i < n; i++)
		X509_free(certs[i]);
	return rc;
}

/*
 * The stored credential: node.key and the leaf of node-chain.pem, which
 * must certify that key and verify against the pinned node CA (checked at
 * its last valid second when it has expired: an expired credential is still
 * loaded, the caller compares not_after with the clock).  cred->obtained is
 * node-chain.pem's modification time.
 */
int
bcd_store_load(const char *dir, const bcd_service_keys *keys, bcd_credential *cred,
			   char *err, size_t errlen)
{
	EVP_PKEY   *key = NULL;
	X509	   *leaf = NULL;
	int64_t		now = (int64_t) time(NULL);
	int64_t		at;
	char	   *chain_path = NULL;
	struct stat st;
	int			rc = BC_EINVAL;

	memset(cred, 0, sizeof(*cred));
	if (!exists_in(dir, "node.key") && !exists_in(dir, "node-chain.pem"))
	{
		snprintf(err, errlen, "no credential in %s yet", dir);
		goto out;
	}
	key = read_key_in(dir, "node.key");
	leaf = read_cert_in(dir, "node-chain.pem");
	if (key == NULL || leaf == NULL)
	{
		snprintf(err, errlen, "%s/node.key or %s/node-chain.pem is missing or unreadable",
				 dir, dir);
		goto out;
	}
	if (EVP_PKEY_eq(X509_get0_pubkey(leaf), key) != 1)
	{
		snprintf(err, errlen, "%s/node-chain.pem does not certify %s/node.key", dir, dir);
		goto out;
	}
	at = asn1_unix(X509_get0_notAfter(leaf));
	at = now < at ? now : at - 1;
	rc = verify_stored_chain(dir, leaf, keys->node_ca, at);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "%s/node-chain.pem does not verify against the pinned node CA", dir);
		goto out;
	}
	rc = bcd_credential_fill(cred, key, leaf);
	if (rc != BC_OK)
	{
		snprintf(err, errlen, "%s/node-chain.pem has no SPIFFE ID or serial", dir);
		goto out;
	}
	chain_path = bcd_path_join(dir, "node-chain.pem");
	if (chain_path != NULL && stat(chain_path, &st) == 0 && (int64_t) st.st_mtime < now)
		cred->obtained = (int64_t) st.st_mtime;
out:
	free(chain_path);
	bcd_node_key_free(key);
	X509_free(leaf);
	ERR_clear_error();
	return rc;
}

/* The PEM (PKCS#8) of a private key, malloc()ed; release with bc_free_secret. */
int
bcd_key_pem(EVP_PKEY *key, char **out, size_t *len)
{
	BIO		   *bio = BIO_new(BIO_s_mem());
	char	   *data = NULL;
	long		n = 0;
	int			rc = BC_ECRYPTO;

	*out = NULL;
	if (bio == NULL || PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) != 1)
		goto out;
	n = BIO_get_mem_data(bio, &data);
	rc = BC_ENOMEM;
	if (n <= 0 || (*out = malloc((size_t) n)) == NULL)
		goto out;
	memcpy(*out, data, (size_t) n);
	*len = (size_t) n;
	rc = BC_OK;
out:
	if (data != NULL && n > 0)
		OPENSSL_cleanse(data, (size_t) n);
	BIO_free(bio);
	return rc;
}

/* Store key and its verified chain as the node's credential (see the file comment). */
int
bcd_store_commit(const char *dir, EVP_PKEY *key, const char *chain_pem,
				 size_t chain_len, char *err, size_t errlen)
{
	char	   *pem = NULL;
	size_t		pem_len = 0;
	int			rc;

	bcd_tpm_key_lock();
	rc = bcd_key_pem(key, &pem, &pem_len);
	bcd_tpm_key_unlock();
	if (rc == BC_OK)
		rc = bcd_write_file_atomic(dir, "node.key.new", pem, pem_len, 0600);
	if (rc == BC_OK)
		rc = bcd_write_file_atomic(dir, "node-chain.pem.new", chain_pem, chain_len, 0644);
	if (rc == BC_OK)
		rc = rename_in(dir, "node.key.new", "node.key");
	if (rc == BC_OK)
		rc = rename_in(dir, "node-chain.pem.new", "node-chain.pem");
	if (rc == BC_OK)
		sync_dir(dir);
	else
	{
		snprintf(err, errlen, "cannot store the credential in %s: %s", dir, strerror(errno));
		recover_commit(dir);
	}
	if (pem != NULL)
		bc_free_secret(pem, pem_len);
	return rc;
}

/*
 * DIR/<name> ("join" or "renew": the key and CSR of an exchange in progress,
 * kept so a restart or a lost answer reuses them), created 0700 when
 * missing (malloc()ed), or NULL with a log line.
 */
char *
bcd_store_work_dir(const char *dir, const char *name)
{
	char	   *path = bcd_path_join(dir, name);
	char		err[512];

	if (path != NULL && ensure_own_dir(path, err, sizeof(err)) != BC_OK)
	{
		bcd_log("%s", err);
		free(path);
		path = NULL;
	}
	return path;
}

/* Remove DIR/<name> and the key and CSR in it (the exchange is over). */
void
bcd_store_forget_work(const char *dir, const char *name)
{
	char	   *path = bcd_path_join(dir, name);

	if (path == NULL)
		return;
	unlink_in(path, "node.key");
	unlink_in(path, "node.csr.der");
	remove_temporaries(path);
	(void) rmdir(path);
	sync_dir(dir);
	free(path);
}
/* Write the new node key as DIR/node.key (0600) via a temporary file and rename. */
static int
write_node_key(const char *dir, EVP_PKEY *key)
{
	char	   *tmp = bcd_path_join(dir, "node.key.tmp");
	char	   *path = bcd_path_join(dir, "node.key");
	int			rc = BC_ENOMEM;

	if (tmp == NULL || path == NULL)
		goto out;
	unlink(tmp);
	rc = bc_pkey_write_pem_file(key, tmp);
	if (rc == BC_OK && rename(tmp, path) != 0)
		rc = BC_EINVAL;
	if (rc != BC_OK)
		unlink(tmp);
out:
	free(tmp);
	free(path);
	return rc;
}

/*
 * The node key and CSR of DIR when both are there (and match), else new ones
 * written there.  One key and one CSR serve every round of a join.  dir
 * NULL (bcd ramdisk): new ones in memory only.
 */
int
bcd_node_key_and_csr(const char *dir, EVP_PKEY **key, unsigned char **csr, size_t *csr_len,
				 const char **what)
{
	char	   *key_path = dir != NULL ? bcd_path_join(dir, "node.key") : NULL;
	char	   *csr_path = dir != NULL ? bcd_path_join(dir, "node.csr.der") : NULL;
	char		err[256];
	bc_csr	   *req = NULL;
	int			rc = BC_ENOMEM;

	*key = NULL;
	*csr = NULL;
	if (dir == NULL)
	{
		/* bcd ramdisk: a key in memory only, never written anywhere. */
		*what = "cannot generate the node key";
		rc = BC_ECRYPTO;
		if ((*key = bc_p256_generate()) == NULL)
			goto out;
		*what = "cannot create the CSR";
		rc = bc_csr_create(*key, NULL, csr, csr_len);
		goto out;
	}
	if (key_path == NULL || csr_path == NULL)
		goto out;
	if (access(key_path, F_OK) == 0 && access(csr_path, F_OK) == 0)
	{
		*what = "cannot reuse DIR/node.key and DIR/node.csr.der";
		rc = BC_EINVAL;
		*key = read_node_key(key_path, err, sizeof(err));
		if (*key == NULL)
			goto out;
		rc = bcd_read_file(csr_path, BC_DER_MAX, (char **) csr, csr_len);
		if (rc == BC_OK)
			rc = bc_csr_parse(*csr, *csr_len, &req);
		if (rc == BC_OK && EVP_PKEY_eq(bc_csr_pubkey(req), *key) != 1)
			rc = BC_EINVAL;
		goto out;
	}
	*what = "cannot generate the node key";
	rc = BC_ECRYPTO;
	*key = bcd_tpm_keys_on() ? bcd_tpm_key_generate(err, sizeof(err)) : bc_p256_generate();
	if (*key == NULL)
	{
		if (bcd_tpm_keys_on())
			bcd_log("%s", err);
		goto out;
	}
	*what = "cannot write node.key";
	bcd_tpm_key_lock();
	rc = write_node_key(dir, *key);
	bcd_tpm_key_unlock();
	if (rc != BC_OK)
		goto out;
	*what = "cannot create the CSR";
	bcd_tpm_key_lock();
	rc = bc_csr_create(*key, NULL, csr, csr_len);
	bcd_tpm_key_unlock();
	if (rc != BC_OK)
		goto out;
	*what = "cannot write node.csr.der";
	rc = bcd_write_file_atomic(dir, "node.csr.der", *csr, *csr_len, 0644);
out:
	if (rc != BC_OK)
	{
		bcd_node_key_free(*key);
		*key = NULL;
		free(*csr);
		*csr = NULL;
	}
	bc_csr_free(req);
	free(key_path);
	free(csr_path);
	return rc;
}

