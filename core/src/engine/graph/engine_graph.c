/* The graph engine's coordinator side: lays out parameters and intervals, starts the role
 * threads, and drives epochs by messages (engine_graph.h). */
#include "engine_graph.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "bivouac/series.h"
#include "device_mem.h"
#include "engine_graph_internal.h"
#include "graph_partition.h"
#include "lambda_pool.h"
#include "ledger.h"
#include "node_group.h"
#include "role_loop.h"
#include "plugin_arrays.h"
#include "rng.h"

static atomic_int engine_counter;

bv_endpoint *bv_engine_connect(bv_graph_engine *e, const char *addr, bv_error *err)
{
    return e->cfg.transport_ops->connect(e->transport, addr, err);
}

bv_status bv_engine_connect_workers(bv_graph_engine *e, char (*addrs)[BV_ADDR_LEN],
                                    bv_endpoint **out, bv_error *err)
{
    for (int i = 0; i < e->cfg.tensor_workers; i++)
        if (!(out[i] = e->fn_transport
                           ? e->cfg.transport_ops->connect(e->fn_transport, addrs[i], err)
                           : bv_engine_connect(e, addrs[i], err)))
            return err->status;
    return BV_OK;
}

const bv_compute_ops *bv_engine_movers(const bv_graph_engine *e)
{
    static const bv_compute_ops host; /* neither op: compute.h's host loops */
    const bv_compute_ops *k = e->cfg.compute_ops;
    return k->mem_alloc && !e->shm ? k : &host;
}

bv_status bv_engine_connect_servers(bv_graph_engine *e, bv_endpoint **out, bv_error *err)
{
    for (int i = 0; i < e->nps; i++)
        if (!(out[i] = bv_engine_connect(e, e->addr_ps[i], err)))
            return err->status;
    return BV_OK;
}

bv_status bv_engine_connect_graph_servers(bv_graph_engine *e, bv_endpoint **out, bv_error *err)
{
    for (int i = 0; i < e->ngs; i++)
        if (!(out[i] = bv_engine_connect(e, e->addr_gs[i], err)))
            return err->status;
    return BV_OK;
}

void bv_engine_close_all(const bv_graph_engine *e, bv_endpoint *const *eps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (eps[i])
            e->cfg.transport_ops->close(eps[i]);
}

size_t bv_graph_engine_param_floats(const bv_graph_engine *e)
{
    return e->param_floats;
}

/* Waits for a message of `type` on the coordinator's inbox; an ERROR fails, and so does
 * a role process that ends (role_launch.c). */
static bv_status coord_wait(bv_graph_engine *e, uint16_t type, bv_role_msg *m, bv_error *err)
{
    if (e->procs)
        return bv_engine_coord_wait(e, type, 0, m, err);
    return bv_role_wait(e->cfg.transport_ops, e->coord_in, "coordinator", type,
                        &e->frames_dropped, m, err);
}

/* Sends a request without arrays to one role and waits for its reply. */
static bv_status coord_ask(bv_graph_engine *e, bv_endpoint *to, uint16_t type,
                           const bv_task_hdr *h, uint16_t reply_type, bv_role_msg *reply,
                           bv_error *err)
{
    bv_status st = bv_engine_coord_send(e, to, type, h, NULL, 0, NULL, 0, NULL, 0, err);
    return st == BV_OK ? coord_wait(e, reply_type, reply, err) : st;
}

/* adj + I as a structure-only CSR, each self loop in its sorted place; rows from
 * `looped` on (a part's ghosts, whose own edges are their owner's) stay as they are. */
static bv_csr *csr_with_self_loops(const bv_csr *adj, int64_t looped)
{
    int64_t n = adj->nrows;
    bv_csr *a = bv_csr_new(n, adj->ncols, adj->nnz + n);
    if (!a)
        return NULL;
    bv_free_aligned(a->values);
    a->values = NULL;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        a->rowptr[i] = k;
        bool placed = i >= looped;
        for (int64_t e = adj->rowptr[i]; e < adj->rowptr[i + 1]; e++) {
            if (!placed && adj->colidx[e] > i) {
                a->colidx[k++] = (int32_t)i;
                placed = true;
            }
            if (adj->colidx[e] != i) /* the datasets have none; never count one twice */
                a->colidx[k++] = adj->colidx[e];
        }
        if (!placed)
            a->colidx[k++] = (int32_t)i;
    }
    a->rowptr[n] = k;
    a->nnz = k;
    return a;
}

static bv_status engine_layout(bv_graph_engine *e, bv_error *err)
{
    const bv_model_ops *mo = e->cfg.model_ops;
    e->nparams = mo->param_count(e->cfg.model);
    e->nstages = mo->stage_count(e->cfg.model);
    if (e->nstages == 0)
        return bv_error_set(err, BV_ERR_PLUGIN, "the model has no stages");
    e->params = calloc(e->nparams + 1, sizeof *e->params);
    e->param_off = calloc(e->nparams + 1, sizeof *e->param_off);
    e->stages = calloc(e->nstages, sizeof *e->stages);
    e->stage_copy = calloc(e->nstages, sizeof *e->stage_copy);
    e->interval_begin = calloc((size_t)e->cfg.intervals + 1, sizeof *e->interval_begin);
    e->pipe_stage = calloc(e->nstages, sizeof *e->pipe_stage);
    if (!e->params || !e->param_off || !e->stages || !e->stage_copy || !e->interval_begin ||
        !e->pipe_stage)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < e->nparams; i++) {
        e->params[i] = mo->param(e->cfg.model, i);
        e->param_off[i] = e->param_floats;
        e->param_floats += (size_t)(e->params[i]->rows * e->params[i]->cols);
    }
    e->vin = calloc(e->nstages, sizeof *e->vin);
    e->vin_width = calloc(e->nstages, sizeof *e->vin_width);
    if (!e->vin || !e->vin_width)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    int current = -1; /* the latest vertex array */
    int64_t width = e->cfg.data->num_features;
    for (size_t s = 0; s < e->nstages; s++) {
        /* the plugin's bv_stage may be older (shorter) or newer than ours */
        bv_stage_copy(mo, mo->stage(e->cfg.model, s), &e->stage_copy[s]);
        const bv_stage *st = e->stages[s] = &e->stage_copy[s];
        e->vin[s] = current;
        e->vin_width[s] = width;
        bool windowed = st->kind == BV_STAGE_EDGE || (st->kind == BV_STAGE_GATHER && st->weighted);
        if (windowed ? (st->in_offset < 0 || st->in_dim < 1 || st->in_offset + st->in_dim > width)
                     : (st->in_dim != width || st->in_offset != 0))
            return bv_error_set(err, BV_ERR_PLUGIN,
                                "model stage %s reads %lld values per vertex from offset %lld, "
                                "but its input has %lld", st->name, (long long)st->in_dim,
                                (long long)st->in_offset, (long long)width);
        if (st->kind == BV_STAGE_EDGE) {
            if (st->heads < 1 || st->out_dim != st->heads || !mo->edge_forward ||
                !mo->edge_backward)
                return bv_error_set(err, BV_ERR_PLUGIN, "model stage %s: an edge stage needs "
                                    "heads == out_dim and edge_forward/edge_backward", st->name);
            e->has_edge_stages = true;
            continue; /* its values live on the edges; the vertex array stays */
        }
        if (st->kind == BV_STAGE_GATHER) {
            if (st->out_dim != st->in_dim)
                return bv_error_set(err, BV_ERR_PLUGIN, "gather stage %s changes the width",
                                    st->name);
            e->has_norm_gathers |= !st->weighted;
            if (st->weighted) {
                const bv_stage *w = st->weights_stage < s ? e->stages[st->weights_stage] : NULL;
                if (!w || w->kind != BV_STAGE_EDGE || w->heads != st->heads ||
                    st->in_dim % st->heads != 0 || e->vin[st->weights_stage] != current)
                    return bv_error_set(err, BV_ERR_PLUGIN, "gather stage %s must be weighted by "
                                        "an earlier edge stage over the same vertex array with "
                                        "as many heads", st->name);
            }
        }
        current = (int)s;
        width = st->out_dim;
    }
    if (e->stages[e->nstages - 1]->kind == BV_STAGE_EDGE)
        return bv_error_set(err, BV_ERR_PLUGIN, "the model's last stage is an edge stage");
    if (width != e->cfg.data->num_classes)
        return bv_error_set(err, BV_ERR_PLUGIN, "the model's last stage gives %lld values per "
                            "vertex, the dataset has %d classes", (long long)width,
                            e->cfg.data->num_classes);
    /* a graph server's part: its own rows only (the ghosts are their owners' work) */
    int64_t n = e->view.local ? e->view.owned : e->cfg.data->num_nodes;
    for (int i = 0; i <= e->cfg.intervals; i++)
        e->interval_begin[i] = n * i / e->cfg.intervals;
    return BV_OK;
}

