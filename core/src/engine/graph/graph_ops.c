/* The graph engine behind the training loop's interface (engine.h): a unit is an epoch,
 * a training pass (forward with dropout, loss, backward, WeightUpdate) then an evaluation
 * pass over every vertex; its record carries the loss and accuracy of each split. */
#include "graph_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "bivouac/model.h"
#include "bivouac/wire.h"
#include "engine_graph.h"
#include "graph_partition.h"
#include "graph_view.h"
#include "node_group.h"
#include "plugin_arrays.h"
#include "ledger.h"
#include "membership.h"
#include "registry.h"
#include "role_msg.h"

/* The fields of a unit record, in metrics.jsonl order (the indices below follow it). */
static const char *const epoch_fields[] = {"epoch", "train_loss", "train_accuracy",
                                           "val_loss", "val_accuracy", "test_loss",
                                           "test_accuracy", "lr", "seconds"};
enum { F_EPOCH, F_TRAIN_LOSS, F_TRAIN_ACC, F_VAL_LOSS, F_VAL_ACC, F_TEST_LOSS, F_TEST_ACC, F_LR };
static const bv_record_kind epoch_record = {"epoch_end", epoch_fields,
                                            sizeof epoch_fields / sizeof epoch_fields[0]};

struct bv_engine {
    const bv_experiment *x;
    bv_model_ops model_ops; /* the plugin's table at this build's size */
    bv_model *model;
    bv_graph_engine *engine;
    const bv_graph_dataset *data; /* as the engine holds it (fit_features) */
    double reported_wd; /* weight decay added to the reported losses (decay_in_loss) */
    char experiment_file[4200]; /* the run's copy, for role processes */
    char config_dir[4096];
};

static bv_status load_data(const bv_experiment *x, void **data, bv_error *err)
{
    bv_graph_dataset *d = NULL;
    bv_status st = bv_graph_load_data(x, 0, &d, err);
    *data = d;
    return st;
}

static void free_data(void *data)
{
    bv_graph_free(data);
}

static void destroy(bv_engine *g)
{
    if (!g)
        return;
    bv_graph_engine_stop(g->engine);
    if (g->model)
        g->model_ops.destroy(g->model);
    free(g);
}

/* Attention over edges (EDGE stages, weighted GATHER) needs the compute plugin's ABI 1.1
 * kernels; a back end without them is refused before anything runs (as the sequence
 * engine refuses one without transformer kernels), not found out by a NULL call. */
static bv_status check_kernels(const bv_engine *g, bv_error *err)
{
    const bv_compute_ops *k = &g->x->compute_ops;
    bool edge_kernels = k->leaky_relu_forward && k->leaky_relu_backward && k->elu_forward &&
                        k->elu_backward && k->edge_scores && k->edge_scores_backward &&
                        k->edge_softmax && k->edge_softmax_backward && k->gather_heads &&
                        k->gather_heads_backward_x && k->gather_heads_backward_w;
    for (size_t i = 0; !edge_kernels && i < g->model_ops.stage_count(g->model); i++) {
        bv_stage st;
        bv_stage_copy(&g->model_ops, g->model_ops.stage(g->model, i), &st);
        if (st.kind == BV_STAGE_EDGE || (st.kind == BV_STAGE_GATHER && st.weighted))
            return bv_error_set(err, BV_ERR_INVALID, "compute plugin '%s' has no edge "
                                "kernels (plugin ABI 1.1), which model '%s' needs for stage "
                                "%s", g->x->compute.plugin->name, g->x->model.plugin->name,
                                st.name);
    }
    return BV_OK;
}

/* The model instance for this process and the engine's configuration, as every process
 * of a run derives them from the experiment: the coordinator and each role process. */
static bv_status make_model(bv_engine *g, const bv_experiment *x, const bv_graph_dataset *d,
                            bv_error *err)
{
    g->x = x;
    bv_ops_copy(&g->model_ops, sizeof g->model_ops, x->model.plugin);
    bv_graph_shape shape = {d->num_nodes, d->num_features, d->num_classes};
    g->model = g->model_ops.create(&x->model.opts, &shape, err);
    if (!g->model)
        return err->status ? err->status : BV_ERR_PLUGIN;
    return check_kernels(g, err);
}

