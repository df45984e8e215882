/* Config loading, overrides, schema validation and YAML output: exact positions and exact
 * messages, since `bivouac check` prints them to users as they are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "config.h"

static const bv_option model_schema[] = {
    BV_OPT_INT_RANGE("hidden", "16", 1, 4096, "hidden units"),
    BV_OPT_INT_RANGE("layers", NULL, 1, 64, "number of layers (required)"),
    BV_OPT_FLOAT_RANGE("dropout", "0.1", 0, 1, "dropout probability"),
    BV_OPT_CHOICE("activation", "relu", "relu|elu", "activation function"),
    BV_OPT_BOOLEAN("bias", "true", "learn a bias"),
    BV_OPT_STR("name", "net", "display name"),
    BV_OPT_FILE("data", "data.csv", "training data"),
    BV_OPT_END,
};

static const char *const ignore_plugin[] = { "plugin", NULL };

/* ---- helpers ------------------------------------------------------------------------ */

/* tests/data/config/<name>, from BIVOUAC_SOURCE_DIR (set by ctest) or this file's path. */
static char *fixture(const char *name)
{
    char dir[4096];
    const char *src = getenv("BIVOUAC_SOURCE_DIR");
    if (src) {
        snprintf(dir, sizeof dir, "%s", src);
    } else {
        snprintf(dir, sizeof dir, "/%s", __FILE__); /* "/" keeps a relative name working */
        char *cut = strstr(dir, "/tests/unit/");
        assert_non_null(cut);
        *cut = '\0';
        memmove(dir, dir + 1, strlen(dir)); /* drop the added "/" again */
        if (!dir[0])
            snprintf(dir, sizeof dir, ".");
    }
    size_t len = strlen(dir) + strlen(name) + 32;
    char *path = malloc(len);
    assert_non_null(path);
    snprintf(path, len, "%s/tests/data/config/%s", dir, name);
    return path;
}

static void expect_diag(const bv_diag *d, size_t i, const char *file, int line, int col,
                        const char *msg)
{
    assert_true(i < d->count);
    const bv_diag_entry *e = &d->entries[i];
    if (file)
        assert_string_equal(e->file, file);
    else
        assert_null(e->file);
    assert_int_equal(e->line, line);
    assert_int_equal(e->col, col);
    assert_string_equal(e->msg, msg);
}

static void expect_pos(bv_pos p, const char *file, int line, int col)
{
    assert_string_equal(p.file, file);
    assert_int_equal(p.line, line);
    assert_int_equal(p.col, col);
}

static bv_node *load_ok(const char *text)
{
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_string(text, "t.yaml", &root, &d), BV_OK);
    assert_int_equal(d.count, 0);
    bv_diag_free(&d);
    return root;
}

/* Loads text expecting failure with exactly one diagnostic. */
static void expect_load_error(const char *text, bv_status status, int line, int col,
                              const char *msg)
{
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = (bv_node *)&d; /* must be reset to NULL */
    assert_int_equal(bv_config_load_string(text, "t.yaml", &root, &d), status);
    assert_null(root);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, "t.yaml", line, col, msg);
    bv_diag_free(&d);
}

static const char *scalar_at(const bv_node *root, const char *path)
{
    const bv_node *n = bv_node_at_path(root, path);
    assert_non_null(n);
    assert_int_equal(n->kind, BV_NODE_SCALAR);
    return n->scalar;
}

/* b is a as written and loaded back: the same tree, and a string (quoted) is still one. A
 * plain value may come back quoted where YAML can only write it so (`-s k=x: y`). */
static bool nodes_equal(const bv_node *a, const bv_node *b)
{
    if (a->kind != b->kind || a->count != b->count)
        return false;
    if (a->kind == BV_NODE_SCALAR)
        return strcmp(a->scalar, b->scalar) == 0 && (!a->quoted || b->quoted);
    for (size_t i = 0; i < a->count; i++) {
        if (a->kind == BV_NODE_MAP && strcmp(a->keys[i], b->keys[i]) != 0)
            return false;
        if (!nodes_equal(a->items[i], b->items[i]))
            return false;
    }
    return true;
}

/* ---- loading ------------------------------------------------------------------------ */

static void load_file_records_every_position(void **state)
{
    char *path = fixture("experiment.yaml");
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_file(path, &root, &d), BV_OK);
    assert_int_equal(d.count, 0);

    assert_int_equal(root->kind, BV_NODE_MAP);
    assert_int_equal(root->count, 4);
    assert_string_equal(root->keys[0], "model");
    expect_pos(root->key_pos[0], path, 3, 1);
    expect_pos(root->items[0]->pos, path, 4, 3); /* a block mapping starts at its first key */

    const bv_node *model = bv_node_get(root, "model");
    assert_int_equal(model->kind, BV_NODE_MAP);
    expect_pos(model->key_pos[1], path, 5, 3);
    const bv_node *hidden = bv_node_get(model, "hidden");
    assert_string_equal(hidden->scalar, "64");
    expect_pos(hidden->pos, path, 5, 11);
    const bv_node *data = bv_node_get(model, "data");
    assert_string_equal(data->scalar, "train.csv");
    expect_pos(data->pos, path, 8, 9); /* the opening quote */

    const bv_node *res = bv_node_get(root, "resilience");
    assert_int_equal(res->kind, BV_NODE_SEQ);
    assert_int_equal(res->count, 2);
    expect_pos(res->pos, path, 13, 3);
    assert_string_equal(scalar_at(root, "resilience.1.plugin"), "replicate");
    expect_pos(bv_node_at_path(root, "resilience.1.every")->pos, path, 16, 12);
    assert_string_equal(scalar_at(root, "optimizer.lr"), "0.05");

    /* `notes:` with nothing after it is the empty scalar, placed after the colon. */
    const bv_node *notes = bv_node_get(root, "notes");
    assert_int_equal(notes->kind, BV_NODE_SCALAR);
    assert_string_equal(notes->scalar, "");
    expect_pos(notes->pos, path, 17, 7);

    /* The file name positions point to is owned by the tree, not the caller. */
    assert_ptr_not_equal(hidden->pos.file, path);
    bv_node_free(root);
    bv_diag_free(&d);
    free(path);
}