static bv_status engine_spawn(bv_graph_engine *e, bv_error *err)
{
    const bv_transport_ops *t = e->cfg.transport_ops;
    e->coord_in = t->bind(e->transport, e->addr_coord, err);
    if (!e->coord_in)
        return err->status;
    e->tw_args = calloc((size_t)e->cfg.tensor_workers, sizeof *e->tw_args);
    if (!e->tw_args)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    if (pthread_create(&e->gs_thread, NULL, bv_graph_server_main, e) != 0)
        return bv_error_set(err, BV_ERR_INTERNAL, "cannot start the graph server thread");
    e->gs_started = true;
    e->ps_args = calloc((size_t)e->nps, sizeof *e->ps_args);
    if (!e->ps_args)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < e->nps; i++) {
        e->ps_args[i] = (bv_tw_arg){e, i, false};
        if (pthread_create(&e->ps_thread[i], NULL, bv_param_server_main, &e->ps_args[i]) != 0)
            return bv_error_set(err, BV_ERR_INTERNAL, "cannot start parameter server %d", i);
        e->ps_started[i] = true;
    }
    for (int i = 0; i < e->cfg.tensor_workers; i++) {
        e->tw_args[i] = (bv_tw_arg){e, i, false};
        if (pthread_create(&e->tw_thread[i], NULL, bv_tensor_worker_main, &e->tw_args[i]) != 0)
            return bv_error_set(err, BV_ERR_INTERNAL, "cannot start tensor worker %d", i);
        e->tw_started[i] = true;
    }
    bv_status st = bv_engine_connect_graph_servers(e, e->to_gs, err);
    if (st == BV_OK)
        st = bv_engine_connect_servers(e, e->to_ps, err);
    if (st == BV_OK)
        st = bv_engine_connect_workers(e, e->addr_tw, e->to_tw, err);
    if (st != BV_OK)
        return st;
    for (int ready = 0; ready < bv_role_slots(e); ready++) {
        bv_role_msg m;
        st = coord_wait(e, BV_MSG_READY, &m, err);
        if (st != BV_OK)
            return st;
        bv_role_release(t, &m);
    }
    return BV_OK;
}

/* The shared-array table: the dataset's arrays now, the stages' as the graph server
 * makes them. */
static bv_status engine_share(bv_graph_engine *e, bv_error *err)
{
    e->shared = calloc(bv_shared_count(e), sizeof *e->shared);
    if (!e->shared)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    const bv_graph_dataset *d = e->cfg.data;
    size_t n = (size_t)d->num_nodes;
    if (!bv_graph_features_sparse(d)) /* sparse ones travel as rows (role_msg.h) */
        e->shared[BV_SHARED_FEATURES] =
            (bv_shared_array){d->features, n * (size_t)d->num_features * sizeof(float)};
    e->shared[BV_SHARED_LABELS] = (bv_shared_array){d->labels, n * sizeof(int32_t)};
    e->shared[BV_SHARED_SPLIT] = (bv_shared_array){d->split, n};
    return BV_OK;
}

void *bv_engine_shared_window(const bv_graph_engine *e, int gs, const bv_array_ref *ref,
                              size_t bytes, bool write, bv_error *err)
{
    /* in one process, the graph server's table; in a worker's process, the segment's */
    const bv_shared_array *table = !e->serving            ? e->shared
                                   : gs >= 0 && gs < e->ngs ? e->peer_shared[gs]
                                                            : NULL;
    if (!e->cfg.share_arrays || ref->array < 0 || (size_t)ref->array >= bv_shared_count(e) ||
        (write && ref->array < BV_SHARED_STAGES)) {
        bv_error_set(err, BV_ERR_CORRUPT, "task names shared array %lld, which is not one",
                     (long long)ref->array);
        return NULL;
    }
    if (!table) {
        bv_error_set(err, BV_ERR_CORRUPT, "task names the shared arrays of graph server %d, "
                     "which has offered none", gs);
        return NULL;
    }
    const bv_shared_array *a = &table[ref->array];
    if (!a->base || ref->bytes != bytes || ref->offset > a->bytes ||
        ref->bytes > a->bytes - ref->offset) {
        bv_error_set(err, BV_ERR_CORRUPT,
                     "task names bytes [%llu, +%llu) of shared array %lld (%zu bytes, want %zu)",
                     (unsigned long long)ref->offset, (unsigned long long)ref->bytes,
                     (long long)ref->array, a->base ? a->bytes : 0, bytes);
        return NULL;
    }
    return (char *)a->base + ref->offset;
}

const void *bv_engine_task_array(const bv_graph_engine *e, const bv_role_msg *m, int which,
                                 size_t bytes, bv_error *err)
{
    static const int32_t flag[3] = {BV_TASK_REF_A, BV_TASK_REF_B, BV_TASK_REF_C};
    const uint8_t *p[3] = {m->a, m->b, m->c};
    uint64_t n[3] = {m->hdr.na, m->hdr.nb, m->hdr.nc};
    if (m->hdr.flags & flag[which]) {
        bv_array_ref ref;
        if (n[which] != sizeof ref) {
            bv_error_set(err, BV_ERR_CORRUPT, "task's array reference is %llu bytes, not %zu",
                         (unsigned long long)n[which], sizeof ref);
            return NULL;
        }
        memcpy(&ref, p[which], sizeof ref);
        return bv_engine_shared_window(e, m->hdr.reply_to, &ref, bytes, false, err);
    }
    if (n[which] != bytes) {
        bv_error_set(err, BV_ERR_CORRUPT, "task for stage %d has %llu bytes in array %c, not %zu",
                     m->hdr.stage, (unsigned long long)n[which], 'a' + which, bytes);
        return NULL;
    }
    return p[which];
}

