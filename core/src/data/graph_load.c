/* Loads a dataset directory in the shared text format (meta.yaml, edges.tsv, features.svm,
 * split.tsv; shared/data/README.md), going through the binary cache when asked to.
 * The text files are read whole and parsed by hand-written scanners: fscanf per token
 * is two orders of magnitude too slow for a 10M-edge file. */
#include "bivouac/graph.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "bivouac/log.h"
#include "graph_internal.h"
#include "sha256.h"

static const char *const graph_file_names[BV_GRAPH_NFILES] = {
    [BV_GRAPH_FILE_META] = "meta.yaml",
    [BV_GRAPH_FILE_EDGES] = "edges.tsv",
    [BV_GRAPH_FILE_FEATURES] = "features.svm",
    [BV_GRAPH_FILE_SPLIT] = "split.tsv",
};

/* What meta.yaml says. bytes[i] is -1 where meta.yaml gives no size for file i, and
 * sha256[i] is "" where it gives no sum (otherwise 64 lowercase hex digits). */
typedef struct graph_meta {
    char *name;
    int64_t nodes;
    int64_t features;
    int64_t classes;
    int64_t undirected_edges;
    int64_t bytes[BV_GRAPH_NFILES];
    char sha256[BV_GRAPH_NFILES][BV_SHA256_HEX];
} graph_meta;

/* A whole file in memory, followed by a '\0' so scanners can look one byte past a token
 * without a bounds check. */
typedef struct text_file {
    char *data;
    size_t len;
} text_file;

/* "<dir>/<file>", without doubling a trailing slash. */
static char *path_join(const char *dir, const char *file)
{
    size_t n = strlen(dir);
    const char *sep = (n > 0 && dir[n - 1] == '/') ? "" : "/";
    size_t len = n + strlen(sep) + strlen(file) + 1;
    char *p = malloc(len);
    if (p)
        snprintf(p, len, "%s%s%s", dir, sep, file);
    return p;
}

static bv_status read_text(const char *path, text_file *t, bv_error *err)
{
    t->data = NULL;
    t->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(e));
    }
    size_t cap = (size_t)st.st_size;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory for %zu bytes", path, cap);
    }
    size_t len = 0;
    while (len < cap) {
        size_t chunk = cap - len < ((size_t)1 << 30) ? cap - len : ((size_t)1 << 30);
        ssize_t got = read(fd, buf + len, chunk);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(e));
        }
        if (got == 0)
            break; /* shrank under us: parse what is there, the line checks will complain */
        len += (size_t)got;
    }
    close(fd);
    buf[len] = '\0';
    t->data = buf;
    t->len = len;
    return BV_OK;
}

/* Lines in [p, end): newline-terminated ones plus an unterminated last one. */
static int64_t count_lines(const char *p, const char *end)
{
    int64_t lines = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        lines++;
        if (!nl)
            break;
        p = nl + 1;
    }
    return lines;
}

/* --- meta.yaml ------------------------------------------------------------------- */

static const char *yaml_scalar(yaml_node_t *node)
{
    return (node && node->type == YAML_SCALAR_NODE) ? (const char *)node->data.scalar.value
                                                    : NULL;
}

static bv_status yaml_count(const char *path, const char *key, yaml_node_t *node,
                            int64_t *out, bv_error *err)
{
    const char *s = yaml_scalar(node);
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : -1;
    if (!s || end == s || *end != '\0' || errno != 0 || v < 0)
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s:%zu: '%s' must be a non-negative integer, not '%s'", path,
                            node->start_mark.line + 1, key, s ? s : "(a list or mapping)");
    *out = v;
    return BV_OK;
}

/* A "sha256:" entry: 64 hex digits, kept lowercase to compare with what we compute. */
static bv_status yaml_sha256(const char *path, const char *file, yaml_node_t *node,
                             char out[BV_SHA256_HEX], bv_error *err)
{
    const char *s = yaml_scalar(node);
    size_t len = s ? strlen(s) : 0;
    if (!s || len != 2 * BV_SHA256_BYTES || strspn(s, "0123456789abcdefABCDEF") != len)
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s:%zu: the sha256 of %s must be 64 hex digits, not '%.80s'", path,
                            node->start_mark.line + 1, file, s ? s : "(a list or mapping)");
    for (size_t i = 0; i <= len; i++)
        out[i] = (char)(s[i] >= 'A' && s[i] <= 'F' ? s[i] - 'A' + 'a' : s[i]);
    return BV_OK;
}

