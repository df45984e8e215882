/* Price tables and the run's cost ledger (ledger.h, docs/cost.md). */
#include "ledger.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "json_out.h"
#include "prices_builtin.h"

#define LEDGER_MAX 512 /* instances a run charges: the coordinator and its nodes */

const bv_instance_price *bv_prices_find(const bv_price_table *t, const char *instance)
{
    for (int i = 0; i < t->ninstances; i++)
        if (strcmp(t->instances[i].name, instance) == 0)
            return &t->instances[i];
    return NULL;
}

/* A non-negative number, or -1 with err set naming where (`at`: where a missing one
 * belongs). */
static double price_value(const bv_node *n, const bv_pos *at, const char *what,
                          bv_error *err)
{
    char *end = NULL;
    double v = n && n->kind == BV_NODE_SCALAR ? strtod(n->scalar, &end) : -1;
    if (!n || n->kind != BV_NODE_SCALAR || end == n->scalar || *end || !(v >= 0) ||
        !isfinite(v)) {
        const bv_pos *p = n ? &n->pos : at;
        bv_error_set(err, BV_ERR_INVALID, "%s:%d:%d: %s must be a price in USD (a number >= 0)",
                     p->file, p->line, p->col, what);
        return -1;
    }
    return v;
}

static bv_status parse_table(const bv_node *root, bv_price_table *t, bv_error *err)
{
    const bv_node *name = bv_node_get(root, "name");
    const bv_node *date = bv_node_get(root, "date");
    const bv_node *inst = bv_node_get(root, "instances");
    if (!name || name->kind != BV_NODE_SCALAR || !inst || inst->kind != BV_NODE_MAP)
        return bv_error_set(err, BV_ERR_INVALID, "%s: a price table needs 'name' and a "
                            "mapping 'instances' (as configs/prices/ has them)", root->pos.file);
    snprintf(t->name, sizeof t->name, "%s", name->scalar);
    snprintf(t->date, sizeof t->date, "%s", date && date->kind == BV_NODE_SCALAR
                                                ? date->scalar : "");
    for (size_t i = 0; i < inst->count; i++) {
        if (t->ninstances == BV_PRICES_MAX_INSTANCES)
            return bv_error_set(err, BV_ERR_INVALID, "%s: more than %d instance types",
                                root->pos.file, BV_PRICES_MAX_INSTANCES);
        bv_instance_price *p = &t->instances[t->ninstances++];
        snprintf(p->name, sizeof p->name, "%s", inst->keys[i]);
        char what[96];
        snprintf(what, sizeof what, "%s's on_demand", inst->keys[i]);
        const bv_node *entry = inst->items[i];
        p->on_demand = price_value(bv_node_get(entry, "on_demand"), &entry->pos, what, err);
        if (p->on_demand < 0)
            return err->status;
        const bv_node *spot = bv_node_get(entry, "spot");
        snprintf(what, sizeof what, "%s's spot", inst->keys[i]);
        if (spot && (p->spot = price_value(spot, &entry->pos, what, err)) < 0)
            return err->status;
    }
    const bv_node *fn = bv_node_get(root, "lambda");
    if (!fn)
        return BV_OK;
    static const char *const keys[] = {"per_million_requests", "per_gb_second", "billing_ms",
                                       "memory_mb"};
    double v[4];
    for (int k = 0; k < 4; k++) {
        char what[64];
        snprintf(what, sizeof what, "lambda's %s", keys[k]);
        if ((v[k] = price_value(bv_node_get(fn, keys[k]), &fn->pos, what, err)) < 0)
            return err->status;
    }
    t->has_lambda = true;
    t->lambda_per_request = v[0] / 1e6;
    t->lambda_per_gb_second = v[1];
    t->lambda_billing_ms = v[2];
    t->lambda_memory_mb = v[3];
    return BV_OK;
}

