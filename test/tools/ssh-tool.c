/*
 * ssh-tool: a small command line over src/common/ssh.c for the interop test
 * test/tap/ssh_codec.t (checked by the real ssh-keygen).  Test-only.
 *
 *   ssh-tool cert --ca KEY.pem --pub FILE.pub --type host|user --serial N --id ID
 *            --principal P... [--force-command C] [--source-address A] [--ext NAME...]
 *            --valid-after T --valid-before T          (prints the -cert.pub line)
 *   ssh-tool krl --version V [--generated T] --ca CA.pub:SERIAL,... ... > KRL
 *   ssh-tool parse CERTFILE                            (bc_ssh_cert_info as JSON)
 *   ssh-tool fingerprint FILE.pub                      (as ssh-keygen -l)
 *   ssh-tool pubkey KEY.pem                            (the key's .pub line)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/pem.h>

#include "bc_common.h"
#include "bc_ssh.h"

/* Print usage and return 2. */
static int
usage(void)
{
	fputs("usage:\n"
		  "  ssh-tool cert --ca KEY.pem --pub FILE.pub --type host|user --serial N --id ID\n"
		  "           --principal P... [--force-command C] [--source-address A] [--ext NAME...]\n"
		  "           --valid-after T --valid-before T\n"
		  "  ssh-tool krl --version V [--generated T] [--comment C] --ca CA.pub:SERIAL,... > krl\n"
		  "  ssh-tool parse CERTFILE\n"
		  "  ssh-tool fingerprint FILE.pub\n"
		  "  ssh-tool pubkey KEY.pem\n"
		  "Exit status: 0 success, 1 failure, 2 usage.\n", stderr);
	return 2;
}

/* The first line of path as a blob (bc_ssh_pubkey_line_parse), or exit 1. */
static unsigned char *
read_line_blob(const char *path, size_t *len)
{
	FILE	   *f = fopen(path, "r");
	static char buf[4 * BC_SSH_CERT_MAX + 2];
	unsigned char *blob = NULL;
	int			rc;

	if (f == NULL || fgets(buf, sizeof(buf), f) == NULL)
	{
		fprintf(stderr, "ssh-tool: cannot read %s\n", path);
		exit(1);
	}
	fclose(f);
	rc = bc_ssh_pubkey_line_parse(buf, strlen(buf), &blob, len);
	if (rc != BC_OK)
	{
		fprintf(stderr, "ssh-tool: %s: not an SSH key line (%d)\n", path, rc);
		exit(1);
	}
	return blob;
}

/* A decimal uint64 or exit 2. */
static uint64_t
num(const char *s)
{
	char	   *end;
	unsigned long long v;

	v = strtoull(s, &end, 10);
	if (*s == '\0' || *end != '\0')
	{
		fprintf(stderr, "ssh-tool: not a number: %s\n", s);
		exit(2);
	}
	return (uint64_t) v;
}

