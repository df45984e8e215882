/* Training a sequence model (seqmodel.h) layer by layer: the text corpus and its character
 * tokeniser, the depth-1 pipeline engine (every layer in this process, in order), AdamW
 * with warmup + cosine decay and global-norm clipping, evaluation, metrics.jsonl,
 * result.json, and checkpoint/resume through the resilience plugins with bit-identical
 * continuation. */
#ifndef BIVOUAC_TRAIN_SEQ_H
#define BIVOUAC_TRAIN_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "bivouac/compute.h"
#include "bivouac/error.h"
#include "bivouac/options.h"
#include "bivouac/resilience.h"
#include "bivouac/seqmodel.h"
#include "config.h"

struct bv_experiment;

/* The `dataset` and `train` schemas of an experiment whose model is a sequence model. */
extern const bv_option bv_seq_dataset_schema[];
extern const bv_option bv_seq_train_schema[];

/* Experiment-time checks for a sequence model (bv_experiment_load calls it once the
 * sections validated): the corpus exists, is non-empty UTF-8 and longer than a block in
 * both splits, the model's options fit the data, the compute plugin has the transformer
 * kernels. Every problem goes to diag with the position of the value at fault. Sets
 * x->dataset_label. */
void bv_seq_experiment_check(struct bv_experiment *x, const bv_node *dataset, bv_diag *diag);

/* ---- the character corpus ---- */
typedef struct bv_text_corpus {
    uint32_t *vocab;    /* sorted code points; token id = index */
    int64_t vocab_size;
    int32_t *ids;       /* the whole text as token ids */
    int64_t n;          /* tokens */
    int64_t n_train;    /* the first n_train tokens are the training split */
} bv_text_corpus;

/* Reads a UTF-8 text file. BV_ERR_INVALID (empty, not UTF-8 with the byte offset and
 * line) or BV_ERR_IO. */
bv_status bv_text_corpus_load(const char *path, double val_fraction, bv_text_corpus *out,
                              bv_error *err);
void bv_text_corpus_free(bv_text_corpus *c);

/* ---- the layer engine (depth-1 pipeline) ---- */
typedef struct bv_seq_engine bv_seq_engine;

/* Allocates every layer's parameters, gradients and AdamW moments, and the activation,
 * saved and scratch buffers for batches up to max_batch x max_seq. */
bv_status bv_seq_engine_create(const bv_seq_model_ops *mops, bv_seq_model *model,
                               const bv_compute_ops *k, bv_compute *c, int64_t max_batch,
                               int64_t max_seq, bv_seq_engine **out, bv_error *err);
void bv_seq_engine_free(bv_seq_engine *e);
/* Initialises every parameter from its spec; layer l draws from stream (seed, l) only. */
void bv_seq_engine_init(bv_seq_engine *e, uint64_t seed);
/* One layer's parameters (and with optimizer, its AdamW moments) as blobs named
 * "layer/<layer name>/<param>[/adam_m|/adam_v]", appended to s; tied tensors belong to
 * the layer that owns them. _set reads them back (BV_ERR_CORRUPT if missing/mis-sized). */
bv_status bv_seq_engine_layer_get(const bv_seq_engine *e, size_t layer, bool optimizer,
                                  bv_state *s, bv_error *err);
bv_status bv_seq_engine_layer_set(bv_seq_engine *e, size_t layer, bool optimizer,
                                  const bv_state *s, bv_error *err);
/* Forward through every layer; *logits points at batch x seq x vocab floats. */
bv_status bv_seq_engine_forward(bv_seq_engine *e, const int32_t *tokens, int64_t batch,
                                int64_t seq, bool training, uint64_t seed, int64_t step,
                                const float **logits, bv_error *err);

/* Zeroes the gradients, then forward, loss (mean over the batch x seq tokens) and backward
 * with dropout on: every gradient buffer then holds dLoss/dparam. */
bv_status bv_seq_engine_gradient(bv_seq_engine *e, const int32_t *tokens,
                                 const int32_t *targets, int64_t batch, int64_t seq,
                                 uint64_t seed, int64_t step, double *loss, bv_error *err);
/* Parameter i of a layer and its gradient buffer (a tied one: its owner's buffers). */
void bv_seq_engine_param(bv_seq_engine *e, size_t layer, size_t i, float **param,
                         float **grad);

/* `bivouac run` of a sequence-model experiment into out_dir (exists). Prints a summary
 * line unless quiet. Returns the exit status: 0 ok, 1 the run failed, 2 invalid input. */
int bv_train_seq_main(const struct bv_experiment *x, const char *out_dir, uint64_t seed,
                      bool resume, bool quiet);

#endif
