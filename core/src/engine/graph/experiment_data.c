/* Loading the experiment's dataset: a directory (through the binary cache) or one of the
 * built-in generators; then Kipf's feature normalisation if asked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/graph.h"
#include "experiment.h"

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

bv_status bv_experiment_load_dataset(const bv_experiment *x, uint64_t seed_offset,
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
    if (st == BV_OK && bv_opts_bool(d, "normalize_features")) {
        st = bv_graph_row_normalize_features(*out, err);
        if (st != BV_OK) {
            bv_graph_free(*out);
            *out = NULL;
        }
    }
    return st;
}
