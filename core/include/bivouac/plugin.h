/* The plugin descriptor: the one thing a plugin exports. The core reads the fixed header
 * (magic, ABI, struct_size, kind, name) before it runs any other plugin code. */
#ifndef BIVOUAC_PLUGIN_H
#define BIVOUAC_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/options.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BV_PLUGIN_MAGIC 0x42565047u /* "BVPG" */
/* Major: incompatible change, the core refuses the plugin. Minor: additions at the end of
 * an ops table; the core checks ops_size before using a later slot. */
#define BV_ABI_MAJOR 1
#define BV_ABI_MINOR 3

typedef enum bv_plugin_kind {
    BV_KIND_MODEL = 1,
    BV_KIND_COMPUTE = 2,
    BV_KIND_TRANSPORT = 3,
    BV_KIND_RESILIENCE = 4,
    BV_KIND_CLOUD = 5
} bv_plugin_kind;

/* An extra function a plugin offers to Lua policies (called through libffi).
 * signature: return type then argument types, each one of "v i d s p" (void, int64,
 * double, string, pointer), e.g. "d:ii" returns a double and takes two int64. */
typedef struct bv_export {
    const char *name;
    const char *signature;
    void (*fn)(void);
    const char *doc;
} bv_export;

typedef struct bv_plugin {
    /* fixed header: never reorder */
    uint32_t magic;
    uint16_t abi_major;
    uint16_t abi_minor;
    uint32_t struct_size; /* sizeof(bv_plugin) as the plugin was compiled */
    uint32_t kind;        /* bv_plugin_kind */
    const char *name;     /* must match the file name: <kind>_<name>.so */
    const char *version;  /* the plugin's own version, e.g. "0.1.0" */
    const char *description;
    /* body */
    const bv_option *options; /* terminated by BV_OPT_END; may be NULL */
    const void *ops;          /* the kind's ops table (bv_model_ops, bv_compute_ops, ...) */
    size_t ops_size;          /* sizeof that table as compiled; lets minor versions grow */
    /* Optional (may be NULL): can this plugin run on this machine? Writes why not. */
    bool (*probe)(char *why, size_t why_len);
    const bv_export *exports; /* optional, terminated by a {NULL} entry */
    void *(*get_proc_address)(const char *name); /* optional kind-specific extras */
    void *reserved[4];
} bv_plugin;

#define BV_PLUGIN_HEADER(kind_, name_, version_, description_)                          \
    .magic = BV_PLUGIN_MAGIC, .abi_major = BV_ABI_MAJOR, .abi_minor = BV_ABI_MINOR,    \
    .struct_size = sizeof(bv_plugin), .kind = (kind_), .name = (name_),                \
    .version = (version_), .description = (description_)

#define BV_PLUGIN_EXPORT __attribute__((visibility("default")))

/* The entry symbol of the plugin in file <kind>_<name>.so is
 *     const bv_plugin *bv_<kind>_<name>_plugin(void);
 * e.g. bv_compute_cpu_plugin in compute_cpu.so. It must only return a pointer to a
 * static const descriptor: no allocation, no threads, no CPU-feature probing. */
typedef const bv_plugin *(*bv_plugin_entry_fn)(void);

/* Defines the entry symbol (with its prototype, for -Wmissing-prototypes):
 *   BV_PLUGIN_ENTRY(compute, cpu, cpu_plugin)  ->  bv_compute_cpu_plugin() */
#define BV_PLUGIN_ENTRY(kind_, name_, descriptor_)                                       \
    BV_PLUGIN_EXPORT const bv_plugin *bv_##kind_##_##name_##_plugin(void);               \
    BV_PLUGIN_EXPORT const bv_plugin *bv_##kind_##_##name_##_plugin(void)                \
    {                                                                                    \
        return &(descriptor_);                                                           \
    }

const char *bv_plugin_kind_name(bv_plugin_kind kind); /* "model", "compute", ... */

#ifdef __cplusplus
}
#endif
#endif
