/* Tests of the checkpoint plugin: the file format, atomic background writing, every/keep,
 * and resuming past damaged files. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "bivouac/log.h"
#include "bivouac/plugin.h"
#include "bivouac/resilience.h"
#include "bivouac/wire.h"
#include "checkpoint_file.h"

/* ---- helpers ---- */

static const bv_resilience_ops *ops(void)
{
    return bv_resilience_checkpoint_plugin()->ops;
}

static char *make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/bv-ckpt-XXXXXX", base && base[0] ? base : "/tmp");
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    return strdup(dir);
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The directory's entries (hidden ones too), sorted, joined with spaces. */
static void list_dir(const char *dir, char *buf, size_t len)
{
    char *names[256];
    size_t n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 256)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i)
            strncat(buf, " ", len - strlen(buf) - 1);
        strncat(buf, names[i], len - strlen(buf) - 1);
        free(names[i]);
    }
}

static void set_option(bv_opts *o, const char *name, int64_t i, const char *s)
{
    for (size_t k = 0; k < o->count; k++) {
        if (strcmp(o->values[k].decl->name, name) != 0)
            continue;
        if (s) {
            free(o->values[k].v.s);
            o->values[k].v.s = strdup(s);
        } else {
            o->values[k].v.i = i;
        }
        o->values[k].from_user = true;
        return;
    }
    fail_msg("no option %s", name);
}

/* A plugin instance writing to dir. */
static bv_resilience *open_checkpointer(const char *dir, int64_t every, int64_t keep)
{
    bv_opts o;
    bv_error err = {0};
    assert_int_equal(bv_opts_defaults(&o, "resilience", bv_resilience_checkpoint_plugin()->options,
                                      &err),
                     BV_OK);
    set_option(&o, "every", every, NULL);
    set_option(&o, "keep", keep, NULL);
    set_option(&o, "dir", 0, dir);
    bv_run_info info = {.out_dir = "/nonexistent-out", .config_dir = ".", .seed = 1};
    bv_resilience *r = ops()->create(&o, &info, &err);
    if (!r)
        fail_msg("create: %s", err.msg);
    bv_opts_free(&o);
    return r;
}

/* A state with blobs of awkward sizes: empty, odd, not a multiple of 8, larger. */
typedef struct test_state {
    bv_state state;
    bv_blob blobs[4];
    unsigned char small[7];
    unsigned char medium[1000];
    float weights[4099];
} test_state;

static void fill_state(test_state *t, int64_t epoch, unsigned seed)
{
    for (size_t i = 0; i < sizeof t->small; i++)
        t->small[i] = (unsigned char)(seed + i);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < sizeof t->medium; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        t->medium[i] = (unsigned char)x;
    }
    for (size_t i = 0; i < 4099; i++)
        t->weights[i] = (float)seed + (float)i * 0.25f;
    t->blobs[0] = (bv_blob){.name = "empty", .data = NULL, .size = 0};
    t->blobs[1] = (bv_blob){.name = "rng", .data = t->small, .size = sizeof t->small};
    t->blobs[2] = (bv_blob){.name = "adam.m/layer_0", .data = t->medium, .size = sizeof t->medium};
    t->blobs[3] = (bv_blob){.name = "weights", .data = t->weights, .size = sizeof t->weights};
    t->state = (bv_state){.epoch = epoch, .blobs = t->blobs, .count = 4};
}

static void assert_states_equal(const bv_state *want, const bv_state *got)
{
    assert_int_equal(got->epoch, want->epoch);
    assert_int_equal(got->count, want->count);
    for (size_t i = 0; i < want->count; i++) {
        assert_string_equal(got->blobs[i].name, want->blobs[i].name);
        assert_int_equal(got->blobs[i].size, want->blobs[i].size);
        if (want->blobs[i].size)
            assert_memory_equal(got->blobs[i].data, want->blobs[i].data, want->blobs[i].size);
    }
}

