/* The checkpoint file format: encoding, atomic writing, streaming read with every check,
 * and finding the newest good file in a directory (docs/checkpoint-format.md). */
#include "checkpoint_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "bivouac/wire.h"

/* Header field offsets (all little-endian). */
enum {
    OFF_MAGIC = 0,        /* "BVCK" */
    OFF_VERSION = 4,      /* u16 */
    OFF_HEADER_SIZE = 6,  /* u16 */
    OFF_EPOCH = 8,        /* i64 */
    OFF_BLOB_COUNT = 16,  /* u64 */
    OFF_TOTAL_LEN = 24,   /* u64, the whole file */
    OFF_RESERVED = 32,    /* u64, zero */
    BLOB_ENTRY_SIZE = 16  /* u32 name length, u32 zero, u64 data length */
};

static size_t pad8(size_t n)
{
    return (8 - (n & 7)) & 7;
}

static void put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void checkpoint_file_name(int64_t epoch, char *buf, size_t len)
{
    snprintf(buf, len, "ckpt-%08lld.bvck", (long long)epoch);
}

bool checkpoint_parse_name(const char *name, int64_t *epoch)
{
    if (strncmp(name, "ckpt-", 5) != 0)
        return false;
    const char *p = name + 5;
    if (*p < '0' || *p > '9')
        return false;
    errno = 0;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (errno || v < 0 || strcmp(end, ".bvck") != 0)
        return false;
    /* Only the canonical spelling: "ckpt-7.bvck" or "ckpt-+0000007.bvck" are not ours. */
    char canon[64];
    checkpoint_file_name(v, canon, sizeof canon);
    if (strcmp(canon, name) != 0)
        return false;
    *epoch = v;
    return true;
}

/* ---- encoding ---- */

bv_status checkpoint_image_size(const bv_state *state, size_t *size, bv_error *err)
{
    if (state->epoch < 0)
        return bv_error_set(err, BV_ERR_INVALID, "cannot checkpoint a negative epoch (%lld)",
                            (long long)state->epoch);
    if (state->count && !state->blobs)
        return bv_error_set(err, BV_ERR_INVALID, "state has %zu blobs but no blob array",
                            state->count);
    size_t total = BV_CKPT_HEADER_SIZE + BV_CKPT_TRAILER_SIZE;
    for (size_t i = 0; i < state->count; i++) {
        const bv_blob *b = &state->blobs[i];
        size_t name_len = b->name ? strlen(b->name) : 0;
        if (name_len == 0 || name_len > BV_CKPT_NAME_MAX)
            return bv_error_set(err, BV_ERR_INVALID,
                                "blob %zu: a name must have 1 to %d bytes, got %zu", i,
                                BV_CKPT_NAME_MAX, name_len);
        if (b->size && !b->data)
            return bv_error_set(err, BV_ERR_INVALID, "blob '%s' has %zu bytes but no data",
                                b->name, b->size);
        size_t add = BLOB_ENTRY_SIZE + name_len + pad8(name_len);
        if (b->size > SIZE_MAX - total - add - 8)
            return bv_error_set(err, BV_ERR_INVALID, "blob '%s' is too large (%zu bytes)",
                                b->name, b->size);
        total += add + b->size + pad8(b->size);
    }
    *size = total;
    return BV_OK;
}

void checkpoint_image_fill(const bv_state *state, unsigned char *image, size_t size)
{
    memcpy(image + OFF_MAGIC, BV_CKPT_MAGIC, 4);
    put_u16(image + OFF_VERSION, BV_CKPT_VERSION);
    put_u16(image + OFF_HEADER_SIZE, BV_CKPT_HEADER_SIZE);
    put_u64(image + OFF_EPOCH, (uint64_t)state->epoch);
    put_u64(image + OFF_BLOB_COUNT, state->count);
    put_u64(image + OFF_TOTAL_LEN, size);
    put_u64(image + OFF_RESERVED, 0);
    unsigned char *p = image + BV_CKPT_HEADER_SIZE;
    for (size_t i = 0; i < state->count; i++) {
        const bv_blob *b = &state->blobs[i];
        size_t name_len = strlen(b->name);
        put_u32(p, (uint32_t)name_len);
        put_u32(p + 4, 0);
        put_u64(p + 8, b->size);
        p += BLOB_ENTRY_SIZE;
        memcpy(p, b->name, name_len);
        memset(p + name_len, 0, pad8(name_len));
        p += name_len + pad8(name_len);
        if (b->size)
            memcpy(p, b->data, b->size);
        memset(p + b->size, 0, pad8(b->size));
        p += b->size + pad8(b->size);
    }
    memcpy(p, BV_CKPT_END_MAGIC, 4);
    put_u32(p + 4, 0); /* the CRC, filled in by checkpoint_image_seal */
}

