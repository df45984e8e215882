/* Run directories (run_dir.h): the lock, the one-run-per-directory rule and --force, and
 * the self-contained experiment copy that --resume starts from. */
#include "run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bivouac/wire.h"
#include "cli.h"
#include "config.h"

/* ---- the lock ---- */

/* The id written into a lock file, or 0 when it cannot be read (yet). */
static long lock_holder(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    return end != buf && pid > 0 ? pid : 0;
}

int bv_run_dir_lock(const char *dir, bv_run_lock *lock)
{
    lock->fd = -1;
    snprintf(lock->path, sizeof lock->path, "%s/.lock", dir);
    /* The holder deletes the file before it lets go, so a lock taken on a file that has
     * since been deleted (or replaced) protects nothing: then try again. */
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(lock->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
            return bv_cli_fail(BV_EXIT_FAILED, "cannot create %s: %s", lock->path,
                               strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            long pid = e == EWOULDBLOCK ? lock_holder(fd) : 0;
            close(fd);
            if (e != EWOULDBLOCK)
                return bv_cli_fail(BV_EXIT_FAILED, "cannot lock %s: %s", lock->path,
                                   strerror(e));
            if (pid)
                return bv_cli_fail(BV_EXIT_USAGE, "%s is in use by another bivouac run "
                                   "(pid %ld)", dir, pid);
            return bv_cli_fail(BV_EXIT_USAGE, "%s is in use by another bivouac run", dir);
        }
        struct stat held, named;
        if (fstat(fd, &held) == 0 && lstat(lock->path, &named) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
            char pid[32];
            int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
                int e = errno;
                unlink(lock->path);
                close(fd);
                return bv_cli_fail(BV_EXIT_FAILED, "cannot write %s: %s", lock->path,
                                   strerror(e));
            }
            lock->fd = fd;
            return 0;
        }
        close(fd);
    }
    return bv_cli_fail(BV_EXIT_FAILED, "cannot lock %s: it keeps being replaced", lock->path);
}

void bv_run_dir_unlock(bv_run_lock *lock)
{
    if (lock->fd < 0)
        return;
    unlink(lock->path);
    close(lock->fd);
    lock->fd = -1;
}

/* ---- one run per directory ---- */

/* What a name in a run directory is. A run writes run.yaml, experiment.yaml,
 * metrics.jsonl, result.json, curves.png, curves.svg and checkpoints/ (and seed-N/ with
 * --repeat, holding one seed's files); anything else is the user's. */
typedef enum { OTHER, RUN_FILE, CHECKPOINTS, SEED_DIR } entry_kind;

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static entry_kind classify(const char *name, bool top)
{
    static const char *const files[] = {"run.yaml", "run.yaml.tmp", "experiment.yaml",
                                        "metrics.jsonl", "result.json", "curves.png",
                                        "curves.svg"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        if (strcmp(name, files[i]) == 0)
            return RUN_FILE;
    if (strcmp(name, "checkpoints") == 0)
        return CHECKPOINTS;
    if (top && strncmp(name, "seed-", 5) == 0 && name[5] &&
        strspn(name + 5, "0123456789") == strlen(name + 5))
        return SEED_DIR;
    return OTHER;
}

static bool is_checkpoint_file(const char *name)
{
    return (strncmp(name, "ckpt-", 5) == 0 && has_suffix(name, ".bvck")) ||
           (strncmp(name, ".ckpt-", 6) == 0 && has_suffix(name, ".tmp"));
}

typedef struct scan {
    bool remove;        /* second pass: delete what the first found */
    bool found;         /* a run's own file or directory is there */
    char blocker[4300]; /* the first thing --force would have to leave inside a run's dir */
    char failed[4500];  /* a deletion that failed */
} scan;

static void note_blocker(scan *s, const char *path)
{
    if (!s->blocker[0])
        snprintf(s->blocker, sizeof s->blocker, "%s", path);
}

static void remove_entry(scan *s, const char *path, bool is_dir)
{
    if (!s->remove || s->failed[0])
        return;
    if ((is_dir ? rmdir(path) : unlink(path)) != 0)
        snprintf(s->failed, sizeof s->failed, "cannot remove %s: %s", path, strerror(errno));
}

/* checkpoints/ holds ckpt-N.bvck files and the writer's temporaries, nothing else. */
static void scan_checkpoints(scan *s, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        note_blocker(s, dir); /* not a directory we can clear */
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[4300];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) {
            note_blocker(s, dir); /* too deep to be a run's */
            continue;
        }
        struct stat sb;
        if (!is_checkpoint_file(e->d_name) || lstat(path, &sb) != 0 || S_ISDIR(sb.st_mode))
            note_blocker(s, path);
        else
            remove_entry(s, path, false);
    }
    closedir(d);
    remove_entry(s, dir, true);
}