/* ssh-tool cert ... */
static int
cmd_cert(int argc, char **argv)
{
	bc_ssh_cert_params p = {0};
	const char *principals[BC_SSH_PRINCIPALS_MAX + 1];
	const char *ca_path = NULL,
			   *pub_path = NULL;
	size_t		n_pr = 0;
	char		err[256];
	EVP_PKEY   *ca;
	unsigned char *cert;
	size_t		len;
	char	   *line;
	int			rc;

	for (int i = 0; i < argc; i++)
	{
		const char *a = argv[i],
				   *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (v == NULL)
			return usage();
		i++;
		if (strcmp(a, "--ca") == 0)
			ca_path = v;
		else if (strcmp(a, "--pub") == 0)
			pub_path = v;
		else if (strcmp(a, "--type") == 0)
			p.type = strcmp(v, "host") == 0 ? BC_SSH_CERT_HOST : strcmp(v, "user") == 0 ? BC_SSH_CERT_USER : 0;
		else if (strcmp(a, "--serial") == 0)
			p.serial = num(v);
		else if (strcmp(a, "--id") == 0)
			p.key_id = v;
		else if (strcmp(a, "--principal") == 0 && n_pr < BC_SSH_PRINCIPALS_MAX + 1)
			principals[n_pr++] = v;
		else if (strcmp(a, "--force-command") == 0)
			p.force_command = v;
		else if (strcmp(a, "--source-address") == 0)
			p.source_address = v;
		else if (strcmp(a, "--ext") == 0)
		{
			if (strcmp(v, "permit-X11-forwarding") == 0)
				p.extensions |= BC_SSH_EXT_X11;
			else if (strcmp(v, "permit-agent-forwarding") == 0)
				p.extensions |= BC_SSH_EXT_AGENT;
			else if (strcmp(v, "permit-port-forwarding") == 0)
				p.extensions |= BC_SSH_EXT_PORT;
			else if (strcmp(v, "permit-pty") == 0)
				p.extensions |= BC_SSH_EXT_PTY;
			else if (strcmp(v, "permit-user-rc") == 0)
				p.extensions |= BC_SSH_EXT_USER_RC;
			else
				return usage();
		}
		else if (strcmp(a, "--valid-after") == 0)
			p.valid_after = num(v);
		else if (strcmp(a, "--valid-before") == 0)
			p.valid_before = num(v);
		else
			return usage();
	}
	if (ca_path == NULL || pub_path == NULL)
		return usage();
	p.principals = principals;
	p.n_principals = n_pr;
	ca = bc_pkey_read_pem_file(ca_path, 1, err, sizeof(err));
	if (ca == NULL)
	{
		fprintf(stderr, "ssh-tool: cannot load the CA key %s: %s\n", ca_path, err);
		return 1;
	}
	p.key_blob = read_line_blob(pub_path, &p.key_blob_len);
	rc = bc_ssh_cert_sign(&p, ca, &cert, &len);
	EVP_PKEY_free(ca);
	free((void *) p.key_blob);
	if (rc != BC_OK)
	{
		fprintf(stderr, "ssh-tool: bc_ssh_cert_sign: %d\n", rc);
		return 1;
	}
	line = bc_ssh_pubkey_line(cert, len, p.key_id);
	free(cert);
	if (line == NULL)
		return 1;
	fputs(line, stdout);
	free(line);
	return 0;
}

/* ssh-tool krl --version V [--generated T] [--comment C] --ca CA.pub:S,S ... */
static int
cmd_krl(int argc, char **argv)
{
	bc_ssh_krl_ca cas[8] = {{0}};
	uint64_t	serials[8][64];
	unsigned char *blobs[8] = {0};
	size_t		n = 0;
	uint64_t	version = 0,
				generated = 0;
	const char *comment = NULL;
	unsigned char *krl;
	size_t		len;
	int			rc;

	for (int i = 0; i + 1 < argc; i += 2)
	{
		if (strcmp(argv[i], "--version") == 0)
			version = num(argv[i + 1]);
		else if (strcmp(argv[i], "--generated") == 0)
			generated = num(argv[i + 1]);
		else if (strcmp(argv[i], "--comment") == 0)
			comment = argv[i + 1];
		else if (strcmp(argv[i], "--ca") == 0 && n < 8)
		{
			char	   *spec = strdup(argv[i + 1]);
			char	   *colon = strrchr(spec, ':');
			char	   *tok;
			size_t		k = 0;

			if (colon == NULL)
				return usage();
			*colon = '\0';
			blobs[n] = read_line_blob(spec, &cas[n].ca_blob_len);
			cas[n].ca_blob = blobs[n];
			for (tok = strtok(colon + 1, ","); tok && k < 64; tok = strtok(NULL, ","))
				serials[n][k++] = num(tok);
			cas[n].serials = serials[n];
			cas[n].n_serials = k;
			n++;
			free(spec);
		}
		else
			return usage();
	}
	if (argc % 2)
		return usage();
	rc = bc_ssh_krl_build(version, generated, comment, cas, n, &krl, &len);
	for (size_t i = 0; i < n; i++)
		free(blobs[i]);
	if (rc != BC_OK)
	{
		fprintf(stderr, "ssh-tool: bc_ssh_krl_build: %d\n", rc);
		return 1;
	}
	fwrite(krl, 1, len, stdout);
	free(krl);
	return 0;
}