/* The last path component of dir, for datasets whose meta.yaml has no name. */
static char *dir_basename(const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t start = n;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    return strndup(dir + start, n - start);
}

static bv_status meta_parse(const char *path, yaml_document_t *doc, graph_meta *meta,
                            bv_error *err)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root || root->type != YAML_MAPPING_NODE)
        return bv_error_set(err, BV_ERR_INVALID, "%s: expected a mapping of keys", path);
    struct {
        const char *key;
        int64_t *value;
        bool seen;
    } counts[] = {
        {"nodes", &meta->nodes, false},
        {"features", &meta->features, false},
        {"classes", &meta->classes, false},
        {"undirected_edges", &meta->undirected_edges, false},
    };
    for (yaml_node_pair_t *pair = root->data.mapping.pairs.start;
         pair < root->data.mapping.pairs.top; pair++) {
        const char *key = yaml_scalar(yaml_document_get_node(doc, pair->key));
        yaml_node_t *value = yaml_document_get_node(doc, pair->value);
        if (!key)
            continue;
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
            if (strcmp(key, counts[i].key) == 0) {
                bv_status s = yaml_count(path, key, value, counts[i].value, err);
                if (s != BV_OK)
                    return s;
                counts[i].seen = true;
            }
        }
        if (strcmp(key, "name") == 0 && yaml_scalar(value) && !meta->name) {
            meta->name = strdup(yaml_scalar(value));
            if (!meta->name)
                return bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory", path);
        }
        bool bytes = strcmp(key, "bytes") == 0, sums = strcmp(key, "sha256") == 0;
        if ((bytes || sums) && value && value->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *b = value->data.mapping.pairs.start;
                 b < value->data.mapping.pairs.top; b++) {
                const char *file = yaml_scalar(yaml_document_get_node(doc, b->key));
                yaml_node_t *v = yaml_document_get_node(doc, b->value);
                for (int f = BV_GRAPH_FILE_EDGES; file && f < BV_GRAPH_NFILES; f++) {
                    if (strcmp(file, graph_file_names[f]) != 0)
                        continue;
                    bv_status s = bytes ? yaml_count(path, file, v, &meta->bytes[f], err)
                                        : yaml_sha256(path, file, v, meta->sha256[f], err);
                    if (s != BV_OK)
                        return s;
                }
            }
        }
    }
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (!counts[i].seen)
            return bv_error_set(err, BV_ERR_INVALID, "%s: missing '%s'", path, counts[i].key);
    if (meta->nodes < 1 || meta->nodes > INT32_MAX)
        return bv_error_set(err, BV_ERR_INVALID, "%s: nodes %lld out of range (1 to %d)", path,
                            (long long)meta->nodes, INT32_MAX);
    if (meta->classes > INT32_MAX)
        return bv_error_set(err, BV_ERR_INVALID, "%s: classes %lld out of range (0 to %d)",
                            path, (long long)meta->classes, INT32_MAX);
    if (meta->features > INT64_MAX / 4 / meta->nodes)
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s: %lld nodes x %lld features do not fit in memory", path,
                            (long long)meta->nodes, (long long)meta->features);
    return BV_OK;
}

static bv_status meta_load(const char *dir, graph_meta *meta, bv_error *err)
{
    memset(meta, 0, sizeof *meta);
    for (int f = 0; f < BV_GRAPH_NFILES; f++)
        meta->bytes[f] = -1;
    char *path = path_join(dir, graph_file_names[BV_GRAPH_FILE_META]);
    if (!path)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    text_file t;
    bv_status s = read_text(path, &t, err);
    if (s != BV_OK) {
        free(path);
        return s;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)t.data, t.len);
    if (!yaml_parser_load(&parser, &doc)) {
        s = bv_error_set(err, BV_ERR_INVALID, "%s:%zu: %s", path,
                         parser.problem_mark.line + 1,
                         parser.problem ? parser.problem : "malformed YAML");
    } else {
        s = meta_parse(path, &doc, meta, err);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    free(t.data);
    free(path);
    if (s == BV_OK && !meta->name && !(meta->name = dir_basename(dir)))
        s = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    if (s != BV_OK) {
        free(meta->name);
        meta->name = NULL;
    }
    return s;
}

