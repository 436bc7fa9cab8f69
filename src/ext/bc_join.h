/*
 * bc_join.h: what the extension's files share.
 */
#ifndef BC_JOIN_EXT_H
#define BC_JOIN_EXT_H

#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "bc_common.h"

/* The uniform refusal raised inside a join: SQLSTATE JR001. */
#define ERRCODE_BC_JOIN_REFUSED MAKE_SQLSTATE('J','R','0','0','1')
/* INVALID_CONFIG: the service's own setup is wrong (keys, settings, attestor). */
#define ERRCODE_BC_INVALID_CONFIG ERRCODE_CONFIG_FILE_ERROR

/* The protocol's words and bounds (roles, statuses, request bounds, TTL caps): one home for every side. */
#include "bc_protocol.h"

/* ---------------------------------------------------------------- bc_join.c */

extern char *bc_key_dir;
extern char *bc_trust_domain;
extern int	bc_cert_ttl;
extern int	bc_clock_offset;
extern int	bc_session_ttl;
extern int	bc_jwt_svid_ttl;
extern char *bc_jwt_issuer;
extern int	bc_sessions_per_node;
extern int	bc_new_sessions_per_minute;
extern int	bc_join_request_ttl;
extern char *bc_crl_url;
extern int	bc_crl_validity;
extern char *bc_ocsp_url;
extern int	bc_ocsp_validity;

/* The trust domain, or INVALID_CONFIG when it is not set. */
extern const char *bc_require_trust_domain(void);

/* ------------------------------------------------------------------- util.c */

/* The service clock (compute_now()) as a TimestampTz. */
extern TimestampTz bc_now(void);
/* check_evidence() (check.c): the service clock reads at until bc_clock_unfix(). */
extern void bc_clock_fix(TimestampTz at);
extern void bc_clock_unfix(void);
extern TimestampTz bc_clock_instant(void);
extern int64 bc_timestamp_to_unix(TimestampTz t);
/* Random identifier: prefix '_' 32 hex digits. */
extern char *bc_new_id(const char *prefix);
/* On a hot standby: 25006 before any work (a join, renewal or session writes). */
extern void bc_require_primary(void);

/* ------------------------------------------------------------------- json.c */

/* RFC 3339 UTC rendering of a timestamp, to the second. */
extern char *bc_rfc3339(TimestampTz t);
/* jsonb from JSON text. */
extern Jsonb *bc_jsonb(const char *text);
/* The string member name of a jsonb object, copied; NULL when absent or no string. */
extern char *bc_jsonb_string(Jsonb *j, const char *name);
/* Whether jb's compact JSON text is over limit bytes (a request's size as the contract counts it). */
extern bool bc_jsonb_text_over(Jsonb *jb, size_t limit);

/*
 * The JSON writer over a StringInfo: bc_json_begin, then members (the comma
 * before each but the first is the writer's), then bc_json_end.  A member
 * whose value is an object: bc_json_key, then bc_json_begin .. bc_json_end.
 */
extern void bc_json_begin(StringInfo buf);
extern void bc_json_key(StringInfo buf, const char *name);
/* "name":<JSON string, or null when value is NULL> (escape_json). */
extern void bc_json_member(StringInfo buf, const char *name, const char *value);
extern void bc_json_member_int(StringInfo buf, const char *name, int64 value);
extern void bc_json_member_bool(StringInfo buf, const char *name, bool value);
/* "name":<json>, JSON text the caller made. */
extern void bc_json_member_raw(StringInfo buf, const char *name, const char *json);
extern void bc_json_end(StringInfo buf);

/* ------------------------------------------------------------------ ossl.c */

/*
 * OpenSSL objects owned by a memory context: freed when it is reset or
 * deleted, so an ereport half-way through cannot leak them.  Each takes the
 * caller's pointer by address and sets it to NULL; what it returns is
 * borrowed: use it until the context is reset, never free it (the context
 * does; test/tools/ownership-check refuses a free of it).
 */
extern EVP_PKEY *bc_own_pkey(MemoryContext cxt, EVP_PKEY **key);
extern X509 *bc_own_x509(MemoryContext cxt, X509 **cert);
extern STACK_OF(X509) *bc_own_x509_stack(MemoryContext cxt, STACK_OF(X509) **sk);
extern bc_csr *bc_own_csr(MemoryContext cxt, bc_csr **csr);
/* A malloc()ed buffer from src/common copied into the current context, freed. */
extern char *bc_take_cstring(char *malloced);
extern bytea *bc_take_bytea(unsigned char *malloced, size_t len, bool secret);
/* errdetail() from OpenSSL's error queue (drains it). */
extern int	bc_errdetail_openssl(const char *what);

/* ---------------------------------------------------------- service_keys.c */

/* Most keys of one kind in key_dir: the current one, the next, the previous. */
#define BC_KEYSET_MAX 3
/* Most public signing keys of other nodes (signing.peer-<name>.pub). */
#define BC_SIGNING_PEERS_MAX 8
/* Most certificates in node-ca.crt: the issuing CA and its chain to a root. */
#define BC_NODE_CA_CHAIN_MAX 8

