/*
 * bc_protocol.h: the words and bounds of the bc_join protocol, in one place
 * for every side that speaks it: the extension (src/ext), the gateway
 * (src/gateway) and the agent bcd (src/agent).  docs/protocol.md and
 * docs/sessions.md describe them.
 *
 * Plain C, no PostgreSQL headers: macros and a few static inline
 * validators and builders (string.h and stdio.h only), so that any file of
 * any side may include it.  A bound that the extension also defines in its own headers is
 * spelled token for token the same here, so both definitions may meet in
 * one translation unit until the extension includes this file alone.
 */
#ifndef BC_PROTOCOL_H
#define BC_PROTOCOL_H

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ endpoints */

/* The gateway's endpoints, each relayed to one SQL function. */
#define BC_PATH_JOIN			"/v1/join"		/* bc_join(request) */
#define BC_PATH_RENEW			"/v1/renew"		/* bc_join.renew(request) */
#define BC_PATH_SESSION			"/v1/session"	/* bc_join.issue_session(request) */
#define BC_PATH_JWT_SVID		"/v1/jwt-svid"	/* bc_join.issue_jwt_svid(request) */
#define BC_PATH_COMMANDS		"/v1/commands"	/* bc_join.fetch_commands(request) */
#define BC_PATH_COMMANDS_COMPLETE "/v1/commands/complete"	/* bc_join.complete_command(request) */
#define BC_PATH_SITE_EPOCH		"/v1/site-epoch"	/* bc_join.site_epoch(request) */
#define BC_PATH_ATTEST			"/v1/attest"	/* bc_join.attest(request): continuous attestation */
/* GET: the issuance log's head signed by the service key (bc_join.audit_anchor()). */
#define BC_PATH_AUDIT_ANCHOR	"/v1/audit-anchor"
/* GET: the service keys signed by each signing key (bc_join.signed_service_keys()). */
#define BC_PATH_SERVICE_KEYS	"/v1/service-keys"
/* GET: the trust domain's SPIFFE bundle (bc_join.spiffe_bundle()). */
#define BC_PATH_SPIFFE_BUNDLE	"/v1/spiffe-bundle"
/* GET: the federated trust domains' bundles signed by each signing key (bc_join.signed_trust_bundles()). */
#define BC_PATH_TRUST_BUNDLES	"/v1/trust-bundles"
/* The bundle's spiffe_refresh_hint, seconds. */
#define BC_SPIFFE_REFRESH_HINT	300
/* #46 oidc, GET: OIDC discovery of the JWT-SVID issuer (bc_join.oidc_discovery()). */
#define BC_PATH_OIDC_DISCOVERY	"/.well-known/openid-configuration"
/* GET: the JWT-SVID keys as a JWKS (bc_join.jwks()), the discovery's jwks_uri. */
#define BC_PATH_JWKS			"/v1/jwks"
/* #47 ssh: POST the host certificate (bc_join.issue_ssh_host_cert(request)). */
#define BC_PATH_SSH_HOST		"/v1/ssh/host"
/* GET: the OpenSSH KRL (bc_join.ssh_krl()), unsigned. */
#define BC_PATH_SSH_KRL			"/v1/ssh/krl"
/* GET: CA lines and the KRL's hash signed by each signing key (bc_join.signed_ssh()). */
#define BC_PATH_SSH_SIGNED		"/v1/ssh/signed"
/* GET: the host and user CA public key lines (bc_join.ssh_host_ca(), ssh_user_ca()). */
#define BC_PATH_SSH_HOST_CA		"/v1/ssh/host-ca"
#define BC_PATH_SSH_USER_CA		"/v1/ssh/user-ca"
/* Bound of the KRL, bytes. */
#define BC_SSH_KRL_MAX			(4 * 1024 * 1024)

/* ---------------------------------------------------------------- roles */

/* The roles a JoinRequest may ask for ("role"). */
#define BC_ROLE_NODE			"node"
#define BC_ROLE_SITE			"site"
#define BC_ROLE_RAMDISK			"ramdisk"