/* --- scanners -------------------------------------------------------------------- */

/* Unsigned decimal at *p; saturates at INT64_MAX. False if there is no digit. */
static bool scan_uint(const char **p, int64_t *out)
{
    const char *s = *p;
    int64_t v = 0;
    while (*s >= '0' && *s <= '9') {
        int d = *s - '0';
        v = v > (INT64_MAX - d) / 10 ? INT64_MAX : v * 10 + d;
        s++;
    }
    if (s == *p)
        return false;
    *out = v;
    *p = s;
    return true;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* Parses exactly [s, e) as a finite decimal float, as strtof would in the C locale.
 * The values the format prints (%.6g) take Clinger's fast path: a mantissa of at most 7
 * digits is exact in a float, so is 10^k for k <= 10, and one IEEE multiply or divide of
 * exact operands rounds correctly. Anything else goes to strtof_l. */
static bool parse_float(const char *s, const char *e, float *out)
{
    static const float pow10[] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f,
                                  1e6f, 1e7f, 1e8f, 1e9f, 1e10f};
    const char *p = s;
    bool neg = false;
    if (p < e && (*p == '-' || *p == '+'))
        neg = *p++ == '-';
    uint32_t mant = 0;
    int significant = 0, scale = 0;
    bool any = false;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        any = true;
        if (mant || *p != '0') {
            if (++significant > 7)
                goto slow;
            mant = mant * 10 + (uint32_t)(*p - '0');
        }
    }
    if (p < e && *p == '.') {
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
            any = true;
            if (mant || *p != '0') {
                if (++significant > 7)
                    goto slow;
                mant = mant * 10 + (uint32_t)(*p - '0');
            }
            scale--;
        }
    }
    if (!any)
        goto slow;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        int sign = 1, exp = 0;
        if (p < e && (*p == '-' || *p == '+'))
            sign = *p++ == '-' ? -1 : 1;
        if (p == e || *p < '0' || *p > '9')
            return false;
        for (; p < e && *p >= '0' && *p <= '9'; p++)
            exp = exp > 100000 ? exp : exp * 10 + (*p - '0');
        scale += sign * exp;
    }
    if (p != e || scale < -10 || scale > 10)
        goto slow;
    float f = (float)mant;
    f = scale < 0 ? f / pow10[-scale] : f * pow10[scale];
    *out = neg ? -f : f;
    return true;
slow:;
    /* Plain decimal only: no hex floats, and no inf or nan, which would poison training
     * without a word. */
    char buf[64];
    size_t len = (size_t)(e - s);
    if (len == 0 || len >= sizeof buf || strspn(s, "0123456789+-.eE") < len)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    pthread_once(&c_locale_once, c_locale_init);
    if (!c_locale)
        return false;
    char *end = NULL;
    float parsed = strtof_l(buf, &end, c_locale);
    if (end != buf + len || !isfinite(parsed))
        return false;
    *out = parsed;
    return true;
}

/* --- edges.tsv ------------------------------------------------------------------- */

static bv_status parse_edges(const char *path, const text_file *t, int64_t n, int32_t **out,
                             int64_t *count, bv_error *err)
{
    const char *p = t->data, *end = t->data + t->len;
    int64_t lines = count_lines(p, end);
    int32_t *pairs = malloc((size_t)(lines ? lines : 1) * 2 * sizeof *pairs);
    if (!pairs)
        return bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory for %lld edges", path,
                            (long long)lines);
    int64_t line = 0, m = 0;
    while (p < end) {
        line++;
        int64_t u, v;
        bool ok = scan_uint(&p, &u) && *p == '\t';
        if (ok) {
            p++;
            ok = scan_uint(&p, &v);
        }
        if (ok && *p == '\r')
            p++;
        if (ok && *p == '\n')
            p++;
        else if (p != end)
            ok = false;
        if (!ok) {
            free(pairs);
            return bv_error_set(err, BV_ERR_INVALID, "%s:%lld: expected 'src<TAB>dst'", path,
                                (long long)line);
        }
        if (u >= n || v >= n) {
            free(pairs);
            return bv_error_set(err, BV_ERR_INVALID, "%s:%lld: node %lld out of range (%lld nodes)",
                                path, (long long)line, (long long)(u >= n ? u : v), (long long)n);
        }
        pairs[2 * m] = (int32_t)u;
        pairs[2 * m + 1] = (int32_t)v;
        m++;
    }
    *out = pairs;
    *count = m;
    return BV_OK;
}