typedef struct BcKeys
{
	/*
	 * signing.key (current), signing.next.key, signing.previous.key: [0]
	 * signs, all are published; the same for encryption (all open).
	 */
	EVP_PKEY   *signing;		/* == signing_set[0] */
	char		signing_kid[44];
	int			n_signing;
	EVP_PKEY   *signing_set[BC_KEYSET_MAX];
	char		signing_kids[BC_KEYSET_MAX][44];
	/*
	 * signing.peer-<name>.pub: public keys of the other nodes of an HA
	 * formation, each signing with a key of its own (docs/ha.md, "Keys in
	 * each node's TPM"): published in signingKeys after this node's own,
	 * never signing.
	 */
	int			n_signing_peers;
	EVP_PKEY   *signing_peers[BC_SIGNING_PEERS_MAX];
	EVP_PKEY   *encryption;		/* == encryption_set[0] */
	int			n_encryption;
	EVP_PKEY   *encryption_set[BC_KEYSET_MAX];
	/*
	 * node-ca.crt: the issuing CA (node_ca, whose key is node-ca.key) first,
	 * then, for an online intermediate, its chain up to the offline root;
	 * node_ca_anchor is the bundle's last certificate (the one agents pin).
	 */
	X509	   *node_ca;
	EVP_PKEY   *node_ca_key;	/* private */
	int			n_node_ca_chain;
	X509	   *node_ca_chain[BC_NODE_CA_CHAIN_MAX];	/* [0] == node_ca */
	X509	   *node_ca_anchor;
	/* node-ca.previous.crt: earlier intermediates, whose certificates still chain */
	int			n_node_ca_previous;
	X509	   *node_ca_previous[BC_NODE_CA_CHAIN_MAX];
	char	   *node_ca_pem;	/* the whole bundle, PEM */
	char	   *node_ca_chain_b64;	/* "b64 DER","b64 DER"... of the bundle */
	/* challenge.key: seals challenge state (32 bytes, or a P-256 key) */
	bool		has_challenge;
	unsigned char challenge32[BC_STATE_KEY_LEN];
	EVP_PKEY   *challenge_pkey;	/* private; NULL for a 32-byte key */
	/*
	 * jwt-svid.key (optional): signs JWT-SVIDs; NULL when absent.  With it,
	 * jwt-svid.next.key and jwt-svid.previous.key (tools/bc-join-keygen
	 * --stage-jwt-key, --promote-jwt-key): [0] signs, all are published
	 * (jwtKeys, spiffe_bundle(), jwks()), the current one first.
	 */
	EVP_PKEY   *jwt_svid;		/* private; == jwt_svid_set[0] */
	char		jwt_svid_kid[44];
	int			n_jwt_svid;
	EVP_PKEY   *jwt_svid_set[BC_KEYSET_MAX];
	char		jwt_svid_kids[BC_KEYSET_MAX][44];
	/*
	 * ocsp.key (optional): signs OCSP responses, with a responder
	 * certificate node-ca.key issues in memory (ocsp.c); NULL when absent.
	 */
	EVP_PKEY   *ocsp;			/* private */
	/*
	 * ssh-host-ca.key, ssh-user-ca.key (optional, P-256, any kind hwkeys.c
	 * loads): sign OpenSSH host and user certificates (ssh.c); [0] signs,
	 * .next.key and .previous.key are published beside it (ssh_host_ca(),
	 * ssh_user_ca(), signed_ssh()).  n_* is 0 without the key.
	 */
	int			n_ssh_host_ca;
	EVP_PKEY   *ssh_host_ca_set[BC_KEYSET_MAX];
	int			n_ssh_user_ca;
	EVP_PKEY   *ssh_user_ca_set[BC_KEYSET_MAX];
	/* A new number at every load: what was made from the keys is made again. */
	uint64		generation;
} BcKeys;

/*
 * The service keys, loaded from bc_join.key_dir once per backend and again
 * when the directory changes (checked once per transaction).
 */
extern const BcKeys *bc_keys(void);
/*
 * Append a jwt-svid key's public JWK with its kid and one more member
 * (service_keys.c; spiffe_bundle() and jwks()).
 */
extern void bc_append_jwt_jwk(StringInfo buf, EVP_PKEY *key, const char *name, const char *value);
/* Forget the loaded keys (bc_join.key_dir changed). */
extern void bc_keys_reset(void);
/* {"keys": [JWS...]}: doc signed by every live signing key (signed_trust_bundles' shape). */
extern char *bc_signed_by_each(const BcKeys *k, const char *doc);
/* Keys loaded and a trust domain set, or INVALID_CONFIG: before a round runs. */
extern void bc_require_config(void);
/* INVALID_CONFIG when the current signing key is marked compromised (compromise.c). */
extern void bc_require_signing_key_live(const BcKeys *keys);
/*
 * A private key's own operation failed (BC_EKEY: its TPM or token away):
 * INVALID_CONFIG naming what failed, never a refusal; this backend loads
 * its keys and its TPM provider and PKCS#11 engine anew at its next use.
 */
extern void bc_key_failed(const char *what, EVP_PKEY *key, int status) pg_attribute_noreturn();
/* True for the statuses a requester's input causes (a refusal, not a fault of ours). */
extern bool bc_status_is_input(int status);

/* ---------------------------------------------------------------- hwkeys.c */

/* What a private key file of key_dir holds (docs/operator.md, "Keys in hardware"). */
typedef enum BcKeyKind
{
	BC_KEY_FILE,				/* a PEM private key */
	BC_KEY_TPM_FILE,			/* a TSS2 PRIVATE KEY (tpm2 provider) */
	BC_KEY_TPM_HANDLE,			/* handle:0x81... (tpm2 provider) */
	BC_KEY_PKCS11				/* pkcs11:... (libp11's engine) */
} BcKeyKind;

extern char *bc_tpm_tcti;
extern char *bc_pkcs11_module;
/* The kind of key the file at path holds (BC_KEY_FILE when unreadable). */
extern BcKeyKind bc_hw_key_kind(const char *path);
/* The private P-256 key at path, from the file or the hardware it names; NULL and err. */
extern EVP_PKEY *bc_hw_load_private(const char *path, BcKeyKind *kind, char *err, size_t errlen);
/* Unload the tpm2 provider and finish the PKCS#11 engine (no key of theirs may be left). */
extern void bc_hw_reset(void);
/* True when key runs in an engine (a pkcs11: key of libp11's). */
extern bool bc_hw_key_in_engine(const EVP_PKEY *key);
/* Forget which keys the engine handed out (every key was freed). */
extern void bc_hw_forget_keys(void);

