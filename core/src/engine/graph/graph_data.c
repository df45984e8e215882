/* The graph engine's experiment: its `dataset` and `train` schemas, the checks of a graph
 * dataset before anything runs, and loading it (a directory through the binary cache, or
 * one of the built-in generators; then Kipf's feature normalisation if asked). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bivouac/graph.h"
#include "bivouac/model.h"
#include "graph_ops.h"

const bv_option bv_graph_train_schema[] = {
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

const bv_option bv_graph_dataset_schema[] = {
    BV_OPT_STR("name", "", "dataset directory under $BIVOUAC_DATA_DIR"),
    BV_OPT_DIRECTORY("path", "", "dataset directory, relative to the experiment file"),
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
    BV_OPT_CHOICE("feature_storage", "auto", "auto|sparse|dense",
                  "features kept as a CSR (sparse) or an N x F array (dense); auto: sparse "
                  "when at most a quarter of them is nonzero"),
    BV_OPT_BOOLEAN("cache", "true", "keep a binary cache of parsed datasets"),
    BV_OPT_END,
};

static bool is_directory(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
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

void bv_graph_check(bv_experiment *x, const bv_node *dataset, bool dataset_valid, bool clean,
                    bv_diag *diag)
{
    (void)clean;
    if (dataset_valid)
        check_dataset(x, dataset, diag);
}

bv_status bv_graph_check_model(const bv_experiment *x, bv_diag *diag)
{
    bv_model_ops ops;
    bv_ops_copy(&ops, sizeof ops, x->model.plugin);
    return ops.validate ? ops.validate(&x->model.opts, diag) : BV_OK;
}

static void cache_dir(char *buf, size_t len)
{
    const char *env = getenv("BIVOUAC_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (env && *env)
        snprintf(buf, len, "%s", env);
    else if (xdg && *xdg)
        snprintf(buf, len, "%s/bivouac", xdg);
    else if (home && *home)
        snprintf(buf, len, "%s/.cache/bivouac", home);
    else
        snprintf(buf, len, ".bivouac-cache");
}

bv_features_form bv_graph_feature_storage(const bv_experiment *x)
{
    const char *form = bv_opts_str(&x->dataset, "feature_storage");
    return strcmp(form, "sparse") == 0  ? BV_FEATURES_SPARSE
           : strcmp(form, "dense") == 0 ? BV_FEATURES_DENSE
                                        : BV_FEATURES_AUTO;
}

bv_status bv_graph_load_data(const bv_experiment *x, uint64_t seed_offset,
                            bv_graph_dataset **out, bv_error *err)
{
    const bv_opts *d = &x->dataset;
    const char *synth = bv_opts_str(d, "synthetic");
    bv_status st;
    if (strcmp(synth, "communities") == 0) {
        bv_synth_communities p = {
            .nodes = bv_opts_int(d, "nodes"),
            .features = bv_opts_int(d, "features"),
            .classes = (int32_t)bv_opts_int(d, "classes"),
            .avg_degree = bv_opts_float(d, "avg_degree"),
            .homophily = bv_opts_float(d, "homophily"),
            .feature_density = bv_opts_float(d, "feature_density"),
            .feature_signal = bv_opts_float(d, "feature_signal"),
            .train_per_class = bv_opts_int(d, "train_per_class"),
            .val = bv_opts_int(d, "val"),
            .test = bv_opts_int(d, "test"),
            .seed = (uint64_t)bv_opts_int(d, "seed") + seed_offset,
        };
        st = bv_graph_synth_communities(&p, out, err);
    } else if (strcmp(synth, "powerlaw") == 0) {
        bv_synth_powerlaw p = {
            .nodes = bv_opts_int(d, "nodes"),
            .edges = bv_opts_int(d, "edges"),
            .features = bv_opts_int(d, "features"),
            .classes = (int32_t)bv_opts_int(d, "classes"),
            .exponent = bv_opts_float(d, "exponent"),
            .seed = (uint64_t)bv_opts_int(d, "seed") + seed_offset,
        };
        st = bv_graph_synth_powerlaw(&p, out, err);
    } else {
        char dir[4096];
        cache_dir(dir, sizeof dir);
        st = bv_graph_load_dir(x->dataset_dir, bv_opts_bool(d, "cache") ? dir : NULL, out, err);
    }
    if (st == BV_OK && bv_opts_bool(d, "normalize_features"))
        st = bv_graph_row_normalize_features(*out, err);
    if (st == BV_OK)
        st = bv_graph_features_convert(*out, bv_graph_feature_storage(x), err);
    if (st != BV_OK) {
        bv_graph_free(*out);
        *out = NULL;
    }
    return st;
}