/* --- features.svm ---------------------------------------------------------------- */

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static bv_status wrong_line_count(const char *path, int64_t lines, int64_t n, bv_error *err)
{
    return bv_error_set(err, BV_ERR_INVALID,
                        "%s: %lld lines, but meta.yaml says nodes: %lld (one line per node)",
                        path, (long long)lines, (long long)n);
}

/* One line: "<label> <idx>:<val> ...": its entries go to col/val from *k on. */
static bv_status parse_feature_line(const char *path, int64_t line, const char *p,
                                    const char *stop, const graph_meta *meta, int32_t *col,
                                    float *val, int64_t *k, int32_t *label, bv_error *err)
{
    const char *q = p;
    while (q < stop && !is_blank(*q))
        q++;
    const char *digits = p + (p < q && *p == '-');
    const char *after = digits;
    int64_t value;
    if (!scan_uint(&after, &value) || after != q)
        return bv_error_set(err, BV_ERR_INVALID, "%s:%lld: malformed label '%.*s'", path,
                            (long long)line, (int)(q - p), p);
    if (digits != p)
        value = -value;
    if (value < -1 || value >= meta->classes)
        return bv_error_set(err, BV_ERR_INVALID, "%s:%lld: label %lld out of range (%lld classes)",
                            path, (long long)line, (long long)value, (long long)meta->classes);
    *label = (int32_t)value;
    int64_t first = *k;
    for (;;) {
        while (q < stop && is_blank(*q))
            q++;
        if (q == stop)
            break;
        const char *token = q;
        while (q < stop && !is_blank(*q))
            q++;
        const char *colon = token;
        int64_t index;
        float x;
        if (!scan_uint(&colon, &index) || colon >= q || *colon != ':' ||
            !parse_float(colon + 1, q, &x))
            return bv_error_set(err, BV_ERR_INVALID, "%s:%lld: malformed feature '%.*s'", path,
                                (long long)line, (int)(q - token), token);
        if (index >= meta->features)
            return bv_error_set(err, BV_ERR_INVALID,
                                "%s:%lld: feature index %lld out of range (%lld features)", path,
                                (long long)line, (long long)index, (long long)meta->features);
        col[*k] = (int32_t)index; /* a token has a colon: the caller counted them all */
        val[(*k)++] = x;
    }
    *k = first + bv_graph_tidy_row(col + first, val + first, *k - first);
    return BV_OK;
}

/* The features as the CSR they are written as: entries counted by their colons first, so
 * the arrays are allocated once (a bound: zeros and repeats are dropped after). */