/* ------------------------------------------------------------------- spi.c */

/* A plan prepared once per backend and kept. */
typedef struct BcPlan
{
	const char *sql;
	int			nargs;
	Oid			argtypes[16];
	SPIPlanPtr	plan;
} BcPlan;

/* Execute a kept plan (SPI must be connected); returns SPI_processed. */
/* locks.c: lock tags only bc_join's C code can make (pg_locks: advisory, objsubid 3) */
#define BC_AUDIT_CHAINS 16
#define BC_LOCK_AUDIT_CHAIN 0x626a6163	/* "bjac": key = the chain */
#define BC_LOCK_JOIN_KEY 0x626a6b6c		/* "bjkl": key = 32 bits of the CSR key's SPKI hash */
#define BC_LOCK_SSH_HOST 0x626a7368		/* "bjsh": key = 32 bits of the node certificate serial's hash */
#define BC_LOCK_SSH_HOSTNAME 0x626a736e	/* "bjsn": key = 32 bits of a claimed hostname's hash */
extern bool bc_xact_lock(uint32 kind, uint32 key, bool wait);

/* version.c */
extern const char *const bc_library_version;
extern char *bc_installed_sql_version(void);
extern void bc_require_sql_version(void);
extern void bc_spi_connect(void);

extern Oid	bc_spi_callback_oid(const char *what);
extern uint64 bc_spi_exec(BcPlan *p, Datum *values, const char *nulls,
						  bool read_only, long count);
/*
 * Columns of row 0 of the last result.  Callers name their columns with
 * constants (an enum per statement, as pg_cron's Anum_cron_job_*); the
 * _req/typed accessors are for columns the statement never makes NULL and
 * raise rather than read a NULL as a value.
 */
extern char *bc_spi_text(int col);	/* NULL when NULL */
extern Datum bc_spi_datum(int col, bool *isnull);
extern Datum bc_spi_row_datum(uint64 row, int col, bool *isnull);
extern char *bc_spi_row_text(uint64 row, int col);
extern char *bc_spi_text_req(int col);
extern bool bc_spi_bool(int col);
extern int32 bc_spi_int4(int col);
extern int64 bc_spi_int8(int col);
extern bytea *bc_spi_bytea_copy(int col);
/* A bytea copy of n bytes, in the current memory context. */
extern bytea *bc_bytea(const void *data, size_t n);

/* ---------------------------------------------------------------- request.c */

/*
 * The certificate a final round repeated for the same CSR asks for again
 * (admit.c, bc_key_reuse_check): its request must verify again for the
 * same subject as the round that issued it.
 */
typedef struct BcRepeat
{
	char		serial_hex[33];
	char	   *node_id;
	char	   *tenant_id;
	char	   *role;
	int			generation;
	bytea	   *der;
	Datum		allowed_kinds;
	bool		has_allowed_kinds;
	TimestampTz not_before;
	TimestampTz not_after;
	/* what the issuing round verified (node_certs.join_subject) */
	unsigned char subject[BC_SHA256_LEN];
} BcRepeat;

typedef struct BcJoinRequest
{
	/* as sent */
	const char *role;
	const char *attestor;		/* never NULL: "join-token" when absent */
	const char *attestation_b64;	/* NULL when absent */
	const char *sealed_token;	/* NULL when absent */
	Jsonb	   *claims;			/* never NULL: {} when absent */

	/* derived */
	unsigned char *csr_der;
	size_t		csr_der_len;
	bc_csr	   *csr;			/* owned by the call context */
	unsigned char csr_sha256[BC_SHA256_LEN];
	unsigned char csr_spki_sha256[BC_SHA256_LEN];
	char		csr_sha256_b64[44];
	char		csr_spki_sha256_b64[44];
	bytea	   *attestation;	/* decoded, NULL when absent */
	char	   *token;			/* the opened sealed token, NULL when none */
	Jsonb	   *renew_tpm;		/* a renewal's "tpm" member, NULL when none */
	/* a join round repeated for the certificate its CSR holds, or NULL */
	const BcRepeat *repeat;
} BcJoinRequest;

/* One round of a request: an answer, or a JR001 refusal raised. */
typedef Jsonb *(*BcRoundFn) (BcJoinRequest *req, void *arg, MemoryContext outcxt);

/* Parse and bound a JoinRequest; raises 22023 for anything malformed. */
extern void bc_parse_join_request(Jsonb *jb, BcJoinRequest *req, MemoryContext owner);
/* The "csr" field, parsed and hashed into req; raises 22023. */
extern void bc_parse_csr(const char *csr_b64, BcJoinRequest *req, MemoryContext owner);
/* A jbvString as a C string of at most max bytes; raises 22023 naming field. */
extern char *bc_json_string_value(const JsonbValue *v, const char *field, int max);
extern bool bc_is_b64url(const char *s);

/* ereport(ERROR) with SQLSTATE 22023 and INVALID_INPUT in the detail. */
extern void bc_invalid_input(const char *fmt,...) pg_attribute_printf(1, 2) pg_attribute_noreturn();

/* ereport(ERROR) with INVALID_CONFIG: an attestor or the setup is wrong. */
extern void bc_invalid_config(const char *fmt,...) pg_attribute_printf(1, 2) pg_attribute_noreturn();

/* ---------------------------------------------------------------- refusal.c */

/*
 * Raise the uniform refusal.  refusal is "<attestor>:<reason>"; tenant_id is
 * the tenant the evidence authenticated, or NULL.
 */
