/* Reading a UTF-8 text into character tokens (text_corpus.h). */
#include "text_corpus.h"

#include "input_file.h"
#include "rng.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decodes one UTF-8 sequence at p (n bytes left); 0 if invalid (overlong, surrogate, out of
 * range, truncated), else its length. */
static int utf8_decode(const unsigned char *p, size_t n, uint32_t *cp)
{
    unsigned char c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || (size_t)len > n)
        return 0;
    uint32_t v = c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    static const uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_for_len[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

bv_status bv_text_corpus_load(const char *path, double val_fraction, bv_text_corpus *out,
                              bv_error *err)
{
    memset(out, 0, sizeof *out);
    uint64_t max_bytes;
    bv_status st = bv_input_limit("BIVOUAC_MAX_TEXT_BYTES", BV_TEXT_MAX_BYTES, &max_bytes, err);
    if (st != BV_OK)
        return st;
    char *text = NULL;
    size_t len = 0;
    st = bv_input_read(path, max_bytes, "a text dataset", "BIVOUAC_MAX_TEXT_BYTES", &text, &len,
                       err);
    if (st != BV_OK)
        return st;
    unsigned char *buf = (unsigned char *)text;
    if (len == 0) {
        free(buf);
        return bv_error_set(err, BV_ERR_INVALID, "the text %s is empty", path);
    }
    /* Two passes over the bytes, so memory stays at the text plus 4 bytes a token (a
     * copy of the text as code points, sorted for the vocabulary, took 12): the first
     * checks the UTF-8 and marks each code point used, the second writes the ids. The
     * vocabulary is every distinct code point of the text, sorted (nanoGPT's prepare.py
     * builds it from the whole file, so validation has no unknown chars). */
    enum { CODE_POINTS = 0x110000 };
    uint8_t *seen = calloc(CODE_POINTS / 8, 1);
    if (!seen) {
        free(buf);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t n = 0, line = 1, v = 0;
    for (size_t i = 0; i < len; n++) {
        uint32_t cp;
        int l = utf8_decode(buf + i, len - i, &cp);
        if (!l) {
            st = bv_error_set(err, BV_ERR_INVALID,
                              "the text %s is not UTF-8: invalid byte 0x%02x at offset %zu "
                              "(line %zu)", path, buf[i], i, line);
            free(buf);
            free(seen);
            return st;
        }
        line += cp == '\n';
        v += !(seen[cp / 8] & (1u << (cp % 8)));
        seen[cp / 8] |= (uint8_t)(1u << (cp % 8));
        i += (size_t)l;
    }
    out->vocab = malloc(v * sizeof *out->vocab);
    out->ids = malloc(n * sizeof *out->ids);
    if (!out->vocab || !out->ids) {
        free(buf);
        free(seen);
        bv_text_corpus_free(out);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory tokenising %s", path);
    }
    size_t k = 0;
    for (uint32_t cp = 0; cp < CODE_POINTS; cp++)
        if (seen[cp / 8] & (1u << (cp % 8)))
            out->vocab[k++] = cp;
    free(seen);
    out->vocab_size = (int64_t)v;
    for (size_t i = 0, t = 0; i < len; t++) {
        uint32_t cp;
        i += (size_t)utf8_decode(buf + i, len - i, &cp); /* valid: checked above */
        const uint32_t *hit = bsearch(&cp, out->vocab, v, sizeof cp, cmp_u32);
        out->ids[t] = (int32_t)(hit - out->vocab);
    }
    free(buf);
    out->n = (int64_t)n;
    out->n_train = (int64_t)((double)n * (1.0 - val_fraction));
    return BV_OK;
}

void bv_text_corpus_free(bv_text_corpus *c)
{
    free(c->vocab);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

void bv_text_corpus_batch(const bv_text_corpus *c, uint64_t seed, uint64_t stream, bool val,
                          int64_t batch, int64_t block, int64_t row0, int64_t rows,
                          int32_t *tokens, int32_t *targets)
{
    int64_t begin = val ? c->n_train : 0;
    int64_t len = val ? c->n - c->n_train : c->n_train;
    bv_rng rng;
    bv_rng_init(&rng, seed, stream);
    for (int64_t b = 0; b < batch && b < row0 + rows; b++) {
        int64_t off = begin + (int64_t)(bv_rng_next(&rng) % (uint64_t)(len - block));
        if (b < row0)
            continue;
        memcpy(tokens + (b - row0) * block, c->ids + off, (size_t)block * 4);
        memcpy(targets + (b - row0) * block, c->ids + off + 1, (size_t)block * 4);
    }
}
