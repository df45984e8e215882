/* The engine interface: what every way of running a model (the graph engine of Dorylus, the
 * sequence engine that trains layer by layer, and next the pipeline engine of Bamboo)
 * offers the one training loop (train.c). An engine trains in units (an epoch of the
 * graph, an optimizer step of a sequence model) and reports each unit as a record of named
 * numbers; the loop owns everything around the units: metrics.jsonl, the progress line,
 * the policy events, the resilience hooks, checkpoint offers, resume and result.json. */
#ifndef BIVOUAC_ENGINE_H
#define BIVOUAC_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/options.h"
#include "bivouac/resilience.h"
#include "config.h"
#include "policy.h"

struct bv_experiment;

/* A kind of record an engine reports: one line of metrics.jsonl each, and one policy
 * event. fields[0] is the unit index (1-based: epochs or steps done), written as an
 * integer; the last field is "seconds", the run's wall time, which the loop fills in.
 * Policies see every field but those whose name starts with "test_". */
typedef struct bv_record_kind {
    const char *event; /* policy event: "epoch_end", "step_end", "eval_end" */
    const char *const *fields;
    size_t nfields;
} bv_record_kind;

#define BV_RECORD_FIELDS 12
typedef struct bv_record {
    double v[BV_RECORD_FIELDS];
} bv_record;

/* What a run has produced so far, for the engine's result and progress functions. */
typedef struct bv_history {
    const bv_record *units; /* one per unit done, in order */
    size_t nunits;
    const bv_record *evals; /* periodic evaluations (engines with an eval record) */
    size_t nevals;
    const bv_record *final_eval; /* the evaluation after the last unit, or NULL */
    double train_seconds;        /* time spent in units (evaluations excluded) */
    double wall_seconds;         /* resumes included */
    double session_seconds;      /* since this process started the run */
    int64_t session_units;       /* units this process trained */
    const char *stop_reason;
} bv_history;

/* One field of result.json, between the loop's "seed" and its "wall_seconds". */
enum {
    BV_RESULT_MEAN = 1u << 0,    /* --repeat: the summary has the mean over seeds */
    BV_RESULT_HEADLINE = 1u << 1 /* --repeat: also <name>_std; the summary line shows it */
};
typedef struct bv_result_field {
    const char *name;
    bool integer; /* written as an integer in a single run's result */
    unsigned flags;
    double value;
} bv_result_field;

#define BV_RESULT_FIELDS 32
typedef struct bv_run_result {
    bv_result_field fields[BV_RESULT_FIELDS];
    size_t nfields;
    int64_t units; /* units done; 0: the run produced nothing to report */
    double wall_seconds;
    uint32_t params_crc32c; /* CRC-32C chain over the final weights: equal runs, equal crc */
    bool failed;            /* stopped by a policy error with on_error: stop */
    char stop_reason[320];
    double load_seconds;   /* reading the experiment and its data, before training */
    double peak_rss_mb;    /* the most memory the process had held when the run ended */
    double cost_usd;       /* what the run cost (ledger.h), earlier sessions included */
    char cost_json[2048];  /* ', "cost_breakdown": {...}, "cost_prices": "..."' */
    char summary[512]; /* "test accuracy 0.8050 (best val ...), 200 epochs in 0.92 s; ..." */
    char brief[256];   /* one seed of --repeat: "test accuracy 0.8050 (...) after 200 epochs" */
} bv_run_result;

/* Appends a field (ignored past BV_RESULT_FIELDS, which no engine reaches). */
void bv_result_add(bv_run_result *r, const char *name, double value, bool integer,
                   unsigned flags);
/* The field flagged BV_RESULT_HEADLINE, or NULL. */
const bv_result_field *bv_result_headline(const bv_run_result *r);

typedef struct bv_engine bv_engine; /* one run's engine, defined by each engine */

/* What an engine is created with for one run (one seed). */
typedef struct bv_engine_run {
    const char *out_dir;
    uint64_t seed;
    const char *run_dir; /* holds the run's experiment.yaml (role processes load it) */
    /* The engine lost a node of the run (a process ended): the loop hands the event to
     * every resilience strategy's peer_failed hook (resilience.h) before the engine's
     * step fails. May be NULL. */
    void (*peer_failed)(void *loop, const bv_peer_event *peer);
    /* A pipeline stage's schedule, before the stages start: every resilience strategy's
     * schedule hook may add instructions to it (Bamboo's redundant computation). May be
     * NULL. */
    bv_status (*schedule)(void *loop, bv_schedule *s, bv_error *err);
    /* A reconfiguration event (`preempted`, `joined`, `degraded`: docs/redundancy.md) with
     * its figures: the run's policy picks one of choices (NULL-terminated; the first is
     * the default, taken without a handler), into decision; the loop logs it and writes
     * it to metrics.jsonl (an event raised `often`, at every step, only where the decision
     * is not the default). An error: the policy failed with on_error: stop. May be NULL
     * (the engine takes the first choice). */
    bv_status (*reconfigure)(void *loop, const char *event, const bv_metric *m, size_t n,
                             const char *const *choices, bool often, char *decision,
                             size_t len, bv_error *err);
    void *loop;
} bv_engine_run;