/* 1 when role is one of the roles above (case-sensitive), 0 otherwise or NULL. */
static inline int
bc_role_valid(const char *role)
{
	return role != NULL && (strcmp(role, BC_ROLE_NODE) == 0 || strcmp(role, BC_ROLE_SITE) == 0 ||
							strcmp(role, BC_ROLE_RAMDISK) == 0);
}

/* ------------------------------------------------------------- statuses */

/* The "status" of an answer (the outer JSON and the signed payload). */
#define BC_STATUS_ISSUED		"issued"
#define BC_STATUS_PENDING		"pending"
#define BC_STATUS_CHALLENGE		"challenge"
#define BC_STATUS_REFUSED		"refused"
/* The answers of POST /v1/attest's second round. */
#define BC_STATUS_ATTESTED		"attested"
#define BC_STATUS_QUARANTINED	"quarantined"

/* The one refusal: {"status":"refused","error":{"code":...}}. */
#define BC_REFUSAL_CODE			"ACCESS_DENIED"

/* The error codes of the gateway's own answers ({"error":{"code":...}}). */
#define BC_ERROR_INVALID_INPUT	"INVALID_INPUT"
#define BC_ERROR_UNSUPPORTED	"UNSUPPORTED"
#define BC_ERROR_UNAVAILABLE	"UNAVAILABLE"
#define BC_ERROR_RATE_LIMITED	"RATE_LIMITED"
#define BC_ERROR_INTERNAL		"INTERNAL"

/* -------------------------------------------------- bounds of a request */

/* A JoinRequest (and a renewal or session request): 64 KiB in all. */
#define BC_REQUEST_MAX			(64 * 1024)
#define BC_CSR_B64_MAX			(8 * 1024)
#define BC_ATTESTATION_B64_MAX	(48 * 1024)
#define BC_SEALED_TOKEN_MAX		(4 * 1024)
#define BC_CLAIM_STRING_MAX		256
#define BC_CLAIM_ARRAY_MAX		64
#define BC_ATTESTOR_ID_MAX		64
/* A join token, in bytes (what is sealed, before sealing). */
#define BC_TOKEN_MAX			256

/*
 * Continuous attestation (POST /v1/attest, issue 44): the UEFI event log
 * and one increment of the IMA list a node sends at most (the same bounds
 * as src/common/eventlog.h's BC_EVLOG_MAX_BYTES and BC_IMA_MAX_BYTES), and
 * the whole request (both in base64url, the quote and the PCR values): the
 * only route the gateway takes bodies over BC_REQUEST_MAX on.
 */
#define BC_ATTEST_EVENT_LOG_MAX	(1024 * 1024)
#define BC_ATTEST_IMA_MAX		(4 * 1024 * 1024)
#define BC_ATTEST_IMA_MAX_ENTRIES 20000	/* and so many entries (BC_IMA_MAX_ENTRIES) */
#define BC_ATTEST_REQUEST_MAX	(8 * 1024 * 1024)
/* The interval the service sets per pool: its default and bounds, seconds. */
#define BC_ATTEST_INTERVAL_DEFAULT 60
#define BC_ATTEST_INTERVAL_MIN	5
#define BC_ATTEST_INTERVAL_MAX	3600
/* extraData of an attestation's quote: SHA-256(this label || the nonce). */
#define BC_ATTEST_QUOTE_LABEL	"bc_join/attest"

/* ------------------------------------------------------------ attestors */

/* The built-in attestors' ids; join-token is a JoinRequest's without "attestor". */
#define BC_ATTESTOR_JOIN_TOKEN	"join-token"
#define BC_ATTESTOR_TPM			"tpm"
#define BC_ATTESTOR_X509POP		"x509pop"
#define BC_ATTESTOR_PROVISIONED	"provisioned"
#define BC_ATTESTOR_CLOUD_IID	"cloud-iid"
#define BC_ATTESTOR_DISCOVERY	"discovery"

/* The characters of an attestor id (bc_join.attestors.id: ^[a-z0-9._-]{1,64}$). */
#define BC_ATTESTOR_ID_CHARS	"abcdefghijklmnopqrstuvwxyz0123456789._-"

