/* Tests for graph partitioning (core/src/data/graph_partition.c): range and METIS splits,
 * determinism, the halos checked against brute force, per-part CSRs whose partitioned SpMM
 * equals the whole graph's bit for bit on Cora, traffic prediction, and the error messages.
 * BIVOUAC_PARTITION_BENCH=1 also times the 1M-vertex power-law graph. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bivouac/graph.h"
#include "graph_partition.h"

#define TEST_RNG_SEED 0x70617274ull
#include "test_support.h"

/* --- helpers ------------------------------------------------------------------------ */

/* A CSR from directed pairs (row, column), rows and columns in the order given. */
static bv_csr *csr_from_arcs(int64_t n, const int32_t (*arcs)[2], int64_t m)
{
    bv_csr *c = bv_csr_new(n, n, m);
    assert_non_null(c);
    free(c->values);
    c->values = NULL;
    for (int64_t k = 0; k < m; k++)
        c->rowptr[arcs[k][0] + 1]++;
    for (int64_t r = 0; r < n; r++)
        c->rowptr[r + 1] += c->rowptr[r];
    int64_t *next = malloc((size_t)(n + 1) * sizeof *next);
    assert_non_null(next);
    memcpy(next, c->rowptr, (size_t)(n + 1) * sizeof *next);
    for (int64_t k = 0; k < m; k++)
        c->colidx[next[arcs[k][0]]++] = arcs[k][1];
    free(next);
    return c;
}

/* The path 0 - 1 - ... - (n-1), both directions. */
static bv_csr *path_graph(int64_t n)
{
    int32_t(*arcs)[2] = malloc((size_t)(2 * n) * sizeof *arcs);
    assert_non_null(arcs);
    int64_t m = 0;
    for (int32_t v = 0; v + 1 < n; v++) {
        arcs[m][0] = v, arcs[m++][1] = v + 1;
        arcs[m][0] = v + 1, arcs[m++][1] = v;
    }
    bv_csr *c = csr_from_arcs(n, (const int32_t(*)[2])arcs, m);
    free(arcs);
    return c;
}

static bv_partition *partition(const bv_csr *adj, bv_partition_method method, int32_t parts)
{
    bv_partition_opts o = {.method = method, .parts = parts, .seed = 42};
    bv_partition *pt = NULL;
    bv_error err;
    bv_error_clear(&err);
    bv_status st = bv_partition_new(adj, &o, &pt, &err);
    if (st != BV_OK)
        fail_msg("partition into %d: %s", parts, err.msg);
    assert_non_null(pt);
    return pt;
}

static void expect_partition_error(const bv_csr *adj, bv_partition_method method,
                                   int32_t parts, const char *want)
{
    bv_partition_opts o = {.method = method, .parts = parts, .seed = 1};
    bv_partition *pt = (bv_partition *)&pt; /* must be reset to NULL */
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(bv_partition_new(adj, &o, &pt, &err), BV_ERR_INVALID);
    assert_null(pt);
    assert_string_equal(err.msg, want);
}

static bv_graph_dataset *cora;

static int load_cora(void **state)
{
    const char *data = getenv("BIVOUAC_DATA_DIR");
    if (!data || !*data)
        return 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/cora", data);
    bv_error err;
    bv_error_clear(&err);
    if (bv_graph_load_dir(dir, getenv("BIVOUAC_CACHE_DIR"), &cora, &err) != BV_OK) {
        print_message("cora not loaded (%s): its tests are skipped\n", err.msg);
        cora = NULL;
    }
    return 0;
}

static int free_cora(void **state)
{
    bv_graph_free(cora);
    return 0;
}

#define NEED_CORA()                                                                        \
    do {                                                                                   \
        if (!cora)                                                                         \
            skip();                                                                        \
    } while (0)

/* y = m x, one row at a time in m's entry order (the order the CPU kernel sums in). */
static void spmm(const bv_csr *m, const float *x, int64_t f, float *y)
{
    for (int64_t r = 0; r < m->nrows; r++) {
        float *yr = y + r * f;
        memset(yr, 0, (size_t)f * sizeof *yr);
        for (int64_t e = m->rowptr[r]; e < m->rowptr[r + 1]; e++) {
            float w = m->values ? m->values[e] : 1.0f;
            const float *xr = x + (int64_t)m->colidx[e] * f;
            for (int64_t j = 0; j < f; j++)
                yr[j] += w * xr[j];
        }
    }
}

