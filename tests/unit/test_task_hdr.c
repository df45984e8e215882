/* The task header's wire encoding (engine/graph/task_hdr.h): exact bytes at documented
 * offsets, round trips, and the decoder's refusals (truncated, sizes that do not add up,
 * sizes that would overflow); and that bv_role_recv drops and counts a bad frame. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "bivouac/plugin.h"
#include "role_msg.h"
#include "task_hdr.h"

static bv_task_hdr sample_hdr(void)
{
    bv_task_hdr h;
    memset(&h, 0, sizeof h);
    h.epoch = 0x0102030405060708;
    h.row_begin = -2;
    h.rows = 300;
    h.version = 7;
    h.step = 9;
    h.edge_begin = 1ll << 40;
    h.stage = 3;
    h.interval = -1;
    h.training = 1;
    h.reply_to = 16;
    h.flags = 0x81;
    h.ps = 1;
    h.grad_scale = 0.5f;
    h.lr = 1.0f;
    h.na = 8;
    h.nb = 0;
    h.nc = 16;
    h.reply = (bv_array_ref){.array = 4, .offset = 64, .bytes = 128};
    for (int i = 0; i < 9; i++)
        h.stats[i] = i == 8 ? -2.0 : (double)i;
    return h;
}

static uint64_t le64_at(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void encoding_puts_each_field_at_its_documented_offset(void **state)
{
    bv_task_hdr h = sample_hdr();
    uint8_t buf[BV_TASK_HDR_WIRE_SIZE];
    memset(buf, 0xEE, sizeof buf);
    bv_task_hdr_encode(&h, buf);
    static const uint8_t epoch[8] = {8, 7, 6, 5, 4, 3, 2, 1};
    assert_memory_equal(buf, epoch, 8);
    assert_int_equal(le64_at(buf + 8), (uint64_t)-2);
    assert_int_equal(le64_at(buf + 16), 300);
    assert_int_equal(le64_at(buf + 40), 1ull << 40);
    static const uint8_t ints[24] = {3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0,
                                     16, 0, 0, 0, 0x81, 0, 0, 0, 1, 0, 0, 0};
    assert_memory_equal(buf + 48, ints, 24);
    static const uint8_t floats[8] = {0, 0, 0, 0x3f, 0, 0, 0x80, 0x3f}; /* 0.5f, 1.0f */
    assert_memory_equal(buf + 72, floats, 8);
    assert_int_equal(le64_at(buf + 80), 8);
    assert_int_equal(le64_at(buf + 88), 0);
    assert_int_equal(le64_at(buf + 96), 16);
    assert_int_equal(le64_at(buf + 104), 4);
    assert_int_equal(le64_at(buf + 112), 64);
    assert_int_equal(le64_at(buf + 120), 128);
    assert_int_equal(le64_at(buf + 128), 0);                   /* stats[0] = 0.0 */
    assert_int_equal(le64_at(buf + 136), 0x3FF0000000000000u); /* stats[1] = 1.0 */
    assert_int_equal(le64_at(buf + 192), 0xC000000000000000u); /* stats[8] = -2.0 */
}

/* The layout was chosen as the x86-64 image of the struct, so runs between processes on
 * such hosts send the same bytes as the in-process run did before the codec. */
static void encoding_equals_the_structs_image_on_this_host(void **state)
{
    assert_int_equal(sizeof(bv_task_hdr), BV_TASK_HDR_WIRE_SIZE);
    bv_task_hdr h = sample_hdr();
    uint8_t buf[BV_TASK_HDR_WIRE_SIZE];
    bv_task_hdr_encode(&h, buf);
    const uint16_t one = 1;
    if (*(const uint8_t *)&one == 1)
        assert_memory_equal(buf, &h, sizeof h);
}

static void decode_reads_back_what_encode_wrote(void **state)
{
    bv_task_hdr h = sample_hdr();
    uint8_t buf[BV_TASK_HDR_WIRE_SIZE + 24];
    memset(buf, 0, sizeof buf);
    bv_task_hdr_encode(&h, buf);
    bv_task_hdr got;
    memset(&got, 0x77, sizeof got);
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(bv_task_hdr_decode(buf, sizeof buf, &got, &err), BV_OK);
    assert_memory_equal(&got, &h, sizeof h);
}

static void expect_refused(const uint8_t *buf, size_t len, const char *message)
{
    bv_task_hdr got;
    memset(&got, 0x77, sizeof got);
    bv_task_hdr untouched = got;
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(bv_task_hdr_decode(buf, len, &got, &err), BV_ERR_CORRUPT);
    assert_string_equal(err.msg, message);
    assert_memory_equal(&got, &untouched, sizeof got);
}

