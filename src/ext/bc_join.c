/*
 * bc_join.c: module load: _PG_init, the settings (GUCs) and setting_interval().
 */
#include "bc_join.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

/* The longest retention a setting takes: ten years, in seconds. */
#define BC_RETAIN_MAX (10 * 366 * 86400)

/* Retention and staleness, read by SQL through bc_join.setting_interval(). */
static int	bc_retain_events = 90 * 86400;
static int	bc_retain_expired_certificates = 30 * 86400;
static int	bc_retain_sessions = 7 * 86400;
static int	bc_retain_join_requests = 30 * 86400;
static int	bc_stale_after = 3 * 86400;

/* The bounds on waiting join requests, read by SQL (bc_join.create_join_request). */
static int	bc_pending_requests_per_token = 10;
static int	bc_pending_requests_per_tenant = 1000;

void		_PG_init(void);

/* A changed key directory invalidates the keys this backend loaded. */
static void
bc_key_dir_assign(const char *newval, void *extra)
{
	bc_keys_reset();
}

/* A trust domain is a DNS-like name: lower-case letters, digits, '.', '-', '_'. */
static bool
bc_trust_domain_check(char **newval, void **extra, GucSource source)
{
	const char *p;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	if (strlen(*newval) > 255)
	{
		GUC_check_errdetail("A trust domain is at most 255 characters.");
		return false;
	}
	for (p = *newval; *p; p++)
	{
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
			  *p == '.' || *p == '-' || *p == '_'))
		{
			GUC_check_errdetail("A trust domain holds only lower-case letters, digits, '.', '-' and '_'.");
			return false;
		}
	}
	return true;
}

/*
 * A URL written into certificates: empty, or at most 2048 printable ASCII
 * characters without spaces (what src/common/pki.c accepts).
 */
static bool
bc_url_check(char **newval, void **extra, GucSource source)
{
	const char *p;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	if (strlen(*newval) > 2048)
	{
		GUC_check_errdetail("A URL is at most 2048 characters.");
		return false;
	}
	for (p = *newval; *p; p++)
	{
		if ((unsigned char) *p <= 0x20 || (unsigned char) *p >= 0x7f)
		{
			GUC_check_errdetail("A URL holds only printable ASCII characters, no spaces.");
			return false;
		}
	}
	return true;
}

/*
 * The JWT-SVID issuer: empty, or an https origin, https://HOST[:PORT] with a
 * lower-case DNS name or IPv4 address and no path, trailing slash, query,
 * fragment or userinfo: what relying parties compare byte for byte with the
 * discovery document's issuer, which the gateway serves at the origin's
 * fixed /.well-known/openid-configuration.
 */