/* Sparse features stay sparse only where the first stage (the one that reads them) takes
 * them as ctx->sparse_in alone and the back end has the kernels for it; otherwise they are
 * made dense here, or, when the experiment asked for sparse ones, refused. */
static bv_status fit_features(const bv_engine *g, bv_graph_dataset *d, bv_error *err)
{
    if (!d || !bv_graph_features_sparse(d))
        return BV_OK;
    const bv_compute_ops *k = &g->x->compute_ops;
    bv_stage first;
    bv_stage_copy(&g->model_ops, g->model_ops.stage(g->model, 0), &first);
    const char *why = NULL;
    if (first.kind != BV_STAGE_TENSOR || !first.sparse_input)
        why = "its first stage does not take sparse features (bv_stage.sparse_input)";
    else if (!k->spmm_dropout || !k->spmm_dropout_backward_x)
        why = "the compute plugin has no sparse first-layer kernels (spmm_dropout)";
    if (!why)
        return BV_OK;
    if (bv_graph_feature_storage(g->x) == BV_FEATURES_SPARSE)
        return bv_error_set(err, BV_ERR_INVALID, "dataset.feature_storage: sparse, but model "
                            "'%s' on compute '%s' cannot use them: %s", g->x->model.plugin->name,
                            g->x->compute.plugin->name, why);
    bv_log(BV_LOG_INFO, "features made dense (%.1f MB) for model '%s' on compute '%s': %s",
           (double)d->num_nodes * (double)d->num_features * 4e-6, g->x->model.plugin->name,
           g->x->compute.plugin->name, why);
    return bv_graph_features_convert(d, BV_FEATURES_DENSE, err);
}

/* Task fusion (compute: {plugin: lambda, fuse: true}) runs the model's last stage with the
 * loss: that stage must be tensor work. */
static bv_status check_fusion(const bv_engine *g, bv_error *err)
{
    const bv_experiment *x = g->x;
    const bv_opt_value *fuse = bv_opts_find(&x->compute.opts, "fuse");
    if (!fuse || !bv_opts_bool(&x->compute.opts, "fuse"))
        return BV_OK;
    size_t n = g->model_ops.stage_count(g->model);
    bv_stage last;
    bv_stage_copy(&g->model_ops, g->model_ops.stage(g->model, n - 1), &last);
    if (last.kind == BV_STAGE_TENSOR)
        return BV_OK;
    return bv_error_set(err, BV_ERR_INVALID, "%s:%d:%d: compute.fuse: task fusion runs the "
                        "model's last stage with the loss, but model '%s' ends with graph work "
                        "(%s)%s", fuse->pos.file, fuse->pos.line, fuse->pos.col,
                        x->model.plugin->name, last.name,
                        strcmp(x->model.plugin->name, "gcn") == 0
                            ? ": set model.order: gather_first" : "");
}