static void lookups_return_null_for_missing_or_wrong_kind(void **state)
{
    bv_node *root = load_ok("a:\n  b: 1\nl: [x, y]\n");
    assert_null(bv_node_get(root, "zz"));
    assert_null(bv_node_get(bv_node_get(root, "l"), "0")); /* a list is not a mapping */
    assert_null(bv_node_at_path(root, "a.b.c"));
    assert_null(bv_node_at_path(root, "l.2"));
    assert_null(bv_node_at_path(root, "l.x"));
    assert_null(bv_node_at_path(root, "a..b"));
    assert_string_equal(scalar_at(root, "l.1"), "y");
    assert_string_equal(scalar_at(root, "a.b"), "1");
    bv_node_free(root);
}

static void null_and_empty_values_are_empty_scalars(void **state)
{
    bv_node *root = load_ok("a:\nb: ~\nc: null\nd: 'null'\ne: \"\"\n");
    assert_string_equal(scalar_at(root, "a"), "");
    assert_string_equal(scalar_at(root, "b"), "");
    assert_string_equal(scalar_at(root, "c"), "");
    assert_string_equal(scalar_at(root, "d"), "null"); /* quoted: the word itself */
    assert_string_equal(scalar_at(root, "e"), "");
    bv_node_free(root);
}

static void malformed_yaml_reports_libyaml_problem(void **state)
{
    expect_load_error("a: 1\n  b: 2\n", BV_ERR_INVALID, 2, 4,
                      "invalid YAML: mapping values are not allowed in this context");
    expect_load_error("a: [1, 2\nb: 3\n", BV_ERR_INVALID, 2, 2,
                      "invalid YAML: did not find expected ',' or ']' "
                      "(while parsing a flow sequence)");
    expect_load_error("a: \"open\n", BV_ERR_INVALID, 2, 1,
                      "invalid YAML: found unexpected end of stream "
                      "(while scanning a quoted scalar)");
    /* Bad UTF-8 has only a byte offset in libyaml; it is turned into line:column. */
    expect_load_error("a: 1\nb: \"\xff\"\n", BV_ERR_INVALID, 2, 5,
                      "invalid YAML: invalid leading UTF-8 octet");
}

static void malformed_file_reports_its_name(void **state)
{
    char *path = fixture("malformed.yaml");
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_file(path, &root, &d), BV_ERR_INVALID);
    assert_null(root);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, path, 3, 9,
                "invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence)");
    char line[2048], want[2048];
    bv_diag_format(&d, 0, line, sizeof line);
    snprintf(want, sizeof want, "%s:3:9: error: invalid YAML: did not find expected ',' or "
             "']' (while parsing a flow sequence)", path);
    assert_string_equal(line, want);
    bv_diag_free(&d);
    free(path);
}

static void unreadable_file_is_an_io_error_without_line(void **state)
{
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_file("/nonexistent/exp.yaml", &root, &d), BV_ERR_IO);
    assert_null(root);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, "/nonexistent/exp.yaml", 0, 0, "cannot read: No such file or directory");
    char line[512];
    bv_diag_format(&d, 0, line, sizeof line);
    assert_string_equal(line, "/nonexistent/exp.yaml: error: cannot read: "
                              "No such file or directory");
    bv_diag_free(&d);

    char *dir = fixture("sub");
    bv_diag_init(&d);
    assert_int_equal(bv_config_load_file(dir, &root, &d), BV_ERR_INVALID);
    assert_null(root);
    assert_int_equal(d.count, 1);
    char msg[4200];
    snprintf(msg, sizeof msg, "%s is not a regular file (a directory)", dir);
    expect_diag(&d, 0, NULL, 0, 0, msg);
    bv_diag_free(&d);
    free(dir);
}

static void top_level_must_be_a_mapping(void **state)
{
    expect_load_error("- model\n- data\n", BV_ERR_INVALID, 1, 1,
                      "the experiment must be a mapping of sections");
    expect_load_error("\n\n  just text\n", BV_ERR_INVALID, 3, 3,
                      "the experiment must be a mapping of sections");
    expect_load_error("", BV_ERR_INVALID, 1, 1, "the experiment must be a mapping of sections");
}

static void duplicate_keys_are_reported_at_the_second_key(void **state)
{
    expect_load_error("model:\n  hidden: 1\n  layers: 2\n  hidden: 3\n", BV_ERR_INVALID, 4, 3,
                      "duplicate key 'hidden'");
    expect_load_error("m: {a: 1, a: 2}\n", BV_ERR_INVALID, 1, 11, "duplicate key 'a'");

    /* Reading goes on after a duplicate, so every one is reported. */
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_string("a: 1\nb: 2\na: 3\nb: 4\n", "t.yaml", &root, &d),
                     BV_ERR_INVALID);
    assert_null(root);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "t.yaml", 3, 1, "duplicate key 'a'");
    expect_diag(&d, 1, "t.yaml", 4, 1, "duplicate key 'b'");
    bv_diag_free(&d);
}

static void aliases_and_anchors_are_refused(void **state)
{
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_string("base: &b\n  x: 1\nother: *b\n", "t.yaml", &root,
                                           &d),
                     BV_ERR_INVALID);
    assert_null(root);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "t.yaml", 1, 7, "YAML aliases are not supported");
    expect_diag(&d, 1, "t.yaml", 3, 8, "YAML aliases are not supported");
    bv_diag_free(&d);
}

static void a_second_document_is_refused(void **state)
{
    expect_load_error("a: 1\n---\nb: 2\n", BV_ERR_INVALID, 2, 1,
                      "only one YAML document is allowed");
}

/* ---- overrides ---------------------------------------------------------------------- */

