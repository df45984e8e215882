/* The `sim` cloud: a discrete-event market of spot and on-demand instances on a simulated
 * clock (issue 16; docs/simulation.md). Nothing runs: a launched node is a request the
 * market grants some time later, and a granted spot node is taken away some time after.
 * The caller (`bivouac simulate`) moves the clock from event to event (ABI 1.14
 * next_event and advance), so a day of a 64-node cluster passes in milliseconds.
 *
 * Two ways the market decides:
 *   - drawn (no `trace`): Bamboo's simulator's inputs (NSDI '23, section 6.2). A spot node
 *     is preempted at a constant rate: `preemption` is the probability that it is gone
 *     within an hour (`preemption_by_type`: another for the nodes of an instance type,
 *     the type a request names). A request is granted at the rate of the hour of the day it waits in:
 *     `creation` is the probability that it is granted within that hour, one for every
 *     hour, 24 of them, or `random` (each hour's drawn from the seed, as the paper did).
 *     A preemption takes up to `bulk` nodes of one zone at once (the size uniform in
 *     [1, bulk]; the rate of each node stays `preemption`). With `draws: hourly` the
 *     same probabilities are drawn as Bamboo's published simulator draws them, once an
 *     hour (project_pactum/simulation/simulator.py, generate_spot_instance_events): at
 *     each hour's start every live spot node is preempted with its probability at a
 *     uniform second of the hour; as many grant draws as requests waiting and nodes
 *     preempted are made, each with the hour's `creation` probability at a uniform second,
 *     and each grants the oldest request waiting then (none: nothing); a node granted
 *     within the hour draws its preemption for the rest of it; at the start each request
 *     is granted at once with the first hour's probability.
 *   - replayed (`trace`, the files of ../shared/traces/: `ms,add|remove,nodeN`, or a
 *     zone's live instances over time, `seconds,count`), as the `local` cloud replays
 *     one: the trace's nodes there at `trace_start` and the ones it adds are capacity,
 *     which the next request takes (or the first request waiting, when it comes); a node
 *     the trace removes is preempted when a launched node stands for it.
 * Either way a granted node joins `boot_seconds` later (Bamboo's simulator: 45 s), and an
 * on-demand request is granted at once and never preempted.
 *
 * Single-threaded: the ops are called from the simulation's thread only. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/cloud.h"
#include "bivouac/plugin.h"

#define NAME_MAX_LEN 32
#define MAX_TYPE_RATES 16
#define HOUR 3600.0
#define NEVER_AFTER (7 * 24 * HOUR) /* a request the market has not granted in a week */

typedef enum node_state { PENDING, BOOTING, UP, GONE } node_state;

typedef struct node {
    node_state state;
    bool spot;
    int zone;
    double rate; /* its preemptions per hour (the drawn market's, by its instance type) */
    char trace_name[NAME_MAX_LEN]; /* the trace's node it stands for ("": none) */
} node;

/* HOUR_DRAWS and OFFER: the hourly draws (`draws: hourly`), and a grant they drew */
typedef enum due_kind { GRANT, JOIN, PREEMPT, TRACE, HOUR_DRAWS, OFFER } due_kind;

/* Something due at a time: a heap entry. seq breaks ties in the order they were made, so
 * a run does not depend on the heap's layout. */
typedef struct due {
    double t;
    uint64_t seq;
    due_kind kind;
    int64_t node; /* TRACE: the trace event's index */
} due;

typedef struct trace_event {
    double t; /* seconds since the clock's start */
    bool add;
    int zone; /* an add's (place_trace) */
    char name[NAME_MAX_LEN];
} trace_event;

