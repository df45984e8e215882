/* Fuzz target: the checkpoint reader (plugins/resilience/checkpoint/checkpoint_file.c),
 * compiled into the target. The input is a checkpoint file. It is read twice: as it is,
 * keeping the blobs and then only checking them (out == NULL), and once more with its
 * trailer's CRC-32C recomputed (as checkpoint_image_seal does), so that inputs whose
 * structure is right get past the checksum and reach the success path. A state that
 * reads back is written out again and must read back equal. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bivouac/log.h"
#include "bivouac/resilience.h"
#include "checkpoint_file.h"
#include "fuzz_util.h"

/* With BV_FUZZ_WRITE_SEEDS=DIR the target writes seed checkpoints into DIR and exits
 * (run.sh does this: the repository holds no checkpoint files). */
static void write_seeds(const char *dir)
{
    static const float weights[] = {0.5f, -1.25f, 3.0f};
    static const int64_t step = 12345;
    const struct {
        int64_t epoch;
        int nblobs;
    } seeds[] = {{0, 0}, {7, 1}, {42, 3}};
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
        bv_state s = {.epoch = seeds[k].epoch};
        if (seeds[k].nblobs > 0)
            bv_state_add(&s, "model.weights", weights, sizeof weights);
        if (seeds[k].nblobs > 1)
            bv_state_add(&s, "optimizer.step", &step, sizeof step);
        if (seeds[k].nblobs > 2)
            bv_state_add(&s, "rng", "abcdefghijk", 11);
        bv_error err;
        if (bv_checkpoint_write_file(dir, &s, &err) != BV_OK) {
            fprintf(stderr, "%s\n", err.msg);
            exit(1);
        }
        bv_state_free(&s);
    }
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    bv_log_set_level(BV_LOG_ERROR);
    fuzz_write_seeds_if_asked(write_seeds);
    return 0;
}

static void rewrite_check(const bv_state *s)
{
    char dir[512], path[600];
    fuzz_path(dir, sizeof dir, "rewrite");
    mkdir(dir, 0700);
    bv_error err;
    bv_error_clear(&err);
    if (s->epoch < 0) /* no file name for it: restore_dir would rightly not see it */
        return;
    if (bv_checkpoint_write_file(dir, s, &err) != BV_OK)
        return;
    bv_state back = {0};
    if (bv_checkpoint_restore_dir(dir, &back, &err) != BV_OK || back.epoch != s->epoch ||
        back.count != s->count) {
        fprintf(stderr, "a checkpoint that was read does not read back: %s\n", err.msg);
        abort();
    }
    for (size_t i = 0; i < s->count; i++)
        if (strcmp(back.blobs[i].name, s->blobs[i].name) != 0 ||
            back.blobs[i].size != s->blobs[i].size ||
            memcmp(back.blobs[i].data, s->blobs[i].data, s->blobs[i].size) != 0) {
            fprintf(stderr, "blob %zu differs after writing it back\n", i);
            abort();
        }
    bv_state_free(&back);
    char name[64];
    checkpoint_file_name(s->epoch, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void read_one(const char *path, bool rewrite)
{
    bv_state s = {0};
    bv_error err;
    bv_error_clear(&err);
    if (bv_checkpoint_read_file(path, &s, &err) == BV_OK) {
        if (rewrite)
            rewrite_check(&s);
        bv_state_free(&s);
    }
    bv_error_clear(&err);
    (void)checkpoint_read(path, NULL, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_path(path, sizeof path, "ckpt-00000001.bvck");
    fuzz_write_file(path, data, size);
    read_one(path, false);

    if (size >= BV_CKPT_HEADER_SIZE + BV_CKPT_TRAILER_SIZE) {
        unsigned char *sealed = malloc(size);
        if (!sealed)
            return 0;
        memcpy(sealed, data, size);
        memcpy(sealed + size - BV_CKPT_TRAILER_SIZE, BV_CKPT_END_MAGIC, 4);
        checkpoint_image_seal(sealed, size);
        fuzz_write_file(path, sealed, size);
        free(sealed);
        read_one(path, true);
    }
    return 0;
}
