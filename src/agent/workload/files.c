/*
 * files.c: files mode (docs/agent.md, "Files mode"): for software that reads
 * its certificate from files (nginx, HAProxy, PostgreSQL), as spiffe-helper
 * does, bcd keeps a session identity's X509-SVID in a directory and runs a
 * reload command after each change.
 *
 *   --svid-files 'DIR=>session=S[,context=C][,federates=TD[+TD...]]'
 *                                                (16 at most, each DIR once)
 *   --svid-files-reload 'DIR=EXECUTABLE'         (no arguments)
 *
 * DIR holds svid.pem (the leaf and its intermediates, no root; 0644),
 * svid_key.pem (PKCS#8 PEM; 0600), svid_bundle.pem (the roots of bcd's own
 * trust domain only; 0644) and, once bcd holds the node CA's CRL, crl.pem
 * (0644).  With federates= (parsed as a --workload-rule's target is), each
 * of those federated trust domains whose bundle bcd holds with x509-svid
 * roots gets DIR/federated/<td>.pem (0644), its roots alone: never merged
 * into svid_bundle.pem nor with another domain's (the domains are those
 * wl_trust_domains_of gives, as SDS serves them).  Each is rewritten when
 * the bundles' generation changes its content; a file of a domain that
 * left the set, or whose bundle is now empty, is removed; the reload runs
 * once after the change.  A trust domain becomes a file name only when it
 * is DNS-like (labels of a-z 0-9 - _ joined by single dots, 200 bytes at
 * most: no '/', no "..", no leading dot).
 *
 * The identity is one of the Workload API's (x509_svids.c): held with a
 * stream's count (streams++) from the start, so it is provisioned, renewed
 * at half life and again at once when the CRL lists it, exactly as for a
 * FetchX509SVID stream; the proof's caller is bcd itself (as a hook is the
 * caller of its own session).
 *
 * A local attacker.  DIR is opened once at start, walked from / one
 * component at a time (O_PATH | O_NOFOLLOW, a symbolic link followed only
 * from a directory already checked: bcd_exec_open_checked_dir): it must be
 * owned by bcd's uid, and it and every directory above it owned by root or
 * bcd's uid and writable by neither group nor others (so no other uid can
 * create, link or swap a name in it or on the way to it);
 * every write is relative to that descriptor: a new file made O_CREAT |
 * O_EXCL | O_NOFOLLOW under a random name, written, fsync()ed and renamed
 * over its name (renameat replaces a symbolic link planted there, never
 * follows it); key first, then the certificate, then the bundle (and the
 * CRL), then the directory fsync()ed.  DIR/federated is made (mkdirat) and
 * opened relative to DIR's descriptor (O_DIRECTORY | O_NOFOLLOW: a link
 * there is refused), must be owned by bcd's uid and writable by neither
 * group nor others, and its files are written the same way relative to
 * its descriptor.  A path swapped for another directory or a link after
 * the start changes nothing: bcd holds the directory it checked.  EXECUTABLE is opened and checked as --producer's is
 * (bcd_exec_open_checked: it and every directory above it owned by root or
 * bcd's user and writable by neither group nor others) and that descriptor
 * is what runs (fexecve through core/child.c), with a clean environment,
 * cwd /, killed with its process group after 30 s; its output (2 KiB) goes
 * to the log.
 *
 * While the node is quarantined or revoked (the Workload API then ends its
 * streams of secrets), svid_key.pem and svid.pem are removed, and written
 * again once an SVID may go.
 *
 * One thread of its own writes and reloads, outside the Workload API's
 * mutex (taken only to copy what changed), so a slow reload never holds up
 * a call.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "bc_common.h"
#include "core/child.h"
#include "core/clock.h"
#include "core/delivery.h"
#include "core/log.h"
#include "core/peer.h"
#include "core/reload.h"
#include "producers/exec.h"
#include "workload/files.h"
#include "workload/internal.h"

/* The names in DIR. */
#define FILE_CERT "svid.pem"
#define FILE_KEY "svid_key.pem"
#define FILE_BUNDLE "svid_bundle.pem"
#define FILE_CRL "crl.pem"
/* The federated trust domains' subdirectory, its files' suffix, the longest td named so. */
#define FED_DIR "federated"
#define FED_SUFFIX ".pem"
#define FED_NAME_MAX 200