static void write_epochs(const char *dir, int64_t every, int64_t keep, int64_t from,
                         int64_t to)
{
    bv_resilience *r = open_checkpointer(dir, every, keep);
    test_state t;
    bv_error err = {0};
    for (int64_t e = from; e <= to; e++) {
        fill_state(&t, e, (unsigned)e);
        assert_int_equal(ops()->epoch_end(r, &t.state, &err), BV_OK);
    }
    ops()->destroy(r);
}

static void path_of(char *buf, size_t len, const char *dir, int64_t epoch)
{
    char name[64];
    checkpoint_file_name(epoch, name, sizeof name);
    snprintf(buf, len, "%s/%s", dir, name);
}

static size_t file_size(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (size_t)sb.st_size;
}

static unsigned char *slurp(const char *path, size_t *size)
{
    *size = file_size(path);
    unsigned char *buf = malloc(*size);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, *size, f), *size);
    fclose(f);
    return buf;
}

static void spew(const char *path, const unsigned char *buf, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, size, f), size);
    fclose(f);
}

/* Captures what bv_log writes to stderr. */
static int saved_stderr = -1;
static char capture_path[PATH_MAX];

static void capture_begin(void)
{
    fflush(stderr);
    snprintf(capture_path, sizeof capture_path, "/tmp/bv-ckpt-log-XXXXXX");
    int fd = mkstemp(capture_path);
    assert_true(fd >= 0);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}

static char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    size_t n;
    unsigned char *raw = slurp(capture_path, &n);
    unlink(capture_path);
    char *text = malloc(n + 1);
    if (n)
        memcpy(text, raw, n);
    text[n] = '\0';
    free(raw);
    return text;
}

/* ---- tests ---- */

static void test_descriptor_declares_options_and_extras(void **unused)
{
    const bv_plugin *p = bv_resilience_checkpoint_plugin();
    assert_int_equal(p->magic, BV_PLUGIN_MAGIC);
    assert_int_equal(p->abi_major, BV_ABI_MAJOR);
    assert_int_equal(p->struct_size, sizeof(bv_plugin));
    assert_int_equal(p->kind, BV_KIND_RESILIENCE);
    assert_string_equal(p->name, "checkpoint");
    assert_string_equal(p->version, "0.1.0");
    assert_int_equal(p->ops_size, sizeof(bv_resilience_ops));
    const bv_resilience_ops *o = p->ops;
    assert_non_null(o->create);
    assert_non_null(o->destroy);
    assert_non_null(o->epoch_end);
    assert_non_null(o->restore);

    bv_opts opts;
    bv_error err = {0};
    assert_int_equal(bv_opts_defaults(&opts, "resilience", p->options, &err), BV_OK);
    assert_int_equal(opts.count, 3);
    assert_int_equal(bv_opts_int(&opts, "every"), 10);
    assert_int_equal(bv_opts_int(&opts, "keep"), 2);
    assert_string_equal(bv_opts_str(&opts, "dir"), "");
    bv_opts_free(&opts);

    const bv_option *every = bv_schema_find(p->options, "every");
    assert_true(every->has_range && every->min == 1 && every->max == 1e9);
    const bv_option *keep = bv_schema_find(p->options, "keep");
    assert_true(keep->has_range && keep->min == 1 && keep->max == 1000);
    assert_int_equal(bv_schema_find(p->options, "dir")->type, BV_OPT_DIR);

    assert_ptr_equal(p->get_proc_address("read_file"), (void *)bv_checkpoint_read_file);
    assert_ptr_equal(p->get_proc_address("write_file"), (void *)bv_checkpoint_write_file);
    assert_ptr_equal(p->get_proc_address("restore_dir"), (void *)bv_checkpoint_restore_dir);
    assert_null(p->get_proc_address("nope"));
}