static void override_replaces_a_value(void **state)
{
    bv_node *root = load_ok("model:\n  hidden: 16\n");
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "model.hidden=32", &d), BV_OK);
    assert_int_equal(d.count, 0);
    const bv_node *h = bv_node_at_path(root, "model.hidden");
    assert_string_equal(h->scalar, "32");
    expect_pos(h->pos, "<command line>", 1, 14);
    assert_int_equal(bv_node_get(root, "model")->count, 1);
    /* The key keeps its place in the file. */
    expect_pos(bv_node_get(root, "model")->key_pos[0], "t.yaml", 2, 3);

    /* Everything after the first '=' is the value; an empty value is "". */
    assert_int_equal(bv_config_override(root, "model.name=a=b", &d), BV_OK);
    assert_string_equal(scalar_at(root, "model.name"), "a=b");
    assert_int_equal(bv_config_override(root, "model.name=", &d), BV_OK);
    assert_string_equal(scalar_at(root, "model.name"), "");
    expect_pos(bv_node_at_path(root, "model.name")->pos, "<command line>", 1, 12);
    assert_int_equal(bv_config_override(root, "model.name=~", &d), BV_OK);
    assert_string_equal(scalar_at(root, "model.name"), "");
    assert_int_equal(d.count, 0);
    bv_node_free(root);
    bv_diag_free(&d);
}

static void override_creates_missing_mappings(void **state)
{
    bv_node *root = load_ok("model:\n  hidden: 16\n");
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "optimizer.schedule.warmup=100", &d), BV_OK);
    assert_int_equal(d.count, 0);
    const bv_node *opt = bv_node_get(root, "optimizer");
    assert_int_equal(opt->kind, BV_NODE_MAP);
    expect_pos(root->key_pos[1], "<command line>", 1, 1);
    expect_pos(opt->key_pos[0], "<command line>", 1, 11);
    const bv_node *w = bv_node_at_path(root, "optimizer.schedule.warmup");
    assert_string_equal(w->scalar, "100");
    expect_pos(w->pos, "<command line>", 1, 27);
    expect_pos(bv_node_get(root, "optimizer")->items[0]->key_pos[0], "<command line>", 1, 20);

    assert_int_equal(bv_config_override(root, "model.layers=3", &d), BV_OK);
    const bv_node *model = bv_node_get(root, "model");
    assert_int_equal(model->count, 2);
    assert_string_equal(model->keys[1], "layers");
    expect_pos(model->key_pos[1], "<command line>", 1, 7);
    bv_node_free(root);
    bv_diag_free(&d);
}

static void override_indexes_lists_by_number(void **state)
{
    bv_node *root = load_ok("resilience:\n  - plugin: checkpoint\n    every: 100\n"
                            "  - plugin: replicate\n");
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "resilience.0.every=5", &d), BV_OK);
    assert_string_equal(scalar_at(root, "resilience.0.every"), "5");
    assert_int_equal(bv_config_override(root, "resilience.1.every=7", &d), BV_OK);
    assert_string_equal(scalar_at(root, "resilience.1.every"), "7");
    assert_int_equal(bv_config_override(root, "resilience.1=gone", &d), BV_OK);
    assert_string_equal(scalar_at(root, "resilience.1"), "gone");
    assert_int_equal(d.count, 0);

    assert_int_equal(bv_config_override(root, "resilience.2.every=1", &d), BV_ERR_INVALID);
    assert_int_equal(bv_config_override(root, "resilience.first.every=1", &d), BV_ERR_INVALID);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "<command line>", 1, 1,
                "cannot set 'resilience.2.every': 'resilience' has no item 2 (it has 2)");
    expect_diag(&d, 1, "<command line>", 1, 1,
                "cannot set 'resilience.first.every': 'resilience' is a list; expected an "
                "item number, got 'first'");
    assert_int_equal(bv_node_get(root, "resilience")->count, 2);
    bv_node_free(root);
    bv_diag_free(&d);
}

static void override_without_equals_is_refused(void **state)
{
    bv_node *root = load_ok("model:\n  hidden: 16\n");
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "model.hidden", &d), BV_ERR_INVALID);
    assert_int_equal(bv_config_override(root, "=3", &d), BV_ERR_INVALID);
    assert_int_equal(bv_config_override(root, "model..hidden=3", &d), BV_ERR_INVALID);
    assert_int_equal(bv_config_override(root, "model.=3", &d), BV_ERR_INVALID);
    assert_int_equal(d.count, 4);
    expect_diag(&d, 0, "<command line>", 1, 1,
                "override 'model.hidden' must look like key.path=value");
    expect_diag(&d, 1, "<command line>", 1, 1, "override '=3' must look like key.path=value");
    expect_diag(&d, 2, "<command line>", 1, 1,
                "override 'model..hidden=3' must look like key.path=value");
    expect_diag(&d, 3, "<command line>", 1, 1,
                "override 'model.=3' must look like key.path=value");
    char line[512];
    bv_diag_format(&d, 0, line, sizeof line);
    assert_string_equal(line, "<command line>:1:1: error: override 'model.hidden' must look "
                              "like key.path=value");
    bv_node_free(root);
    bv_diag_free(&d);
}

static void override_must_be_utf8(void **state)
{
    bv_node *root = load_ok("model:\n  name: a\n");
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "model.name=caf\xc3\xa9", &d), BV_OK);
    assert_int_equal(bv_config_override(root, "model.name=caf\xe9", &d), BV_ERR_INVALID);
    assert_int_equal(bv_config_override(root, "model.name=\xc0\xaf", &d), BV_ERR_INVALID);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "<command line>", 1, 1, "override 'model.name' is not valid UTF-8");
    assert_string_equal(scalar_at(root, "model.name"), "caf\xc3\xa9");
    char *text = bv_node_to_yaml(root);
    assert_string_equal(text, "model:\n  name: caf\xc3\xa9\n");
    free(text);
    bv_node_free(root);
    bv_diag_free(&d);
}

static void deep_nesting_is_refused(void **state)
{
    char text[1024] = "a: ";
    for (int i = 0; i < 300; i++)
        strcat(text, "[");
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_string(text, "t.yaml", &root, &d), BV_ERR_INVALID);
    assert_null(root);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, "t.yaml", 1, 132, "the YAML is nested too deeply");
    bv_diag_free(&d);
}

static void override_below_a_scalar_is_refused_and_changes_nothing(void **state)
{
    bv_node *root = load_ok("a:\n  b: 1\n");
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "a.b.c=2", &d), BV_ERR_INVALID);
    assert_int_equal(bv_config_override(root, "a.b.c.d=2", &d), BV_ERR_INVALID);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "<command line>", 1, 1, "cannot set 'a.b.c': 'a.b' is not a mapping");
    expect_diag(&d, 1, "<command line>", 1, 1, "cannot set 'a.b.c.d': 'a.b' is not a mapping");
    assert_string_equal(scalar_at(root, "a.b"), "1");
    assert_int_equal(bv_node_get(root, "a")->count, 1);
    bv_node_free(root);
    bv_diag_free(&d);
}

