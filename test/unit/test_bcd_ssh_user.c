/*
 * test_bcd_ssh_user.c: a session's SSH user certificate in bcd
 * (docs/agent.md, "SSH"): what core/ssh_user.c takes from a verified
 * session answer (a user certificate of the session key with the serial
 * sshSerial states; anything else is no certificate, with the reason), and
 * how core/delivery.c writes it beside the .key (DIR/<s>[@<c>].key-cert.pub,
 * 0644; an old one removed even when the new credential has none).  Real
 * keys and certificates made by src/common (OpenSSL signs); the end-to-end
 * run with a real sshd is test/agent/ssh.t.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "bc_common.h"
#include "bc_ssh.h"
#include "core/delivery.h"
#include "core/job.h"
#include "core/outcome.h"
#include "core/ssh_user.h"

#define SERIAL 7204481920385672049ULL
#define COMMENT "spiffe://agent.test/node/n1/session/s1"

/* Keys shared by the tests: the user CA, the session key, another key. */
typedef struct fx
{
	EVP_PKEY   *ca;
	EVP_PKEY   *session;
	EVP_PKEY   *other;
	unsigned char *session_blob;
	size_t		session_len;
} fx;

/* Make the keys. */
static int
setup(void **state)
{
	fx		   *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	f->ca = bc_p256_generate();
	f->session = bc_p256_generate();
	f->other = bc_p256_generate();
	if (f->ca == NULL || f->session == NULL || f->other == NULL ||
		bc_ssh_pubkey_blob(f->session, &f->session_blob, &f->session_len) != BC_OK)
		return -1;
	*state = f;
	return 0;
}

/* Free them. */
static int
teardown(void **state)
{
	fx		   *f = *state;

	EVP_PKEY_free(f->ca);
	EVP_PKEY_free(f->session);
	EVP_PKEY_free(f->other);
	free(f->session_blob);
	free(f);
	return 0;
}

/* A certificate of type over key signed by the CA, serial SERIAL; malloc()ed. */
static unsigned char *
make_cert(fx *f, int type, EVP_PKEY *key, size_t *len)
{
	static const char *const principals[] = {"root"};
	unsigned char *blob = NULL;
	size_t		blob_len = 0;
	unsigned char *cert = NULL;
	bc_ssh_cert_params p;

	assert_int_equal(bc_ssh_pubkey_blob(key, &blob, &blob_len), BC_OK);
	memset(&p, 0, sizeof(p));
	p.type = type;
	p.key_blob = blob;
	p.key_blob_len = blob_len;
	p.serial = SERIAL;
	p.key_id = COMMENT;
	p.principals = principals;
	p.n_principals = 1;
	p.valid_after = (uint64_t) time(NULL) - 60;
	p.valid_before = (uint64_t) time(NULL) + 3600;
	if (type == BC_SSH_CERT_USER)
	{
		p.force_command = "echo forced";
		p.extensions = BC_SSH_EXT_PTY;
	}
	assert_int_equal(bc_ssh_cert_sign(&p, f->ca, &cert, len), BC_OK);
	free(blob);
	return cert;
}

/* Standard base64 of data (malloc()ed). */
static char *
b64(const unsigned char *data, size_t len)
{
	char	   *out = malloc(bc_b64_encoded_len(len) + 1);

	assert_non_null(out);
	bc_b64_encode(data, len, out);
	return out;
}

/* A payload as the service signs it: the session's members, then the SSH ones when given. */
static json_t *
payload_with(json_t *cert, json_t *serial)
{
	json_t	   *p = json_pack("{s:s, s:s}", "status", "issued", "sessionId", "s1");

	assert_non_null(p);
	if (cert != NULL)
		json_object_set_new(p, "sshCertificate", cert);
	if (serial != NULL)
		json_object_set_new(p, "sshSerial", serial);
	return p;
}

