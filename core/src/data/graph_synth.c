/* The built-in synthetic graphs: planted partition ("communities") for learnable toy
 * problems and Chung-Lu power law ("powerlaw") for scale tests. Deterministic for a
 * seed: xoshiro256** seeded through splitmix64, no global state. */
#include "bivouac/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* --- random numbers (Blackman & Vigna, "Scrambled linear pseudorandom number
 * generators", 2021) --------------------------------------------------------------- */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static double rng_uniform(rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, n) (Lemire's multiply-shift; the bias is below 2^-32 for our n). */
static int64_t rng_below(rng *r, int64_t n)
{
    return (int64_t)(((unsigned __int128)rng_next(r) * (uint64_t)n) >> 64);
}

/* Standard normal samples (Box-Muller). */
static void rng_gaussian_fill(rng *r, float *out, size_t n)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = (double)((rng_next(r) >> 11) + 1) * 0x1.0p-53; /* (0, 1]: log is finite */
        double u2 = rng_uniform(r);
        double radius = sqrt(-2.0 * log(u1));
        out[i] = (float)(radius * cos(2.0 * M_PI * u2));
        if (i + 1 < n)
            out[i + 1] = (float)(radius * sin(2.0 * M_PI * u2));
    }
}

static void shuffle_int32(rng *r, int32_t *a, int64_t n)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = rng_below(r, i + 1);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* --- distinct edge sets ----------------------------------------------------------- */

