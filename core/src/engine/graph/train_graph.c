/* The training loop of a graph model (train_graph.h). */
#include "train_graph.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bivouac/log.h"
#include "bivouac/model.h"
#include "bivouac/resilience.h"
#include "bivouac/wire.h"
#include "clock.h"
#include "engine_graph.h"
#include "json_out.h"

/* One epoch's metrics; also saved in checkpoints so a resumed run can rebuild
 * metrics.jsonl and replay the policy. Field order is the checkpoint layout. */
typedef struct epoch_record {
    int64_t epoch; /* 1-based */
    double train_loss, train_accuracy;
    double val_loss, val_accuracy;
    double test_loss, test_accuracy;
    double lr;
    double seconds; /* wall time since the run started, resumes included */
} epoch_record;

typedef struct run_state {
    const bv_experiment *x;
    const bv_run_options *o;
    const bv_model_ops *model_ops;
    bv_model *model;
    bv_graph_engine *engine;
    bv_resilience *res[BV_MAX_RESILIENCE];
    bv_policy *policy;
    bool policy_active;
    bool policy_stops_on_error;
    bool policy_failed; /* it failed (in this run or, replayed, before a resume) with stop */
    epoch_record *history;
    size_t nhistory, cap;
    double lr;
    double wall_before; /* seconds spent before a resume */
    double t0;
    double last_draw; /* when the progress line was last redrawn */
    FILE *metrics;
} run_state;


static bv_status history_push(run_state *r, const epoch_record *rec, bv_error *err)
{
    if (r->nhistory == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        epoch_record *h = realloc(r->history, cap * sizeof *h);
        if (!h)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        r->history = h;
        r->cap = cap;
    }
    r->history[r->nhistory++] = *rec;
    return BV_OK;
}

static void write_metrics_line(FILE *f, const epoch_record *rec)
{
    fprintf(f, "{\"epoch\": %lld, \"train_loss\": ", (long long)rec->epoch);
    bv_json_number(f, rec->train_loss);
    bv_json_field(f, "train_accuracy", rec->train_accuracy);
    bv_json_field(f, "val_loss", rec->val_loss);
    bv_json_field(f, "val_accuracy", rec->val_accuracy);
    bv_json_field(f, "test_loss", rec->test_loss);
    bv_json_field(f, "test_accuracy", rec->test_accuracy);
    bv_json_field(f, "lr", rec->lr);
    bv_json_field(f, "seconds", rec->seconds);
    fputs("}\n", f);
    fflush(f);
}

/* The policy sees what a user would watch: no test metrics. */
static bv_status policy_epoch_end(run_state *r, const epoch_record *rec, bool replay,
                                  bool *stop, char *reason, size_t reason_len, bv_error *err)
{
    if (!r->policy_active)
        return BV_OK;
    bv_metric m[] = {
        {"epoch", (double)rec->epoch},     {"train_loss", rec->train_loss},
        {"train_accuracy", rec->train_accuracy}, {"val_loss", rec->val_loss},
        {"val_accuracy", rec->val_accuracy},     {"lr", rec->lr},
        {"seconds", rec->seconds},
    };
    bv_policy_actions a;
    bv_error perr = {0};
    if (bv_policy_call(r->policy, "epoch_end", m, sizeof m / sizeof m[0], &a, &perr) != BV_OK) {
        r->policy_active = false;
        if (r->policy_stops_on_error) {
            snprintf(reason, reason_len, "policy error: %.280s", perr.msg);
            *stop = true;
            r->policy_failed = true;
            return bv_error_set(err, BV_ERR_INVALID, "%s", perr.msg);
        }
        if (!replay)
            bv_log(BV_LOG_WARN, "%s; the run goes on without the policy", perr.msg);
        return BV_OK;
    }
    if (a.set_lr && !replay) /* a replayed lr is already in the restored state */
        r->lr = a.lr;
    if (a.stop) {
        *stop = true;
        snprintf(reason, reason_len, "policy: %s", a.reason[0] ? a.reason : "stop");
    }
    return BV_OK;
}

