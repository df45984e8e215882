/* The checkpoint resilience plugin: every `every` epochs, snapshot the training state and
 * let a background thread write it (atomically) while training goes on; resume from the
 * newest checkpoint that passes its checks. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "bivouac/plugin.h"
#include "bivouac/resilience.h"
#include "checkpoint_file.h"

struct bv_resilience {
    char *dir;
    int64_t every;
    int64_t keep;
    pthread_t writer;

    /* The one snapshot buffer: a sealed-to-be file image. epoch_end owns it while
     * `pending` is false, the writer thread while it is true. */
    unsigned char *image;
    size_t image_size;
    size_t image_cap;
    int64_t image_epoch;
    unsigned requests_seen; /* write_requests when this instance last wrote on request */

    /* Epochs this instance wrote and fsync'ed, newest first (writer thread only): they
     * count as good when pruning without being read back. */
    int64_t *written;
    size_t written_count;

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t changed;
    bool pending;  /* a snapshot is waiting for, or being written by, the writer */
    bool stopping; /* destroy: write what is pending, then exit */
    bv_error failure; /* a failed write not yet reported (status BV_OK: none) */
    bv_error notice;  /* a failed clean-up not yet reported as a warning */
};

static void remember_written(bv_resilience *r, int64_t epoch)
{
    size_t n = r->written_count < (size_t)r->keep ? r->written_count + 1 : (size_t)r->keep;
    memmove(r->written + 1, r->written, (n - 1) * sizeof *r->written);
    r->written[0] = epoch;
    r->written_count = n;
}

static bool was_written(const bv_resilience *r, int64_t epoch)
{
    for (size_t i = 0; i < r->written_count; i++)
        if (r->written[i] == epoch)
            return true;
    return false;
}

/* Deletes every checkpoint older than the keep-th newest good one. Files this instance
 * wrote are good; others (from an earlier run) are read and checked first, so a damaged
 * file never pushes the last good one out. */
static bv_status prune(bv_resilience *r, bv_error *err)
{
    int64_t *epochs;
    size_t count;
    bv_status st = checkpoint_list(r->dir, &epochs, &count, err);
    if (st != BV_OK)
        return st;
    int64_t good = 0;
    char name[64], path[PATH_MAX];
    for (size_t i = 0; i < count && st == BV_OK; i++) {
        checkpoint_file_name(epochs[i], name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", r->dir, name);
        if (good < r->keep) {
            bv_error ignored;
            if (was_written(r, epochs[i]) || checkpoint_read(path, NULL, &ignored) == BV_OK)
                good++;
            continue;
        }
        if (unlink(path) != 0 && errno != ENOENT)
            st = bv_error_set(err, BV_ERR_IO, "cannot delete old checkpoint %s: %s", path,
                              strerror(errno));
    }
    free(epochs);
    return st;
}

static void *writer_main(void *arg)
{
    bv_resilience *r = arg;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->pending && !r->stopping)
            pthread_cond_wait(&r->changed, &r->lock);
        if (!r->pending)
            break; /* stopping, nothing left to write */
        pthread_mutex_unlock(&r->lock);

        bv_error err = {0}, cleanup = {0};
        checkpoint_image_seal(r->image, r->image_size);
        bv_status st = checkpoint_image_write(r->dir, r->image_epoch, r->image, r->image_size,
                                              &err);
        if (st == BV_OK) {
            remember_written(r, r->image_epoch);
            prune(r, &cleanup);
        }

        pthread_mutex_lock(&r->lock);
        if (st != BV_OK && r->failure.status == BV_OK)
            bv_error_set(&r->failure, st, "checkpoint of epoch %lld was not written: %s",
                         (long long)r->image_epoch, err.msg);
        if (cleanup.status != BV_OK && r->notice.status == BV_OK)
            r->notice = cleanup;
        r->pending = false;
        pthread_cond_broadcast(&r->changed);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* Waits until the writer has nothing in flight. Call with r->lock held. */
static void wait_idle_locked(bv_resilience *r)
{
    while (r->pending)
        pthread_cond_wait(&r->changed, &r->lock);
}

/* Takes the writer's unreported outcome. Called with r->lock held; returns with it released,
 * so the logging happens outside the lock. A failure goes back in err for the caller to
 * report (logging it here as well printed it twice); only destroy, which has no way to
 * return it (err NULL), logs it. */
static bv_status report(bv_resilience *r, bv_error *err)
{
    bv_error failure = r->failure, notice = r->notice;
    r->failure.status = BV_OK;
    r->notice.status = BV_OK;
    pthread_mutex_unlock(&r->lock);
    if (notice.status != BV_OK)
        bv_log(BV_LOG_WARN, "%s", notice.msg);
    if (failure.status == BV_OK)
        return BV_OK;
    if (!err)
        bv_log(BV_LOG_ERROR, "%s", failure.msg);
    return bv_error_set(err, failure.status, "%s", failure.msg);
}

static bv_status mkdir_p(const char *dir, bv_error *err)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return bv_error_set(err, BV_ERR_IO, "%s: path too long", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return bv_error_set(err, BV_ERR_IO, "cannot create checkpoint directory %s: %s",
                                path, strerror(errno));
        *p = c;
        if (c == '\0')
            break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return bv_error_set(err, BV_ERR_IO, "checkpoint directory %s is not a directory", dir);
    return BV_OK;
}

/* A run that crashed mid-write leaves a temporary file behind; nothing will ever rename
 * it, so it goes. */
static void remove_stale_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, ".ckpt-", 6) == 0 && n > 10 &&
            strcmp(e->d_name + n - 4, ".tmp") == 0) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (unlink(path) == 0)
                bv_log(BV_LOG_DEBUG, "removed a partial checkpoint %s", path);
        }
    }
    closedir(d);
}