/* Checks every part's halo in direction dir against brute force over m's rows: the ghosts
 * are exactly the remote columns of its rows, grouped by owner and ascending, and what
 * each owner sends is that block, as its local ids. */
static void check_halos(const bv_partition *pt, const bv_csr *m, bv_partition_dir dir)
{
    int64_t n = pt->num_vertices;
    char *need = malloc((size_t)n);
    assert_non_null(need);
    for (int32_t p = 0; p < pt->parts; p++) {
        const bv_partition_part *part = &pt->part[p];
        const bv_partition_halo *h = &part->halo[dir];
        memset(need, 0, (size_t)n);
        int64_t count = 0;
        for (int64_t v = 0; v < n; v++) {
            if (pt->part_of[v] != p)
                continue;
            assert_int_equal(part->owned[pt->local_of[v]], v);
            for (int64_t e = m->rowptr[v]; e < m->rowptr[v + 1]; e++) {
                int32_t u = m->colidx[e];
                if (pt->part_of[u] != p && !need[u]) {
                    need[u] = 1;
                    count++;
                }
            }
        }
        assert_int_equal(h->num_ghosts, count);
        assert_int_equal(h->ghost_ptr[0], 0);
        assert_int_equal(h->ghost_ptr[pt->parts], count);
        assert_int_equal(h->ghost_ptr[p], h->ghost_ptr[p + 1]);
        for (int32_t q = 0; q < pt->parts; q++)
            for (int64_t i = h->ghost_ptr[q]; i < h->ghost_ptr[q + 1]; i++) {
                int32_t u = h->ghosts[i];
                assert_true(need[u]);
                assert_int_equal(pt->part_of[u], q);
                if (i > h->ghost_ptr[q])
                    assert_true(h->ghosts[i - 1] < u);
                /* q sends p the same vertex at the same position */
                const bv_partition_halo *hq = &pt->part[q].halo[dir];
                int64_t at = hq->send_ptr[p] + (i - h->ghost_ptr[q]);
                assert_true(at < hq->send_ptr[p + 1]);
                assert_int_equal(pt->part[q].owned[hq->send[at]], u);
            }
        assert_int_equal(h->send_ptr[pt->parts], h->num_send);
    }
    free(need);
}

static int64_t brute_force_cut(const bv_partition *pt, const bv_csr *adj)
{
    int64_t arcs = 0;
    for (int64_t v = 0; v < adj->nrows; v++)
        for (int64_t e = adj->rowptr[v]; e < adj->rowptr[v + 1]; e++)
            arcs += pt->part_of[v] != pt->part_of[adj->colidx[e]];
    return arcs / 2; /* symmetric input: each edge twice */
}

/* Gather over the parts, as G graph servers would: each part holds only its own rows of
 * x, packs what the others need by its send lists, unpacks what it receives into its ghost
 * rows, and multiplies its local rows. The result must equal the whole graph's y bit for
 * bit. m: the matrix (FWD) or its transpose (BWD). */