bv_status bv_prices_load(const char *which, const char *base_dir, bv_price_table *t,
                         bv_error *err)
{
    memset(t, 0, sizeof *t);
    bv_diag diag = {0};
    bv_node *root = NULL;
    const char *text = bv_prices_builtin(which);
    bv_status st;
    if (text) {
        char file[96];
        snprintf(file, sizeof file, "configs/prices/%s.yaml", which);
        st = bv_config_load_builtin(text, file, &root, &diag);
    } else {
        char path[4096];
        if (which[0] == '/' || !base_dir)
            snprintf(path, sizeof path, "%s", which);
        else
            snprintf(path, sizeof path, "%s/%s", base_dir, which);
        st = bv_config_load_file(path, &root, &diag);
    }
    if (st != BV_OK) {
        char msg[512] = "cannot read the prices";
        if (diag.count)
            bv_diag_format(&diag, 0, msg, sizeof msg);
        bv_error_set(err, st, "%s", msg);
        bv_diag_free(&diag);
        return st;
    }
    bv_diag_free(&diag);
    st = parse_table(root, t, err);
    bv_node_free(root);
    return st;
}

/* ---- the ledger ---- */

/* What a type of instance (at one pricing) has cost in the charges that ended: a charge
 * that ends folds into its kind, so the ledger holds only the charges still running,
 * however many nodes a long run loses. Kinds keep the order of their first charge. */
typedef struct kind {
    char type[48];
    bool spot;
    double rate;   /* USD per second */
    int count;     /* ended charges */
    double seconds, usd;
} kind;

typedef struct charge {
    int handle;
    int kind;
    int64_t node; /* -1: the run's own process */
    double start, end; /* monotonic seconds; end < 0: still running */
} charge;

struct bv_ledger {
    pthread_mutex_t lock;
    bv_price_table prices;
    char instance[48]; /* the type of a charge that names none */
    bool spot;
    double before; /* USD of the earlier sessions of a resumed run */
    charge items[LEDGER_MAX]; /* the charges running (and the run's own, ended or not) */
    int n, next_handle, nodes_ever;
    kind kinds[2 * BV_PRICES_MAX_INSTANCES];
    int nkinds;
    int unpriced; /* instances not charged: a type the table lacks, or a full ledger */
    double fn_invocations, fn_gb_seconds; /* serverless functions */
};

static bv_ledger *current;

bv_ledger *bv_ledger_new(const bv_price_table *prices, const char *instance, bool spot)
{
    bv_ledger *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    pthread_mutex_init(&l->lock, NULL);
    l->prices = *prices;
    snprintf(l->instance, sizeof l->instance, "%s", instance);
    l->spot = spot;
    return l;
}

void bv_ledger_add_before(bv_ledger *l, double usd)
{
    pthread_mutex_lock(&l->lock);
    l->before += usd;
    pthread_mutex_unlock(&l->lock);
}

void bv_ledger_free(bv_ledger *l)
{
    if (!l)
        return;
    if (current == l)
        current = NULL;
    pthread_mutex_destroy(&l->lock);
    free(l);
}

/* The kind of `type` at the ledger's pricing (a spot instance where the table has no spot
 * price is billed on demand); -1 when it is not priced. */
static int kind_of(bv_ledger *l, const char *type)
{
    const bv_instance_price *p = bv_prices_find(&l->prices, type);
    if (!p)
        return -1;
    bool spot = l->spot && p->spot > 0;
    for (int k = 0; k < l->nkinds; k++)
        if (l->kinds[k].spot == spot && strcmp(l->kinds[k].type, type) == 0)
            return k;
    if (l->nkinds == (int)(sizeof l->kinds / sizeof l->kinds[0]))
        return -1;
    kind *k = &l->kinds[l->nkinds];
    *k = (kind){.spot = spot, .rate = (spot ? p->spot : p->on_demand) / 3600.0};
    snprintf(k->type, sizeof k->type, "%s", type);
    return l->nkinds++;
}

int bv_ledger_start(bv_ledger *l, const char *type, int64_t node, double now)
{
    if (!type)
        type = l->instance;
    pthread_mutex_lock(&l->lock);
    int h = -1, k = kind_of(l, type);
    if (k < 0 || l->n == LEDGER_MAX) {
        l->unpriced++;
    } else {
        h = l->next_handle++;
        l->items[l->n++] = (charge){.handle = h, .kind = k, .node = node, .start = now,
                                    .end = -1};
        l->nodes_ever += node >= 0;
    }
    pthread_mutex_unlock(&l->lock);
    return h;
}

static double seconds_of(const charge *c, double now)
{
    double end = c->end >= 0 ? c->end : now;
    return end > c->start ? end - c->start : 0;
}