extern void bc_refuse_join(const char *refusal, const char *tenant_id) pg_attribute_noreturn();

/* The same, with a JSON object the refusal event carries as "detail". */
extern void bc_refuse_join_detail(const char *refusal, const char *tenant_id,
								  const char *detail_json) pg_attribute_noreturn();

/* The refusal pending after a JR001 error was caught (and clear it). */
extern bool bc_take_refusal(char **refusal, char **tenant_id);

/* Record security.join.refused, rate-bounded (SPI connected). */
extern void bc_record_refusal(const char *refusal, const char *tenant_id,
							  const BcJoinRequest *req);

/* What bc_join() returns for every refusal. */
extern Jsonb *bc_refusal_response(void);

extern int	bc_refusal_events_per_minute;

/* ------------------------------------------------------------ compromise.c */

/* The stored certificate was issued by a CA marked compromised (SPI connected). */
extern bool bc_issuer_compromised(bytea *der);
/* The certificate certifies the key whose SPKI SHA-256 is given. */
extern bool bc_cert_key_is(bytea *der, const unsigned char spki_sha256[BC_SHA256_LEN]);
/* The certificate already had its one renewal after its CA's compromise. */
extern bool bc_compromise_renewed(const char *serial);
/* Record that renewal (serial, the certificate that replaced it). */
extern void bc_compromise_record_renewal(const char *serial, const char *successor);
/* INVALID_CONFIG when node_ca is marked compromised; takes the issuing lock first. */
extern void bc_require_issuer_not_compromised(X509 *node_ca);
/* The kids of signing keys marked compromised: a List of C strings (connects SPI itself). */
extern List *bc_compromised_kids(void);
/* Whether ca issued the certificate (DER): issuer name and authority key id (compromise.c). */
extern bool bc_cert_issued_by(X509 *ca, const unsigned char *der, size_t len);
/* True when kid is in kids. */
extern bool bc_kid_listed(List *kids, const char *kid);

/* ---------------------------------------------------------------- events.c */

/* Insert into bc_join.events (SPI connected). */
extern void bc_emit_event(const char *tenant_id, const char *type, Jsonb *payload);
/* The event and its audit row (action, payload as detail) in one statement. */
extern void bc_emit_event_audit(const char *tenant_id, const char *type, const char *action,
								const char *node_id, Jsonb *payload);
/* Insert into bc_join.events, returning the event's id. */
extern int64 bc_emit_event_id(const char *tenant_id, const char *type, Jsonb *payload);
/* Insert into bc_join.audit_log (SPI connected). */
extern void bc_audit(const char *action, const char *tenant_id, const char *node_id,
					 Jsonb *detail);

/* ---------------------------------------------------------------- attestors */

/* What an attestor answers when it admits. */
typedef struct BcAttestResult
{
	char	   *tenant_id;
	char	   *role;
	char	   *pool_id;
	char	   *site_id;
	char	   *trust;
	char	   *node_id;		/* reclaim */
	char	   *token_id;
	int			cert_ttl_seconds;	/* 0: not set */
	Datum		allowed_kinds;	/* text[]; valid when has_allowed_kinds */
	bool		has_allowed_kinds;
	unsigned char bind[BC_SHA256_LEN];
	bool		has_bind;
	char	   *node_key;		/* "tpm" or NULL */
	char	   *node_key_uri;
	/*
	 * The built-in tpm attestor proved node_key_uri (its AK certified the
	 * CSR's key): never set from an SQL attestor's answer, whose statement
	 * renewal could never prove again (join:node-key-statement).
	 */
	bool		statement_proven;
	/* built-in join-token: spend one use of token_id once issued */
	bool		spend_token;
	/* the attestor already enforced the token's expect binding */
	bool		expect_checked;
	/* the token allows a reclaim (set by JoinService when token_id is given) */
	bool		allow_reclaim;
	/* an operator's one-time token named this node (provisioned): a reclaim it allows */
	bool		operator_reclaim;
	/* a JSON object node.joined carries as "detail" (cloud-iid: the instance), or NULL */
	char	   *joined_detail;
	/* called by bc_admit once the node and its certificate exist (discovery: the machine's node), or NULL */
	void		(*admitted) (const struct BcAttestResult *res, const char *node_id);
	void	   *admitted_arg;
	/*
	 * What the attestor verified beyond tenant, role, token, bind and key
	 * (x509pop: the certificate held; provisioned: the token; discovery: the
	 * machine): part of the subject a repeat must verify again.
	 */
	unsigned char subject[BC_SHA256_LEN];
	bool		has_subject;
} BcAttestResult;

/* What an attestor answers: a result, or a deferral. */
typedef struct BcOutcome
{
	bool		deferred;
	BcAttestResult result;
	/* deferral */
	const char *kind;			/* "approval" or "challenge" */
	char	   *request_id;
	int			retry_after_seconds;
	char	   *challenge_b64;
	TimestampTz not_after;
	bool		has_not_after;
} BcOutcome;

typedef struct BcAttestor
{
	const char *id;
	const char *version;
	const char *const *roles;	/* NULL-terminated */
	/* a built-in: a C function; a registered one: an SQL function */
	void		(*verify) (const BcJoinRequest *req, BcOutcome *out);
	Oid			verify_fn;
} BcAttestor;

extern const BcAttestor bc_join_token_attestor;
extern const BcAttestor bc_provisioned_attestor;
extern const BcAttestor bc_tpm_attestor;
extern const BcAttestor bc_x509pop_attestor;

/* attestors/x509pop.c: the iat window and the grace after a node certificate's expiry (seconds). */
extern int	bc_x509pop_window;
extern int	bc_x509pop_grace;
extern const BcAttestor bc_cloud_iid_attestor;
extern const BcAttestor bc_discovery_attestor;


