/* A run directory holds one run: a lock keeps a second process out while a run uses it,
 * a new run refuses a directory that holds another run (or, with --force, clears that
 * run's own files), and the experiment copy a resume starts from (docs/limits.md). */
#ifndef BIVOUAC_RUN_DIR_H
#define BIVOUAC_RUN_DIR_H

#include <stdbool.h>

#include "experiment.h"

typedef struct bv_run_lock {
    int fd; /* -1: not held */
    char path[4200];
} bv_run_lock;

/* Takes DIR/.lock (flock, exclusive, not waiting) and writes this process's id into it.
 * Returns 0, or the exit status after printing why: DIR in use by another run (2), or the
 * lock file cannot be made (1). */
int bv_run_dir_lock(const char *dir, bv_run_lock *lock);
/* Deletes DIR/.lock, then lets go of it. Safe on a lock never taken. */
void bv_run_dir_unlock(bv_run_lock *lock);

/* For a new run into DIR (locked by the caller): 0 when DIR holds no run; with force, a
 * run's own files there are deleted first. Otherwise prints why and returns 2. */
int bv_run_dir_claim(const char *dir, bool force);

/* Writes DIR/experiment.yaml: the experiment as it runs (overrides applied), with every
 * path option absolute and `name:` spelled out, so that --resume needs nothing else. */
int bv_run_dir_write_experiment(const char *dir, const bv_experiment *x);

/* The CRC-32C of a regular file's bytes; false when it cannot be read. */
bool bv_run_dir_file_crc(const char *path, unsigned *crc);

#endif