void bv_ledger_stop_node(bv_ledger *l, int64_t node, double now)
{
    pthread_mutex_lock(&l->lock);
    for (int i = 0; node >= 0 && i < l->n; i++)
        if (l->items[i].node == node && l->items[i].end < 0) {
            charge *c = &l->items[i];
            kind *k = &l->kinds[c->kind];
            c->end = now;
            k->count++;
            k->seconds += seconds_of(c, now);
            k->usd += seconds_of(c, now) * k->rate;
            memmove(c, c + 1, (size_t)(l->n - i - 1) * sizeof *c); /* keeps their order */
            l->n--;
            i--;
        }
    pthread_mutex_unlock(&l->lock);
}

void bv_ledger_stop_after(bv_ledger *l, int handle, double seconds)
{
    pthread_mutex_lock(&l->lock);
    for (int i = 0; handle >= 0 && i < l->n; i++)
        if (l->items[i].handle == handle)
            l->items[i].end = l->items[i].start + seconds;
    pthread_mutex_unlock(&l->lock);
}

int bv_ledger_running(bv_ledger *l, double now, int *nodes_ever)
{
    pthread_mutex_lock(&l->lock);
    int running = 0;
    for (int i = 0; i < l->n; i++)
        running += l->items[i].end < 0 || l->items[i].end > now;
    *nodes_ever = l->nodes_ever;
    pthread_mutex_unlock(&l->lock);
    return running;
}

void bv_ledger_charge_functions(bv_ledger *l, double invocations, double gb_seconds)
{
    pthread_mutex_lock(&l->lock);
    l->fn_invocations += invocations;
    l->fn_gb_seconds += gb_seconds;
    pthread_mutex_unlock(&l->lock);
}

static double functions_usd(const bv_ledger *l)
{
    return l->fn_invocations * l->prices.lambda_per_request +
           l->fn_gb_seconds * l->prices.lambda_per_gb_second;
}

double bv_ledger_usd(bv_ledger *l, double now)
{
    pthread_mutex_lock(&l->lock);
    double usd = l->before + functions_usd(l);
    for (int k = 0; k < l->nkinds; k++)
        usd += l->kinds[k].usd;
    for (int i = 0; i < l->n; i++)
        usd += seconds_of(&l->items[i], now) * l->kinds[l->items[i].kind].rate;
    pthread_mutex_unlock(&l->lock);
    return usd;
}

void bv_ledger_write_breakdown(FILE *f, bv_ledger *l, double now)
{
    pthread_mutex_lock(&l->lock);
    fputs(", \"cost_breakdown\": {", f);
    bool first = true;
    for (int k = 0; k < l->nkinds; k++) { /* one member per type and pricing */
        const kind *t = &l->kinds[k];
        int count = t->count;
        double secs = t->seconds, usd = t->usd;
        for (int i = 0; i < l->n; i++)
            if (l->items[i].kind == k) {
                count++;
                secs += seconds_of(&l->items[i], now);
                usd += seconds_of(&l->items[i], now) * t->rate;
            }
        char key[64];
        snprintf(key, sizeof key, "%s%s", t->type, t->spot ? " spot" : "");
        fputs(first ? "" : ", ", f);
        first = false;
        bv_json_string(f, key);
        fprintf(f, ": {\"instances\": %d", count);
        bv_json_field(f, "seconds", secs);
        bv_json_field(f, "usd", usd);
        fputc('}', f);
    }
    if (l->fn_invocations > 0) {
        fputs(first ? "" : ", ", f);
        first = false;
        fputs("\"lambda\": {", f);
        fprintf(f, "\"invocations\": %.0f", l->fn_invocations);
        bv_json_field(f, "gb_seconds", l->fn_gb_seconds);
        bv_json_field(f, "usd", functions_usd(l));
        fputc('}', f);
    }
    if (l->before > 0) {
        fputs(first ? "" : ", ", f);
        first = false;
        fputs("\"earlier sessions\": {", f);
        fputs("\"usd\": ", f);
        fprintf(f, "%.17g}", l->before);
    }
    fputc('}', f);
    fputs(", \"cost_prices\": ", f);
    bv_json_string(f, l->prices.name);
    if (l->unpriced)
        fprintf(f, ", \"cost_unpriced_instances\": %d", l->unpriced);
    pthread_mutex_unlock(&l->lock);
}

void bv_ledger_set_current(bv_ledger *l)
{
    current = l;
}

bv_ledger *bv_ledger_current(void)
{
    return current;
}
