/* Checking one config section against a plugin's option schema, with "did you mean"
 * suggestions for misspelt keys (config.h). */
#include "config.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "input_file.h"

/* Optimal-string-alignment distance (Levenshtein plus a swap of two neighbours counting
 * as one edit), ignoring case. -1 when out of memory. */
static int edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    int *rows = malloc(3 * (m + 1) * sizeof *rows);
    if (!rows)
        return -1;
    int *prev2 = rows, *prev = rows + (m + 1), *cur = rows + 2 * (m + 1);
    for (size_t j = 0; j <= m; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        cur[0] = (int)i;
        int ca = tolower((unsigned char)a[i - 1]);
        for (size_t j = 1; j <= m; j++) {
            int cb = tolower((unsigned char)b[j - 1]);
            int best = prev[j - 1] + (ca != cb);
            if (prev[j] + 1 < best)
                best = prev[j] + 1;
            if (cur[j - 1] + 1 < best)
                best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            cur[j] = best;
        }
        int *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    int d = prev[m];
    free(rows);
    return d;
}

const char *bv_suggest(const char *word, const char *const *candidates, size_t n)
{
    size_t wlen = strlen(word);
    int limit = wlen / 3 > 1 ? (int)(wlen / 3) : 1;
    const char *best = NULL;
    int best_d = limit + 1;
    for (size_t i = 0; i < n; i++) {
        if (!candidates[i])
            continue;
        size_t clen = strlen(candidates[i]);
        size_t diff = clen > wlen ? clen - wlen : wlen - clen;
        if (diff > (size_t)limit)
            continue; /* the distance is at least the difference in length */
        int d = edit_distance(word, candidates[i]);
        if (d >= 0 && d < best_d) {
            best_d = d;
            best = candidates[i];
        }
    }
    return best;
}

static bool is_ignored(const char *key, const char *const *ignore_keys)
{
    for (size_t i = 0; ignore_keys && ignore_keys[i]; i++)
        if (strcmp(ignore_keys[i], key) == 0)
            return true;
    return false;
}

static void report_unknown(const char *key, const bv_pos *pos, const char *section_name,
                           const bv_option *schema, bv_diag *diag)
{
    size_t n = bv_schema_count(schema);
    const char **names = malloc((n ? n : 1) * sizeof *names);
    const char *hint = NULL;
    if (names) {
        for (size_t i = 0; i < n; i++)
            names[i] = schema[i].name;
        hint = bv_suggest(key, names, n);
        free(names);
    }
    if (hint)
        bv_diag_add(diag, pos, "unknown key '%s' in section '%s'; did you mean '%s'?", key,
                    section_name, hint);
    else
        bv_diag_add(diag, pos, "unknown key '%s' in section '%s'", key, section_name);
}

/* A PATH value relative to the directory of the file that set it. Values from the
 * command line, absolute paths and empty values are kept as written. */
static char *resolve_path(const char *value, const char *file)
{
    const char *slash = file ? strrchr(file, '/') : NULL;
    if (!value[0] || value[0] == '/' || !file || !strcmp(file, BV_CONFIG_CMDLINE) || !slash)
        return bv_strdup(value);
    size_t dir_len = (size_t)(slash - file) + 1; /* keep the '/' */
    size_t len = strlen(value);
    char *out = bv_malloc(dir_len + len + 1);
    if (!out)
        return NULL;
    memcpy(out, file, dir_len);
    memcpy(out + dir_len, value, len + 1);
    return out;
}

static bool owns_string(const bv_option *d)
{
    return d->type == BV_OPT_STRING || d->type == BV_OPT_ENUM || d->type == BV_OPT_PATH ||
           d->type == BV_OPT_DIR;
}

/* What a value of decl's type is, for "expected ... for 'x'" messages (an ENUM's
 * choices are added by the caller). */
static const char *expected_kind(const bv_option *decl)
{
    switch (decl->type) {
    case BV_OPT_INT: return "an integer";
    case BV_OPT_FLOAT: return "a number";
    case BV_OPT_BOOL: return "true or false";
    case BV_OPT_ENUM: return "one of";
    case BV_OPT_STRING:
    case BV_OPT_PATH:
    case BV_OPT_DIR: break;
    }
    return "a string";
}

/* YAML reads a quoted scalar as a string: `hidden: "16"` is not the number 16. */
static bool refuse_quoted(const bv_node *value, const bv_option *decl, bv_diag *diag)
{
    if (!value->quoted)
        return false;
    if (decl->type != BV_OPT_INT && decl->type != BV_OPT_FLOAT && decl->type != BV_OPT_BOOL)
        return false;
    bv_diag_add(diag, &value->pos, "expected %s for '%s', got the string \"%s\"",
                expected_kind(decl), decl->name, value->scalar);
    return true;
}

