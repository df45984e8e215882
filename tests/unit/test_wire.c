/* Tests for the wire protocol (core/src/runtime/wire.c): CRC-32C against published vectors
 * and a bitwise reference, the exact header bytes, and one test per bv_wire_check error.
 * The suite runs twice: once with the CRC path the CPU selects, once re-executed with
 * BIVOUAC_CRC32C=portable so the table path is checked on every machine too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bivouac/wire.h"

/* One bit at a time, straight from the definition: the oracle for the fast paths. */
static uint32_t crc32c_bitwise(uint32_t crc, const unsigned char *p, size_t len)
{
    crc = ~crc;
    while (len--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static void fill_pseudo_random(unsigned char *buf, size_t len, uint32_t seed)
{
    uint32_t x = seed ? seed : 1u;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (unsigned char)(x >> 24);
    }
}

/* ---- CRC-32C ----------------------------------------------------------------------- */

static void crc32c_standard_check_value(void **state)
{
    assert_int_equal(bv_crc32c(0, "123456789", 9), 0xE3069283u);
}

/* RFC 3720 (iSCSI) appendix B.4. */
static void crc32c_rfc3720_vectors(void **state)
{
    unsigned char buf[32];
    memset(buf, 0x00, sizeof buf);
    assert_int_equal(bv_crc32c(0, buf, sizeof buf), 0x8A9136AAu);
    memset(buf, 0xff, sizeof buf);
    assert_int_equal(bv_crc32c(0, buf, sizeof buf), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    assert_int_equal(bv_crc32c(0, buf, sizeof buf), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)(31 - i);
    assert_int_equal(bv_crc32c(0, buf, sizeof buf), 0x113FDB5Cu);
}

static void crc32c_of_nothing_is_the_seed(void **state)
{
    assert_int_equal(bv_crc32c(0, NULL, 0), 0u);
    assert_int_equal(bv_crc32c(0xDEADBEEFu, NULL, 0), 0xDEADBEEFu);
}

/* Every length up to 300 at every start offset 0..7 (the fast paths have head, body and
 * tail loops keyed on alignment and on 8-byte blocks). */
static void crc32c_matches_bitwise_reference(void **state)
{
    enum { MAX_LEN = 300 };
    unsigned char buf[MAX_LEN + 8];
    fill_pseudo_random(buf, sizeof buf, 12345);
    for (size_t offset = 0; offset < 8; offset++)
        for (size_t len = 0; len <= MAX_LEN; len++)
            assert_int_equal(bv_crc32c(0, buf + offset, len),
                             crc32c_bitwise(0, buf + offset, len));
}

/* Lengths and alignments around the three-stripe chunks of the instruction path. */
static void crc32c_matches_bitwise_reference_around_stripes(void **state)
{
    (void)state;
    const size_t lens[] = {12287, 12288, 12289, 24576 + 17, 3 * 12288 + 5, 100003};
    unsigned char *buf = malloc(100003 + 8);
    assert_non_null(buf);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < 100003 + 8; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
        for (size_t offset = 0; offset < 8; offset += 3)
            assert_int_equal(bv_crc32c(0x12345678u, buf + offset, lens[k]),
                             crc32c_bitwise(0x12345678u, buf + offset, lens[k]));
    free(buf);
}

static void crc32c_matches_bitwise_reference_on_one_mebibyte(void **state)
{
    size_t len = (size_t)1 << 20;
    unsigned char *buf = malloc(len + 1);
    assert_non_null(buf);
    fill_pseudo_random(buf, len + 1, 777);
    assert_int_equal(bv_crc32c(0, buf, len), crc32c_bitwise(0, buf, len));
    assert_int_equal(bv_crc32c(0, buf + 1, len), crc32c_bitwise(0, buf + 1, len));
    free(buf);
}

/* bv_crc32c(bv_crc32c(0, a), b) is the CRC of a followed by b, for every split. */
static void crc32c_continues_across_calls(void **state)
{
    unsigned char buf[97];
    fill_pseudo_random(buf, sizeof buf, 99);
    uint32_t whole = bv_crc32c(0, buf, sizeof buf);
    for (size_t cut = 0; cut <= sizeof buf; cut++) {
        uint32_t first = bv_crc32c(0, buf, cut);
        assert_int_equal(bv_crc32c(first, buf + cut, sizeof buf - cut), whole);
    }
}

/* ---- header ------------------------------------------------------------------------ */

/* The exact bytes of one header, computed independently (docs/wire-protocol.md lists
 * them): pins the layout, the byte order and what each CRC covers. */
static void header_make_produces_the_documented_bytes(void **state)
{
    static const unsigned char expected[32] = {
        0x42, 0x56, 0x57, 0x46, 0x01, 0x00, 0x05, 0x00, 0x02, 0x00, 0x00,
        0x00, 0x09, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x4c, 0xbb, 0x71, 0x9a, 0x64, 0x45, 0x1e, 0x83};
    bv_wire_header h;
    bv_wire_header_make(&h, 5, 2, 9, "hello", 5);
    assert_int_equal(sizeof h, 32);
    assert_memory_equal(&h, expected, sizeof expected);
    assert_int_equal(h.payload_crc, 0x9A71BB4Cu);
    assert_int_equal(h.header_crc, 0x831E4564u);
}

static void header_roundtrip_fills_out(void **state)
{
    unsigned char payload[1000];
    fill_pseudo_random(payload, sizeof payload, 5);
    bv_wire_header h, out;
    bv_wire_header_make(&h, 7, 3, 0xABCDEF01u, payload, sizeof payload);
    bv_error err;
    bv_error_clear(&err);
    memset(&out, 0, sizeof out);
    assert_int_equal(bv_wire_check(&h, sizeof h, payload, sizeof payload, 7, &out, &err),
                     BV_OK);
    assert_int_equal(out.magic, BV_WIRE_MAGIC);
    assert_int_equal(out.version, BV_WIRE_VERSION);
    assert_int_equal(out.type, 7);
    assert_int_equal(out.sender, 3);
    assert_int_equal(out.tag, 0xABCDEF01u);
    assert_int_equal(out.payload_len, sizeof payload);
    assert_int_equal(out.payload_crc, bv_crc32c(0, payload, sizeof payload));
    /* expect_type 0 accepts any type; out and err may be NULL. */
    assert_int_equal(bv_wire_check(&h, sizeof h, payload, sizeof payload, 0, NULL, NULL),
                     BV_OK);
}

static void header_with_empty_payload_checks(void **state)
{
    bv_wire_header h;
    bv_wire_header_make(&h, 1, 0, 0, NULL, 0);
    assert_int_equal(h.payload_len, 0);
    assert_int_equal(h.payload_crc, 0);
    assert_int_equal(bv_wire_check(&h, sizeof h, NULL, 0, 1, NULL, NULL), BV_OK);
}

/* Transports need not hand back an aligned header. */
static void header_check_accepts_an_unaligned_buffer(void **state)
{
    bv_wire_header h;
    bv_wire_header_make(&h, 2, 1, 1, "xyz", 3);
    unsigned char buf[sizeof h + 1];
    memcpy(buf + 1, &h, sizeof h);
    bv_wire_header out;
    assert_int_equal(bv_wire_check(buf + 1, sizeof h, "xyz", 3, 2, &out, NULL), BV_OK);
    assert_int_equal(out.tag, 1);
}

/* ---- each failed check, with its exact message --------------------------------------- */

static void expect_corrupt(const void *header, size_t header_len, const void *payload,
                           size_t payload_len, uint16_t expect_type, const char *message)
{
    bv_error err;
    bv_error_clear(&err);
    bv_wire_header out;
    memset(&out, 0xAA, sizeof out);
    bv_wire_header untouched = out;
    assert_int_equal(bv_wire_check(header, header_len, payload, payload_len, expect_type,
                                   &out, &err),
                     BV_ERR_CORRUPT);
    assert_int_equal(err.status, BV_ERR_CORRUPT);
    assert_string_equal(err.msg, message);
    assert_memory_equal(&out, &untouched, sizeof out); /* out is only written on success */
}

static void check_rejects_a_short_frame(void **state)
{
    bv_wire_header h;
    bv_wire_header_make(&h, 1, 0, 0, NULL, 0);
    expect_corrupt(&h, 12, NULL, 0, 0, "frame too short: 12 bytes, header is 32");
    expect_corrupt(NULL, 0, NULL, 0, 0, "frame too short: 0 bytes, header is 32");
}

static void check_rejects_a_long_header(void **state)
{
    unsigned char buf[40] = {0};
    bv_wire_header h;
    bv_wire_header_make(&h, 1, 0, 0, NULL, 0);
    memcpy(buf, &h, sizeof h);
    expect_corrupt(buf, sizeof buf, NULL, 0, 0,
                   "frame header too long: 40 bytes, header is 32");
}

static void check_rejects_bad_magic(void **state)
{
    bv_wire_header h;
    bv_wire_header_make(&h, 1, 0, 0, "p", 1);
    h.magic = 0x12345678u;
    expect_corrupt(&h, sizeof h, "p", 1, 0, "bad magic 0x12345678");
}

static void check_rejects_another_version(void **state)
{
    bv_wire_header h;
    bv_wire_header_make(&h, 1, 0, 0, "p", 1);
    h.version = 7;
    h.header_crc = bv_crc32c(0, &h, 28); /* a well-formed header from a newer build */
    expect_corrupt(&h, sizeof h, "p", 1, 0,
                   "unsupported wire version 7 (this build speaks 1)");
}

static void check_rejects_a_damaged_header(void **state)
{
    bv_wire_header h;
    bv_wire_header_make(&h, 1, 4, 8, "p", 1);
    for (size_t i = 6; i < 32; i++) { /* every byte after magic and version */
        bv_wire_header bad = h;
        ((unsigned char *)&bad)[i] ^= 0x01;
        expect_corrupt(&bad, sizeof bad, "p", 1, 0, "header checksum mismatch");
    }
}

static void check_rejects_a_payload_of_the_wrong_length(void **state)
{
    unsigned char payload[120];
    fill_pseudo_random(payload, sizeof payload, 3);
    bv_wire_header h;
    bv_wire_header_make(&h, 1, 0, 0, payload, 120);
    expect_corrupt(&h, sizeof h, payload, 100, 0,
                   "payload length 100 does not match header (120)");
}

static void check_rejects_a_flipped_payload_byte(void **state)
{
    unsigned char payload[64];
    fill_pseudo_random(payload, sizeof payload, 8);
    bv_wire_header h;
    bv_wire_header_make(&h, 1, 0, 0, payload, sizeof payload);
    for (size_t i = 0; i < sizeof payload; i++) {
        payload[i] ^= 0x80;
        expect_corrupt(&h, sizeof h, payload, sizeof payload, 0,
                       "payload checksum mismatch");
        payload[i] ^= 0x80;
    }
    assert_int_equal(bv_wire_check(&h, sizeof h, payload, sizeof payload, 0, NULL, NULL),
                     BV_OK);
}

static void check_rejects_an_unexpected_type(void **state)
{
    bv_wire_header h;
    bv_wire_header_make(&h, 3, 0, 0, "p", 1);
    expect_corrupt(&h, sizeof h, "p", 1, 5, "unexpected message type 3 (expected 5)");
}

/* Re-runs this executable with the table path forced; returns its exit status. */
static int rerun_with_portable_crc(char **argv)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setenv("BIVOUAC_CRC32C", "portable", 1);
        execv("/proc/self/exe", argv);
        execv(argv[0], argv);
        perror("execv");
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        perror("waitpid");
        return 1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc32c_standard_check_value),
        cmocka_unit_test(crc32c_rfc3720_vectors),
        cmocka_unit_test(crc32c_of_nothing_is_the_seed),
        cmocka_unit_test(crc32c_matches_bitwise_reference),
        cmocka_unit_test(crc32c_matches_bitwise_reference_around_stripes),
        cmocka_unit_test(crc32c_matches_bitwise_reference_on_one_mebibyte),
        cmocka_unit_test(crc32c_continues_across_calls),
        cmocka_unit_test(header_make_produces_the_documented_bytes),
        cmocka_unit_test(header_roundtrip_fills_out),
        cmocka_unit_test(header_with_empty_payload_checks),
        cmocka_unit_test(header_check_accepts_an_unaligned_buffer),
        cmocka_unit_test(check_rejects_a_short_frame),
        cmocka_unit_test(check_rejects_a_long_header),
        cmocka_unit_test(check_rejects_bad_magic),
        cmocka_unit_test(check_rejects_another_version),
        cmocka_unit_test(check_rejects_a_damaged_header),
        cmocka_unit_test(check_rejects_a_payload_of_the_wrong_length),
        cmocka_unit_test(check_rejects_a_flipped_payload_byte),
        cmocka_unit_test(check_rejects_an_unexpected_type),
    };
    const char *forced = getenv("BIVOUAC_CRC32C");
    int failed = cmocka_run_group_tests_name(
        forced ? "wire (crc32c forced portable)" : "wire (crc32c as selected)", tests, NULL,
        NULL);
    if (!forced && argc >= 1)
        failed += rerun_with_portable_crc(argv);
    return failed;
}