static void test_default_dir_is_out_dir_checkpoints(void **unused)
{
    char *out = make_tmpdir();
    bv_opts o;
    bv_error err = {0};
    assert_int_equal(bv_opts_defaults(&o, "resilience",
                                      bv_resilience_checkpoint_plugin()->options, &err),
                     BV_OK);
    set_option(&o, "every", 1, NULL);
    bv_run_info info = {.out_dir = out, .config_dir = ".", .seed = 1};
    bv_resilience *r = ops()->create(&o, &info, &err);
    assert_non_null(r);
    bv_opts_free(&o);
    test_state t;
    fill_state(&t, 1, 1);
    assert_int_equal(ops()->epoch_end(r, &t.state, &err), BV_OK);
    ops()->destroy(r);

    char sub[PATH_MAX], listing[1024];
    snprintf(sub, sizeof sub, "%s/checkpoints", out);
    list_dir(sub, listing, sizeof listing);
    assert_string_equal(listing, "ckpt-00000001.bvck");
    remove_tree(sub);
    remove_tree(out);
    free(out);
}

static void test_round_trip_keeps_every_byte(void **unused)
{
    char *dir = make_tmpdir();
    test_state t;
    fill_state(&t, 3, 42);
    bv_error err = {0};

    bv_resilience *r = open_checkpointer(dir, 1, 2);
    assert_int_equal(ops()->epoch_end(r, &t.state, &err), BV_OK);
    ops()->destroy(r);

    /* A fresh instance (a resumed run) restores it... */
    r = open_checkpointer(dir, 1, 2);
    bv_state got = {0};
    assert_int_equal(ops()->restore(r, &got, &err), BV_OK);
    assert_states_equal(&t.state, &got);
    assert_non_null(bv_state_find(&got, "empty"));
    bv_state_free(&got);
    ops()->destroy(r);

    /* ...and so does the exported reader, from the path alone. */
    char path[PATH_MAX];
    path_of(path, sizeof path, dir, 3);
    assert_int_equal(bv_checkpoint_read_file(path, &got, &err), BV_OK);
    assert_states_equal(&t.state, &got);
    bv_state_free(&got);
    remove_tree(dir);
    free(dir);
}

