/* SHA-256 (FIPS 180-4 §6.2), for checking dataset files against the sums in meta.yaml.
 * None of the dependencies (libc, libyaml, libzmq, OpenBLAS, Lua, libffi) exports one. */
#ifndef BIVOUAC_SHA256_H
#define BIVOUAC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define BV_SHA256_BYTES 32
#define BV_SHA256_HEX 65 /* 64 lowercase hex digits and a NUL */

typedef struct bv_sha256 {
    uint32_t state[8];
    uint64_t bytes;        /* message length so far */
    uint8_t block[64];     /* a partial block waiting for more input */
    size_t fill;           /* bytes of it in use */
    int hardware;          /* use the x86 SHA extensions; init sets it where the CPU has them
                            * (a test may clear it to check the portable code) */
} bv_sha256;

void bv_sha256_init(bv_sha256 *ctx);
void bv_sha256_update(bv_sha256 *ctx, const void *data, size_t len);
/* Pads, writes the digest, and leaves ctx to be init'ed again before reuse. */
void bv_sha256_final(bv_sha256 *ctx, uint8_t digest[BV_SHA256_BYTES]);
/* The digest as lowercase hex, as sha256sum prints it. */
void bv_sha256_hex(const uint8_t digest[BV_SHA256_BYTES], char hex[BV_SHA256_HEX]);

#endif