static void check_partitioned_spmm(const bv_partition *pt, bv_partition_dir dir,
                                   const bv_csr *m, const float *x, int64_t f, const float *y)
{
    int32_t G = pt->parts;
    float **own = malloc((size_t)G * sizeof *own);
    assert_non_null(own);
    for (int32_t p = 0; p < G; p++) { /* each server's own rows */
        const bv_partition_part *part = &pt->part[p];
        own[p] = zeros(part->num_owned * f);
        for (int64_t i = 0; i < part->num_owned; i++)
            memcpy(own[p] + i * f, x + (int64_t)part->owned[i] * f, (size_t)f * sizeof(float));
    }
    for (int32_t p = 0; p < G; p++) {
        const bv_partition_part *part = &pt->part[p];
        const bv_partition_halo *h = &part->halo[dir];
        bv_csr *local = NULL;
        bv_error err;
        bv_error_clear(&err);
        if (bv_partition_local_csr(pt, p, dir, m, &local, &err) != BV_OK)
            fail_msg("local csr of part %d: %s", p, err.msg);
        assert_int_equal(local->nrows, part->num_owned);
        assert_int_equal(local->ncols, part->num_owned + h->num_ghosts);
        /* local edge k of row i is m's edge rowptr[owned[i]] + (k - local rowptr[i]), and
         * its column maps back to the same vertex (how per-edge arrays are cut to a part) */
        for (int64_t i = 0; i < local->nrows; i++)
            for (int64_t k = local->rowptr[i]; k < local->rowptr[i + 1]; k++) {
                int64_t e = m->rowptr[part->owned[i]] + (k - local->rowptr[i]);
                int32_t c = local->colidx[k];
                int32_t global = c < part->num_owned ? part->owned[c]
                                                     : h->ghosts[c - part->num_owned];
                assert_int_equal(global, m->colidx[e]);
                assert_true(local->values[k] == (m->values ? m->values[e] : 1.0f));
            }
        float *in = zeros((part->num_owned + h->num_ghosts) * f);
        memcpy(in, own[p], (size_t)(part->num_owned * f) * sizeof(float));
        for (int32_t q = 0; q < G; q++) { /* q's message to p, packed by q's send list */
            const bv_partition_halo *hq = &pt->part[q].halo[dir];
            float *dst = in + (part->num_owned + h->ghost_ptr[q]) * f;
            for (int64_t k = hq->send_ptr[p]; k < hq->send_ptr[p + 1]; k++, dst += f)
                memcpy(dst, own[q] + (int64_t)hq->send[k] * f, (size_t)f * sizeof(float));
            assert_ptr_equal(dst, in + (part->num_owned + h->ghost_ptr[q + 1]) * f);
        }
        float *out = zeros(part->num_owned * f);
        spmm(local, in, f, out);
        for (int64_t i = 0; i < part->num_owned; i++)
            if (memcmp(out + i * f, y + (int64_t)part->owned[i] * f, (size_t)f * sizeof(float)))
                fail_msg("part %d of %d, row %d differs from the whole graph's", p, G,
                         part->owned[i]);
        free(out);
        free(in);
        bv_csr_free(local);
    }
    for (int32_t p = 0; p < G; p++)
        free(own[p]);
    free(own);
}

/* --- small graphs --------------------------------------------------------------------- */

static void test_range_splits_a_path_into_contiguous_ranges(void **state)
{
    bv_csr *adj = path_graph(10);
    bv_partition *pt = partition(adj, BV_PARTITION_RANGE, 3);
    static const int32_t want_part[10] = {0, 0, 0, 0, 1, 1, 1, 2, 2, 2};
    assert_memory_equal(pt->part_of, want_part, sizeof want_part);
    assert_true(pt->symmetric);
    assert_int_equal(pt->edge_cut, 2); /* 3-4 and 6-7 */
    assert_int_equal(pt->part[1].num_owned, 3);
    assert_int_equal(pt->part[1].owned[0], 4);
    assert_int_equal(pt->part[1].num_edges, 6);
    const bv_partition_halo *h1 = &pt->part[1].halo[BV_PARTITION_FWD];
    assert_int_equal(h1->num_ghosts, 2);
    assert_int_equal(h1->ghosts[0], 3);
    assert_int_equal(h1->ghosts[1], 7);
    static const int64_t want_ptr[4] = {0, 1, 1, 2};
    assert_memory_equal(h1->ghost_ptr, want_ptr, sizeof want_ptr);
    /* part 0 sends part 1 vertex 3, its local row 3; part 2 sends vertex 7, its row 0 */
    const bv_partition_halo *h0 = &pt->part[0].halo[BV_PARTITION_FWD];
    assert_int_equal(h0->num_send, 1);
    assert_int_equal(h0->send_ptr[1], 0);
    assert_int_equal(h0->send_ptr[2], 1);
    assert_int_equal(h0->send[0], 3);
    assert_int_equal(pt->part[2].halo[BV_PARTITION_FWD].send[0], 0);
    /* symmetric: backward is the same exchange */
    assert_ptr_equal(pt->part[1].halo[BV_PARTITION_BWD].ghosts, h1->ghosts);
    check_halos(pt, adj, BV_PARTITION_FWD);
    bv_partition_free(pt);
    bv_csr_free(adj);
}