bv_status bv_engine_map_segment(bv_graph_engine *e, const bv_role_msg *m, bv_error *err)
{
    int gs = m->hdr.reply_to;
    size_t count = bv_shared_count(e), n = (size_t)(m->hdr.na / sizeof(bv_array_ref));
    if (!e->shm || gs < 0 || gs >= e->ngs || e->peer_shared[gs] ||
        m->hdr.na % sizeof(bv_array_ref) || n > count)
        return bv_error_set(err, BV_ERR_CORRUPT, "unexpected shared arrays from graph server %d",
                            gs);
    bv_segment *seg = &e->peer_segment[gs];
    bv_status st = bv_segment_map(seg, m->hdr.version, m->hdr.row_begin,
                                  (uint64_t)m->hdr.rows, err);
    bv_shared_array *table = st == BV_OK ? calloc(count, sizeof *table) : NULL;
    if (st == BV_OK && !table)
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (size_t k = 0; st == BV_OK && k < n; k++) {
        bv_array_ref r;
        memcpy(&r, m->a + k * sizeof r, sizeof r);
        if (r.array < BV_SHARED_STAGES || (size_t)r.array >= count || table[r.array].base ||
            r.offset > seg->bytes || r.bytes > seg->bytes - r.offset)
            st = bv_error_set(err, BV_ERR_CORRUPT, "graph server %d's shared array %lld lies "
                              "outside its segment", gs, (long long)r.array);
        else
            table[r.array] = (bv_shared_array){(char *)seg->base + r.offset, r.bytes};
    }
    if (st != BV_OK) {
        free(table);
        bv_segment_free(seg);
        return st;
    }
    e->peer_shared[gs] = table;
    return BV_OK;
}

/* The transport instance of this process: with links over tcp, every link of the run is
 * CURVE-authenticated and encrypted with the run's key; the coordinator of role processes
 * sends in slices of its send bound (bv_engine_coord_send looks at the processes between
 * them); the transport's own options otherwise as the experiment gives them. */
static bv_status engine_transport(bv_graph_engine *e, bool coordinator, bv_error *err)
{
    const bv_graph_engine_cfg *c = &e->cfg;
    const bv_opt_value *bound = bv_opts_find(c->transport_opts, "send_timeout_ms");
    e->send_bound_ms = bound ? (int)bound->v.i : -1;
    return bv_node_group_transport(c->transport_ops, c->transport_opts, c->curve_secret,
                                   coordinator ? BV_SEND_SLICE_MS : 0, &e->transport, err);
}

/* The partition of the whole graph into the graph servers' parts (METIS is
 * deterministic for its input and seed: every process that makes it gets the same). */
static bv_status make_partition(const bv_graph_engine *e, bv_partition **out, bv_error *err)
{
    bv_partition_opts o = {.method = (bv_partition_method)e->cfg.partition,
                           .parts = e->ngs, .seed = e->cfg.partition_seed};
    return bv_partition_new(&e->cfg.data->adj, &o, out, err);
}

/* A graph server's part becomes its whole graph, and READY tells the coordinator which
 * partition it came from (graph_partition.h: the fingerprint), its ghosts and the cut. */
static void use_part(bv_graph_engine *e, uint64_t fingerprint)
{
    e->cfg.data = e->view.local;
    e->part_info = (bv_task_hdr){
        .version = (int64_t)fingerprint,
        .row_begin = e->view.local->num_nodes - e->view.owned,
        .rows = e->view.edge_cut,
        .interval = e->view.part,
    };
}

/* A graph server's part of the graph: the one the coordinator wrote (cfg.part), or cut
 * here from the whole dataset. */
static bv_status make_part(bv_graph_engine *e, int part, bv_error *err)
{
    if (e->cfg.part) {
        bv_graph_view *given = e->cfg.part;
        if (given->part != part || given->parts != e->ngs)
            return bv_error_set(err, BV_ERR_INVALID, "the part file holds part %d of %d, "
                                "not part %d of %d", given->part, given->parts, part, e->ngs);
        e->view = *given;
        memset(given, 0, sizeof *given);
        e->cfg.part = NULL;
        use_part(e, e->cfg.part_fingerprint);
        return BV_OK;
    }
    bv_partition *pt = NULL;
    bv_status st = make_partition(e, &pt, err);
    /* the layout is not made yet: Â in case a Gather uses it (as the parts' files have) */
    bv_csr *norm = st == BV_OK ? bv_graph_gcn_norm_adj(e->cfg.data) : NULL;
    if (st == BV_OK && !norm)
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory for the normalised adjacency");
    if (st == BV_OK)
        st = bv_graph_view_make(e->cfg.data, pt->part_of, e->ngs, part, norm, &e->view, err);
    if (st == BV_OK)
        use_part(e, pt->fingerprint);
    bv_csr_free(norm);
    bv_partition_free(pt);
    return st;
}

bv_status bv_engine_write_parts(const bv_graph_engine *e, bv_error *err)
{
    bv_partition *pt = NULL;
    bv_status st = make_partition(e, &pt, err);
    /* Â once for every part, and only when a Gather uses it (GCN's, not GAT's) */
    bv_csr *norm = st == BV_OK && e->has_norm_gathers ? bv_graph_gcn_norm_adj(e->cfg.data)
                                                     : NULL;
    if (st == BV_OK && e->has_norm_gathers && !norm)
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory for the normalised adjacency");
    for (int p = 0; st == BV_OK && p < e->ngs; p++) {
        bv_graph_view v;
        st = bv_graph_view_make(e->cfg.data, pt->part_of, e->ngs, p, norm, &v, err);
        char path[sizeof e->dir + 16];
        bv_graph_part_path(e->dir, strlen(e->dir), p, path, sizeof path);
        bv_graph_part_info info = {pt->fingerprint, e->cfg.data->num_nodes};
        if (st == BV_OK)
            st = bv_graph_view_write(&v, &info, path, err);
        bv_graph_view_free(&v);
    }
    bv_csr_free(norm);
    bv_partition_free(pt);
    return st;
}

/* What every process of the engine derives from cfg alone, the same bits everywhere:
 * the parameter and stage layout, the intervals; with graph_arrays, also the graph
 * server's adjacency arrays; then the transport. */