/* 1 when id is an attestor id: 1 to BC_ATTESTOR_ID_MAX of BC_ATTESTOR_ID_CHARS. */
static inline int
bc_attestor_id_valid(const char *id)
{
	size_t		n;

	if (id == NULL)
		return 0;
	n = strlen(id);
	return n >= 1 && n <= BC_ATTESTOR_ID_MAX && strspn(id, BC_ATTESTOR_ID_CHARS) == n;
}

/*
 * The node key statement of a certificate whose key the tpm attestor proved
 * to be a TPM's: a second URI SAN urn:bc:tpm-ak:<nameAlg>:<hex digest of the
 * AK's Name> (docs/protocol.md).
 */
#define BC_TPM_AK_URN_PREFIX	"urn:bc:tpm-ak:"

/* ------------------------------------------------------ words of evidence */

/* Lower-case hexadecimal digits: serials, MAC addresses. */
#define BC_HEX_LOWER			"0123456789abcdef"

/* A certificate serial as the service spells it: 32 lower-case hex digits (128 bits). */
#define BC_SERIAL_HEX_LEN		32

/* 1 when s is a serial: exactly BC_SERIAL_HEX_LEN of BC_HEX_LOWER. */
static inline int
bc_serial_valid(const char *s)
{
	return s != NULL && strlen(s) == BC_SERIAL_HEX_LEN &&
		strspn(s, BC_HEX_LOWER) == BC_SERIAL_HEX_LEN;
}

/* A MAC address of a discovery assertion: "aa:bb:cc:dd:ee:ff", lower-case hex. */
#define BC_MAC_LEN				17

/* 1 when m is a MAC address of that form; 0 otherwise or NULL. */
static inline int
bc_mac_valid(const char *m)
{
	if (m == NULL || strlen(m) != BC_MAC_LEN)
		return 0;
	for (int i = 0; i < BC_MAC_LEN; i++)
	{
		if (i % 3 == 2 ? m[i] != ':' : strchr(BC_HEX_LOWER, m[i]) == NULL)
			return 0;
	}
	return 1;
}

/* ------------------------------------------ proofs by the node's key */

/* The "purpose" of a proof: a renewal, a session credential. */
#define BC_PURPOSE_RENEW		"renew"
#define BC_PURPOSE_SESSION		"session"
#define BC_PURPOSE_JWT_SVID		"jwt-svid"
/* Fetching the node's commands; reporting one's outcome (docs/commands.md). */
#define BC_PURPOSE_COMMANDS		"commands"
#define BC_PURPOSE_COMPLETE		"complete"
/* A site agent asking for its site's discovery epoch (docs/attestors.md). */
#define BC_PURPOSE_SITE_EPOCH	"site-epoch"
/* A node attesting its TPM's state (POST /v1/attest, both rounds). */
#define BC_PURPOSE_ATTEST		"attest"
/* A node asking for an OpenSSH host certificate (POST /v1/ssh/host). */
#define BC_PURPOSE_SSH_HOST		"ssh-host"

/* A proof's "iat" must be within this many seconds of the service clock. */
#define BC_PROOF_WINDOW 300
/* A proof (JWS compact) in bytes. */
#define BC_PROOF_MAX 4096

/* ------------------------------------------------------------ commands */

/* Commands handed out by one fetch, at most. */
#define BC_COMMANDS_PER_FETCH	16
/* A command's result (JSON object, decoded bytes), at most. */
#define BC_COMMAND_RESULT_MAX	12288
/* A command id: "cmd_" and 32 hex digits. */
#define BC_COMMAND_ID_LEN		36

/* ------------------------------------------------ certificate lifetimes */

/* The longest certificate the service issues, in seconds; a ramdisk's. */
#define BC_SERVICE_TTL_MAX		86400
#define BC_RAMDISK_TTL_MAX		7200

/* ------------------------------------------------ session selectors */

