/* The sequence engine behind the training loop's interface (engine.h): a unit is one
 * optimizer step of a sequence model (seqmodel.h) on a batch of the character corpus,
 * trained by the layer engine (layer_engine.h) with AdamW (adamw.h), and evaluated every
 * eval_interval steps and once more, on more batches, at the end. Everything random is a
 * pure function of (seed, step): the batch a step trains on, the evaluation batches, the
 * dropout masks. With the parameters, AdamW moments and step count in the checkpoint, a
 * resumed run continues bit for bit (same thread count). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bivouac/log.h"
#include "bivouac/series.h"
#include "bivouac/wire.h"
#include "adamw.h"
#include "clock.h"
#include "engine.h"
#include "experiment.h"
#include "layer_engine.h"
#include "node_group.h"
#include "pipeline_plan.h"
#include "pipeline_seq.h"
#include "plugin_arrays.h"
#include "rng.h"
#include "text_corpus.h"

/* ---- the experiment: schemas, data checks, the corpus ------------------------------- */

static const bv_option dataset_schema[] = {
    BV_OPT_FILE("text", "", "UTF-8 text file, relative to the experiment file"),
    BV_OPT_STR("name", "",
               "text under $BIVOUAC_DATA_DIR: a file, or a directory holding input.txt"),
    BV_OPT_FLOAT_RANGE("val_fraction", "0.1", 0.0001, 0.9,
                       "the last fraction of the text is the validation split (nanoGPT: 0.1)"),
    BV_OPT_END,
};

static const bv_option train_schema[] = {
    BV_OPT_INT_RANGE("steps", "2000", 1, 1e12, "optimizer steps (iterations)"),
    BV_OPT_INT_RANGE("batch", "12", 1, 1e6, "sequences per step"),
    BV_OPT_INT_RANGE("block", "64", 1, 1e6, "tokens per sequence (context length)"),
    BV_OPT_FLOAT_RANGE("lr", "1e-3", 0, 10, "peak learning rate"),
    BV_OPT_FLOAT_RANGE("min_lr", "1e-4", 0, 10, "learning rate at the end of the cosine"),
    BV_OPT_INT_RANGE("warmup", "100", 0, 1e12, "linear warmup steps"),
    BV_OPT_INT_RANGE("decay_steps", "0", 0, 1e12,
                     "step where the cosine reaches min_lr (0: steps)"),
    BV_OPT_FLOAT_RANGE("weight_decay", "0.1", 0, 10, "AdamW decay on matrices only"),
    BV_OPT_FLOAT_RANGE("beta1", "0.9", 0, 0.999999, "AdamW beta1"),
    BV_OPT_FLOAT_RANGE("beta2", "0.99", 0, 0.999999, "AdamW beta2"),
    BV_OPT_FLOAT_RANGE("eps", "1e-8", 0, 1, "AdamW epsilon"),
    BV_OPT_FLOAT_RANGE("grad_clip", "1.0", 0, 1e9, "clip the global gradient norm (0: off)"),
    BV_OPT_INT_RANGE("eval_interval", "250", 1, 1e12,
                     "evaluate (and offer a checkpoint) every this many steps"),
    BV_OPT_INT_RANGE("eval_iters", "20", 1, 1e9, "batches per split at each evaluation"),
    BV_OPT_INT_RANGE("final_eval_iters", "200", 1, 1e9,
                     "batches per split for the final val_loss in result.json"),
    BV_OPT_INT_RANGE("seed", "1337", 0, 9007199254740992.0,
                     "seed for weights, batches and dropout"),
    BV_OPT_END,
};


/* Where the experiment's text is. */
static void corpus_path(const bv_experiment *x, char *buf, size_t len)
{
    const char *text = bv_opts_str(&x->dataset, "text");
    const char *name = bv_opts_str(&x->dataset, "name");
    if (text[0]) {
        snprintf(buf, len, "%s", text);
        return;
    }
    const char *root = getenv("BIVOUAC_DATA_DIR");
    snprintf(buf, len, "%s/%s", root && *root ? root : "data", name);
    struct stat st;
    if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "/input.txt");
    }
}

/* The engine offers its state to the resilience strategies only at evaluations (every
 * eval_interval steps) and at the end, and a strategy with an `every` option keeps the
 * offers whose step it divides: one that does not divide eval_interval would keep far
 * fewer states than asked, or none at all. */