static void test_one_part_is_the_identity(void **state)
{
    bv_csr *adj = path_graph(6);
    for (int method = BV_PARTITION_RANGE; method <= BV_PARTITION_METIS; method++) {
        bv_partition *pt = partition(adj, (bv_partition_method)method, 1);
        assert_int_equal(pt->edge_cut, 0);
        assert_int_equal(pt->part[0].num_owned, 6);
        assert_int_equal(pt->part[0].num_edges, adj->nnz);
        assert_int_equal(pt->part[0].halo[BV_PARTITION_FWD].num_ghosts, 0);
        assert_int_equal(pt->part[0].halo[BV_PARTITION_FWD].num_send, 0);
        for (int32_t v = 0; v < 6; v++) {
            assert_int_equal(pt->part_of[v], 0);
            assert_int_equal(pt->local_of[v], v);
        }
        bv_csr *local = NULL;
        bv_error err;
        assert_int_equal(bv_partition_local_csr(pt, 0, BV_PARTITION_FWD, adj, &local, &err),
                         BV_OK);
        assert_memory_equal(local->rowptr, adj->rowptr, 7 * sizeof *adj->rowptr);
        assert_memory_equal(local->colidx, adj->colidx, (size_t)adj->nnz * sizeof *adj->colidx);
        bv_csr_free(local);
        bv_partition_free(pt);
    }
    bv_csr_free(adj);
}

static void test_directed_graph_has_separate_backward_halos(void **state)
{
    /* arcs (row, column): row 1 gathers 0, row 3 gathers 2, row 0 gathers 3, 1 <-> 2 */
    static const int32_t arcs[][2] = {{1, 0}, {3, 2}, {0, 3}, {1, 2}, {2, 1}};
    bv_csr *adj = csr_from_arcs(4, arcs, 5);
    bv_partition *pt = partition(adj, BV_PARTITION_RANGE, 2); /* {0,1} {2,3} */
    assert_false(pt->symmetric);
    /* symmetrised edges 0-1, 2-3, 0-3, 1-2: two cross */
    assert_int_equal(pt->edge_cut, 2);
    const bv_partition_halo *f0 = &pt->part[0].halo[BV_PARTITION_FWD];
    const bv_partition_halo *b0 = &pt->part[0].halo[BV_PARTITION_BWD];
    assert_int_equal(f0->num_ghosts, 2); /* row 0 gathers 3, row 1 gathers 2 */
    assert_int_equal(f0->ghosts[0], 2);
    assert_int_equal(f0->ghosts[1], 3);
    assert_int_equal(b0->num_ghosts, 1); /* transpose: only row 1 gathers 2 */
    assert_int_equal(b0->ghosts[0], 2);
    bv_csr *t = bv_csr_transpose(adj);
    check_halos(pt, adj, BV_PARTITION_FWD);
    check_halos(pt, t, BV_PARTITION_BWD);
    float x[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8}, y[4 * 2], yt[4 * 2];
    spmm(adj, x, 2, y);
    spmm(t, x, 2, yt);
    check_partitioned_spmm(pt, BV_PARTITION_FWD, adj, x, 2, y);
    check_partitioned_spmm(pt, BV_PARTITION_BWD, t, x, 2, yt);
    bv_csr_free(t);
    bv_partition_free(pt);
    bv_csr_free(adj);
}

static void test_metis_on_a_graph_without_edges(void **state)
{
    bv_csr *adj = csr_from_arcs(5, NULL, 0);
    bv_partition *pt = partition(adj, BV_PARTITION_METIS, 2);
    assert_int_equal(pt->edge_cut, 0);
    assert_int_equal(pt->part[0].num_owned + pt->part[1].num_owned, 5);
    assert_true(pt->part[0].num_owned > 0 && pt->part[1].num_owned > 0);
    bv_partition_free(pt);
    bv_csr_free(adj);
}

