/*
 * ossl.c: OpenSSL objects and src/common buffers under PostgreSQL's memory
 * management.
 *
 * An object registered here is freed by a reset callback of the memory
 * context that owns it, so an ereport(ERROR) anywhere after the registration
 * cannot leak it: the context is reset during abort.  The pattern is
 * pgcrypto's ResourceOwner wrapping, with memory-context lifetime instead.
 *
 * The one rule (docs/design.md, "Memory and OpenSSL objects"): what a
 * context owns is freed by the context, never by hand.  So the helpers take
 * the caller's pointer by address and clear it: the variable that held the
 * object is NULL once the context owns it (a free of it afterwards is a
 * no-op, never a double free), and the pointer they return is borrowed, to
 * use until the context is reset and never to free.  test/tools/ownership-check
 * (run by the unit suite) refuses a free of a borrowed pointer in src/ext.
 */
#include "bc_join.h"

#include "utils/memutils.h"

#include <openssl/err.h>

typedef struct OwnedObject
{
	MemoryContextCallback cb;
	void	   *obj;
} OwnedObject;

/* Reset callback: free an owned EVP_PKEY. */
static void
free_pkey_cb(void *arg)
{
	OwnedObject *o = (OwnedObject *) arg;

	EVP_PKEY_free((EVP_PKEY *) o->obj);
	o->obj = NULL;
}

/* Reset callback: free an owned X509. */
static void
free_x509_cb(void *arg)
{
	OwnedObject *o = (OwnedObject *) arg;

	X509_free((X509 *) o->obj);
	o->obj = NULL;
}

/* Reset callback: free an owned stack of X509 and its certificates. */
static void
free_x509_stack_cb(void *arg)
{
	OwnedObject *o = (OwnedObject *) arg;

	sk_X509_pop_free((STACK_OF(X509) *) o->obj, X509_free);
	o->obj = NULL;
}

/* Reset callback: free an owned parsed CSR. */
static void
free_csr_cb(void *arg)
{
	OwnedObject *o = (OwnedObject *) arg;

	bc_csr_free((bc_csr *) o->obj);
	o->obj = NULL;
}

/*
 * Register *objp with cxt and clear *objp; returns the object, borrowed.
 * Frees it at once if the registration itself fails (out of memory).
 */
static void *
own(MemoryContext cxt, void **objp, MemoryContextCallbackFunction fn)
{
	OwnedObject *o;
	void	   *obj = *objp;

	*objp = NULL;
	if (obj == NULL)
		return NULL;
	o = MemoryContextAllocExtended(cxt, sizeof(OwnedObject), MCXT_ALLOC_NO_OOM);
	if (o == NULL)
	{
		OwnedObject tmp = {.obj = obj};

		fn(&tmp);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	o->obj = obj;
	o->cb.func = fn;
	o->cb.arg = o;
	MemoryContextRegisterResetCallback(cxt, &o->cb);
	return obj;
}

/* Give *key to a memory context (*key becomes NULL); the key, borrowed. */
EVP_PKEY *
bc_own_pkey(MemoryContext cxt, EVP_PKEY **key)
{
	return own(cxt, (void **) key, free_pkey_cb);
}

/* Give *cert to a memory context (*cert becomes NULL); the certificate, borrowed. */
X509 *
bc_own_x509(MemoryContext cxt, X509 **cert)
{
	return own(cxt, (void **) cert, free_x509_cb);
}

/* Give *sk and its certificates to a memory context (*sk becomes NULL); the stack, borrowed. */
STACK_OF(X509) *
bc_own_x509_stack(MemoryContext cxt, STACK_OF(X509) **sk)
{
	return own(cxt, (void **) sk, free_x509_stack_cb);
}

/* Give *csr to a memory context (*csr becomes NULL); the CSR, borrowed. */
bc_csr *
bc_own_csr(MemoryContext cxt, bc_csr **csr)
{
	return own(cxt, (void **) csr, free_csr_cb);
}

/* Copy a malloc()ed C string from src/common into palloc memory and free it. */
char *
bc_take_cstring(char *malloced)
{
	char	   *out;
	size_t		len;

	if (malloced == NULL)
		return NULL;
	len = strlen(malloced);
	out = MemoryContextAllocExtended(CurrentMemoryContext, len + 1, MCXT_ALLOC_NO_OOM);
	if (out == NULL)
	{
		bc_free(malloced);
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	}
	memcpy(out, malloced, len + 1);
	bc_free(malloced);
	return out;
}

/* Copy a malloc()ed buffer into a palloc'd bytea and free (cleanse when secret) it. */
bytea *
bc_take_bytea(unsigned char *malloced, size_t len, bool secret)
{
	bytea	   *out;

	out = MemoryContextAllocExtended(CurrentMemoryContext, len + VARHDRSZ,
									 MCXT_ALLOC_NO_OOM);
	if (out == NULL)
	{
		if (secret)
			bc_free_secret(malloced, len);
		else
			bc_free(malloced);
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	}
	SET_VARSIZE(out, len + VARHDRSZ);
	memcpy(VARDATA(out), malloced, len);
	if (secret)
		bc_free_secret(malloced, len);
	else
		bc_free(malloced);
	return out;
}

/* errdetail() carrying what failed and OpenSSL's queued errors. */
int
bc_errdetail_openssl(const char *what)
{
	char		buf[512];

	bc_ossl_errors(buf, sizeof(buf));
	if (buf[0] != '\0')
		return errdetail("%s: %s", what, buf);
	return errdetail("%s.", what);
}