/* bcd_ssh_user_take on payload (taken) for key: its code; why must be set unless OK. */
static bcd_ssh_user_rc
take(json_t *payload, EVP_PKEY *key, char **line, char serial[21], char *why, size_t whylen)
{
	bcd_ssh_user_rc rc = bcd_ssh_user_take(payload, key, COMMENT, line, serial, why, whylen);

	json_decref(payload);
	if (rc != BCD_SSH_USER_OK)
	{
		assert_null(*line);
		assert_string_equal(serial, "");
		assert_true(why[0] != '\0');
	}
	return rc;
}

/* A user certificate of the session key with its serial: the .key-cert.pub line. */
static void
test_take_good(void **state)
{
	fx		   *f = *state;
	size_t		len = 0;
	unsigned char *cert = make_cert(f, BC_SSH_CERT_USER, f->session, &len);
	char	   *text = b64(cert, len);
	char	   *line = NULL;
	char		serial[21];
	char		why[256];
	char		want[64];
	unsigned char *blob = NULL;
	size_t		blob_len = 0;
	bc_ssh_cert_info info;

	snprintf(want, sizeof(want), "%llu", SERIAL);
	assert_int_equal(take(payload_with(json_string(text), json_string(want)), f->session, &line,
						  serial, why, sizeof(why)), BCD_SSH_USER_OK);
	assert_string_equal(serial, want);
	/* the line ssh-keygen writes: type, base64 of the blob, comment, newline */
	assert_true(strncmp(line, "ecdsa-sha2-nistp256-cert-v01@openssh.com ", 41) == 0);
	assert_true(strncmp(line + 41, text, strlen(text)) == 0);
	assert_string_equal(line + 41 + strlen(text), " " COMMENT "\n");
	/* and it reads back as the same certificate of the session key */
	assert_int_equal(bc_ssh_pubkey_line_parse(line, strlen(line), &blob, &blob_len), BC_OK);
	assert_int_equal(blob_len, len);
	assert_memory_equal(blob, cert, len);
	assert_int_equal(bc_ssh_cert_parse(blob, blob_len, &info), BC_OK);
	assert_int_equal(info.key_blob_len, f->session_len);
	assert_memory_equal(info.key_blob, f->session_blob, f->session_len);
	bc_ssh_cert_info_free(&info);
	free(blob);
	free(line);
	free(text);
	free(cert);
}

/* No SSH member: none issued (NONE, the reason names the event); never a line. */
static void
test_take_none(void **state)
{
	fx		   *f = *state;
	char	   *line = NULL;
	char		serial[21];
	char		why[256];

	assert_int_equal(take(payload_with(NULL, NULL), f->session, &line, serial, why,
						  sizeof(why)), BCD_SSH_USER_NONE);
	assert_non_null(strstr(why, "ssh.user.refused"));
}