/* The full training state: the parameter server's plus the loop's own. */
static bv_status snapshot(run_state *r, bv_state *s, bv_error *err)
{
    bv_status st = bv_graph_engine_get_state(r->engine, s, err);
    if (st != BV_OK)
        return st;
    int64_t epochs = (int64_t)r->nhistory;
    double wall = r->wall_before + (bv_now_seconds() - r->t0);
    uint64_t seed = r->o->seed;
    s->epoch = epochs;
    if (bv_state_add(s, "run/epoch", &epochs, sizeof epochs) != BV_OK ||
        bv_state_add(s, "run/lr", &r->lr, sizeof r->lr) != BV_OK ||
        bv_state_add(s, "run/seed", &seed, sizeof seed) != BV_OK ||
        bv_state_add(s, "run/wall", &wall, sizeof wall) != BV_OK ||
        bv_state_add(s, "run/history", r->history, r->nhistory * sizeof *r->history) != BV_OK) {
        bv_state_free(s);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the training state");
    }
    return BV_OK;
}

static bv_status restore(run_state *r, bool *stop, char *reason, size_t reason_len,
                         bv_error *err)
{
    bv_state s = {0};
    bv_status st = BV_ERR_IO;
    bool any = false;
    for (size_t i = 0; i < r->x->nresilience; i++) {
        const bv_resilience_ops *ops = r->x->resilience[i].plugin->ops;
        if (!ops->restore)
            continue;
        any = true;
        st = ops->restore(r->res[i], &s, err);
        if (st == BV_OK)
            break;
    }
    if (!any)
        return bv_error_set(err, BV_ERR_INVALID, "--resume needs a resilience strategy that "
                            "keeps state, e.g. resilience: [{plugin: checkpoint}]");
    if (st != BV_OK)
        return st;
    int64_t epochs = 0;
    uint64_t seed = 0;
    const bv_blob *hist = bv_state_find(&s, "run/history");
    if (!bv_state_read(&s, "run/epoch", &epochs, sizeof epochs) ||
        !bv_state_read(&s, "run/lr", &r->lr, sizeof r->lr) ||
        !bv_state_read(&s, "run/seed", &seed, sizeof seed) ||
        !bv_state_read(&s, "run/wall", &r->wall_before, sizeof r->wall_before) || !hist ||
        hist->size != (size_t)epochs * sizeof(epoch_record)) {
        bv_state_free(&s);
        return bv_error_set(err, BV_ERR_CORRUPT, "the checkpoint lacks the run's own state");
    }
    if (seed != r->o->seed) {
        bv_state_free(&s);
        return bv_error_set(err, BV_ERR_INVALID, "the checkpoint was made with seed %llu, not %llu",
                            (unsigned long long)seed, (unsigned long long)r->o->seed);
    }
    st = bv_graph_engine_set_state(r->engine, &s, err);
    for (int64_t i = 0; st == BV_OK && i < epochs; i++) {
        epoch_record rec;
        memcpy(&rec, (const char *)hist->data + (size_t)i * sizeof rec, sizeof rec);
        st = history_push(r, &rec, err);
    }
    bv_state_free(&s);
    /* Replaying the metrics rebuilds the policy's own state exactly (policies are
     * deterministic: no clock, no random numbers). */
    for (size_t i = 0; st == BV_OK && i < r->nhistory; i++) {
        *stop = false;
        policy_epoch_end(r, &r->history[i], true, stop, reason, reason_len, err);
    }
    bv_log(BV_LOG_INFO, "resumed after epoch %lld", (long long)epochs);
    return st;
}

static void show_progress(run_state *r, const epoch_record *rec, int64_t total,
                          double best_val, double session_start, int64_t session_epochs)
{
    double now = bv_now_seconds();
    if (now - r->last_draw < 0.1 && rec->epoch < total) /* at most 10 redraws a second */
        return;
    r->last_draw = now;
    double elapsed = now - session_start;
    double eta = session_epochs > 0 ? elapsed / (double)session_epochs *
                                          (double)(total - rec->epoch)
                                    : 0;
    fprintf(stderr,
            "\r\033[Kepoch %lld/%lld  loss %.4f  train %.3f  val %.3f (best %.3f)  "
            "%.1fs elapsed  ETA %.1fs",
            (long long)rec->epoch, (long long)total, rec->train_loss, rec->train_accuracy,
            rec->val_accuracy, best_val, r->wall_before + elapsed, eta);
    fflush(stderr);
}

static void finish(run_state *r)
{
    for (size_t i = 0; i < r->x->nresilience; i++)
        if (r->res[i])
            ((const bv_resilience_ops *)r->x->resilience[i].plugin->ops)->destroy(r->res[i]);
    bv_graph_engine_stop(r->engine);
    if (r->model)
        r->model_ops->destroy(r->model);
    bv_policy_free(r->policy);
    if (r->metrics)
        fclose(r->metrics);
    free(r->history);
}

