/* The binary graph cache: one file per dataset version, written atomically once and
 * mmap'd by every later load. Format and trust model: docs/graph-cache.md. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bivouac/graph.h"
#include "graph_internal.h"

#define BVG_MAGIC "BVGRAPH"
/* 2: the layout of 1, but written only from text files whose meta.yaml sums were checked;
 * the version seeds the key, so an entry a version-1 reader wrote unverified is never hit.
 * 3: the features as the CSR features.svm writes (three sections), not dense. */
#define BVG_VERSION 3u
#define BVG_ENDIAN 0x01020304u
#define BVG_ALIGN 64u

enum {
    BVG_ROWPTR,
    BVG_COLIDX,
    BVG_FEAT_ROWPTR,
    BVG_FEAT_COLIDX,
    BVG_FEAT_VALUES,
    BVG_LABELS,
    BVG_SPLIT,
    BVG_NAME,
    BVG_NSECTIONS
};

typedef struct bvg_section {
    uint64_t offset; /* from the start of the file, a multiple of 64 */
    uint64_t bytes;
    uint64_t hash; /* XXH64 of the section's bytes, seeded with the section's index */
} bvg_section;

/* Native byte order (the endian field tells a foreign machine apart); 320 bytes. */
typedef struct bvg_header {
    char magic[8]; /* "BVGRAPH\0" */
    uint32_t version;
    uint32_t endian;
    uint32_t header_size;
    uint32_t num_sections;
    uint64_t key; /* the key the file name carries */
    int64_t num_nodes;
    int64_t num_features;
    int64_t num_undirected_edges;
    int64_t nnz;
    int64_t feature_nnz;
    int32_t num_classes;
    uint32_t reserved0;
    int64_t split_count[4];
    uint64_t file_size;
    bvg_section sections[BVG_NSECTIONS];
    uint64_t header_hash; /* XXH64 of the header with this field zero */
} bvg_header;

_Static_assert(sizeof(bvg_header) == 320, "the cache header is 320 bytes");
_Static_assert(sizeof(bvg_header) % BVG_ALIGN == 0, "sections start 64-byte aligned");

/* --- XXH64 (github.com/Cyan4973/xxHash, the 64-bit algorithm) --------------------- */

#define XXH_P1 0x9E3779B185EBCA87ull
#define XXH_P2 0xC2B2AE3D27D4EB4Full
#define XXH_P3 0x165667B19E3779F9ull
#define XXH_P4 0x85EBCA77C2B2AE63ull
#define XXH_P5 0x27D4EB2F165667C5ull

static uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t read64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t read32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t xxh_round(uint64_t acc, uint64_t input)
{
    acc += input * XXH_P2;
    acc = rotl64(acc, 31);
    return acc * XXH_P1;
}

static uint64_t xxh_merge(uint64_t acc, uint64_t val)
{
    acc ^= xxh_round(0, val);
    return acc * XXH_P1 + XXH_P4;
}

uint64_t bv_graph_hash64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + XXH_P1 + XXH_P2, v2 = seed + XXH_P2, v3 = seed, v4 = seed - XXH_P1;
        const unsigned char *limit = end - 32;
        do {
            v1 = xxh_round(v1, read64(p));
            v2 = xxh_round(v2, read64(p + 8));
            v3 = xxh_round(v3, read64(p + 16));
            v4 = xxh_round(v4, read64(p + 24));
            p += 32;
        } while (p <= limit);
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xxh_merge(h, v1);
        h = xxh_merge(h, v2);
        h = xxh_merge(h, v3);
        h = xxh_merge(h, v4);
    } else {
        h = seed + XXH_P5;
    }
    h += (uint64_t)len;
    for (; p + 8 <= end; p += 8) {
        h ^= xxh_round(0, read64(p));
        h = rotl64(h, 27) * XXH_P1 + XXH_P4;
    }
    if (p + 4 <= end) {
        h ^= (uint64_t)read32(p) * XXH_P1;
        h = rotl64(h, 23) * XXH_P2 + XXH_P3;
        p += 4;
    }
    for (; p < end; p++) {
        h ^= (uint64_t)*p * XXH_P5;
        h = rotl64(h, 11) * XXH_P1;
    }
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    return h;
}

/* --- the key and the file name ---------------------------------------------------- */