/* registry.c: the attestor registered under id, a built-in, or UNSUPPORTED (0A000). */
extern const BcAttestor *bc_find_attestor(const char *id);

/* What check_join_token found. */
typedef struct BcToken
{
	char	   *token_id;
	char	   *tenant_id;
	char	   *pool_id;
	char	   *site_id;
	char	   *role;
	bool		allow_reclaim;
} BcToken;

/*
 * attestors/join_token.c: lock and check a token for this round without
 * spending it; refuses "<who>:<reason>".
 */
extern void bc_check_join_token(const char *who, const char *token, const char *role,
								Jsonb *claims, BcToken *out);
/* Lock a token's row and compare its secret in constant time; refuses "<who>:unknown|secret". */
extern void bc_lock_token_secret(BcPlan *plan, const char *id, const char *secret,
								 int secret_col, const char *who);
/*
 * A join token offered to an attestor that takes none: refuses
 * "<attestor>:token-attestor" when its expect names attestors without it.
 */
extern void bc_refuse_token_limited_to_others(const char *attestor, const char *token);
/* Spend one use of a checked token. */
extern void bc_spend_join_token(const char *token_id);
/*
 * Enforce a token's expect binding: its "attestors" limit for attestor
 * ("<attestor>:token-attestor"), its claims ("<who>:expect"); returns allow_reclaim.
 */
extern bool bc_check_token_expect(const char *token_id, Jsonb *claims, const char *attestor,
								  const char *who, const char *tenant);

/* custom_attestor.c: the context an attestor's SQL functions get, {"claims", "csrSha256", "csrSpkiSha256", "role"}. */
extern Jsonb *bc_attestor_context(const BcJoinRequest *req);
/*
 * attestors/tpm.c: a renewal of a certificate carrying statement proves it
 * again for the new key with the request's "tpm" member (NULL: none).
 */
extern void bc_tpm_renew_check(const BcJoinRequest *req, Jsonb *tpm, const char *node_id,
							   const char *tenant, const char *statement);

/* custom_attestor.c: run a registered attestor's SQL function. */
extern void bc_custom_attestor_verify(const BcAttestor *att, const BcJoinRequest *req,
								   BcOutcome *out);

/* result.c: parse a jsonb answer, validate a result. */
extern void bc_parse_outcome(const char *attestor, Jsonb *answer, BcOutcome *out);
extern void bc_validate_result(const BcJoinRequest *req, BcAttestResult *res, int *ttl);
extern void bc_validate_deferral(const char *attestor, BcOutcome *out);
/*
 * The subject a round verified: SHA-256 over the attestor, the result's
 * tenant, role, token, bind, node key and statement, and the attestor's own
 * subject; recorded on the certificate (node_certs.join_subject), which a
 * repeat must match.
 */
extern void bc_result_subject(const BcJoinRequest *req, const BcAttestResult *res,
							  unsigned char out[BC_SHA256_LEN]);
/*
 * A repeat's result is for the subject of the round that issued: the same
 * tenant, role, node (or none named) and subject; a token's expect binding
 * enforced as in any round.  Refuses "join:repeat-subject".
 */
extern void bc_validate_repeat(const BcJoinRequest *req, BcAttestResult *res);

/*
 * evidence.c: a built-in attestor's JSON evidence, read without raising
 * (the rule for every built-in attestor's evidence): exactly an object of these members,
 * strings or integers, each once and within its cap; anything else is the
 * refusal "<attestor>:malformed".
 */
typedef struct BcEvidenceMember
{
	const char *name;
	bool		integer;		/* a JSON integer (no fraction, no exponent); else a string */
	bool		required;
	int			max;			/* bytes of a string, digits of an integer */
	char	   *value;			/* out: the string, or the integer's digits; NULL when absent */
} BcEvidenceMember;

extern void bc_evidence_members(const char *attestor, const bytea *evidence,
								BcEvidenceMember *members, int n);
/*
 * The non-raising core (also the TPM evidence, x509pop's payload, a proof's):
 * false where bc_evidence_members refuses.  With others, other members of
 * any value may be there too, every number a plain integer of at most 15
 * digits.
 */
extern bool bc_json_members(const char *data, int len, BcEvidenceMember *members, int n,
							bool others);

/* A scalar member of a signed JSON document, read by path ("google.compute_engine.project_id"). */
typedef struct BcDocField
{
	const char *path;
	bool		integer;		/* a JSON integer; else a string */
	char	   *value;			/* out: the string, or the integer's digits; NULL when absent */
	bool		seen;			/* out */
	bool		wrong_type;		/* out: present, but not of its type */
} BcDocField;

/* Read these fields of a JSON object; false when it is no JSON object or a field is duplicated. */
extern bool bc_doc_fields(const char *data, int len, BcDocField *fields, int n);

/* ----------------------------------------------- attestors/cloud_formats.c */

/*
 * attestors/cloud_formats.c: the document formats cloud-iid verifies; a
 * provider of bc_join.cloud_providers names one (attestors/cloud_iid.c).
 */

/* cloud-iid's evidence members, by index. */
enum
{
	BC_CLOUD_M_PROVIDER,
	BC_CLOUD_M_DOCUMENT,
	BC_CLOUD_M_PKCS7,
	BC_CLOUD_M_TOKEN,
	BC_CLOUD_M_COUNT
};

/* What a format's verifier proved about the instance. */
typedef struct BcCloudIdentity
{
	char	   *account;		/* as signed; NULL when absent */
	char	   *instance;
	bool		has_started;
	int64		started;		/* Unix seconds: AWS pendingTime, GCP instance_creation_timestamp */
} BcCloudIdentity;