static bv_status setup(run_state *r, const bv_graph_dataset *data, bv_error *err)
{
    const bv_experiment *x = r->x;
    r->model_ops = &x->model_ops;
    bv_graph_shape shape = {data->num_nodes, data->num_features, data->num_classes};
    r->model = r->model_ops->create(&x->model.opts, &shape, err);
    if (!r->model)
        return err->status ? err->status : BV_ERR_PLUGIN;
    bv_graph_engine_cfg cfg = {
        .model_ops = r->model_ops,
        .model = r->model,
        .compute_ops = &x->compute_ops,
        .compute_opts = &x->compute.opts,
        .transport_ops = &x->transport_ops,
        .transport_opts = &x->transport.opts,
        .data = data,
        .seed = r->o->seed,
        .intervals = (int)bv_opts_int(&x->engine, "intervals"),
        .tensor_workers = (int)bv_opts_int(&x->engine, "tensor_workers"),
        .share_arrays = bv_opts_bool(&x->engine, "share_arrays"),
        .beta1 = (float)bv_opts_float(&x->train, "beta1"),
        .beta2 = (float)bv_opts_float(&x->train, "beta2"),
        .eps = (float)bv_opts_float(&x->train, "eps"),
        .weight_decay = (float)bv_opts_float(&x->train, "weight_decay"),
    };
    bv_status st = bv_graph_engine_start(&cfg, &r->engine, err);
    if (st != BV_OK)
        return st;
    char config_dir[4096];
    snprintf(config_dir, sizeof config_dir, "%s", x->path);
    char *slash = strrchr(config_dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(config_dir, sizeof config_dir, ".");
    bv_run_info info = {r->o->out_dir, config_dir, r->o->seed};
    for (size_t i = 0; i < x->nresilience; i++) {
        const bv_resilience_ops *ops = x->resilience[i].plugin->ops;
        r->res[i] = ops->create(&x->resilience[i].opts, &info, err);
        if (!r->res[i])
            return err->status ? err->status : BV_ERR_PLUGIN;
    }
    if (x->has_policy && !x->policy_broken) { /* a broken one was reported at validation */
        bv_policy_limits lim = {
            bv_opts_int(&x->policy, "instructions"),
            (size_t)bv_opts_int(&x->policy, "memory_mb") << 20,
        };
        st = bv_policy_load(bv_opts_str(&x->policy, "file"), x->policy_params,
                            x->npolicy_params, &lim, &r->policy, err);
        if (st != BV_OK) {
            if (strcmp(bv_opts_str(&x->policy, "on_error"), "stop") == 0)
                return st;
            bv_log(BV_LOG_WARN, "%s; the run goes on without the policy", err->msg);
            bv_error_clear(err);
        } else {
            r->policy_active = true;
        }
        r->policy_stops_on_error = strcmp(bv_opts_str(&x->policy, "on_error"), "stop") == 0;
    }
    return BV_OK;
}

/* The epoch whose model result.json reports (train.select). Every epoch's test metrics
 * are already in the history, so no weights need restoring. */
static size_t select_epoch(const epoch_record *h, size_t n, const char *mode)
{
    size_t pick = n - 1;
    if (strcmp(mode, "last") == 0)
        return pick;
    double best_acc = -1, best_loss = INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(mode, "best_val_accuracy") == 0) {
            if (h[i].val_accuracy > best_acc)
                best_acc = h[i].val_accuracy, pick = i;
        } else if (strcmp(mode, "best_val_loss") == 0) {
            if (h[i].val_loss < best_loss)
                best_loss = h[i].val_loss, pick = i;
        } else { /* best_val_both: GAT's execute_cora.py saves when both reach their best */
            if (h[i].val_accuracy >= best_acc && h[i].val_loss <= best_loss)
                pick = i;
            if (h[i].val_accuracy > best_acc)
                best_acc = h[i].val_accuracy;
            if (h[i].val_loss < best_loss)
                best_loss = h[i].val_loss;
        }
    }
    return pick;
}

static void final_hash(run_state *r, bv_run_result *res)
{
    bv_state s = {0};
    bv_error ignored;
    if (bv_graph_engine_get_state(r->engine, &s, &ignored) != BV_OK)
        return;
    uint32_t crc = 0;
    for (size_t i = 0; i < s.count; i++)
        if (strncmp(s.blobs[i].name, "param/", 6) == 0)
            crc = bv_crc32c(crc, s.blobs[i].data, s.blobs[i].size);
    res->params_hash = crc;
    bv_state_free(&s);
}