static void override_reads_flow_values_as_yaml(void **state)
{
    bv_node *root = load_ok("model:\n  hidden: 16\n");
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "model.sizes=[8, 16]", &d), BV_OK);
    const bv_node *sizes = bv_node_at_path(root, "model.sizes");
    assert_int_equal(sizes->kind, BV_NODE_SEQ);
    assert_int_equal(sizes->count, 2);
    expect_pos(sizes->pos, "<command line>", 1, 13);
    assert_string_equal(sizes->items[1]->scalar, "16");
    expect_pos(sizes->items[1]->pos, "<command line>", 1, 17);

    assert_int_equal(bv_config_override(root, "model={hidden: 4, layers: 2}", &d), BV_OK);
    assert_string_equal(scalar_at(root, "model.layers"), "2");
    expect_pos(bv_node_get(root, "model")->key_pos[1], "<command line>", 1, 19);
    assert_null(bv_node_at_path(root, "model.sizes"));
    assert_int_equal(d.count, 0);

    /* Not YAML: the error points into the assignment and the tree stays as it was. */
    assert_int_equal(bv_config_override(root, "model.sizes=[1, [2]", &d), BV_ERR_INVALID);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, "<command line>", 1, 20,
                "invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence)");
    assert_null(bv_node_at_path(root, "model.sizes"));
    bv_node_free(root);
    bv_diag_free(&d);
}

/* ---- validation --------------------------------------------------------------------- */

static void validate_fills_defaults_and_records_user_positions(void **state)
{
    char *path = fixture("experiment.yaml");
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_file(path, &root, &d), BV_OK);
    bv_opts o;
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        ignore_plugin, &o, &d),
                     BV_OK);
    assert_int_equal(d.count, 0);
    assert_string_equal(o.section, "model");
    assert_int_equal(o.count, 7);
    assert_int_equal(bv_opts_int(&o, "hidden"), 64);
    assert_int_equal(bv_opts_int(&o, "layers"), 3);
    assert_string_equal(bv_opts_str(&o, "activation"), "elu");
    assert_true(bv_opts_float(&o, "dropout") == 0.1);
    assert_true(bv_opts_bool(&o, "bias"));
    assert_string_equal(bv_opts_str(&o, "name"), "net");

    const bv_opt_value *hidden = bv_opts_find(&o, "hidden");
    assert_true(hidden->from_user);
    expect_pos(hidden->pos, path, 5, 11);
    const bv_opt_value *dropout = bv_opts_find(&o, "dropout");
    assert_false(dropout->from_user);
    assert_null(dropout->pos.file);

    /* PATH: relative to the directory of the file that set it. */
    char want[4096];
    snprintf(want, sizeof want, "%.*s/train.csv", (int)(strrchr(path, '/') - path), path);
    assert_string_equal(bv_opts_str(&o, "data"), want);
    bv_opts_free(&o);

    /* An override sets a path relative to the current directory; the value's position is
     * the command line. */
    assert_int_equal(bv_config_override(root, "model.data=runs/x.csv", &d), BV_OK);
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        ignore_plugin, &o, &d),
                     BV_OK);
    assert_string_equal(bv_opts_str(&o, "data"), "runs/x.csv");
    expect_pos(bv_opts_find(&o, "data")->pos, "<command line>", 1, 12);
    bv_opts_free(&o);
    bv_node_free(root);
    bv_diag_free(&d);
    free(path);
}

static void validate_resolves_paths_against_the_yaml_file(void **state)
{
    char *path = fixture("sub/paths.yaml");
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_file(path, &root, &d), BV_OK);
    bv_opts o;
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        NULL, &o, &d),
                     BV_OK);
    char want[4096];
    snprintf(want, sizeof want, "%.*s/train.csv", (int)(strrchr(path, '/') - path), path);
    assert_string_equal(bv_opts_str(&o, "data"), want);
    assert_non_null(strstr(want, "/tests/data/config/sub/train.csv"));
    bv_opts_free(&o);

    assert_int_equal(bv_config_validate(bv_node_get(root, "absolute"), "absolute",
                                        model_schema, NULL, &o, &d),
                     BV_OK);
    assert_string_equal(bv_opts_str(&o, "data"), "/srv/data/train.csv");
    bv_opts_free(&o);
    assert_int_equal(d.count, 0);
    bv_node_free(root);
    bv_diag_free(&d);
    free(path);

    /* A file named without a directory: the path is relative to the current directory. */
    root = load_ok("m:\n  layers: 1\n  data: d/x.csv\n");
    bv_diag_init(&d);
    assert_int_equal(bv_config_validate(bv_node_get(root, "m"), "m", model_schema, NULL, &o,
                                        &d),
                     BV_OK);
    assert_string_equal(bv_opts_str(&o, "data"), "d/x.csv");
    bv_opts_free(&o);
    bv_node_free(root);
    bv_diag_free(&d);
}

static void validate_reports_every_error_in_file_order(void **state)
{
    char *path = fixture("errors.yaml");
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_file(path, &root, &d), BV_OK);
    bv_opts o = { "stale", (bv_opt_value *)&d, 99 };
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        ignore_plugin, &o, &d),
                     BV_ERR_INVALID);
    assert_null(o.values);
    assert_int_equal(o.count, 0);
    assert_int_equal(d.count, 8);
    expect_diag(&d, 0, path, 4, 3, "unknown key 'hiden' in section 'model'; did you mean "
                                   "'hidden'?");
    expect_diag(&d, 1, path, 5, 12, "'dropout' must be in [0, 1], got 1.5");
    expect_diag(&d, 2, path, 6, 15, "'activation' must be one of relu|elu, got 'tanh'");
    expect_diag(&d, 3, path, 7, 9, "expected true or false for 'bias', got a list");
    expect_diag(&d, 4, path, 9, 5, "expected a string for 'name', got a mapping");
    expect_diag(&d, 5, path, 10, 3, "unknown key 'layer' in section 'model'; did you mean "
                                    "'layers'?");
    expect_diag(&d, 6, path, 11, 3, "unknown key 'colour' in section 'model'");
    expect_diag(&d, 7, path, 3, 3, "missing required key 'layers' in section 'model'");
    bv_node_free(root);
    bv_diag_free(&d);
    free(path);
}