static void check_resilience_every(const bv_experiment *x, bv_diag *diag)
{
    int64_t interval = bv_opts_int(&x->train, "eval_interval");
    const bv_node *list = bv_node_get(x->root, "resilience");
    for (size_t i = 0; i < x->nresilience; i++) {
        const bv_opt_value *every = bv_opts_find(&x->resilience[i].opts, "every");
        if (!every || every->decl->type != BV_OPT_INT || every->v.i <= 0 ||
            interval % every->v.i == 0)
            continue;
        const bv_node *item = list && list->kind == BV_NODE_SEQ && i < list->count
                                  ? list->items[i]
                                  : NULL;
        bv_diag_add(diag, bv_experiment_value_pos(&x->resilience[i].opts, "every", item),
                    "%s 'every' (%lld) must divide train.eval_interval (%lld): the engine "
                    "offers its state only at evaluations",
                    x->resilience[i].plugin->name, (long long)every->v.i, (long long)interval);
    }
}

static void free_data(void *data);

/* A call on the pipeline runs again on a new layout at most this often in a row. */
#define RELAYOUTS_IN_A_ROW 8

static bool pipelined(const bv_experiment *x)
{
    return bv_opts_int(&x->pipeline, "stages") > 1 || bv_opts_int(&x->pipeline, "pipelines") > 1 ||
           bv_opts_int(&x->pipeline, "microbatches") > 1;
}

/* `pipeline:` against the model and the batch: the stages' layers, whole microbatches. */
static void check_pipeline(const bv_experiment *x, bv_diag *diag)
{
    const bv_node *cloud = bv_node_get(x->root, "cloud");
    if (cloud && !pipelined(x))
        bv_diag_add(diag, &cloud->pos, "section 'cloud' runs a pipeline's stages as "
                    "processes, and this run has none: set pipeline.stages (or pipelines, "
                    "microbatches) above 1, or leave 'cloud' out");
    if (!pipelined(x))
        return;
    bv_pipeline_plan plan;
    if (bv_pipeline_plan_make(x, &plan, diag) != BV_OK)
        return;
    int64_t batch = bv_opts_int(&x->train, "batch");
    int64_t d = bv_opts_int(&x->pipeline, "pipelines"), m = plan.microbatches;
    if (batch % (d * m) != 0) {
        const bv_node *p = bv_node_get(x->root, "pipeline");
        const bv_node *v = p ? bv_node_get(p, "microbatches") : NULL;
        bv_diag_add(diag, v ? &v->pos : p ? &p->pos : NULL,
                    "train.batch (%lld) must be a multiple of pipelines x microbatches "
                    "(%lld x %lld): every microbatch has the same number of sequences",
                    (long long)batch, (long long)d, (long long)m);
    }
    if (x->model.plugin && x->model.plugin->abi_minor < 8)
        bv_diag_add(diag, NULL, "model plugin '%s' was built for ABI 1.%u; microbatches need "
                    "1.8 (bv_seq_ctx.row0): rebuild it", x->model.plugin->name,
                    x->model.plugin->abi_minor);
}

static void check(bv_experiment *x, const bv_node *dataset, bool dataset_valid, bool clean,
                  bv_diag *diag)
{
    (void)dataset_valid;
    if (!clean) /* the data is read only once the sections are known to be valid */
        return;
    check_resilience_every(x, diag);
    const char *text = bv_opts_str(&x->dataset, "text");
    const char *name = bv_opts_str(&x->dataset, "name");
    const bv_pos *dpos = bv_experiment_value_pos(&x->dataset, text[0] ? "text" : "name", dataset);
    if ((text[0] != '\0') == (name[0] != '\0')) {
        bv_diag_add(diag, dataset ? &dataset->pos : NULL,
                    text[0] ? "dataset takes only one of 'text' or 'name'"
                            : "dataset needs 'text' (a UTF-8 file) or 'name' for a "
                              "sequence model");
        return;
    }
    char path[4096];
    corpus_path(x, path, sizeof path);
    /* the label: the name, or the file's name ("input.txt": its directory's name) */
    char label[4096];
    snprintf(label, sizeof label, "%s", name[0] ? name : path);
    char *base = strrchr(label, '/');
    if (base && strcmp(base, "/input.txt") == 0) {
        *base = '\0';
        base = strrchr(label, '/');
    }
    free(x->dataset_label);
    x->dataset_label = strdup(base ? base + 1 : label);

    bv_compute_ops k;
    bv_ops_copy(&k, sizeof k, x->compute.plugin); /* slots the plugin predates are NULL */
    if (!k.scale || !k.attention_forward || !k.layernorm_forward)
        bv_diag_add(diag, NULL, "compute plugin '%s' has no transformer kernels (plugin ABI "
                    "1.2)", x->compute.plugin->name);

    /* the model's own checks need no data: report them even if the text is bad */
    bv_seq_model_ops mops;
    bv_ops_copy(&mops, sizeof mops, x->model.plugin);
    if (mops.validate) {
        bv_seq_shape shape = {1, bv_opts_int(&x->train, "block"),
                              bv_opts_int(&x->train, "batch")};
        mops.validate(&x->model.opts, &shape, diag);
    }
    check_pipeline(x, diag);
    /* read once: a run takes the corpus from here (bv_experiment_take_data) */
    bv_text_corpus *c = calloc(1, sizeof *c);
    bv_error err = {0};
    if (!c || bv_text_corpus_load(path, bv_opts_float(&x->dataset, "val_fraction"), c,
                                  &err) != BV_OK) {
        bv_diag_add(diag, dpos, "%s", c ? err.msg : "out of memory");
        free(c);
        return;
    }
    int64_t block = bv_opts_int(&x->train, "block");
    int64_t val = c->n - c->n_train;
    if (block >= c->n_train || block >= val) {
        bv_diag_add(diag, bv_experiment_value_pos(&x->train, "block", NULL),
                    "'block' (%lld) must be smaller than both splits of %s: %lld training "
                    "and %lld validation characters", (long long)block, path,
                    (long long)c->n_train, (long long)val);
        free_data(c);
        return;
    }
    x->data_ready = c;
}

