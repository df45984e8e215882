/* Vertex arrays in memory that this host's role processes share (shared_segment.h). */
#include "shared_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

bv_status bv_segment_create(bv_segment *seg, const char *name, const size_t *bytes,
                            size_t count, size_t *offset, bv_error *err)
{
    *seg = (bv_segment){NULL, 0, -1};
    size_t page = (size_t)sysconf(_SC_PAGESIZE), total = 0;
    for (size_t k = 0; k < count; k++) {
        offset[k] = total;
        if (bytes[k] > SIZE_MAX / 2 - total)
            return bv_error_set(err, BV_ERR_NOMEM, "shared arrays too large");
        total += (bytes[k] + page - 1) / page * page;
    }
    if (!total)
        total = page;
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return bv_error_set(err, BV_ERR_IO, "cannot make shared memory for %s: %s", name,
                            strerror(errno));
    if (ftruncate(fd, (off_t)total) != 0) {
        int e = errno;
        close(fd);
        return bv_error_set(err, BV_ERR_NOMEM, "cannot make %zu bytes of shared memory: %s",
                            total, strerror(e));
    }
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return bv_error_set(err, BV_ERR_NOMEM, "cannot map %zu bytes of shared memory: %s",
                            total, strerror(e));
    }
    *seg = (bv_segment){p, total, fd};
    return BV_OK;
}

bv_status bv_segment_map(bv_segment *seg, int64_t pid, int64_t fd, uint64_t bytes,
                         bv_error *err)
{
    *seg = (bv_segment){NULL, 0, -1};
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)pid, (long long)fd);
    int f = pid > 0 && fd >= 0 ? open(path, O_RDWR | O_CLOEXEC) : -1;
    if (f < 0)
        return bv_error_set(err, BV_ERR_IO, "cannot open the graph server's shared arrays "
                            "(%s): %s; engine.share_arrays: false sends them in messages",
                            path, pid > 0 && fd >= 0 ? strerror(errno) : "no such process");
    struct stat sb;
    bv_status st = BV_OK;
    if (fstat(f, &sb) != 0 || bytes == 0 || (uint64_t)sb.st_size != bytes) {
        st = bv_error_set(err, BV_ERR_CORRUPT, "the graph server's shared arrays (%s) are "
                          "not the %llu bytes it said", path, (unsigned long long)bytes);
    } else {
        void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (p == MAP_FAILED)
            st = bv_error_set(err, BV_ERR_NOMEM, "cannot map the graph server's shared "
                              "arrays (%s): %s", path, strerror(errno));
        else
            *seg = (bv_segment){p, (size_t)bytes, -1};
    }
    close(f); /* the mapping keeps the memory */
    return st;
}

void bv_segment_free(bv_segment *seg)
{
    if (!seg->base) /* none (a zeroed struct, too) */
        return;
    munmap(seg->base, seg->bytes);
    if (seg->fd >= 0)
        close(seg->fd);
    *seg = (bv_segment){NULL, 0, -1};
}