static bv_status engine_prepare(const bv_graph_engine_cfg *cfg, bool graph_arrays,
                                int part, bool coordinator, bv_graph_engine **out,
                                bv_error *err)
{
    *out = NULL;
    if (cfg->intervals < 0 || cfg->tensor_workers < 1 ||
        cfg->tensor_workers > BV_MAX_TENSOR_WORKERS || cfg->param_servers < 0 ||
        cfg->param_servers > BV_MAX_PARAM_SERVERS || cfg->graph_servers < 0 ||
        cfg->graph_servers > BV_MAX_GRAPH_SERVERS ||
        (cfg->graph_servers > 1 && cfg->graph_servers > cfg->data->num_nodes))
        return bv_error_set(err, BV_ERR_INVALID, "bad engine configuration");
    bv_graph_engine *e = calloc(1, sizeof *e);
    if (!e)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    *out = e;
    e->cfg = *cfg;
    e->nps = cfg->param_servers > 0 ? cfg->param_servers : 1;
    e->ngs = cfg->graph_servers > 0 ? cfg->graph_servers : 1;
    e->gs_index = part;
    if (cfg->cloud_ops) /* roles in other processes cannot read each other's arrays */
        e->cfg.share_arrays = false;
    /* Every graph server has as many intervals, cut from the smallest part's size, so
     * that every process agrees on the count without knowing the parts: a METIS part may
     * be a few per cent under n / G, so with G > 1 the bound is half of that. */
    int64_t smallest = e->cfg.data->num_nodes / (e->ngs > 1 ? 2 * e->ngs : 1);
    /* On a device's memory, one: each task is a row of launches there, and its memory
     * holds the whole graph's; unless the data did not fit, when a task's operands are
     * copied in per call and must fit one interval at a time (docs/cuda.md) */
    if (e->cfg.intervals == 0) {
        bool device = e->cfg.compute_ops->mem_alloc != NULL, fits = !bv_mem_fell_back();
        e->cfg.intervals = device && fits ? 1 : bv_graph_auto_intervals(smallest);
        if (device)
            bv_log(BV_LOG_INFO, "graph engine: %d interval%s (%s)", e->cfg.intervals,
                   e->cfg.intervals == 1 ? "" : "s",
                   fits ? "the compute back end's memory holds the data"
                        : "the data did not fit in the compute back end's memory");
    }
    if (e->cfg.intervals > smallest)
        e->cfg.intervals = (int)(smallest > 0 ? smallest : 1);
    if (e->cfg.functions) { /* each graph server has the same share of the worker slots */
        int slots = bv_fn_slots(e);
        if (slots < 1) /* the caller stops e */
            return bv_error_set(err, BV_ERR_INVALID, "compute.max_lambdas (%d) must be at "
                                "least the graph servers (%d): each needs a worker",
                                e->cfg.tensor_workers, e->ngs);
        if (e->cfg.lambdas <= 0 || e->cfg.lambdas > slots)
            e->cfg.lambdas = e->cfg.lambdas > slots || e->cfg.intervals > slots
                                 ? slots : e->cfg.intervals;
    }
    bv_status st = BV_OK;
    if (graph_arrays && e->ngs > 1) /* this graph server's part is its whole graph */
        st = make_part(e, part, err);
    if (st == BV_OK)
        st = engine_layout(e, err);
    if (st == BV_OK)
        st = engine_share(e, err);
    if (st == BV_OK && graph_arrays && e->has_norm_gathers && e->view.local) {
        /* the whole graph's degrees, rows of this part (graph_view.c) */
        e->adj_norm = e->view.adj_norm;
        e->view.adj_norm = NULL;
        e->adj_norm_t = bv_csr_transpose(e->adj_norm);
        if (!e->adj_norm_t)
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory for the normalised adjacency");
    } else if (st == BV_OK && graph_arrays && e->has_norm_gathers) {
        /* The whole graph's Â is symmetric to the bit (A is, and w / sqrt(d_r d_c) is the
         * same product either way round): its transpose is itself, not a second copy. */
        e->adj_norm = bv_graph_gcn_norm_adj(cfg->data);
        e->adj_norm_t = e->adj_norm;
        if (!e->adj_norm_t)
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory for the normalised adjacency");
    }
    if (st == BV_OK && graph_arrays && e->has_edge_stages) {
        /* A + I, unweighted (GAT attends over in-edges and self) */
        e->adj_loops = csr_with_self_loops(&e->cfg.data->adj, e->view.local
                                                                  ? e->view.owned
                                                                  : e->cfg.data->num_nodes);
        e->adj_loops_t =
            e->adj_loops ? bv_csr_transpose_perm(e->adj_loops, &e->loops_perm) : NULL;
        if (!e->adj_loops_t)
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory for the graph with self loops");
    }
    if (st == BV_OK)
        st = engine_transport(e, coordinator && cfg->cloud_ops, err);
    return st;
}

bv_status bv_graph_engine_start(const bv_graph_engine_cfg *cfg, bv_graph_engine **out,
                                bv_error *err)
{
    *out = NULL;
    bv_graph_engine *e;
    /* with roles as processes, the graph server's arrays live in its own process */
    bv_status st = engine_prepare(cfg, !cfg->cloud_ops, 0, true, &e, err);
    if (st == BV_OK && cfg->cloud_ops) {
        st = bv_engine_launch(e, err);
    } else if (st == BV_OK) {
        int id = atomic_fetch_add(&engine_counter, 1);
        snprintf(e->addr_coord, BV_ADDR_LEN, "inproc://bv%d-coord", id);
        snprintf(e->addr_gs[0], BV_ADDR_LEN, "inproc://bv%d-gs", id);
        for (int i = 0; i < e->nps; i++)
            snprintf(e->addr_ps[i], BV_ADDR_LEN, "inproc://bv%d-ps%d", id, i);
        for (int i = 0; i < cfg->tensor_workers; i++) {
            snprintf(e->addr_tw[i], BV_ADDR_LEN, "inproc://bv%d-tw%d", id, i);
            snprintf(e->addr_tw_weights[i], BV_ADDR_LEN, "inproc://bv%d-tw%d-weights", id, i);
        }
        st = engine_spawn(e, err);
    }
    if (st != BV_OK) {
        bv_graph_engine_stop(e);
        return st;
    }
    *out = e;
    return BV_OK;
}