static bv_status load_data(const bv_experiment *x, void **data, bv_error *err)
{
    bv_text_corpus *c = calloc(1, sizeof *c);
    if (!(*data = c))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    char path[4096];
    corpus_path(x, path, sizeof path);
    return bv_text_corpus_load(path, bv_opts_float(&x->dataset, "val_fraction"), c, err);
}

static void free_data(void *data)
{
    if (data)
        bv_text_corpus_free(data);
    free(data);
}

/* ---- one run -------------------------------------------------------------------------- */

static const char *const step_fields[] = {"step", "train_loss", "lr", "grad_norm", "seconds"};
static const bv_record_kind step_record = {"step_end", step_fields,
                                           sizeof step_fields / sizeof step_fields[0]};
static const char *const eval_fields[] = {"step", "eval_train_loss", "val_loss", "seconds"};
static const bv_record_kind eval_record = {"eval_end", eval_fields,
                                           sizeof eval_fields / sizeof eval_fields[0]};
enum { S_STEP, S_LOSS, S_LR, S_GRAD_NORM };
enum { E_STEP, E_TRAIN_LOSS, E_VAL_LOSS };

struct bv_engine {
    const bv_experiment *x;
    const bv_text_corpus *corpus;
    uint64_t seed;
    bv_seq_model_ops mops; /* the plugin's table at this build's size */
    bv_seq_model *model;
    bv_compute *c;
    bv_layer_engine *layers; /* one process, one batch (no `pipeline:`) */
    bv_seq_pipe *pipe;       /* or stages, pipelines and microbatches */
    bv_seq_pipe_cfg pipe_cfg;
    bv_cloud *cloud;         /* stages as processes: their cloud, for every restart */
    int restarts;            /* the pipeline's restarts from a checkpoint */
    bv_seq_pipe_recovery recovery; /* that of the pipelines before the last restart */
    double restart_s; /* the restarts' pauses: the stages ended, launched and initialised */
    int relayouts;    /* the stages laid out afresh as the policy chose (reconfigure, grow) */
    double relayout_s; /* their pauses: the state gathered, the stages ended, the new
                          layout's launched and given the state */
    /* the run's schedule hook and loop (bv_engine_run), for a relayout's schedules */
    bv_status (*schedule)(void *loop, bv_schedule *s, bv_error *err);
    void *loop;
    double gather_s; /* the stages' states gathered for checkpoints (get_state) */
    char config_dir[4096];   /* the experiment's directory (the cloud's run info) */
    double bubble_sum;       /* over the steps: the stages' idle share */
    int64_t bubble_steps;
    bv_adamw adamw;
    int64_t batch, block, steps, eval_interval;
    int32_t *tokens, *targets;
};

static void destroy(bv_engine *e)
{
    if (!e)
        return;
    bv_layer_engine_free(e->layers);
    bv_seq_pipe_stop(e->pipe);
    if (e->cloud) /* after the stages: it joins their readers, every line is out */
        e->x->cloud_ops.destroy(e->cloud);
    bv_seq_pipe_cfg_free(&e->pipe_cfg);
    if (e->c)
        e->x->compute_ops.destroy(e->c);
    if (e->model)
        e->mops.destroy(e->model);
    free(e->tokens);
    free(e->targets);
    free(e);
}