/* LSD radix sort with 11-bit digits over the bits max_key needs. */
static void radix_sort(uint64_t *a, uint64_t *tmp, size_t n, uint64_t max_key)
{
    enum { DIGIT = 11, BUCKETS = 1 << DIGIT };
    int bits = 64 - __builtin_clzll(max_key | 1);
    uint64_t *src = a, *dst = tmp;
    size_t *count = malloc(BUCKETS * sizeof *count);
    if (!count) { /* tiny allocation; fall back to insertion sort rather than fail */
        for (size_t i = 1; i < n; i++) {
            uint64_t x = a[i];
            size_t j = i;
            for (; j > 0 && a[j - 1] > x; j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    for (int shift = 0; shift < bits; shift += DIGIT) {
        memset(count, 0, BUCKETS * sizeof *count);
        for (size_t i = 0; i < n; i++)
            count[(src[i] >> shift) & (BUCKETS - 1)]++;
        size_t sum = 0;
        for (size_t b = 0; b < BUCKETS; b++) {
            size_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift) & (BUCKETS - 1)]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    free(count);
    if (src != a)
        memcpy(a, src, n * sizeof *a);
}

static size_t sorted_unique(uint64_t *a, size_t n)
{
    size_t out = 0;
    for (size_t i = 0; i < n; i++)
        if (out == 0 || a[i] != a[out - 1])
            a[out++] = a[i];
    return out;
}

/* Draws one endpoint pair; u == v is allowed (it is thrown away). */
typedef void (*pair_sampler)(void *ctx, rng *r, int64_t *u, int64_t *v);

/* Samples until exactly `target` distinct undirected edges exist: each round draws a
 * little more than is missing, removes self loops and duplicates (sort + unique, and
 * against the edges kept so far), and keeps a random subset of the new edges when there
 * are too many. The edges come back as keys min * n + max, sorted. */
static bv_status sample_edge_set(int64_t n, int64_t target, pair_sampler sample, void *ctx,
                                 rng *r, uint64_t **out, bv_error *err)
{
    enum { MAX_ROUNDS = 64 };
    uint64_t max_key = (uint64_t)n * (uint64_t)n;
    uint64_t *have = NULL;
    size_t have_n = 0;
    for (int round = 0; have_n < (size_t)target; round++) {
        if (round == MAX_ROUNDS) {
            free(have);
            return bv_error_set(err, BV_ERR_INVALID,
                                "could only place %zu of %lld distinct edges among %lld nodes "
                                "in %d sampling rounds; ask for fewer edges",
                                have_n, (long long)target, (long long)n, MAX_ROUNDS);
        }
        size_t need = (size_t)target - have_n;
        size_t batch = need + need / 8 + 16;
        uint64_t *b = malloc(batch * sizeof *b), *tmp = malloc(batch * sizeof *tmp);
        uint64_t *merged = have_n ? malloc((have_n + need) * sizeof *merged) : NULL;
        if (!b || !tmp || (have_n && !merged)) {
            free(b);
            free(tmp);
            free(merged);
            free(have);
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory sampling %lld edges",
                                (long long)target);
        }
        size_t bn = 0;
        for (size_t i = 0; i < batch; i++) {
            int64_t u, v;
            sample(ctx, r, &u, &v);
            if (u != v)
                b[bn++] = u < v ? (uint64_t)u * (uint64_t)n + (uint64_t)v
                                : (uint64_t)v * (uint64_t)n + (uint64_t)u;
        }
        radix_sort(b, tmp, bn, max_key);
        bn = sorted_unique(b, bn);
        size_t fresh = 0, j = 0;
        for (size_t i = 0; i < bn; i++) {
            while (j < have_n && have[j] < b[i])
                j++;
            if (j == have_n || have[j] != b[i])
                b[fresh++] = b[i];
        }
        if (fresh > need) {
            for (size_t i = 0; i < need; i++) { /* partial Fisher-Yates */
                size_t k = i + (size_t)rng_below(r, (int64_t)(fresh - i));
                uint64_t t = b[i];
                b[i] = b[k];
                b[k] = t;
            }
            fresh = need;
            radix_sort(b, tmp, fresh, max_key);
        }
        free(tmp);
        if (!have_n) {
            have = b;
            have_n = fresh;
            continue;
        }
        size_t i = 0, k = 0, m = 0;
        while (i < have_n || k < fresh)
            merged[m++] = (k == fresh || (i < have_n && have[i] < b[k])) ? have[i++] : b[k++];
        free(have);
        free(b);
        have = merged;
        have_n = m;
    }
    *out = have;
    return BV_OK;
}

/* Turns the sorted keys into the adjacency. The (u, v) pairs overwrite the keys in place
 * (same size, same slot), and stay sorted by (min, max), the builder's fast path. */
static bv_status adj_from_keys(int64_t n, uint64_t *keys, int64_t m, bv_csr *adj,
                               bv_error *err)
{
    for (int64_t k = 0; k < m; k++) {
        int32_t pair[2] = {(int32_t)(keys[k] / (uint64_t)n), (int32_t)(keys[k] % (uint64_t)n)};
        memcpy(&keys[k], pair, sizeof pair);
    }
    return bv_graph_adj_from_pairs(n, (const int32_t *)(void *)keys, m, adj, err);
}

/* With dense features (powerlaw's), or none yet (communities' CSR is filled as drawn). */
static bv_graph_dataset *dataset_new(const char *name, int64_t nodes, int64_t features,
                                     int32_t classes, bool dense)
{
    bv_graph_dataset *g = bv_graph_dataset_alloc(name);
    if (!g)
        return NULL;
    g->num_nodes = nodes;
    g->num_features = features;
    g->num_classes = classes;
    g->features =
        dense ? bv_alloc_aligned((size_t)nodes * (size_t)features * sizeof(float)) : NULL;
    g->labels = bv_alloc_aligned((size_t)nodes * sizeof *g->labels);
    g->split = bv_alloc_aligned((size_t)nodes * sizeof *g->split);
    if ((dense && !g->features) || !g->labels || !g->split) {
        bv_graph_free(g);
        return NULL;
    }
    return g;
}

static bv_status check_sizes(const char *what, int64_t nodes, int64_t features,
                             int32_t classes, bv_error *err)
{
    if (nodes < 2 || nodes > INT32_MAX)
        return bv_error_set(err, BV_ERR_INVALID, "%s: nodes must be in [2, %d], not %lld",
                            what, INT32_MAX, (long long)nodes);
    if (features < 1 || features > INT64_MAX / 4 / nodes)
        return bv_error_set(err, BV_ERR_INVALID, "%s: features must be in [1, %lld], not %lld",
                            what, (long long)(INT64_MAX / 4 / nodes), (long long)features);
    if (classes < 1 || classes > nodes)
        return bv_error_set(err, BV_ERR_INVALID, "%s: classes must be in [1, nodes], not %d",
                            what, classes);
    return BV_OK;
}

/* --- communities ------------------------------------------------------------------ */

typedef struct block_sampler {
    int64_t n;
    double homophily;
    const int32_t *label;
    const int32_t *members;     /* node ids grouped by class */
    const int64_t *class_start; /* classes + 1 offsets into members */
} block_sampler;

static void sample_block_pair(void *ctx, rng *r, int64_t *u, int64_t *v)
{
    const block_sampler *b = ctx;
    *u = rng_below(r, b->n);
    int32_t c = b->label[*u];
    int64_t begin = b->class_start[c], size = b->class_start[c + 1] - begin;
    if (rng_uniform(r) < b->homophily || size == b->n) {
        *v = b->members[begin + rng_below(r, size)];
    } else {
        int64_t k = rng_below(r, b->n - size); /* a member of any other block */
        *v = b->members[k < begin ? k : k + size];
    }
}

bv_status bv_graph_synth_communities(const bv_synth_communities *p, bv_graph_dataset **out,
                                     bv_error *err)
{
    *out = NULL;
    const char *what = "communities";
    bv_status s = check_sizes(what, p->nodes, p->features, p->classes, err);
    if (s != BV_OK)
        return s;
    int64_t n = p->nodes, f = p->features, c = p->classes;
    if (!(p->homophily >= 0 && p->homophily <= 1) ||
        !(p->feature_density >= 0 && p->feature_density <= 1) ||
        !(p->feature_signal >= 0 && p->feature_signal <= 1))
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s: homophily, feature_density and feature_signal must be in [0, 1]",
                            what);
    double edges = (double)n * p->avg_degree / 2.0;
    if (!(p->avg_degree >= 0) || edges > (double)n * (double)(n - 1) / 2.0)
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s: avg_degree %g impossible with %lld nodes", what, p->avg_degree,
                            (long long)n);
    if (p->train_per_class < 1)
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s: train_per_class must be at least 1, not %lld (the training "
                            "split would be empty)",
                            what, (long long)p->train_per_class);
    if (p->val < 0 || p->test < 0 || p->train_per_class > n / c ||
        p->train_per_class * c + p->val + p->test > n)
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s: %lld train per class x %lld classes + %lld val + %lld test "
                            "do not fit in %lld nodes (%lld per class)",
                            what, (long long)p->train_per_class, (long long)c, (long long)p->val,
                            (long long)p->test, (long long)n, (long long)(n / c));
    bv_graph_dataset *g = dataset_new("communities", n, f, (int32_t)c, false);
    int32_t *members = malloc((size_t)n * sizeof *members);
    int64_t *class_start = calloc((size_t)c + 1, sizeof *class_start);
    int64_t *filled = calloc((size_t)c, sizeof *filled);
    if (!g || !members || !class_start || !filled) {
        s = bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory", what);
        goto done;
    }
    rng r;
    rng_seed(&r, p->seed);
    /* Blocks of equal size (within one), in random order over the ids. */
    for (int64_t i = 0; i < n; i++)
        g->labels[i] = (int32_t)(i % c);
    shuffle_int32(&r, g->labels, n);
    for (int64_t i = 0; i < n; i++)
        class_start[g->labels[i] + 1]++;
    for (int64_t k = 0; k < c; k++)
        class_start[k + 1] += class_start[k];
    for (int64_t i = 0; i < n; i++)
        members[class_start[g->labels[i]] + filled[g->labels[i]]++] = (int32_t)i;

    block_sampler sampler = {n, p->homophily, g->labels, members, class_start};
    uint64_t *keys = NULL;
    int64_t target = llround(edges);
    s = sample_edge_set(n, target, sample_block_pair, &sampler, &r, &keys, err);
    if (s == BV_OK)
        s = adj_from_keys(n, keys, target, &g->adj, err);
    free(keys);
    if (s != BV_OK)
        goto done;
    g->num_undirected_edges = target;

    /* Bag of words: each class prefers its own slice of the vocabulary. Drawn with
     * repeats, kept as a CSR (a word drawn twice is one 1). */
    int64_t words = llround(p->feature_density * (double)f);
    bv_csr *x = &g->features_csr;
    *x = (bv_csr){.nrows = n, .ncols = f};
    x->rowptr = bv_alloc_aligned((size_t)(n + 1) * sizeof *x->rowptr);
    x->colidx = bv_alloc_aligned((size_t)(n * words + 1) * sizeof *x->colidx);
    x->values = bv_alloc_aligned((size_t)(n * words + 1) * sizeof *x->values);
    if (!x->rowptr || !x->colidx || !x->values) {
        s = bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory for %lld x %lld features", what,
                         (long long)n, (long long)words);
        goto done;
    }
    for (int64_t i = 0, k = 0; i < n; i++) {
        int64_t label = g->labels[i];
        int64_t lo = label * f / c, hi = (label + 1) * f / c;
        x->rowptr[i] = k;
        for (int64_t w = 0; w < words; w++) {
            bool own = hi > lo && rng_uniform(&r) < p->feature_signal;
            x->colidx[k + w] = (int32_t)(own ? lo + rng_below(&r, hi - lo) : rng_below(&r, f));
            x->values[k + w] = 1.0f;
        }
        k += bv_graph_tidy_row(x->colidx + k, x->values + k, words);
        x->rowptr[i + 1] = x->nnz = k;
    }

    /* Planetoid-style split in id order: the first train_per_class nodes of each class
     * train, then the next `val` nodes val, the next `test` test, the rest none. */
    memset(filled, 0, (size_t)c * sizeof *filled);
    for (int64_t i = 0; i < n; i++) {
        int which = BV_SPLIT_NONE;
        if (filled[g->labels[i]] < p->train_per_class) {
            filled[g->labels[i]]++;
            which = BV_SPLIT_TRAIN;
        } else if (g->split_count[BV_SPLIT_VAL] < p->val) {
            which = BV_SPLIT_VAL;
        } else if (g->split_count[BV_SPLIT_TEST] < p->test) {
            which = BV_SPLIT_TEST;
        }
        g->split[i] = (uint8_t)which;
        g->split_count[which]++;
    }
    s = bv_graph_check_split(g, NULL, err); /* warns when val or test is 0 */