bv_status bv_graph_engine_serve(const bv_graph_engine_cfg *cfg, bv_graph_role_kind kind,
                                int index, const char *book, bv_error *err)
{
    bv_graph_engine *e = NULL;
    bv_graph_engine_cfg keyed = *cfg; /* the run's CURVE key, when the book has one */
    bv_status st = bv_engine_book_key(book, keyed.curve_secret, err);
    if (st == BV_OK)
        st = engine_prepare(&keyed, kind == BV_GRAPH_ROLE_GRAPH,
                            kind == BV_GRAPH_ROLE_GRAPH ? index : 0, false, &e, err);
    if (st == BV_OK) {
        /* The other roles are other processes: on this host (links over ipc) the graph
         * server's stage arrays are shared memory, otherwise they travel in messages. */
        e->shm = e->cfg.share_arrays && !e->cfg.tcp && kind != BV_GRAPH_ROLE_PARAM &&
                 !e->cfg.functions; /* a function worker pulls its data, as a Lambda */
        e->cfg.share_arrays = e->shm;
        e->serving = true;
        e->book = book;
        st = bv_engine_read_book(e, book, err);
    }
    if (st == BV_OK && e->cfg.functions &&
        (kind == BV_GRAPH_ROLE_GRAPH || kind == BV_GRAPH_ROLE_PARAM)) {
        st = bv_node_group_transport(e->cfg.transport_ops, e->cfg.transport_opts,
                                     e->cfg.curve_secret, BV_FN_SEND_MS, &e->fn_transport, err);
    }
    if (st == BV_OK && kind == BV_GRAPH_ROLE_FUNCTION && !cfg->functions)
        st = bv_error_set(err, BV_ERR_INVALID, "this run's tensor tasks do not run on "
                          "functions (compute: lambda)");
    if (st == BV_OK && kind == BV_GRAPH_ROLE_FUNCTION && index >= 0 &&
        index < cfg->tensor_workers) { /* its own sockets only: the run goes on */
        bv_node_group_term_cleanup_begin(NULL);
        bv_node_group_term_cleanup_add(e->addr_tw[index]);
        bv_node_group_term_cleanup_add(e->addr_tw_weights[index]);
        bv_node_group_term_cleanup_arm();
    } else if (st == BV_OK) {
        bv_engine_role_cleanup_on_term(e, book);
    }
    int roles = kind == BV_GRAPH_ROLE_TENSOR || kind == BV_GRAPH_ROLE_FUNCTION
                    ? cfg->tensor_workers
                : kind == BV_GRAPH_ROLE_PARAM  ? (e ? e->nps : 1)
                                               : (e ? e->ngs : 1);
    if (st == BV_OK && (index < 0 || index >= roles))
        st = bv_error_set(err, BV_ERR_INVALID, "there is no %s %d in this run (it has %d)",
                          kind == BV_GRAPH_ROLE_TENSOR     ? "tensor worker"
                          : kind == BV_GRAPH_ROLE_FUNCTION ? "function worker"
                          : kind == BV_GRAPH_ROLE_PARAM ? "parameter server"
                                                        : "graph server",
                          index, roles);
    if (st == BV_OK) {
        /* the role runs on this thread; it ends at SHUTDOWN (or when the coordinator
         * ends it: it dies with its parent, local cloud) */
        if (kind == BV_GRAPH_ROLE_GRAPH) {
            bv_graph_server_main(e);
        } else if (kind == BV_GRAPH_ROLE_PARAM) {
            bv_tw_arg arg = {e, index, false};
            bv_param_server_main(&arg);
        } else {
            bv_tw_arg arg = {e, index, kind == BV_GRAPH_ROLE_FUNCTION};
            bv_tensor_worker_main(&arg);
        }
        if (atomic_load(&e->role_failed))
            st = bv_error_set(err, BV_ERR_INTERNAL, "the role failed (its error went to the "
                              "coordinator)");
    }
    if (e)
        e->cfg.cloud_ops = NULL; /* this process started nothing */
    bv_graph_engine_stop(e);
    return st;
}

/* SHUTDOWN to one role and join its thread. A role that started but never got an outbox
 * from us (start failed half-way) is reached through a fresh one. */
/* SHUTDOWN to a role that listens (role_loop.h: a role still setting up is cancelled
 * instead, and one whose set-up failed gets nothing), then join it. */
static void stop_role(bv_graph_engine *e, pthread_t thread, _Atomic int *life,
                      bv_endpoint *outbox, const char *addr)
{
    const bv_transport_ops *t = e->cfg.transport_ops;
    int starting = BV_ROLE_STARTING;
    bv_endpoint *ep = outbox;
    if (!atomic_compare_exchange_strong(life, &starting, BV_ROLE_CANCELLED)) {
        bv_error ignored;
        if (!ep)
            ep = bv_engine_connect(e, addr, &ignored);
        if (ep)
            bv_role_send(t, ep, BV_MSG_SHUTDOWN, BV_ROLE_COORD, NULL, NULL, 0, NULL, 0, NULL,
                         0, &ignored);
    }
    pthread_join(thread, NULL);
    if (ep)
        t->close(ep);
}

void bv_graph_engine_stop(bv_graph_engine *e)
{
    if (!e)
        return;
    const bv_transport_ops *t = e->cfg.transport_ops;
    if (e->node) { /* roles as processes: end them, then the outboxes to them */
        bv_engine_land(e);
        bv_engine_close_all(e, e->to_gs, (size_t)e->ngs);
        bv_engine_close_all(e, e->to_ps, (size_t)e->nps);
        bv_engine_close_all(e, e->to_tw, (size_t)e->cfg.tensor_workers);
    }
    if (e->gs_started)
        stop_role(e, e->gs_thread, &e->gs_life, e->to_gs[0], e->addr_gs[0]);
    for (int i = 0; i < e->nps; i++)
        if (e->ps_started[i])
            stop_role(e, e->ps_thread[i], &e->ps_life[i], e->to_ps[i], e->addr_ps[i]);
    for (int i = 0; i < e->cfg.tensor_workers; i++)
        if (e->tw_started[i])
            stop_role(e, e->tw_thread[i], &e->tw_life[i], e->to_tw[i], e->addr_tw[i]);
    uint64_t dropped = atomic_load(&e->frames_dropped);
    if (!e->serving && dropped)
        bv_log(BV_LOG_WARN, "the coordinator%s dropped %llu message%s that failed their checks",
               e->gs_started ? " and the role threads" : "", (unsigned long long)dropped,
               dropped == 1 ? "" : "s");
    if (e->coord_in)
        t->close(e->coord_in);
    if (e->transport)
        t->destroy(e->transport);
    if (e->fn_transport)
        t->destroy(e->fn_transport);
    if (e->adj_norm_t != e->adj_norm)
        bv_csr_free(e->adj_norm_t);
    bv_csr_free(e->adj_norm);
    bv_csr_free(e->adj_loops);
    bv_csr_free(e->adj_loops_t);
    bv_free_aligned(e->loops_perm);
    free(e->shared);
    bv_segment_free(&e->segment);
    for (int i = 0; i < BV_MAX_GRAPH_SERVERS; i++) {
        bv_segment_free(&e->peer_segment[i]);
        free(e->peer_shared[i]);
    }
    free(e->vin);
    free(e->vin_width);
    free(e->tw_args);
    free(e->ps_args);
    free(e->params);
    free(e->param_off);
    free(e->stages);
    free(e->stage_copy);
    free(e->interval_begin);
    free(e->pipe_stage);
    bv_graph_view_free(&e->view);
    free(e);
}

void bv_engine_pick_servers(const double *cost, int nps, int intervals, int64_t first,
                            int32_t *ps_of)
{
    double known = 0, c[BV_MAX_PARAM_SERVERS];
    int nknown = 0;
    for (int k = 0; k < nps; k++)
        if (cost && cost[k] > 0) {
            known += cost[k];
            nknown++;
        }
    double fastest = 0;
    for (int k = 0; k < nps; k++) {
        c[k] = cost && cost[k] > 0 ? cost[k] : nknown ? known / nknown : 1.0;
        fastest = k == 0 || c[k] < fastest ? c[k] : fastest;
    }
    for (int k = 0; k < nps; k++) /* within 2x of the fastest: equal (timing noise) */
        c[k] = c[k] < 2 * fastest ? fastest : c[k];
    int64_t taken[BV_MAX_PARAM_SERVERS] = {0};
    for (int i = 0; i < intervals; i++) {
        int best = -1;
        for (int j = 0; j < nps; j++) {
            int k = (int)((first + i + j) % nps);
            if (best < 0 || (double)(taken[k] + 1) * c[k] < (double)(taken[best] + 1) * c[best])
                best = k;
        }
        ps_of[i] = best;
        taken[best]++;
    }
}