struct bv_cloud {
    double now;
    node *nodes;
    size_t count, cap;
    due *heap;
    size_t nheap, heap_cap;
    uint64_t seq, rng;
    bv_cloud_event *events;
    size_t nevents, events_cap, events_read;
    /* the drawn market */
    double preemption_rate; /* per hour */
    struct {
        char name[NAME_MAX_LEN];
        double rate;
    } type_rate[MAX_TYPE_RATES]; /* `preemption_by_type` */
    int ntype_rates;
    double creation[24];    /* probability of a grant within the hour, by hour of the day */
    int start_hour, bulk, zones, next_zone;
    bool hourly; /* `draws: hourly`: spot requests wait in `waiting` for the draws */
    double boot;
    double lambda_memory_mb;
    /* the replayed one: the trace, the capacity there to take (names, zones), the
     * requests waiting for capacity (oldest first) */
    trace_event *trace;
    size_t ntrace;
    char (*free_names)[NAME_MAX_LEN];
    int *free_zones;
    size_t nfree;
    int64_t *waiting;
    size_t nwaiting, waiting_cap;
};

static const bv_option sim_options[] = {
    BV_OPT_FLOAT_RANGE("preemption", "0", 0, 0.999,
                       "probability that a spot node is preempted within an hour (a "
                       "constant rate; Bamboo's Table 3a: 0.01 to 0.5)"),
    BV_OPT_STR("preemption_by_type", "",
               "instance types preempted at other probabilities than `preemption`: "
               "'TYPE=P,TYPE=P' (for example 'g4dn.xlarge=0.4')"),
    BV_OPT_STR("creation", "1",
               "probability that a waiting request is granted within an hour: one number, "
               "24 comma-separated ones (hours 0 to 23 of the day), or 'random' (each "
               "hour's drawn from the seed, Bamboo section 6.2)"),
    BV_OPT_CHOICE("draws", "continuous", "continuous|hourly",
                  "how the drawn market draws its preemptions and grants: at constant "
                  "rates, or once an hour as Bamboo's published simulator does (each live "
                  "node preempted within the hour with its probability, at a uniform "
                  "second; a grant draw for every request waiting and node preempted)"),
    BV_OPT_INT_RANGE("start_hour", "0", -1, 23,
                     "hour of the day the simulation starts at (-1: drawn from the seed)"),
    BV_OPT_INT_RANGE("bulk", "1", 1, 1024,
                     "a preemption takes up to this many nodes of one zone at once (the "
                     "size uniform in [1, bulk])"),
    BV_OPT_INT_RANGE("zones", "1", 1, 64,
                     "availability zones; a request names one (the pipeline engine asks "
                     "zone s for stage s) or takes the next in turn"),
    BV_OPT_FLOAT_RANGE("boot_seconds", "45", 0, 86400,
                       "from a grant to the node's joining (Bamboo's simulator: 45 s)"),
    BV_OPT_FILE("trace", "",
                "a spot-instance trace to replay (ms,add|remove,nodeN) instead of drawing "
                "preemptions and grants (../shared/traces/)"),
    BV_OPT_FLOAT_RANGE("trace_start", "0", 0, 1e9, "where in the trace the clock starts (s)"),
    BV_OPT_FLOAT_RANGE("speedup", "1", 1e-3, 1e9,
                       "trace seconds that pass in one simulated second (as the local "
                       "cloud's, to simulate a run that replayed a trace faster)"),
    BV_OPT_INT_RANGE("seed", "0", 0, 4294967295.0,
                     "the market's seed; each simulated run adds its own seed to it"),
    BV_OPT_FLOAT_RANGE("lambda_memory_mb", "192", 1, 1e6,
                       "a serverless function's memory, MB: what its GB-seconds are billed "
                       "for (Dorylus's Lambdas: 192)"),
    BV_OPT_END,
};

