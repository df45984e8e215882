/* SHA-256 as FIPS 180-4 §6.2.2 writes it, in portable C (about 200 MB/s on one core), and
 * with the x86 SHA extensions where the CPU has them (several times faster). A first load
 * of a dataset pays for it (docs/limits.md, "Datasets"); loads from the binary cache hash
 * nothing. */
#include "sha256.h"

#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86_SHA 1
#else
#define HAVE_X86_SHA 0
#endif

/* §4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64
 * primes. */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* §6.2.2 steps 1-4 for one 512-bit block. */
static void compress(uint32_t state[8], const uint8_t block[64])
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; t++) {
        uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                      K[t] + w[t];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

#if HAVE_X86_SHA
/* The same rounds with SHA-NI: sha256rnds2 does two rounds on the state held as ABEF and
 * CDGH, sha256msg1/msg2 extend the message schedule four words at a time (Intel, "Intel SHA
 * Extensions", 2013, which lays out this register use). Group i covers rounds 4i to 4i+3;
 * m[i % 4] holds W[4i..4i+3]. */
__attribute__((target("sha,sse4.1,ssse3"))) static void compress_x86(uint32_t state[8],
                                                                       const uint8_t *data,
                                                                       size_t blocks)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[0]), 0xB1);
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[4]), 0x1B);
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8); /* ABEF */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);      /* CDGH */
    for (; blocks > 0; blocks--, data += 64) {
        __m128i abef = s0, cdgh = s1, m[4];
        for (int i = 0; i < 4; i++)
            m[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16 * i)), bswap);
        for (int i = 0; i < 16; i++) {
            __m128i msg = _mm_add_epi32(m[i % 4], _mm_loadu_si128((const __m128i *)&K[4 * i]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, msg);
            if (i >= 3 && i <= 14) { /* finish W for group i + 1 */
                __m128i w7 = _mm_alignr_epi8(m[i % 4], m[(i + 3) % 4], 4);
                m[(i + 1) % 4] = _mm_sha256msg2_epu32(_mm_add_epi32(m[(i + 1) % 4], w7), m[i % 4]);
            }
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(msg, 0x0E));
            if (i >= 1 && i <= 12) /* start W for group i + 3 */
                m[(i + 3) % 4] = _mm_sha256msg1_epu32(m[(i + 3) % 4], m[i % 4]);
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);        /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);         /* DCHG */
    s0 = _mm_blend_epi16(tmp, s1, 0xF0);      /* DCBA */
    s1 = _mm_alignr_epi8(s1, tmp, 8);         /* HGFE */
    _mm_storeu_si128((__m128i *)&state[0], s0);
    _mm_storeu_si128((__m128i *)&state[4], s1);
}

static bool cpu_has_sha(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3))
        return false;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}
#endif

static void compress_blocks(bv_sha256 *ctx, const uint8_t *data, size_t blocks)
{
#if HAVE_X86_SHA
    if (ctx->hardware) {
        compress_x86(ctx->state, data, blocks);
        return;
    }
#endif
    for (; blocks > 0; blocks--, data += 64)
        compress(ctx->state, data);
}

void bv_sha256_init(bv_sha256 *ctx)
{
    /* §5.3.3: the fractional parts of the square roots of the first 8 primes. */
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(ctx->state, H0, sizeof H0);
    ctx->bytes = 0;
    ctx->fill = 0;
#if HAVE_X86_SHA
    ctx->hardware = cpu_has_sha();
#else
    ctx->hardware = 0;
#endif
}

void bv_sha256_update(bv_sha256 *ctx, const void *data, size_t len)
{
    const uint8_t *p = data;
    ctx->bytes += len;
    if (ctx->fill > 0) {
        size_t take = 64 - ctx->fill < len ? 64 - ctx->fill : len;
        memcpy(ctx->block + ctx->fill, p, take);
        ctx->fill += take;
        p += take;
        len -= take;
        if (ctx->fill < 64)
            return;
        compress_blocks(ctx, ctx->block, 1);
        ctx->fill = 0;
    }
    compress_blocks(ctx, p, len / 64);
    p += len / 64 * 64;
    len %= 64;
    memcpy(ctx->block, p, len);
    ctx->fill = len;
}

void bv_sha256_final(bv_sha256 *ctx, uint8_t digest[BV_SHA256_BYTES])
{
    /* §5.1.1: a 1 bit, zeros up to 56 mod 64 bytes, then the length in bits, big-endian. */
    uint64_t bits = ctx->bytes * 8;
    ctx->block[ctx->fill++] = 0x80;
    if (ctx->fill > 56) {
        memset(ctx->block + ctx->fill, 0, 64 - ctx->fill);
        compress_blocks(ctx, ctx->block, 1);
        ctx->fill = 0;
    }
    memset(ctx->block + ctx->fill, 0, 56 - ctx->fill);
    store_be32(ctx->block + 56, (uint32_t)(bits >> 32));
    store_be32(ctx->block + 60, (uint32_t)bits);
    compress_blocks(ctx, ctx->block, 1);
    for (int i = 0; i < 8; i++)
        store_be32(digest + 4 * i, ctx->state[i]);
    memset(ctx, 0, sizeof *ctx);
}

void bv_sha256_hex(const uint8_t digest[BV_SHA256_BYTES], char hex[BV_SHA256_HEX])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < BV_SHA256_BYTES; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[2 * BV_SHA256_BYTES] = '\0';
}