/* Sends the same request to every parameter server and waits for each one's STEPPED.
 * They hold the same weights and apply the same updates (param_server.c), so their
 * replies (version, step, the sums of squares) must agree to the bit; *out is the first. */
static bv_status ask_servers(bv_graph_engine *e, uint16_t type, const bv_task_hdr *h,
                             const void *a, const void *b, const void *c, size_t bytes,
                             bv_task_hdr *out, bv_error *err)
{
    for (int i = 0; i < e->nps; i++) {
        bv_status st = bv_engine_coord_send(e, e->to_ps[i], type, h, a, a ? bytes : 0, b,
                                            b ? bytes : 0, c, c ? bytes : 0, err);
        if (st != BV_OK)
            return st;
    }
    for (int i = 0; i < e->nps; i++) {
        bv_role_msg reply;
        bv_status st = coord_wait(e, BV_MSG_STEPPED, &reply, err);
        if (st != BV_OK)
            return st;
        bool same = i == 0 || (reply.hdr.version == out->version &&
                               reply.hdr.step == out->step &&
                               memcmp(reply.hdr.stats, out->stats, 2 * sizeof(double)) == 0);
        int k = reply.hdr.reply_to; /* its load (param_server.c), not compared */
        if (type == BV_MSG_STEP && k >= 0 && k < e->nps) {
            e->ps_taken[k] = (int64_t)reply.hdr.stats[3];
            if (e->ps_taken[k] > 0) {
                double now = reply.hdr.stats[2];
                e->ps_cost[k] = e->ps_cost[k] > 0 ? 0.5 * (e->ps_cost[k] + now) : now;
            }
        }
        if (i == 0)
            *out = reply.hdr;
        bv_role_release(e->cfg.transport_ops, &reply);
        if (!same)
            return bv_error_set(err, BV_ERR_INTERNAL, "the parameter servers disagree after "
                                "an update (version %lld, step %lld)",
                                (long long)out->version, (long long)out->step);
    }
    /* A server that took nothing was not measured: its cost moves halfway to the fastest
     * server's each epoch, so one judged slow once gets work again and is measured anew
     * instead of being left out for good. */
    double fastest = 0;
    for (int k = 0; type == BV_MSG_STEP && k < e->nps; k++)
        if (e->ps_taken[k] && e->ps_cost[k] > 0 && (!fastest || e->ps_cost[k] < fastest))
            fastest = e->ps_cost[k];
    for (int k = 0; fastest > 0 && k < e->nps; k++)
        if (!e->ps_taken[k] && e->ps_cost[k] > 0)
            e->ps_cost[k] = 0.5 * (e->ps_cost[k] + fastest);
    return BV_OK;
}

static bv_status send_state(bv_graph_engine *e, const float *w, const float *m, const float *v,
                            int64_t step, bv_error *err)
{
    bv_task_hdr h = {.step = step}, reply;
    bv_status st = ask_servers(e, BV_MSG_SET_STATE, &h, w, m, v,
                               e->param_floats * sizeof(float), &reply, err);
    if (st == BV_OK) {
        e->version = reply.version;
        e->decay_now = reply.stats[0];
    }
    return st;
}

bv_status bv_graph_engine_init_weights(bv_graph_engine *e, bv_error *err)
{
    size_t n = e->param_floats + 1;
    float *w = calloc(n, sizeof *w), *zeros = calloc(n, sizeof *zeros);
    if (!w || !zeros) {
        free(w);
        free(zeros);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < e->nparams; i++) {
        const bv_param_spec *p = e->params[i];
        if (p->init != BV_INIT_GLOROT_UNIFORM)
            continue;
        /* Glorot & Bengio 2010, as Kipf's glorot(): U(-r, r), r = sqrt(6 / (in + out)) */
        double r = sqrt(6.0 / (double)(p->rows + p->cols));
        bv_rng rng;
        bv_rng_init(&rng, e->cfg.seed, 1000 + i);
        float *dst = w + e->param_off[i];
        for (int64_t j = 0; j < p->rows * p->cols; j++)
            dst[j] = (float)((2.0 * bv_rng_uniform(&rng) - 1.0) * r);
    }
    bv_status st = send_state(e, w, zeros, zeros, 0, err);
    free(w);
    free(zeros);
    return st;
}

static bv_status add_blob(bv_state *s, const char *prefix, const char *name, const void *data,
                          size_t size)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return bv_state_add(s, full, data, size);
}

bv_status bv_graph_engine_get_state(bv_graph_engine *e, bv_state *out, bv_error *err)
{
    memset(out, 0, sizeof *out);
    bv_role_msg m;
    bv_status st = coord_ask(e, e->to_ps[0], BV_MSG_GET_STATE, NULL, BV_MSG_STATE, &m, err);
    if (st != BV_OK)
        return st;
    const uint8_t *arrays[3] = {m.a, m.b, m.c};
    static const char *const prefixes[3] = {"param/", "adam_m/", "adam_v/"};
    for (int a = 0; a < 3 && st == BV_OK; a++)
        for (size_t i = 0; i < e->nparams && st == BV_OK; i++)
            st = add_blob(out, prefixes[a], e->params[i]->name,
                          arrays[a] + e->param_off[i] * sizeof(float),
                          (size_t)(e->params[i]->rows * e->params[i]->cols) * sizeof(float));
    if (st == BV_OK)
        st = add_blob(out, "optimizer/", "step", &m.hdr.step, sizeof m.hdr.step);
    bv_role_release(e->cfg.transport_ops, &m);
    if (st != BV_OK) {
        bv_state_free(out);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the training state");
    }
    return BV_OK;
}

bv_status bv_graph_engine_set_state(bv_graph_engine *e, const bv_state *s, bv_error *err)
{
    size_t n = e->param_floats + 1;
    float *arrays[3] = {calloc(n, sizeof(float)), calloc(n, sizeof(float)),
                        calloc(n, sizeof(float))};
    static const char *const prefixes[3] = {"param/", "adam_m/", "adam_v/"};
    bv_status st = (arrays[0] && arrays[1] && arrays[2])
                       ? BV_OK
                       : bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (int a = 0; a < 3 && st == BV_OK; a++) {
        for (size_t i = 0; i < e->nparams && st == BV_OK; i++) {
            char name[256];
            snprintf(name, sizeof name, "%s%s", prefixes[a], e->params[i]->name);
            const bv_blob *b = bv_state_find(s, name);
            size_t want = (size_t)(e->params[i]->rows * e->params[i]->cols) * sizeof(float);
            if (!b || b->size != want)
                st = bv_error_set(err, BV_ERR_CORRUPT,
                                  "saved state has no '%s' of %zu bytes (does it belong to "
                                  "another model?)", name, want);
            else
                memcpy(arrays[a] + e->param_off[i], b->data, want);
        }
    }
    const bv_blob *step = bv_state_find(s, "optimizer/step");
    int64_t step_value = 0;
    if (st == BV_OK && (!step || step->size != sizeof step_value))
        st = bv_error_set(err, BV_ERR_CORRUPT, "saved state has no optimizer step");
    if (st == BV_OK) {
        memcpy(&step_value, step->data, sizeof step_value);
        st = send_state(e, arrays[0], arrays[1], arrays[2], step_value, err);
    }
    for (int a = 0; a < 3; a++)
        free(arrays[a]);
    return st;
}

