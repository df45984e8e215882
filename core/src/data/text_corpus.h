/* A UTF-8 text as a character-level token sequence (nanoGPT's shakespeare_char): the
 * vocabulary is every distinct code point of the text, sorted; token id = its index. */
#ifndef BIVOUAC_TEXT_CORPUS_H
#define BIVOUAC_TEXT_CORPUS_H

#include <stdbool.h>
#include <stdint.h>

#include "bivouac/error.h"

typedef struct bv_text_corpus {
    uint32_t *vocab;    /* sorted code points; token id = index */
    int64_t vocab_size;
    int32_t *ids;       /* the whole text as token ids */
    int64_t n;          /* tokens */
    int64_t n_train;    /* the first n_train tokens are the training split */
} bv_text_corpus;

/* The largest text read (docs/limits.md); BIVOUAC_MAX_TEXT_BYTES raises it. */
#define BV_TEXT_MAX_BYTES (1ull << 30)

/* Reads a UTF-8 text file. BV_ERR_INVALID (empty, not UTF-8 with the byte offset and
 * line, not a regular file, larger than the limit) or BV_ERR_IO. */
bv_status bv_text_corpus_load(const char *path, double val_fraction, bv_text_corpus *out,
                              bv_error *err);
void bv_text_corpus_free(bv_text_corpus *c);

/* Rows [row0, row0 + rows) of a batch of `batch` sequences of `block` tokens at random
 * offsets of a split (nanoGPT's get_batch): tokens and targets (the next tokens), rows x
 * block each. The offsets depend only on (seed, stream), so any cut of a batch into rows
 * (microbatches, a data-parallel replica's share) reads what the whole batch would. */
void bv_text_corpus_batch(const bv_text_corpus *c, uint64_t seed, uint64_t stream, bool val,
                          int64_t batch, int64_t block, int64_t row0, int64_t rows,
                          int32_t *tokens, int32_t *targets);

#endif