/* The stages: threads, or processes on the experiment's cloud. */
static bv_status start_pipe(bv_engine *e, const bv_engine_run *run, bv_error *err)
{
    const bv_experiment *x = e->x;
    bv_seq_pipe_cfg *c = &e->pipe_cfg;
    bv_status st = bv_seq_pipe_cfg_make(x, e->corpus, &e->mops, e->seed, c, err);
    if (st == BV_OK && strcmp(bv_opts_str(&x->pipeline, "partition"), "balanced") == 0)
        st = bv_seq_pipe_balance(c, NULL, err); /* once, here: the stages read the spans */
    e->schedule = run->schedule;
    e->loop = run->loop;
    if (st == BV_OK) /* through the resilience strategies, here and at every relayout */
        st = bv_seq_pipe_schedules(c, run->schedule, run->loop, err);
    if (st != BV_OK)
        return st;
    if (x->cloud.plugin) { /* the run's copy of the experiment, which the stages load */
        c->cloud_ops = &x->cloud_ops;
        c->cloud_opts = &x->cloud.opts;
        bv_experiment_dir(x, e->config_dir, sizeof e->config_dir);
        c->run_info = (bv_run_info){run->out_dir, e->config_dir, e->seed};
        snprintf(c->experiment_file, sizeof c->experiment_file, "%s/experiment.yaml",
                 run->run_dir ? run->run_dir : run->out_dir ? run->out_dir : ".");
        c->peer_failed = run->peer_failed;
        c->reconfigure = run->reconfigure;
        c->loop = run->loop;
        c->tcp = strcmp(bv_opts_str(&x->pipeline, "links"), "tcp") == 0;
        snprintf(c->address, sizeof c->address, "%s", bv_opts_str(&x->pipeline, "address"));
        if (c->tcp && (st = bv_node_group_run_key(x->transport.plugin, "pipeline.links: tcp",
                                                  c->curve_secret, err)) != BV_OK)
            return st;
        if (!(e->cloud = c->cloud = x->cloud_ops.create(&x->cloud.opts, &c->run_info, err)))
            return err->status ? err->status : BV_ERR_PLUGIN;
    }
    return bv_seq_pipe_start(c, &e->pipe, err);
}

/* The stages stopped, what their pipeline's recovery did kept for result.json. */
static void stop_pipe(bv_engine *e)
{
    if (!e->pipe)
        return;
    bv_seq_pipe_recovery r;
    bv_seq_pipe_failovers(e->pipe, &r);
    e->recovery.failovers += r.failovers;
    e->recovery.replaced += r.replaced;
    e->recovery.resumed += r.resumed;
    e->recovery.lazy_brc += r.lazy_brc;
    e->recovery.seconds += r.seconds;
    bv_seq_pipe_stop(e->pipe);
    e->pipe = NULL;
}

/* The stage processes ended and launched again on the same cloud (a trace goes on where
 * it is), each initialised afresh: the loop then sets the state of the last checkpoint.
 * At most pipeline.restarts times in a run. */
static bv_status restart(bv_engine *e, bv_error *err)
{
    int most = (int)bv_opts_int(&e->x->pipeline, "restarts");
    if (!e->cloud)
        return bv_error_set(err, BV_ERR_INVALID, "only stages as processes restart");
    if (e->restarts >= most)
        return most ? bv_error_set(err, BV_ERR_STOPPED, "the run's %d restarts "
                                   "(pipeline.restarts) are used up", most)
                    : bv_error_set(err, BV_ERR_STOPPED, "pipeline.restarts is 0");
    double t0 = bv_now_seconds();
    stop_pipe(e);
    e->restarts++;
    e->pipe_cfg.relaunches++;
    bv_status st = bv_seq_pipe_start(&e->pipe_cfg, &e->pipe, err);
    e->restart_s += bv_now_seconds() - t0;
    return st;
}

/* The stages laid out afresh as the policy chose (bv_seq_pipe_relayout_due): pipeline
 * l->from's state gathered, every stage process ended, the new layout's launched on the
 * same cloud (its schedules through the resilience strategies again) and given the
 * state. */