static bv_graph_engine_cfg engine_cfg(bv_engine *g, const bv_graph_dataset *d, uint64_t seed,
                                      const char *out_dir)
{
    const bv_experiment *x = g->x;
    bv_graph_engine_cfg cfg = {
        .model_ops = &g->model_ops,
        .model = g->model,
        .compute_ops = &x->compute_ops,
        .compute_opts = &x->compute.opts,
        .transport_ops = &x->transport_ops,
        .transport_opts = &x->transport.opts,
        .data = d,
        .seed = seed,
        .intervals = (int)bv_opts_int(&x->engine, "intervals"),
        .tensor_workers = (int)bv_opts_int(&x->engine, "tensor_workers"),
        .share_arrays = bv_opts_bool(&x->engine, "share_arrays"),
        .beta1 = (float)bv_opts_float(&x->train, "beta1"),
        .beta2 = (float)bv_opts_float(&x->train, "beta2"),
        .eps = (float)bv_opts_float(&x->train, "eps"),
        .weight_decay = (float)bv_opts_float(&x->train, "weight_decay"),
        .peer_timeout = bv_opts_float(&x->engine, "peer_timeout"),
        .start_timeout = bv_opts_float(&x->engine, "start_timeout"),
    };
    for (size_t i = 0; !cfg.gate_ops && i < x->nresilience; i++)
        if (bv_resilience_gates(x->resilience[i].plugin)) {
            cfg.gate_ops = &x->resilience_ops[i];
            cfg.gate_opts = &x->resilience[i].opts;
            cfg.gate_name = x->resilience[i].plugin->name;
        }
    if (x->cloud.plugin) { /* a cluster: its roles are processes */
        bv_experiment_dir(x, g->config_dir, sizeof g->config_dir);
        snprintf(g->experiment_file, sizeof g->experiment_file, "%s/experiment.yaml",
                 out_dir ? out_dir : ".");
        cfg.tensor_workers = (int)bv_opts_int(&x->cluster, "tensor_workers");
        cfg.param_servers = (int)bv_opts_int(&x->cluster, "param_servers");
        cfg.graph_servers = (int)bv_opts_int(&x->cluster, "graph_servers");
        bv_partition_method method = BV_PARTITION_METIS;
        bv_partition_method_parse(bv_opts_str(&x->cluster, "partition"), &method);
        cfg.partition = (int)method;
        cfg.partition_seed = (uint32_t)bv_opts_int(&x->cluster, "partition_seed");
        cfg.tcp = strcmp(bv_opts_str(&x->cluster, "links"), "tcp") == 0;
        cfg.address = bv_opts_str(&x->cluster, "address");
        cfg.hosts[0] = bv_opts_str(&x->cluster, "graph_server_hosts");
        cfg.hosts[1] = bv_opts_str(&x->cluster, "param_server_hosts");
        cfg.hosts[2] = bv_opts_str(&x->cluster, "tensor_worker_hosts");
        if (strcmp(bv_opts_str(&x->cluster, "membership"), "etcd") == 0) {
            cfg.etcd = bv_opts_str(&x->cluster, "etcd");
            cfg.lease_s = (int)bv_opts_int(&x->cluster, "lease");
        }
        cfg.cloud_ops = &x->cloud_ops;
        cfg.cloud_opts = &x->cloud.opts;
        cfg.run_info = (bv_run_info){out_dir, g->config_dir, seed};
        cfg.experiment_file = g->experiment_file;
        if (x->compute_ops.task_placement == BV_TASKS_ON_FUNCTIONS) {
            cfg.functions = true;
            cfg.tensor_workers = (int)bv_opts_int(&x->compute.opts, "max_lambdas");
            cfg.lambdas = (int)bv_opts_int(&x->compute.opts, "lambdas");
            cfg.worker_threads = (int)bv_opts_int(&x->compute.opts, "worker_threads");
            cfg.fn_remat = bv_opts_bool(&x->compute.opts, "remat");
            cfg.fn_fuse = bv_opts_bool(&x->compute.opts, "fuse");
            cfg.fn_stream = bv_opts_bool(&x->compute.opts, "stream");
        }
    }
    return cfg;
}

static bv_status create(const bv_experiment *x, void *data, const bv_engine_run *run,
                        bv_engine **out, bv_error *err)
{
    bv_graph_dataset *d = data;
    bv_engine *g = calloc(1, sizeof *g);
    if (!(*out = g))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    double wd = bv_opts_float(&x->train, "weight_decay");
    g->reported_wd = bv_opts_bool(&x->train, "decay_in_loss") ? wd : 0.0;
    bv_status st = make_model(g, x, d, err);
    if (st == BV_OK)
        st = check_fusion(g, err);
    if (st == BV_OK)
        st = fit_features(g, d, err);
    g->data = d;
    if (st != BV_OK)
        return st;
    bv_graph_engine_cfg cfg = engine_cfg(g, d, run->seed, run->out_dir);
    cfg.peer_failed = run->peer_failed;
    cfg.loop = run->loop;
    if (x->cloud.plugin) /* the run's copy of the experiment, which the roles load */
        snprintf(g->experiment_file, sizeof g->experiment_file, "%s/experiment.yaml",
                 run->run_dir ? run->run_dir : run->out_dir);
    if (cfg.tcp) { /* a fresh CURVE keypair for the run: only its roles hold the secret */
        st = bv_node_group_run_key(x->transport.plugin, "cluster.links: tcp", cfg.curve_secret,
                                   err);
        if (st != BV_OK)
            return st;
    }
    return bv_graph_engine_start(&cfg, &g->engine, err);
}

