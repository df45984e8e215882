/* Fuzz target: the YAML experiment loader (config.c) and schema validation
 * (config_validate.c, options.c), plus emitting the tree back to YAML (config_emit.c).
 *
 * The input is YAML text. If its first line is "#= a.b=value" (a YAML comment, so the
 * document still loads), "a.b=value" is applied as a `-s` override. Every top-level
 * section is then checked against a schema picked by its key: the graph engine's
 * `dataset` and `train` schemas, the core's `engine` and `policy` schemas (copies, so
 * the target needs no plugin registry), and for any other key a schema with one option
 * of every type. Finally the tree is emitted with bv_node_to_yaml, which promises text
 * that loads back into an equal tree: a tree that does not is reported as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "config.h"

static const bv_option dataset_schema[] = {
    BV_OPT_STR("name", "", "dataset directory under $BIVOUAC_DATA_DIR"),
    BV_OPT_FILE("path", "", "dataset directory, relative to the experiment file"),
    BV_OPT_CHOICE("synthetic", "none", "none|communities|powerlaw", "built-in generator"),
    BV_OPT_INT_RANGE("nodes", "2000", 2, 2e9, "synthetic: vertices"),
    BV_OPT_INT_RANGE("edges", "10000", 1, 1e11, "synthetic powerlaw: undirected edges"),
    BV_OPT_INT_RANGE("features", "500", 1, 1e6, "synthetic: features per vertex"),
    BV_OPT_FLOAT_RANGE("avg_degree", "4", 0, 1e5, "synthetic communities: mean degree"),
    BV_OPT_FLOAT_RANGE("homophily", "0.8", 0, 1, "fraction of edges inside a community"),
    BV_OPT_FLOAT_RANGE("exponent", "2.1", 1.01, 10, "synthetic powerlaw: degree exponent"),
    BV_OPT_INT_RANGE("seed", "1", 0, 9007199254740992.0, "synthetic: generator seed"),
    BV_OPT_BOOLEAN("cache", "true", "keep a binary cache of parsed datasets"),
    BV_OPT_END,
};

static const bv_option train_schema[] = {
    BV_OPT_INT_RANGE("epochs", "200", 1, 1e9, "maximum number of epochs"),
    BV_OPT_FLOAT_RANGE("lr", "0.01", 0, 10, "Adam learning rate"),
    BV_OPT_FLOAT_RANGE("eps", "1e-8", 0, 1, "Adam epsilon"),
    BV_OPT_CHOICE("select", "last", "last|best_val_accuracy|best_val_loss|best_val_both",
                  "which epoch's model result.json reports"),
    BV_OPT_BOOLEAN("decay_in_loss", "true", "reported losses include weight decay"),
    BV_OPT_END,
};

static const bv_option engine_schema[] = {
    BV_OPT_INT_RANGE("intervals", "0", 0, 1e6, "vertex intervals per stage"),
    BV_OPT_INT_RANGE("tensor_workers", "1", 1, 64, "tensor worker threads"),
    BV_OPT_BOOLEAN("share_arrays", "true", "pass vertex arrays by reference"),
    BV_OPT_END,
};

static const bv_option policy_schema[] = {
    BV_OPT_FILE("file", NULL, "Lua policy script, relative to the experiment file"),
    BV_OPT_CHOICE("on_error", "continue", "continue|stop", "on a script error"),
    BV_OPT_INT_RANGE("instructions", "10000000", 1000, 1e12, "Lua instruction budget"),
    BV_OPT_INT_RANGE("memory_mb", "64", 1, 65536, "Lua memory cap in MiB"),
    BV_OPT_END,
};

/* One option of every type, without defaults for two of them (required keys). */
static const bv_option any_schema[] = {
    BV_OPT_INT_RANGE("hidden", "16", 1, 1e6, "an integer"),
    {"layers", BV_OPT_INT, NULL, 0, 0, false, NULL, "a required integer without range"},
    BV_OPT_FLOAT_RANGE("dropout", "0.5", 0, 1, "a float in [0, 1]"),
    {"scale", BV_OPT_FLOAT, "1", 0, 0, false, NULL, "a float without range"},
    BV_OPT_BOOLEAN("bias", "true", "a boolean"),
    BV_OPT_STR("label", "x", "a string"),
    BV_OPT_CHOICE("activation", "relu", "relu|elu|leaky_relu", "an enum"),
    BV_OPT_FILE("dir", NULL, "a required path"),
    BV_OPT_END,
};