static bool
bc_jwt_issuer_check(char **newval, void **extra, GucSource source)
{
	const char *host;
	const char *p;
	int			port = 0;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	if (strlen(*newval) > 255 || strncmp(*newval, "https://", 8) != 0)
	{
		GUC_check_errdetail("The issuer is an https origin of at most 255 characters: https://HOST or https://HOST:PORT.");
		return false;
	}
	host = *newval + 8;
	for (p = host; (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '-'; p++)
		;
	if (p == host || host[0] == '.' || host[0] == '-' || p[-1] == '.' || p[-1] == '-' ||
		strstr(host, "..") != NULL)
	{
		GUC_check_errdetail("The issuer's host is a lower-case DNS name or IPv4 address, without userinfo.");
		return false;
	}
	if (*p == ':')
	{
		const char *digits = ++p;

		for (; *p >= '0' && *p <= '9' && p - digits < 6; p++)
			port = port * 10 + (*p - '0');
		if (p == digits || digits[0] == '0' || port > 65535 || *p != '\0')
		{
			GUC_check_errdetail("The issuer's port is a number from 1 to 65535 and ends the issuer.");
			return false;
		}
	}
	if (*p != '\0')
	{
		GUC_check_errdetail("The issuer is an origin: no path, trailing slash, query or fragment (\"%s\").", p);
		return false;
	}
	return true;
}

/*
 * Define the settings; every one is superuser-only.  Only from
 * shared_preload_libraries: two settings are PGC_POSTMASTER and the
 * statistics live in shared memory, so a library loaded later (CREATE
 * EXTENSION, a call in a server started without it) stops here with one
 * ERROR that says what to do, before anything is defined (a later load
 * tries again from the start), as pg_stat_statements tells its callers.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("bc_join must be loaded via \"shared_preload_libraries\""),
				 errdetail("INVALID_CONFIG: the server was started without bc_join in shared_preload_libraries."),
				 errhint("Add bc_join to shared_preload_libraries in postgresql.conf and restart the server.")));

	DefineCustomStringVariable("bc_join.key_dir",
							   "Directory holding the JoinService keys.",
							   "signing.key, encryption.key, node-ca.crt, node-ca.key and "
							   "challenge.key, readable only by the server's OS user.",
							   &bc_key_dir,
							   NULL,
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY,
							   NULL, bc_key_dir_assign, NULL);

	DefineCustomStringVariable("bc_join.tpm_tcti",
							   "TCTI of the TPM holding keys of bc_join.key_dir.",
							   "For TSS2 PRIVATE KEY files and handle: references, through the "
							   "tpm2-openssl provider (TPM2OPENSSL_TCTI); a long-lived server wants "
							   "a resource manager: device:/dev/tpmrm0 or tabrmd.",
							   &bc_tpm_tcti,
							   NULL,
							   PGC_POSTMASTER,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("bc_join.pkcs11_module",
							   "PKCS#11 module of the token holding keys of bc_join.key_dir.",
							   "For pkcs11: references, through libp11's engine "
							   "(libengine-pkcs11-openssl), e.g. /usr/lib/softhsm/libsofthsm2.so.",
							   &bc_pkcs11_module,
							   NULL,
							   PGC_POSTMASTER,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("bc_join.trust_domain",
							   "SPIFFE trust domain of the identities bc_join issues.",
							   NULL,
							   &bc_trust_domain,
							   NULL,
							   PGC_SUSET,
							   0,
							   bc_trust_domain_check, NULL, NULL);

	DefineCustomIntVariable("bc_join.cert_ttl",
							"Service lifetime of node certificates.",
							"No certificate lives longer; ramdisks at most 7200 seconds.",
							&bc_cert_ttl,
							BC_SERVICE_TTL_MAX,
							60, BC_SERVICE_TTL_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.clock_offset",
							"Seconds added to the service clock (tests only).",
							"compute_now() is the transaction start plus this offset; "
							"tests move it forward instead of sleeping.",
							&bc_clock_offset,
							0,
							0, 10 * 366 * 86400,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.session_ttl",
							"Lifetime of session certificates.",
							"Never beyond the node certificate the session was asked with.",
							&bc_session_ttl,
							900,
							30, 3600,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.jwt_svid_ttl",
							"Lifetime of JWT-SVIDs.",
							"Never beyond the node certificate the JWT-SVID was asked with.",
							&bc_jwt_svid_ttl,
							300,
							60, 3600,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("bc_join.jwt_issuer",
							   "The iss of JWT-SVIDs and the issuer of the OIDC discovery document.",
							   "An https origin, https://HOST[:PORT], the gateway's public address "
							   "(e.g. https://oidc.example.org); empty: JWT-SVIDs carry no iss and "
							   "bc_join.oidc_discovery() and bc_join.jwks() raise INVALID_CONFIG.",
							   &bc_jwt_issuer,
							   "",
							   PGC_SUSET,
							   0,
							   bc_jwt_issuer_check, NULL, NULL);

	DefineCustomIntVariable("bc_join.sessions_per_node",
							"Session identities a node may hold.",
							"A session or context new to a node beyond this is refused "
							"session:too-many; identities held are not.",
							&bc_sessions_per_node,
							10000,
							1, 100000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.new_sessions_per_minute",
							"Session identities a node may reserve a minute.",
							"A session or context new to a node beyond this in the last minute "
							"is refused session:too-fast; identities held are not.",
							&bc_new_sessions_per_minute,
							600,
							1, 100000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.refusal_events_per_minute",
							"security.join.refused events recorded a minute per refusal reason.",
							"Further refusals of the same reason in the minute are counted, "
							"not recorded; 0 records every one.",
							&bc_refusal_events_per_minute,
							60,
							0, 1000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.join_request_ttl",
							"How long a join request waits for an operator's decision.",
							"A request neither approved and used, nor rejected, within this "
							"time expires: the agent's retry is refused <attestor>:request-expired.",
							&bc_join_request_ttl,
							86400,
							60, 366 * 86400,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.pending_requests_per_token",
							"How many join requests may wait for an operator for one join token.",
							"A join that would make one more for the token is refused "
							"<attestor>:pending-token-limit until some are decided or expire.",
							&bc_pending_requests_per_token,
							10,
							1, 1000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.pending_requests_per_tenant",
							"How many join requests may wait for an operator in one tenant.",
							"A join that would make one more in the tenant is refused "
							"<attestor>:pending-tenant-limit until some are decided or expire.",
							&bc_pending_requests_per_tenant,
							1000,
							1, 1000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("bc_join.crl_url",
							   "The CRL distribution point written into issued certificates.",
							   "Where relying parties fetch the node CA's CRL, e.g. "
							   "https://gateway.example.org/v1/crl; empty writes none.",
							   &bc_crl_url,
							   "",
							   PGC_SUSET,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.crl_validity",
							"Seconds from a CRL's thisUpdate to its nextUpdate.",
							"Relying parties fetch a new CRL before then; the gateway refreshes "
							"its copy when a revocation commits and before nextUpdate.",
							&bc_crl_validity,
							3600,
							60, 7 * 86400,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("bc_join.ocsp_url",
							   "The OCSP responder URL written into issued certificates.",
							   "The authorityInfoAccess OCSP URI of node and session certificates, "
							   "e.g. https://gateway.example.org/v1/ocsp; empty writes none.",
							   &bc_ocsp_url,
							   "",
							   PGC_SUSET,
							   0,
							   bc_url_check, NULL, NULL);

	DefineCustomIntVariable("bc_join.ocsp_validity",
							"Seconds from an OCSP response's thisUpdate to its nextUpdate.",
							"How long a relying party (and the gateway's cache) may use an answer; "
							"a revocation also ends the gateway's cached answers at once.",
							&bc_ocsp_validity,
							300,
							10, 86400,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.x509pop_window",
							"How far an x509pop proof's iat may be from the service clock.",
							"Either way; a proof is also kept as used until iat plus this window.",
							&bc_x509pop_window,
							300,
							10, 3600,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.x509pop_grace",
							"How long after its notAfter a node certificate still reclaims its node by x509pop.",
							"A machine that was away comes back as itself within this time; "
							"after it, it needs a join token again.",
							&bc_x509pop_grace,
							30 * 86400,
							0, 366 * 86400,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.retain_events",
							"How long events are kept.",
							"bc_join.prune_events() deletes events older than this.",
							&bc_retain_events,
							90 * 86400,
							3600, BC_RETAIN_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.retain_expired_certificates",
							"How long node and session certificates are kept after their notAfter.",
							"bc_join.prune_certificates() deletes them after this; a revoked "
							"certificate stays while it has not expired (the CRL lists it), a "
							"node's newest certificate stays, and a node certificate stays "
							"at least bc_join.x509pop_grace.",
							&bc_retain_expired_certificates,
							30 * 86400,
							0, BC_RETAIN_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.retain_sessions",
							"How long a session is kept once its last certificate expired.",
							"bc_join.prune_sessions() deletes sessions (and their certificates) "
							"with no certificate that expired less than this ago.",
							&bc_retain_sessions,
							7 * 86400,
							3600, BC_RETAIN_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.retain_join_requests",
							"How long decided or expired join requests are kept.",
							"bc_join.prune_join_requests() deletes rejected and consumed "
							"requests decided, and pending or approved ones expired, longer ago.",
							&bc_retain_join_requests,
							30 * 86400,
							3600, BC_RETAIN_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("bc_join.stale_after",
							"How long a live node may go unseen before bc_join.stale_nodes lists it.",
							"A node is seen when it joins, renews or asks for a session.",
							&bc_stale_after,
							3 * 86400,
							60, BC_RETAIN_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("bc_join");

	bc_stats_init();

	/* A backend is one thread: keep OpenSSL's contexts for reuse. */
	bc_ossl_cache_enable();
}