/* The limits the run's cloud imposes on its function workers, as every process of the run
 * reads them from the experiment: an instance of the cloud made for the asking. */
static bv_status function_limits(const bv_experiment *x, uint64_t seed, bv_function_limits *out,
                                 bv_error *err)
{
    bv_run_info info = {NULL, NULL, seed};
    bv_cloud *c = x->cloud_ops.create(&x->cloud.opts, &info, err);
    if (!c)
        return err->status ? err->status : BV_ERR_PLUGIN;
    *out = (bv_function_limits){.size = sizeof *out};
    bv_status st = x->cloud_ops.function_limits(c, out, err);
    x->cloud_ops.destroy(c);
    return st;
}

/* How an invocation is billed, by the run's price table (cost.prices; ledger.h): its time
 * rounded up to the table's unit, for the workers' memory cap (the table's size without
 * one). A table without `lambda:` bills by the millisecond, and its price is 0. */
static bv_status function_billing(const bv_experiment *x, bv_graph_engine_cfg *cfg,
                                  bv_error *err)
{
    bv_price_table *loaded = NULL; /* the shipped default, when cost: names none */
    const bv_price_table *t = &x->prices;
    bv_status st = BV_OK;
    if (!x->prices.ninstances) {
        if (!(loaded = malloc(sizeof *loaded)))
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        st = bv_prices_load(bv_opts_str(&x->cost, "prices"), NULL, loaded, err);
        t = loaded;
    }
    if (st == BV_OK) {
        cfg->fn_billing_ms = t->has_lambda && t->lambda_billing_ms > 0 ? t->lambda_billing_ms : 1;
        cfg->fn_bill_mb = t->has_lambda ? t->lambda_memory_mb : 0;
    }
    free(loaded);
    return st;
}