/* Parses the user's value for decl into slot (which holds the default so far). */
static bv_status take_value(const bv_node *value, const bv_option *decl, bv_opt_value *slot,
                            bv_diag *diag)
{
    if (refuse_quoted(value, decl, diag))
        return BV_ERR_INVALID;
    bv_opt_value parsed;
    memset(&parsed, 0, sizeof parsed);
    bv_error err;
    bv_error_clear(&err);
    bv_status st = bv_opt_parse(decl, value->scalar, &parsed, &err);
    if (st != BV_OK) {
        if (st == BV_ERR_NOMEM)
            return st;
        bv_diag_add(diag, &value->pos, "%s", err.msg);
        return BV_ERR_INVALID;
    }
    if (decl->type == BV_OPT_PATH || decl->type == BV_OPT_DIR) {
        char *resolved = resolve_path(parsed.v.s, value->pos.file);
        free(parsed.v.s);
        if (!resolved)
            return BV_ERR_NOMEM;
        parsed.v.s = resolved;
        /* a path that exists must be what the option says: reading a FIFO or a device
         * blocks or never ends, and a directory is not a file (nor the other way round);
         * one that does not exist is for whoever uses it to report (or create) */
        st = decl->type == BV_OPT_DIR ? bv_input_check_directory(resolved, &err)
                                      : bv_input_check_regular(resolved, &err);
        if (st != BV_OK) {
            free(resolved);
            bv_diag_add(diag, &value->pos, "%s", err.msg);
            return BV_ERR_INVALID;
        }
    }
    if (owns_string(decl))
        free(slot->v.s);
    slot->decl = decl;
    slot->v = parsed.v;
    slot->from_user = true;
    slot->pos = value->pos;
    return BV_OK;
}

bv_status bv_config_validate(const bv_node *section, const char *section_name,
                             const bv_option *schema, const char *const *ignore_keys,
                             bv_opts *out, bv_diag *diag)
{
    bv_error err;
    bv_error_clear(&err);
    bv_status st = bv_opts_defaults(out, section_name, schema, &err);
    if (st != BV_OK) {
        /* A default the schema cannot parse is the plugin's bug, not the user's. */
        if (st == BV_ERR_NOMEM) {
            bv_diag_add(diag, NULL, "out of memory while checking section '%s'", section_name);
            return st;
        }
        bv_diag_add(diag, NULL, "section '%s': bad default: %s", section_name, err.msg);
        return BV_ERR_INTERNAL;
    }
    size_t errors = 0;
    bool empty = !section || (section->kind == BV_NODE_SCALAR && !section->scalar[0]);
    if (!empty && section->kind != BV_NODE_MAP) {
        bv_diag_add(diag, &section->pos, "section '%s' must be a mapping", section_name);
        bv_opts_free(out);
        return BV_ERR_INVALID;
    }

    size_t n_opts = bv_schema_count(schema);
    bool *seen = bv_calloc(n_opts ? n_opts : 1, sizeof *seen);
    if (!seen) {
        bv_opts_free(out);
        bv_diag_add(diag, NULL, "out of memory while checking section '%s'", section_name);
        return BV_ERR_NOMEM;
    }
    for (size_t i = 0; !empty && i < section->count && st == BV_OK; i++) {
        const char *key = section->keys[i];
        const bv_node *value = section->items[i];
        if (is_ignored(key, ignore_keys))
            continue;
        const bv_option *decl = bv_schema_find(schema, key);
        if (!decl) {
            report_unknown(key, &section->key_pos[i], section_name, schema, diag);
            errors++;
            continue;
        }
        size_t idx = (size_t)(decl - schema);
        seen[idx] = true;
        if (value->kind != BV_NODE_SCALAR) {
            bool choices = decl->type == BV_OPT_ENUM;
            bv_diag_add(diag, &value->pos, "expected %s%s%s for '%s', got %s",
                        expected_kind(decl), choices ? " " : "", choices ? decl->choices : "",
                        key, value->kind == BV_NODE_MAP ? "a mapping" : "a list");
            errors++;
            continue;
        }
        bv_status vst = take_value(value, decl, &out->values[idx], diag);
        if (vst == BV_ERR_NOMEM)
            st = vst;
        else if (vst != BV_OK)
            errors++;
    }
    for (size_t i = 0; i < n_opts && st == BV_OK; i++) {
        if (!schema[i].default_value && !seen[i]) {
            bv_diag_add(diag, section ? &section->pos : NULL,
                        "missing required key '%s' in section '%s'", schema[i].name,
                        section_name);
            errors++;
        }
    }
    free(seen);
    if (st == BV_ERR_NOMEM)
        bv_diag_add(diag, NULL, "out of memory while checking section '%s'", section_name);
    if (st == BV_OK && errors)
        st = BV_ERR_INVALID;
    if (st != BV_OK)
        bv_opts_free(out);
    return st;
}
