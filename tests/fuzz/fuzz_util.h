/* Helpers shared by the fuzz targets: a private scratch directory (in /dev/shm when there
 * is one, so the loaders' file I/O stays in memory) and writing an input into a file. */
#ifndef BIVOUAC_FUZZ_UTIL_H
#define BIVOUAC_FUZZ_UTIL_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A directory of its own for this process, made once; aborts if it cannot be made,
 * since no input can be tried without it. */
static const char *fuzz_scratch_dir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/bv-fuzz-XXXXXX", base);
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            abort();
        }
    }
    return dir;
}

/* "<scratch>/<name>" into buf. */
static const char *fuzz_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", fuzz_scratch_dir(), name);
    return buf;
}

/* Replaces path with exactly the n bytes at data; aborts on an I/O error. */
static void fuzz_write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            perror(path);
            abort();
        }
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

/* run.sh asks a target that makes its own seeds for them with BV_FUZZ_WRITE_SEEDS=DIR:
 * then write_seeds(DIR) writes them (and exits); otherwise nothing. */
static inline void fuzz_write_seeds_if_asked(void (*write_seeds)(const char *dir))
{
    const char *dir = getenv("BV_FUZZ_WRITE_SEEDS");
    if (dir)
        write_seeds(dir);
}

#endif