static void test_empty_graph(void **state)
{
    bv_csr *adj = csr_from_arcs(0, NULL, 0);
    bv_partition *pt = partition(adj, BV_PARTITION_METIS, 1);
    assert_int_equal(pt->num_vertices, 0);
    assert_int_equal(pt->part[0].num_owned, 0);
    bv_partition_traffic t = bv_partition_predict_traffic(pt, 1, (const int64_t[]){16});
    assert_int_equal(t.total_bytes, 0);
    bv_partition_free(pt);
    expect_partition_error(adj, BV_PARTITION_RANGE, 2,
                           "cannot split 0 vertices into 2 parts: every graph server needs a "
                           "vertex (use at most 1)");
    bv_csr_free(adj);
}

static void test_errors_name_the_problem(void **state)
{
    bv_csr *adj = path_graph(4);
    expect_partition_error(adj, BV_PARTITION_METIS, 5,
                           "cannot split 4 vertices into 5 parts: every graph server needs a "
                           "vertex (use at most 4)");
    expect_partition_error(adj, BV_PARTITION_RANGE, 0,
                           "cannot split a graph into 0 parts: at least 1");
    adj->colidx[2] = 9;
    expect_partition_error(adj, BV_PARTITION_RANGE, 2,
                           "the graph: row 1 has column 9, outside [0, 4)");
    adj->colidx[2] = 2;
    adj->ncols = 5;
    expect_partition_error(adj, BV_PARTITION_RANGE, 2,
                           "the graph is 4 x 5: a graph's matrix is square");
    adj->ncols = 4;

    /* a matrix with an edge the partition does not know (3 -> 0) */
    bv_partition *pt = partition(adj, BV_PARTITION_RANGE, 2);
    static const int32_t arcs[][2] = {{0, 1}, {3, 0}};
    bv_csr *other = csr_from_arcs(4, arcs, 2);
    bv_csr *local = (bv_csr *)&local;
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(bv_partition_local_csr(pt, 1, BV_PARTITION_FWD, other, &local, &err),
                     BV_ERR_INVALID);
    assert_null(local);
    assert_string_equal(err.msg, "the matrix's entry (3, 0) is not an edge of the partitioned "
                                 "graph (forward): part 1 has no row for vertex 0");
    assert_int_equal(bv_partition_local_csr(pt, 2, BV_PARTITION_FWD, adj, &local, &err),
                     BV_ERR_INVALID);
    assert_string_equal(err.msg, "no part 2 (the partition has 2)");
    bv_csr_free(other);
    bv_partition_free(pt);
    bv_csr_free(adj);
}

static void test_method_names(void **state)
{
    bv_partition_method m = BV_PARTITION_RANGE;
    assert_true(bv_partition_method_parse("metis", &m));
    assert_int_equal(m, BV_PARTITION_METIS);
    assert_string_equal(bv_partition_method_name(m), "metis");
    assert_true(bv_partition_method_parse("range", &m));
    assert_int_equal(m, BV_PARTITION_RANGE);
    assert_string_equal(bv_partition_method_name(m), "range");
    assert_false(bv_partition_method_parse("random", &m));
    assert_false(bv_partition_method_parse(NULL, &m));
}

/* --- Cora --------------------------------------------------------------------------- */

static void test_metis_is_deterministic_on_cora(void **state)
{
    NEED_CORA();
    bv_partition *a = partition(&cora->adj, BV_PARTITION_METIS, 4);
    bv_partition *b = partition(&cora->adj, BV_PARTITION_METIS, 4);
    assert_memory_equal(a->part_of, b->part_of, (size_t)cora->num_nodes * sizeof(int32_t));
    assert_int_equal(a->fingerprint, b->fingerprint);
    assert_int_equal(a->edge_cut, b->edge_cut);
    for (int32_t p = 0; p < 4; p++) {
        const bv_partition_halo *x = &a->part[p].halo[BV_PARTITION_FWD];
        const bv_partition_halo *y = &b->part[p].halo[BV_PARTITION_FWD];
        assert_int_equal(x->num_ghosts, y->num_ghosts);
        assert_memory_equal(x->ghosts, y->ghosts, (size_t)x->num_ghosts * sizeof *x->ghosts);
    }
    bv_partition *r = partition(&cora->adj, BV_PARTITION_RANGE, 4);
    assert_true(r->fingerprint != a->fingerprint);
    bv_partition_free(r);
    bv_partition_free(a);
    bv_partition_free(b);
}