void checkpoint_image_seal(unsigned char *image, size_t size)
{
    put_u32(image + size - 4, bv_crc32c(0, image, size - 4));
}

/* ---- atomic writing ---- */

static bv_status write_all(int fd, const unsigned char *p, size_t n, const char *path,
                           bv_error *err)
{
    while (n) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return BV_OK;
}

static bv_status fsync_dir(const char *dir, bv_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return bv_error_set(err, BV_ERR_IO, "%s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    /* Some file systems cannot fsync a directory; the rename is then as durable as it
     * gets there. */
    if (rc != 0 && saved != EINVAL && saved != ENOTSUP)
        return bv_error_set(err, BV_ERR_IO, "%s: fsync: %s", dir, strerror(saved));
    return BV_OK;
}

bv_status checkpoint_image_write(const char *dir, int64_t epoch, const unsigned char *image,
                                 size_t size, bv_error *err)
{
    char name[64], final_path[PATH_MAX], tmp_path[PATH_MAX];
    checkpoint_file_name(epoch, name, sizeof name);
    if (snprintf(final_path, sizeof final_path, "%s/%s", dir, name) >= (int)sizeof final_path ||
        snprintf(tmp_path, sizeof tmp_path, "%s/.ckpt-XXXXXX.tmp", dir) >= (int)sizeof tmp_path)
        return bv_error_set(err, BV_ERR_IO, "%s: checkpoint path too long", dir);

    /* rename cannot replace a directory; say so before writing anything */
    struct stat sb;
    if (lstat(final_path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return bv_error_set(err, BV_ERR_IO, "%s is a directory, not a checkpoint file",
                            final_path);
    int fd = mkostemps(tmp_path, 4, O_CLOEXEC);
    if (fd < 0)
        return bv_error_set(err, BV_ERR_IO, "cannot create a checkpoint in %s: %s", dir,
                            strerror(errno));
    bv_status st = write_all(fd, image, size, tmp_path, err);
    if (st == BV_OK && fchmod(fd, 0644) != 0)
        st = bv_error_set(err, BV_ERR_IO, "%s: chmod: %s", tmp_path, strerror(errno));
    if (st == BV_OK && fsync(fd) != 0)
        st = bv_error_set(err, BV_ERR_IO, "%s: fsync: %s", tmp_path, strerror(errno));
    if (close(fd) != 0 && st == BV_OK)
        st = bv_error_set(err, BV_ERR_IO, "%s: close: %s", tmp_path, strerror(errno));
    if (st == BV_OK && rename(tmp_path, final_path) != 0)
        st = bv_error_set(err, BV_ERR_IO, "cannot rename %s to %s: %s", tmp_path, final_path,
                          strerror(errno));
    if (st != BV_OK) {
        unlink(tmp_path);
        return st;
    }
    return fsync_dir(dir, err);
}

bv_status bv_checkpoint_write_file(const char *dir, const bv_state *state, bv_error *err)
{
    size_t size;
    bv_status st = checkpoint_image_size(state, &size, err);
    if (st != BV_OK)
        return st;
    unsigned char *image = malloc(size);
    if (!image)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for a %zu-byte checkpoint", size);
    checkpoint_image_fill(state, image, size);
    checkpoint_image_seal(image, size);
    st = checkpoint_image_write(dir, state->epoch, image, size, err);
    free(image);
    return st;
}

/* ---- reading ---- */

/* Reads the file front to back straight into the blobs' own buffers (no second copy of
 * the state), folding every byte into the CRC as it goes. */
typedef struct reader {
    int fd;
    const char *path;
    uint64_t pos;
    uint32_t crc;
} reader;

static bv_status reader_take(reader *r, void *buf, size_t n, bv_error *err)
{
    unsigned char *p = buf;
    size_t left = n;
    while (left) {
        ssize_t got = read(r->fd, p, left > (1u << 30) ? (1u << 30) : left);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return bv_error_set(err, BV_ERR_IO, "%s: %s", r->path, strerror(errno));
        }
        if (got == 0)
            return bv_error_set(err, BV_ERR_CORRUPT, "truncated at byte %" PRIu64,
                                r->pos + (n - left));
        p += got;
        left -= (size_t)got;
    }
    r->crc = bv_crc32c(r->crc, buf, n);
    r->pos += n;
    return BV_OK;
}

/* Reads and checks the zero padding after a field of n bytes. */
static bv_status reader_pad(reader *r, size_t n, const char *what, bv_error *err)
{
    unsigned char pad[8];
    size_t k = pad8(n);
    bv_status st = reader_take(r, pad, k, err);
    if (st != BV_OK)
        return st;
    for (size_t i = 0; i < k; i++)
        if (pad[i])
            return bv_error_set(err, BV_ERR_CORRUPT, "non-zero padding after %s", what);
    return BV_OK;
}

static bv_status read_blobs(reader *r, uint64_t count, uint64_t body_end, bv_state *out,
                            size_t *cap, bv_error *err)
{
    for (uint64_t i = 0; i < count; i++) {
        unsigned char entry[BLOB_ENTRY_SIZE];
        if (body_end - r->pos < BLOB_ENTRY_SIZE)
            return bv_error_set(err, BV_ERR_CORRUPT, "blob %" PRIu64 " overruns the file", i);
        bv_status st = reader_take(r, entry, sizeof entry, err);
        if (st != BV_OK)
            return st;
        uint32_t name_len = get_u32(entry);
        uint64_t data_len = get_u64(entry + 8);
        if (name_len == 0 || name_len > BV_CKPT_NAME_MAX || get_u32(entry + 4) != 0)
            return bv_error_set(err, BV_ERR_CORRUPT, "blob %" PRIu64 " has a bad name length",
                                i);
        uint64_t left = body_end - r->pos;
        uint64_t name_span = name_len + pad8(name_len);
        if (name_span > left || data_len > left - name_span ||
            pad8((size_t)(data_len & 7)) > left - name_span - data_len)
            return bv_error_set(err, BV_ERR_CORRUPT, "blob %" PRIu64 " overruns the file", i);

        /* The array grows as blobs are read, so a damaged count cannot ask for a huge
         * allocation before the data has shown it is real. */
        if (out && i == *cap) {
            size_t new_cap = *cap ? *cap * 2 : 16;
            bv_blob *grown = realloc(out->blobs, new_cap * sizeof *grown);
            if (!grown)
                return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
            memset(grown + *cap, 0, (new_cap - *cap) * sizeof *grown);
            out->blobs = grown;
            *cap = new_cap;
        }
        bv_blob *b = out ? &out->blobs[i] : NULL;
        char name_buf[BV_CKPT_NAME_MAX + 1];
        char *name = b ? malloc(name_len + 1) : name_buf;
        if (!name)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        if (b) {
            b->name = name;
            out->count = i + 1;
        }
        if ((st = reader_take(r, name, name_len, err)) != BV_OK)
            return st;
        name[name_len] = '\0';
        if (strlen(name) != name_len)
            return bv_error_set(err, BV_ERR_CORRUPT, "blob %" PRIu64 " has a NUL in its name",
                                i);
        if ((st = reader_pad(r, name_len, "a blob name", err)) != BV_OK)
            return st;

        /* Checking without keeping (out == NULL) still reads the data, in chunks. */
        if (b) {
            b->size = (size_t)data_len;
            b->data = malloc(data_len ? (size_t)data_len : 1);
            if (!b->data)
                return bv_error_set(err, BV_ERR_NOMEM, "out of memory for blob '%s' (%" PRIu64
                                    " bytes)", name, data_len);
            st = reader_take(r, b->data, (size_t)data_len, err);
        } else {
            unsigned char chunk[1 << 16];
            for (uint64_t done = 0; st == BV_OK && done < data_len;) {
                size_t n = data_len - done < sizeof chunk ? (size_t)(data_len - done)
                                                          : sizeof chunk;
                st = reader_take(r, chunk, n, err);
                done += n;
            }
        }
        if (st != BV_OK)
            return st;
        if ((st = reader_pad(r, (size_t)(data_len & 7), "blob data", err)) != BV_OK)
            return st;
    }
    if (r->pos != body_end)
        return bv_error_set(err, BV_ERR_CORRUPT, "%" PRIu64 " stray bytes after the last blob",
                            body_end - r->pos);
    return BV_OK;
}

static bv_status read_checked(reader *r, uint64_t file_size, bv_state *out, bv_error *err)
{
    unsigned char header[BV_CKPT_HEADER_SIZE];
    if (file_size < 4)
        return bv_error_set(err, BV_ERR_CORRUPT, "truncated: %" PRIu64 " bytes", file_size);
    bv_status st = reader_take(r, header, 4, err);
    if (st != BV_OK)
        return st;
    if (memcmp(header, BV_CKPT_MAGIC, 4) != 0)
        return bv_error_set(err, BV_ERR_CORRUPT, "bad magic");
    if (file_size < BV_CKPT_HEADER_SIZE + BV_CKPT_TRAILER_SIZE)
        return bv_error_set(err, BV_ERR_CORRUPT, "truncated: %" PRIu64
                            " bytes, shorter than a header", file_size);
    if ((st = reader_take(r, header + 4, BV_CKPT_HEADER_SIZE - 4, err)) != BV_OK)
        return st;
    unsigned version = get_u16(header + OFF_VERSION);
    unsigned header_size = get_u16(header + OFF_HEADER_SIZE);
    int64_t epoch = (int64_t)get_u64(header + OFF_EPOCH);
    uint64_t count = get_u64(header + OFF_BLOB_COUNT);
    uint64_t total = get_u64(header + OFF_TOTAL_LEN);
    if (version != BV_CKPT_VERSION)
        return bv_error_set(err, BV_ERR_CORRUPT, "unsupported format version %u (expected %d)",
                            version, BV_CKPT_VERSION);
    if (header_size < BV_CKPT_HEADER_SIZE || header_size % 8)
        return bv_error_set(err, BV_ERR_CORRUPT, "bad header size %u", header_size);
    if (total > file_size)
        return bv_error_set(err, BV_ERR_CORRUPT, "truncated: %" PRIu64 " of %" PRIu64 " bytes",
                            file_size, total);
    if (total < file_size)
        return bv_error_set(err, BV_ERR_CORRUPT, "%" PRIu64 " bytes, the header says %" PRIu64,
                            file_size, total);
    if (total < (uint64_t)header_size + BV_CKPT_TRAILER_SIZE)
        return bv_error_set(err, BV_ERR_CORRUPT, "bad total length %" PRIu64, total);
    /* A later version may have a longer header: skip (but checksum) what we don't know. */
    for (uint64_t skip = header_size - BV_CKPT_HEADER_SIZE; skip;) {
        unsigned char tmp[64];
        size_t n = skip < sizeof tmp ? (size_t)skip : sizeof tmp;
        if ((st = reader_take(r, tmp, n, err)) != BV_OK)
            return st;
        skip -= n;
    }
    uint64_t body_end = total - BV_CKPT_TRAILER_SIZE;
    if (count > (body_end - header_size) / BLOB_ENTRY_SIZE)
        return bv_error_set(err, BV_ERR_CORRUPT, "blob count %" PRIu64 " does not fit the file",
                            count);
    if (out)
        out->epoch = epoch;
    size_t cap = 0;
    if ((st = read_blobs(r, count, body_end, out, &cap, err)) != BV_OK)
        return st;
    unsigned char trailer[BV_CKPT_TRAILER_SIZE];
    if ((st = reader_take(r, trailer, 4, err)) != BV_OK)
        return st;
    uint32_t computed = r->crc;
    if ((st = reader_take(r, trailer + 4, 4, err)) != BV_OK)
        return st;
    if (memcmp(trailer, BV_CKPT_END_MAGIC, 4) != 0)
        return bv_error_set(err, BV_ERR_CORRUPT, "bad end marker");
    uint32_t stored = get_u32(trailer + 4);
    if (stored != computed)
        return bv_error_set(err, BV_ERR_CORRUPT,
                            "CRC-32C mismatch: stored %08" PRIx32 ", computed %08" PRIx32,
                            stored, computed);
    return BV_OK;
}

bv_status checkpoint_read(const char *path, bv_state *out, bv_error *err)
{
    if (out)
        *out = (bv_state){0};
    /* O_NONBLOCK: opening a FIFO named like a checkpoint must not wait for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    bv_status st = BV_OK;
    if (fstat(fd, &sb) != 0)
        st = bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = bv_error_set(err, BV_ERR_IO, "%s is not a regular file", path);
    if (st != BV_OK) {
        close(fd);
        return st;
    }
    reader r = {.fd = fd, .path = path, .pos = 0, .crc = 0};
    st = read_checked(&r, (uint64_t)sb.st_size, out, err);
    close(fd);
    if (st != BV_OK && out)
        bv_state_free(out);
    return st;
}

bv_status bv_checkpoint_read_file(const char *path, bv_state *out, bv_error *err)
{
    bv_error why = {0};
    bv_status st = checkpoint_read(path, out, &why);
    if (st == BV_ERR_CORRUPT)
        return bv_error_set(err, st, "checkpoint %s is damaged (%s)", path, why.msg);
    if (st != BV_OK)
        return bv_error_set(err, st, "%s", why.msg);
    return BV_OK;
}

/* ---- the directory ---- */

static int newest_first(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

bv_status checkpoint_list(const char *dir, int64_t **epochs, size_t *count, bv_error *err)
{
    *epochs = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return BV_OK;
        return bv_error_set(err, BV_ERR_IO, "cannot read checkpoint directory %s: %s", dir,
                            strerror(errno));
    }
    size_t n = 0, cap = 0;
    int64_t *list = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t epoch;
        if (!checkpoint_parse_name(e->d_name, &epoch))
            continue;
        if (n == cap) {
            size_t new_cap = cap ? cap * 2 : 16;
            int64_t *grown = realloc(list, new_cap * sizeof *grown);
            if (!grown) {
                free(list);
                closedir(d);
                return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
            }
            list = grown;
            cap = new_cap;
        }
        list[n++] = epoch;
    }
    closedir(d);
    if (n)
        qsort(list, n, sizeof *list, newest_first);
    *epochs = list;
    *count = n;
    return BV_OK;
}

bv_status bv_checkpoint_restore_dir(const char *dir, bv_state *out, bv_error *err)
{
    *out = (bv_state){0};
    int64_t *epochs;
    size_t count;
    bv_status st = checkpoint_list(dir, &epochs, &count, err);
    if (st != BV_OK)
        return st;
    for (size_t i = 0; i < count; i++) {
        char name[64], path[PATH_MAX];
        checkpoint_file_name(epochs[i], name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        /* a FIFO or a directory under a checkpoint's name is no checkpoint */
        struct stat sb;
        if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
            bv_log(BV_LOG_WARN, "checkpoint %s is not a regular file; using an older one",
                   path);
            continue;
        }
        bv_error why = {0};
        st = checkpoint_read(path, out, &why);
        if (st == BV_OK) {
            free(epochs);
            return BV_OK;
        }
        if (st != BV_ERR_CORRUPT && st != BV_ERR_IO) {
            free(epochs);
            return bv_error_set(err, st, "%s", why.msg);
        }
        bv_log(BV_LOG_WARN, "checkpoint %s is damaged (%s); using an older one", path, why.msg);
    }
    free(epochs);
    return bv_error_set(err, BV_ERR_IO, "no usable checkpoint in %s", dir);
}
