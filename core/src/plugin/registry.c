/* The plugin registry (registry.h). */
#include "registry.h"

#include "bivouac/resilience.h"

#include "export_sig.h"
#include "plugin_arrays.h"
#include "plugin_defaults.h"

#include <dirent.h>
#include <stdarg.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bivouac/cloud.h"
#include "bivouac/compute.h"
#include "bivouac/model.h"
#include "bivouac/resilience.h"
#include "bivouac/seqmodel.h"
#include "bivouac/transport.h"
#include "grow.h"

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
        free(r->records[i].options);
    }
    free(r->records);
    free(r);
}

/* Size of the ops table a model for `engine` must provide; 0 for an unknown engine. Slots
 * a later minor appends (stage_size, layer_size...) are not required: bv_ops_copy leaves
 * them zero for older plugins. */
size_t bv_model_ops_size_for_engine(bv_engine_kind engine)
{
    switch (engine) {
    case BV_ENGINE_GRAPH: return offsetof(bv_model_ops, edge_forward); /* ABI 1.0 table */
    case BV_ENGINE_SEQUENCE: return offsetof(bv_seq_model_ops, layer_size); /* ABI 1.3 */
    }
    return 0;
}

/* Smallest ops table each kind must provide (models: see bv_model_ops_size_for_engine).
 * Slots added by later minor versions are read through bv_ops_copy, which leaves them
 * NULL for older plugins. */
static size_t min_ops_size(bv_plugin_kind kind)
{
    switch (kind) {
    case BV_KIND_MODEL: return offsetof(bv_model_ops, edge_forward);
    case BV_KIND_COMPUTE: return offsetof(bv_compute_ops, leaky_relu_forward); /* ABI 1.0 */
    case BV_KIND_TRANSPORT: return offsetof(bv_transport_ops, close) + sizeof(void *);
    case BV_KIND_RESILIENCE: return offsetof(bv_resilience_ops, before_task); /* ABI 1.3 */
    case BV_KIND_CLOUD: return offsetof(bv_cloud_ops, price_per_hour); /* ABI 1.4 */
    }
    return 0;
}

/* Descriptor fields a minor version added are read only when the plugin's struct covers
 * them and its minor is at least the one that added them (1.3 plugins have zeros in what
 * was reserved space, but an older struct may simply be shorter). */
#define DESC_HAS(d, field, minor)                                                         \
    ((d)->abi_minor >= (minor) &&                                                          \
     (d)->struct_size >= offsetof(bv_plugin, field) + sizeof((d)->field))

static const char *engine_name(bv_engine_kind e)
{
    switch (e) {
    case BV_ENGINE_GRAPH: return "graph";
    case BV_ENGINE_SEQUENCE: return "sequence";
    }
    return NULL;
}

bool bv_resilience_gates(const bv_plugin *p)
{
    size_t end = offsetof(bv_resilience_ops, before_task) + sizeof(void *);
    return p->kind == BV_KIND_RESILIENCE && p->ops && p->ops_size >= end &&
           ((const bv_resilience_ops *)p->ops)->before_task;
}

