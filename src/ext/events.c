/*
 * events.c: the event stream (bc_join.events) and the audit log.
 */
#include "bc_join.h"

#include "catalog/pg_type_d.h"
#include "utils/builtins.h"

static BcPlan insert_event = {
	"INSERT INTO bc_join.events (tenant_id, type, payload) VALUES ($1, $2, $3)",
	3, {TEXTOID, TEXTOID, JSONBOID}
};

static BcPlan insert_audit = {
	"INSERT INTO bc_join.audit_log (action, tenant_id, node_id, detail) VALUES ($1, $2, $3, $4)",
	4, {TEXTOID, TEXTOID, TEXTOID, JSONBOID}
};

/* Insert into bc_join.events (SPI connected). */
void
bc_emit_event(const char *tenant_id, const char *type, Jsonb *payload)
{
	Datum		values[3];

	values[0] = CStringGetTextDatum(tenant_id);
	values[1] = CStringGetTextDatum(type);
	values[2] = JsonbPGetDatum(payload);
	bc_spi_exec(&insert_event, values, NULL, false, 0);
}

/* Insert into bc_join.audit_log (SPI connected). */
void
bc_audit(const char *action, const char *tenant_id, const char *node_id, Jsonb *detail)
{
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	values[0] = CStringGetTextDatum(action);
	if (tenant_id)
		values[1] = CStringGetTextDatum(tenant_id);
	else
		nulls[1] = 'n';
	if (node_id)
		values[2] = CStringGetTextDatum(node_id);
	else
		nulls[2] = 'n';
	values[3] = JsonbPGetDatum(detail);
	bc_spi_exec(&insert_audit, values, nulls, false, 0);
}

/* jsonb from JSON text. */
Jsonb *
bc_jsonb(const char *text)
{
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
}