static bv_status parse_features(const char *path, const text_file *t, const graph_meta *meta,
                                bv_csr *x, int32_t *labels, bv_error *err)
{
    const char *p = t->data, *end = t->data + t->len;
    int64_t n = meta->nodes, line = 0, bound = 0;
    for (const char *c = p; (c = memchr(c, ':', (size_t)(end - c))) != NULL; c++)
        bound++;
    if (meta->features > INT32_MAX) /* a column is an int32_t */
        return bv_error_set(err, BV_ERR_INVALID, "%s: features %lld out of range (1 to %d)",
                            path, (long long)meta->features, INT32_MAX);
    *x = (bv_csr){.nrows = n, .ncols = meta->features};
    x->rowptr = bv_alloc_aligned((size_t)(n + 1) * sizeof *x->rowptr);
    x->colidx = bv_alloc_aligned((size_t)(bound + 1) * sizeof *x->colidx);
    x->values = bv_alloc_aligned((size_t)(bound + 1) * sizeof *x->values);
    if (!x->rowptr || !x->colidx || !x->values)
        return bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory for %lld features", path,
                            (long long)bound);
    int64_t k = 0;
    while (p < end) {
        if (line == n)
            return wrong_line_count(path, n + count_lines(p, end), n, err);
        x->rowptr[line] = k;
        line++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *stop = (eol > p && eol[-1] == '\r') ? eol - 1 : eol;
        bv_status s = parse_feature_line(path, line, p, stop, meta, x->colidx, x->values, &k,
                                         &labels[line - 1], err);
        if (s != BV_OK)
            return s;
        p = eol < end ? eol + 1 : end;
    }
    if (line != n)
        return wrong_line_count(path, line, n, err);
    x->rowptr[n] = k;
    x->nnz = k;
    return BV_OK;
}

/* --- split.tsv ------------------------------------------------------------------- */

static bv_status parse_split(const char *path, const text_file *t, int64_t n, uint8_t *split,
                             int64_t count[4], bv_error *err)
{
    static const char *const words[4] = {
        [BV_SPLIT_NONE] = "none", [BV_SPLIT_TRAIN] = "train", [BV_SPLIT_VAL] = "val",
        [BV_SPLIT_TEST] = "test"};
    const char *p = t->data, *end = t->data + t->len;
    int64_t line = 0;
    while (p < end) {
        if (line == n)
            return wrong_line_count(path, n + count_lines(p, end), n, err);
        line++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *stop = eol;
        while (stop > p && (is_blank(stop[-1]) || stop[-1] == '\r'))
            stop--;
        size_t len = (size_t)(stop - p);
        int which = -1;
        for (int w = 0; w < 4 && which < 0; w++)
            if (len == strlen(words[w]) && memcmp(p, words[w], len) == 0)
                which = w;
        if (which < 0)
            return bv_error_set(err, BV_ERR_INVALID,
                                "%s:%lld: unknown split '%.*s' (expected train, val, test or none)",
                                path, (long long)line, len > 40 ? 40 : (int)len, p);
        split[line - 1] = (uint8_t)which;
        count[which]++;
        p = eol < end ? eol + 1 : end;
    }
    if (line != n)
        return wrong_line_count(path, line, n, err);
    return BV_OK;
}

/* --- before parsing: the files against meta.yaml -------------------------------- */

/* One streaming pass over a data file in fixed-size reads: counts its lines (as
 * count_lines does) and, when meta.yaml lists a sum, checks the file's SHA-256. Nothing
 * here allocates in proportion to what meta.yaml claims or to the file. */
static bv_status scan_file(const char *path, const char *want_sha256, char *buf, size_t cap,
                           int64_t *lines, bv_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
    bool hash = want_sha256[0] != '\0';
    bv_sha256 ctx;
    bv_sha256_init(&ctx);
    int64_t newlines = 0;
    char last = '\n';
    for (;;) {
        ssize_t got = read(fd, buf, cap);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            close(fd);
            return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(e));
        }
        if (got == 0)
            break;
        for (const char *p = buf, *end = buf + got; (p = memchr(p, '\n', (size_t)(end - p)));
             p++)
            newlines++;
        last = buf[got - 1];
        if (hash)
            bv_sha256_update(&ctx, buf, (size_t)got);
    }
    close(fd);
    *lines = newlines + (last != '\n');
    if (!hash)
        return BV_OK;
    uint8_t digest[BV_SHA256_BYTES];
    char have[BV_SHA256_HEX];
    bv_sha256_final(&ctx, digest);
    bv_sha256_hex(digest, have);
    if (strcmp(have, want_sha256) != 0)
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s: sha256 mismatch: meta.yaml says %s, the file has %s (the file "
                            "is corrupt or was changed: restore it, or update meta.yaml if the "
                            "change is meant)",
                            path, want_sha256, have);
    return BV_OK;
}

/* Physical memory in bytes, or 0 where the system does not say. */
static uint64_t physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