bv_status bv_graph_serve_role(const bv_experiment *x, void *data, const char *role, int index,
                              uint64_t seed, const char *book, const char *member,
                              bv_error *err)
{
    static const char *const kinds[] = {"graph", "param", "tensor", "function"};
    int kind = -1;
    for (int k = 0; k < 4; k++)
        if (strcmp(role, kinds[k]) == 0)
            kind = k;
    if (kind < 0)
        return bv_error_set(err, BV_ERR_INVALID, "unknown role '%s' (graph, param, tensor or "
                            "function)", role);
    if (!x->cloud.plugin)
        return bv_error_set(err, BV_ERR_INVALID, "%s has no cluster on a cloud to serve a "
                            "role of", x->path);
    /* A graph server of several reads the part the coordinator cut for it (and removes
     * the file: it is in memory now); a single graph server loads the dataset; the
     * parameter servers and tensor workers need only its sizes, from the book. */
    bv_graph_view part = {0};
    bv_graph_part_info info = {0};
    bv_graph_dataset shape = {0}; /* the whole graph's sizes, no arrays */
    bv_graph_dataset *loaded = NULL;
    bv_status st = BV_OK;
    if (kind == BV_GRAPH_ROLE_GRAPH && bv_opts_int(&x->cluster, "graph_servers") > 1) {
        char path[4200];
        const char *slash = strrchr(book, '/'); /* the book is in the run's directory */
        bv_graph_part_path(slash ? book : ".", slash ? (size_t)(slash - book) : 1, index, path,
                           sizeof path);
        st = bv_graph_view_read(path, &part, &info, err);
        if (st == BV_OK) {
            unlink(path);
            shape = (bv_graph_dataset){.num_nodes = info.whole_nodes,
                                       .num_features = part.local->num_features,
                                       .num_classes = part.local->num_classes};
            data = &shape;
        }
    } else if (kind != BV_GRAPH_ROLE_GRAPH && !data) {
        bv_graph_shape sizes;
        st = bv_graph_book_shape(book, &sizes, err);
        shape = (bv_graph_dataset){.num_nodes = sizes.num_nodes,
                                   .num_features = sizes.num_features,
                                   .num_classes = sizes.num_classes};
        data = &shape;
    } else if (!data && (st = load_data(x, &data, err)) == BV_OK) {
        loaded = data;
    }
    bv_engine g = {0};
    bv_opts worker_opts = {0};
    if (st == BV_OK)
        st = make_model(&g, x, data, err);
    if (st == BV_OK) /* a graph server's own data: the whole graph or its part */
        st = fit_features(&g, kind != BV_GRAPH_ROLE_GRAPH ? NULL : part.local ? part.local : data,
                          err);
    if (st == BV_OK) {
        bv_graph_engine_cfg cfg = engine_cfg(&g, data, seed, NULL);
        if (cfg.functions && kind == BV_GRAPH_ROLE_FUNCTION) /* a graph server's controller
                                                                asks its own cloud */
            st = function_limits(x, seed, &cfg.fn_limits, err);
        if (st == BV_OK && cfg.functions && kind == BV_GRAPH_ROLE_GRAPH) {
            cfg.fn_cloud_ops = &x->cloud_ops; /* it invokes its function workers */
            cfg.experiment_file = x->path;    /* which load what this process loaded */
            st = function_billing(x, &cfg, err);
        }
        if (st == BV_OK && kind == BV_GRAPH_ROLE_FUNCTION) {
            /* a fraction of a core: its own kernel threads, its link's bandwidth */
            char threads[16];
            snprintf(threads, sizeof threads, "%d", cfg.worker_threads);
            st = bv_opts_copy(&x->compute.opts, &worker_opts, err);
            if (st == BV_OK)
                st = bv_opts_set(&worker_opts, "threads", threads, err);
            cfg.compute_opts = &worker_opts;
            bv_role_limit_bandwidth(cfg.fn_limits.bandwidth_mbps * 1e6 / 8);
        }
        cfg.cloud_ops = NULL; /* a role starts no processes */
        if (part.local) {
            cfg.part = &part;
            cfg.part_fingerprint = info.fingerprint;
        }
        bv_membership joined = {0}; /* a function worker is no member: its pool watches */
        char what[48];
        static const char *const names[] = {"graph server", "parameter server",
                                            "tensor worker"};
        if (st == BV_OK && member && (!cfg.etcd || kind == BV_GRAPH_ROLE_FUNCTION))
            st = bv_error_set(err, BV_ERR_INVALID, "--member %s: this role holds no etcd "
                              "lease (cluster.membership)", member);
        else if (st == BV_OK && member) {
            snprintf(what, sizeof what, "%s %d", names[kind], index);
            st = bv_membership_node(&joined, cfg.etcd, cfg.lease_s, member, what, err);
        }
        if (st == BV_OK)
            st = bv_graph_engine_serve(&cfg, (bv_graph_role_kind)kind, index, book, err);
        bv_membership_leave(&joined);
    }
    bv_opts_free(&worker_opts);
    if (g.model)
        g.model_ops.destroy(g.model);
    bv_graph_view_free(&part); /* what the engine did not take over */
    bv_graph_free(loaded);
    return st;
}

static bv_status init(bv_engine *g, bv_error *err)
{
    return bv_graph_engine_init_weights(g->engine, err);
}

static double lr(const bv_engine *g, int64_t epoch)
{
    (void)epoch;
    return bv_opts_float(&g->x->train, "lr");
}