struct BcCloudFormat;

/* A provider of the registry: its row of bc_join.cloud_providers, or a built-in's definition. */
typedef struct BcCloudProvider
{
	char	   *name;
	const struct BcCloudFormat *format;
	bool		enabled;		/* it has its row */
	char	   *account_member; /* dotted paths into the signed JSON */
	char	   *instance_member;
	char	   *started_member; /* NULL: none */
	char	  **require;		/* members that must be there besides */
	int			n_require;
	char	   *issuer;			/* gcp-jwt */
	char	   *nonce_member;	/* azure-pkcs7 */
	bool		uuid_ids;
	char	   *audience;		/* gcp-jwt */
	char	   *domain;			/* azure-pkcs7 */
	bool		has_max_age;
	int64		max_age;
} BcCloudProvider;

/* A document format: its evidence members, its verifier, how it binds the CSR. */
typedef struct BcCloudFormat
{
	const char *name;
	/* the members it takes besides provider (bit per BC_CLOUD_M_*) */
	int			members;
	/* checks the evidence (refuses cloud-iid:<reason>); fills the identity as signed */
	void		(*verify) (const BcJoinRequest *req, BcEvidenceMember *m,
						   const BcCloudProvider *p, int64 now, BcCloudIdentity *id);
	/* the refusal for a document without its account or instance */
	const char *no_identity;
	/* whether the document binds the CSR (else a join token must) */
	bool		binds_csr;
} BcCloudFormat;

/* The format named name (bc_join.cloud_providers.format), or NULL. */
extern const BcCloudFormat *bc_cloud_format(const char *name);
/* Whether a provider is defined as its format needs. */
extern bool bc_cloud_provider_coherent(const BcCloudProvider *p);

/*
 * single_use.c: single-use evidence consumed in the running round; the
 * join round's CSR (the default of attestation_uses.csr_sha256) and, for a
 * repeat, the certificate asked for again.
 */
extern void bc_single_use_reset(void);
extern bool bc_single_use_consumed(void);
extern void bc_join_round_begin(const BcJoinRequest *req);
extern void bc_join_round_repeat(const BcJoinRequest *req);
extern void bc_join_round_end(void);
/* The repeat the running join round is, or NULL. */
extern const BcRepeat *bc_round_repeat(void);
/*
 * In a repeat, whether (attestor, subject) in attestation_uses was spent by
 * the round that issued the certificate asked for again (the same CSR).
 */
extern bool bc_spent_by_repeat(const char *attestor, const unsigned char subject[BC_SHA256_LEN]);

/* ------------------------------------------------------- challenge_state.c */

/* A join round begins / ends: the challenge helpers act for its attestor and CSR. */
extern void bc_challenge_round_begin(const BcJoinRequest *req);
extern void bc_challenge_round_end(void);
/*
 * A registered attestor's challenge deferral records its notAfter for the
 * round's CSR; its final rounds past it are refused
 * "<attestor>:challenge-expired" (bc_join.challenge_deadlines).
 */
extern void bc_challenge_deadline_record(const char *attestor, TimestampTz not_after);
extern void bc_challenge_deadline_check(const char *attestor, const char *tenant);
/* The notAfter of a state sealed in the running round, when one was. */
extern bool bc_challenge_sealed_not_after(TimestampTz *not_after);
/* Seal an attestor's payload for the running round's CSR and role until not_after. */
extern char *bc_challenge_seal(const char *attestor, TimestampTz not_after,
							   const unsigned char *payload, size_t n);
/*
 * Open a state sealed in the round before: refuses "<attestor>:state-mismatch"
 * (does not open, another attestor, CSR or role) or
 * "<attestor>:challenge-expired"; the attestor's payload.
 */
extern bytea *bc_challenge_open(const char *attestor, const char *state, const char *tenant,
								TimestampTz *not_after_out);

/* ----------------------------------------------------------------- proof.c */


/*
 * Parse and bound {"csr", "proof"} (and, for who "renew", an optional "tpm"
 * object) into req (the CSR, renew_tpm) and *proof; raises 22023.
 */
extern void bc_parse_proof_request(Jsonb *jb, BcJoinRequest *req, char **proof,
								   const char *who, MemoryContext owner);
/* The serial a proof names, before its signature is checked; refuses "<who>:malformed-proof". */
extern char *bc_proof_serial(const char *proof, const char *who);
/* The certificate a proof names, and its node, as locked for the round. */
typedef struct BcProofCert
{
	char	   *serial;
	char	   *node_id;
	int			generation;		/* the certificate's identity generation */
	bool		expired;
	bool		revoked;
	bool		renewed;		/* revoked because it was renewed */
	bytea	   *der;
	Datum		allowed_kinds;	/* text[], valid when has_allowed_kinds */
	bool		has_allowed_kinds;
	char	   *node_key_uri;	/* NULL: no statement */
	int64		remaining;		/* seconds until notAfter */
	int			node_generation;
	char	   *state;
	char	   *tenant;
	char	   *role;
	bool		quarantined;	/* its node is quarantined (node_attestation) */
	char	   *revocation_reason;	/* NULL: not revoked */
} BcProofCert;

/* Lock the certificate serial names and its node; refuses "<who>:unknown-certificate". */
extern void bc_lock_proof_cert(const char *who, const char *serial, bool for_update,
							   BcProofCert *c);
