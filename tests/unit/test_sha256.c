/* Tests for SHA-256 (core/src/data/sha256.c): the FIPS 180-4 example messages (NIST's
 * "Examples with intermediate values", SHA256.pdf, and the one-million-'a' vector of
 * FIPS 180-2 Appendix B.3), padding at every block boundary that matters, and input fed in
 * pieces of every size giving the same digest as one piece. Every check runs twice: with
 * the x86 SHA extensions where the CPU has them, and with the portable code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "sha256.h"

static int portable; /* 1: the checks below clear ctx.hardware */

static void start(bv_sha256 *ctx)
{
    bv_sha256_init(ctx);
    if (portable)
        ctx->hardware = 0;
}

static void hex_of(const void *data, size_t len, char hex[BV_SHA256_HEX])
{
    bv_sha256 ctx;
    uint8_t digest[BV_SHA256_BYTES];
    start(&ctx);
    bv_sha256_update(&ctx, data, len);
    bv_sha256_final(&ctx, digest);
    bv_sha256_hex(digest, hex);
}

static void assert_sha256(const char *message, const char *want)
{
    char hex[BV_SHA256_HEX];
    hex_of(message, strlen(message), hex);
    assert_string_equal(hex, want);
}

static void test_fips_180_4_examples(void **state)
{
    (void)state;
    assert_sha256("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_sha256("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    /* 448 bits: the padding needs a second block */
    assert_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    assert_sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                  "klmnopqrlmnopqrsmnopqrstnopqrstu",
                  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_one_million_a(void **state)
{
    (void)state;
    size_t n = 1000000;
    char *a = malloc(n);
    assert_non_null(a);
    memset(a, 'a', n);
    char hex[BV_SHA256_HEX];
    hex_of(a, n, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}

/* n 'x' bytes, against sha256sum: 55 is the longest message whose padding fits its own
 * block, 56 the shortest that needs another; 63, 64, 119 and 120 the same one block on. */
static void test_padding_boundaries(void **state)
{
    (void)state;
    static const struct {
        size_t n;
        const char *hex;
    } cases[] = {
        {55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
        {56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
        {63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
        {64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
        {119, "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c"},
        {120, "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98"},
    };
    char x[120];
    memset(x, 'x', sizeof x);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char hex[BV_SHA256_HEX];
        hex_of(x, cases[i].n, hex);
        assert_string_equal(hex, cases[i].hex);
    }
}

/* The loader hashes a file in 1 MiB reads; any split of the input gives the same digest. */
static void test_pieces_of_every_size(void **state)
{
    (void)state;
    uint8_t msg[300];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (uint8_t)(i * 131 + 7);
    char whole[BV_SHA256_HEX];
    hex_of(msg, sizeof msg, whole);
    for (size_t piece = 1; piece <= 130; piece++) {
        bv_sha256 ctx;
        uint8_t digest[BV_SHA256_BYTES];
        start(&ctx);
        for (size_t off = 0; off < sizeof msg; off += piece)
            bv_sha256_update(&ctx, msg + off,
                             sizeof msg - off < piece ? sizeof msg - off : piece);
        bv_sha256_final(&ctx, digest);
        char hex[BV_SHA256_HEX];
        bv_sha256_hex(digest, hex);
        assert_string_equal(hex, whole);
    }
}

static int use_portable(void **state)
{
    (void)state;
    portable = 1;
    return 0;
}

int main(void)
{
    bv_sha256 probe;
    bv_sha256_init(&probe);
    print_message("x86 SHA extensions: %s\n", probe.hardware ? "used" : "not on this CPU");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips_180_4_examples),
        cmocka_unit_test(test_one_million_a),
        cmocka_unit_test(test_padding_boundaries),
        cmocka_unit_test(test_pieces_of_every_size),
    };
    int failed = cmocka_run_group_tests_name("as detected", tests, NULL, NULL);
    return failed + cmocka_run_group_tests_name("portable", tests, use_portable, NULL);
}
