/* The wire protocol: every message between roles is a fixed 32-byte header plus a
 * payload. The header carries a magic, a version, the message type, sender and tag,
 * the payload length and a CRC-32C of the payload; a second CRC covers the header.
 * A receiver validates all of it (bv_wire_check) before it looks at the payload. */
#ifndef BIVOUAC_WIRE_H
#define BIVOUAC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BV_WIRE_MAGIC 0x46575642u /* "BVWF" little-endian */
#define BV_WIRE_VERSION 1

typedef struct bv_wire_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t sender;
    uint32_t tag;
    uint64_t payload_len;
    uint32_t payload_crc;
    uint32_t header_crc; /* CRC-32C of the 28 bytes before it */
} bv_wire_header;

/* CRC-32C (Castagnoli) of len bytes, continuing from crc (start with 0). */
uint32_t bv_crc32c(uint32_t crc, const void *data, size_t len);

void bv_wire_header_make(bv_wire_header *h, uint16_t type, uint32_t sender, uint32_t tag,
                         const void *payload, size_t payload_len);
/* Checks length, magic, version, header CRC, payload length and payload CRC; and, when
 * expect_type != 0, the type. Errors say which check failed. */
bv_status bv_wire_check(const void *header, size_t header_len, const void *payload,
                        size_t payload_len, uint16_t expect_type, bv_wire_header *out,
                        bv_error *err);

#ifdef __cplusplus
}
#endif
#endif