/* The writer's poll (ms), and its wait after a failed write (s). */
#define FILES_POLL_MS 200
#define FILES_RETRY 5.0

/* One --svid-files directory. */
typedef struct files_dir
{
	char	   *path;			/* DIR as given, without trailing '/' */
	int			dirfd;			/* DIR, opened and checked at start */
	char	   *reload;			/* --svid-files-reload's EXECUTABLE, or NULL */
	int			reload_fd;		/* its descriptor as checked, or -1 */
	wl_identity *id;
	unsigned long written_gen;	/* the identity's SVID last written (0: none) */
	unsigned long written_crl;	/* the CRL generation last written */
	double		next_try;		/* monotonic: after a failed write */
	int			withdrawn;		/* the key and certificate removed (a refusal) */
	char		federates[BCD_WL_FEDERATES_LEN];	/* federates= ("td+td...", "" for none) */
	int			fedfd;			/* DIR/federated, or -1 (none: no federates=, none there) */
	int			fed_taken;		/* fed_gen is the generation written */
	unsigned long fed_gen;		/* the federated bundles' generation last written */
	char	   *fed_text;		/* what DIR/federated holds: "td\nPEM" of each, or NULL */
	size_t		fed_len;
} files_dir;

/* Files mode of a Workload API server. */
struct bcd_wl_files
{
	files_dir	dirs[BCD_SVID_FILES_MAX];
	int			n;
	bcd_workload *w;
	pthread_t	thread;
	int			running;
	atomic_int	stopping;
};

/* DIR of a "DIR=>..." or "DIR=..." argument: its length without trailing '/', 0 when bad. */
static size_t
dir_len(const char *arg, const char *end)
{
	size_t		n = (size_t) (end - arg);

	while (n > 1 && arg[n - 1] == '/')
		n--;
	return arg[0] == '/' ? n : 0;
}

/*
 * 1 when trust domain td may become a file name in DIR/federated: DNS-like
 * (labels of a-z 0-9 - _ joined by single dots), FED_NAME_MAX bytes at
 * most; so no '/', no "..", no leading dot.
 */