/* splitmix64, uniform in [0, 1) */
static double uniform(bv_cloud *c)
{
    uint64_t z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* An exponential draw of mean 1. */
static double exp1(bv_cloud *c)
{
    return -log1p(-uniform(c));
}

static bool due_before(const due *a, const due *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

/* Room for one more element after `count` in *items (elem bytes each, *cap allocated):
 * *cap doubles (first: `first`) when count has reached it; false, nothing changed, when
 * memory runs out. (The core's bv_grow, which a plugin does not see.) */
static bool grow(void **items, size_t *cap, size_t count, size_t elem, size_t first)
{
    if (count < *cap)
        return true;
    size_t next = *cap ? *cap * 2 : first;
    void *p = realloc(*items, next * elem);
    if (!p)
        return false;
    *items = p;
    *cap = next;
    return true;
}

static bool schedule(bv_cloud *c, double t, due_kind kind, int64_t id)
{
    if (!grow((void **)&c->heap, &c->heap_cap, c->nheap, sizeof *c->heap, 256))
        return false;
    size_t i = c->nheap++;
    c->heap[i] = (due){t, c->seq++, kind, id};
    while (i > 0 && due_before(&c->heap[i], &c->heap[(i - 1) / 2])) {
        due tmp = c->heap[i];
        c->heap[i] = c->heap[(i - 1) / 2];
        c->heap[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
    return true;
}

static due pop(bv_cloud *c)
{
    due top = c->heap[0];
    c->heap[0] = c->heap[--c->nheap];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < c->nheap && due_before(&c->heap[l], &c->heap[m]))
            m = l;
        if (r < c->nheap && due_before(&c->heap[r], &c->heap[m]))
            m = r;
        if (m == i)
            break;
        due tmp = c->heap[i];
        c->heap[i] = c->heap[m];
        c->heap[m] = tmp;
        i = m;
    }
    return top;
}

static bool emit(bv_cloud *c, uint32_t kind, int64_t id)
{
    if (!grow((void **)&c->events, &c->events_cap, c->nevents, sizeof *c->events, 64))
        return false;
    c->events[c->nevents++] = (bv_cloud_event){
        .size = sizeof(bv_cloud_event), .kind = kind, .node = id, .time = c->now,
        .wait_status = -1, .zone = id >= 0 ? c->nodes[id].zone : -1};
    return true;
}

/* The hour of the day at simulated time t. */
static int hour_of_day(const bv_cloud *c, double t)
{
    return (int)((long long)floor(t / HOUR) + c->start_hour) % 24;
}

/* When a request waiting from `from` is granted: the rate of each hour of the day is
 * -ln(1 - creation) per hour, so the grant comes within the hour with that probability.
 * INFINITY: not within a week. */
static double grant_time(bv_cloud *c, double from)
{
    double need = exp1(c), t = from;
    while (t < from + NEVER_AFTER) {
        double hour_end = (floor(t / HOUR) + 1) * HOUR;
        double p = c->creation[hour_of_day(c, t)];
        if (p >= 1)
            return t;
        double rate = p > 0 ? -log1p(-p) / HOUR : 0, have = rate * (hour_end - t);
        if (rate > 0 && need <= have)
            return t + need / rate;
        need -= have;
        t = hour_end;
    }
    return INFINITY;
}

/* A granted node boots; a spot one of the drawn market gets its preemption time (the
 * rate of a bulk's first node is the node rate over the mean bulk size, so that each
 * node's stays `preemption`). */
static bool grant(bv_cloud *c, int64_t id)
{
    node *n = &c->nodes[id];
    n->state = BOOTING;
    if (n->spot && !c->trace && !c->hourly && n->rate > 0 &&
        !schedule(c, c->now + exp1(c) * HOUR * (c->bulk + 1) / 2.0 / n->rate, PREEMPT, id))
        return false;
    return schedule(c, c->now + c->boot, JOIN, id);
}

static bool preempt_one(bv_cloud *c, int64_t id)
{
    c->nodes[id].state = GONE;
    return emit(c, BV_CLOUD_PREEMPTED, id);
}

/* Node `id` is preempted, with up to bulk - 1 other live spot nodes of its zone. */
static bool preempt(bv_cloud *c, int64_t id)
{
    int zone = c->nodes[id].zone;
    int more = c->bulk > 1 ? (int)(uniform(c) * c->bulk) : 0;
    if (!preempt_one(c, id))
        return false;
    for (size_t i = 0; more > 0 && i < c->count; i++) {
        node *n = &c->nodes[i];
        if (n->spot && n->zone == zone && (n->state == BOOTING || n->state == UP)) {
            if (!preempt_one(c, (int64_t)i))
                return false;
            more--;
        }
    }
    return true;
}

/* The request waiting at k (0: the oldest), taken out of the queue. */
static int64_t take_waiting(bv_cloud *c, size_t k)
{
    int64_t id = c->waiting[k];
    memmove(c->waiting + k, c->waiting + k + 1, (c->nwaiting - k - 1) * sizeof *c->waiting);
    c->nwaiting--;
    return id;
}

/* Node `id` drawn for preemption within the hour that starts at `hour` (its probability,
 * at a uniform whole second of the hour; a draw before `after` is none): true when it was,
 * *fail set where memory ran out. */
static bool draw_preemption(bv_cloud *c, int64_t id, double hour, double after, bool *fail)
{
    if (uniform(c) >= -expm1(-c->nodes[id].rate))
        return false;
    double t = hour + floor(uniform(c) * HOUR);
    if (t < after)
        return false;
    *fail |= !schedule(c, t, PREEMPT, id);
    return true;
}

/* The hourly draws at the start of the hour `t` (`draws: hourly`). */
static bool hour_draws(bv_cloud *c, double t)
{
    double p = c->creation[hour_of_day(c, t)];
    bool fail = false;
    for (size_t k = 0; t == 0 && k < c->nwaiting;) { /* at the start: granted at once */
        if (uniform(c) < p)
            fail |= !grant(c, take_waiting(c, k));
        else
            k++;
    }
    size_t preempted = 0;
    for (size_t i = 0; i < c->count; i++) {
        const node *n = &c->nodes[i];
        if (n->spot && (n->state == BOOTING || n->state == UP))
            preempted += draw_preemption(c, (int64_t)i, t, t, &fail);
    }
    for (size_t k = c->nwaiting + preempted; k > 0; k--)
        if (uniform(c) < p)
            fail |= !schedule(c, t + floor(uniform(c) * HOUR), OFFER, -1);
    return !fail && schedule(c, t + HOUR, HOUR_DRAWS, -1);
}

/* A grant the hourly draws made: the oldest request waiting takes it, and draws its
 * preemption for the rest of the hour. */
static bool offer(bv_cloud *c)
{
    if (!c->nwaiting)
        return true;
    int64_t id = take_waiting(c, 0);
    bool fail = !grant(c, id);
    draw_preemption(c, id, floor(c->now / HOUR) * HOUR, c->now + 1e-9, &fail);
    return !fail;
}

/* The trace's event `i`: capacity comes (the oldest waiting request takes it) or goes
 * (the node standing for it is preempted). */
static bool replay(bv_cloud *c, size_t i)
{
    const trace_event *e = &c->trace[i];
    if (e->add) {
        int zone = e->zone;
        if (c->nwaiting) {
            int64_t id = take_waiting(c, 0);
            node *n = &c->nodes[id];
            n->zone = zone;
            snprintf(n->trace_name, NAME_MAX_LEN, "%s", e->name);
            return grant(c, id);
        }
        snprintf(c->free_names[c->nfree], NAME_MAX_LEN, "%s", e->name);
        c->free_zones[c->nfree++] = zone;
        return emit(c, BV_CLOUD_OFFERED, -1);
    }
    for (size_t k = 0; k < c->count; k++)
        if ((c->nodes[k].state == BOOTING || c->nodes[k].state == UP) &&
            strcmp(c->nodes[k].trace_name, e->name) == 0)
            return preempt_one(c, (int64_t)k);
    for (size_t k = 0; k < c->nfree; k++) /* no longer there to take */
        if (strcmp(c->free_names[k], e->name) == 0) {
            memmove(c->free_names + k, c->free_names + k + 1,
                    (c->nfree - k - 1) * sizeof *c->free_names);
            memmove(c->free_zones + k, c->free_zones + k + 1,
                    (c->nfree - k - 1) * sizeof *c->free_zones);
            c->nfree--;
            break;
        }
    return true;
}

/* The zones of the trace's adds: the nodes there at the start (removals at it included) in
 * contiguous blocks of the order they were added; the later ones by instant (a bulk
 * allocation in one zone, as a bulk preemption takes nodes of one zone, Bamboo section 3). */
static bv_status place_trace(bv_cloud *c, bv_error *err)
{
    size_t *there = calloc(c->ntrace, sizeof *there), n = 0, i = 0;
    if (!there)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (; i < c->ntrace && c->trace[i].t <= 0; i++) {
        if (c->trace[i].add) {
            there[n++] = i;
            continue;
        }
        for (size_t k = 0; k < n; k++)
            if (strcmp(c->trace[there[k]].name, c->trace[i].name) == 0) {
                memmove(there + k, there + k + 1, (n - k - 1) * sizeof *there);
                n--;
                break;
            }
    }
    for (size_t k = 0; k < n; k++)
        c->trace[there[k]].zone = (int)(k * (size_t)c->zones / n);
    /* the later adds: all of one instant (an allocation in bulk) in one zone, the next
     * instant's in the next zone */
    for (size_t bulk = 0; i < c->ntrace; i++)
        if (c->trace[i].add) {
            bool same = i > 0 && c->trace[i - 1].add && c->trace[i - 1].t == c->trace[i].t;
            bulk += !same && i > 0;
            c->trace[i].zone = (int)(bulk % (size_t)c->zones);
        }
    free(there);
    return BV_OK;
}

static bool add_event(bv_cloud *c, size_t *cap, double t, bool add, const char *name)
{
    if (!grow((void **)&c->trace, cap, c->ntrace, sizeof *c->trace, 256))
        return false;
    trace_event *e = &c->trace[c->ntrace++];
    *e = (trace_event){.t = t, .add = add};
    snprintf(e->name, NAME_MAX_LEN, "%s", name);
    return true;
}

/* Reads a trace in either format of ../shared/traces/: events ("ms,add|remove,node") or
 * the live instances of one zone over time ("seconds,count", a step function: each rise
 * adds nodes i1, i2, ..., each fall removes the newest ones). Times are scaled by
 * speedup and start at `start` (trace seconds); what came before is at 0. */
static bv_status read_trace(bv_cloud *c, const char *path, double start, double speedup,
                            bv_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return bv_error_set(err, BV_ERR_INVALID, "sim cloud: trace %s: %s", path,
                            strerror(errno));
    char line[256];
    size_t cap = 0, live = 0, named = 0;
    size_t *stack = NULL; /* the step function's live nodes, by number */
    bv_status st = BV_OK;
    double last = 0;
    int format = 0; /* 3: events, 2: counts */
    for (int no = 1; st == BV_OK && fgets(line, sizeof line, f); no++) {
        long long a, n;
        char kind[8], name[NAME_MAX_LEN], extra;
        int fields = sscanf(line, "%lld,%7[a-z],%31[A-Za-z0-9_.-] %c", &a, kind, name, &extra);
        bool events = fields == 3 && (!strcmp(kind, "add") || !strcmp(kind, "remove"));
        bool counts = !events && sscanf(line, "%lld,%lld %c", &a, &n, &extra) == 2 && n >= 0 &&
                      n <= 100000;
        double t = events ? 1e-3 * (double)a : (double)a;
        if ((!events && !counts) || a < 0 || t < last || (format && format != (events ? 3 : 2))) {
            st = bv_error_set(err, BV_ERR_INVALID, "%s:%d: not 'ms,add|remove,node' (nor "
                              "'seconds,instances') after the line before", path, no);
            break;
        }
        format = events ? 3 : 2;
        last = t;
        double at = t - start < 0 ? 0 : (t - start) / speedup;
        if (events && !add_event(c, &cap, at, kind[0] == 'a', name))
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        if (counts && (size_t)n > live) {
            size_t *grown = realloc(stack, (size_t)n * sizeof *stack);
            if (!grown)
                st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
            else
                stack = grown;
        }
        for (; st == BV_OK && counts && live != (size_t)n;) {
            bool add = (size_t)n > live;
            size_t id = add ? ++named : stack[live - 1];
            snprintf(name, sizeof name, "i%zu", id);
            if (!add_event(c, &cap, at, add, name))
                st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
            else if (add)
                stack[live++] = id;
            else
                live--;
        }
    }
    fclose(f);
    free(stack);
    if (st == BV_OK && c->ntrace == 0)
        st = bv_error_set(err, BV_ERR_INVALID, "sim cloud: trace %s has no events", path);
    if (st == BV_OK)
        st = place_trace(c, err);
    if (st == BV_OK && (!(c->free_names = calloc(c->ntrace, sizeof *c->free_names)) ||
                        !(c->free_zones = calloc(c->ntrace, sizeof *c->free_zones))))
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    return st;
}

/* A probability of preemption within an hour as the constant rate per hour it gives. */
static double rate_of(double p)
{
    return -log1p(-p);
}

/* `preemption_by_type`: "TYPE=P,TYPE=P", each P a probability below 1. */
static bv_status parse_type_rates(bv_cloud *c, const char *text, bv_error *err)
{
    const char *s = text;
    while (*s) {
        size_t len = strcspn(s, "=,");
        char *end = NULL;
        double p = -1;
        if (s[len] == '=') {
            errno = 0;
            p = strtod(s + len + 1, &end);
        }
        if (!len || len >= NAME_MAX_LEN || !end || end == s + len + 1 || errno ||
            !(p >= 0 && p < 1) || (*end && *end != ',') || c->ntype_rates == MAX_TYPE_RATES)
            return bv_error_set(err, BV_ERR_INVALID, "sim cloud: preemption_by_type '%s': "
                                "not TYPE=P pairs (P a probability below 1, at most %d "
                                "types) separated by commas", text, MAX_TYPE_RATES);
        snprintf(c->type_rate[c->ntype_rates].name, NAME_MAX_LEN, "%.*s", (int)len, s);
        c->type_rate[c->ntype_rates++].rate = rate_of(p);
        s = *end ? end + 1 : end;
    }
    return BV_OK;
}

/* The preemption rate of a node of instance type `type` (NULL: the default's). */
static double type_rate(const bv_cloud *c, const char *type)
{
    for (int i = 0; type && i < c->ntype_rates; i++)
        if (strcmp(c->type_rate[i].name, type) == 0)
            return c->type_rate[i].rate;
    return c->preemption_rate;
}

/* `creation`: one probability, 24 of them, or "random". */
static bv_status parse_creation(bv_cloud *c, const char *text, bv_error *err)
{
    if (strcmp(text, "random") == 0) {
        for (int h = 0; h < 24; h++)
            c->creation[h] = uniform(c);
        return BV_OK;
    }
    int n = 0;
    const char *s = text;
    while (*s && n < 25) {
        char *end;
        errno = 0;
        double p = strtod(s, &end);
        if (end == s || errno || !(p >= 0 && p <= 1))
            break;
        c->creation[n < 24 ? n : 23] = p;
        n++;
        s = end + strspn(end, " ");
        if (*s != ',')
            break;
        s++;
    }
    if (*s || (n != 1 && n != 24))
        return bv_error_set(err, BV_ERR_INVALID, "sim cloud: creation '%s': not a "
                            "probability, 24 of them separated by commas, or 'random'",
                            text);
    for (int h = 1; n == 1 && h < 24; h++)
        c->creation[h] = c->creation[0];
    return BV_OK;
}

static void sim_destroy(bv_cloud *c);

static bv_cloud *sim_create(const bv_opts *opts, const bv_run_info *info, bv_error *err)
{
    bv_cloud *c = calloc(1, sizeof *c);
    if (!c) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    uint64_t seed = (uint64_t)bv_opts_int(opts, "seed") + (info ? info->seed : 0);
    c->rng = seed * 0x9E3779B97F4A7C15ull ^ 0x5A17C10Dull;
    double p = bv_opts_float(opts, "preemption");
    c->preemption_rate = rate_of(p);
    c->bulk = (int)bv_opts_int(opts, "bulk");
    c->zones = (int)bv_opts_int(opts, "zones");
    c->boot = bv_opts_float(opts, "boot_seconds");
    c->lambda_memory_mb = bv_opts_float(opts, "lambda_memory_mb");
    c->start_hour = (int)bv_opts_int(opts, "start_hour");
    if (c->start_hour < 0)
        c->start_hour = (int)(uniform(c) * 24);
    const char *trace = bv_opts_str(opts, "trace");
    bv_status st = parse_creation(c, bv_opts_str(opts, "creation"), err);
    if (st == BV_OK)
        st = parse_type_rates(c, bv_opts_str(opts, "preemption_by_type"), err);
    if (st == BV_OK && trace && trace[0])
        st = read_trace(c, trace, bv_opts_float(opts, "trace_start"),
                        bv_opts_float(opts, "speedup"), err);
    c->hourly = strcmp(bv_opts_str(opts, "draws"), "hourly") == 0;
    if (st == BV_OK && c->hourly && c->trace)
        st = bv_error_set(err, BV_ERR_INVALID, "sim cloud: draws: hourly is the drawn "
                          "market's; a trace replays its own");
    else if (st == BV_OK && c->hourly && c->bulk > 1)
        st = bv_error_set(err, BV_ERR_INVALID, "sim cloud: draws: hourly preempts one node "
                          "at a time, as Bamboo's simulator does (bulk %d)", c->bulk);
    else if (st == BV_OK && c->hourly && !schedule(c, 0, HOUR_DRAWS, -1))
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == BV_OK && i < c->ntrace; i++)
        if (!schedule(c, c->trace[i].t, TRACE, (int64_t)i))
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    if (st != BV_OK) {
        sim_destroy(c);
        return NULL;
    }
    return c;
}

static void sim_destroy(bv_cloud *c)
{
    if (!c)
        return;
    free(c->nodes);
    free(c->heap);
    free(c->events);
    free(c->trace);
    free(c->free_names);
    free(c->free_zones);
    free(c->waiting);
    free(c);
}

static int64_t sim_launch(bv_cloud *c, const bv_node_request *req, char *address,
                          size_t address_len, bv_error *err)
{
    if (!grow((void **)&c->nodes, &c->cap, c->count, sizeof *c->nodes, 64) ||
        !grow((void **)&c->waiting, &c->waiting_cap, c->nwaiting, sizeof *c->waiting, 64)) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return -1;
    }
    int64_t id = (int64_t)c->count++;
    node *n = &c->nodes[id];
    const char *zone = req->size > offsetof(bv_node_request, zone) ? req->zone : NULL;
    *n = (node){.state = PENDING, .spot = req->spot, .rate = type_rate(c, req->node_type),
                .zone = zone && zone[0] ? atoi(zone) % c->zones : c->next_zone++ % c->zones};
    if (address && address_len)
        address[0] = '\0';
    bool ok = true;
    if (!n->spot) {
        ok = grant(c, id);
    } else if (c->trace) { /* capacity there now: the first of the zone asked, else any */
        size_t pick = c->nfree;
        for (size_t k = 0; k < c->nfree && pick == c->nfree; k++)
            if (c->free_zones[k] == n->zone)
                pick = k;
        if (pick == c->nfree && c->nfree)
            pick = 0;
        if (pick < c->nfree) {
            snprintf(n->trace_name, NAME_MAX_LEN, "%s", c->free_names[pick]);
            n->zone = c->free_zones[pick];
            memmove(c->free_names + pick, c->free_names + pick + 1,
                    (c->nfree - pick - 1) * sizeof *c->free_names);
            memmove(c->free_zones + pick, c->free_zones + pick + 1,
                    (c->nfree - pick - 1) * sizeof *c->free_zones);
            c->nfree--;
            ok = grant(c, id);
        } else {
            c->waiting[c->nwaiting++] = id;
        }
    } else if (c->hourly) { /* for the hourly draws */
        c->waiting[c->nwaiting++] = id;
    } else {
        double t = grant_time(c, c->now);
        ok = isinf(t) || schedule(c, t, GRANT, id);
    }
    if (!ok) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return -1;
    }
    return id;
}

