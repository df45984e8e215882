/* The task header (role_msg.h's bv_task_hdr) on the wire: a fixed 200-byte little-endian
 * layout written and read field by field, so that the two ends of a message need not share
 * an architecture or a compiler (docs/wire-protocol.md, "Graph-engine payloads"). */
#ifndef BIVOUAC_TASK_HDR_H
#define BIVOUAC_TASK_HDR_H

#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "role_msg.h"

/* Bytes of an encoded bv_task_hdr; a multiple of 8, so the arrays after it stay aligned. */
#define BV_TASK_HDR_WIRE_SIZE 200

/* Writes h into out[0..BV_TASK_HDR_WIRE_SIZE). */
void bv_task_hdr_encode(const bv_task_hdr *h, uint8_t *out);
/* Reads the header at the start of a payload of payload_len bytes into *out and checks
 * that it is whole and that its array sizes na + nb + nc add up, without overflow, to the
 * bytes after it. BV_ERR_CORRUPT with the reason otherwise (and *out is left alone). */
bv_status bv_task_hdr_decode(const void *payload, size_t payload_len, bv_task_hdr *out,
                             bv_error *err);

#endif