static void validate_reports_bad_values_from_the_command_line(void **state)
{
    bv_node *root = load_ok("model:\n  layers: 2\n");
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "model.hidden=abc", &d), BV_OK);
    assert_int_equal(bv_config_override(root, "model.hiden=3", &d), BV_OK);
    bv_opts o;
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "<command line>", 1, 14, "expected an integer for 'hidden', got 'abc'");
    expect_diag(&d, 1, "<command line>", 1, 7, "unknown key 'hiden' in section 'model'; did "
                                               "you mean 'hidden'?");
    bv_node_free(root);
    bv_diag_free(&d);
}

/* An INT option's text is parsed as a whole long long: an exponent, a fraction or a value
 * beyond long long is an error at its position, never a cast out of range. */
static void int_options_refuse_what_a_long_long_cannot_hold(void **state)
{
    (void)state;
    bv_node *root = load_ok("model:\n  layers: 1e300\n  hidden: 9223372036854775808\n");
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "model.hidden=2.5", &d), BV_OK);
    bv_opts o;
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "t.yaml", 2, 11, "expected an integer for 'layers', got '1e300'");
    expect_diag(&d, 1, "<command line>", 1, 14, "expected an integer for 'hidden', got '2.5'");
    bv_node_free(root);
    bv_diag_free(&d);

    root = load_ok("model:\n  layers: 2\n  hidden: 9223372036854775808\n");
    bv_diag_init(&d);
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, "t.yaml", 3, 11,
                "expected an integer for 'hidden', got '9223372036854775808'");
    bv_node_free(root);
    bv_diag_free(&d);
}

/* Integer bounds are compared as integers (as doubles, 2^53 + 1 rounds to 2^53 and
 * passed), and a bound beyond long long is clamped, not cast. */
static void int_ranges_compare_exactly(void **state)
{
    (void)state;
    static const bv_option seed = BV_OPT_INT_RANGE("seed", "0", 0, 9007199254740992.0, "");
    static const bv_option wide = BV_OPT_INT_RANGE("wide", "0", -1e300, 1e300, "");
    bv_opt_value v;
    bv_error err = {0};
    assert_int_equal(bv_opt_parse(&seed, "9007199254740992", &v, &err), BV_OK);
    assert_int_equal(v.v.i, 9007199254740992LL);
    assert_int_equal(bv_opt_parse(&seed, "9007199254740993", &v, &err), BV_ERR_INVALID);
    assert_string_equal(err.msg,
                        "'seed' must be in [0, 9007199254740992], got 9007199254740993");
    assert_int_equal(bv_opt_parse(&seed, "-1", &v, &err), BV_ERR_INVALID);
    assert_string_equal(err.msg, "'seed' must be in [0, 9007199254740992], got -1");
    assert_int_equal(bv_opt_parse(&wide, "-9223372036854775808", &v, &err), BV_OK);
    assert_int_equal(bv_opt_parse(&wide, "9223372036854775807", &v, &err), BV_OK);
    assert_int_equal(bv_opt_parse(&wide, "-9223372036854775809", &v, &err), BV_ERR_INVALID);
    assert_string_equal(err.msg, "expected an integer for 'wide', got '-9223372036854775809'");
}

static void validate_needs_a_mapping(void **state)
{
    bv_node *root = load_ok("model: 5\ndata:\n  - a\nempty:\n");
    bv_diag d;
    bv_diag_init(&d);
    bv_opts o;
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(bv_config_validate(bv_node_get(root, "data"), "data", model_schema, NULL,
                                        &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "t.yaml", 1, 8, "section 'model' must be a mapping");
    expect_diag(&d, 1, "t.yaml", 3, 3, "section 'data' must be a mapping");
    bv_diag_free(&d);

    /* `empty:` is an empty mapping: defaults apply, required keys are missing. */
    bv_diag_init(&d);
    assert_int_equal(bv_config_validate(bv_node_get(root, "empty"), "empty", model_schema,
                                        NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, "t.yaml", 4, 7, "missing required key 'layers' in section 'empty'");
    bv_diag_free(&d);

    /* No section at all: the same, without a position. */
    bv_diag_init(&d);
    assert_int_equal(bv_config_validate(NULL, "model", model_schema, NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, NULL, 0, 0, "missing required key 'layers' in section 'model'");
    bv_diag_free(&d);

    static const bv_option optional_only[] = { BV_OPT_STR("tag", "x", "a tag"), BV_OPT_END };
    bv_diag_init(&d);
    assert_int_equal(bv_config_validate(NULL, "logger", optional_only, NULL, &o, &d), BV_OK);
    assert_string_equal(bv_opts_str(&o, "tag"), "x");
    assert_false(bv_opts_find(&o, "tag")->from_user);
    bv_opts_free(&o);
    bv_diag_free(&d);
    bv_node_free(root);
}

static void validate_skips_ignored_keys(void **state)
{
    bv_node *root = load_ok("model:\n  plugin: [odd]\n  kind: mlp\n  layers: 1\n");
    static const char *const ignore[] = { "plugin", "kind", NULL };
    bv_diag d;
    bv_diag_init(&d);
    bv_opts o;
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        ignore, &o, &d),
                     BV_OK);
    assert_int_equal(d.count, 0);
    bv_opts_free(&o);
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "t.yaml", 2, 3, "unknown key 'plugin' in section 'model'");
    expect_diag(&d, 1, "t.yaml", 3, 3, "unknown key 'kind' in section 'model'");
    bv_node_free(root);
    bv_diag_free(&d);
}

/* ---- suggestions -------------------------------------------------------------------- */