typedef struct bv_engine_ops {
    const char *name; /* what a model plugin's descriptor names: "graph", "sequence" */
    const char *unit; /* "epoch", "step" */
    const char *train_units_option; /* the train option that counts them: "epochs" */
    const bv_option *dataset_schema;
    const bv_option *train_schema;
    const bv_record_kind *unit_record;
    const bv_record_kind *eval_record; /* NULL: no periodic evaluation */

    /* Checks of the experiment after its dataset and train sections were validated (data
     * exists, the model's options fit it, the compute plugin has the kernels needed);
     * every problem goes to diag at its position. Sets x->dataset_label. dataset is the
     * YAML section or NULL; dataset_valid: it passed its schema; clean: nothing in the
     * experiment was found wrong so far. */
    void (*check)(struct bv_experiment *x, const bv_node *dataset, bool dataset_valid,
                  bool clean, bv_diag *diag);
    /* Optional: the model's own checks of its options, run last, once everything else is
     * valid. BV_ERR_INVALID if it added diagnostics. */
    bv_status (*check_model)(const struct bv_experiment *x, bv_diag *diag);

    /* The experiment's data, loaded once and shared by every seed of --repeat. */
    bv_status (*load_data)(const struct bv_experiment *x, void **data, bv_error *err);
    void (*free_data)(void *data);

    /* Builds the model, the compute backend and the engine's roles for one run. */
    bv_status (*create)(const struct bv_experiment *x, void *data, const bv_engine_run *run,
                        bv_engine **out, bv_error *err);
    void (*destroy)(bv_engine *e); /* joins every thread the engine started */
    bv_status (*init)(bv_engine *e, bv_error *err); /* fresh weights and optimizer state */
    /* Optional: the run's node processes ended and started again, initialised afresh
     * (the loop then sets the state of the last checkpoint): a restart in the process
     * after a loss nothing covers, or where the policy chose `restart`. An error (and
     * nothing torn down) where the engine restarts no more. NULL: the run ends instead. */
    bv_status (*restart)(bv_engine *e, bv_error *err);

    /* The learning rate of unit (0-based) when no policy has set one: the schedule. */
    double (*lr)(const bv_engine *e, int64_t unit);
    /* Trains unit (0-based) with lr; fills the unit record but its "seconds". */
    bv_status (*train)(bv_engine *e, int64_t unit, double lr, bv_record *rec, bv_error *err);
    /* Engines with an eval record: after `done` units, is an evaluation due? */
    bool (*eval_due)(const bv_engine *e, int64_t done);
    /* The evaluation after `done` units (final: the larger end-of-run estimate). */
    bv_status (*evaluate)(bv_engine *e, int64_t done, bool final, bv_record *rec,
                          bv_error *err);

    /* The engine's part of the training state (weights, optimizer, what it needs to
     * resume bit for bit), and back. The loop adds its own "run/..." blobs. */
    /* A policy set knob `knob` of resilience strategy `plugin` (the loop's instance took
     * it): the engine passes it to instances of its own (the graph server's task gate).
     * May be NULL: the engine has none. */
    bv_status (*set_knob)(bv_engine *e, const char *plugin, const char *knob, double value,
                          bv_error *err);
    bv_status (*get_state)(bv_engine *e, bv_state *s, bv_error *err);
    bv_status (*set_state)(bv_engine *e, const bv_state *s, bv_error *err);
    uint32_t (*params_crc32c)(bv_engine *e);

    /* result.json's fields of this engine and the summary lines, from the history. */
    void (*result)(bv_engine *e, const bv_history *h, bv_run_result *res);
    /* The engine's part of the progress line ("loss 0.1234  val 0.812"). */
    void (*progress)(const bv_engine *e, const bv_history *h, char *buf, size_t len);
} bv_engine_ops;

extern const bv_engine_ops bv_graph_engine_ops;    /* engine/graph */
extern const bv_engine_ops bv_sequence_engine_ops; /* engine/seq */

/* The engine of that name, or NULL; and the names of all, for messages. */
const bv_engine_ops *bv_engine_find(const char *name);
const char *bv_engine_names(void); /* "graph, sequence" */

/* The directory of the experiment file (for resilience plugins' relative paths). */
void bv_experiment_dir(const struct bv_experiment *x, char *buf, size_t len);

#endif
