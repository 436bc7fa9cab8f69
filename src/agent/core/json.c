/*
 * json.c: the agent's one getter of a JSON document's string members
 * (json.h), on jansson.
 */
#include <jansson.h>

#include "core/json.h"

/* The string member name of obj, or def (json.h). */
const char *
bcd_json_str(json_t *obj, const char *name, const char *def)
{
	json_t	   *m = json_object_get(obj, name);

	return json_is_string(m) ? json_string_value(m) : def;
}
