/* The wire protocol (wire.h): CRC-32C and the 32-byte frame header, built and checked.
 * The layout and every check are described in docs/wire-protocol.md. */
#include "bivouac/wire.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define BV_CRC32C_HAVE_SSE42 1
#endif

/* The header travels as its in-memory image, so the struct must be exactly the wire
 * layout: 32 bytes, no padding, little-endian fields. */
static_assert(sizeof(bv_wire_header) == 32, "bv_wire_header must be 32 bytes");
static_assert(offsetof(bv_wire_header, magic) == 0, "wire layout");
static_assert(offsetof(bv_wire_header, version) == 4, "wire layout");
static_assert(offsetof(bv_wire_header, type) == 6, "wire layout");
static_assert(offsetof(bv_wire_header, sender) == 8, "wire layout");
static_assert(offsetof(bv_wire_header, tag) == 12, "wire layout");
static_assert(offsetof(bv_wire_header, payload_len) == 16, "wire layout");
static_assert(offsetof(bv_wire_header, payload_crc) == 24, "wire layout");
static_assert(offsetof(bv_wire_header, header_crc) == 28, "wire layout");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire header is sent as its in-memory image; a big-endian host needs "
              "byte swapping in bv_wire_header_make and bv_wire_check");

#define WIRE_HEADER_LEN 32u
#define WIRE_HEADER_CRC_SPAN 28u /* header_crc covers the bytes before it */

/* ---- CRC-32C (Castagnoli), reflected polynomial 0x82F63B78 ---------------------------
 * Portable path: slicing-by-8 (Kounavis & Berry, "A Systematic Approach to Building High
 * Performance Software-based CRC Generators", 2005): eight 256-entry tables, eight bytes
 * per step. x86-64 path: the SSE4.2 crc32 instruction, chosen at run time. Both work on
 * the un-inverted register; bv_crc32c does the pre- and post-inversion. */

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[8][256];

static void crc32c_tables_build(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        crc32c_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t prev = crc32c_table[t - 1][i];
            crc32c_table[t][i] = (prev >> 8) ^ crc32c_table[0][prev & 0xffu];
        }
}

static uint32_t load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint32_t crc32c_portable(uint32_t crc, const unsigned char *p, size_t len)
{
    const uint32_t(*t)[256] = (const uint32_t(*)[256])crc32c_table;
    while (len >= 8) {
        uint32_t lo = crc ^ load_le32(p);
        uint32_t hi = load_le32(p + 4);
        crc = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^
              t[4][lo >> 24] ^ t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^
              t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xffu];
    return crc;
}

/* GF(2) arithmetic on reflected CRC-32C registers, for joining the three streams below:
 * a * b mod P (zlib's multmodp, with the Castagnoli polynomial). */
static uint32_t crc32c_multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = (uint32_t)1 << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ 0x82F63B78u : b >> 1;
    }
    return p;
}

/* x^(8 n) mod P: what multiplies a register to move it past n zero bytes. */
static uint32_t crc32c_shift_bytes(uint64_t n)
{
    uint32_t result = (uint32_t)1 << 31, sq = (uint32_t)1 << 30; /* x^0, x^1 */
    for (uint64_t bits = n * 8; bits; bits >>= 1) {
        if (bits & 1)
            result = crc32c_multmodp(sq, result);
        sq = crc32c_multmodp(sq, sq);
    }
    return result;
}

#ifdef BV_CRC32C_HAVE_SSE42
/* The crc32 instruction has a latency of 3 cycles and a throughput of 1: one stream runs
 * at a third of what the core can do (about 9 GB/s here, a tenth of a 1M-vertex GCN
 * epoch went to checking messages). Large buffers are cut into chunks of three
 * CRC32C_STRIPE-byte stripes whose CRCs run interleaved, then join:
 *   crc(A B C) = crc(A) * x^(16 L) + crc0(B) * x^(8 L) + crc0(C)  (mod P, L = stripe). */
