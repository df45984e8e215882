/* Vertex arrays that role processes on one host share through memory (docs/cluster.md,
 * "Shared memory on one host"). A graph server process makes its stage arrays in one
 * anonymous memory file (memfd) and tells each tensor worker where it is (BV_MSG_SEGMENT:
 * its pid, the file's descriptor, the arrays' places); a worker maps the file through
 * /proc/PID/fd/FD and then reads and writes the windows that tasks name, with the same
 * checked references (bv_array_ref) the engine's threads use in one process. Nothing is
 * left when the processes end, whichever way they end: the file has no name. */
#ifndef BIVOUAC_ENGINE_GRAPH_SHARED_SEGMENT_H
#define BIVOUAC_ENGINE_GRAPH_SHARED_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"

typedef struct bv_segment {
    void *base; /* NULL: none */
    size_t bytes;
    int fd; /* the maker's descriptor, kept open while the segment lives; -1 at a mapper */
} bv_segment;

/* Makes a segment of `count` arrays, array k of bytes[k] bytes (0: none) at a page-aligned
 * offset[k]; zero-filled. */
bv_status bv_segment_create(bv_segment *seg, const char *name, const size_t *bytes,
                            size_t count, size_t *offset, bv_error *err);

/* Maps the segment of `bytes` bytes that process `pid` holds as descriptor `fd`. */
bv_status bv_segment_map(bv_segment *seg, int64_t pid, int64_t fd, uint64_t bytes,
                         bv_error *err);

void bv_segment_free(bv_segment *seg);

#endif