static bv_status relayout(bv_engine *e, const bv_seq_pipe_layout *l, bv_error *err)
{
    double t0 = bv_now_seconds();
    bv_seq_pipe_cfg *c = &e->pipe_cfg;
    int P = c->stages, D = c->pipelines, M = c->microbatches;
    bv_state s = {0};
    bv_status st = bv_seq_pipe_gather(e->pipe, l->from, &s, err);
    if (st == BV_OK) {
        stop_pipe(e);
        c->relaunches++;
        st = bv_seq_pipe_cfg_layout(c, l, err);
    }
    if (st == BV_OK)
        st = bv_seq_pipe_schedules(c, e->schedule, e->loop, err);
    /* a process lost as the layout starts (before its inbox is known, over tcp) fails
     * the start: the same layout is launched again, from the state in hand */
    for (int tries = 1; st == BV_OK; tries++) {
        st = bv_seq_pipe_start(c, &e->pipe, err);
        if (st == BV_OK)
            st = bv_seq_pipe_set_state(e->pipe, &s, err);
        if (st != BV_ERR_IO || tries == 3 || bv_node_group_interrupted())
            break;
        bv_log(BV_LOG_WARN, "the new layout did not start: %s; launched again", err->msg);
        bv_error_clear(err);
        stop_pipe(e);
        c->relaunches++;
        st = BV_OK;
    }
    bv_state_free(&s);
    if (st != BV_OK) {
        bv_error why = *err;
        return bv_error_set(err, st, "laying the stages out afresh: %s", why.msg);
    }
    double pause = bv_now_seconds() - t0;
    e->relayouts++;
    e->relayout_s += pause;
    bv_log(BV_LOG_INFO, "reconfigured: %d pipeline%s of %d stages, %d microbatches each "
           "(were %d of %d, %d microbatches), from pipeline %d's state; %d node%s standing "
           "by; the run paused %.2f s", c->pipelines, c->pipelines > 1 ? "s" : "", c->stages,
           c->microbatches, D, P, M, l->from, l->standby, l->standby == 1 ? "" : "s", pause);
    return BV_OK;
}

/* After a call on the pipeline (st): where the policy chose to lay the stages out afresh
 * (a loss it answered so, or a step boundary's decision), that is done, and *again says
 * whether the call runs again on the new layout (it failed), at most RELAYOUTS_IN_A_ROW
 * times in a row (*tries counts them). */
static bv_status relaid(bv_engine *e, bv_status st, int *tries, bool *again, bv_error *err)
{
    *again = false;
    bv_seq_pipe_layout l;
    if (!e->pipe || !bv_seq_pipe_relayout_due(e->pipe, &l))
        return st;
    bool failed = st != BV_OK;
    if (failed) /* what failed, and what the policy chose */
        bv_log(err->status == BV_ERR_IO ? BV_LOG_WARN : BV_LOG_INFO, "%s", err->msg);
    bv_error_clear(err);
    if ((st = relayout(e, &l, err)) != BV_OK || !failed)
        return st;
    if (++*tries == RELAYOUTS_IN_A_ROW)
        return bv_error_set(err, BV_ERR_IO, "the stages were laid out afresh %d times in a "
                            "row, and what they ran failed each time", RELAYOUTS_IN_A_ROW);
    *again = true;
    return BV_OK;
}

static bv_status create(const bv_experiment *x, void *data, const bv_engine_run *run,
                        bv_engine **out, bv_error *err)
{
    bv_engine *e = calloc(1, sizeof *e);
    if (!(*out = e))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    e->x = x;
    e->corpus = data;
    e->seed = run->seed;
    e->batch = bv_opts_int(&x->train, "batch");
    e->block = bv_opts_int(&x->train, "block");
    e->steps = bv_opts_int(&x->train, "steps");
    e->eval_interval = bv_opts_int(&x->train, "eval_interval");
    e->adamw = bv_adamw_from_opts(&x->train);
    bv_ops_copy(&e->mops, sizeof e->mops, x->model.plugin);
    bv_seq_shape shape = {e->corpus->vocab_size, e->block, e->batch};
    if (!(e->model = e->mops.create(&x->model.opts, &shape, err)))
        return err->status ? err->status : BV_ERR_PLUGIN;
    if (pipelined(x))
        return start_pipe(e, run, err);
    if (!(e->c = x->compute_ops.create(&x->compute.opts, err)))
        return err->status ? err->status : BV_ERR_PLUGIN;
    bv_status st = bv_layer_engine_create(&e->mops, e->model, &x->compute_ops, e->c, e->batch,
                                          e->block, &e->layers, err);
    if (st != BV_OK)
        return st;
    e->tokens = malloc((size_t)(e->batch * e->block) * sizeof *e->tokens);
    e->targets = malloc((size_t)(e->batch * e->block) * sizeof *e->targets);
    if (!e->tokens || !e->targets)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    return BV_OK;
}

static bv_status init(bv_engine *e, bv_error *err)
{
    (void)err;
    if (e->layers) /* the stages initialise themselves when they start */
        bv_layer_engine_init(e->layers, e->seed);
    return BV_OK;
}

static double lr(const bv_engine *e, int64_t step)
{
    return bv_adamw_lr_at(&e->x->train, step);
}

static void draw_batch(bv_engine *e, bool val, uint64_t stream)
{
    bv_text_corpus_batch(e->corpus, e->seed, stream, val, e->batch, e->block, 0, e->batch,
                         e->tokens, e->targets);
}