/* Bumped by the write_now export (plugins.resilience.checkpoint.write_now): each instance
 * writes the next state it is offered when this differs from what it last saw, whether or
 * not that epoch is due. Process-wide, as an export reaches no instance. */
static atomic_uint write_requests;

static void export_write_now(void)
{
    atomic_fetch_add(&write_requests, 1);
}

static bv_resilience *checkpoint_create(const bv_opts *opts, const bv_run_info *info,
                                        bv_error *err)
{
    bv_resilience *r = calloc(1, sizeof *r);
    if (!r) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->every = bv_opts_int(opts, "every");
    r->requests_seen = atomic_load(&write_requests); /* a new run owes nothing */
    r->keep = bv_opts_int(opts, "keep");
    const char *dir = bv_opts_str(opts, "dir");
    if (dir && dir[0]) {
        r->dir = strdup(dir);
    } else if (info && info->out_dir) {
        size_t n = strlen(info->out_dir) + sizeof "/checkpoints";
        r->dir = malloc(n);
        if (r->dir)
            snprintf(r->dir, n, "%s/checkpoints", info->out_dir);
    } else {
        bv_error_set(err, BV_ERR_INVALID, "checkpoint: no 'dir' given and the run has no "
                                          "output directory");
        free(r);
        return NULL;
    }
    r->written = calloc((size_t)r->keep, sizeof *r->written);
    if (!r->dir || !r->written) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        free(r->dir);
        free(r->written);
        free(r);
        return NULL;
    }
    if (mkdir_p(r->dir, err) != BV_OK) {
        free(r->dir);
        free(r->written);
        free(r);
        return NULL;
    }
    remove_stale_temporaries(r->dir);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->changed, NULL);
    int rc = pthread_create(&r->writer, NULL, writer_main, r);
    if (rc != 0) {
        bv_error_set(err, BV_ERR_INTERNAL, "checkpoint: cannot start the writer thread: %s",
                     strerror(rc));
        pthread_cond_destroy(&r->changed);
        pthread_mutex_destroy(&r->lock);
        free(r->dir);
        free(r->written);
        free(r);
        return NULL;
    }
    return r;
}

static void checkpoint_destroy(bv_resilience *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->writer, NULL);

    pthread_mutex_lock(&r->lock);
    report(r, NULL); /* unlocks */
    pthread_cond_destroy(&r->changed);
    pthread_mutex_destroy(&r->lock);
    free(r->image);
    free(r->written);
    free(r->dir);
    free(r);
}

/* Checkpoint epochs wait for the previous snapshot to be on disk (at most one in flight),
 * then pay one copy of the state into the snapshot buffer. Other epochs only pick up the
 * writer's news. */