/* Everything else is refused (BAD, with the reason): the answer checks. */
static void
test_take_refused(void **state)
{
	fx		   *f = *state;
	size_t		len = 0;
	size_t		hlen = 0;
	size_t		olen = 0;
	unsigned char *cert = make_cert(f, BC_SSH_CERT_USER, f->session, &len);
	unsigned char *host = make_cert(f, BC_SSH_CERT_HOST, f->session, &hlen);
	unsigned char *other = make_cert(f, BC_SSH_CERT_USER, f->other, &olen);
	char	   *text = b64(cert, len);
	char	   *htext = b64(host, hlen);
	char	   *otext = b64(other, olen);
	char	   *short_text = b64(cert, len - 1);
	char	   *big;
	char	   *line = NULL;
	char		serial[21];
	char		why[256];
	char		want[64];
	size_t		big_len = bc_b64_encoded_len(BC_SSH_CERT_MAX) + 4;

	snprintf(want, sizeof(want), "%llu", SERIAL);
#define REFUSED(cert_, serial_, key_, needle) \
	do { \
		assert_int_equal(take(payload_with(cert_, serial_), key_, &line, serial, why, \
							  sizeof(why)), BCD_SSH_USER_BAD); \
		assert_non_null(strstr(why, needle)); \
	} while (0)
	/* one member without the other, or not strings */
	REFUSED(json_string(text), NULL, f->session, "both strings");
	REFUSED(NULL, json_string(want), f->session, "both strings");
	REFUSED(json_string(text), json_integer(7), f->session, "both strings");
	REFUSED(json_true(), json_string(want), f->session, "both strings");
	/* a host certificate of the same key */
	REFUSED(json_string(htext), json_string(want), f->session, "host certificate");
	/* a user certificate of another key (the service's or the gateway's mix-up) */
	REFUSED(json_string(otext), json_string(want), f->session, "another key");
	/* and of our key, when bcd holds another session key */
	REFUSED(json_string(text), json_string(want), f->other, "another key");
	/* a serial that is not the certificate's (another, leading zero, sign) */
	REFUSED(json_string(text), json_string("7204481920385672048"), f->session, "serial");
	REFUSED(json_string(text), json_string("07204481920385672049"), f->session, "serial");
	REFUSED(json_string(text), json_string("+7204481920385672049"), f->session, "serial");
	REFUSED(json_string(text), json_string(""), f->session, "serial");
	/* not base64, truncated by one byte, empty, over BC_SSH_CERT_MAX */
	REFUSED(json_string("not base64!"), json_string(want), f->session, "not base64");
	REFUSED(json_string(short_text), json_string(want), f->session, "not an OpenSSH certificate");
	REFUSED(json_string(""), json_string(want), f->session, "not an OpenSSH certificate");
	big = malloc(big_len + 1);
	assert_non_null(big);
	memset(big, 'A', big_len);
	big[big_len] = '\0';
	REFUSED(json_string(big), json_string(want), f->session, "over");
#undef REFUSED
	free(big);
	free(short_text);
	free(otext);
	free(htext);
	free(text);
	free(other);
	free(host);
	free(cert);
}

/* A finished session job as delivery sees it: key, chain, and the SSH line when given. */
static bcd_job *
job_of(const char *session, const char *context, const char *key, const char *ssh_line)
{
	bcd_job    *job = bcd_job_new(BCD_JOB_SESSION, session, context, NULL, NULL);

	assert_non_null(job);
	job->key_pem = strdup(key);
	job->key_len = strlen(key);
	job->chain_pem = strdup("CHAIN\n");
	job->chain_len = 6;
	job->ssh_cert = ssh_line != NULL ? strdup(ssh_line) : NULL;
	return job;
}

/* The content of dir/name (malloc()ed) and its mode; NULL when it does not exist. */
static char *
read_in(const char *dir, const char *name, mode_t *mode)
{
	char		path[512];
	struct stat st;
	FILE	   *fp;
	char	   *buf;
	size_t		n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (lstat(path, &st) != 0)
		return NULL;
	*mode = st.st_mode & 07777;
	buf = calloc(1, (size_t) st.st_size + 1);
	fp = fopen(path, "r");
	assert_non_null(buf);
	assert_non_null(fp);
	n = fread(buf, 1, (size_t) st.st_size, fp);
	assert_int_equal(n, (size_t) st.st_size);
	fclose(fp);
	return buf;
}

/* Count the entries of dir (temporary files left behind would show). */
static int
entries(const char *dir)
{
	char		cmd[600];
	FILE	   *p;
	int			n = -1;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
	p = popen(cmd, "r");
	assert_non_null(p);
	assert_int_equal(fscanf(p, "%d", &n), 1);
	pclose(p);
	return n;
}

/*
 * Delivery: the .key-cert.pub beside the .key (0644, the line as given),
 * its path answered; a later credential without one removes the old one
 * (it certifies the old key); the paths only with dirfd -1; a context's name.
 */