/* A step's pipeline figures as series (metrics.jsonl): the share of the stages' time not
 * spent computing (the bubble: idle, waiting on a peer, sending), the mean wait, and the
 * samples the step trained per second of its wall time (`wall`, a failover's pause
 * included: Bamboo's Figure 11 throughput). */
static void report_pipe_step(bv_engine *e, const bv_seq_pipe_step *ps, double wall)
{
    int nodes = e->pipe_cfg.stages * e->pipe_cfg.pipelines;
    double bubble = ps->seconds > 0 ? 1.0 - ps->compute_seconds / (nodes * ps->seconds) : 0;
    bv_series_report("pipeline_bubble", "fraction", bubble);
    bv_series_report("pipeline_wait", "s", ps->wait_seconds / nodes);
    if (wall > 0)
        bv_series_report("samples_per_second", "samples/s", (double)e->batch / wall);
    e->bubble_sum += bubble;
    e->bubble_steps++;
}

static bv_status train(bv_engine *e, int64_t it, double lr_now, bv_record *rec, bv_error *err)
{
    double loss, norm;
    if (e->pipe) {
        bv_seq_pipe_step ps;
        double t0 = bv_now_seconds();
        bv_status st = BV_OK;
        int tries = 0;
        for (bool again = true; again;)
            st = relaid(e, bv_seq_pipe_train(e->pipe, it, lr_now, &ps, err), &tries, &again,
                        err);
        if (st != BV_OK)
            return st;
        loss = ps.loss;
        norm = ps.norm;
        report_pipe_step(e, &ps, bv_now_seconds() - t0);
    } else {
        draw_batch(e, false, BV_SEQ_STREAM_TRAIN(it));
        bv_status st = bv_layer_engine_gradient(e->layers, e->tokens, e->targets, e->batch,
                                                e->block, e->seed, it, &loss, err);
        if (st != BV_OK)
            return st;
        norm = NAN;
    }
    if (!isfinite(loss))
        return bv_error_set(err, BV_ERR_STOPPED, "the loss is %g at step %lld", loss,
                            (long long)it + 1);
    if (!e->pipe)
        norm = bv_adamw_step(e->layers, &e->x->compute_ops, e->c, &e->adamw, it + 1, lr_now);
    *rec = (bv_record){{[S_STEP] = (double)(it + 1), [S_LOSS] = loss, [S_LR] = lr_now,
                        [S_GRAD_NORM] = norm}};
    return BV_OK;
}

static bool eval_due(const bv_engine *e, int64_t done)
{
    return done % e->eval_interval == 0 && done < e->steps;
}

/* Mean loss over iters batches of each split (nanoGPT's estimate_loss). */
static bv_status evaluate(bv_engine *e, int64_t done, bool final, bv_record *rec,
                          bv_error *err)
{
    int64_t iters = bv_opts_int(&e->x->train, final ? "final_eval_iters" : "eval_iters");
    double sum[2] = {0, 0};
    for (int split = 0; split < 2 && e->pipe; split++) {
        double l;
        bv_status st = BV_OK;
        int tries = 0;
        for (bool again = true; again;)
            st = relaid(e, bv_seq_pipe_eval(e->pipe, done, split, iters, &l, err), &tries,
                        &again, err);
        if (st != BV_OK)
            return st;
        sum[split] = l * (double)iters;
    }
    for (int split = 0; split < 2 && !e->pipe; split++)
        for (int64_t i = 0; i < iters; i++) {
            draw_batch(e, split == 1, BV_SEQ_STREAM_EVAL(done, split, i));
            double l;
            bv_status st = bv_layer_engine_loss(e->layers, e->tokens, e->targets, e->batch,
                                                e->block, e->seed, done, &l, err);
            if (st != BV_OK)
                return st;
            sum[split] += l;
        }
    *rec = (bv_record){{[E_STEP] = (double)done, [E_TRAIN_LOSS] = sum[0] / (double)iters,
                        [E_VAL_LOSS] = sum[1] / (double)iters}};
    return BV_OK;
}

/* The layers' weights and moments, and what `bivouac sample` needs to rebuild the model
 * and its tokeniser from a checkpoint alone. */
