/*
 * json.h: the agent's one getter of a JSON document's string members
 * (jansson).
 */
#ifndef BCD_JSON_H
#define BCD_JSON_H

#include <jansson.h>

/*
 * The string member name of obj, or def when obj is not an object, has no
 * member name, or that member is not a string (def may be NULL).  The string
 * is obj's: valid while obj holds it.
 */
const char *bcd_json_str(json_t *obj, const char *name, const char *def);

#endif							/* BCD_JSON_H */
