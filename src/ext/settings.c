/*
 * settings.c: the values of the bc_join.* settings every file reads, and the
 * check of the one every identity needs.  _PG_init (bc_join.c) registers
 * them; here they are the ground floor, so that reading a setting depends on
 * no other file.
 */
#include "bc_join.h"

char	   *bc_key_dir = NULL;
char	   *bc_trust_domain = NULL;
int			bc_cert_ttl = BC_SERVICE_TTL_MAX;
int			bc_clock_offset = 0;
int			bc_session_ttl = 900;
int			bc_jwt_svid_ttl = 300;
char	   *bc_jwt_issuer = NULL;
int			bc_join_request_ttl = 86400;
char	   *bc_crl_url = NULL;
int			bc_crl_validity = 3600;
char	   *bc_ocsp_url = NULL;
int			bc_ocsp_validity = 300;
int			bc_x509pop_window = 300;
int			bc_x509pop_grace = 30 * 86400;
char	   *bc_tpm_tcti = NULL;
char	   *bc_pkcs11_module = NULL;

/* The trust domain every identity is issued under; INVALID_CONFIG when unset. */
const char *
bc_require_trust_domain(void)
{
	if (bc_trust_domain == NULL || bc_trust_domain[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_BC_INVALID_CONFIG),
				 errmsg("bc_join.trust_domain is not set"),
				 errdetail("INVALID_CONFIG: every identity is issued under the trust domain.")));
	return bc_trust_domain;
}