/* METIS seeds libc's rand() itself: what the process drew before does not matter, and two
 * threads partitioning at once (roles in one process) agree. */
static void *partition_thread(void *arg)
{
    return partition(&cora->adj, BV_PARTITION_METIS, 3);
}

static void test_metis_ignores_rand_and_threads_on_cora(void **state)
{
    NEED_CORA();
    bv_partition *a = partition(&cora->adj, BV_PARTITION_METIS, 3);
    srand(12345);
    for (int i = 0; i < 1000; i++)
        (void)rand();
    bv_partition *b = partition(&cora->adj, BV_PARTITION_METIS, 3);
    assert_int_equal(a->fingerprint, b->fingerprint);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, partition_thread, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *pt = NULL;
        assert_int_equal(pthread_join(th[i], &pt), 0);
        assert_memory_equal(((bv_partition *)pt)->part_of, a->part_of,
                            (size_t)cora->num_nodes * sizeof(int32_t));
        bv_partition_free(pt);
    }
    bv_partition_free(a);
    bv_partition_free(b);
}

static void test_cora_partitions_cut_and_halos(void **state)
{
    NEED_CORA();
    for (int method = BV_PARTITION_RANGE; method <= BV_PARTITION_METIS; method++)
        for (int32_t G = 2; G <= 4; G++) {
            bv_partition *pt = partition(&cora->adj, (bv_partition_method)method, G);
            assert_true(pt->symmetric); /* the loader's adjacency is symmetric */
            assert_int_equal(pt->edge_cut, brute_force_cut(pt, &cora->adj));
            int64_t owned = 0, edges = 0;
            for (int32_t p = 0; p < G; p++) {
                assert_true(pt->part[p].num_owned > 0);
                owned += pt->part[p].num_owned;
                edges += pt->part[p].num_edges;
            }
            assert_int_equal(owned, cora->num_nodes);
            assert_int_equal(edges, cora->adj.nnz);
            check_halos(pt, &cora->adj, BV_PARTITION_FWD);
            print_message("cora %s G=%d: edge cut %lld\n",
                          bv_partition_method_name((bv_partition_method)method), G,
                          (long long)pt->edge_cut);
            bv_partition_free(pt);
        }
}

static void test_partitioned_spmm_matches_whole_graph_on_cora(void **state)
{
    NEED_CORA();
    bv_csr *a = bv_graph_gcn_norm_adj(cora); /* with self loops and values, as GA uses */
    assert_non_null(a);
    bv_csr *at = bv_csr_transpose(a);
    assert_non_null(at);
    const int64_t f = 7, n = cora->num_nodes;
    float *x = random_floats(n * f, -1.0f, 1.0f);
    float *y = zeros(n * f), *yt = zeros(n * f);
    spmm(a, x, f, y);
    spmm(at, x, f, yt);
    for (int method = BV_PARTITION_RANGE; method <= BV_PARTITION_METIS; method++)
        for (int32_t G = 1; G <= 3; G++) {
            bv_partition *pt = partition(&cora->adj, (bv_partition_method)method, G);
            check_partitioned_spmm(pt, BV_PARTITION_FWD, a, x, f, y);
            check_partitioned_spmm(pt, BV_PARTITION_BWD, at, x, f, yt);
            bv_partition_free(pt);
        }
    free(x);
    free(y);
    free(yt);
    bv_csr_free(at);
    bv_csr_free(a);
}

static void test_predicted_traffic_on_cora(void **state)
{
    NEED_CORA();
    bv_partition *pt = partition(&cora->adj, BV_PARTITION_RANGE, 2);
    int64_t ghosts = pt->part[0].halo[BV_PARTITION_FWD].num_ghosts +
                     pt->part[1].halo[BV_PARTITION_FWD].num_ghosts;
    const int64_t widths[2] = {16, 7}; /* GCN: hidden 16, 7 classes */
    bv_partition_traffic t = bv_partition_predict_traffic(pt, 2, widths);
    assert_int_equal(t.forward_bytes, ghosts * 23 * 4);
    assert_int_equal(t.backward_bytes, t.forward_bytes);
    assert_int_equal(t.total_bytes, 2 * t.forward_bytes);
    int64_t g0 = pt->part[0].halo[BV_PARTITION_FWD].num_ghosts;
    int64_t g1 = ghosts - g0;
    assert_int_equal(t.max_part_recv_bytes, (g0 > g1 ? g0 : g1) * 23 * 4 * 2);
    bv_partition_free(pt);
}

