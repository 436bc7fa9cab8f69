/*
 * ocsp.c: bc_join.ocsp_response(), the node CA's OCSP responder (RFC 6960;
 * the gateway serves it at /v1/ocsp, docs/operator.md "OCSP").
 *
 * The request is parsed and bounded by src/common/ocsp.c (OpenSSL's
 * d2i_OCSP_REQUEST); a malformed one is answered malformedRequest, unsigned.
 * Otherwise each CertID gets good, revoked (time and reason as the CRL
 * gives them, crl.c) or unknown: good or revoked only when its issuer hashes
 * (SHA-1 or SHA-256) name the current issuing intermediate (node-ca.crt) or
 * the previous one (node-ca.previous.crt) and its serial is a node or
 * session certificate that intermediate issued.  thisUpdate is the service
 * clock, nextUpdate bc_join.ocsp_validity seconds later; the nonce is echoed.
 *
 * The answer is signed by ocsp.key through a delegated responder
 * certificate (id-kp-OCSPSigning, id-pkix-ocsp-nocheck) that this backend
 * mints in memory from node-ca.key, 24 hours from five minutes back, and
 * mints again at half its life or when the key directory changes.  Nothing
 * is written: the answer works in a read-only transaction and on a standby.
 */
#include "bc_join.h"

#include "access/detoast.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include <openssl/err.h>
#include <openssl/ocsp.h>

#include "ocsp.h"

/* The responder certificate's lifetime and how far back it starts. */
#define RESPONDER_LIFETIME 86400
#define RESPONDER_BACKDATE 300

/* The responder certificate this backend minted, its notBefore, and the keys' load. */
static X509 *responder = NULL;
static int64 responder_not_before = 0;
static uint64 responder_generation = 0;

/* A node or session certificate by serial: its DER, revocation time and reason. */
static BcPlan lookup = {
	"SELECT certificate, floor(extract(epoch FROM revoked_at))::bigint, revocation_reason "
	"FROM bc_join.node_certs WHERE serial = $1 "
	"UNION ALL "
	"SELECT certificate, floor(extract(epoch FROM revoked_at))::bigint, revocation_reason "
	"FROM bc_join.session_certs WHERE serial = $1",
	1, {TEXTOID}
};

enum
{
	Anum_lookup_certificate = 1,
	Anum_lookup_revoked_at,
	Anum_lookup_reason
};

/*
 * The responder certificate for ocsp.key, issued by the current issuing
 * intermediate: minted when there is none, when the keys were loaded again
 * (the key directory changed), at half its life, or when the service clock
 * is before it (bc_join.clock_offset moved back).
 */
static X509 *
current_responder(const BcKeys *k, int64 now)
{
	X509	   *cert = NULL;
	int			st;

	if (responder != NULL && responder_generation == k->generation &&
		now >= responder_not_before && now < responder_not_before + RESPONDER_LIFETIME / 2)
		return responder;
	X509_free(responder);
	responder = NULL;
	st = bc_ocsp_responder_cert(k->node_ca, k->node_ca_key, k->ocsp, now - RESPONDER_BACKDATE,
								now - RESPONDER_BACKDATE + RESPONDER_LIFETIME, &cert);
	if (st != BC_OK)
		bc_key_failed("issue the OCSP responder certificate with node-ca.key", k->node_ca_key, st);
	responder = cert;
	responder_not_before = now - RESPONDER_BACKDATE;
	responder_generation = k->generation;
	return responder;
}