static void fill_stats(const double raw[9], double decay_sumsq, bv_epoch_stats *out)
{
    for (int s = 0; s < 3; s++) {
        out->count[s] = (int64_t)raw[3 * s + 1];
        out->loss[s] = out->count[s] ? raw[3 * s] / (double)out->count[s] : 0.0;
        out->accuracy[s] = out->count[s] ? raw[3 * s + 2] / (double)out->count[s] : 0.0;
    }
    out->decay_sumsq = decay_sumsq;
}

/* A gated pass's figures, over the graph servers: counts add up, the rest is the most
 * (the oldest epoch read: the least). */
static void add_figures(double *to, const double *from, bool first)
{
    for (int k = 0; k < BV_PIPE_FIGURES; k++) {
        double a = to[k], b = from[k];
        if (first)
            to[k] = b;
        else if (k == BV_PIPE_HELD || k == BV_PIPE_STALE_GATHERS || k == BV_PIPE_AHEAD ||
                 k == BV_PIPE_STASHED || k == BV_PIPE_STASH_MISMATCH)
            to[k] = a + b;
        else if (k == BV_PIPE_OLDEST_READ) /* and the rest: the most */
            to[k] = b < a ? b : a;
        else
            to[k] = b > a ? b : a;
    }
}

/* A graph server's pass on functions: counts and bills add up over the servers and the
 * epoch's passes, and go to the run's ledger; the queue, the workers and the task time
 * are the training pass's, per graph server (the mean over them: what a policy turning
 * compute.lambdas, which is per graph server, compares). */
static void add_function_figures(bv_graph_engine *e, const double *f, bool training)
{
    for (int k = 0; k < BV_FN_FIGURES; k++) {
        bool pass_only = k == BV_FN_QUEUE_MEAN || k == BV_FN_QUEUE_MAX ||
                         k == BV_FN_IDLE_MEAN || k == BV_FN_WORKERS_MAX ||
                         k == BV_FN_LAMBDAS || k == BV_FN_TASK_MS_MEAN;
        if (pass_only && training)
            e->fn_epoch[k] += f[k] / e->ngs;
        else if (!pass_only)
            e->fn_epoch[k] += f[k];
        if (!pass_only)
            e->fn_total[k] += f[k];
    }
    if (bv_ledger_current())
        bv_ledger_charge_functions(bv_ledger_current(), f[BV_FN_INVOCATIONS], f[BV_FN_GB_S]);
}

static bv_status run_pass(bv_graph_engine *e, int64_t epoch, bool training, bv_task_hdr *done,
                          bv_error *err)
{
    if (training)
        memset(e->fn_epoch, 0, sizeof e->fn_epoch);
    bv_task_hdr h = {.epoch = epoch, .training = training, .version = e->version};
    /* with several parameter servers: each one's seconds per interval in the last epoch,
     * by which the graph servers pick them (bv_engine_pick_servers) */
    const double *cost = e->ps_cost;
    size_t ncost = e->nps > 1 ? (size_t)e->nps * sizeof(double) : 0;
    for (int g = 0; g < e->ngs; g++) {
        bv_status st = bv_engine_coord_send(e, e->to_gs[g], BV_MSG_EPOCH, &h,
                                            ncost ? cost : NULL, ncost, NULL, 0, NULL, 0, err);
        if (st != BV_OK)
            return st;
    }
    /* each graph server's counts and sums, added in part order (the same bits every run) */
    bv_task_hdr part[BV_MAX_GRAPH_SERVERS];
    bool have[BV_MAX_GRAPH_SERVERS] = {false};
    for (int got = 0; got < e->ngs; got++) {
        bv_role_msg m;
        bv_status st = coord_wait(e, BV_MSG_EPOCH_DONE, &m, err);
        if (st != BV_OK)
            return st;
        int g = m.hdr.reply_to;
        bool fresh = g >= 0 && g < e->ngs && !have[g] &&
                     ((m.hdr.na == 0 && m.hdr.nb == 0) ||
                      (m.hdr.na == sizeof e->pipe_fig &&
                       m.hdr.nb == e->nstages * sizeof(double))) &&
                     m.hdr.nc == (e->cfg.functions ? BV_FN_FIGURES * sizeof(double) : 0);
        if (fresh && m.hdr.nc)
            add_function_figures(e, (const double *)(const void *)m.c, training);
        if (fresh) {
            part[g] = m.hdr;
            have[g] = true;
            if (training && m.hdr.na)
                add_figures(e->pipe_fig, (const double *)(const void *)m.a, got == 0);
            for (size_t s = 0; training && m.hdr.nb && s < e->nstages; s++) {
                double n = ((const double *)(const void *)m.b)[s]; /* the most, over servers */
                e->pipe_stage[s] = got == 0 || n > e->pipe_stage[s] ? n : e->pipe_stage[s];
            }
        }
        bv_role_release(e->cfg.transport_ops, &m);
        if (!fresh)
            return bv_error_set(err, BV_ERR_CORRUPT, "epoch report from graph server %d, "
                                "which is not one that has not reported, or with %llu "
                                "bytes of figures", g, (unsigned long long)m.hdr.na);
    }
    *done = part[0];
    for (int g = 1; g < e->ngs; g++) {
        for (int i = 0; i < 9; i++)
            done->stats[i] += part[g].stats[i];
        done->step += part[g].step;
        done->row_begin += part[g].row_begin;
    }
    e->ghost_bytes = done->row_begin;
    return BV_OK;
}

bool bv_stage_read_across_edges(const bv_graph_engine *e, size_t s)
{
    for (size_t r = s + 1; r < e->nstages; r++)
        if (e->vin[r] == (int)s && e->stages[r]->kind != BV_STAGE_TENSOR)
            return true;
    return false;
}

int bv_graph_engine_intervals(const bv_graph_engine *e)
{
    return e->cfg.intervals;
}

bv_graph_boundary bv_graph_engine_boundary(const bv_graph_engine *e)
{
    bv_graph_boundary b = {.parts = e->ngs, .edge_cut = e->edge_cut,
                           .measured_bytes = e->train_ghost_bytes};
    int64_t width = 0; /* floats per ghost row exchanged, over the arrays read across edges */
    for (size_t s = 0; s < e->nstages; s++)
        if (bv_stage_read_across_edges(e, s))
            width += e->stages[s]->out_dim;
    /* forward each ghost row comes from its owner; backward its gradient goes back */
    b.predicted_bytes = 2 * e->ghosts_total * width * (int64_t)sizeof(float);
    return b;
}

/* Per-role series in metrics.jsonl (bivouac/series.h): the boundary bytes the graph
 * servers sent, and the gradient messages each parameter server took, this epoch. */