/* --- numbers for docs/partitioning.md (BIVOUAC_PARTITION_BENCH=1) ------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void report(const char *name, const bv_csr *adj, bv_partition_method method, int32_t G,
                   const int64_t *widths, int layers)
{
    double t0 = now_s();
    bv_partition *pt = partition(adj, method, G);
    double secs = now_s() - t0;
    bv_partition_traffic t = bv_partition_predict_traffic(pt, layers, widths);
    int64_t ghosts = 0, max_owned = 0;
    for (int32_t p = 0; p < G; p++) {
        ghosts += pt->part[p].halo[BV_PARTITION_FWD].num_ghosts;
        if (pt->part[p].num_owned > max_owned)
            max_owned = pt->part[p].num_owned;
    }
    print_message("| %s | %s | %d | %lld | %.1f %% | %lld | %lld | %lld | %.3f |\n", name,
                  bv_partition_method_name(method), G, (long long)pt->edge_cut,
                  100.0 * (double)pt->edge_cut / (double)(adj->nnz / 2), (long long)ghosts,
                  (long long)max_owned, (long long)t.total_bytes, secs);
    bv_partition_free(pt);
}

static void test_bench_numbers(void **state)
{
    const char *on = getenv("BIVOUAC_PARTITION_BENCH");
    if (!on || strcmp(on, "1") != 0)
        skip();
    print_message("| graph | method | G | edge cut | of edges | ghosts | largest part | "
                  "bytes/epoch | seconds |\n");
    const char *data = getenv("BIVOUAC_DATA_DIR");
    static const char *const names[2] = {"cora", "citeseer"};
    for (int d = 0; d < 2 && data; d++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", data, names[d]);
        bv_graph_dataset *g = NULL;
        bv_error err;
        if (bv_graph_load_dir(dir, getenv("BIVOUAC_CACHE_DIR"), &g, &err) != BV_OK)
            fail_msg("%s", err.msg);
        const int64_t widths[2] = {16, g->num_classes};
        for (int32_t G = 2; G <= 4; G += 2)
            for (int m = BV_PARTITION_METIS; m >= BV_PARTITION_RANGE; m--)
                report(names[d], &g->adj, (bv_partition_method)m, G, widths, 2);
        bv_graph_free(g);
    }
    bv_synth_powerlaw p = {.nodes = 1000000, .edges = 10000000, .features = 1, .classes = 2,
                           .exponent = 2.1, .seed = 1};
    bv_graph_dataset *g = NULL;
    bv_error err;
    if (bv_graph_synth_powerlaw(&p, &g, &err) != BV_OK)
        fail_msg("%s", err.msg);
    const int64_t widths[2] = {16, 7};
    for (int32_t G = 2; G <= 8; G *= 2)
        for (int m = BV_PARTITION_METIS; m >= BV_PARTITION_RANGE; m--)
            report("powerlaw-1m", &g->adj, (bv_partition_method)m, G, widths, 2);
    bv_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_splits_a_path_into_contiguous_ranges),
        cmocka_unit_test(test_one_part_is_the_identity),
        cmocka_unit_test(test_directed_graph_has_separate_backward_halos),
        cmocka_unit_test(test_metis_on_a_graph_without_edges),
        cmocka_unit_test(test_empty_graph),
        cmocka_unit_test(test_errors_name_the_problem),
        cmocka_unit_test(test_method_names),
        cmocka_unit_test(test_metis_is_deterministic_on_cora),
        cmocka_unit_test(test_metis_ignores_rand_and_threads_on_cora),
        cmocka_unit_test(test_cora_partitions_cut_and_halos),
        cmocka_unit_test(test_partitioned_spmm_matches_whole_graph_on_cora),
        cmocka_unit_test(test_predicted_traffic_on_cora),
        cmocka_unit_test(test_bench_numbers),
    };
    return cmocka_run_group_tests(tests, load_cora, free_cora);
}