static bv_status get_state(bv_engine *e, bv_state *s, bv_error *err)
{
    if (e->pipe) {
        double t0 = bv_now_seconds();
        bv_status st = bv_seq_pipe_get_state(e->pipe, s, err);
        e->gather_s += bv_now_seconds() - t0;
        int tries = 0;
        for (bool again = true; again;) /* (again: it failed, and was laid out afresh) */
            if ((st = relaid(e, st, &tries, &again, err)) == BV_OK && again)
                st = bv_seq_pipe_get_state(e->pipe, s, err);
        if (st != BV_OK)
            return st;
    }
    for (size_t l = 0; e->layers && l < bv_layer_engine_layers(e->layers); l++) {
        bv_status st = bv_layer_engine_layer_get(e->layers, l, true, s, err);
        if (st != BV_OK)
            return st;
    }
    const bv_node *section = bv_node_get(e->x->root, "model");
    char *yaml = section ? bv_node_to_yaml(section) : NULL;
    const char *plugin = e->x->model.plugin->name;
    bool ok = yaml && bv_state_add(s, "model/plugin", plugin, strlen(plugin)) == BV_OK &&
              bv_state_add(s, "model/section", yaml, strlen(yaml)) == BV_OK &&
              bv_state_add(s, "model/block", &e->block, sizeof e->block) == BV_OK &&
              bv_state_add(s, "tokenizer/vocab", e->corpus->vocab,
                           (size_t)e->corpus->vocab_size * sizeof *e->corpus->vocab) == BV_OK;
    free(yaml);
    if (!ok)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the training state");
    return BV_OK;
}

static bv_status set_state(bv_engine *e, const bv_state *s, bv_error *err)
{
    const bv_blob *vocab = bv_state_find(s, "tokenizer/vocab");
    if (!vocab)
        return bv_error_set(err, BV_ERR_CORRUPT, "the checkpoint lacks the run's own state");
    if (vocab->size != (size_t)e->corpus->vocab_size * sizeof(uint32_t) ||
        memcmp(vocab->data, e->corpus->vocab, vocab->size) != 0)
        return bv_error_set(err, BV_ERR_INVALID, "the checkpoint's vocabulary differs from "
                            "the text's: was the corpus changed?");
    if (e->pipe)
        return bv_seq_pipe_set_state(e->pipe, s, err);
    bv_status st = BV_OK;
    for (size_t l = 0; st == BV_OK && l < bv_layer_engine_layers(e->layers); l++)
        st = bv_layer_engine_layer_set(e->layers, l, true, s, err);
    return st;
}

static uint32_t params_crc32c(bv_engine *e)
{
    uint32_t crc = 0;
    bv_error err = {0};
    if (e->pipe && bv_seq_pipe_crc32c(e->pipe, &crc, &err) != BV_OK)
        bv_log(BV_LOG_WARN, "the parameters' checksum: %s", err.msg);
    bv_layer_tensor t;
    for (size_t l = 0; e->layers && l < bv_layer_engine_layers(e->layers); l++)
        for (size_t i = 0; i < bv_layer_engine_layer(e->layers, l)->nparams; i++)
            if (bv_layer_engine_tensor(e->layers, l, i, &t))
                crc = bv_crc32c(crc, t.param, (size_t)t.n * sizeof(float));
    return crc;
}

/* FLOPs of one training token: 3x the forward (forward, and backward's two products per
 * weight), counting the gemms as the kernels run them (full seq x seq attention blocks). */
static double flops_per_token(const bv_engine *e, int64_t *nparams)
{
    double f = 0;
    int64_t np = 0;
    for (size_t l = 0; l < e->mops.layer_count(e->model); l++) {
        bv_seq_layer L;
        bv_error err = {0};
        if (bv_seq_layer_copy(&e->mops, e->mops.layer(e->model, l), &L, &err) != BV_OK)
            break; /* the engine read the same layers when it started */
        for (size_t i = 0; i < L.nparams; i++) {
            const bv_seq_param *p = &L.params[i];
            if (p->tied_layer < 0)
                np += p->rows * p->cols;
            if (L.kind != BV_SEQ_EMBED && p->rows > 1)
                f += 2.0 * (double)(p->rows * p->cols);
        }
        if (L.kind == BV_SEQ_BLOCK)
            f += 4.0 * (double)e->block * (double)L.in_width; /* QK^T and PV */
        bv_seq_layer_copy_free(&L);
    }
    *nparams = np;
    return 3.0 * f;
}