/* Refuse "<who>:quarantined|revoked|superseded|expired|retired" unless live. */
extern void bc_require_live_cert(const char *who, const BcProofCert *c);
/* The node was seen (last_seen_at, adopting -> active); locked: held for update. */
extern void bc_node_seen(const char *node_id, bool locked);
/* A string member of a verified proof payload, or the refusal. */
extern char *bc_proof_member(const char *who, Jsonb *payload, const char *name, const char *tenant);
/* Non-raising check of a JSON object text (unique members, small whole numbers). */
extern bool bc_json_object_ok(const char *text, size_t len);
/* A request proven by a node key, parsed, checked and run as round for who. */
extern Jsonb *bc_proof_request_round(Jsonb *jb, const char *who, BcRoundFn round);
/* A request proven by a node key without a CSR (commands.c). */
typedef struct BcNodeRequest
{
	const char *proof;
	unsigned char *result;		/* complete: the decoded result, NUL-terminated */
	size_t		result_len;
} BcNodeRequest;
/* Parse {"proof"[, "result"]} and run round (arg: the BcNodeRequest) for who. */
extern Jsonb *bc_node_request_round(Jsonb *jb, const char *who, BcRoundFn round);
/* The certificate a node request's proof names, locked, live, the proof checked. */
extern Jsonb *bc_node_request_proven(const char *who, BcJoinRequest *req, const char *proof,
									 BcProofCert *c);
/* The "session" and "context" selectors of a verified proof, or the refusal. */
extern void bc_proof_selectors(const char *who, Jsonb *pj, const char *tenant,
							   char **session_ref, char **context_ref);
/* The proof's "caller" claim as recorded (NULL: none), or <who>:malformed-proof. */
extern char *bc_proof_caller(const char *who, Jsonb *pj, const char *tenant);
/* The node's session identity for the selectors, reserved within its bounds when new. */
extern char *bc_reserve_session(const char *who, const char *node_id, const char *tenant,
								const char *session_ref, const char *context_ref,
								bool *created);
/*
 * Check a node's proof for purpose who, bound (when bind_member is given)
 * by its string member bind_member == bind_value, else "<who>:<bind_refusal>";
 * returns its verified payload.  bc_check_node_proof binds csrSha256.
 */
extern Jsonb *bc_check_node_proof_bound(const char *who, const char *proof, const char *serial,
										bytea *cert_der, const char *node_id, const char *tenant,
										const char *bind_member, const char *bind_value,
										const char *bind_refusal);
/* Check a node's proof for purpose who; returns its verified payload. */
extern Jsonb *bc_check_node_proof(const char *who, const BcJoinRequest *req, const char *proof,
								  const char *serial, bytea *cert_der, const char *node_id,
								  const char *tenant);

/* ------------------------------------------------------------------- ssh.c */

/* The session an SSH user certificate is asked for (session.c). */
typedef struct BcSshSession
{
	const char *tenant;
	const char *node_id;
	const char *node_serial;	/* the node certificate that proved the request */
	const char *session_id;
	const char *session_ref;
	const char *context_ref;	/* "" when none */
	const char *session_cert_serial;
	const char *spiffe_id;		/* the session's: the key ID */
	TimestampTz not_before;
	TimestampTz not_after;
} BcSshSession;

/*
 * A session proof said "sshUser": true: append "sshCertificate" and
 * "sshSerial" for the CSR's key to payload, or nothing and event
 * ssh.user.refused (SPI connected).
 */
extern void bc_ssh_session_cert(const BcJoinRequest *req, const BcSshSession *u,
								StringInfo payload);

/* ----------------------------------------------------------------- stats.c */

typedef enum BcOutcomeKind
{
	BC_OUTCOME_ADMITTED,
	BC_OUTCOME_DEFERRED_APPROVAL,
	BC_OUTCOME_DEFERRED_CHALLENGE,
	BC_OUTCOME_REFUSED,
	BC_OUTCOME_ERROR
} BcOutcomeKind;
#define BC_OUTCOMES 5

/* Install the shared-memory hooks (from _PG_init, when preloaded). */
extern void bc_stats_init(void);
/* Count one round of attestor with outcome, lasting ms milliseconds. */
extern void bc_stats_record(const char *attestor, BcOutcomeKind outcome, double ms);

/* The fixed reasons of bc_join_attestation_failures_total. */
typedef enum BcAttestFailure
{
	BC_ATTEST_FAILURE_QUOTE,
	BC_ATTEST_FAILURE_EVENTLOG,
	BC_ATTEST_FAILURE_EVENTLOG_REPLAY,
	BC_ATTEST_FAILURE_BOOT_POLICY,
	BC_ATTEST_FAILURE_IMA,
	BC_ATTEST_FAILURE_IMA_REPLAY,
	BC_ATTEST_FAILURE_IMA_POLICY,
	BC_ATTEST_FAILURE_CLOCK_ROLLBACK
} BcAttestFailure;
#define BC_ATTEST_FAILURES 8

/* The BcAttestFailure of "attest:<reason>" or a verdict's reason; -1: none. */
extern int	bc_attest_failure_kind(const char *reason);
/* Count one refused round of attestor by its precise refusal (not rate bounded). */
extern void bc_stats_refusal(const char *attestor, const char *refusal);
/* Count one continuous-attestation failure, when reason is one. */
extern void bc_stats_attest_failure(const char *reason);
/* Note that bc_join.audit_anchor() made an anchor now. */
extern void bc_stats_anchor_made(void);
/* Prometheus text: an escaped label name="value", a family's HELP and TYPE, epoch seconds. */
extern void bc_prom_label(StringInfo buf, const char *name, const char *value);
extern void bc_prom_family(StringInfo buf, const char *name, const char *type, const char *help);
extern double bc_prom_seconds(TimestampTz t);
/* The shared-memory families of bc_join.metrics(). */
extern void bc_stats_append_metrics(StringInfo buf);
extern void bc_stats_append_anchor(StringInfo buf);
extern void bc_stats_append_attest_failures(StringInfo buf);