/*
 * A session or context selector: BC_SESSION_MIN (session) or
 * BC_CONTEXT_MIN (context) to BC_SELECTOR_MAX characters, every one of
 * them in BC_SELECTOR_CHARS (strspn(s, BC_SELECTOR_CHARS) == strlen(s)).
 * A selector is something the node vouches for, never an authorization.
 */
#define BC_SELECTOR_MAX 128
#define BC_SESSION_MIN			1
#define BC_CONTEXT_MIN			0
#define BC_SELECTOR_CHARS \
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"

/*
 * 1 when s is a selector: BC_SELECTOR_CHARS only, at most BC_SELECTOR_MAX
 * of them, at least BC_SESSION_MIN when required (a session) and
 * BC_CONTEXT_MIN otherwise (a context).  The one check of both sides.
 */
static inline int
bc_selector_valid(const char *s, int required)
{
	size_t		n;

	if (s == NULL)
		return 0;
	n = strlen(s);
	return n <= BC_SELECTOR_MAX && n >= (size_t) (required ? BC_SESSION_MIN : BC_CONTEXT_MIN) &&
		strspn(s, BC_SELECTOR_CHARS) == n;
}

/* ------------------------------------------------------- SPIFFE IDs */

/*
 * A node's SPIFFE ID: spiffe://<trust domain>/tenant/<tenant>/node/<node>;
 * a session credential's adds /session/<session>.  The printf formats, for
 * the sides that build them with their own allocator (psprintf, snprintf).
 */
#define BC_SPIFFE_SCHEME		"spiffe://"
#define BC_SPIFFE_TENANT_SEG	"/tenant/"
#define BC_SPIFFE_NODE_SEG		"/node/"
#define BC_SPIFFE_SESSION_SEG	"/session/"
#define BC_SPIFFE_NODE_FMT \
	BC_SPIFFE_SCHEME "%s" BC_SPIFFE_TENANT_SEG "%s" BC_SPIFFE_NODE_SEG "%s"
#define BC_SPIFFE_SESSION_FMT	BC_SPIFFE_NODE_FMT BC_SPIFFE_SESSION_SEG "%s"

/*
 * The SPIFFE ID of tenant's node in trust_domain (session NULL) or of its
 * session into buf (size bytes, NUL-terminated): 1 when it fitted, 0 when not
 * (or a part is NULL).
 */
static inline int
bc_spiffe_id(char *buf, size_t size, const char *trust_domain, const char *tenant,
			 const char *node, const char *session)
{
	int			n;

	if (buf == NULL || size == 0 || trust_domain == NULL || tenant == NULL || node == NULL)
		return 0;
	if (session != NULL)
		n = snprintf(buf, size, BC_SPIFFE_SESSION_FMT, trust_domain, tenant, node, session);
	else
		n = snprintf(buf, size, BC_SPIFFE_NODE_FMT, trust_domain, tenant, node);
	return n > 0 && (size_t) n < size;
}

/* The parts of a SPIFFE ID, each a pointer into the parsed string and a length. */
typedef struct bc_spiffe_parts
{
	const char *trust_domain;
	size_t		trust_domain_len;
	const char *tenant;
	size_t		tenant_len;
	const char *node;
	size_t		node_len;
	const char *session;		/* NULL for a node's SPIFFE ID */
	size_t		session_len;
} bc_spiffe_parts;

/* The next path segment of *p (up to '/' or the end): its length; *p moves past it. */
static inline size_t
bc_spiffe_segment(const char **p)
{
	const char *s = *p;
	const char *slash = strchr(s, '/');
	size_t		n = slash != NULL ? (size_t) (slash - s) : strlen(s);

	*p = s + n;
	return n;
}

/*
 * 1 when uri is a node's or a session's SPIFFE ID as the formats above
 * spell it, every part non-empty and without '/', and (when trust_domain is
 * not NULL) of that trust domain; *parts (when not NULL) then points into
 * uri.  0 otherwise.  The one parser of both sides.
 */
