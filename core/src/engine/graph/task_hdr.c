/* Encoding and decoding the task header field by field (task_hdr.h). The layout is the
 * table in docs/wire-protocol.md; every offset below is that table's. */
#include "task_hdr.h"

#include <string.h>

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Floats travel as their IEEE-754 bit patterns. */
static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t double_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double bits_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

void bv_task_hdr_encode(const bv_task_hdr *h, uint8_t *out)
{
    put_u64(out + 0, (uint64_t)h->epoch);
    put_u64(out + 8, (uint64_t)h->row_begin);
    put_u64(out + 16, (uint64_t)h->rows);
    put_u64(out + 24, (uint64_t)h->version);
    put_u64(out + 32, (uint64_t)h->step);
    put_u64(out + 40, (uint64_t)h->edge_begin);
    put_u32(out + 48, (uint32_t)h->stage);
    put_u32(out + 52, (uint32_t)h->interval);
    put_u32(out + 56, (uint32_t)h->training);
    put_u32(out + 60, (uint32_t)h->reply_to);
    put_u32(out + 64, (uint32_t)h->flags);
    put_u32(out + 68, (uint32_t)h->ps);
    put_u32(out + 72, float_bits(h->grad_scale));
    put_u32(out + 76, float_bits(h->lr));
    put_u64(out + 80, h->na);
    put_u64(out + 88, h->nb);
    put_u64(out + 96, h->nc);
    put_u64(out + 104, (uint64_t)h->reply.array);
    put_u64(out + 112, h->reply.offset);
    put_u64(out + 120, h->reply.bytes);
    for (int i = 0; i < 9; i++)
        put_u64(out + 128 + 8 * i, double_bits(h->stats[i]));
}

bv_status bv_task_hdr_decode(const void *payload, size_t payload_len, bv_task_hdr *out,
                             bv_error *err)
{
    if (payload_len < BV_TASK_HDR_WIRE_SIZE)
        return bv_error_set(err, BV_ERR_CORRUPT,
                            "task header truncated: payload is %zu bytes, header is %d",
                            payload_len, BV_TASK_HDR_WIRE_SIZE);
    const uint8_t *p = payload;
    bv_task_hdr h;
    memset(&h, 0, sizeof h);
    h.epoch = (int64_t)get_u64(p + 0);
    h.row_begin = (int64_t)get_u64(p + 8);
    h.rows = (int64_t)get_u64(p + 16);
    h.version = (int64_t)get_u64(p + 24);
    h.step = (int64_t)get_u64(p + 32);
    h.edge_begin = (int64_t)get_u64(p + 40);
    h.stage = (int32_t)get_u32(p + 48);
    h.interval = (int32_t)get_u32(p + 52);
    h.training = (int32_t)get_u32(p + 56);
    h.reply_to = (int32_t)get_u32(p + 60);
    h.flags = (int32_t)get_u32(p + 64);
    h.ps = (int32_t)get_u32(p + 68);
    h.grad_scale = bits_float(get_u32(p + 72));
    h.lr = bits_float(get_u32(p + 76));
    h.na = get_u64(p + 80);
    h.nb = get_u64(p + 88);
    h.nc = get_u64(p + 96);
    h.reply.array = (int64_t)get_u64(p + 104);
    h.reply.offset = get_u64(p + 112);
    h.reply.bytes = get_u64(p + 120);
    for (int i = 0; i < 9; i++)
        h.stats[i] = bits_double(get_u64(p + 128 + 8 * i));

    /* Each size alone within the rest, then their sum (which cannot wrap: each is at
     * most rest, and rest < 2^63 on any machine that could hold the payload). */
    uint64_t rest = payload_len - BV_TASK_HDR_WIRE_SIZE;
    if (h.na > rest || h.nb > rest || h.nc > rest || h.na + h.nb > rest ||
        h.na + h.nb + h.nc != rest)
        return bv_error_set(err, BV_ERR_CORRUPT,
                            "task header: array sizes %llu + %llu + %llu do not add up to "
                            "the %llu bytes after the header",
                            (unsigned long long)h.na, (unsigned long long)h.nb,
                            (unsigned long long)h.nc, (unsigned long long)rest);
    *out = h;
    return BV_OK;
}
