/*
 * node_cert.c: node certificates, issued by the node CA from bc_join.key_dir.
 *
 * X.509 v3, ECDSA P-256 with SHA-256, 128 random serial bits, the CSR's key
 * and nothing else from the CSR, URI SAN spiffe://<trust domain>/tenant/
 * <tenantId>/node/<nodeId> and, when proven, the node key statement after it.
 */
#include "bc_join.h"

/* Issue a node certificate for the CSR's key; SPKI and validity in out. */
void
bc_issue_node_cert(const BcJoinRequest *req, const char *tenant_id,
				   const char *node_id, const char *node_key_uri,
				   int ttl_seconds, BcIssued *out)
{
	bc_issue_leaf(req, psprintf(BC_SPIFFE_NODE_FMT, bc_trust_domain,
								tenant_id, node_id),
				  node_id, node_key_uri, ttl_seconds, out);
}

/*
 * Issue a leaf certificate for the CSR's key with spiffe_id (then extra_uri)
 * as its URI SANs and subject CN=cn, valid from a minute ago for
 * ttl_seconds.
 */
void
bc_issue_leaf(const BcJoinRequest *req, const char *spiffe_id, const char *cn,
			  const char *extra_uri, int ttl_seconds, BcIssued *out)
{
	const BcKeys *keys = bc_keys();
	const char *uris[2];
	bc_cert_params p;
	unsigned char serial[16];
	unsigned char *der = NULL;
	size_t		der_len = 0;
	TimestampTz now = bc_now();
	int			i;
	int			st;

	(void) bc_require_trust_domain();
	/* Never from a CA marked compromised (compromise.c). */
	bc_require_issuer_not_compromised(keys->node_ca);

	out->spiffe_id = pstrdup(spiffe_id);
	uris[0] = out->spiffe_id;
	uris[1] = extra_uri;

	/* Back-date a minute for clock skew between hosts. */
	out->not_before = now - 60 * USECS_PER_SEC;
	out->not_after = now + (TimestampTz) ttl_seconds * USECS_PER_SEC;

	memset(&p, 0, sizeof(p));
	p.ca_cert = keys->node_ca;
	p.ca_key = keys->node_ca_key;
	p.subject_csr = req->csr;
	p.subject_cn = cn;
	p.uris = uris;
	p.crl_url = (bc_crl_url != NULL && bc_crl_url[0] != '\0') ? bc_crl_url : NULL;
	p.ocsp_url = (bc_ocsp_url != NULL && bc_ocsp_url[0] != '\0') ? bc_ocsp_url : NULL;
	p.n_uris = extra_uri ? 2 : 1;
	p.not_before = bc_timestamp_to_unix(out->not_before);
	p.not_after = bc_timestamp_to_unix(out->not_after);

	/* Built from templates, encoded once (pki.c): no X509 object. */
	st = bc_cert_issue_der(&p, serial, &der, &der_len);
	if (st != BC_OK)
		bc_key_failed("issue a node certificate with node-ca.key", keys->node_ca_key, st);
	out->leaf_der_len = der_len;
	out->leaf_der = (unsigned char *) VARDATA(bc_take_bytea(der, der_len, false));

	for (i = 0; i < 16; i++)
		snprintf(out->serial_hex + 2 * i, 3, "%02x", serial[i]);
}