static void suggest_finds_close_names(void **state)
{
    const char *names[] = { "hidden", "layers", "dropout", "activation", "lr", "l2" };
    size_t n = sizeof names / sizeof names[0];
    assert_string_equal(bv_suggest("hiden", names, n), "hidden");   /* deletion */
    assert_string_equal(bv_suggest("hiddden", names, n), "hidden"); /* insertion */
    assert_string_equal(bv_suggest("HIDDEN", names, n), "hidden");  /* case is ignored */
    assert_string_equal(bv_suggest("dropuot", names, n), "dropout"); /* a swap is one edit */
    assert_string_equal(bv_suggest("actvaton", names, n), "activation"); /* 8/3: two edits */
    assert_string_equal(bv_suggest("lr", names, n), "lr");
    assert_string_equal(bv_suggest("l1", names, n), "lr"); /* tie: the earlier one */
    assert_null(bv_suggest("colour", names, n));
    assert_null(bv_suggest("hdn", names, n)); /* three edits: too far for a short word */
    assert_null(bv_suggest("x", names, 0));
    const char *ab[] = { "ab", "ac" };
    assert_string_equal(bv_suggest("aa", ab, 2), "ab");
    assert_null(bv_suggest("zz", ab, 2));
}

/* ---- YAML output -------------------------------------------------------------------- */

static void to_yaml_round_trips_awkward_values(void **state)
{
    bv_node *root = load_ok(
        "model:\n"
        "  empty:\n"
        "  word: 'null'\n"
        "  tilde: '~'\n"
        "  colon: 'a: b'\n"
        "  dash: '- x'\n"
        "  hash: ' #c'\n"
        "  quotes: \"it's \\\"q\\\"\"\n"
        "  lines: \"one\\ntwo\\n\"\n"
        "  spaces: '  lead and trail  '\n"
        "  bool: 'yes'\n"
        "  num: 1e3\n"
        "  unicode: h\xc3\xa9llo\n"
        "  tab: \"a\\tb\"\n"
        "  '': empty key\n"
        "  'key: odd': 1\n"
        "list:\n"
        "  - [a, [b, '']]\n"
        "  - {}\n"
        "  - []\n"
        "  - {x: '{y}'}\n");
    char *text = bv_node_to_yaml(root);
    assert_non_null(text);
    bv_node *again = NULL;
    bv_diag d;
    bv_diag_init(&d);
    assert_int_equal(bv_config_load_string(text, "saved.yaml", &again, &d), BV_OK);
    assert_int_equal(d.count, 0);
    assert_true(nodes_equal(root, again));
    assert_string_equal(scalar_at(again, "model.word"), "null");
    assert_string_equal(scalar_at(again, "model.tilde"), "~");
    assert_string_equal(scalar_at(again, "model.empty"), "");
    assert_string_equal(scalar_at(again, "model.lines"), "one\ntwo\n");

    /* Writing again gives the same text. */
    char *text2 = bv_node_to_yaml(again);
    assert_string_equal(text, text2);
    free(text);
    free(text2);
    bv_node_free(again);
    bv_diag_free(&d);

    /* Overridden values are written like the rest. */
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "model.extra=x: y", &d), BV_OK);
    assert_int_equal(bv_config_override(root, "model.seq=[1, 2]", &d), BV_OK);
    text = bv_node_to_yaml(root);
    assert_int_equal(bv_config_load_string(text, "saved.yaml", &again, &d), BV_OK);
    assert_true(nodes_equal(root, again));
    assert_string_equal(scalar_at(again, "model.extra"), "x: y");
    assert_int_equal(d.count, 0);
    free(text);
    bv_node_free(again);
    bv_node_free(root);
    bv_diag_free(&d);
}

static void to_yaml_writes_plain_block_style(void **state)
{
    bv_node *root = load_ok("model: {hidden: 16, sizes: [1, 2]}\nnotes:\n");
    char *text = bv_node_to_yaml(root);
    assert_string_equal(text, "model:\n  hidden: 16\n  sizes:\n  - 1\n  - 2\nnotes:\n");
    free(text);
    bv_node_free(root);
}

/* ---- hostile input: sizes, file kinds, tags, quoted numbers (docs/limits.md) --------- */

/* DIR/exp.yaml in a fresh temporary directory DIR: "a: 1\n", then `text` repeated up to
 * exactly `len` bytes. */
static char *temp_file(char *dir_out, size_t dir_len, const char *text, size_t len)
{
    snprintf(dir_out, dir_len, "%s/bv-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(dir_out));
    size_t plen = strlen(dir_out) + 16;
    char *path = malloc(plen);
    assert_non_null(path);
    snprintf(path, plen, "%s/exp.yaml", dir_out);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    size_t tlen = strlen(text);
    fputs("a: 1\n", f);
    for (size_t i = 5; i < len; i++)
        fputc(text[(i - 5) % tlen], f);
    assert_int_equal(fclose(f), 0);
    return path;
}

static void config_over_the_size_limit_is_refused(void **state)
{
    (void)state;
    char dir[512], msg[1024];
    char *path = temp_file(dir, sizeof dir, "# comment line\n", 64);
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    setenv("BIVOUAC_MAX_CONFIG_BYTES", "64", 1); /* exactly at the limit: read */
    assert_int_equal(bv_config_load_file(path, &root, &d), BV_OK);
    assert_int_equal(d.count, 0);
    bv_node_free(root);
    setenv("BIVOUAC_MAX_CONFIG_BYTES", "63", 1);
    assert_int_equal(bv_config_load_file(path, &root, &d), BV_ERR_INVALID);
    assert_null(root);
    assert_int_equal(d.count, 1);
    snprintf(msg, sizeof msg, "%s is larger than 63 bytes, the limit for a config file (set "
             "BIVOUAC_MAX_CONFIG_BYTES to raise it)", path);
    expect_diag(&d, 0, NULL, 0, 0, msg);
    bv_diag_free(&d);
    bv_diag_init(&d);
    setenv("BIVOUAC_MAX_CONFIG_BYTES", "16k", 1);
    assert_int_equal(bv_config_load_file(path, &root, &d), BV_ERR_INVALID);
    expect_diag(&d, 0, NULL, 0, 0,
                "BIVOUAC_MAX_CONFIG_BYTES must be a positive whole number, got '16k'");
    bv_diag_free(&d);
    unsetenv("BIVOUAC_MAX_CONFIG_BYTES");
    remove(path);
    rmdir(dir);
    free(path);
}

static void config_that_is_not_a_regular_file_is_refused(void **state)
{
    (void)state;
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_file("/dev/zero", &root, &d), BV_ERR_INVALID);
    assert_null(root);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, NULL, 0, 0, "/dev/zero is not a regular file (a character device)");
    bv_diag_free(&d);

    /* a FIFO with no writer: refused at once, not waited on */
    char dir[512], fifo[600], msg[1024];
    snprintf(dir, sizeof dir, "%s/bv-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/exp.yaml", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    bv_diag_init(&d);
    assert_int_equal(bv_config_load_file(fifo, &root, &d), BV_ERR_INVALID);
    snprintf(msg, sizeof msg, "%s is not a regular file (a FIFO)", fifo);
    expect_diag(&d, 0, NULL, 0, 0, msg);
    bv_diag_free(&d);
    remove(fifo);
    rmdir(dir);
}