static bv_status sim_terminate(bv_cloud *c, int64_t id, bv_error *err)
{
    if (id < 0 || (size_t)id >= c->count || c->nodes[id].state == GONE)
        return bv_error_set(err, BV_ERR_INVALID, "sim cloud: no node %lld", (long long)id);
    for (size_t k = 0; k < c->nwaiting; k++)
        if (c->waiting[k] == id) {
            take_waiting(c, k);
            break;
        }
    c->nodes[id].state = GONE;
    return BV_OK;
}

static int sim_poll(bv_cloud *c, bv_cloud_event *events, int max, bv_error *err)
{
    (void)err;
    int n = 0;
    for (; n < max && c->events_read < c->nevents; n++) {
        size_t size = events[n].size < sizeof events[n] ? events[n].size : sizeof events[n];
        memcpy(&events[n], &c->events[c->events_read++], size);
        events[n].size = size;
    }
    if (c->events_read == c->nevents)
        c->events_read = c->nevents = 0;
    return n;
}

static double sim_next_event(bv_cloud *c)
{
    return c->nheap ? c->heap[0].t : INFINITY;
}

static bv_status sim_advance(bv_cloud *c, double t, bv_error *err)
{
    if (t < c->now)
        return bv_error_set(err, BV_ERR_INVALID, "sim cloud: the clock cannot go back from "
                            "%.3f s to %.3f s", c->now, t);
    bool ok = true;
    while (ok && c->nheap && c->heap[0].t <= t) {
        due d = pop(c);
        c->now = d.t;
        node *n = d.node >= 0 && d.kind != TRACE ? &c->nodes[d.node] : NULL;
        switch (d.kind) {
        case GRANT:
            ok = n->state != PENDING || grant(c, d.node);
            break;
        case JOIN:
            if (n->state == BOOTING) {
                n->state = UP;
                ok = emit(c, BV_CLOUD_JOINED, d.node);
            }
            break;
        case PREEMPT:
            ok = (n->state != BOOTING && n->state != UP) || preempt(c, d.node);
            break;
        case TRACE:
            ok = replay(c, (size_t)d.node);
            break;
        case HOUR_DRAWS:
            ok = hour_draws(c, d.t);
            break;
        case OFFER:
            ok = offer(c);
            break;
        }
    }
    c->now = t;
    return ok ? BV_OK : bv_error_set(err, BV_ERR_NOMEM, "out of memory");
}

/* Serverless functions, as the platform bills them: the memory; the rest is the
 * simulation's workload model (docs/simulation.md, "Graph runs"). */
static bv_status sim_function_limits(bv_cloud *c, bv_function_limits *out, bv_error *err)
{
    (void)err;
    size_t size = out->size;
    *out = (bv_function_limits){.size = size, .memory_mb = c->lambda_memory_mb};
    return BV_OK;
}

static int sim_invoke(bv_cloud *c, int64_t id)
{
    (void)c;
    (void)id;
    return BV_INVOKE_OK;
}

static const bv_cloud_ops sim_ops = {
    .create = sim_create,
    .destroy = sim_destroy,
    .launch = sim_launch,
    .terminate = sim_terminate,
    .poll = sim_poll,
    .function_limits = sim_function_limits,
    .invoke = sim_invoke,
    .next_event = sim_next_event,
    .advance = sim_advance,
};

static const bv_plugin sim_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_CLOUD, "sim", "0.1.0",
                     "a discrete-event spot market on a simulated clock (bivouac simulate)"),
    .options = sim_options,
    .ops = &sim_ops,
    .ops_size = sizeof sim_ops,
};

BV_PLUGIN_ENTRY(cloud, sim, sim_plugin)