/* ------------------------------------------------------------- node_cert.c */

typedef struct BcIssued
{
	char		serial_hex[33];
	char	   *spiffe_id;
	TimestampTz not_before;
	TimestampTz not_after;
	unsigned char *leaf_der;
	size_t		leaf_der_len;
} BcIssued;

/* Issue a leaf certificate for the CSR's key with these SANs and subject CN. */
extern void bc_issue_leaf(const BcJoinRequest *req, const char *spiffe_id, const char *cn,
						  const char *extra_uri, int ttl_seconds, BcIssued *out);
/* Issue a node certificate for the CSR's key; SPKI and validity in out. */
extern void bc_issue_node_cert(const BcJoinRequest *req, const char *tenant_id,
							   const char *node_id, const char *node_key_uri,
							   int ttl_seconds, BcIssued *out);

/* ----------------------------------------------------------------- admit.c */

/* Admit: node (new or reclaimed), certificate, binding, events, audit, spend; the signed response. */
extern Jsonb *bc_admit(const BcJoinRequest *req, BcAttestResult *res, int ttl,
					   MemoryContext outcxt);

/*
 * Issue a certificate for the CSR's key and record it in node_certs;
 * join_subject (NULL: a renewal) is what the issuing join verified.
 */
extern void bc_issue_and_record(const BcJoinRequest *req, const char *tenant_id,
								const char *node_id, int generation, Datum allowed_kinds,
								bool has_allowed_kinds, const char *node_key_uri,
								const unsigned char *join_subject, int ttl, BcIssued *issued);

/*
 * One key, one certificate.  Under a lock on the CSR key: nothing when the
 * key holds no certificate; for a join repeated with this very CSR
 * (attestor and role) whose certificate is still current, req->repeat is
 * set (the round must then verify again for the same subject); otherwise
 * the refusal "<who>:key-reused".
 */
extern void bc_key_reuse_check(BcJoinRequest *req, const char *who, bool join);

/*
 * The answer to a repeat that verified again: the certificate asked for,
 * newly signed; the first repeat of a certificate leaves a note in the
 * audit log, later ones nothing.
 */
extern Jsonb *bc_repeat_response(const BcJoinRequest *req, MemoryContext outcxt);

/*
 * The issued answer again with a node certificate issued before (r: its
 * serial, DER, validity, node, tenant, role, generation, allowedKinds;
 * subject unused): a repeated join or a repeated renewal whose answer was
 * lost.  Issues nothing.
 */
extern Jsonb *bc_issued_again(const BcJoinRequest *req, const BcRepeat *r, MemoryContext outcxt);

/* -------------------------------------------------------------- response.c */

/* Open an "issued" payload: status, csrSha256, issuedAt, nodeId, tenantId. */
extern void bc_issued_payload_start(StringInfo payload, const BcJoinRequest *req,
									const char *node_id, const char *tenant_id);
/* Append ,"certificateChain":[leaf, node CA]. */
extern void bc_append_chain(StringInfo payload, const BcIssued *issued);

/* The signed "issued" response for a certificate just recorded. */
extern Jsonb *bc_issued_response(const BcJoinRequest *req, const char *node_id,
								 const char *tenant_id, const char *role, int generation,
								 const BcIssued *issued, Datum allowed_kinds,
								 bool has_allowed_kinds, MemoryContext outcxt);
/* The signed deferral of a join round: pending (approval) or challenge. */
extern Jsonb *bc_deferral_response(const BcJoinRequest *req, const BcOutcome *out,
								   MemoryContext outcxt);

/* Sign a response payload and wrap it as {"status", "response"} in outcxt. */
extern Jsonb *bc_signed_response(const char *status, StringInfo payload, MemoryContext outcxt);

/* ----------------------------------------------------------- check_state.c */

/*
 * bc_join.check_evidence() (check.c): a join round's verification at a given time,
 * writing nothing.  Outside one, bc_check_no_csr and bc_check_no_token are
 * false and bc_check_note does nothing; in one, the two say (and note) that
 * a binding to the CSR or a check a token would satisfy is not made for
 * want of it, and the verifier goes on.
 */
extern bool bc_checking(void);
extern bool bc_check_no_csr(const char *what);
extern bool bc_check_no_token(const char *what);
extern void bc_check_note(const char *key, const char *value);
extern void bc_check_begin(MemoryContext cxt, bool no_csr);
extern void bc_check_end(void);
extern const char *bc_check_read(void);
extern const char *bc_check_unchecked(void);

/* join.c: a join round's verification alone (the role, the sealed token, the attestor's verify). */
extern void bc_join_verify(const BcAttestor *att, BcJoinRequest *req, BcOutcome *out);

/* ----------------------------------------------------------------- round.c */

/*
 * How a body run by bc_round_subxact ended: its answer (NULL: it only
 * verified, or raised), a JR001 refusal's reason and tenant, or any other
 * error, rolled back, for the caller to raise again (ReThrowError).
 */
typedef struct BcRoundEnd
{
	Jsonb	   *answer;
	char	   *refusal;
	char	   *tenant;
	ErrorData  *error;
} BcRoundEnd;

/*
 * Run body in an internal subtransaction: released when it answers, rolled
 * back when it answers NULL or raises; req->token wiped however it ends.
 */
extern void bc_round_subxact(BcJoinRequest *req, BcRoundFn body, void *arg, const char *who,
							 MemoryContext outcxt, BcRoundEnd *end);
/* One round in a subtransaction: a JR001 refusal is recorded and answered. */
extern Jsonb *bc_run_round(BcJoinRequest *req, BcRoundFn round, void *arg,
						   const char *who, MemoryContext outcxt);

#endif							/* BC_JOIN_EXT_H */