char *bv_graph_cache_path(const char *dir, const char *name, const char *cache_dir,
                          const struct stat st[BV_GRAPH_NFILES], uint64_t *key, bv_error *err)
{
    char *real = realpath(dir, NULL);
    if (!real) {
        bv_error_set(err, BV_ERR_IO, "%s: %s", dir, strerror(errno));
        return NULL;
    }
    /* The key covers where the dataset lives and which version of each file it is; the
     * format version is in it too, so a new format never trips over an old file. The
     * ctime is there because nobody can set it: a file rewritten in place with its size
     * and mtime put back (touch -r) still gets a new key, so it is parsed and its sha256
     * checked again instead of being trusted through the cache. */
    uint64_t h = bv_graph_hash64(real, strlen(real), BVG_VERSION);
    free(real);
    for (int f = 0; f < BV_GRAPH_NFILES; f++) {
        int64_t stamp[6] = {(int64_t)st[f].st_size,        (int64_t)st[f].st_mtim.tv_sec,
                            (int64_t)st[f].st_mtim.tv_nsec, (int64_t)st[f].st_ino,
                            (int64_t)st[f].st_ctim.tv_sec,  (int64_t)st[f].st_ctim.tv_nsec};
        h = bv_graph_hash64(stamp, sizeof stamp, h);
    }
    *key = h;
    /* The name is only there for people listing the directory: keep it filename-safe. */
    char safe[64];
    size_t n = 0;
    for (const char *c = name; *c && n < sizeof safe - 1; c++) {
        int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                 (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.';
        safe[n++] = ok ? *c : '_';
    }
    safe[n] = '\0';
    size_t len = strlen(cache_dir) + n + 32;
    char *path = malloc(len);
    if (!path) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    snprintf(path, len, "%s/%s-%016llx.bvg", cache_dir, n ? safe : "graph",
             (unsigned long long)h);
    return path;
}

/* --- reading ---------------------------------------------------------------------- */

static uint64_t header_hash(const bvg_header *h)
{
    bvg_header copy = *h;
    copy.header_hash = 0;
    return bv_graph_hash64(&copy, sizeof copy, 0);
}

/* The sections a header with these counts must have, in order. */
static void section_sizes(int64_t nodes, int64_t nnz, int64_t feature_nnz, size_t name_bytes,
                          uint64_t bytes[BVG_NSECTIONS])
{
    bytes[BVG_ROWPTR] = (uint64_t)(nodes + 1) * sizeof(int64_t);
    bytes[BVG_COLIDX] = (uint64_t)nnz * sizeof(int32_t);
    bytes[BVG_FEAT_ROWPTR] = (uint64_t)(nodes + 1) * sizeof(int64_t);
    bytes[BVG_FEAT_COLIDX] = (uint64_t)feature_nnz * sizeof(int32_t);
    bytes[BVG_FEAT_VALUES] = (uint64_t)feature_nnz * sizeof(float);
    bytes[BVG_LABELS] = (uint64_t)nodes * sizeof(int32_t);
    bytes[BVG_SPLIT] = (uint64_t)nodes;
    bytes[BVG_NAME] = name_bytes;
}

static bv_status check_header(const char *path, const bvg_header *h, uint64_t key,
                              uint64_t file_size, bv_error *err)
{
    if (memcmp(h->magic, BVG_MAGIC, sizeof BVG_MAGIC) != 0)
        return bv_error_set(err, BV_ERR_CORRUPT, "%s: not a bivouac graph cache", path);
    if (h->endian != BVG_ENDIAN || h->version != BVG_VERSION ||
        h->header_size != sizeof *h || h->num_sections != BVG_NSECTIONS)
        return bv_error_set(err, BV_ERR_CORRUPT, "%s: cache format version %u, expected %u",
                            path, h->version, BVG_VERSION);
    if (header_hash(h) != h->header_hash)
        return bv_error_set(err, BV_ERR_CORRUPT, "%s: header checksum mismatch", path);
    if (h->key != key)
        return bv_error_set(err, BV_ERR_CORRUPT, "%s: written for another dataset version",
                            path);
    if (h->file_size != file_size)
        return bv_error_set(err, BV_ERR_CORRUPT, "%s: %llu bytes, header says %llu (truncated?)",
                            path, (unsigned long long)file_size,
                            (unsigned long long)h->file_size);
    if (h->num_nodes < 1 || h->num_nodes > INT32_MAX || h->num_features < 0 ||
        h->num_features > INT32_MAX || h->nnz < 0 || h->nnz > INT64_MAX / 4 ||
        h->feature_nnz < 0 || h->feature_nnz > INT64_MAX / 4 || h->num_classes < 0)
        return bv_error_set(err, BV_ERR_CORRUPT, "%s: impossible counts", path);
    uint64_t want[BVG_NSECTIONS];
    section_sizes(h->num_nodes, h->nnz, h->feature_nnz, h->sections[BVG_NAME].bytes, want);
    uint64_t at = sizeof *h;
    for (int i = 0; i < BVG_NSECTIONS; i++) {
        const bvg_section *s = &h->sections[i];
        if (s->bytes != want[i] || s->offset % BVG_ALIGN != 0 || s->offset < at ||
            s->offset > file_size || s->bytes > file_size - s->offset)
            return bv_error_set(err, BV_ERR_CORRUPT, "%s: section %d out of place", path, i);
        at = s->offset + s->bytes;
    }
    return BV_OK;
}

bv_status bv_graph_cache_open(const char *path, uint64_t key, bv_graph_dataset **out,
                              bv_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return bv_error_set(err, BV_ERR_IO, "%s", "");
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(e));
    }
    if ((uint64_t)st.st_size < sizeof(bvg_header)) {
        close(fd);
        return bv_error_set(err, BV_ERR_CORRUPT, "%s: %lld bytes, shorter than a header", path,
                            (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return bv_error_set(err, BV_ERR_IO, "%s: mmap: %s", path, strerror(map_errno));
    const unsigned char *base = map;
    bvg_header h;
    memcpy(&h, base, sizeof h);
    bv_status s = check_header(path, &h, key, len, err);
    /* The body is checked too: XXH64 runs at memory speed, so this costs a few percent of
     * a parse-free load and keeps a flipped bit from becoming an out-of-range column. */
    for (int i = 0; i < BVG_NSECTIONS && s == BV_OK; i++)
        if (bv_graph_hash64(base + h.sections[i].offset, h.sections[i].bytes, (uint64_t)i) !=
            h.sections[i].hash)
            s = bv_error_set(err, BV_ERR_CORRUPT, "%s: section %d checksum mismatch", path, i);
    /* ... and so is the zero padding between sections, so every byte of the file is
     * covered by some check. */
    uint64_t at = sizeof h;
    for (int i = 0; i < BVG_NSECTIONS && s == BV_OK; i++) {
        for (; at < h.sections[i].offset; at++)
            if (base[at] != 0)
                s = bv_error_set(err, BV_ERR_CORRUPT, "%s: nonzero padding at byte %llu", path,
                                 (unsigned long long)at);
        at = h.sections[i].offset + h.sections[i].bytes;
    }
    /* Pointers into the mapping only once check_header has put the sections inside it:
     * a damaged header's offset can reach past the mapping, and forming that pointer is
     * already undefined (found by tests/fuzz/fuzz_graph_cache). */
    const char *name = s == BV_OK ? (const char *)base + h.sections[BVG_NAME].offset : NULL;
    if (s == BV_OK && (h.sections[BVG_NAME].bytes == 0 ||
                       name[h.sections[BVG_NAME].bytes - 1] != '\0'))
        s = bv_error_set(err, BV_ERR_CORRUPT, "%s: unterminated name", path);
    const int64_t *rowptr =
        s == BV_OK ? (const int64_t *)(base + h.sections[BVG_ROWPTR].offset) : NULL;
    const int64_t *feat_rowptr =
        s == BV_OK ? (const int64_t *)(base + h.sections[BVG_FEAT_ROWPTR].offset) : NULL;
    if (s == BV_OK && (rowptr[0] != 0 || rowptr[h.num_nodes] != h.nnz ||
                       feat_rowptr[0] != 0 || feat_rowptr[h.num_nodes] != h.feature_nnz))
        s = bv_error_set(err, BV_ERR_CORRUPT, "%s: row pointers do not add up", path);
    bv_graph_dataset *g = NULL;
    if (s == BV_OK && !(g = bv_graph_dataset_alloc(name)))
        s = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    if (s != BV_OK) {
        munmap(map, len);
        return s;
    }
    g->mapping = map;
    g->mapping_len = len;
    g->num_nodes = h.num_nodes;
    g->num_features = h.num_features;
    g->num_classes = h.num_classes;
    g->num_undirected_edges = h.num_undirected_edges;
    memcpy(g->split_count, h.split_count, sizeof g->split_count);
    /* Views into a read-only mapping: writing through them faults, which is why row
     * normalization copies the features first. */
    g->adj.nrows = h.num_nodes;
    g->adj.ncols = h.num_nodes;
    g->adj.nnz = h.nnz;
    g->adj.rowptr = (int64_t *)(base + h.sections[BVG_ROWPTR].offset);
    g->adj.colidx = (int32_t *)(base + h.sections[BVG_COLIDX].offset);
    g->adj.values = NULL;
    g->adj.owned = 0;
    g->features_csr = (bv_csr){
        .nrows = h.num_nodes,
        .ncols = h.num_features,
        .nnz = h.feature_nnz,
        .rowptr = (int64_t *)(base + h.sections[BVG_FEAT_ROWPTR].offset),
        .colidx = (int32_t *)(base + h.sections[BVG_FEAT_COLIDX].offset),
        .values = (float *)(base + h.sections[BVG_FEAT_VALUES].offset),
    };
    g->labels = (int32_t *)(base + h.sections[BVG_LABELS].offset);
    g->split = (uint8_t *)(base + h.sections[BVG_SPLIT].offset);
    *out = g;
    return BV_OK;
}

/* --- writing ---------------------------------------------------------------------- */

static bv_status mkdir_p(const char *dir, bv_error *err)
{
    if (!dir[0])
        return bv_error_set(err, BV_ERR_IO, "empty cache directory name");
    char *path = strdup(dir);
    if (!path)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    bv_status s = BV_OK;
    for (char *p = path + 1;; p++) {
        bool last = *p == '\0';
        if (*p != '/' && !last)
            continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            s = bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
            break;
        }
        if (last)
            break;
        *p = '/';
    }
    free(path);
    return s;
}

static bool write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        size_t chunk = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
        ssize_t n = write(fd, p, chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            errno = EIO;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

bv_status bv_graph_cache_write(const char *cache_dir, const char *path, uint64_t key,
                               const bv_graph_dataset *g, bv_error *err)
{
    if (!bv_graph_features_sparse(g)) /* the loader's form; nothing else is written */
        return bv_error_set(err, BV_ERR_INVALID, "%s: the cache holds sparse features only",
                            path);
    bv_status s = mkdir_p(cache_dir, err);
    if (s != BV_OK)
        return s;
    const bv_csr *x = &g->features_csr;
    const void *data[BVG_NSECTIONS] = {g->adj.rowptr, g->adj.colidx, x->rowptr, x->colidx,
                                       x->values,     g->labels,     g->split,  g->name};
    bvg_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, BVG_MAGIC, sizeof BVG_MAGIC);
    h.version = BVG_VERSION;
    h.endian = BVG_ENDIAN;
    h.header_size = sizeof h;
    h.num_sections = BVG_NSECTIONS;
    h.key = key;
    h.num_nodes = g->num_nodes;
    h.num_features = g->num_features;
    h.num_undirected_edges = g->num_undirected_edges;
    h.nnz = g->adj.nnz;
    h.feature_nnz = x->nnz;
    h.num_classes = g->num_classes;
    memcpy(h.split_count, g->split_count, sizeof h.split_count);
    uint64_t bytes[BVG_NSECTIONS];
    section_sizes(g->num_nodes, g->adj.nnz, x->nnz, strlen(g->name) + 1, bytes);
    uint64_t at = sizeof h;
    for (int i = 0; i < BVG_NSECTIONS; i++) {
        at = (at + BVG_ALIGN - 1) / BVG_ALIGN * BVG_ALIGN;
        h.sections[i].offset = at;
        h.sections[i].bytes = bytes[i];
        h.sections[i].hash = bv_graph_hash64(data[i], bytes[i], (uint64_t)i);
        at += bytes[i];
    }
    h.file_size = at;
    h.header_hash = header_hash(&h);

    size_t tmp_len = strlen(path) + 16;
    char *tmp = malloc(tmp_len);
    if (!tmp)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    snprintf(tmp, tmp_len, "%s.tmpXXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        s = bv_error_set(err, BV_ERR_IO, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
    static const char zeros[BVG_ALIGN];
    bool ok = write_all(fd, &h, sizeof h);
    uint64_t written = sizeof h;
    for (int i = 0; i < BVG_NSECTIONS && ok; i++) {
        ok = write_all(fd, zeros, (size_t)(h.sections[i].offset - written)) &&
             write_all(fd, data[i], (size_t)bytes[i]);
        written = h.sections[i].offset + bytes[i];
    }
    /* Readers see either no file or a complete one: data reaches the disk before the
     * rename makes it visible under its real name. */
    ok = ok && fchmod(fd, 0644) == 0 && fsync(fd) == 0;
    int e = ok ? 0 : errno;
    if (close(fd) != 0 && ok) {
        e = errno;
        ok = false;
    }
    if (ok && rename(tmp, path) != 0) {
        e = errno;
        ok = false;
    }
    if (!ok) {
        unlink(tmp);
        s = bv_error_set(err, BV_ERR_IO, "%s: %s", tmp, strerror(e));
        free(tmp);
        return s;
    }
    free(tmp);
    int dfd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd); /* makes the rename itself durable; best effort */
        close(dfd);
    }
    return BV_OK;
}