bv_status bv_train_graph(const bv_experiment *x, const bv_graph_dataset *data,
                         const bv_run_options *o, bv_run_result *res, bv_error *err)
{
    memset(res, 0, sizeof *res);
    run_state r = {.x = x, .o = o};
    r.t0 = bv_now_seconds();
    r.lr = bv_opts_float(&x->train, "lr");
    int64_t epochs = bv_opts_int(&x->train, "epochs");
    double wd = bv_opts_float(&x->train, "weight_decay");
    double reported_wd = bv_opts_bool(&x->train, "decay_in_loss") ? wd : 0.0;
    bool stop = false;
    snprintf(res->stop_reason, sizeof res->stop_reason, "reached %lld epochs",
             (long long)epochs);
    bv_status st = setup(&r, data, err);
    if (st == BV_OK)
        st = o->resume ? restore(&r, &stop, res->stop_reason, sizeof res->stop_reason, err)
                       : bv_graph_engine_init_weights(r.engine, err);
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", o->out_dir);
    if (st == BV_OK && !(r.metrics = fopen(path, "w")))
        st = bv_error_set(err, BV_ERR_IO, "cannot write %s", path);
    double best_val = -1;
    for (size_t i = 0; st == BV_OK && i < r.nhistory; i++) {
        write_metrics_line(r.metrics, &r.history[i]);
        if (r.history[i].val_accuracy > best_val) {
            best_val = r.history[i].val_accuracy;
            res->best_epoch = r.history[i].epoch;
        }
    }
    double session_start = bv_now_seconds();
    int64_t session_epochs = 0;
    for (int64_t epoch = (int64_t)r.nhistory; st == BV_OK && !stop && epoch < epochs; epoch++) {
        bv_epoch_stats tr, ev;
        st = bv_graph_engine_train_epoch(r.engine, epoch, (float)r.lr, &tr, err);
        if (st == BV_OK)
            st = bv_graph_engine_evaluate(r.engine, epoch, &ev, err);
        if (st != BV_OK)
            break;
        /* Kipf's loss adds weight_decay * l2_loss(W) = wd/2 * sum(W^2) */
        epoch_record rec = {
            .epoch = epoch + 1,
            .train_loss = tr.loss[0] + 0.5 * reported_wd * tr.decay_sumsq,
            .train_accuracy = tr.accuracy[0],
            .val_loss = ev.loss[1] + 0.5 * reported_wd * ev.decay_sumsq,
            .val_accuracy = ev.accuracy[1],
            .test_loss = ev.loss[2] + 0.5 * reported_wd * ev.decay_sumsq,
            .test_accuracy = ev.accuracy[2],
            .lr = r.lr,
            .seconds = r.wall_before + (bv_now_seconds() - r.t0),
        };
        if ((st = history_push(&r, &rec, err)) != BV_OK)
            break;
        session_epochs++;
        write_metrics_line(r.metrics, &rec);
        if (rec.val_accuracy > best_val) {
            best_val = rec.val_accuracy;
            res->best_epoch = rec.epoch;
        }
        if (o->progress)
            show_progress(&r, &rec, epochs, best_val, session_start, session_epochs);
        policy_epoch_end(&r, &rec, false, &stop, res->stop_reason, sizeof res->stop_reason,
                         err);
        if (x->nresilience) {
            bv_state s = {0};
            st = snapshot(&r, &s, err);
            for (size_t i = 0; st == BV_OK && i < x->nresilience; i++) {
                const bv_resilience_ops *ops = x->resilience[i].plugin->ops;
                st = ops->epoch_end(r.res[i], &s, err);
            }
            bv_state_free(&s);
        }
        if (o->kill_after_epoch && rec.epoch == o->kill_after_epoch)
            raise(SIGKILL); /* fault injection for the kill-and-resume test */
    }
    if (o->progress && session_epochs)
        fputc('\n', stderr);
    res->failed = r.policy_failed;
    if (st == BV_OK && r.nhistory > 0) {
        const epoch_record *last = &r.history[r.nhistory - 1];
        res->epochs = last->epoch;
        res->best_val_accuracy = best_val;
        res->val_accuracy = last->val_accuracy;
        size_t pick = select_epoch(r.history, r.nhistory, bv_opts_str(&x->train, "select"));
        res->test_accuracy = r.history[pick].test_accuracy;
        res->selected_epoch = r.history[pick].epoch;
        res->train_loss = last->train_loss;
        res->val_loss = last->val_loss;
        res->wall_seconds = r.wall_before + (bv_now_seconds() - r.t0);
        final_hash(&r, res);
    }
    finish(&r);
    return st;
}
