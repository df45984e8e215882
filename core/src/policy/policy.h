/* Lua training policies: a sandboxed Lua 5.4 state per script that reacts to training
 * events (on_epoch_end, ...) by returning actions (stop, change the learning rate, set
 * a knob). See docs/policies.md for the protocol and the sandbox. */
#ifndef BIVOUAC_POLICY_H
#define BIVOUAC_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bv_policy bv_policy;

/* Limits for one run of Lua code: set-up, then each bv_policy_call on its own.
 * instructions: Lua VM instructions (0 means 10,000,000).
 * memory_bytes: cap on the whole Lua heap of the policy, libraries included
 *               (0 means 64 MiB). */
typedef struct bv_policy_limits {
    int64_t instructions;
    size_t memory_bytes;
} bv_policy_limits;

#define BV_POLICY_DEFAULT_INSTRUCTIONS 10000000
#define BV_POLICY_DEFAULT_MEMORY ((size_t)64 << 20)

/* One entry of the YAML `policy.params` map. The value is converted: a Lua numeral
 * ("10", "0.5", "1e-3") becomes a number, "true"/"false" a boolean, anything else a
 * string. A NULL value leaves the parameter out. */
typedef struct bv_policy_param {
    const char *name;
    const char *value;
} bv_policy_param;

typedef struct bv_metric {
    const char *name;
    double value;
} bv_metric;

#define BV_POLICY_MAX_SETS 16

/* What a handler asked for. Zeroed by every bv_policy_call; on error it stays zeroed. */
typedef struct bv_policy_actions {
    bool stop;
    char reason[256];
    bool set_lr;
    double lr;
    char reconfigure[32]; /* a reconfiguration event's decision ("": none) */
    size_t nsets; /* sorted by name, so the order does not depend on Lua's hashing */
    struct {
        char name[64];
        double value;
    } sets[BV_POLICY_MAX_SETS]; /* generic knobs: {set = {workers = 8}} */
    size_t nreports; /* sorted by name too */
    struct {
        char name[48]; /* BV_SERIES_NAME_MAX */
        char unit[24]; /* BV_SERIES_UNIT_MAX */
        double value;
    } reports[BV_POLICY_MAX_SETS]; /* series: {report = {patience_left = {4, "epochs"}}} */
} bv_policy_actions;

/* A plugin export as the engine hands it to a policy: policy/ sits below plugin/ in the
 * source tree, so it gets plain data (the strings and function of a bv_export, which the
 * registry has checked at load) and never a descriptor. The script calls it as
 * plugins.<kind>.<plugin>.<name>(...) (docs/policies.md, "Calling plugins"). */
typedef struct bv_policy_export {
    const char *kind;      /* "compute" */
    const char *plugin;    /* "cpu" */
    const char *name;      /* "threads" */
    const char *signature; /* plugin.h's grammar, e.g. "!v:i" */
    void (*fn)(void);
    unsigned abi_minor;    /* of the plugin: how to read the signature */
} bv_policy_export;

/* Reads the script at path, runs its top level once (set-up) under lim (NULL: defaults)
 * and returns the policy in *out. Errors: BV_ERR_IO (unreadable file), BV_ERR_INVALID
 * (syntax, run-time, budget or memory error in set-up; the message starts with path),
 * BV_ERR_NOMEM. */
bv_status bv_policy_load(const char *path, const bv_policy_param *params, size_t nparams,
                         const bv_policy_limits *lim, bv_policy **out, bv_error *err);

/* bv_policy_load with the plugin exports the script may call (copied: exports need not
 * outlive the call, their functions must outlive the policy). An export whose signature
 * has a pointer ('p') is left out. ffi_prep_cif runs once per export here. */
bv_status bv_policy_load_with(const char *path, const bv_policy_param *params, size_t nparams,
                              const bv_policy_export *exports, size_t nexports,
                              const bv_policy_limits *lim, bv_policy **out, bv_error *err);

/* While replay is on, a handler's calls to effectful exports do nothing and return
 * nothing: the loop replays the recorded events on resume to rebuild the policy's state,
 * and their effects already happened in the run that recorded them. */
void bv_policy_set_replay(bv_policy *p, bool replay);

/* Runs the handler on_<event>(m), m being a fresh table of the metrics, and fills *out
 * with the actions it returned. A missing handler is BV_OK with no actions. Any error
 * (run-time, instruction budget, memory cap, malformed actions) is BV_ERR_INVALID with
 * a message starting with the script's path; the policy stays usable afterwards. */
bv_status bv_policy_call(bv_policy *p, const char *event, const bv_metric *metrics, size_t n,
                         bv_policy_actions *out, bv_error *err);

/* A reconfiguration event (docs/redundancy.md, docs/simulation.md): runs on_<event>(m)
 * and sets *pick to the choice it made among `choices` (NULL-terminated; choices[0] when
 * it chose none, or has no handler), *out to its actions (reason, reports). A choice not
 * among them, or actions other than reconfigure, reason and report, are BV_ERR_INVALID
 * with a message that says so; *pick is then choices[0]. */
bv_status bv_policy_decide(bv_policy *p, const char *event, const bv_metric *metrics, size_t n,
                           const char *const *choices, bv_policy_actions *out,
                           const char **pick, bv_error *err);

/* Whether the script defines on_<event> as a function (fixed after set-up). */
bool bv_policy_has_handler(const bv_policy *p, const char *event);

/* The path the policy was loaded from, as given to bv_policy_load. */
const char *bv_policy_path(const bv_policy *p);

void bv_policy_free(bv_policy *p);

#ifdef __cplusplus
}
#endif
#endif
