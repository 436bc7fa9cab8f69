/*
 * protobuf.c: the Workload API's conversions: a protobuf-c message packed
 * into a gRPC byte buffer and a byte buffer's bytes flattened (the request
 * is unpacked from them against its method's descriptor, call.c), and a
 * JSON object as a google.protobuf.Struct (ValidateJWTSVIDResponse.claims).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <openssl/crypto.h>

#include "workload/internal.h"

/* m packed into a gRPC byte buffer (the packed bytes wiped: it may hold a key); NULL on OOM. */
grpc_byte_buffer *
wl_pack(const ProtobufCMessage *m)
{
	size_t		n = protobuf_c_message_get_packed_size(m);
	uint8_t    *buf = malloc(n ? n : 1);
	grpc_slice	sl;
	grpc_byte_buffer *bb;

	if (buf == NULL)
		return NULL;
	protobuf_c_message_pack(m, buf);
	sl = grpc_slice_from_copied_buffer((const char *) buf, n);
	bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_slice_unref(sl);
	OPENSSL_cleanse(buf, n);	/* an X509-SVID response holds the key */
	free(buf);
	return bb;
}

/* The bytes of bb, in one malloc()ed buffer of *len bytes; NULL on OOM. */
uint8_t *
wl_flatten(grpc_byte_buffer *bb, size_t *len)
{
	grpc_byte_buffer_reader r;
	grpc_slice	sl;
	uint8_t    *out;

	*len = 0;
	if (bb == NULL || !grpc_byte_buffer_reader_init(&r, bb))
		return NULL;
	sl = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	*len = GRPC_SLICE_LENGTH(sl);
	out = malloc(*len ? *len : 1);
	if (out != NULL)
		memcpy(out, GRPC_SLICE_START_PTR(sl), *len);
	grpc_slice_unref(sl);
	return out;
}

/* v as a google.protobuf.Value (malloc()ed, free with protobuf_c_message_free_unpacked); NULL on OOM. */
static Google__Protobuf__Value *
json_to_value(json_t *v)
{
	Google__Protobuf__Value *pv = malloc(sizeof(*pv));
	json_t	   *e;
	size_t		i;

	if (pv == NULL)
		return NULL;
	google__protobuf__value__init(pv);
	switch (json_typeof(v))
	{
		case JSON_OBJECT:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
			pv->struct_value = wl_json_to_struct(v);
			break;
		case JSON_ARRAY:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE;
			pv->list_value = malloc(sizeof(*pv->list_value));
			if (pv->list_value == NULL)
				break;
			google__protobuf__list_value__init(pv->list_value);
			pv->list_value->values = calloc(json_array_size(v) + 1, sizeof(*pv->list_value->values));
			if (pv->list_value->values == NULL)
				break;
			json_array_foreach(v, i, e)
				if ((pv->list_value->values[pv->list_value->n_values] = json_to_value(e)) != NULL)
				pv->list_value->n_values++;
			break;
		case JSON_STRING:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
			pv->string_value = strdup(json_string_value(v));
			break;
		case JSON_INTEGER:
		case JSON_REAL:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
			pv->number_value = json_number_value(v);
			break;
		case JSON_TRUE:
		case JSON_FALSE:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
			pv->bool_value = json_is_true(v);
			break;
		case JSON_NULL:
			pv->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE;
			pv->null_value = GOOGLE__PROTOBUF__NULL_VALUE__NULL_VALUE;
			break;
	}
	if ((pv->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE && pv->struct_value == NULL) ||
		(pv->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE &&
		 (pv->list_value == NULL || pv->list_value->values == NULL)) ||
		(pv->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE && pv->string_value == NULL))
	{
		protobuf_c_message_free_unpacked(&pv->base, NULL);
		return NULL;
	}
	return pv;
}

/*
 * obj as a google.protobuf.Struct (malloc()ed, free with
 * protobuf_c_message_free_unpacked); members that cannot be made are left
 * out; NULL on OOM.
 */
Google__Protobuf__Struct *
wl_json_to_struct(json_t *obj)
{
	Google__Protobuf__Struct *st = malloc(sizeof(*st));
	const char *k;
	json_t	   *v;

	if (st == NULL)
		return NULL;
	google__protobuf__struct__init(st);
	st->fields = calloc(json_object_size(obj) + 1, sizeof(*st->fields));
	if (st->fields == NULL)
	{
		free(st);
		return NULL;
	}
	json_object_foreach(obj, k, v)
	{
		Google__Protobuf__Struct__FieldsEntry *fe = malloc(sizeof(*fe));

		if (fe == NULL)
			continue;
		google__protobuf__struct__fields_entry__init(fe);
		fe->key = strdup(k);
		fe->value = json_to_value(v);
		if (fe->key == NULL || fe->value == NULL)
		{
			protobuf_c_message_free_unpacked(&fe->base, NULL);
			continue;
		}
		st->fields[st->n_fields++] = fe;
	}
	return st;
}