static void node_count_over_the_limit_is_reported_where_it_is_exceeded(void **state)
{
    (void)state;
    setenv("BIVOUAC_MAX_CONFIG_NODES", "5", 1);
    bv_node_free(load_ok("a: [1, 2, 3]\n")); /* the mapping, the list and 3 values */
    expect_load_error("a: [1, 2, 3, 4]\n", BV_ERR_INVALID, 1, 14,
                      "more than 5 YAML values, the limit for a config (set "
                      "BIVOUAC_MAX_CONFIG_NODES to raise it)");
    setenv("BIVOUAC_MAX_CONFIG_NODES", "0", 1);
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_string("a: 1\n", "t.yaml", &root, &d), BV_ERR_INVALID);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, NULL, 0, 0,
                "BIVOUAC_MAX_CONFIG_NODES must be a positive whole number, got '0'");
    bv_diag_free(&d);
    unsetenv("BIVOUAC_MAX_CONFIG_NODES");
}

static void quoted_and_block_scalars_are_strings(void **state)
{
    (void)state;
    bv_node *root = load_ok("a: 16\nb: '16'\nc: \"16\"\nd: !!str 16\ne: !!int '16'\n"
                            "f: |\n  16\ng: ~\nh: '~'\n");
    const char *keys[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    const bool quoted[] = {false, true, true, true, false, true, false, true};
    for (size_t i = 0; i < 8; i++) {
        const bv_node *n = bv_node_get(root, keys[i]);
        assert_non_null(n);
        assert_int_equal(n->quoted, quoted[i]);
    }
    assert_string_equal(scalar_at(root, "g"), "");
    assert_string_equal(scalar_at(root, "h"), "~");
    /* written back, a string stays a string */
    char *text = bv_node_to_yaml(root);
    assert_non_null(text);
    bv_node *again = load_ok(text);
    assert_true(nodes_equal(root, again));
    free(text);
    bv_node_free(again);
    bv_node_free(root);
}

static void tags_outside_the_core_schema_are_refused(void **state)
{
    (void)state;
    bv_node_free(load_ok("a: !!str 1\nb: !!int 2\nc: !!float 1.5\nd: !!bool true\ne: !!null\n"
                         "f: !!map {x: 1}\ng: !!seq [1]\n"));
    expect_load_error("a: !foo 1\n", BV_ERR_INVALID, 1, 4,
                      "unsupported YAML tag '!foo' (only !!str, !!int, !!float, !!bool, "
                      "!!null, !!map and !!seq)");
    expect_load_error("a:\n  b: !!python/object:os.system x\n", BV_ERR_INVALID, 2, 6,
                      "unsupported YAML tag '!!python/object:os.system' (only !!str, !!int, "
                      "!!float, !!bool, !!null, !!map and !!seq)");
    expect_load_error("a: !!map 1\n", BV_ERR_INVALID, 1, 4,
                      "YAML tag '!!map' does not fit a single value");
    expect_load_error("a: !!str [1]\n", BV_ERR_INVALID, 1, 4,
                      "YAML tag '!!str' does not fit a list");
}

static void validate_refuses_quoted_numbers_and_booleans(void **state)
{
    (void)state;
    bv_node *root = load_ok("model:\n  hidden: \"16\"\n  layers: 2\n  dropout: '0.5'\n"
                            "  bias: 'true'\n  name: \"16\"\n");
    bv_diag d;
    bv_diag_init(&d);
    bv_opts o;
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 3);
    expect_diag(&d, 0, "t.yaml", 2, 11, "expected an integer for 'hidden', got the string \"16\"");
    expect_diag(&d, 1, "t.yaml", 4, 12, "expected a number for 'dropout', got the string \"0.5\"");
    expect_diag(&d, 2, "t.yaml", 5, 9,
                "expected true or false for 'bias', got the string \"true\"");
    bv_diag_free(&d);
    /* the same values from the command line are plain: numbers */
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, "model.hidden=16", &d), BV_OK);
    assert_int_equal(bv_config_override(root, "model.dropout=0.5", &d), BV_OK);
    assert_int_equal(bv_config_override(root, "model.bias=true", &d), BV_OK);
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        NULL, &o, &d),
                     BV_OK);
    assert_int_equal(bv_opts_int(&o, "hidden"), 16);
    assert_string_equal(bv_opts_str(&o, "name"), "16"); /* a quoted string is a string */
    bv_opts_free(&o);
    bv_diag_free(&d);
    bv_node_free(root);
}