const char *bv_plugin_model_engine(const bv_plugin *p)
{
    if (p->kind != BV_KIND_MODEL)
        return NULL;
    if (DESC_HAS(p, engine, 4) && p->engine)
        return strcmp(p->engine, "graph") == 0      ? "graph"
               : strcmp(p->engine, "sequence") == 0 ? "sequence"
                                                    : NULL;
    if (!p->ops || p->ops_size < sizeof(bv_engine_kind))
        return NULL;
    return engine_name(*(const bv_engine_kind *)p->ops); /* ABI <= 1.3: the leading field */
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
    if (!bv_grow((void **)&r->records, &r->cap, r->count, sizeof *r->records, 16))
        return NULL;
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

/* A model's engine: declared in the descriptor from ABI 1.4 on, else the deprecated
 * leading field of its ops table (min_ops_size has made sure the table holds it). Then
 * the table must be as large as that engine's. */
static bool check_model_engine(bv_plugin_record *rec, const bv_plugin *d)
{
    bv_engine_kind legacy = *(const bv_engine_kind *)d->ops;
    bv_engine_kind engine = legacy;
    if (d->abi_minor >= 4) {
        const char *declared = DESC_HAS(d, engine, 4) ? d->engine : NULL;
        if (!declared) {
            fail(rec, BV_LOAD_INCOMPLETE,
                 "%s: model plugin declares no engine; set .engine to \"graph\" or "
                 "\"sequence\" in its descriptor", rec->path);
            return false;
        }
        if (strcmp(declared, "graph") == 0)
            engine = BV_ENGINE_GRAPH;
        else if (strcmp(declared, "sequence") == 0)
            engine = BV_ENGINE_SEQUENCE;
        else {
            fail(rec, BV_LOAD_INCOMPLETE,
                 "%s: model plugin declares engine '%s'; this bivouac has graph, sequence",
                 rec->path, declared);
            return false;
        }
        /* Until every engine reads bv_plugin_model_engine, some core code still peeks at
         * the deprecated field: a table that says otherwise would be misread. */
        if (legacy != engine) {
            fail(rec, BV_LOAD_INCOMPLETE,
                 "%s: model plugin declares engine '%s' but its ops table starts with %s; "
                 "set the table's (deprecated) engine field to match",
                 rec->path, declared,
                 engine_name(legacy) ? engine_name(legacy) : "an unknown engine");
            return false;
        }
    } else if (!engine_name(legacy)) {
        fail(rec, BV_LOAD_INCOMPLETE, "%s: model ops table names unknown engine %d; this "
             "bivouac has graph (0), sequence (1)", rec->path, (int)legacy);
        return false;
    }
    size_t need = bv_model_ops_size_for_engine(engine);
    if (d->ops_size < need) {
        fail(rec, BV_LOAD_INCOMPLETE, "%s: ops table is %zu bytes, a model plugin needs %zu",
             rec->path, d->ops_size, need);
        return false;
    }
    return true;
}

/* The exports a policy may call (plugin.h, bv_export): a name a policy can write, a
 * function, a well-formed signature, no name twice. Only the descriptor is read. */
static bool check_exports(bv_plugin_record *rec, const bv_plugin *d)
{
    if (!d->exports)
        return true;
    for (size_t i = 0; d->exports[i].name; i++) {
        const bv_export *e = &d->exports[i];
        if (!bv_export_name_ok(e->name)) {
            fail(rec, BV_LOAD_INCOMPLETE, "%s: export '%s' has a bad name (lower-case letters, "
                 "digits and '_', at most 63 bytes, not starting with a digit)", rec->path,
                 e->name);
            return false;
        }
        char why[160];
        bv_export_sig sig;
        if (!bv_export_sig_parse(e->signature, d->abi_minor, &sig, why, sizeof why)) {
            fail(rec, BV_LOAD_INCOMPLETE, "%s: export '%s' has a malformed signature '%s': %s",
                 rec->path, e->name, e->signature ? e->signature : "(null)", why);
            return false;
        }
        if (!e->fn) {
            fail(rec, BV_LOAD_INCOMPLETE, "%s: export '%s' has no function", rec->path, e->name);
            return false;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(d->exports[j].name, e->name) == 0) {
                fail(rec, BV_LOAD_INCOMPLETE, "%s: export '%s' is declared twice", rec->path,
                     e->name);
                return false;
            }
    }
    return true;
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
    /* A newer minor may rely on slots or fields this core does not know to look at. */
    if (d->abi_minor > BV_ABI_MINOR) {
        fail(rec, BV_LOAD_BAD_ABI,
             "%s: built for plugin ABI %u.%u, newer than this bivouac's %d.%d; rebuild it "
             "against this SDK or use a newer bivouac",
             rec->path, d->abi_major, d->abi_minor, BV_ABI_MAJOR, BV_ABI_MINOR);
        return;
    }
    /* The ABI 1.0 descriptor ends where `engine` (1.4) begins. */
    if (d->struct_size < offsetof(bv_plugin, engine)) {
        fail(rec, BV_LOAD_BAD_ABI, "%s: descriptor is %u bytes, expected at least %zu",
             rec->path, d->struct_size, offsetof(bv_plugin, engine));
        return;
    }
    if (d->kind != (uint32_t)rec->kind || !d->name || strcmp(d->name, rec->name) != 0) {
        fail(rec, BV_LOAD_MISMATCH, "%s: descriptor says %s '%s', the file name says %s '%s'",
             rec->path, bv_plugin_kind_name((bv_plugin_kind)d->kind),
             d->name ? d->name : "(null)", kind, rec->name);
        return;
    }
    /* Nothing in the table is read before these two checks. */
    if (!d->ops) {
        fail(rec, BV_LOAD_INCOMPLETE, "%s: descriptor has no ops table", rec->path);
        return;
    }
    size_t need = min_ops_size(rec->kind);
    if (d->ops_size < need) {
        fail(rec, BV_LOAD_INCOMPLETE, "%s: ops table is %zu bytes, a %s plugin needs %zu",
             rec->path, d->ops_size, kind, need);
        return;
    }
    if (rec->kind == BV_KIND_MODEL && !check_model_engine(rec, d))
        return;
    if (d->options) {
        size_t option_size = DESC_HAS(d, option_size, 4) ? d->option_size : 0;
        rec->options = bv_options_normalise(d->options, option_size);
        if (!rec->options) {
            fail(rec, BV_LOAD_INCOMPLETE, "%s: out of memory reading its options", rec->path);
            return;
        }
    }
    if (!check_exports(rec, d))
        return;
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
    if (p->ops)
        memcpy(dst, p->ops, p->ops_size < dst_size ? p->ops_size : dst_size);
    bv_ops_fill_defaults(dst, dst_size, p);
}

const bv_option *bv_registry_options(const bv_registry *r, const bv_plugin *p)
{
    for (size_t i = 0; i < r->count; i++)
        if (r->records[i].desc == p && r->records[i].outcome == BV_LOAD_OK)
            return r->records[i].options;
    return NULL;
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