static void result(bv_engine *e, const bv_history *h, bv_run_result *res)
{
    const bv_record *last = &h->units[h->nunits - 1];
    double steps = last->v[S_STEP];
    double val = h->final_eval ? h->final_eval->v[E_VAL_LOSS] : NAN;
    double train_loss = h->final_eval ? h->final_eval->v[E_TRAIN_LOSS] : NAN;
    int64_t np;
    double fpt = flops_per_token(e, &np);
    double tps = h->train_seconds > 0 ? steps * (double)(e->batch * e->block) / h->train_seconds
                                      : 0;
    bv_result_add(res, "steps", steps, true, BV_RESULT_MEAN);
    bv_result_add(res, "batch", (double)e->batch, true, 0);
    bv_result_add(res, "block", (double)e->block, true, 0);
    bv_result_add(res, "vocab", (double)e->corpus->vocab_size, true, 0);
    bv_result_add(res, "params", (double)np, true, 0);
    if (e->c)
        bv_result_add(res, "threads", e->x->compute_ops.num_threads(e->c), true, 0);
    if (e->pipe) {
        bv_result_add(res, "pipeline_stages", e->pipe_cfg.stages, true, 0);
        bv_result_add(res, "pipelines", e->pipe_cfg.pipelines, true, 0);
        bv_result_add(res, "microbatches", e->pipe_cfg.microbatches, true, 0);
        bv_result_add(res, "pipeline_bubble",
                      e->bubble_steps ? e->bubble_sum / (double)e->bubble_steps : NAN, false,
                      BV_RESULT_MEAN);
        int replicas = 0, equal = 0;
        bv_error err = {0};
        if (bv_seq_pipe_replicas(e->pipe, &replicas, &equal, &err) != BV_OK)
            bv_log(BV_LOG_WARN, "the replicas' checksums: %s", err.msg);
        if (replicas) { /* Bamboo's: equal to their originals at the end */
            bv_result_add(res, "replicas", replicas, true, 0);
            bv_result_add(res, "replicas_equal", equal, true, 0);
            bv_seq_pipe_recovery r;
            bv_seq_pipe_failovers(e->pipe, &r);
            bv_result_add(res, "failovers", e->recovery.failovers + r.failovers, true, 0);
            bv_result_add(res, "replaced", e->recovery.replaced + r.replaced, true, 0);
            bv_result_add(res, "steps_resumed", e->recovery.resumed + r.resumed, true, 0);
            bv_result_add(res, "lazy_brc", e->recovery.lazy_brc + r.lazy_brc, true, 0);
            bv_result_add(res, "failover_seconds", e->recovery.seconds + r.seconds, false, 0);
        }
        if (e->cloud) {
            bv_result_add(res, "restarts", e->restarts, true, 0);
            bv_result_add(res, "restart_seconds", e->restart_s, false, 0);
            bv_result_add(res, "reconfigurations", e->relayouts, true, 0);
            bv_result_add(res, "reconfigure_seconds", e->relayout_s, false, 0);
        }
        bv_result_add(res, "state_gather_seconds", e->gather_s, false, 0);
    }
    bv_result_add(res, "val_loss", val, false, BV_RESULT_MEAN | BV_RESULT_HEADLINE);
    bv_result_add(res, "train_loss", train_loss, false, BV_RESULT_MEAN);
    bv_result_add(res, "final_eval_batches",
                  (double)bv_opts_int(&e->x->train, "final_eval_iters"), true, 0);
    bv_result_add(res, "last_step_loss", last->v[S_LOSS], false, 0);
    bv_result_add(res, "tokens_per_second", tps, false, BV_RESULT_MEAN);
    bv_result_add(res, "flops_per_token", fpt, false, 0);
    bv_result_add(res, "model_flops_per_second", fpt * tps, false, 0);
    bv_result_add(res, "train_seconds", h->train_seconds, false, 0);
    snprintf(res->summary, sizeof res->summary,
             "val loss %.4f (train %.4f) after %lld steps, %.0f tokens/s, %.1f s", val,
             train_loss, (long long)steps, tps, h->wall_seconds);
    snprintf(res->brief, sizeof res->brief, "val loss %.4f after %lld steps, %.1f s", val,
             (long long)steps, h->wall_seconds);
}

static void progress(const bv_engine *e, const bv_history *h, char *buf, size_t len)
{
    const bv_record *last = &h->units[h->nunits - 1];
    double tps = h->session_seconds > 0 ? (double)h->session_units *
                                              (double)(e->batch * e->block) /
                                              h->session_seconds
                                        : 0;
    snprintf(buf, len, "loss %.4f  lr %.2e  %.0f tok/s", last->v[S_LOSS], last->v[S_LR], tps);
}

const bv_engine_ops bv_sequence_engine_ops = {
    .name = "sequence",
    .unit = "step",
    .train_units_option = "steps",
    .dataset_schema = dataset_schema,
    .train_schema = train_schema,
    .unit_record = &step_record,
    .eval_record = &eval_record,
    .check = check,
    .check_model = NULL,
    .load_data = load_data,
    .free_data = free_data,
    .create = create,
    .destroy = destroy,
    .init = init,
    .restart = restart,
    .lr = lr,
    .train = train,
    .eval_due = eval_due,
    .evaluate = evaluate,
    .set_knob = NULL,
    .get_state = get_state,
    .set_state = set_state,
    .params_crc32c = params_crc32c,
    .result = result,
    .progress = progress,
};
