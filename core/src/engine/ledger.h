/* What a run costs (docs/cost.md): a price table (configs/prices/<name>.yaml, shipped in the
 * library, or a file of the user's), and the run's ledger of paid resources, priced by it.
 * The training loop opens a ledger per run and charges its own process as one instance of
 * `cost.instance`; the processes a run starts on a cloud (node_group.c) are charged from
 * their launch to their end, each as an instance of its node type. result.json reports the
 * total, the breakdown by resource and the value 1/(T C) (Dorylus section 7). */
#ifndef BIVOUAC_LEDGER_H
#define BIVOUAC_LEDGER_H

#include <stdbool.h>
#include <stdio.h>

#include "bivouac/error.h"
#include "config.h"

#define BV_PRICES_MAX_INSTANCES 64

typedef struct bv_instance_price {
    char name[48];
    double on_demand; /* USD per hour */
    double spot;      /* USD per hour; 0: the table has no spot price */
} bv_instance_price;

typedef struct bv_price_table {
    char name[64];
    char date[32];
    bv_instance_price instances[BV_PRICES_MAX_INSTANCES];
    int ninstances;
    /* serverless functions (`lambda:`); has_lambda false: the table prices none */
    bool has_lambda;
    double lambda_per_request;   /* USD (per_million_requests / 1e6) */
    double lambda_per_gb_second; /* USD */
    double lambda_billing_ms;    /* an invocation's time is rounded up to this */
    double lambda_memory_mb;     /* the memory billed when a worker has no cap */
} bv_price_table;

/* The names of the tables shipped in the library, NULL-terminated. */
extern const char *const bv_builtin_price_tables[];

/* Loads a table: `which` names a shipped one, or is a file's path (relative paths from
 * base_dir). Errors say which file and where. */
bv_status bv_prices_load(const char *which, const char *base_dir, bv_price_table *t,
                         bv_error *err);
/* The table's entry for an instance type, or NULL. */
const bv_instance_price *bv_prices_find(const bv_price_table *t, const char *instance);

typedef struct bv_ledger bv_ledger;

/* A ledger pricing instances with `prices`, `instance` (spot or on demand) where a charge
 * names no type of its own. */
bv_ledger *bv_ledger_new(const bv_price_table *prices, const char *instance, bool spot);
void bv_ledger_free(bv_ledger *l);
/* What the earlier sessions of a resumed run cost (from its checkpoint). */
void bv_ledger_add_before(bv_ledger *l, double usd);
/* An instance of `type` (NULL: the ledger's) starts being paid for at `now` (monotonic
 * seconds), standing for cloud node `node` (-1: the run's own process); returns its
 * handle, or -1 when it is not charged (a type the table lacks, or a full ledger: the
 * breakdown counts them). */
int bv_ledger_start(bv_ledger *l, const char *type, int64_t node, double now);
/* Cloud node `node` ended at `now`: its charge stops (unknown or stopped: nothing). */
void bv_ledger_stop_node(bv_ledger *l, int64_t node, double now);
/* Ends charge `handle` at `seconds` after its start exactly (the run's own process: its
 * wall time as result.json reports it). */
void bv_ledger_stop_after(bv_ledger *l, int handle, double seconds);
/* Serverless invocations: `invocations` more requests and `gb_seconds` more billed
 * GB-seconds, priced by the table's `lambda:` (none: not charged, and counted unpriced). */
void bv_ledger_charge_functions(bv_ledger *l, double invocations, double gb_seconds);
/* Instances being paid for at `now`, and how many were ever charged for cloud nodes. */
int bv_ledger_running(bv_ledger *l, double now, int *nodes_ever);
/* USD so far (running instances up to `now`; earlier sessions of a resumed run included). */
double bv_ledger_usd(bv_ledger *l, double now);
/* "cost_breakdown": {"c5n.2xlarge": {"instances": 1, "seconds": 1.2, "usd": 0.00014}, ...}
 * as one JSON member (with its leading ", "). */
void bv_ledger_write_breakdown(FILE *f, bv_ledger *l, double now);

/* The ledger of the run in progress in this process, for the code that starts nodes
 * (node_group.c); NULL outside a run. */
void bv_ledger_set_current(bv_ledger *l);
bv_ledger *bv_ledger_current(void);

#endif