static void report_roles(const bv_graph_engine *e)
{
    static const char *const figure[BV_PIPE_FIGURES][2] = {
        [BV_PIPE_HELD] = {"gate_held", "tasks"},
        [BV_PIPE_LAG_MAX] = {"gather_lag_max", "epochs"},
        [BV_PIPE_OLDEST_READ] = {"gather_oldest_epoch", "epoch"},
        [BV_PIPE_STALE_GATHERS] = {"stale_gathers", "gathers"},
        [BV_PIPE_IN_FLIGHT_MAX] = {"tasks_in_flight_max", "tasks"},
        [BV_PIPE_DEPTH_MAX] = {"pipeline_depth_max", "steps"},
        [BV_PIPE_AHEAD] = {"intervals_ahead", "intervals"},
        [BV_PIPE_STASHED] = {"stashed_backward", "tasks"},
        [BV_PIPE_STASH_MISMATCH] = {"stash_mismatch", "tasks"},
        [BV_PIPE_WEIGHTS_BEHIND] = {"weights_behind_max", "updates"},
        [BV_PIPE_STASH_BYTES] = {"stash_bytes", "bytes"},
    };
    for (int k = 0; e->cfg.gate_ops && k < BV_PIPE_FIGURES; k++)
        bv_series_report(figure[k][0], figure[k][1], e->pipe_fig[k]);
    for (size_t s = 0; e->cfg.gate_ops && s < e->nstages; s++) {
        char name[BV_SERIES_NAME_MAX];
        snprintf(name, sizeof name, "intervals_at_%s", e->stages[s]->name);
        bv_series_report(name, "intervals", e->pipe_stage[s]);
    }
    if (e->ngs > 1)
        bv_series_report("boundary_bytes", "bytes", (double)e->train_ghost_bytes);
    for (int k = 0; e->nps > 1 && k < e->nps; k++) {
        char name[32];
        snprintf(name, sizeof name, "ps%d_gradients", k);
        bv_series_report(name, "messages", (double)e->ps_taken[k]);
    }
}

bv_status bv_graph_engine_set_knob(bv_graph_engine *e, const char *plugin, const char *knob,
                                   double value, bv_error *err)
{
    char name[64];
    if (strcmp(plugin, "compute") == 0) {
        if (strcmp(knob, "lambdas") != 0)
            return bv_error_set(err, BV_ERR_INVALID, "compute.%s: the graph engine's compute "
                                "knob is compute.lambdas", knob);
        if (!e->cfg.functions)
            return bv_error_set(err, BV_ERR_INVALID, "compute.lambdas: this run's tensor "
                                "tasks do not run on functions (compute: lambda)");
        bv_status st = bv_lambda_count_ok(e, value, err);
        if (st != BV_OK)
            return st;
        snprintf(name, sizeof name, "compute.lambdas");
    } else if (!e->cfg.gate_ops || !e->cfg.gate_ops->set_knob ||
               strcmp(plugin, e->cfg.gate_name) != 0) {
        return BV_OK;
    } else {
        snprintf(name, sizeof name, "%s", knob);
    }
    bv_task_hdr h = {.stats = {value}};
    for (int g = 0; g < e->ngs; g++) {
        bv_status st = bv_engine_coord_send(e, e->to_gs[g], BV_MSG_KNOB, &h, name,
                                            strlen(name), NULL, 0, NULL, 0, err);
        if (st != BV_OK)
            return st;
    }
    return BV_OK;
}

int bv_graph_engine_server_load(const bv_graph_engine *e, int64_t *fewest, int64_t *most)
{
    *fewest = *most = e->ps_taken[0];
    for (int k = 1; k < e->nps; k++) {
        *fewest = e->ps_taken[k] < *fewest ? e->ps_taken[k] : *fewest;
        *most = e->ps_taken[k] > *most ? e->ps_taken[k] : *most;
    }
    return e->nps;
}

bv_status bv_graph_engine_train_epoch(bv_graph_engine *e, int64_t epoch, float lr,
                                      bv_epoch_stats *stats, bv_error *err)
{
    bv_task_hdr done;
    bv_status st = run_pass(e, epoch, true, &done, err);
    if (st != BV_OK)
        return st;
    e->train_ghost_bytes = e->ghost_bytes;
    bv_task_hdr step = {.epoch = epoch, .lr = lr, .step = done.step}, reply;
    st = ask_servers(e, BV_MSG_STEP, &step, NULL, NULL, NULL, 0, &reply, err);
    if (st != BV_OK)
        return st;
    e->version = reply.version;
    e->decay_now = reply.stats[1];
    e->pipe_fig[BV_PIPE_STASH_BYTES] = reply.stats[4];
    fill_stats(done.stats, reply.stats[0], stats); /* decay of the weights the pass used */
    report_roles(e);
    return BV_OK;
}

/* What the graph servers report of their functions (lambda_pool.h), as metrics.jsonl and
 * result.json name it, and its unit. */
static const char *const fn_figure[BV_FN_FIGURES][2] = {
    [BV_FN_INVOCATIONS] = {"lambda_invocations", "invocations"},
    [BV_FN_COLD_STARTS] = {"lambda_cold_starts", "workers"},
    [BV_FN_RELAUNCHES] = {"lambda_relaunches", "invocations"},
    [BV_FN_TIMEOUTS] = {"lambda_timeouts", "invocations"},
    [BV_FN_LOST] = {"lambda_lost", "invocations"},
    [BV_FN_DUPLICATES] = {"lambda_duplicates", "results"},
    [BV_FN_BILLED_S] = {"lambda_billed_seconds", "s"},
    [BV_FN_GB_S] = {"lambda_gb_seconds", "GB s"},
    [BV_FN_BYTES_TO] = {"lambda_bytes_to", "bytes"},
    [BV_FN_BYTES_FROM] = {"lambda_bytes_from", "bytes"},
    [BV_FN_QUEUE_MEAN] = {"lambda_queue_mean", "tasks"},
    [BV_FN_QUEUE_MAX] = {"lambda_queue_max", "tasks"},
    [BV_FN_IDLE_MEAN] = {"lambda_idle_mean", "workers"},
    [BV_FN_WORKERS_MAX] = {"lambda_workers_max", "workers"},
    [BV_FN_LAMBDAS] = {"lambdas", "workers"},
    [BV_FN_TASK_MS_MEAN] = {"lambda_task_ms", "ms"},
};

/* The epoch's passes on functions, in metrics.jsonl (after the evaluation, which invokes
 * them too): what they did, what they cost in billed time, how the queue went. */
static void report_functions(const bv_graph_engine *e)
{
    for (int k = 0; k < BV_FN_FIGURES; k++)
        bv_series_report(fn_figure[k][0], fn_figure[k][1], e->fn_epoch[k]);
}

bv_status bv_graph_engine_evaluate(bv_graph_engine *e, int64_t epoch, bv_epoch_stats *stats,
                                   bv_error *err)
{
    bv_task_hdr done;
    bv_status st = run_pass(e, epoch, false, &done, err);
    if (st != BV_OK)
        return st;
    fill_stats(done.stats, e->decay_now, stats);
    if (e->cfg.functions)
        report_functions(e);
    return BV_OK;
}

size_t bv_graph_engine_functions(const bv_graph_engine *e, const char **names,
                                 const double **totals)
{
    for (int k = 0; k < BV_FN_QUEUE_MEAN; k++) /* the figures that add up over a run */
        names[k] = fn_figure[k][0];
    *totals = e->fn_total;
    return e->cfg.functions ? BV_FN_QUEUE_MEAN : 0;
}