/* A run directory (top) or one seed's directory of a --repeat run. */
static void scan_run(scan *s, const char *dir, bool top)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (!top)
            note_blocker(s, dir);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            (top && !strcmp(e->d_name, ".lock")))
            continue;
        char path[4300];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) {
            note_blocker(s, dir); /* too deep to be a run's */
            continue;
        }
        struct stat sb;
        entry_kind kind = classify(e->d_name, top);
        if (kind == OTHER) {
            if (!top) /* a seed's directory goes as a whole, so all of it must be ours */
                note_blocker(s, path);
            continue;
        }
        s->found = true;
        bool is_dir = lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (kind == RUN_FILE && is_dir)
            note_blocker(s, path);
        else if (kind == RUN_FILE)
            remove_entry(s, path, false);
        else if (kind == CHECKPOINTS)
            scan_checkpoints(s, path);
        else
            scan_run(s, path, false);
    }
    closedir(d);
    if (!top)
        remove_entry(s, dir, true);
}

int bv_run_dir_claim(const char *dir, bool force)
{
    scan *s = calloc(1, sizeof *s);
    if (!s)
        return bv_cli_fail(BV_EXIT_FAILED, "out of memory");
    scan_run(s, dir, true);
    int code = BV_EXIT_OK;
    if (s->found && !force)
        code = bv_cli_fail(BV_EXIT_USAGE, "%s holds another run; use --resume %s to continue "
                           "it or --force to replace it", dir, dir);
    else if (s->found && s->blocker[0])
        code = bv_cli_fail(BV_EXIT_USAGE, "--force removes only what a run writes, and %s is "
                           "not a run's; move it away first", s->blocker);
    else if (s->found) {
        memset(s, 0, sizeof *s);
        s->remove = true;
        scan_run(s, dir, true);
        if (s->failed[0])
            code = bv_cli_fail(BV_EXIT_FAILED, "--force: %s", s->failed);
    }
    free(s);
    return code;
}

/* ---- the experiment copy ---- */

/* Sets root's dotted key to value exactly (an override would read "null" as empty). */
static bool set_scalar(bv_node *root, const char *key, const char *value, bv_diag *d)
{
    return bv_config_set_string(root, key, value, d) == BV_OK;
}

/* Every path option of one section the user set, made absolute: resolved values are
 * relative to the working directory (the experiment file's directory was already put in
 * front of those the file set). */
static bool absolute_paths(bv_node *copy, const char *section, const bv_opts *o,
                           const char *cwd, bv_diag *d)
{
    bool ok = true;
    for (size_t i = 0; ok && i < o->count; i++) {
        const bv_opt_value *v = &o->values[i];
        if (v->decl->type != BV_OPT_PATH || !v->from_user || !v->v.s[0])
            continue;
        size_t n = strlen(cwd) + strlen(v->v.s) + 2;
        char *abs = malloc(n);
        char key[128];
        snprintf(key, sizeof key, "%s.%s", section, v->decl->name);
        ok = abs != NULL;
        if (ok) {
            if (v->v.s[0] == '/')
                snprintf(abs, n, "%s", v->v.s);
            else
                snprintf(abs, n, "%s/%s", cwd, v->v.s);
            ok = set_scalar(copy, key, abs, d);
        }
        free(abs);
    }
    return ok;
}

int bv_run_dir_write_experiment(const char *dir, const bv_experiment *x)
{
    char path[4200], cwd[4096];
    snprintf(path, sizeof path, "%s/experiment.yaml", dir);
    if (!getcwd(cwd, sizeof cwd))
        return -1;
    bv_diag d;
    bv_diag_init(&d);
    bv_node *copy = NULL;
    char *text = bv_node_to_yaml(x->root);
    bool ok = text && bv_config_load_string(text, path, &copy, &d) == BV_OK;
    free(text);
    text = NULL;
    const struct { const char *key; const bv_opts *opts; } sections[] = {
        {"model", &x->model.opts}, {"compute", &x->compute.opts},
        {"transport", &x->transport.opts}, {"dataset", &x->dataset},
        {"train", &x->train}, {"engine", &x->engine}, {"policy", &x->policy},
    };
    for (size_t i = 0; ok && i < sizeof sections / sizeof *sections; i++)
        if (bv_node_get(copy, sections[i].key))
            ok = absolute_paths(copy, sections[i].key, sections[i].opts, cwd, &d);
    for (size_t i = 0; ok && i < x->nresilience; i++) {
        char key[32];
        snprintf(key, sizeof key, "resilience.%zu", i);
        ok = absolute_paths(copy, key, &x->resilience[i].opts, cwd, &d);
    }
    /* the default name comes from the file's name, which the copy does not share */
    if (ok && !bv_node_get(copy, "name"))
        ok = set_scalar(copy, "name", x->name, &d);
    text = ok ? bv_node_to_yaml(copy) : NULL;
    FILE *f = text ? fopen(path, "w") : NULL;
    int rc = f ? 0 : -1;
    if (f) {
        fprintf(f, "# the experiment as run (overrides applied, paths absolute), from %s\n",
                x->path);
        fputs(text, f);
        rc = fclose(f);
    }
    free(text);
    bv_node_free(copy);
    bv_diag_free(&d);
    return rc;
}

bool bv_run_dir_file_crc(const char *path, unsigned *crc)
{
    /* O_NONBLOCK: a FIFO put in the file's place must not hang the run */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false;
    struct stat sb;
    bool ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
    uint32_t c = 0;
    unsigned char buf[65536];
    ssize_t n = 0;
    while (ok && (n = read(fd, buf, sizeof buf)) > 0)
        c = bv_crc32c(c, buf, (size_t)n);
    close(fd);
    if (!ok || n < 0)
        return false;
    *crc = c;
    return true;
}