/* Runs before anything is allocated for the dataset: checks every sum meta.yaml lists,
 * then that meta.yaml's counts fit the files (one line per node in features.svm and
 * split.tsv, at least one line per edge in edges.tsv) and that the dense features fit in
 * memory. A meta.yaml that says `nodes: 2000000000` over 2708 lines is refused here, not
 * by the allocator. docs/limits.md, "Datasets". */
static bv_status verify_files(const char *dir, const graph_meta *meta, bv_error *err)
{
    enum { READ_BYTES = 1 << 20 };
    char *buf = malloc(READ_BYTES);
    if (!buf)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    int64_t lines[BV_GRAPH_NFILES] = {0};
    char *path[BV_GRAPH_NFILES] = {NULL};
    bv_status s = BV_OK;
    for (int f = BV_GRAPH_FILE_EDGES; f < BV_GRAPH_NFILES && s == BV_OK; f++) {
        path[f] = path_join(dir, graph_file_names[f]);
        s = path[f] ? scan_file(path[f], meta->sha256[f], buf, READ_BYTES, &lines[f], err)
                    : bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    free(buf);
    if (s == BV_OK && lines[BV_GRAPH_FILE_EDGES] < meta->undirected_edges)
        s = bv_error_set(err, BV_ERR_INVALID,
                         "%s: %lld lines, but meta.yaml says undirected_edges: %lld (one line "
                         "per edge)",
                         path[BV_GRAPH_FILE_EDGES], (long long)lines[BV_GRAPH_FILE_EDGES],
                         (long long)meta->undirected_edges);
    for (int f = BV_GRAPH_FILE_FEATURES; f <= BV_GRAPH_FILE_SPLIT && s == BV_OK; f++)
        if (lines[f] != meta->nodes)
            s = wrong_line_count(path[f], lines[f], meta->nodes, err);
    uint64_t dense = (uint64_t)meta->nodes * (uint64_t)meta->features * sizeof(float);
    uint64_t memory = physical_memory();
    if (s == BV_OK && memory && dense > memory) {
        path[BV_GRAPH_FILE_META] = path_join(dir, graph_file_names[BV_GRAPH_FILE_META]);
        s = bv_error_set(err, BV_ERR_INVALID,
                         "%s: nodes: %lld x features: %lld is %.1f GB of dense features, "
                         "more than this machine's %.1f GB of memory",
                         path[BV_GRAPH_FILE_META] ? path[BV_GRAPH_FILE_META] : "meta.yaml",
                         (long long)meta->nodes, (long long)meta->features, (double)dense / 1e9,
                         (double)memory / 1e9);
    }
    for (int f = 0; f < BV_GRAPH_NFILES; f++)
        free(path[f]);
    return s;
}

/* --- the directory --------------------------------------------------------------- */

static bv_status parse_file(const char *dir, int which, const graph_meta *meta,
                            bv_graph_dataset *g, bv_error *err)
{
    char *path = path_join(dir, graph_file_names[which]);
    if (!path)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    text_file t;
    bv_status s = read_text(path, &t, err);
    if (s == BV_OK && which == BV_GRAPH_FILE_EDGES) {
        int32_t *pairs = NULL;
        int64_t m = 0;
        s = parse_edges(path, &t, meta->nodes, &pairs, &m, err);
        free(t.data);
        t.data = NULL;
        if (s == BV_OK)
            s = bv_graph_adj_from_pairs(meta->nodes, pairs, m, &g->adj, err);
        free(pairs);
        g->num_undirected_edges = g->adj.nnz / 2;
        if (s == BV_OK && g->num_undirected_edges != meta->undirected_edges)
            s = bv_error_set(err, BV_ERR_INVALID, "%s: %lld edges, but meta.yaml says %lld",
                             path, (long long)g->num_undirected_edges,
                             (long long)meta->undirected_edges);
    } else if (s == BV_OK && which == BV_GRAPH_FILE_FEATURES) {
        s = parse_features(path, &t, meta, &g->features_csr, g->labels, err);
    } else if (s == BV_OK && which == BV_GRAPH_FILE_SPLIT) {
        s = parse_split(path, &t, meta->nodes, g->split, g->split_count, err);
    }
    free(t.data);
    free(path);
    return s;
}

static bv_status parse_dir(const char *dir, const graph_meta *meta, bv_graph_dataset **out,
                           bv_error *err)
{
    bv_graph_dataset *g = bv_graph_dataset_alloc(meta->name);
    if (!g)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    int64_t n = meta->nodes;
    g->num_nodes = n;
    g->num_features = meta->features;
    g->num_classes = (int32_t)meta->classes;
    g->labels = bv_alloc_aligned((size_t)n * sizeof *g->labels);
    g->split = bv_alloc_aligned((size_t)n * sizeof *g->split);
    bv_status s = BV_OK;
    if (!g->labels || !g->split)
        s = bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory for %lld vertices", dir,
                         (long long)n);
    for (int f = BV_GRAPH_FILE_EDGES; f < BV_GRAPH_NFILES && s == BV_OK; f++)
        s = parse_file(dir, f, meta, g, err);
    if (s != BV_OK) {
        bv_graph_free(g);
        return s;
    }
    *out = g;
    return BV_OK;
}