/* ssh-tool parse CERTFILE */
static int
cmd_parse(const char *path)
{
	size_t		len;
	unsigned char *blob = read_line_blob(path, &len);
	bc_ssh_cert_info info;
	json_t	   *o,
			   *pr;
	char		fp[64],
				cafp[64];
	char	   *s;
	int			rc = bc_ssh_cert_parse(blob, len, &info);

	if (rc != BC_OK)
	{
		fprintf(stderr, "ssh-tool: bc_ssh_cert_parse: %d\n", rc);
		free(blob);
		return 1;
	}
	pr = json_array();
	for (size_t i = 0; i < info.n_principals; i++)
		json_array_append_new(pr, json_string(info.principals[i]));
	bc_ssh_fingerprint(info.key_blob, info.key_blob_len, fp);
	bc_ssh_fingerprint(info.ca_blob, info.ca_blob_len, cafp);
	o = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:s}",
				  "type", info.type == BC_SSH_CERT_HOST ? "host" : "user",
				  "serial", "", "keyId", info.key_id, "key", fp, "principals", pr,
				  "validAfter", "", "validBefore", "", "ca", cafp, "ignored", "");
	{
		char		b[32];

		snprintf(b, sizeof(b), "%" PRIu64, info.serial);
		json_object_set_new(o, "serial", json_string(b));
		snprintf(b, sizeof(b), "%" PRIu64, info.valid_after);
		json_object_set_new(o, "validAfter", json_string(b));
		snprintf(b, sizeof(b), "%" PRIu64, info.valid_before);
		json_object_set_new(o, "validBefore", json_string(b));
		json_object_del(o, "ignored");
	}
	s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
	puts(s);
	free(s);
	json_decref(o);
	bc_ssh_cert_info_free(&info);
	free(blob);
	return 0;
}

/* ssh-tool fingerprint FILE.pub */
static int
cmd_fingerprint(const char *path)
{
	size_t		len;
	unsigned char *blob = read_line_blob(path, &len);
	char		fp[64];
	int			rc = bc_ssh_fingerprint(blob, len, fp);

	free(blob);
	if (rc != BC_OK)
		return 1;
	puts(fp);
	return 0;
}

/* ssh-tool pubkey KEY.pem */
static int
cmd_pubkey(const char *path)
{
	FILE	   *f = fopen(path, "r");
	EVP_PKEY   *k = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
	unsigned char *blob;
	size_t		len;
	char	   *line;

	if (f)
		fclose(f);
	if (k == NULL || bc_ssh_pubkey_blob(k, &blob, &len) != BC_OK)
	{
		EVP_PKEY_free(k);
		return 1;
	}
	EVP_PKEY_free(k);
	line = bc_ssh_pubkey_line(blob, len, NULL);
	free(blob);
	if (line == NULL)
		return 1;
	fputs(line, stdout);
	free(line);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	if (strcmp(argv[1], "cert") == 0)
		return cmd_cert(argc - 2, argv + 2);
	if (strcmp(argv[1], "krl") == 0)
		return cmd_krl(argc - 2, argv + 2);
	if (strcmp(argv[1], "parse") == 0 && argc == 3)
		return cmd_parse(argv[2]);
	if (strcmp(argv[1], "fingerprint") == 0 && argc == 3)
		return cmd_fingerprint(argv[2]);
	if (strcmp(argv[1], "pubkey") == 0 && argc == 3)
		return cmd_pubkey(argv[2]);
	return usage();
}
