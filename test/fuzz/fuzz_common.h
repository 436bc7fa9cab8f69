/*
 * fuzz_common.h: what the libFuzzer targets of test/fuzz share: fixed keys
 * derived from a fixed seed (never a committed private key), the committed
 * public artefacts under test/fuzz/keys/, and a bounded file read.
 */
#ifndef BC_FUZZ_COMMON_H
#define BC_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>

/* The directory test/fuzz (set by mk/fuzz.mk; BCJ_FUZZ_DIR overrides it). */
#ifndef BC_FUZZ_DIR
#define BC_FUZZ_DIR "test/fuzz"
#endif

/*
 * A P-256 private key whose scalar is SHA-256("bc_join fuzz key: " name):
 * the same key in every run and every process, never written anywhere.
 * Aborts when OpenSSL cannot make it.
 */
EVP_PKEY   *bc_fuzz_p256_key(const char *name);

/* 32 bytes SHA-256("bc_join fuzz key: " name). */
void		bc_fuzz_secret32(const char *name, unsigned char out[32]);

/* The path of a file under test/fuzz (static buffer). */
const char *bc_fuzz_path(const char *rel);

/* Read a file of at most cap bytes (malloc, NUL-terminated); aborts when it cannot. */
unsigned char *bc_fuzz_read_file(const char *rel, size_t cap, size_t *len);

/* Abort with a message: a property the target asserts does not hold. */
#define BC_FUZZ_ASSERT(cond) \
	do { if (!(cond)) bc_fuzz_fail(__FILE__, __LINE__, #cond); } while (0)
void		bc_fuzz_fail(const char *file, int line, const char *what) __attribute__((noreturn));

#endif