PG_FUNCTION_INFO_V1(bc_setting_interval);

/*
 * setting_interval(name): a retention or staleness setting as an interval.
 * A C function, so that calling it loads the module that defines the
 * settings (current_setting() in SQL would fail in a backend that has not).
 */
Datum
bc_setting_interval(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int			secs;
	Interval   *iv;

	if (strcmp(name, "retain_events") == 0)
		secs = bc_retain_events;
	else if (strcmp(name, "retain_expired_certificates") == 0)
		secs = bc_retain_expired_certificates;
	else if (strcmp(name, "retain_sessions") == 0)
		secs = bc_retain_sessions;
	else if (strcmp(name, "retain_join_requests") == 0)
		secs = bc_retain_join_requests;
	else if (strcmp(name, "stale_after") == 0)
		secs = bc_stale_after;
	else if (strcmp(name, "x509pop_grace") == 0)
		secs = bc_x509pop_grace;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown setting \"%s\"", name),
				 errdetail("INVALID_INPUT: one of retain_events, retain_expired_certificates, "
						   "retain_sessions, retain_join_requests, stale_after, x509pop_grace.")));
	iv = (Interval *) palloc0(sizeof(Interval));
	iv->time = (int64) secs * USECS_PER_SEC;
	PG_RETURN_INTERVAL_P(iv);
}