static bv_status train(bv_engine *g, int64_t epoch, double lr_now, bv_record *rec,
                       bv_error *err)
{
    bv_epoch_stats tr, ev;
    bv_status st = bv_graph_engine_train_epoch(g->engine, epoch, (float)lr_now, &tr, err);
    if (st == BV_OK)
        st = bv_graph_engine_evaluate(g->engine, epoch, &ev, err);
    if (st != BV_OK)
        return st;
    /* Kipf's loss adds weight_decay * l2_loss(W) = wd/2 * sum(W^2) */
    double wd = 0.5 * g->reported_wd;
    *rec = (bv_record){{
        [F_EPOCH] = (double)(epoch + 1),
        [F_TRAIN_LOSS] = tr.loss[0] + wd * tr.decay_sumsq,
        [F_TRAIN_ACC] = tr.accuracy[0],
        [F_VAL_LOSS] = ev.loss[1] + wd * ev.decay_sumsq,
        [F_VAL_ACC] = ev.accuracy[1],
        [F_TEST_LOSS] = ev.loss[2] + wd * ev.decay_sumsq,
        [F_TEST_ACC] = ev.accuracy[2],
        [F_LR] = lr_now,
    }};
    return BV_OK;
}

static bv_status set_knob(bv_engine *g, const char *plugin, const char *knob, double value,
                          bv_error *err)
{
    return bv_graph_engine_set_knob(g->engine, plugin, knob, value, err);
}

static bv_status get_state(bv_engine *g, bv_state *s, bv_error *err)
{
    return bv_graph_engine_get_state(g->engine, s, err);
}

static bv_status set_state(bv_engine *g, const bv_state *s, bv_error *err)
{
    return bv_graph_engine_set_state(g->engine, s, err);
}

static uint32_t params_crc32c(bv_engine *g)
{
    bv_state s = {0};
    bv_error ignored;
    if (bv_graph_engine_get_state(g->engine, &s, &ignored) != BV_OK)
        return 0;
    uint32_t crc = 0;
    for (size_t i = 0; i < s.count; i++)
        if (strncmp(s.blobs[i].name, "param/", 6) == 0)
            crc = bv_crc32c(crc, s.blobs[i].data, s.blobs[i].size);
    bv_state_free(&s);
    return crc;
}

/* The first epoch with the highest validation accuracy. */
static size_t best_epoch(const bv_record *h, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (h[i].v[F_VAL_ACC] > h[best].v[F_VAL_ACC])
            best = i;
    return best;
}

/* The epoch whose model result.json reports (train.select). Every epoch's test metrics
 * are already in the history, so no weights need restoring. */
static size_t select_epoch(const bv_record *h, size_t n, const char *mode)
{
    size_t pick = n - 1;
    if (strcmp(mode, "last") == 0)
        return pick;
    double best_acc = -1, best_loss = INFINITY;
    for (size_t i = 0; i < n; i++) {
        double acc = h[i].v[F_VAL_ACC], loss = h[i].v[F_VAL_LOSS];
        if (strcmp(mode, "best_val_accuracy") == 0) {
            if (acc > best_acc)
                best_acc = acc, pick = i;
        } else if (strcmp(mode, "best_val_loss") == 0) {
            if (loss < best_loss)
                best_loss = loss, pick = i;
        } else { /* best_val_both: GAT's execute_cora.py saves when both reach their best */
            if (acc >= best_acc && loss <= best_loss)
                pick = i;
            if (acc > best_acc)
                best_acc = acc;
            if (loss < best_loss)
                best_loss = loss;
        }
    }
    return pick;
}