#define CRC32C_STRIPE 4096
static uint32_t crc32c_k1, crc32c_k2; /* x^(8 L), x^(16 L) mod P; set by crc32c_init */

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc,
                                                                const unsigned char *p,
                                                                size_t len)
{
    uint64_t c = crc;
    while (len > 0 && ((uintptr_t)p & 7u)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    while (len >= 3 * CRC32C_STRIPE) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *p1 = p + CRC32C_STRIPE, *p2 = p + 2 * CRC32C_STRIPE;
        for (size_t i = 0; i < CRC32C_STRIPE; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p1 + i, 8);
            memcpy(&w2, p2 + i, 8);
            c = _mm_crc32_u64(c, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        c = crc32c_multmodp(crc32c_k2, (uint32_t)c) ^ crc32c_multmodp(crc32c_k1, (uint32_t)c1) ^
            (uint32_t)c2;
        p += 3 * CRC32C_STRIPE;
        len -= 3 * CRC32C_STRIPE;
    }
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, sizeof word);
        c = _mm_crc32_u64(c, word);
        p += 8;
        len -= 8;
    }
    while (len--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

typedef uint32_t (*crc32c_fn)(uint32_t crc, const unsigned char *p, size_t len);

static crc32c_fn crc32c_impl = crc32c_portable;
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

/* Runs once, on first use (never at load time). BIVOUAC_CRC32C=portable forces the table
 * path: the tests use it to check both, and it rules the instruction out when debugging. */
static void crc32c_init(void)
{
    crc32c_tables_build();
    const char *choice = getenv("BIVOUAC_CRC32C");
    if (choice && strcmp(choice, "portable") == 0)
        return;
#ifdef BV_CRC32C_HAVE_SSE42
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        crc32c_k1 = crc32c_shift_bytes(CRC32C_STRIPE);
        crc32c_k2 = crc32c_shift_bytes(2 * CRC32C_STRIPE);
        crc32c_impl = crc32c_sse42;
    }
#endif
}

uint32_t bv_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&crc32c_once, crc32c_init);
    if (len == 0)
        return crc;
    return ~crc32c_impl(~crc, data, len);
}

/* ---- frame header ------------------------------------------------------------------ */

void bv_wire_header_make(bv_wire_header *h, uint16_t type, uint32_t sender, uint32_t tag,
                         const void *payload, size_t payload_len)
{
    memset(h, 0, sizeof *h);
    h->magic = BV_WIRE_MAGIC;
    h->version = BV_WIRE_VERSION;
    h->type = type;
    h->sender = sender;
    h->tag = tag;
    h->payload_len = payload_len;
    h->payload_crc = bv_crc32c(0, payload, payload_len);
    h->header_crc = bv_crc32c(0, h, WIRE_HEADER_CRC_SPAN);
}

bv_status bv_wire_check(const void *header, size_t header_len, const void *payload,
                        size_t payload_len, uint16_t expect_type, bv_wire_header *out,
                        bv_error *err)
{
    if (header_len < WIRE_HEADER_LEN)
        return bv_error_set(err, BV_ERR_CORRUPT, "frame too short: %zu bytes, header is %u",
                            header_len, WIRE_HEADER_LEN);
    if (header_len > WIRE_HEADER_LEN)
        return bv_error_set(err, BV_ERR_CORRUPT,
                            "frame header too long: %zu bytes, header is %u", header_len,
                            WIRE_HEADER_LEN);

    /* Copy out: transports do not promise an aligned header buffer. */
    bv_wire_header h;
    memcpy(&h, header, sizeof h);

    if (h.magic != BV_WIRE_MAGIC)
        return bv_error_set(err, BV_ERR_CORRUPT, "bad magic 0x%08" PRIx32, h.magic);
    /* Before the header CRC: another version may lay the header out differently. */
    if (h.version != BV_WIRE_VERSION)
        return bv_error_set(err, BV_ERR_CORRUPT,
                            "unsupported wire version %u (this build speaks %d)",
                            (unsigned)h.version, BV_WIRE_VERSION);
    if (bv_crc32c(0, &h, WIRE_HEADER_CRC_SPAN) != h.header_crc)
        return bv_error_set(err, BV_ERR_CORRUPT, "header checksum mismatch");
    if (h.payload_len != (uint64_t)payload_len)
        return bv_error_set(err, BV_ERR_CORRUPT,
                            "payload length %zu does not match header (%" PRIu64 ")",
                            payload_len, h.payload_len);
    if (bv_crc32c(0, payload, payload_len) != h.payload_crc)
        return bv_error_set(err, BV_ERR_CORRUPT, "payload checksum mismatch");
    if (expect_type != 0 && h.type != expect_type)
        return bv_error_set(err, BV_ERR_CORRUPT, "unexpected message type %u (expected %u)",
                            (unsigned)h.type, (unsigned)expect_type);
    if (out)
        *out = h;
    return BV_OK;
}