bv_status bv_graph_load_dir(const char *dir, const char *cache_dir, bv_graph_dataset **out,
                            bv_error *err)
{
    *out = NULL;
    graph_meta meta;
    bv_status s = meta_load(dir, &meta, err);
    if (s != BV_OK)
        return s;
    struct stat st[BV_GRAPH_NFILES];
    for (int f = 0; f < BV_GRAPH_NFILES && s == BV_OK; f++) {
        char *path = path_join(dir, graph_file_names[f]);
        if (!path)
            s = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        else if (stat(path, &st[f]) != 0)
            s = bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
        else if (meta.bytes[f] >= 0 && st[f].st_size != meta.bytes[f])
            s = bv_error_set(err, BV_ERR_INVALID,
                             "%s: %lld bytes, but meta.yaml says %lld (truncated or modified?)",
                             path, (long long)st[f].st_size, (long long)meta.bytes[f]);
        free(path);
    }
    char *cache_path = NULL;
    uint64_t key = 0;
    if (s == BV_OK && cache_dir) {
        bv_error cache_err;
        bv_error_clear(&cache_err);
        cache_path = bv_graph_cache_path(dir, meta.name, cache_dir, st, &key, &cache_err);
        if (!cache_path) {
            bv_log(BV_LOG_WARN, "graph cache not used: %s", cache_err.msg);
        } else {
            bv_graph_dataset *g = NULL;
            bv_status c = bv_graph_cache_open(cache_path, key, &g, &cache_err);
            if (c == BV_OK && (g->num_nodes != meta.nodes || g->num_features != meta.features ||
                               g->num_classes != meta.classes)) {
                bv_graph_free(g);
                c = bv_error_set(&cache_err, BV_ERR_CORRUPT, "%s: counts differ from meta.yaml",
                                 cache_path);
            }
            if (c == BV_OK) {
                /* The file was verified when this entry was written (format 2 on). */
                free(meta.name);
                free(cache_path);
                s = bv_graph_check_split(g, graph_file_names[BV_GRAPH_FILE_SPLIT], err);
                if (s != BV_OK)
                    bv_graph_free(g);
                else
                    *out = g;
                return s;
            }
            if (cache_err.msg[0])
                bv_log(BV_LOG_WARN, "ignoring graph cache: %s; rebuilding it", cache_err.msg);
        }
    }
    if (s == BV_OK)
        s = verify_files(dir, &meta, err);
    if (s == BV_OK)
        s = parse_dir(dir, &meta, out, err);
    if (s == BV_OK && (s = bv_graph_check_split(*out, graph_file_names[BV_GRAPH_FILE_SPLIT],
                                                err)) != BV_OK) {
        bv_graph_free(*out);
        *out = NULL;
    }
    if (s == BV_OK && cache_path) {
        bv_error cache_err;
        bv_error_clear(&cache_err);
        if (bv_graph_cache_write(cache_dir, cache_path, key, *out, &cache_err) != BV_OK)
            bv_log(BV_LOG_WARN, "graph cache not written: %s", cache_err.msg);
    }
    free(cache_path);
    free(meta.name);
    return s;
}