/* The unsigned answer of an error status, as bytea. */
static bytea *
error_answer(int status)
{
	unsigned char *der = NULL;
	size_t		len = 0;

	if (bc_ocsp_error_der(status, &der, &len) != BC_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not encode an OCSP error response")));
	return bc_take_bytea(der, len, false);
}

/*
 * The status of one CertID issued by ca: the row of its serial whose
 * certificate ca issued, good or revoked; unknown when there is none.
 */
static void
certid_status(const bc_ocsp_certid *id, X509 *ca, bc_ocsp_single *out)
{
	Datum		arg = CStringGetTextDatum(id->serial_hex);
	uint64		n = bc_spi_exec(&lookup, &arg, NULL, true, 0);
	uint64		row;

	for (row = 0; row < n; row++)
	{
		bool		isnull;
		bytea	   *der = DatumGetByteaPP(bc_spi_row_datum(row, Anum_lookup_certificate, &isnull));
		Datum		at = bc_spi_row_datum(row, Anum_lookup_revoked_at, &isnull);
		bool		revoked = !isnull;
		char	   *reason = bc_spi_row_text(row, Anum_lookup_reason);
		bool		issued = bc_cert_issued_by(ca, (const unsigned char *) VARDATA_ANY(der),
											   VARSIZE_ANY_EXHDR(der));

		if (!issued)
			continue;
		if (!revoked)
		{
			out->status = V_OCSP_CERTSTATUS_GOOD;
			return;
		}
		/* The CRL's mapping; unspecified is written as no reason, as there. */
		out->status = V_OCSP_CERTSTATUS_REVOKED;
		out->revoked_at = DatumGetInt64(at);
		out->reason = bc_crl_reason_code(reason);
		if (out->reason == CRL_REASON_UNSPECIFIED)
			out->reason = -1;
		return;
	}
}

PG_FUNCTION_INFO_V1(bc_ocsp_response);

/* bc_join.ocsp_response(request bytea): the DER OCSPResponse answering request. */
Datum
bc_ocsp_response(PG_FUNCTION_ARGS)
{
	bc_ocsp_request *req;
	bc_ocsp_single *singles;
	bytea	   *in;
	char		why[160];
	const BcKeys *k;
	X509	   *cas[2];
	X509	   *signer;
	int64		now;
	unsigned char *der = NULL;
	size_t		len = 0;
	int			i;
	int			st;

	/* Bounded before it is detoasted: a larger request is malformed. */
	if (PG_ARGISNULL(0) ||
		toast_raw_datum_size(PG_GETARG_DATUM(0)) - VARHDRSZ > BC_OCSP_REQUEST_MAX)
	{
		ereport(LOG,
				(errmsg("bc_join.ocsp_response answered malformedRequest"),
				 errdetail("The request is %s.", PG_ARGISNULL(0) ? "NULL" : "over 4096 bytes"),
				 errhidestmt(true)));
		PG_RETURN_BYTEA_P(error_answer(OCSP_RESPONSE_STATUS_MALFORMEDREQUEST));
	}
	in = PG_GETARG_BYTEA_PP(0);
	req = palloc(sizeof(*req));
	if (bc_ocsp_parse_request((const unsigned char *) VARDATA_ANY(in), VARSIZE_ANY_EXHDR(in),
							  req, why, sizeof(why)) != 0)
	{
		ereport(LOG,
				(errmsg("bc_join.ocsp_response answered malformedRequest"),
				 errdetail("OCSP request refused: %s.", why),
				 errhidestmt(true)));
		PG_RETURN_BYTEA_P(error_answer(OCSP_RESPONSE_STATUS_MALFORMEDREQUEST));
	}

	k = bc_keys();
	if (k->ocsp == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("bc_join key directory has no ocsp.key"),
				 errdetail("INVALID_CONFIG: OCSP responses are signed with %s/ocsp.key: "
						   "bc-join-keygen --add-ocsp-key %s", bc_key_dir, bc_key_dir)));
	now = bc_timestamp_to_unix(bc_now());
	signer = current_responder(k, now);
	cas[0] = k->node_ca;
	cas[1] = k->n_node_ca_previous > 0 ? k->node_ca_previous[0] : NULL;

	singles = palloc0(sizeof(*singles) * req->n);
	bc_spi_connect();
	for (i = 0; i < req->n; i++)
	{
		const bc_ocsp_certid *id = &req->ids[i];
		int			c;

		CHECK_FOR_INTERRUPTS();
		singles[i].status = V_OCSP_CERTSTATUS_UNKNOWN;
		if (!bc_serial_valid(id->serial_hex))
			continue;
		for (c = 0; c < 2; c++)
		{
			if (cas[c] != NULL && bc_ocsp_issuer_matches(id, cas[c]))
			{
				certid_status(id, cas[c], &singles[i]);
				break;
			}
		}
	}
	SPI_finish();

	/* node-ca.crt's intermediate with the responder: bcd, which holds the root
	 * and its own certificate's chain, verifies an answer about a certificate
	 * of the previous intermediate (after --rotate-intermediate) with it */
	st = bc_ocsp_response_der(req, singles, now, now + bc_ocsp_validity, signer, k->node_ca,
							  k->ocsp, &der, &len);
	if (st != BC_OK)
		bc_key_failed("sign an OCSP response with ocsp.key", k->ocsp, st);
	PG_RETURN_BYTEA_P(bc_take_bytea(der, len, false));
}
