/* `bivouac simulate`: pipeline training on a cloud with a simulated clock (the `sim`
 * cloud plugin), at scales one machine cannot run (issue 16; docs/simulation.md). The
 * training is not run: its steps take the time a workload model says, from a profile of a
 * real run or the experiment's `simulate:` section; the cloud's preemptions and grants
 * drive the same resilience semantics as real runs (a failover where a shadow covers the
 * loss, a restart from the last checkpoint where none does) and the same Lua policy
 * decides the reconfigurations. Each run is priced by the experiment's cost ledger. */
#ifndef BIVOUAC_SIM_H
#define BIVOUAC_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bivouac/error.h"
#include "experiment.h"

/* An instance type a run may use (`cost.instance`, and those of `simulate.instances`). */
#define BV_SIM_MAX_TYPES 8
typedef struct bv_sim_type {
    char name[48];
    double step;         /* one pipeline's step at profile_stages on it, no preemption */
    double usd_per_hour; /* a node's price: spot where cost.spot and the table has one */
    char step_key[64], usd_key[64]; /* its figures' names in a policy's events:
                                       instance_K_step, instance_K_usd_per_hour (K from 1) */
} bv_sim_type;

/* The workload model of one experiment (docs/simulation.md, "The workload model"). */
typedef struct bv_sim_model {
    int stages, pipelines;       /* the layout asked for: P, D (D x P nodes requested) */
    double samples;              /* a run ends once it has trained on this many */
    double hours;                /* or when this much simulated time has passed */
    double samples_per_step;     /* one pipeline's, per step */
    double profile_step;         /* one pipeline's step at profile_stages, no preemption,
                                    on cost.instance (types[0].step) */
    int profile_stages;
    double microbatches;         /* M, of every layout */
    int layers;                  /* L, the model's (`model.layers`; 0: unknown, the work
                                    divides evenly among any number of stages) */
    double rc_factor;            /* 1 + what redundant computation adds (1 without it) */
    double lflb_rc_factor;       /* the same under lazy FRC, which a policy may switch to;
                                    0: it may not */
    double lflb_failover_seconds;
    double allreduce_mb, bandwidth_gbps;
    double failover_seconds;     /* the pause of a failover */
    double degraded_slowdown;    /* a step with a stage on its shadow, over a normal one */
    double reconfigure_seconds;  /* a reconfiguration at a step boundary */
    double restart_seconds;      /* a restart from the last checkpoint */
    int64_t checkpoint_steps;    /* steps between checkpoints */
    bool redundancy;             /* stages keep replicas: a covered loss fails over */
    int zones;                   /* the cloud's, for placing consecutive stages apart */
    int ntypes;                  /* instance types a policy may choose among: [0] the
                                    experiment's cost.instance, then simulate.instances' */
    bv_sim_type types[BV_SIM_MAX_TYPES];
    /* graph runs (Dorylus; bv_sim_run's graph part): G graph servers, P parameter servers and the
     * coordinator, an epoch of graph work and tensor tasks on L functions per server */
    bool graph;
    int graph_servers, param_servers, intervals, lambdas, epochs;
    double graph_seconds, task_seconds, lambda_capacity;
    bool task_exponential; /* billed task times spread exponentially about their mean */
    int tensor_stages;
    char profile[4096];          /* the run directory the figures came from ("": none) */
} bv_sim_model;

/* What a run directory says about the workload (`simulate.profile`, `bivouac profile`):
 * its step without a stage on a shadow (the median of the steps' durations in
 * metrics.jsonl; an evaluation's step is left out by the median), the same with one
 * (nan: none), the pause of its failovers (result.json's failover_seconds over failovers;
 * nan: none), its layout and one pipeline's samples per step. */
typedef struct bv_sim_profile {
    double step, degraded, failover, samples_per_step;
    double restart; /* a restart's pause (result.json's restart_seconds / restarts); NaN */
    double reconfigure; /* a reconfiguration's (reconfigure_seconds / reconfigurations); NaN */
    int stages, pipelines;
} bv_sim_profile;
bv_status bv_sim_profile_read(const char *dir, bv_sim_profile *out, bv_error *err);

/* The model of x: its `simulate:` section over the profile it names (the section's own
 * values win), pipeline.stages and .pipelines, train.batch and .steps, the resilience
 * strategies. Problems go to diag with the YAML's positions; BV_ERR_INVALID then. */
bv_status bv_sim_model_load(const bv_experiment *x, bv_sim_model *m, bv_diag *diag);

/* A graph run's epoch with L functions per graph server, and a task's mean time. */
double bv_sim_epoch_seconds(const bv_sim_model *m, int lambdas, double *task_seconds);

/* The mean time a task of mean time `task` is billed for, rounded up to `unit` seconds
 * (0: not rounded): ceil(task / unit) units, or, where task times spread exponentially,
 * unit / (1 - exp(-unit / task)), the mean of the rounded-up draws. */
double bv_sim_billed_seconds(const bv_sim_model *m, double task, double unit);

/* The time of one step of d pipelines of p stages on instance type `type` (an index of
 * m->types), `degraded` when a stage runs on its shadow, `lazy` under lazy FRC (the lflb
 * figures). */
double bv_sim_step_seconds(const bv_sim_model *m, int type, int p, int d, bool degraded,
                           bool lazy);

/* What one simulated run came to (the columns of Bamboo's Table 3). */
typedef struct bv_sim_result {
    bool finished;            /* trained on every sample before `hours` */
    double hours;             /* simulated time to the end */
    double steps, samples;
    double preemptions;       /* nodes taken away, in any state */
    double interval_hours;    /* mean time between two preemptions (0: fewer than two) */
    double lifetime_hours;    /* mean life of the nodes that joined (to the end, if alive) */
    double fatal;             /* restarts from the last checkpoint */
    double failovers, reconfigurations;
    double instance_switches; /* moves to another instance type (a policy's on_layout) */
    double nodes;             /* nodes paid for, averaged over time */
    double throughput;        /* samples per second, over the whole run */
    double usd, cost_per_hour;
    double value;             /* throughput / cost_per_hour (Bamboo's value) */
    double useful_fraction;   /* time in steps whose work was kept, over the run's time */
} bv_sim_result;

/* Simulates one run of x with model m (a pipeline run, or a graph run where m->graph) on a fresh cloud of x's `cloud:` seeded by seed,
 * with policy (NULL: the default decisions). metrics (NULL: none) receives a line per
 * step and one per policy decision, in metrics.jsonl's format. */
bv_status bv_sim_run(const bv_experiment *x, const bv_sim_model *m, uint64_t seed,
                     bv_policy *policy, FILE *metrics, bv_sim_result *out, bv_error *err);

#endif
