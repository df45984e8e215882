/* The plugin registry (registry.h). */
#include "registry.h"

#include <dirent.h>
#include <stdarg.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bivouac/compute.h"
#include "bivouac/model.h"
#include "bivouac/resilience.h"
#include "bivouac/seqmodel.h"
#include "bivouac/transport.h"

static const bv_plugin_kind all_kinds[] = {BV_KIND_MODEL, BV_KIND_COMPUTE, BV_KIND_TRANSPORT,
                                           BV_KIND_RESILIENCE, BV_KIND_CLOUD};

static void add_dir(bv_registry *r, const char *dir)
{
    if (!dir || !*dir)
        return;
    for (size_t i = 0; i < r->ndirs; i++)
        if (strcmp(r->dirs[i], dir) == 0)
            return;
    char **d = realloc(r->dirs, (r->ndirs + 1) * sizeof *d);
    if (!d)
        return;
    r->dirs = d;
    r->dirs[r->ndirs++] = strdup(dir);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bv_registry *bv_registry_new(void)
{
    bv_registry *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    const char *env = getenv("BIVOUAC_PLUGIN_PATH");
    if (env) {
        char *copy = strdup(env);
        char *save = NULL;
        for (char *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save))
            add_dir(r, tok);
        free(copy);
    }
    /* Where libbivouac itself lives decides the default plugin directory. */
    Dl_info info;
    if (dladdr((void *)bv_registry_new, &info) && info.dli_fname) {
        char libdir[4096];
        snprintf(libdir, sizeof libdir, "%s", info.dli_fname);
        char *slash = strrchr(libdir, '/');
        if (slash) {
            *slash = '\0';
            char cand[4200];
            snprintf(cand, sizeof cand, "%s/bivouac/plugins", libdir); /* installed */
            if (is_dir(cand))
                add_dir(r, cand);
            snprintf(cand, sizeof cand, "%s/../plugins", libdir); /* build tree */
            if (is_dir(cand)) {
                char *real = realpath(cand, NULL);
                add_dir(r, real ? real : cand);
                free(real);
            }
        }
    }
    return r;
}

void bv_registry_free(bv_registry *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->ndirs; i++)
        free(r->dirs[i]);
    free(r->dirs);
    for (size_t i = 0; i < r->count; i++) {
        free(r->records[i].path);
        free(r->records[i].name);
        free(r->records[i].why);
    }
    free(r->records);
    free(r);
}

/* Size of the ops table a model for `engine` must provide; 0 for an unknown engine. */
size_t bv_model_ops_size_for_engine(bv_engine_kind engine)
{
    switch (engine) {
    case BV_ENGINE_GRAPH: return offsetof(bv_model_ops, edge_forward); /* ABI 1.0 table */
    case BV_ENGINE_SEQUENCE: return sizeof(bv_seq_model_ops);
    }
    return 0;
}

/* Smallest ops table each kind must provide: the ABI 1.0 table. Slots added by later
 * minor versions are read through bv_ops_copy, which leaves them NULL for older plugins. */
static size_t min_ops_size(bv_plugin_kind kind)
{
    switch (kind) {
    case BV_KIND_MODEL: return offsetof(bv_model_ops, edge_forward);
    case BV_KIND_COMPUTE: return offsetof(bv_compute_ops, leaky_relu_forward); /* ABI 1.0 */
    case BV_KIND_TRANSPORT: return offsetof(bv_transport_ops, close) + sizeof(void *);
    case BV_KIND_RESILIENCE: return sizeof(bv_resilience_ops);
    case BV_KIND_CLOUD: return 0;
    }
    return 0;
}

/* Splits "model_gcn.so" into kind and name; false if it is not a plugin file name. */
static bool parse_file_name(const char *file, bv_plugin_kind *kind, char *name, size_t len)
{
    size_t n = strlen(file);
    if (n < 4 || strcmp(file + n - 3, ".so") != 0)
        return false;
    for (size_t i = 0; i < sizeof all_kinds / sizeof all_kinds[0]; i++) {
        const char *k = bv_plugin_kind_name(all_kinds[i]);
        size_t kl = strlen(k);
        if (strncmp(file, k, kl) == 0 && file[kl] == '_' && n - 3 > kl + 1) {
            size_t nl = n - 3 - kl - 1;
            if (nl + 1 > len)
                return false;
            memcpy(name, file + kl + 1, nl);
            name[nl] = '\0';
            *kind = all_kinds[i];
            return true;
        }
    }
    return false;
}

