/* Experiment loading and validation (experiment.h). */
#include "experiment.h"

#include "bivouac/log.h"
#include "train_seq.h" /* sequence models: schemas and data checks */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const top_level_keys[] = {"name",      "model",  "dataset",    "train",
                                             "compute",   "engine", "transport",  "resilience",
                                             "policy"};
#define N_TOP_LEVEL (sizeof top_level_keys / sizeof top_level_keys[0])

static const bv_option train_schema[] = {
    BV_OPT_INT_RANGE("epochs", "200", 1, 1e9, "maximum number of epochs"),
    BV_OPT_FLOAT_RANGE("lr", "0.01", 0, 10, "Adam learning rate"),
    BV_OPT_FLOAT_RANGE("weight_decay", "5e-4", 0, 1,
                       "L2 penalty on the parameters the model marks for decay"),
    BV_OPT_FLOAT_RANGE("beta1", "0.9", 0, 0.999999, "Adam beta1"),
    BV_OPT_FLOAT_RANGE("beta2", "0.999", 0, 0.999999, "Adam beta2"),
    BV_OPT_FLOAT_RANGE("eps", "1e-8", 0, 1, "Adam epsilon"),
    BV_OPT_INT_RANGE("seed", "42", 0, 9007199254740992.0, "seed for weights and dropout"),
    BV_OPT_CHOICE("select", "last", "last|best_val_accuracy|best_val_loss|best_val_both",
                  "which epoch's model result.json reports: the last (Kipf & Welling), or "
                  "the best on validation (best_val_both: accuracy and loss both at their "
                  "best so far, as GAT's reference code saves its model)"),
    BV_OPT_BOOLEAN("decay_in_loss", "true",
                   "reported losses include the weight-decay term (Kipf's GCN does, GAT's "
                   "code does not); early stopping sees what is reported"),
    BV_OPT_END,
};

static const bv_option dataset_schema[] = {
    BV_OPT_STR("name", "", "dataset directory under $BIVOUAC_DATA_DIR"),
    BV_OPT_FILE("path", "", "dataset directory, relative to the experiment file"),
    BV_OPT_CHOICE("synthetic", "none", "none|communities|powerlaw", "built-in generator"),
    BV_OPT_INT_RANGE("nodes", "2000", 2, 2e9, "synthetic: vertices"),
    BV_OPT_INT_RANGE("edges", "10000", 1, 1e11, "synthetic powerlaw: undirected edges"),
    BV_OPT_INT_RANGE("features", "500", 1, 1e6, "synthetic: features per vertex"),
    BV_OPT_INT_RANGE("classes", "5", 2, 1e5, "synthetic: classes"),
    BV_OPT_FLOAT_RANGE("avg_degree", "4", 0, 1e5, "synthetic communities: mean degree"),
    BV_OPT_FLOAT_RANGE("homophily", "0.8", 0, 1,
                       "synthetic communities: fraction of edges inside a community"),
    BV_OPT_FLOAT_RANGE("feature_density", "0.02", 0, 1,
                       "synthetic communities: fraction of nonzero features"),
    BV_OPT_FLOAT_RANGE("feature_signal", "0.5", 0, 1,
                       "synthetic communities: fraction of words drawn from the class"),
    BV_OPT_FLOAT_RANGE("exponent", "2.1", 1.01, 10, "synthetic powerlaw: degree exponent"),
    BV_OPT_INT_RANGE("train_per_class", "20", 1, 1e9, "synthetic communities: labelled"),
    BV_OPT_INT_RANGE("val", "500", 0, 1e9, "synthetic communities: validation vertices"),
    BV_OPT_INT_RANGE("test", "1000", 0, 1e9, "synthetic communities: test vertices"),
    BV_OPT_INT_RANGE("seed", "1", 0, 9007199254740992.0, "synthetic: generator seed"),
    BV_OPT_BOOLEAN("normalize_features", "true", "divide each feature row by its sum"),
    BV_OPT_BOOLEAN("cache", "true", "keep a binary cache of parsed datasets"),
    BV_OPT_END,
};

static const bv_option engine_schema[] = {
    BV_OPT_INT_RANGE("intervals", "0", 0, 1e6,
                     "vertex intervals per stage (tasks); 0: one per 65,536 vertices"),
    BV_OPT_INT_RANGE("tensor_workers", "1", 1, 64, "tensor worker threads"),
    BV_OPT_BOOLEAN("share_arrays", "true",
                   "roles pass vertex arrays by reference, not by copying them into messages"),
    BV_OPT_END,
};

