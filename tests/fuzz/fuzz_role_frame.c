/* libFuzzer target for what a graph-engine role does with a frame from the network:
 * bv_wire_check on the header and payload, then bv_task_hdr_decode on the payload. The
 * input is the header frame (its first 32 bytes, or fewer) followed by the payload. It is
 * checked as it is, and again with the header's length and both CRCs repaired (keeping
 * its magic, version and type) so that inputs get past the checksums to the task header.
 * A header that decodes must re-encode to the same 200 bytes and its arrays must lie
 * within the payload. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/wire.h"
#include "task_hdr.h"

#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* With BV_FUZZ_WRITE_SEEDS=DIR the target writes seed frames into DIR and exits: valid
 * task messages with no arrays, one array, and all three. */
static void write_seeds(const char *dir)
{
    static const uint64_t sizes[][3] = {{0, 0, 0}, {16, 0, 0}, {8, 24, 4}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        bv_task_hdr h;
        memset(&h, 0, sizeof h);
        h.epoch = 3;
        h.rows = 16;
        h.stage = (int32_t)k;
        h.lr = 0.01f;
        h.na = sizes[k][0];
        h.nb = sizes[k][1];
        h.nc = sizes[k][2];
        size_t plen = BV_TASK_HDR_WIRE_SIZE + h.na + h.nb + h.nc;
        uint8_t frame[sizeof(bv_wire_header) + BV_TASK_HDR_WIRE_SIZE + 64];
        memset(frame, 0x5A, sizeof frame);
        bv_task_hdr_encode(&h, frame + sizeof(bv_wire_header));
        bv_wire_header wh;
        bv_wire_header_make(&wh, (uint16_t)(3 + k), 2, (uint32_t)k,
                            frame + sizeof(bv_wire_header), plen);
        memcpy(frame, &wh, sizeof wh);
        char path[512];
        snprintf(path, sizeof path, "%s/frame-%zu", dir, k);
        fuzz_write_file(path, frame, sizeof wh + plen);
    }
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_write_seeds_if_asked(write_seeds);
    return 0;
}

static void check_payload(const uint8_t *payload, size_t len)
{
    bv_task_hdr h;
    bv_error err;
    bv_error_clear(&err);
    if (bv_task_hdr_decode(payload, len, &h, &err) != BV_OK) {
        if (err.status != BV_ERR_CORRUPT || !err.msg[0])
            abort();
        return;
    }
    if (h.na > len || h.nb > len || h.nc > len ||
        BV_TASK_HDR_WIRE_SIZE + h.na + h.nb + h.nc != len)
        abort();
    uint8_t again[BV_TASK_HDR_WIRE_SIZE];
    bv_task_hdr_encode(&h, again);
    if (memcmp(again, payload, BV_TASK_HDR_WIRE_SIZE) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t hlen = size < sizeof(bv_wire_header) ? size : sizeof(bv_wire_header);
    /* Copies, so that ASan sees reads past the exact sizes. */
    uint8_t *header = malloc(hlen ? hlen : 1);
    size_t plen = size - hlen;
    uint8_t *payload = malloc(plen ? plen : 1);
    if (!header || !payload)
        abort();
    memcpy(header, data, hlen);
    memcpy(payload, data + hlen, plen);

    bv_wire_header out;
    bv_error err;
    bv_error_clear(&err);
    if (bv_wire_check(header, hlen, payload, plen, 0, &out, &err) == BV_OK)
        check_payload(payload, plen);
    else if (err.status != BV_ERR_CORRUPT || !err.msg[0])
        abort();

    if (hlen == sizeof(bv_wire_header)) {
        bv_wire_header h;
        memcpy(&h, header, sizeof h);
        bv_wire_header fixed;
        bv_wire_header_make(&fixed, h.type, h.sender, h.tag, payload, plen);
        fixed.magic = h.magic;
        fixed.version = h.version;
        fixed.header_crc = bv_crc32c(0, &fixed, offsetof(bv_wire_header, header_crc));
        bv_error_clear(&err);
        bv_status st = bv_wire_check(&fixed, sizeof fixed, payload, plen, 0, &out, &err);
        if (st == BV_OK)
            check_payload(payload, plen);
        else if (fixed.magic == BV_WIRE_MAGIC && fixed.version == BV_WIRE_VERSION)
            abort(); /* a repaired frame of this version must pass */
    }
    free(header);
    free(payload);
    return 0;
}