done:
    free(members);
    free(class_start);
    free(filled);
    if (s != BV_OK) {
        bv_graph_free(g);
        return s;
    }
    *out = g;
    return BV_OK;
}

/* --- power law -------------------------------------------------------------------- */

/* Walker's alias method (Vose's construction): O(1) draws from a discrete distribution. */
typedef struct alias_table {
    int64_t n;
    double *prob;
    int32_t *alias;
    const int32_t *node; /* rank -> node id */
} alias_table;

static bool alias_build(alias_table *t, const double *weight, int64_t n)
{
    t->n = n;
    t->prob = malloc((size_t)n * sizeof *t->prob);
    t->alias = malloc((size_t)n * sizeof *t->alias);
    int32_t *work = malloc((size_t)n * sizeof *work);
    if (!t->prob || !t->alias || !work) {
        free(work);
        return false;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += weight[i];
    /* work holds the small entries from the front and the large ones from the back. */
    int64_t small = 0, large = n;
    for (int64_t i = 0; i < n; i++) {
        t->prob[i] = weight[i] * (double)n / sum;
        t->alias[i] = (int32_t)i;
        if (t->prob[i] < 1.0)
            work[small++] = (int32_t)i;
        else
            work[--large] = (int32_t)i;
    }
    int64_t s_top = small, l_top = large;
    int64_t s_at = 0;
    while (s_at < s_top && l_top < n) {
        int32_t lo = work[s_at++], hi = work[l_top];
        t->alias[lo] = hi;
        t->prob[hi] -= 1.0 - t->prob[lo];
        if (t->prob[hi] < 1.0) {
            /* hi becomes small: it moves from the large region to the small stack's end,
             * which is always free because s_top <= l_top. */
            l_top++;
            work[s_top++] = hi;
        }
    }
    for (int64_t i = 0; i < n; i++) /* rounding leftovers are full columns */
        if (t->alias[i] == i)
            t->prob[i] = 1.0;
    free(work);
    return true;
}

static int64_t alias_draw(const alias_table *t, rng *r)
{
    int64_t i = rng_below(r, t->n);
    return rng_uniform(r) < t->prob[i] ? i : t->alias[i];
}

static void sample_chung_lu_pair(void *ctx, rng *r, int64_t *u, int64_t *v)
{
    const alias_table *t = ctx;
    *u = t->node[alias_draw(t, r)];
    *v = t->node[alias_draw(t, r)];
}

/* Integral of x^-a over [lo, hi]: the continuous stand-in for sum (i + i0)^-a. */
static double power_integral(double lo, double hi, double a)
{
    if (fabs(a - 1.0) < 1e-12)
        return log(hi / lo);
    return (pow(hi, 1.0 - a) - pow(lo, 1.0 - a)) / (1.0 - a);
}

/* Chung-Lu weights w_r = (r + i0)^-a with a = 1 / (exponent - 1), which gives degree
 * distribution P(k) ~ k^-exponent (Chung & Lu 2002). The offset i0 caps the largest
 * expected degree at the structural cutoff sqrt(2E) (Boguna, Pastor-Satorras & Vespignani
 * 2004); without it, the hub of a 2.1 graph would want most of the graph as neighbours
 * and nearly all of its draws would be duplicates. */
static double chung_lu_offset(int64_t n, int64_t edges, double a)
{
    double cutoff = sqrt(2.0 * (double)edges);
    if (cutoff > (double)(n - 1))
        cutoff = (double)(n - 1);
    double lo = 1.0, hi = (double)n;
    for (int it = 0; it < 100; it++) {
        double i0 = sqrt(lo * hi);
        double top = 2.0 * (double)edges * pow(i0, -a) /
                     power_integral(i0 - 0.5, (double)n + i0 - 0.5, a);
        if (top > cutoff)
            lo = i0;
        else
            hi = i0;
    }
    return hi;
}

bv_status bv_graph_synth_powerlaw(const bv_synth_powerlaw *p, bv_graph_dataset **out,
                                  bv_error *err)
{
    *out = NULL;
    const char *what = "powerlaw";
    bv_status s = check_sizes(what, p->nodes, p->features, p->classes, err);
    if (s != BV_OK)
        return s;
    int64_t n = p->nodes, f = p->features, c = p->classes;
    if (n < 10) /* the split takes n / 10 each for train and val */
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s: nodes must be at least 10, not %lld (the 10%% training split "
                            "would be empty)",
                            what, (long long)n);
    if (p->edges < 0 || (double)p->edges > (double)n * (double)(n - 1) / 2.0)
        return bv_error_set(err, BV_ERR_INVALID, "%s: %lld edges impossible with %lld nodes",
                            what, (long long)p->edges, (long long)n);
    if (!(p->exponent > 1.0))
        return bv_error_set(err, BV_ERR_INVALID, "%s: exponent must be above 1, not %g", what,
                            p->exponent);
    bv_graph_dataset *g = dataset_new("powerlaw", n, f, (int32_t)c, true);
    double *weight = malloc((size_t)n * sizeof *weight);
    int32_t *node = malloc((size_t)n * sizeof *node);
    alias_table table = {0};
    float *teacher = NULL, *score = NULL;
    double *mean = NULL;
    if (!g || !weight || !node) {
        s = bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory", what);
        goto done;
    }
    rng r;
    rng_seed(&r, p->seed);

    /* Degree ranks land on random ids, so the hubs are spread over the id range (a
     * contiguous-range partition is not handed all of them). */
    double a = 1.0 / (p->exponent - 1.0);
    double i0 = chung_lu_offset(n, p->edges, a);
    for (int64_t k = 0; k < n; k++) {
        weight[k] = pow((double)k + i0, -a);
        node[k] = (int32_t)k;
    }
    shuffle_int32(&r, node, n);
    if (!alias_build(&table, weight, n)) {
        s = bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory", what);
        goto done;
    }
    free(weight);
    weight = NULL;
    table.node = node;
    uint64_t *keys = NULL;
    s = sample_edge_set(n, p->edges, sample_chung_lu_pair, &table, &r, &keys, err);
    if (s == BV_OK)
        s = adj_from_keys(n, keys, p->edges, &g->adj, err);
    free(keys);
    if (s != BV_OK)
        goto done;
    g->num_undirected_edges = p->edges;

    /* Features N(0, 1). Labels from a random linear teacher W (f x c) applied to the
     * node's features plus the mean of its neighbours' (by linearity: score = XW plus the
     * neighbour mean of XW), so one round of message passing can recover them. */
    rng_gaussian_fill(&r, g->features, (size_t)n * (size_t)f);
    teacher = malloc((size_t)f * (size_t)c * sizeof *teacher);
    score = malloc((size_t)n * (size_t)c * sizeof *score);
    mean = malloc((size_t)c * sizeof *mean);
    if (!teacher || !score || !mean) {
        s = bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory", what);
        goto done;
    }
    rng_gaussian_fill(&r, teacher, (size_t)f * (size_t)c);
    for (int64_t i = 0; i < n; i++) {
        float *out_row = score + i * c;
        const float *x = g->features + i * f;
        for (int64_t k = 0; k < c; k++)
            out_row[k] = 0.0f;
        for (int64_t j = 0; j < f; j++)
            for (int64_t k = 0; k < c; k++)
                out_row[k] += x[j] * teacher[j * c + k];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t begin = g->adj.rowptr[i], end = g->adj.rowptr[i + 1];
        for (int64_t k = 0; k < c; k++)
            mean[k] = 0.0;
        for (int64_t e = begin; e < end; e++)
            for (int64_t k = 0; k < c; k++)
                mean[k] += score[g->adj.colidx[e] * c + k];
        int32_t best = 0;
        double best_score = -INFINITY;
        for (int64_t k = 0; k < c; k++) {
            double total = score[i * c + k] + (end > begin ? mean[k] / (double)(end - begin) : 0.0);
            if (total > best_score) {
                best_score = total;
                best = (int32_t)k;
            }
        }
        g->labels[i] = best;
    }

    /* Split over a random permutation: 10% train, 10% val, the other 80% test. */
    for (int64_t k = 0; k < n; k++)
        node[k] = (int32_t)k;
    shuffle_int32(&r, node, n);
    for (int64_t k = 0; k < n; k++) {
        int which = k < n / 10 ? BV_SPLIT_TRAIN : k < 2 * (n / 10) ? BV_SPLIT_VAL : BV_SPLIT_TEST;
        g->split[node[k]] = (uint8_t)which;
        g->split_count[which]++;
    }
done:
    free(weight);
    free(node);
    free(table.prob);
    free(table.alias);
    free(teacher);
    free(score);
    free(mean);
    if (s != BV_OK) {
        bv_graph_free(g);
        return s;
    }
    *out = g;
    return BV_OK;
}