static const char *const ignore_keys[] = {"plugin", "params", NULL};

static bool trees_equal(const bv_node *a, const bv_node *b)
{
    if (a->kind != b->kind)
        return false;
    if (a->kind == BV_NODE_SCALAR)
        return strcmp(a->scalar, b->scalar) == 0;
    if (a->count != b->count)
        return false;
    for (size_t i = 0; i < a->count; i++) {
        if (a->kind == BV_NODE_MAP && strcmp(a->keys[i], b->keys[i]) != 0)
            return false;
        if (!trees_equal(a->items[i], b->items[i]))
            return false;
    }
    return true;
}

static void validate_section(const bv_node *value, const char *key)
{
    const bv_option *schema = any_schema;
    if (strcmp(key, "dataset") == 0)
        schema = dataset_schema;
    else if (strcmp(key, "train") == 0)
        schema = train_schema;
    else if (strcmp(key, "engine") == 0)
        schema = engine_schema;
    else if (strcmp(key, "policy") == 0)
        schema = policy_schema;
    bv_diag diag;
    bv_diag_init(&diag);
    bv_opts opts = {0};
    if (bv_config_validate(value, key, schema, ignore_keys, &opts, &diag) == BV_OK) {
        /* Read every value back through the typed getters. */
        for (const bv_option *o = schema; o->name; o++) {
            switch (o->type) {
            case BV_OPT_INT: (void)bv_opts_int(&opts, o->name); break;
            case BV_OPT_FLOAT: (void)bv_opts_float(&opts, o->name); break;
            case BV_OPT_BOOL: (void)bv_opts_bool(&opts, o->name); break;
            default: {
                const char *s = bv_opts_str(&opts, o->name);
                (void)(s ? strlen(s) : 0);
                break;
            }
            }
        }
    }
    char line[1024];
    for (size_t i = 0; i < diag.count; i++)
        bv_diag_format(&diag, i, line, sizeof line);
    bv_opts_free(&opts);
    bv_diag_free(&diag);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    bv_log_set_level(BV_LOG_ERROR);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    bv_diag diag;
    bv_diag_init(&diag);
    bv_node *root = NULL;
    if (bv_config_load_string(text, "/fuzz/experiment.yaml", &root, &diag) != BV_OK) {
        char line[1024];
        for (size_t i = 0; i < diag.count; i++)
            bv_diag_format(&diag, i, line, sizeof line);
        bv_diag_free(&diag);
        free(text);
        return 0;
    }
    if (strncmp(text, "#= ", 3) == 0) {
        char *eol = strchr(text, '\n');
        if (eol)
            *eol = '\0';
        (void)bv_config_override(root, text + 3, &diag);
    }
    for (size_t i = 0; root->kind == BV_NODE_MAP && i < root->count; i++) {
        validate_section(root->items[i], root->keys[i]);
        (void)bv_node_at_path(root, root->keys[i]);
    }
    (void)bv_node_at_path(root, "model.layers.0");

    char *yaml = bv_node_to_yaml(root);
    if (yaml) {
        bv_node *again = NULL;
        bv_diag d2;
        bv_diag_init(&d2);
        if (bv_config_load_string(yaml, "/fuzz/emitted.yaml", &again, &d2) != BV_OK ||
            !trees_equal(root, again)) {
            fprintf(stderr, "bv_node_to_yaml's text does not load back into an equal tree:\n"
                            "%s\n",
                    yaml);
            abort();
        }
        bv_node_free(again);
        bv_diag_free(&d2);
        free(yaml);
    }
    bv_node_free(root);
    bv_diag_free(&diag);
    free(text);
    return 0;
}