static bv_status checkpoint_epoch_end(bv_resilience *r, const bv_state *state, bv_error *err)
{
    unsigned requests = atomic_load(&write_requests);
    bool due = state->epoch % r->every == 0 || requests != r->requests_seen;
    r->requests_seen = requests;
    size_t size = 0;
    bv_error invalid = {0};
    bv_status valid = due ? checkpoint_image_size(state, &size, &invalid) : BV_OK;

    pthread_mutex_lock(&r->lock);
    if (due && valid == BV_OK)
        wait_idle_locked(r);
    bv_status reported = report(r, err); /* unlocks */
    if (valid != BV_OK) {
        if (reported != BV_OK && err) /* two errors: the caller reports the second */
            bv_log(BV_LOG_ERROR, "%s", err->msg);
        return bv_error_set(err, valid, "checkpoint of epoch %lld: %s",
                            (long long)state->epoch, invalid.msg);
    }
    if (!due)
        return reported;

    /* The writer is idle, so the buffer is ours until `pending` is set again. */
    if (size > r->image_cap) {
        free(r->image);
        r->image = malloc(size);
        r->image_cap = r->image ? size : 0;
        if (!r->image)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for a %zu-byte checkpoint",
                                size);
    }
    checkpoint_image_fill(state, r->image, size);
    r->image_size = size;
    r->image_epoch = state->epoch;

    pthread_mutex_lock(&r->lock);
    r->pending = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    return reported;
}

static bv_status checkpoint_restore(bv_resilience *r, bv_state *out, bv_error *err)
{
    /* A snapshot still being written is the newest state: let it land first. */
    pthread_mutex_lock(&r->lock);
    wait_idle_locked(r);
    pthread_mutex_unlock(&r->lock);
    return bv_checkpoint_restore_dir(r->dir, out, err);
}

/* A node of the run was lost (a stage process, a role): the snapshot in flight lands, and
 * the user learns which checkpoint a resume would start from. */
static bv_status checkpoint_peer_failed(bv_resilience *r, const bv_peer_event *peer,
                                        bv_error *err)
{
    (void)err;
    pthread_mutex_lock(&r->lock);
    wait_idle_locked(r);
    int64_t newest = r->written_count ? r->written[0] : -1;
    pthread_mutex_unlock(&r->lock);
    char name[64] = "";
    if (newest >= 0)
        checkpoint_file_name(newest, name, sizeof name);
    if (newest >= 0)
        bv_log(BV_LOG_INFO, "checkpoint: lost the %s node %lld at %.1f s; the newest "
               "checkpoint of this run is %s/%s", peer->role, (long long)peer->id, peer->time,
               r->dir, name);
    else
        bv_log(BV_LOG_INFO, "checkpoint: lost the %s node %lld at %.1f s; this run wrote no "
               "checkpoint yet", peer->role, (long long)peer->id, peer->time);
    return BV_OK;
}

static const bv_resilience_ops checkpoint_ops = {
    .create = checkpoint_create,
    .destroy = checkpoint_destroy,
    .epoch_end = checkpoint_epoch_end,
    .restore = checkpoint_restore,
    .peer_failed = checkpoint_peer_failed,
};

static const bv_option checkpoint_options[] = {
    BV_OPT_INT_RANGE("every", "10", 1, 1e9,
                     "write a checkpoint after every epoch divisible by this"),
    BV_OPT_DIRECTORY("dir", "", "where checkpoints go; empty: <out_dir>/checkpoints"),
    BV_OPT_INT_RANGE("keep", "2", 1, 1000,
                     "how many of the newest good checkpoints to keep"),
    BV_OPT_END,
};

static void *checkpoint_get_proc_address(const char *name)
{
    if (strcmp(name, "read_file") == 0)
        return (void *)bv_checkpoint_read_file;
    if (strcmp(name, "write_file") == 0)
        return (void *)bv_checkpoint_write_file;
    if (strcmp(name, "restore_dir") == 0)
        return (void *)bv_checkpoint_restore_dir;
    return NULL;
}

static const bv_export checkpoint_exports[] = {
    {"write_now", "!v:", (void (*)(void))export_write_now,
     "write a checkpoint of the next state the loop offers (this epoch for graph models, "
     "the next evaluation for sequence models), due or not"},
    {NULL, NULL, NULL, NULL},
};

static const bv_plugin checkpoint_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_RESILIENCE, "checkpoint", "0.1.0",
                     "periodic atomic checkpoints written in the background; resume from "
                     "the newest good one"),
    .options = checkpoint_options,
    .ops = &checkpoint_ops,
    .ops_size = sizeof checkpoint_ops,
    .get_proc_address = checkpoint_get_proc_address,
    .exports = checkpoint_exports,
};

BV_PLUGIN_ENTRY(resilience, checkpoint, checkpoint_plugin)