static const bv_option policy_schema[] = {
    BV_OPT_FILE("file", NULL, "Lua policy script, relative to the experiment file"),
    BV_OPT_CHOICE("on_error", "continue", "continue|stop",
                  "on a script error: go on without the policy, or stop the run"),
    BV_OPT_INT_RANGE("instructions", "10000000", 1000, 1e12,
                     "Lua instruction budget per call"),
    BV_OPT_INT_RANGE("memory_mb", "64", 1, 65536, "Lua memory cap in MiB"),
    BV_OPT_END,
};

void bv_experiment_free(bv_experiment *x)
{
    if (!x)
        return;
    bv_opts_free(&x->model.opts);
    bv_opts_free(&x->compute.opts);
    bv_opts_free(&x->transport.opts);
    for (size_t i = 0; i < x->nresilience; i++)
        bv_opts_free(&x->resilience[i].opts);
    bv_opts_free(&x->dataset);
    bv_opts_free(&x->train);
    bv_opts_free(&x->engine);
    bv_opts_free(&x->policy);
    free(x->policy_params);
    bv_node_free(x->root);
    free(x->path);
    free(x->name);
    free(x->dataset_dir);
    free(x->dataset_label);
    free(x);
}

static bool is_directory(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A plugin section: `plugin:` names it, the other keys are the plugin's options. */
static void load_plugin_section(bv_experiment *x, bv_registry *reg, const bv_node *section,
                                const char *section_name, bv_plugin_kind kind,
                                const char *default_plugin, bv_section *out, bv_diag *diag)
{
    const char *kind_name = bv_plugin_kind_name(kind);
    const bv_node *name_node = section && section->kind == BV_NODE_MAP
                                   ? bv_node_get(section, "plugin")
                                   : NULL;
    if (section && section->kind != BV_NODE_MAP &&
        !(section->kind == BV_NODE_SCALAR && section->scalar[0] == '\0')) {
        bv_diag_add(diag, &section->pos, "section '%s' must be a mapping", section_name);
        return;
    }
    const char *name = name_node ? name_node->scalar : default_plugin;
    if (name_node && name_node->kind != BV_NODE_SCALAR) {
        bv_diag_add(diag, &name_node->pos, "'plugin' in section '%s' must be a name",
                    section_name);
        return;
    }
    if (!name) {
        bv_pos pos = section ? section->pos : (bv_pos){x->root->pos.file, 0, 0};
        bv_diag_add(diag, &pos, "missing required key 'plugin' in section '%s'", section_name);
        return;
    }
    bv_error err = {0};
    const bv_plugin *p = bv_registry_get(reg, kind, name, &err);
    if (!p) {
        const bv_pos *pos = name_node ? &name_node->pos : (section ? &section->pos : NULL);
        if (err.msg[0] && strstr(err.msg, "not found")) {
            const char *names[128];
            size_t n = bv_registry_names(reg, kind, names, 128);
            const char *hint = bv_suggest(name, names, n);
            if (hint)
                bv_diag_add(diag, pos, "unknown %s plugin '%s'; did you mean '%s'?", kind_name,
                            name, hint);
            else /* the registry's message ends "(searched P)" */
                bv_diag_add(diag, pos, "unknown %s plugin '%s' %s", kind_name, name,
                            strstr(err.msg, "(searched") ? strstr(err.msg, "(searched") : "");
        } else {
            bv_diag_add(diag, pos, "%s", err.msg);
        }
        return;
    }
    static const char *const ignore[] = {"plugin", NULL};
    if (bv_config_validate(section, section_name, bv_registry_options(reg, p), ignore, &out->opts, diag) == BV_OK)
        out->plugin = p;
}

static void check_dataset(bv_experiment *x, const bv_node *section, bv_diag *diag)
{
    const char *name = bv_opts_str(&x->dataset, "name");
    const char *path = bv_opts_str(&x->dataset, "path");
    const char *synth = bv_opts_str(&x->dataset, "synthetic");
    int given = (name[0] != '\0') + (path[0] != '\0') + (strcmp(synth, "none") != 0);
    bv_pos here = section ? section->pos : (bv_pos){x->root->pos.file, 1, 1};
    if (given != 1) {
        bv_diag_add(diag, &here, given ? "dataset takes only one of 'name', 'path' or 'synthetic'"
                                       : "dataset needs one of 'name', 'path' or 'synthetic'");
        return;
    }
    if (strcmp(synth, "none") != 0) {
        char label[64];
        snprintf(label, sizeof label, "synthetic-%s", synth);
        x->dataset_label = strdup(label);
        return;
    }
    const bv_opt_value *v = bv_opts_find(&x->dataset, name[0] ? "name" : "path");
    char dir[4096];
    if (name[0]) {
        const char *root = getenv("BIVOUAC_DATA_DIR");
        snprintf(dir, sizeof dir, "%s/%s", root && *root ? root : "data", name);
        x->dataset_label = strdup(name);
    } else {
        snprintf(dir, sizeof dir, "%s", path);
        const char *base = strrchr(path, '/');
        x->dataset_label = strdup(base && base[1] ? base + 1 : path);
    }
    if (!is_directory(dir)) {
        if (name[0])
            bv_diag_add(diag, &v->pos, "dataset '%s' not found: %s is not a directory%s", name,
                        dir, getenv("BIVOUAC_DATA_DIR") ? "" : " (set BIVOUAC_DATA_DIR)");
        else
            bv_diag_add(diag, &v->pos, "dataset directory %s does not exist", dir);
        return;
    }
    x->dataset_dir = strdup(dir);
}

static void load_policy_params(bv_experiment *x, const bv_node *section, bv_diag *diag)
{
    const bv_node *params = bv_node_get(section, "params");
    if (!params)
        return;
    if (params->kind != BV_NODE_MAP) {
        bv_diag_add(diag, &params->pos, "'params' in section 'policy' must be a mapping");
        return;
    }
    x->policy_params = calloc(params->count + 1, sizeof *x->policy_params);
    if (!x->policy_params)
        return;
    for (size_t i = 0; i < params->count; i++) {
        if (params->items[i]->kind != BV_NODE_SCALAR) {
            bv_diag_add(diag, &params->items[i]->pos, "policy parameter '%s' must be a single "
                        "value", params->keys[i]);
            continue;
        }
        x->policy_params[x->npolicy_params++] =
            (bv_policy_param){params->keys[i], params->items[i]->scalar};
    }
}

/* Compiles and sets the script up once, so a broken policy is found before anything runs:
 * an error when on_error is stop, a warning (and a run without it) otherwise. */
static void check_policy_script(bv_experiment *x, bv_diag *diag)
{
    bv_policy_limits lim = {bv_opts_int(&x->policy, "instructions"),
                            (size_t)bv_opts_int(&x->policy, "memory_mb") << 20};
    bv_policy *p = NULL;
    bv_error err = {0};
    if (bv_policy_load(bv_opts_str(&x->policy, "file"), x->policy_params, x->npolicy_params,
                       &lim, &p, &err) == BV_OK) {
        bv_policy_free(p);
        return;
    }
    if (strcmp(bv_opts_str(&x->policy, "on_error"), "stop") == 0) {
        /* where the YAML names the script, then the script's own position */
        bv_diag_add(diag, &bv_opts_find(&x->policy, "file")->pos, "%s", err.msg);
    } else {
        bv_log(BV_LOG_WARN, "%s; the run goes on without the policy", err.msg);
        x->policy_broken = true;
    }
}

static void load_resilience(bv_experiment *x, bv_registry *reg, const bv_node *list,
                            bv_diag *diag)
{
    if (!list)
        return;
    if (list->kind != BV_NODE_SEQ) {
        bv_diag_add(diag, &list->pos, "section 'resilience' must be a list of strategies");
        return;
    }
    for (size_t i = 0; i < list->count; i++) {
        if (x->nresilience == BV_MAX_RESILIENCE) {
            bv_diag_add(diag, &list->items[i]->pos, "at most %d resilience strategies",
                        BV_MAX_RESILIENCE);
            return;
        }
        char name[32];
        snprintf(name, sizeof name, "resilience.%zu", i);
        bv_section *s = &x->resilience[x->nresilience];
        load_plugin_section(x, reg, list->items[i], name, BV_KIND_RESILIENCE, NULL, s, diag);
        if (s->plugin)
            x->nresilience++;
        else
            bv_opts_free(&s->opts);
    }
}

static char *default_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char *name = strdup(base);
    if (name) {
        char *dot = strrchr(name, '.');
        if (dot && (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0))
            *dot = '\0';
    }
    return name;
}