static void test_file_layout_matches_the_documented_format(void **unused)
{
    char *dir = make_tmpdir();
    unsigned char abc[3] = {'a', 'b', 'c'};
    bv_blob blobs[2] = {{.name = "w", .data = abc, .size = 3},
                        {.name = "epoch_rng", .data = abc, .size = 0}};
    bv_state s = {.epoch = 258, .blobs = blobs, .count = 2};
    bv_error err = {0};
    assert_int_equal(bv_checkpoint_write_file(dir, &s, &err), BV_OK);

    char path[PATH_MAX];
    path_of(path, sizeof path, dir, 258);
    assert_string_equal(strrchr(path, '/') + 1, "ckpt-00000258.bvck");
    size_t n;
    unsigned char *f = slurp(path, &n);
    /* header 40 + blob "w" (16 + 8 + 8) + blob "epoch_rng" (16 + 16 + 0) + trailer 8 */
    assert_int_equal(n, 112);
    static const unsigned char header[40] = {
        'B', 'V', 'C', 'K', 1, 0, 40, 0,  /* magic, version 1, header size 40 */
        2, 1, 0, 0, 0, 0, 0, 0,           /* epoch 258 */
        2, 0, 0, 0, 0, 0, 0, 0,           /* 2 blobs */
        112, 0, 0, 0, 0, 0, 0, 0,         /* total length */
        0, 0, 0, 0, 0, 0, 0, 0};          /* reserved */
    assert_memory_equal(f, header, 40);
    static const unsigned char blob0[32] = {
        1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, /* name 1 byte, data 3 bytes */
        'w', 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c', 0, 0, 0, 0, 0};
    assert_memory_equal(f + 40, blob0, 32);
    static const unsigned char blob1[32] = {
        9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        'e', 'p', 'o', 'c', 'h', '_', 'r', 'n', 'g', 0, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(f + 72, blob1, 32);
    assert_memory_equal(f + 104, "BVCE", 4);
    uint32_t crc = bv_crc32c(0, f, 108);
    unsigned char crc_le[4] = {(unsigned char)crc, (unsigned char)(crc >> 8),
                               (unsigned char)(crc >> 16), (unsigned char)(crc >> 24)};
    assert_memory_equal(f + 108, crc_le, 4);
    free(f);
    unlink(path);
    remove_tree(dir);
    free(dir);
}

static void test_every_and_keep_leave_the_newest(void **unused)
{
    char *dir = make_tmpdir();
    write_epochs(dir, 2, 2, 1, 7);
    char listing[1024];
    list_dir(dir, listing, sizeof listing);
    assert_string_equal(listing, "ckpt-00000004.bvck ckpt-00000006.bvck");
    remove_tree(dir);
    free(dir);
}

static void test_damaged_files_do_not_count_as_kept(void **unused)
{
    char *dir = make_tmpdir();
    write_epochs(dir, 2, 5, 1, 6); /* 2, 4, 6 */
    char path[PATH_MAX], listing[1024];
    path_of(path, sizeof path, dir, 6);
    assert_int_equal(truncate(path, 100), 0);

    /* A resumed run writes 8: the good ones are 8 and 4, so damaged 6 cannot push 4 out. */
    capture_begin();
    write_epochs(dir, 2, 2, 8, 8);
    list_dir(dir, listing, sizeof listing);
    assert_string_equal(listing, "ckpt-00000004.bvck ckpt-00000006.bvck ckpt-00000008.bvck");
    write_epochs(dir, 2, 2, 10, 10);
    free(capture_end());
    list_dir(dir, listing, sizeof listing);
    assert_string_equal(listing, "ckpt-00000008.bvck ckpt-00000010.bvck");
    remove_tree(dir);
    free(dir);
}

static void test_truncated_newest_is_skipped(void **unused)
{
    char *dir = make_tmpdir();
    write_epochs(dir, 1, 5, 1, 2);
    char path[PATH_MAX];
    path_of(path, sizeof path, dir, 2);
    size_t full = file_size(path);
    assert_int_equal(truncate(path, (off_t)(full - 100)), 0);

    bv_resilience *r = open_checkpointer(dir, 1, 5);
    bv_state got = {0};
    bv_error err = {0};
    capture_begin();
    assert_int_equal(ops()->restore(r, &got, &err), BV_OK);
    char *log = capture_end();
    char want[PATH_MAX + 200];
    snprintf(want, sizeof want,
             "bivouac: warning: checkpoint %s is damaged (truncated: %zu of %zu bytes); "
             "using an older one\n",
             path, full - 100, full);
    assert_string_equal(log, want);
    free(log);
    test_state t;
    fill_state(&t, 1, 1);
    assert_states_equal(&t.state, &got);
    bv_state_free(&got);
    ops()->destroy(r);

    assert_int_equal(bv_checkpoint_read_file(path, &got, &err), BV_ERR_CORRUPT);
    snprintf(want, sizeof want, "checkpoint %s is damaged (truncated: %zu of %zu bytes)", path,
             full - 100, full);
    assert_string_equal(err.msg, want);
    assert_int_equal(got.count, 0);
    assert_null(got.blobs);
    remove_tree(dir);
    free(dir);
}

static void test_bit_flipped_newest_is_skipped(void **unused)
{
    char *dir = make_tmpdir();
    write_epochs(dir, 1, 5, 1, 3);
    char path[PATH_MAX];
    path_of(path, sizeof path, dir, 3);
    size_t n;
    unsigned char *f = slurp(path, &n);
    f[n / 2] ^= 0x10; /* inside the weights */
    spew(path, f, n);
    uint32_t stored = (uint32_t)f[n - 4] | (uint32_t)f[n - 3] << 8 | (uint32_t)f[n - 2] << 16 |
                      (uint32_t)f[n - 1] << 24;
    uint32_t computed = bv_crc32c(0, f, n - 4);
    free(f);

    bv_resilience *r = open_checkpointer(dir, 1, 5);
    bv_state got = {0};
    bv_error err = {0};
    capture_begin();
    assert_int_equal(ops()->restore(r, &got, &err), BV_OK);
    char *log = capture_end();
    char want[PATH_MAX + 200];
    snprintf(want, sizeof want,
             "bivouac: warning: checkpoint %s is damaged (CRC-32C mismatch: stored %08x, "
             "computed %08x); using an older one\n",
             path, stored, computed);
    assert_string_equal(log, want);
    free(log);
    test_state t;
    fill_state(&t, 2, 2);
    assert_states_equal(&t.state, &got);
    bv_state_free(&got);
    ops()->destroy(r);
    remove_tree(dir);
    free(dir);
}

static void test_bad_magic_and_version_are_named(void **unused)
{
    char *dir = make_tmpdir();
    write_epochs(dir, 1, 5, 1, 1);
    char path[PATH_MAX], want[PATH_MAX + 100];
    path_of(path, sizeof path, dir, 1);
    size_t n;
    unsigned char *f = slurp(path, &n);
    bv_state got = {0};
    bv_error err = {0};

    f[4] = 2; /* version 2 */
    spew(path, f, n);
    assert_int_equal(bv_checkpoint_read_file(path, &got, &err), BV_ERR_CORRUPT);
    snprintf(want, sizeof want,
             "checkpoint %s is damaged (unsupported format version 2 (expected 1))", path);
    assert_string_equal(err.msg, want);

    f[4] = 1;
    f[0] = 'X';
    spew(path, f, n);
    assert_int_equal(bv_checkpoint_read_file(path, &got, &err), BV_ERR_CORRUPT);
    snprintf(want, sizeof want, "checkpoint %s is damaged (bad magic)", path);
    assert_string_equal(err.msg, want);

    /* Every file damaged: nothing to resume from. */
    bv_log_set_level(BV_LOG_ERROR);
    assert_int_equal(bv_checkpoint_restore_dir(dir, &got, &err), BV_ERR_IO);
    bv_log_set_level(BV_LOG_INFO);
    snprintf(want, sizeof want, "no usable checkpoint in %s", dir);
    assert_string_equal(err.msg, want);
    free(f);
    remove_tree(dir);
    free(dir);
}

static void test_no_temporaries_left_after_destroy(void **unused)
{
    char *dir = make_tmpdir();
    char stale[PATH_MAX], listing[1024];
    snprintf(stale, sizeof stale, "%s/.ckpt-AbC123.tmp", dir);
    spew(stale, (const unsigned char *)"BVCK", 4); /* a crashed run's leftover */
    write_epochs(dir, 1, 3, 1, 5);
    list_dir(dir, listing, sizeof listing);
    assert_string_equal(listing, "ckpt-00000003.bvck ckpt-00000004.bvck ckpt-00000005.bvck");
    remove_tree(dir);
    free(dir);
}

static void test_restore_from_empty_dir_says_so(void **unused)
{
    char *dir = make_tmpdir();
    bv_resilience *r = open_checkpointer(dir, 1, 2);
    bv_state got = {0};
    bv_error err = {0};
    assert_int_equal(ops()->restore(r, &got, &err), BV_ERR_IO);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "no usable checkpoint in %s", dir);
    assert_string_equal(err.msg, want);
    assert_int_equal(got.count, 0);
    ops()->destroy(r);

    char missing[PATH_MAX];
    snprintf(missing, sizeof missing, "%s/never-made", dir);
    assert_int_equal(bv_checkpoint_restore_dir(missing, &got, &err), BV_ERR_IO);
    snprintf(want, sizeof want, "no usable checkpoint in %s", missing);
    assert_string_equal(err.msg, want);
    remove_tree(dir);
    free(dir);
}

static void test_snapshot_is_independent_of_caller_buffers(void **unused)
{
    char *dir = make_tmpdir();
    enum { BIG = 16 << 20 };
    unsigned char *big = malloc(BIG);
    memset(big, 0xAB, BIG);
    char name[] = "weights";
    bv_blob blob = {.name = name, .data = big, .size = BIG};
    bv_state s = {.epoch = 1, .blobs = &blob, .count = 1};
    bv_error err = {0};

    bv_resilience *r = open_checkpointer(dir, 1, 2);
    assert_int_equal(ops()->epoch_end(r, &s, &err), BV_OK);
    /* The engine goes on training the moment epoch_end returns. */
    memset(big, 0xCD, BIG);
    name[0] = 'X';
    s.epoch = 2;

    bv_state got = {0};
    assert_int_equal(ops()->restore(r, &got, &err), BV_OK);
    assert_int_equal(got.epoch, 1);
    assert_int_equal(got.count, 1);
    assert_string_equal(got.blobs[0].name, "weights");
    assert_int_equal(got.blobs[0].size, BIG);
    unsigned char *want = malloc(BIG);
    memset(want, 0xAB, BIG);
    assert_memory_equal(got.blobs[0].data, want, BIG);
    free(want);
    bv_state_free(&got);
    ops()->destroy(r);
    free(big);
    remove_tree(dir);
    free(dir);
}

static void test_write_error_is_reported_by_next_epoch_end(void **unused)
{
    char *dir = make_tmpdir();
    bv_resilience *r = open_checkpointer(dir, 1, 2);
    remove_tree(dir); /* the disk goes away under the run */
    test_state t;
    bv_error err = {0};
    fill_state(&t, 1, 1);
    assert_int_equal(ops()->epoch_end(r, &t.state, &err), BV_OK);

    fill_state(&t, 2, 2);
    capture_begin();
    bv_status st = ops()->epoch_end(r, &t.state, &err); /* waits for epoch 1's write */
    char *log = capture_end();
    assert_int_equal(st, BV_ERR_IO);
    char want[PATH_MAX + 200];
    snprintf(want, sizeof want,
             "checkpoint of epoch 1 was not written: cannot create a checkpoint in %s: "
             "No such file or directory",
             dir);
    assert_string_equal(err.msg, want);
    assert_string_equal(log, ""); /* the caller reports it: once */
    free(log);

    /* Epoch 2's write fails too; destroy, which cannot return it, logs it. */
    capture_begin();
    ops()->destroy(r);
    log = capture_end();
    char want_log[PATH_MAX + 300];
    snprintf(want_log, sizeof want_log,
             "bivouac: error: checkpoint of epoch 2 was not written: cannot create a "
             "checkpoint in %s: No such file or directory\n",
             dir);
    assert_string_equal(log, want_log);
    free(log);
    free(dir);
}

static void test_invalid_state_is_refused(void **unused)
{
    char *dir = make_tmpdir();
    bv_resilience *r = open_checkpointer(dir, 1, 2);
    bv_blob blob = {.name = "", .data = NULL, .size = 0};
    bv_state s = {.epoch = 1, .blobs = &blob, .count = 1};
    bv_error err = {0};
    capture_begin();
    assert_int_equal(ops()->epoch_end(r, &s, &err), BV_ERR_INVALID);
    char *log = capture_end();
    assert_string_equal(log, ""); /* returned, not logged: the caller prints it once */
    free(log);
    assert_string_equal(err.msg,
                        "checkpoint of epoch 1: blob 0: a name must have 1 to 4096 bytes, got 0");
    ops()->destroy(r);
    char listing[1024];
    list_dir(dir, listing, sizeof listing);
    assert_string_equal(listing, "");
    remove_tree(dir);
    free(dir);
}

/* A FIFO or a directory named like a checkpoint is skipped with a warning, newest first,
 * and the FIFO is never opened for a blocking read (that hung restore). */
static void test_fifo_and_directory_named_like_checkpoints_are_skipped(void **unused)
{
    char *dir = make_tmpdir();
    write_epochs(dir, 1, 5, 1, 1);
    char fifo[PATH_MAX], sub[PATH_MAX];
    path_of(fifo, sizeof fifo, dir, 3);
    path_of(sub, sizeof sub, dir, 2);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    assert_int_equal(mkdir(sub, 0755), 0);

    bv_state got = {0};
    bv_error err = {0};
    capture_begin();
    assert_int_equal(bv_checkpoint_restore_dir(dir, &got, &err), BV_OK);
    char *log = capture_end();
    char want[3 * PATH_MAX];
    snprintf(want, sizeof want,
             "bivouac: warning: checkpoint %s is not a regular file; using an older one\n"
             "bivouac: warning: checkpoint %s is not a regular file; using an older one\n",
             fifo, sub);
    assert_string_equal(log, want);
    free(log);
    test_state t;
    fill_state(&t, 1, 1);
    assert_states_equal(&t.state, &got);
    bv_state_free(&got);

    assert_int_equal(bv_checkpoint_read_file(fifo, &got, &err), BV_ERR_IO);
    snprintf(want, sizeof want, "%s is not a regular file", fifo);
    assert_string_equal(err.msg, want);
    rmdir(sub);
    remove_tree(dir);
    free(dir);
}

/* A directory where a checkpoint must go fails that checkpoint with one clear message,
 * returned (not logged) by the next epoch_end. */
static void test_directory_in_the_way_of_a_write_is_named(void **unused)
{
    char *dir = make_tmpdir();
    char sub[PATH_MAX];
    path_of(sub, sizeof sub, dir, 1);
    assert_int_equal(mkdir(sub, 0755), 0);
    bv_resilience *r = open_checkpointer(dir, 1, 2);
    test_state t;
    bv_error err = {0};
    fill_state(&t, 1, 1);
    assert_int_equal(ops()->epoch_end(r, &t.state, &err), BV_OK);
    fill_state(&t, 2, 2);
    capture_begin();
    assert_int_equal(ops()->epoch_end(r, &t.state, &err), BV_ERR_IO); /* waits for 1 */
    char *log = capture_end();
    assert_string_equal(log, "");
    free(log);
    char want[PATH_MAX + 200];
    snprintf(want, sizeof want,
             "checkpoint of epoch 1 was not written: %s is a directory, not a checkpoint file",
             sub);
    assert_string_equal(err.msg, want);
    capture_begin();
    ops()->destroy(r); /* epoch 2's write went through */
    log = capture_end();
    assert_string_equal(log, "");
    free(log);
    rmdir(sub);
    remove_tree(dir);
    free(dir);
}

static void test_file_names_parse_strictly(void **unused)
{
    int64_t e = -1;
    assert_true(checkpoint_parse_name("ckpt-00000042.bvck", &e));
    assert_int_equal(e, 42);
    assert_true(checkpoint_parse_name("ckpt-123456789.bvck", &e));
    assert_int_equal(e, 123456789);
    assert_false(checkpoint_parse_name("ckpt-42.bvck", &e));
    assert_false(checkpoint_parse_name("ckpt-00000042.bvck.tmp", &e));
    assert_false(checkpoint_parse_name(".ckpt-abcdef.tmp", &e));
    assert_false(checkpoint_parse_name("ckpt--0000042.bvck", &e));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor_declares_options_and_extras),
        cmocka_unit_test(test_default_dir_is_out_dir_checkpoints),
        cmocka_unit_test(test_round_trip_keeps_every_byte),
        cmocka_unit_test(test_file_layout_matches_the_documented_format),
        cmocka_unit_test(test_every_and_keep_leave_the_newest),
        cmocka_unit_test(test_damaged_files_do_not_count_as_kept),
        cmocka_unit_test(test_truncated_newest_is_skipped),
        cmocka_unit_test(test_bit_flipped_newest_is_skipped),
        cmocka_unit_test(test_bad_magic_and_version_are_named),
        cmocka_unit_test(test_no_temporaries_left_after_destroy),
        cmocka_unit_test(test_restore_from_empty_dir_says_so),
        cmocka_unit_test(test_snapshot_is_independent_of_caller_buffers),
        cmocka_unit_test(test_write_error_is_reported_by_next_epoch_end),
        cmocka_unit_test(test_invalid_state_is_refused),
        cmocka_unit_test(test_fifo_and_directory_named_like_checkpoints_are_skipped),
        cmocka_unit_test(test_directory_in_the_way_of_a_write_is_named),
        cmocka_unit_test(test_file_names_parse_strictly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