static int
fed_name_ok(const char *td, size_t n)
{
	if (n == 0 || n > FED_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
	{
		char		c = td[i];

		if (c == '.')
		{
			if (i == 0 || i + 1 == n || td[i + 1] == '.')
				return 0;
		}
		else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return 0;
	}
	return 1;
}

/* NULL when every trust domain of federates ("td+td...") may become a file name, else the first. */
static const char *
fed_names_check(const char *federates, size_t *len)
{
	for (const char *p = federates; *p != '\0';)
	{
		const char *plus = strchr(p, '+');

		*len = plus != NULL ? (size_t) (plus - p) : strlen(p);
		if (!fed_name_ok(p, *len))
			return p;
		if (plus == NULL)
			break;
		p = plus + 1;
	}
	return NULL;
}

/* --svid-files and --svid-files-reload as given: NULL, or what is wrong (files.h). */
const char *
bcd_wl_files_check(const char *const *files, int n_files, const char *const *reloads,
				   int n_reloads)
{
	static char why[512];
	char		session[BC_SELECTOR_MAX + 1];
	char		context[BC_SELECTOR_MAX + 1];
	char		federates[BCD_WL_FEDERATES_LEN];
	char		err[256];

	if (n_files > BCD_SVID_FILES_MAX || n_reloads > BCD_SVID_FILES_MAX)
		return "--svid-files and --svid-files-reload: 16 at most";
	for (int i = 0; i < n_files; i++)
	{
		const char *arrow = strstr(files[i], "=>");
		size_t		n = arrow != NULL ? dir_len(files[i], arrow) : 0;
		const char *bad;
		size_t		bad_len;

		if (n == 0)
			return "--svid-files is 'DIR=>session=S[,context=C][,federates=TD[+TD...]]', "
				"DIR an absolute path";
		if (bcd_wl_target_parse_fed(arrow + 2, session, context, federates, err,
									sizeof(err)) != 0)
		{
			snprintf(why, sizeof(why), "--svid-files %s: %s", files[i], err);
			return why;
		}
		if ((bad = fed_names_check(federates, &bad_len)) != NULL)
		{
			snprintf(why, sizeof(why), "--svid-files %s: federates=: '%.*s' cannot name a file "
					 "in DIR/" FED_DIR " (labels of a-z 0-9 - _ joined by single dots, %d bytes "
					 "at most)", files[i], (int) bad_len, bad, FED_NAME_MAX);
			return why;
		}
		for (int j = 0; j < i; j++)
			if (dir_len(files[j], strstr(files[j], "=>")) == n &&
				strncmp(files[j], files[i], n) == 0)
				return "--svid-files names the same DIR twice";
	}
	for (int i = 0; i < n_reloads; i++)
	{
		const char *eq = strchr(reloads[i], '=');
		size_t		n = eq != NULL && eq[1] == '/' ? dir_len(reloads[i], eq) : 0;
		int			found = 0;

		if (n == 0)
			return "--svid-files-reload is 'DIR=/absolute/executable' (DIR without '=')";
		for (int j = 0; j < n_files; j++)
			if (dir_len(files[j], strstr(files[j], "=>")) == n &&
				strncmp(files[j], reloads[i], n) == 0)
				found = 1;
		if (!found)
			return "--svid-files-reload names a DIR no --svid-files names";
		for (int j = 0; j < i; j++)
		{
			const char *e2 = strchr(reloads[j], '=');

			if (dir_len(reloads[j], e2) == n && strncmp(reloads[j], reloads[i], n) == 0)
				return "--svid-files-reload names the same DIR twice";
		}
	}
	return NULL;
}

/*
 * Open DIR/federated relative to d's descriptor, made first (0755) when
 * make: O_DIRECTORY | O_NOFOLLOW (a link there is refused), owned by bcd's
 * uid, writable by neither group nor others.  Its descriptor; -1 with err,
 * err "" when !make and there is none.
 */
static int
open_fed_dir(files_dir *d, int make, char *err, size_t errlen)
{
	struct stat st;
	int			fd;

	err[0] = '\0';
	if (make && mkdirat(d->dirfd, FED_DIR, 0755) != 0 && errno != EEXIST)
	{
		snprintf(err, errlen, "--svid-files %s: cannot make %s/" FED_DIR ": %s", d->path,
				 d->path, strerror(errno));
		return -1;
	}
	fd = openat(d->dirfd, FED_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
	{
		if (!make && errno == ENOENT)
			return -1;
		snprintf(err, errlen, "--svid-files %s/" FED_DIR " cannot be opened as a directory "
				 "(a link is refused): %s", d->path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 022) != 0)
	{
		snprintf(err, errlen, "--svid-files %s/" FED_DIR " is refused: it must be owned by "
				 "bcd's uid %ld and writable by neither group nor others (uid %ld, mode %04o)",
				 d->path, (long) geteuid(), (long) st.st_uid, (unsigned) (st.st_mode & 07777));
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * Remove what an earlier bcd killed between a write and its rename left in
 * DIR: its temporary files (".NAME.tmp.*" of our four names; a key among
 * them).  Only regular files of bcd's uid are removed.
 */
static void
remove_leftovers(int dirfd, const char *path)
{
	static const char *const names[] = {FILE_KEY, FILE_CERT, FILE_BUNDLE, FILE_CRL};
	int			fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR		   *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	int			removed = 0;

	if (dir == NULL)
	{
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(dir)) != NULL)
	{
		struct stat st;
		int			ours = 0;

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		{
			size_t		n = strlen(names[i]);

			if (e->d_name[0] == '.' && strncmp(e->d_name + 1, names[i], n) == 0 &&
				strncmp(e->d_name + 1 + n, ".tmp.", 5) == 0)
				ours = 1;
		}
		if (ours && fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			S_ISREG(st.st_mode) && st.st_uid == geteuid() && unlinkat(dirfd, e->d_name, 0) == 0)
			removed++;
	}
	closedir(dir);
	if (removed > 0)
		bcd_log("files: %s: %d temporary file(s) an earlier bcd left removed", path, removed);
}

/* Free files mode (its thread stopped). */
void
bcd_wl_files_free(bcd_wl_files *f)
{
	if (f == NULL)
		return;
	for (int i = 0; i < f->n; i++)
	{
		if (f->dirs[i].dirfd >= 0)
			close(f->dirs[i].dirfd);
		if (f->dirs[i].reload_fd >= 0)
			close(f->dirs[i].reload_fd);
		if (f->dirs[i].fedfd >= 0)
			close(f->dirs[i].fedfd);
		free(f->dirs[i].fed_text);
		free(f->dirs[i].path);
		free(f->dirs[i].reload);
	}
	free(f);
}

/*
 * Files mode for w (files.h): every DIR opened and checked, every
 * EXECUTABLE opened and checked, every identity held (w->mu not needed:
 * nothing runs yet).  BC_OK with *out (NULL when no --svid-files), or
 * BC_EINVAL with err: bcd refuses to start.
 */
int
bcd_wl_files_start(bcd_workload *w, const bcd_run_opts *o, bcd_wl_files **out, char *err,
				   size_t errlen)
{
	const char *why = bcd_wl_files_check(o->svid_files, o->n_svid_files, o->svid_files_reload,
										 o->n_svid_files_reload);
	bcd_wl_files *f;
	bcd_peer	self;

	*out = NULL;
	if (why != NULL)
	{
		snprintf(err, errlen, "%s", why);
		return BC_EINVAL;
	}
	if (o->n_svid_files == 0)
		return BC_OK;
	if ((f = calloc(1, sizeof(*f))) == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return BC_ENOMEM;
	}
	f->w = w;
	/* the proofs' caller: bcd itself */
	memset(&self, 0, sizeof(self));
	self.pid = getpid();
	self.uid = geteuid();
	self.gid = getegid();
	bcd_peer_refresh(&self);
	for (int i = 0; i < o->n_svid_files; i++)
	{
		files_dir  *d = &f->dirs[f->n];
		const char *arrow = strstr(o->svid_files[i], "=>");
		size_t		n = dir_len(o->svid_files[i], arrow);
		char		session[BC_SELECTOR_MAX + 1];
		char		context[BC_SELECTOR_MAX + 1];
		char		e[768];

		d->dirfd = d->reload_fd = d->fedfd = -1;
		f->n++;
		if ((d->path = strndup(o->svid_files[i], n)) == NULL)
		{
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		(void) bcd_wl_target_parse_fed(arrow + 2, session, context, d->federates, e, sizeof(e));
		if (bcd_wl_federates_has(d->federates, w->trust_domain))
		{
			snprintf(err, errlen, "--svid-files %s: federates= names bcd's own trust domain %s "
					 "(its bundle is svid_bundle.pem)", d->path, w->trust_domain);
			goto fail;
		}
		if ((d->dirfd = bcd_delivery_open_checked("--svid-files", d->path, err, errlen)) < 0)
			goto fail;
		remove_leftovers(d->dirfd, d->path);
		/* federated/: made for federates=; without, only its old files removed (if any) */
		d->fedfd = open_fed_dir(d, d->federates[0] != '\0', e, sizeof(e));
		if (d->fedfd < 0 && d->federates[0] != '\0')
		{
			snprintf(err, errlen, "%s", e);
			goto fail;
		}
		if (d->fedfd < 0 && e[0] != '\0')
			bcd_log("files: %s; left as it is", e);
		for (int j = 0; j < i; j++)
		{
			struct stat a;
			struct stat b;

			if (fstat(d->dirfd, &a) == 0 && fstat(f->dirs[j].dirfd, &b) == 0 &&
				a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			{
				snprintf(err, errlen, "--svid-files %s and %s are the same directory", d->path,
						 f->dirs[j].path);
				goto fail;
			}
		}
		for (int j = 0; j < o->n_svid_files_reload; j++)
		{
			const char *r = o->svid_files_reload[j];
			const char *eq = strchr(r, '=');

			if (dir_len(r, eq) != n || strncmp(r, d->path, n) != 0)
				continue;
			if ((d->reload = strdup(eq + 1)) == NULL)
			{
				snprintf(err, errlen, "out of memory");
				goto fail;
			}
			if ((d->reload_fd = bcd_exec_open_checked("--svid-files-reload", d->reload, err,
													  errlen)) < 0)
				goto fail;
		}
		d->id = wl_identity_get(w, session, context, &self);
		if (d->id == NULL)
		{
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		d->id->streams++;		/* held for good: provisioned and renewed */
		bcd_log("files: %s: session %s%s%s%s%s, reload %s", d->path, session,
				context[0] ? " context " : "", context,
				d->federates[0] ? ", federates " : "", d->federates,
				d->reload != NULL ? d->reload : "none");
	}
	*out = f;
	return BC_OK;
fail:
	bcd_wl_files_free(f);
	return BC_EINVAL;
}

/* PEM of the DER certificates der[0..len) concatenated, into bio; 0 or -1. */
static int
certs_pem(BIO *bio, const unsigned char *der, size_t len)
{
	const unsigned char *p = der;
	const unsigned char *end = der + len;

	while (p < end)
	{
		X509	   *x = d2i_X509(NULL, &p, (long) (end - p));
		int			ok = x != NULL && PEM_write_bio_X509(bio, x) == 1;

		X509_free(x);
		if (!ok)
			return -1;
	}
	return len > 0 ? 0 : -1;
}

/* The text of a memory BIO as (*data, *len) (owned by the BIO). */
static void
bio_text(BIO *bio, const char **data, size_t *len)
{
	char	   *p = NULL;
	long		n = BIO_get_mem_data(bio, &p);

	*data = p;
	*len = n > 0 ? (size_t) n : 0;
}

/* What one write takes from the identity and w (under w->mu), as PEM. */
typedef struct files_snap
{
	BIO		   *cert;
	BIO		   *key;
	BIO		   *bundle;
	BIO		   *crl;			/* NULL: no CRL held */
	unsigned long gen;
	unsigned long crl_gen;
} files_snap;

/* Free a snapshot (the key's memory wiped). */
static void
snap_free(files_snap *s)
{
	if (s->key != NULL)
	{
		const char *data;
		size_t		len;

		bio_text(s->key, &data, &len);
		OPENSSL_cleanse((void *) data, len);
	}
	BIO_free(s->cert);
	BIO_free(s->key);
	BIO_free(s->bundle);
	BIO_free(s->crl);
	memset(s, 0, sizeof(*s));
}

/*
 * Under w->mu: when d's identity has an SVID (not listed on the CRL) that
 * differs from the one written, or the CRL changed, a snapshot in PEM: 1;
 * 0 when nothing changed; -1 when it cannot be made.
 */
static int
snap_take(bcd_workload *w, files_dir *d, files_snap *s)
{
	wl_identity *id = d->id;
	const unsigned char *p;
	PKCS8_PRIV_KEY_INFO *p8;
	int			ok;

	memset(s, 0, sizeof(*s));
	if (id->gen == 0 || id->listed || id->key == NULL ||
		(id->gen == d->written_gen && w->crl_gen == d->written_crl))
		return 0;
	s->gen = id->gen;
	s->crl_gen = w->crl_gen;
	s->cert = BIO_new(BIO_s_secmem());
	s->key = BIO_new(BIO_s_secmem());
	s->bundle = BIO_new(BIO_s_mem());
	if (s->cert == NULL || s->key == NULL || s->bundle == NULL)
		return -1;
	p = id->key;
	p8 = d2i_PKCS8_PRIV_KEY_INFO(NULL, &p, (long) id->key_len);
	ok = p8 != NULL && PEM_write_bio_PKCS8_PRIV_KEY_INFO(s->key, p8) == 1;
	PKCS8_PRIV_KEY_INFO_free(p8);
	if (!ok || certs_pem(s->cert, id->chain, id->chain_len) != 0 ||
		certs_pem(s->bundle, w->bundle, w->bundle_len) != 0)
		return -1;
	if (w->crl_parsed != NULL)
	{
		s->crl = BIO_new(BIO_s_mem());
		if (s->crl == NULL || PEM_write_bio_X509_CRL(s->crl, w->crl_parsed) != 1)
			return -1;
	}
	return 1;
}

/* What one write of DIR/federated takes (under w->mu): each allowed domain's roots as PEM. */
typedef struct fed_snap
{
	unsigned long gen;			/* the federated bundles' generation */
	int			n;
	char		name[BCD_WL_FEDERATES_MAX][FED_NAME_MAX + sizeof(FED_SUFFIX)];	/* "<td>.pem" */
	BIO		   *pem[BCD_WL_FEDERATES_MAX];
} fed_snap;

/* Free a federated snapshot. */
static void
fed_free(fed_snap *s)
{
	for (int i = 0; i < s->n; i++)
		BIO_free(s->pem[i]);
	memset(s, 0, sizeof(*s));
}

/*
 * Under w->mu: when d has DIR/federated and the federated bundles'
 * generation is not the one written, a snapshot of the domains d's
 * federates= may see (wl_trust_domains_of, bcd's own left out), those with
 * x509-svid roots only: 1; 0 when nothing changed; -1 when it cannot be
 * made.
 */
static int
fed_take(bcd_workload *w, files_dir *d, fed_snap *s)
{
	wl_trust_domain tds[WL_TRUST_DOMAINS_MAX];
	int			n;

	memset(s, 0, sizeof(*s));
	s->gen = w->fed != NULL ? w->fed->gen : 0;
	if (d->fedfd < 0 || (d->fed_taken && s->gen == d->fed_gen))
		return 0;
	n = wl_trust_domains_of(w, d->federates, tds, WL_TRUST_DOMAINS_MAX);
	for (int i = 0; i < n && s->n < BCD_WL_FEDERATES_MAX; i++)
	{
		size_t		len = strlen(tds[i].name);

		/* bcd's own is svid_bundle.pem; an empty bundle: no file */
		if (tds[i].own || tds[i].roots_len == 0 || !fed_name_ok(tds[i].name, len))
			continue;
		snprintf(s->name[s->n], sizeof(s->name[s->n]), "%s" FED_SUFFIX, tds[i].name);
		s->pem[s->n] = BIO_new(BIO_s_mem());
		s->n++;
		if (s->pem[s->n - 1] == NULL ||
			certs_pem(s->pem[s->n - 1], tds[i].roots, tds[i].roots_len) != 0)
			return -1;
	}
	return 1;
}

/* Write one file into fd, d's directory or its federated/ (mode); 0 or -1 (logged). */
static int
write_at(files_dir *d, int fd, const char *name, BIO *bio, mode_t mode)
{
	const char *data;
	size_t		len;
	char		err[512];

	bio_text(bio, &data, &len);
	if (bcd_delivery_write_file_mode(fd, name, data, len, mode, err, sizeof(err)) == BC_OK)
		return 0;
	bcd_log("files: %s%s: %s; retrying in %.0f s", d->path, fd == d->dirfd ? "" : "/" FED_DIR,
			err, FILES_RETRY);
	return -1;
}

/* Write one file of s into d (mode); 0 or -1 (logged). */
static int
write_one(files_dir *d, const char *name, BIO *bio, mode_t mode)
{
	return write_at(d, d->dirfd, name, bio, mode);
}

/*
 * Remove from DIR/federated every "*.pem" (and temporary ".*.pem.tmp.*")
 * that is not one of s's names: a domain that left the set, or whose
 * bundle is now empty, or a file an earlier bcd left.  Only regular files
 * and symbolic links (removed, never followed); their names into removed
 * (logged by the caller); how many.
 */
static int
fed_remove_stale(files_dir *d, const fed_snap *s, char *removed, size_t len)
{
	int			fd = openat(d->fedfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR		   *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	int			n = 0;

	removed[0] = '\0';
	if (dir == NULL)
	{
		if (fd >= 0)
			close(fd);
		return 0;
	}
	while ((e = readdir(dir)) != NULL)
	{
		size_t		nl = strlen(e->d_name);
		int			pem = nl > strlen(FED_SUFFIX) &&
			strcmp(e->d_name + nl - strlen(FED_SUFFIX), FED_SUFFIX) == 0;
		int			tmp = e->d_name[0] == '.' && strstr(e->d_name, FED_SUFFIX ".tmp.") != NULL;
		int			keep = 0;
		struct stat st;

		for (int i = 0; i < s->n; i++)
			if (strcmp(e->d_name, s->name[i]) == 0)
				keep = 1;
		if (keep || !(pem || tmp) ||
			fstatat(d->fedfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
			!(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) || unlinkat(d->fedfd, e->d_name, 0) != 0)
			continue;
		n++;
		if (strlen(removed) + nl + 3 < len)
			snprintf(removed + strlen(removed), len - strlen(removed), "%s%s", n > 1 ? ", " : "",
					 e->d_name);
	}
	closedir(dir);
	return n;
}

/*
 * Write s into DIR/federated: each file (as the others are), the stale
 * ones removed, the directory fsync()ed.  1 when what it holds changed, 0
 * when it already held exactly that, -1 when a write failed (logged).
 */
static int
fed_write(files_dir *d, const fed_snap *s)
{
	BIO		   *all = BIO_new(BIO_s_mem());
	const char *text;
	size_t		len;
	char		removed[512];
	char		written[512] = "";
	int			n_removed;
	int			rc = -1;

	if (all == NULL)
		return -1;
	for (int i = 0; i < s->n; i++)
	{
		const char *pem;
		size_t		plen;

		bio_text(s->pem[i], &pem, &plen);
		if (BIO_printf(all, "%s\n", s->name[i]) <= 0 ||
			BIO_write(all, pem, (int) plen) != (int) plen)
			goto out;
	}
	bio_text(all, &text, &len);
	if (d->fed_text != NULL && d->fed_len == len &&
		(len == 0 || memcmp(d->fed_text, text, len) == 0))
	{
		rc = 0;					/* another domain's bundle changed, not d's */
		goto out;
	}
	for (int i = 0; i < s->n; i++)
	{
		if (write_at(d, d->fedfd, s->name[i], s->pem[i], 0644) != 0)
			goto out;
		snprintf(written + strlen(written), sizeof(written) - strlen(written), "%s%s",
				 i > 0 ? ", " : "", s->name[i]);
	}
	n_removed = fed_remove_stale(d, s, removed, sizeof(removed));
	(void) fsync(d->fedfd);
	free(d->fed_text);
	d->fed_len = 0;
	if ((d->fed_text = malloc(len > 0 ? len : 1)) != NULL && len > 0)
	{
		memcpy(d->fed_text, text, len);
		d->fed_len = len;
	}
	bcd_log("files: %s/" FED_DIR ": %s written%s%s", d->path, s->n > 0 ? written : "nothing",
			n_removed > 0 ? "; removed: " : "", removed);
	rc = 1;
out:
	BIO_free(all);
	return rc;
}

/*
 * Run d's reload once (core/reload.c): environment BCD_SVID_DIR besides
 * PATH and LC_ALL; its exit and the start of its output logged.
 */
static void
run_reload(bcd_wl_files *f, files_dir *d)
{
	char		dirv[BCD_DIR_MAX + 16];
	char		prefix[BCD_DIR_MAX + 16];

	snprintf(dirv, sizeof(dirv), "BCD_SVID_DIR=%s", d->path);
	snprintf(prefix, sizeof(prefix), "files: %s", d->path);
	(void) bcd_reload_run(prefix, d->reload, d->reload_fd, dirv, &f->stopping);
}

/*
 * The node is quarantined or revoked (why): as the Workload API ends its
 * streams of secrets, d's key and certificate are removed (once), and
 * written again when a new SVID may go.  No reload: the service keeps what
 * it loaded until it reloads or restarts.
 */
static void
withdraw(files_dir *d, const char *why)
{
	int			key = unlinkat(d->dirfd, FILE_KEY, 0) == 0 || errno == ENOENT;
	int			cert = unlinkat(d->dirfd, FILE_CERT, 0) == 0 || errno == ENOENT;

	(void) fsync(d->dirfd);
	d->withdrawn = 1;
	d->written_gen = 0;
	d->written_crl = 0;
	bcd_log("files: %s: %s and %s %s: %s", d->path, FILE_KEY, FILE_CERT,
			key && cert ? "removed" : "could not all be removed", why);
}

/*
 * One round of d: a snapshot of what changed (under w->mu), written key,
 * certificate, bundle, CRL, the directory fsync()ed, then the reload; or,
 * while the node is refused anything, the key and certificate withdrawn.
 */
static void
files_round(bcd_wl_files *f, files_dir *d)
{
	files_snap	s;
	fed_snap	fs;
	int			got;
	int			fgot = 0;
	int			changed = 0;
	double		now = bcd_now_s();
	char		why[768];

	if (bcd_provisioner_refusal(f->w->prov, why, sizeof(why)) != BCD_REFUSAL_NONE)
	{
		if (!d->withdrawn)
			withdraw(d, why);
		return;
	}
	d->withdrawn = 0;
	if (now < d->next_try)
		return;
	pthread_mutex_lock(&f->w->mu);
	got = snap_take(f->w, d, &s);
	/* federated/ once the SVID's files are there (or are being written now) */
	if (got >= 0 && (got > 0 || d->written_gen != 0))
		fgot = fed_take(f->w, d, &fs);
	else
		memset(&fs, 0, sizeof(fs));
	pthread_mutex_unlock(&f->w->mu);
	if (got < 0 || fgot < 0)
	{
		bcd_log("files: %s: cannot encode the X509-SVID or a bundle (out of memory?); retrying",
				d->path);
		d->next_try = now + FILES_RETRY;
		goto out;
	}
	if (got > 0)
	{
		if (write_one(d, FILE_KEY, s.key, 0600) != 0 ||
			write_one(d, FILE_CERT, s.cert, 0644) != 0 ||
			write_one(d, FILE_BUNDLE, s.bundle, 0644) != 0 ||
			(s.crl != NULL && write_one(d, FILE_CRL, s.crl, 0644) != 0))
		{
			d->next_try = now + FILES_RETRY;
			goto out;
		}
		(void) fsync(d->dirfd);
		bcd_log("files: %s: %s written (SVID %lu%s)", d->path,
				d->written_gen != s.gen ? "a new X509-SVID" : "a new CRL", s.gen,
				s.crl != NULL ? ", with crl.pem" : "");
		d->written_gen = s.gen;
		d->written_crl = s.crl_gen;
		changed = 1;
	}
	if (fgot > 0)
	{
		int			rc = fed_write(d, &fs);

		if (rc < 0)
			d->next_try = now + FILES_RETRY;
		else
		{
			d->fed_taken = 1;
			d->fed_gen = fs.gen;
			changed |= rc;
		}
	}
	/* once, after every file of the change */
	if (changed && d->reload_fd >= 0)
		run_reload(f, d);
out:
	snap_free(&s);
	fed_free(&fs);
}

/* The writer's thread: every directory's round, every FILES_POLL_MS. */
static void *
files_main(void *arg)
{
	bcd_wl_files *f = arg;

	while (!atomic_load(&f->stopping))
	{
		struct timespec ts = {0, FILES_POLL_MS * 1000 * 1000};

		for (int i = 0; i < f->n && !atomic_load(&f->stopping); i++)
			files_round(f, &f->dirs[i]);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* Start its thread (files.h). */
void
bcd_wl_files_run(bcd_wl_files *f)
{
	if (f == NULL)
		return;
	if (pthread_create(&f->thread, NULL, files_main, f) != 0)
		bcd_log("files: cannot start its thread; no file is written");
	else
		f->running = 1;
}

/* Stop its thread (files.h). */
void
bcd_wl_files_stop(bcd_wl_files *f)
{
	if (f == NULL || !f->running)
		return;
	atomic_store(&f->stopping, 1);
	pthread_join(f->thread, NULL);
	f->running = 0;
}