static bv_plugin_record *find_record(bv_registry *r, bv_plugin_kind kind, const char *name)
{
    for (size_t i = 0; i < r->count; i++)
        if (r->records[i].kind == kind && strcmp(r->records[i].name, name) == 0 &&
            r->records[i].outcome != BV_LOAD_DUPLICATE)
            return &r->records[i];
    return NULL;
}

static bv_plugin_record *new_record(bv_registry *r, const char *path, bv_plugin_kind kind,
                                    const char *name)
{
    if (r->count == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        bv_plugin_record *rec = realloc(r->records, cap * sizeof *rec);
        if (!rec)
            return NULL;
        r->records = rec;
        r->cap = cap;
    }
    bv_plugin_record *rec = &r->records[r->count++];
    memset(rec, 0, sizeof *rec);
    rec->path = strdup(path);
    rec->kind = kind;
    rec->name = strdup(name);
    return rec;
}

static void fail(bv_plugin_record *rec, bv_load_outcome outcome, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(bv_plugin_record *rec, bv_load_outcome outcome, const char *fmt, ...)
{
    char buf[BV_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    rec->outcome = outcome;
    free(rec->why);
    rec->why = strdup(buf);
}

/* dlopen + descriptor checks, in the order that keeps plugin code from running early. */
static void load_record(bv_plugin_record *rec)
{
    const char *kind = bv_plugin_kind_name(rec->kind);
    rec->handle = dlopen(rec->path, RTLD_NOW | RTLD_LOCAL);
    if (!rec->handle) {
        const char *e = dlerror();
        size_t plen = strlen(rec->path);
        if (e && strncmp(e, rec->path, plen) == 0 && e[plen] == ':') /* dlerror names it */
            fail(rec, BV_LOAD_DLOPEN_FAILED, "cannot load %s", e);
        else
            fail(rec, BV_LOAD_DLOPEN_FAILED, "%s: cannot load: %s", rec->path, e ? e : "?");
        return;
    }
    char sym[256];
    snprintf(sym, sizeof sym, "bv_%s_%s_plugin", kind, rec->name);
    dlerror();
    void *addr = dlsym(rec->handle, sym);
    if (!addr) {
        fail(rec, BV_LOAD_NO_ENTRY, "%s: missing entry symbol %s", rec->path, sym);
        return;
    }
    bv_plugin_entry_fn entry;
    memcpy(&entry, &addr, sizeof entry);
    const bv_plugin *d = entry();
    if (!d || d->magic != BV_PLUGIN_MAGIC) {
        fail(rec, BV_LOAD_BAD_ABI, "%s: %s did not return a bivouac plugin descriptor",
             rec->path, sym);
        return;
    }
    if (d->abi_major != BV_ABI_MAJOR) {
        fail(rec, BV_LOAD_BAD_ABI, "%s: built for plugin ABI %u.%u, this bivouac speaks %d.%d",
             rec->path, d->abi_major, d->abi_minor, BV_ABI_MAJOR, BV_ABI_MINOR);
        return;
    }
    if (d->struct_size < offsetof(bv_plugin, reserved)) {
        fail(rec, BV_LOAD_BAD_ABI, "%s: descriptor is %u bytes, expected at least %zu",
             rec->path, d->struct_size, offsetof(bv_plugin, reserved));
        return;
    }
    if (d->kind != (uint32_t)rec->kind || !d->name || strcmp(d->name, rec->name) != 0) {
        fail(rec, BV_LOAD_MISMATCH, "%s: descriptor says %s '%s', the file name says %s '%s'",
             rec->path, bv_plugin_kind_name((bv_plugin_kind)d->kind),
             d->name ? d->name : "(null)", kind, rec->name);
        return;
    }
    size_t need = min_ops_size(rec->kind);
    if (rec->kind == BV_KIND_MODEL && d->ops && d->ops_size >= sizeof(bv_engine_kind) &&
        *(const bv_engine_kind *)d->ops != BV_ENGINE_GRAPH)
        need = bv_model_ops_size_for_engine(*(const bv_engine_kind *)d->ops);
    if (!d->ops || d->ops_size < need || need == 0) {
        if (need == 0)
            fail(rec, BV_LOAD_INCOMPLETE, "%s: model ops table names unknown engine %d",
                 rec->path, (int)*(const bv_engine_kind *)d->ops);
        else
            fail(rec, BV_LOAD_INCOMPLETE, "%s: ops table is %zu bytes, a %s plugin needs %zu",
                 rec->path, d->ops ? d->ops_size : 0, kind, need);
        return;
    }
    rec->desc = d;
    rec->outcome = BV_LOAD_OK;
}

static void consider_file(bv_registry *r, const char *dir, const char *file,
                          bv_plugin_kind want_kind, const char *want_name)
{
    bv_plugin_kind kind;
    char name[256];
    if (!parse_file_name(file, &kind, name, sizeof name))
        return;
    if (want_name && (kind != want_kind || strcmp(name, want_name) != 0))
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    for (size_t i = 0; i < r->count; i++)
        if (strcmp(r->records[i].path, path) == 0)
            return; /* already seen */
    bv_plugin_record *first = find_record(r, kind, name);
    bv_plugin_record *rec = new_record(r, path, kind, name);
    if (!rec)
        return;
    if (first) {
        fail(rec, BV_LOAD_DUPLICATE, "%s: duplicate %s plugin '%s' (using %s)", path,
             bv_plugin_kind_name(kind), name, first->path);
        return;
    }
    load_record(rec);
}

static void scan_dirs(bv_registry *r, bv_plugin_kind kind, const char *name)
{
    for (size_t i = 0; i < r->ndirs; i++) {
        /* Sorted, so the outcome does not depend on directory order. */
        struct dirent **list = NULL;
        int n = scandir(r->dirs[i], &list, NULL, alphasort);
        for (int j = 0; j < n; j++) {
            consider_file(r, r->dirs[i], list[j]->d_name, kind, name);
            free(list[j]);
        }
        free(list);
    }
}

void bv_registry_scan(bv_registry *r)
{
    scan_dirs(r, 0, NULL);
}

void bv_ops_copy(void *dst, size_t dst_size, const bv_plugin *p)
{
    memset(dst, 0, dst_size);
    memcpy(dst, p->ops, p->ops_size < dst_size ? p->ops_size : dst_size);
}

const bv_plugin *bv_registry_get(bv_registry *r, bv_plugin_kind kind, const char *name,
                                 bv_error *err)
{
    bv_plugin_record *rec = find_record(r, kind, name);
    if (!rec) {
        scan_dirs(r, kind, name);
        rec = find_record(r, kind, name);
    }
    if (!rec) {
        char searched[2048] = "";
        for (size_t i = 0; i < r->ndirs; i++) {
            size_t used = strlen(searched);
            snprintf(searched + used, sizeof searched - used, "%s%s", i ? ":" : "", r->dirs[i]);
        }
        bv_error_set(err, BV_ERR_PLUGIN, "%s plugin '%s' not found (searched %s)",
                     bv_plugin_kind_name(kind), name, r->ndirs ? searched : "nothing");
        return NULL;
    }
    if (rec->outcome != BV_LOAD_OK) {
        bv_error_set(err, BV_ERR_PLUGIN, "%s", rec->why);
        return NULL;
    }
    if (rec->desc->probe) {
        char why[512] = "";
        if (!rec->desc->probe(why, sizeof why)) {
            bv_error_set(err, BV_ERR_PLUGIN, "%s plugin '%s' cannot run here: %s",
                         bv_plugin_kind_name(kind), name, why[0] ? why : "probe failed");
            return NULL;
        }
    }
    return rec->desc;
}

size_t bv_registry_names(bv_registry *r, bv_plugin_kind kind, const char **names, size_t max)
{
    scan_dirs(r, 0, NULL);
    size_t n = 0;
    for (size_t i = 0; i < r->count && n < max; i++)
        if (r->records[i].kind == kind && r->records[i].outcome == BV_LOAD_OK)
            names[n++] = r->records[i].name;
    return n;
}
