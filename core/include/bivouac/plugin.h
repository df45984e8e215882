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
/* Major: incompatible change, the core refuses the plugin. Minor: additions only (slots at
 * the end of an ops table, fields in reserved space or at the end of a struct that carries
 * its size, new kinds); the core reads an older plugin through size-normalised copies and
 * refuses a plugin whose minor is newer than its own (docs/plugins.md, "ABI rules").
 *   1.4: bv_plugin.engine and .option_size (in the old reserved space), bv_model_ops
 *        .stage_size, bv_seq_model_ops .layer_size/.param_size, the resilience hooks after
 *        restore, the cloud kind's ops table (cloud.h).
 *   1.5: export signatures: the 'b' (bool) type and the '!' (effectful) prefix, and
 *        bv_export_error; 'p' is refused from 1.5 on (docs/plugins.md, "Exports").
 *   1.6: bv_node_request .label and .host, bv_cloud_event .wait_status (cloud.h);
 *        bv_transport_ops.counters and bv_transport_counters (transport.h);
 *        bv_series_report (bivouac/series.h): a plugin that reports series needs a core
 *        that has the function, so it declares 1.6.
 *   1.7: bv_compute_ops.spmm_dropout_heads and its gradient (compute.h).
 *   1.8: bv_seq_ctx.row0 (seqmodel.h): a microbatch's first row in the whole batch; the
 *        core cuts batches into microbatches only for sequence models of 1.8 or later.
 *   1.9: bv_schedule_insert (schedule.h), for a resilience plugin that puts instructions
 *        inside a stage's schedule, not only at its end.
 *   1.10: bv_compute_ops.mem_alloc and mem_free (compute.h): a backend's own memory, which
 *        bv_alloc_aligned then hands out (the cuda plugin's managed memory).
 *   1.14: bv_cloud_ops.next_event and advance (cloud.h): a cloud with a simulated clock;
 *        bv_cloud_event.zone.
 *   1.15: bv_stage.sparse_input (model.h): a first stage that takes sparse features as
 *        ctx->sparse_in alone; the graph dataset's features_csr (graph.h);
 *        bv_csr_set_dense (tensor.h).
 *   1.16: bv_task_ctx.scratch and scratch_owner, bv_task_temp (model.h): a task's
 *        temporaries in buffers its caller keeps.
 *   1.17: bv_compute_ops.zero and copy_rows, bv_zero and bv_copy_rows (compute.h):
 *        zeroing and copying where the backend's memory lies.
 *   1.18: bv_compute_ops.dense_dropout_heads and its gradient (compute.h).
 *   1.19: bv_cloud_ops.kill (cloud.h): a node stopped at once (one that hangs).
 *   1.20: bv_compute_ops.adam_step_scaled (compute.h): clipping and Adam in one pass.
 *   1.21: BV_CLOUD_WITHDRAWN (cloud.h): offered capacity taken back before a launch. */
#define BV_ABI_MAJOR 1
#define BV_ABI_MINOR 21

typedef enum bv_plugin_kind {
    BV_KIND_MODEL = 1,
    BV_KIND_COMPUTE = 2,
    BV_KIND_TRANSPORT = 3,
    BV_KIND_RESILIENCE = 4,
    BV_KIND_CLOUD = 5
} bv_plugin_kind;

/* An extra function a plugin offers to Lua policies, which call it as
 * plugins.<kind>.<plugin>.<name>(...) through libffi (docs/plugins.md, "Exports").
 * signature: ["!"] return ":" arguments, e.g. "d:ii" returns a double and takes two int64.
 *   return:    v (nothing), i (int64_t), d (double), b (bool), s (const char *: a
 *              NUL-terminated string the core copies, at most BV_EXPORT_STRING_MAX bytes;
 *              NULL is nil; it must stay valid until the export returns to the core)
 *   arguments: i, d, b, s (const char *: a copy, valid only during the call); at most
 *              BV_EXPORT_MAX_ARGS
 *   "!":       effectful: the export changes training, so a policy may call it only from
 *              an event handler of a live run (not in set-up, skipped while a resumed run
 *              replays its history); effectful exports return nothing ('v').
 * Without "!" an export is pure: it only reads, and may be called at any time. An export
 * reports a failure by calling bv_export_error() before it returns (its return value is
 * then ignored): the policy gets a Lua error with that message. 'p' (pointer), listed in
 * ABI <= 1.4, is never callable from a policy, and refused in a 1.5 descriptor. The core
 * checks every signature when it loads the plugin: a malformed one fails the load. */
#define BV_EXPORT_MAX_ARGS 8
#define BV_EXPORT_STRING_MAX 4096
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
    /* The kind's ops table (bv_model_ops, bv_compute_ops, ...), never NULL. The core
     * reads it through a copy of its own size (slots the plugin predates are NULL) and
     * fills NULL optional slots with its defaults where the kind has one: resilience
     * hooks (no-ops), transport send_owned/bound_address, cloud price. Model and compute
     * slots have no generic default: a NULL optional slot there stays NULL and the
     * engine checks it (e.g. a model without edge_forward cannot have EDGE stages). */
    const void *ops;
    size_t ops_size; /* sizeof that table as compiled; lets minor versions grow */
    /* Optional (may be NULL): can this plugin run on this machine? Writes why not. */
    bool (*probe)(char *why, size_t why_len);
    const bv_export *exports; /* optional, terminated by a {NULL} entry */
    void *(*get_proc_address)(const char *name); /* optional kind-specific extras */
    /* ABI 1.4, in what was `void *reserved[4]` (so the struct keeps its size; a 1.3
     * plugin has zeros here, and the core reads these only when abi_minor >= 4). */
    /* Model plugins: the engine that drives the model, "graph" (model.h) or "sequence"
     * (seqmodel.h); required from 1.4 on. NULL for the other kinds. */
    const char *engine;
    /* sizeof(bv_option) as the plugin was compiled (BV_PLUGIN_HEADER fills it), the
     * stride of `options`; 0 means the ABI 1.3 size. */
    uint32_t option_size;
    uint32_t reserved32;
    void *reserved[2]; /* leave zero */
} bv_plugin;

#define BV_PLUGIN_HEADER(kind_, name_, version_, description_)                          \
    .magic = BV_PLUGIN_MAGIC, .abi_major = BV_ABI_MAJOR, .abi_minor = BV_ABI_MINOR,    \
    .struct_size = sizeof(bv_plugin), .kind = (kind_), .name = (name_),                \
    .version = (version_), .description = (description_),                             \
    .option_size = (uint32_t)sizeof(bv_option)

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

/* Called by an export (only from within the call, on the calling thread) to fail it with
 * a message (up to 255 bytes are kept): the policy's call raises a Lua error
 * "<script>:<line>: <kind>.<plugin>.<name>: <message>". ABI 1.5. */
void bv_export_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif
#endif