bv_status bv_experiment_load(const char *path, char *const *overrides, size_t noverrides,
                             bv_registry *reg, bv_experiment **out, bv_diag *diag)
{
    *out = NULL;
    bv_experiment *x = calloc(1, sizeof *x);
    if (!x)
        return BV_ERR_NOMEM;
    x->path = strdup(path);
    size_t before = diag->count;
    bv_status st = bv_config_load_file(path, &x->root, diag);
    if (st != BV_OK) {
        bv_experiment_free(x);
        return st;
    }
    for (size_t i = 0; i < noverrides; i++)
        bv_config_override(x->root, overrides[i], diag);

    const bv_node *root = x->root;
    for (size_t i = 0; i < root->count; i++) {
        bool known = false;
        for (size_t k = 0; k < N_TOP_LEVEL; k++)
            known |= strcmp(root->keys[i], top_level_keys[k]) == 0;
        if (known)
            continue;
        const char *hint = bv_suggest(root->keys[i], top_level_keys, N_TOP_LEVEL);
        if (hint)
            bv_diag_add(diag, &root->key_pos[i], "unknown section '%s'; did you mean '%s'?",
                        root->keys[i], hint);
        else
            bv_diag_add(diag, &root->key_pos[i], "unknown section '%s'", root->keys[i]);
    }
    const bv_node *name = bv_node_get(root, "name");
    x->name = name && name->kind == BV_NODE_SCALAR && name->scalar[0] ? strdup(name->scalar)
                                                                      : default_name(path);

    const bv_node *model = bv_node_get(root, "model");
    if (!model)
        bv_diag_add(diag, &(bv_pos){root->pos.file, 1, 1},
                    "missing section 'model' (e.g. model: {plugin: gcn})");
    else
        load_plugin_section(x, reg, model, "model", BV_KIND_MODEL, NULL, &x->model, diag);
    load_plugin_section(x, reg, bv_node_get(root, "compute"), "compute", BV_KIND_COMPUTE, "cpu",
                        &x->compute, diag);
    load_plugin_section(x, reg, bv_node_get(root, "transport"), "transport", BV_KIND_TRANSPORT,
                        "zmq", &x->transport, diag);
    load_resilience(x, reg, bv_node_get(root, "resilience"), diag);

    /* ---- sequence models (seqmodel.h) have their own dataset and train schemas ---- */
    bool sequence = x->model.plugin &&
                    *(const bv_engine_kind *)x->model.plugin->ops == BV_ENGINE_SEQUENCE;
    const bv_node *dataset = bv_node_get(root, "dataset");
    if (!dataset)
        bv_diag_add(diag, &(bv_pos){root->pos.file, 1, 1},
                    sequence ? "missing section 'dataset' (e.g. dataset: {text: input.txt})"
                             : "missing section 'dataset' (e.g. dataset: {name: cora})");
    else if (sequence)
        bv_config_validate(dataset, "dataset", bv_seq_dataset_schema, NULL, &x->dataset, diag);
    else if (bv_config_validate(dataset, "dataset", dataset_schema, NULL, &x->dataset, diag) ==
             BV_OK)
        check_dataset(x, dataset, diag);
    bv_config_validate(bv_node_get(root, "train"), "train",
                       sequence ? bv_seq_train_schema : train_schema, NULL, &x->train, diag);
    if (sequence && diag->count == before)
        bv_seq_experiment_check(x, dataset, diag);
    /* ---- end sequence models ---- */
    bv_config_validate(bv_node_get(root, "engine"), "engine", engine_schema, NULL, &x->engine,
                       diag);
    const bv_node *policy = bv_node_get(root, "policy");
    if (policy) {
        static const char *const ignore[] = {"params", NULL};
        if (bv_config_validate(policy, "policy", policy_schema, ignore, &x->policy, diag) ==
            BV_OK) {
            x->has_policy = true;
            const bv_opt_value *file = bv_opts_find(&x->policy, "file");
            FILE *f = fopen(file->v.s, "r");
            if (!f)
                bv_diag_add(diag, &file->pos, "policy file %s cannot be read: %s", file->v.s,
                            strerror(errno));
            else
                fclose(f);
        }
        if (policy->kind == BV_NODE_MAP)
            load_policy_params(x, policy, diag);
        if (x->has_policy && diag->count == before)
            check_policy_script(x, diag);
    }
    if (diag->count > before) {
        bv_experiment_free(x);
        return BV_ERR_INVALID;
    }
    /* graph models only: a sequence model's table is seqmodel.h's */
    if (*(const bv_engine_kind *)x->model.plugin->ops == BV_ENGINE_GRAPH)
        bv_ops_copy(&x->model_ops, sizeof x->model_ops, x->model.plugin);
    bv_ops_copy(&x->compute_ops, sizeof x->compute_ops, x->compute.plugin);
    bv_ops_copy(&x->transport_ops, sizeof x->transport_ops, x->transport.plugin);
    if (x->model_ops.validate && x->model_ops.validate(&x->model.opts, diag) != BV_OK) {
        bv_experiment_free(x);
        return BV_ERR_INVALID;
    }
    *out = x;
    return BV_OK;
}