static void
test_delivery(void **state)
{
	char		dir[] = "/tmp/bcd-ssh-user-XXXXXX";
	int			dirfd;
	bcd_job    *job;
	char	   *key_path,
			   *cert_path,
			   *ssh_path;
	char		err[512];
	char	   *text;
	mode_t		mode = 0;
	char		want[600];

	(void) state;
	assert_non_null(mkdtemp(dir));
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dirfd >= 0);

	/* with an SSH certificate */
	job = job_of("s1", "", "KEY1\n", "ecdsa-sha2-nistp256-cert-v01@openssh.com AAAA c1\n");
	assert_int_equal(bcd_delivery_write(dirfd, dir, job, &key_path, &cert_path, &ssh_path, err,
										sizeof(err)), BC_OK);
	snprintf(want, sizeof(want), "%s/s1.key-cert.pub", dir);
	assert_non_null(ssh_path);
	assert_string_equal(ssh_path, want);
	text = read_in(dir, "s1.key-cert.pub", &mode);
	assert_non_null(text);
	assert_string_equal(text, "ecdsa-sha2-nistp256-cert-v01@openssh.com AAAA c1\n");
	assert_int_equal(mode, 0644);
	free(text);
	text = read_in(dir, "s1.key", &mode);
	assert_string_equal(text, "KEY1\n");
	assert_int_equal(mode, 0600);
	free(text);
	text = read_in(dir, "s1.crt", &mode);
	assert_string_equal(text, "CHAIN\n");
	assert_int_equal(mode, 0600);
	free(text);
	assert_int_equal(entries(dir), 3);
	free(key_path);
	free(cert_path);
	free(ssh_path);

	/* the same job into a directory written already: the paths only */
	assert_int_equal(bcd_delivery_write(-1, dir, job, &key_path, &cert_path, &ssh_path, err,
										sizeof(err)), BC_OK);
	assert_string_equal(ssh_path, want);
	free(key_path);
	free(cert_path);
	free(ssh_path);
	bcd_job_release(job);

	/* a new credential without one: the old certificate goes with the old key */
	job = job_of("s1", "", "KEY2\n", NULL);
	assert_int_equal(bcd_delivery_write(dirfd, dir, job, &key_path, &cert_path, &ssh_path, err,
										sizeof(err)), BC_OK);
	assert_null(ssh_path);
	assert_null(read_in(dir, "s1.key-cert.pub", &mode));
	text = read_in(dir, "s1.key", &mode);
	assert_string_equal(text, "KEY2\n");
	free(text);
	assert_int_equal(entries(dir), 2);
	free(key_path);
	free(cert_path);
	bcd_job_release(job);

	/* a context: <s>@<c>.key-cert.pub */
	job = job_of("s1", "c1", "KEY3\n", "ssh-ed25519-cert-v01@openssh.com BBBB\n");
	assert_int_equal(bcd_delivery_write(dirfd, dir, job, &key_path, &cert_path, &ssh_path, err,
										sizeof(err)), BC_OK);
	snprintf(want, sizeof(want), "%s/s1@c1.key-cert.pub", dir);
	assert_string_equal(ssh_path, want);
	text = read_in(dir, "s1@c1.key-cert.pub", &mode);
	assert_string_equal(text, "ssh-ed25519-cert-v01@openssh.com BBBB\n");
	free(text);
	assert_int_equal(entries(dir), 5);
	free(key_path);
	free(cert_path);
	free(ssh_path);
	bcd_job_release(job);

	close(dirfd);
	snprintf(want, sizeof(want), "rm -rf '%s'", dir);
	assert_int_equal(system(want), 0);
}

/* The socket word of the new code, and that a hook's exit status for it is 77. */
static void
test_code(void **state)
{
	(void) state;
	assert_string_equal(bcd_code_name(BCD_CODE_NO_SSH_CERTIFICATE), "no-ssh-certificate");
	assert_int_equal(bcd_code_retryable(BCD_CODE_NO_SSH_CERTIFICATE), 0);
	assert_int_equal(bcd_exit_status(bcd_socket_word_rc("no-ssh-certificate", 0)), 77);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_good),
		cmocka_unit_test(test_take_none),
		cmocka_unit_test(test_take_refused),
		cmocka_unit_test(test_delivery),
		cmocka_unit_test(test_code),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