static inline int
bc_spiffe_parse(const char *uri, const char *trust_domain, bc_spiffe_parts *parts)
{
	bc_spiffe_parts p;
	const char *s;

	if (uri == NULL || strncmp(uri, BC_SPIFFE_SCHEME, strlen(BC_SPIFFE_SCHEME)) != 0)
		return 0;
	memset(&p, 0, sizeof(p));
	s = uri + strlen(BC_SPIFFE_SCHEME);
	p.trust_domain = s;
	if ((p.trust_domain_len = bc_spiffe_segment(&s)) == 0 ||
		(trust_domain != NULL && (strlen(trust_domain) != p.trust_domain_len ||
								  strncmp(p.trust_domain, trust_domain, p.trust_domain_len) != 0)))
		return 0;
	if (strncmp(s, BC_SPIFFE_TENANT_SEG, strlen(BC_SPIFFE_TENANT_SEG)) != 0)
		return 0;
	s += strlen(BC_SPIFFE_TENANT_SEG);
	p.tenant = s;
	if ((p.tenant_len = bc_spiffe_segment(&s)) == 0 ||
		strncmp(s, BC_SPIFFE_NODE_SEG, strlen(BC_SPIFFE_NODE_SEG)) != 0)
		return 0;
	s += strlen(BC_SPIFFE_NODE_SEG);
	p.node = s;
	if ((p.node_len = bc_spiffe_segment(&s)) == 0)
		return 0;
	if (*s != '\0')
	{
		if (strncmp(s, BC_SPIFFE_SESSION_SEG, strlen(BC_SPIFFE_SESSION_SEG)) != 0)
			return 0;
		s += strlen(BC_SPIFFE_SESSION_SEG);
		p.session = s;
		if ((p.session_len = bc_spiffe_segment(&s)) == 0 || *s != '\0')
			return 0;
	}
	if (parts != NULL)
		*parts = p;
	return 1;
}

/*
 * The SPIFFE ID of session of the node whose SPIFFE ID is node_uri into buf
 * (size bytes): 1 when node_uri is a node's SPIFFE ID and it fitted, else 0.
 */
static inline int
bc_spiffe_session_of(char *buf, size_t size, const char *node_uri, const char *session)
{
	bc_spiffe_parts p;
	int			n;

	if (buf == NULL || size == 0 || session == NULL ||
		!bc_spiffe_parse(node_uri, NULL, &p) || p.session != NULL)
		return 0;
	n = snprintf(buf, size, "%s" BC_SPIFFE_SESSION_SEG "%s", node_uri, session);
	return n > 0 && (size_t) n < size;
}

/* --------------------------------------------- bcd's local socket */

/* The "op" of a request line on the socket. */
#define BC_SOCK_OP_CREDENTIAL	"credential"
#define BC_SOCK_OP_STATUS		"status"
#define BC_SOCK_OP_METRICS		"metrics"

/* The "error" words of an answer {"ok":false,"error":...}, bcd's own. */
#define BC_SOCK_OK				"ok"	/* the counters' name of a delivery */
#define BC_SOCK_NO_NODE_CREDENTIAL "no-node-credential"
#define BC_SOCK_BUSY			"busy"
#define BC_SOCK_REFUSED			"refused"
#define BC_SOCK_UNAVAILABLE		"unavailable"
#define BC_SOCK_BAD_REQUEST		"bad-request"
#define BC_SOCK_BAD_DIR			"bad-dir"
#define BC_SOCK_FORBIDDEN		"forbidden"
#define BC_SOCK_FAILED			"failed"
#define BC_SOCK_NO_SSH_CERTIFICATE "no-ssh-certificate"	/* asked "ssh": true, none issued */
/* ... and the clients' own (no answer came, or none was asked for). */
#define BC_SOCK_NO_DAEMON		"no-daemon"
#define BC_SOCK_NO_ANSWER		"no-answer"
#define BC_SOCK_TIMEOUT			"timeout"
#define BC_SOCK_UNTRUSTED_SOCKET "untrusted-socket"

/* One request line on the socket, the newline included. */
#define BC_SOCK_REQUEST_MAX		8192

#endif							/* BC_PROTOCOL_H */