static void decode_refuses_truncated_and_inconsistent_sizes(void **state)
{
    uint8_t buf[BV_TASK_HDR_WIRE_SIZE + 24];
    memset(buf, 0, sizeof buf);
    bv_task_hdr h = sample_hdr();
    bv_task_hdr_encode(&h, buf);
    expect_refused(buf, 199, "task header truncated: payload is 199 bytes, header is 200");
    expect_refused(buf, 0, "task header truncated: payload is 0 bytes, header is 200");
    expect_refused(buf, sizeof buf - 1,
                   "task header: array sizes 8 + 0 + 16 do not add up to the 23 bytes "
                   "after the header");

    /* Sizes that add up only modulo 2^64. */
    h.na = UINT64_MAX;
    h.nb = 25;
    h.nc = 0;
    bv_task_hdr_encode(&h, buf);
    expect_refused(buf, sizeof buf,
                   "task header: array sizes 18446744073709551615 + 25 + 0 do not add up "
                   "to the 24 bytes after the header");
    h.na = 1ull << 63;
    h.nb = 1ull << 63;
    h.nc = 24;
    bv_task_hdr_encode(&h, buf);
    expect_refused(buf, sizeof buf,
                   "task header: array sizes 9223372036854775808 + 9223372036854775808 + 24 "
                   "do not add up to the 24 bytes after the header");
}

/* ---- bv_role_recv drops and counts what fails ------------------------------------ */


typedef struct fake_ep {
    uint8_t header[sizeof(bv_wire_header)];
    size_t header_len;
    uint8_t *payload;
    size_t payload_len;
    int released;
} fake_ep;

static bv_status fake_recv(bv_endpoint *ep, bv_msg *msg, int timeout_ms, bv_error *err)
{
    fake_ep *f = (fake_ep *)ep;
    *msg = (bv_msg){.header = f->header, .header_len = f->header_len,
                    .payload = f->payload, .payload_len = f->payload_len, .impl = f};
    return BV_OK;
}

static void fake_release(bv_msg *msg)
{
    ((fake_ep *)msg->impl)->released++;
}

static void role_recv_drops_and_counts_bad_frames(void **state)
{
    bv_transport_ops t = {.recv = fake_recv, .release = fake_release};
    uint8_t payload[BV_TASK_HDR_WIRE_SIZE + 8];
    memset(payload, 0, sizeof payload);
    bv_task_hdr h = sample_hdr();
    h.na = 8;
    h.nb = h.nc = 0;
    bv_task_hdr_encode(&h, payload);
    fake_ep f = {.header_len = sizeof(bv_wire_header), .payload = payload,
                 .payload_len = sizeof payload};
    bv_wire_header wh;

    uint64_t before = bv_role_frames_dropped();
    bv_role_msg m;
    bv_error err;
    bv_error_clear(&err);

    /* A good one is not counted. */
    bv_wire_header_make(&wh, BV_MSG_FWD_TASK, 2, 0, payload, sizeof payload);
    memcpy(f.header, &wh, sizeof wh);
    assert_int_equal(bv_role_recv(&t, (bv_endpoint *)&f, &m, 0, &err), BV_OK);
    assert_int_equal(m.hdr.rows, 300);
    assert_ptr_equal(m.a, payload + BV_TASK_HDR_WIRE_SIZE);
    bv_role_release(&t, &m);
    assert_int_equal(bv_role_frames_dropped(), before);

    /* Another wire version. */
    wh.version = 2;
    memcpy(f.header, &wh, sizeof wh);
    assert_int_equal(bv_role_recv(&t, (bv_endpoint *)&f, &m, 0, &err), BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "unsupported wire version 2 (this build speaks 1)");
    assert_int_equal(bv_role_frames_dropped(), before + 1);

    /* A truncated header frame. */
    f.header_len = 20;
    assert_int_equal(bv_role_recv(&t, (bv_endpoint *)&f, &m, 0, &err), BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "frame too short: 20 bytes, header is 32");
    f.header_len = sizeof wh;

    /* A valid frame whose task header claims more bytes than there are. */
    h.na = 4096;
    bv_task_hdr_encode(&h, payload);
    bv_wire_header_make(&wh, BV_MSG_FWD_TASK, 2, 0, payload, sizeof payload);
    memcpy(f.header, &wh, sizeof wh);
    assert_int_equal(bv_role_recv(&t, (bv_endpoint *)&f, &m, 0, &err), BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "task header: array sizes 4096 + 0 + 0 do not add up to "
                                 "the 8 bytes after the header");
    assert_int_equal(bv_role_frames_dropped(), before + 3);
    assert_int_equal(f.released, 4); /* every refused frame was released, unread */
    assert_null(m.a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(encoding_puts_each_field_at_its_documented_offset),
        cmocka_unit_test(encoding_equals_the_structs_image_on_this_host),
        cmocka_unit_test(decode_reads_back_what_encode_wrote),
        cmocka_unit_test(decode_refuses_truncated_and_inconsistent_sizes),
        cmocka_unit_test(role_recv_drops_and_counts_bad_frames),
    };
    return cmocka_run_group_tests_name("task_hdr", tests, NULL, NULL);
}
