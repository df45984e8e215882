/* Bounded reading of input files: regular files only, at most a limit (input_file.h). */
#include "input_file.h"

#include "alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bv_status bv_input_limit(const char *env_name, uint64_t default_value, uint64_t *out,
                         bv_error *err)
{
    const char *v = getenv(env_name);
    *out = default_value;
    if (!v || !*v)
        return BV_OK;
    uint64_t n = 0;
    const char *p = v;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (n > ((uint64_t)1 << 60) / 10)
            break; /* far beyond any memory: refused below */
        n = n * 10 + (uint64_t)(*p - '0');
    }
    if (*p || n == 0)
        return bv_error_set(err, BV_ERR_INVALID, "%s must be a positive whole number, got '%s'",
                            env_name, v);
    *out = n;
    return BV_OK;
}

/* What a file that is not regular is, for messages. */
static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISREG(m))
        return "a regular file";
    return "not a file";
}

bv_status bv_input_check_regular(const char *path, bv_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode))
        return BV_OK;
    return bv_error_set(err, BV_ERR_INVALID, "%s is not a regular file (%s)", path,
                        file_kind(st.st_mode));
}

bv_status bv_input_check_directory(const char *path, bv_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0 || S_ISDIR(st.st_mode))
        return BV_OK;
    return bv_error_set(err, BV_ERR_INVALID, "%s is not a directory (%s)", path,
                        file_kind(st.st_mode));
}

static bv_status too_large(const char *path, uint64_t max_bytes, const char *what,
                           const char *limit_env, bv_error *err)
{
    return bv_error_set(err, BV_ERR_INVALID,
                        "%s is larger than %llu bytes, the limit for %s (set %s to raise it)",
                        path, (unsigned long long)max_bytes, what, limit_env);
}

bv_status bv_input_read(const char *path, uint64_t max_bytes, const char *what,
                        const char *limit_env, char **text, size_t *len, bv_error *err)
{
    *text = NULL;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before we can refuse it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        bv_error_set(err, BV_ERR_IO, "cannot read %s: %s", path, strerror(e));
        errno = e;
        return BV_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        bv_error_set(err, BV_ERR_IO, "cannot read %s: %s", path, strerror(e));
        errno = e;
        return BV_ERR_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return bv_error_set(err, BV_ERR_INVALID, "%s is not a regular file (%s)", path,
                            file_kind(st.st_mode));
    }
    if (st.st_size > 0 && (uint64_t)st.st_size > max_bytes) {
        close(fd);
        return too_large(path, max_bytes, what, limit_env, err);
    }
    /* The size is a hint only: the file may grow while we read, and files in /proc say 0.
     * Read at most max_bytes + 1 bytes, which is enough to tell that it is too large. */
    uint64_t most = max_bytes + 1;
    size_t cap = (size_t)((uint64_t)st.st_size + 4096 < most ? (uint64_t)st.st_size + 4096
                                                              : most);
    size_t used = 0;
    char *buf = bv_malloc(cap + 1); /* + 1: the NUL */
    while (buf) {
        if (used == cap) {
            if ((uint64_t)cap >= most)
                break; /* max_bytes + 1 read: too large */
            size_t next = (uint64_t)cap * 2 < most ? cap * 2 : (size_t)most;
            char *nb = bv_realloc(buf, next + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap = next;
        }
        ssize_t got = read(fd, buf + used, cap - used);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            bv_error_set(err, BV_ERR_IO, "cannot read %s: %s", path, strerror(e));
            errno = e;
            return BV_ERR_IO;
        }
        if (got == 0)
            break;
        used += (size_t)got;
    }
    if (!buf) {
        close(fd);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory reading %s", path);
    }
    close(fd);
    if ((uint64_t)used > max_bytes) {
        free(buf);
        return too_large(path, max_bytes, what, limit_env, err);
    }
    buf[used] = '\0';
    *text = buf;
    *len = used;
    return BV_OK;
}