static void validate_refuses_lists_where_a_value_goes(void **state)
{
    (void)state;
    bv_node *root = load_ok("model:\n  layers: 2\n  name: [a]\n  activation: {x: 1}\n"
                            "  data: [d.csv]\n");
    bv_diag d;
    bv_diag_init(&d);
    bv_opts o;
    assert_int_equal(bv_config_validate(bv_node_get(root, "model"), "model", model_schema,
                                        NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 3);
    expect_diag(&d, 0, "t.yaml", 3, 9, "expected a string for 'name', got a list");
    expect_diag(&d, 1, "t.yaml", 4, 15, "expected one of relu|elu for 'activation', got a "
                                        "mapping");
    expect_diag(&d, 2, "t.yaml", 5, 9, "expected a string for 'data', got a list");
    bv_diag_free(&d);
    bv_node_free(root);
}

static void validate_checks_what_a_path_names(void **state)
{
    (void)state;
    static const bv_option schema[] = {
        BV_OPT_FILE("file", "", "a file"),
        BV_OPT_DIRECTORY("dir", "", "a directory"),
        BV_OPT_END,
    };
    bv_node *root = load_ok("s: {file: /dev/null, dir: /dev/null}\n"
                            "t: {file: /, dir: /}\n"
                            "u: {file: /no/such/file, dir: /no/such/dir}\n");
    bv_diag d;
    bv_diag_init(&d);
    bv_opts o;
    assert_int_equal(bv_config_validate(bv_node_get(root, "s"), "s", schema, NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 2);
    expect_diag(&d, 0, "t.yaml", 1, 11, "/dev/null is not a regular file (a character device)");
    expect_diag(&d, 1, "t.yaml", 1, 27, "/dev/null is not a directory (a character device)");
    bv_diag_free(&d);
    bv_diag_init(&d);
    assert_int_equal(bv_config_validate(bv_node_get(root, "t"), "t", schema, NULL, &o, &d),
                     BV_ERR_INVALID);
    assert_int_equal(d.count, 1);
    expect_diag(&d, 0, "t.yaml", 2, 11, "/ is not a regular file (a directory)");
    bv_diag_free(&d);
    /* what does not exist yet is for the user of the option to report, or create */
    bv_diag_init(&d);
    assert_int_equal(bv_config_validate(bv_node_get(root, "u"), "u", schema, NULL, &o, &d),
                     BV_OK);
    assert_string_equal(bv_opts_str(&o, "dir"), "/no/such/dir");
    bv_opts_free(&o);
    bv_diag_free(&d);
    bv_node_free(root);
}

/* Every allocation of the loader, the overrides and the validator that fails ends in
 * BV_ERR_NOMEM with an "out of memory" diagnostic: none is lost (and, under ASan, none
 * leaks). Allocation number n and every later one fail, for each n until none is reached. */
static void every_failed_allocation_is_reported(void **state)
{
    (void)state;
    const char *text = "model:\n  hidden: 64\n  layers: 2\n  data: d.csv\n"
                       "list: [a, {b: c}, [d]]\n";
    bool finished = false;
    for (long n = 0; n < 10000 && !finished; n++) {
        bv_diag d;
        bv_diag_init(&d);
        bv_node *root = NULL;
        bv_opts o = {0};
        unsigned long failures = bv_alloc_failures();
        bv_alloc_fail_after(n);
        bv_status st = bv_config_load_string(text, "t.yaml", &root, &d);
        if (st == BV_OK)
            st = bv_config_override(root, "model.extra.deep=[1, 2]", &d);
        if (st == BV_OK)
            st = bv_config_override(root, "model.hidden=32", &d);
        if (st == BV_OK) {
            static const char *const ignore[] = {"extra", NULL};
            st = bv_config_validate(bv_node_get(root, "model"), "model", model_schema, ignore,
                                    &o, &d);
        }
        bv_alloc_fail_after(-1);
        if (bv_alloc_failures() == failures) {
            assert_int_equal(st, BV_OK); /* nothing failed: n is past the last allocation */
            assert_int_equal(d.count, 0);
            assert_int_equal(bv_opts_int(&o, "hidden"), 32);
            finished = true;
        } else {
            if (st != BV_ERR_NOMEM)
                fail_msg("allocation %ld failed, but the status is %d", n, (int)st);
            if (d.count == 0)
                fail_msg("allocation %ld failed without a diagnostic", n);
            assert_non_null(strstr(d.entries[d.count - 1].msg, "out of memory"));
        }
        bv_opts_free(&o);
        bv_node_free(root);
        bv_diag_free(&d);
    }
    assert_true(finished);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(load_file_records_every_position),
        cmocka_unit_test(lookups_return_null_for_missing_or_wrong_kind),
        cmocka_unit_test(null_and_empty_values_are_empty_scalars),
        cmocka_unit_test(malformed_yaml_reports_libyaml_problem),
        cmocka_unit_test(malformed_file_reports_its_name),
        cmocka_unit_test(unreadable_file_is_an_io_error_without_line),
        cmocka_unit_test(top_level_must_be_a_mapping),
        cmocka_unit_test(duplicate_keys_are_reported_at_the_second_key),
        cmocka_unit_test(aliases_and_anchors_are_refused),
        cmocka_unit_test(a_second_document_is_refused),
        cmocka_unit_test(override_replaces_a_value),
        cmocka_unit_test(override_creates_missing_mappings),
        cmocka_unit_test(override_indexes_lists_by_number),
        cmocka_unit_test(override_without_equals_is_refused),
        cmocka_unit_test(override_below_a_scalar_is_refused_and_changes_nothing),
        cmocka_unit_test(override_must_be_utf8),
        cmocka_unit_test(deep_nesting_is_refused),
        cmocka_unit_test(override_reads_flow_values_as_yaml),
        cmocka_unit_test(validate_fills_defaults_and_records_user_positions),
        cmocka_unit_test(validate_resolves_paths_against_the_yaml_file),
        cmocka_unit_test(validate_reports_every_error_in_file_order),
        cmocka_unit_test(validate_reports_bad_values_from_the_command_line),
        cmocka_unit_test(int_options_refuse_what_a_long_long_cannot_hold),
        cmocka_unit_test(int_ranges_compare_exactly),
        cmocka_unit_test(validate_needs_a_mapping),
        cmocka_unit_test(validate_skips_ignored_keys),
        cmocka_unit_test(suggest_finds_close_names),
        cmocka_unit_test(to_yaml_round_trips_awkward_values),
        cmocka_unit_test(to_yaml_writes_plain_block_style),
        cmocka_unit_test(config_over_the_size_limit_is_refused),
        cmocka_unit_test(config_that_is_not_a_regular_file_is_refused),
        cmocka_unit_test(node_count_over_the_limit_is_reported_where_it_is_exceeded),
        cmocka_unit_test(quoted_and_block_scalars_are_strings),
        cmocka_unit_test(tags_outside_the_core_schema_are_refused),
        cmocka_unit_test(validate_refuses_quoted_numbers_and_booleans),
        cmocka_unit_test(validate_refuses_lists_where_a_value_goes),
        cmocka_unit_test(validate_checks_what_a_path_names),
        cmocka_unit_test(every_failed_allocation_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