static void result(bv_engine *g, const bv_history *h, bv_run_result *res)
{
    const bv_record *last = &h->units[h->nunits - 1];
    size_t best = best_epoch(h->units, h->nunits);
    size_t pick = select_epoch(h->units, h->nunits, bv_opts_str(&g->x->train, "select"));
    double epochs = last->v[F_EPOCH], best_val = h->units[best].v[F_VAL_ACC];
    double test = h->units[pick].v[F_TEST_ACC];
    bv_result_add(res, "epochs", epochs, true, BV_RESULT_MEAN);
    bv_result_add(res, "best_epoch", h->units[best].v[F_EPOCH], true, 0);
    bv_result_add(res, "selected_epoch", h->units[pick].v[F_EPOCH], true, 0);
    bv_result_add(res, "best_val_accuracy", best_val, false, BV_RESULT_MEAN);
    bv_result_add(res, "val_accuracy", last->v[F_VAL_ACC], false, BV_RESULT_MEAN);
    bv_result_add(res, "test_accuracy", test, false, BV_RESULT_MEAN | BV_RESULT_HEADLINE);
    bv_result_add(res, "train_loss", last->v[F_TRAIN_LOSS], false, 0);
    bv_result_add(res, "val_loss", last->v[F_VAL_LOSS], false, 0);
    /* what the features take as held (issue 19: where the memory went) */
    bv_result_add(res, "features_sparse", bv_graph_features_sparse(g->data), true, 0);
    bv_result_add(res, "features_nonzero", (double)bv_graph_features_nnz(g->data), true, 0);
    bv_result_add(res, "features_mb", (double)bv_graph_features_bytes(g->data) / 1048576.0,
                  false, 0);
    bv_result_add(res, "dataset_mb", (double)bv_graph_dataset_bytes(g->data) / 1048576.0,
                  false, 0);
    bv_graph_boundary b = bv_graph_engine_boundary(g->engine);
    /* the layout, which a simulation's profile scales from (docs/simulation.md) */
    bv_result_add(res, "graph_servers", b.parts, true, 0);
    bv_result_add(res, "intervals", bv_graph_engine_intervals(g->engine), true, 0);
    if (b.parts > 1) { /* several graph servers: what crossed between them */
        bv_result_add(res, "edge_cut", (double)b.edge_cut, true, 0);
        bv_result_add(res, "boundary_bytes_per_epoch", (double)b.measured_bytes, true, 0);
        bv_result_add(res, "predicted_boundary_bytes_per_epoch", (double)b.predicted_bytes,
                      true, 0);
    }
    const char *fn_names[16]; /* on functions: the run's invocations, bills, bytes */
    const double *fn;
    size_t nfn = bv_graph_engine_functions(g->engine, fn_names, &fn);
    for (size_t k = 0; k < nfn; k++) /* counts, but seconds and GB-seconds */
        bv_result_add(res, fn_names[k], fn[k], !strstr(fn_names[k], "seconds"), 0);
    int64_t fewest, most;
    if (bv_graph_engine_server_load(g->engine, &fewest, &most) > 1) {
        bv_result_add(res, "param_server_intervals_fewest", (double)fewest, true, 0);
        bv_result_add(res, "param_server_intervals_most", (double)most, true, 0);
    }
    snprintf(res->summary, sizeof res->summary,
             "test accuracy %.4f (best val %.4f at epoch %lld), %lld epochs in %.2f s; %s",
             test, best_val, (long long)h->units[best].v[F_EPOCH], (long long)epochs,
             h->wall_seconds, h->stop_reason);
    snprintf(res->brief, sizeof res->brief,
             "test accuracy %.4f (best val %.4f) after %lld epochs, %.2f s", test, best_val,
             (long long)epochs, h->wall_seconds);
}

static void progress(const bv_engine *g, const bv_history *h, char *buf, size_t len)
{
    (void)g;
    const bv_record *last = &h->units[h->nunits - 1];
    snprintf(buf, len, "loss %.4f  train %.3f  val %.3f (best %.3f)", last->v[F_TRAIN_LOSS],
             last->v[F_TRAIN_ACC], last->v[F_VAL_ACC],
             h->units[best_epoch(h->units, h->nunits)].v[F_VAL_ACC]);
}

const bv_engine_ops bv_graph_engine_ops = {
    .name = "graph",
    .unit = "epoch",
    .train_units_option = "epochs",
    .dataset_schema = bv_graph_dataset_schema,
    .train_schema = bv_graph_train_schema,
    .unit_record = &epoch_record,
    .eval_record = NULL,
    .check = bv_graph_check,
    .check_model = bv_graph_check_model,
    .load_data = load_data,
    .free_data = free_data,
    .create = create,
    .destroy = destroy,
    .init = init,
    .lr = lr,
    .train = train,
    .evaluate = NULL,
    .eval_due = NULL,
    .set_knob = set_knob,
    .get_state = get_state,
    .set_state = set_state,
    .params_crc32c = params_crc32c,
    .result = result,
    .progress = progress,
};
