/* Experiment configs: libyaml events into a positioned bv_node tree, lookups by dotted
 * path, and `-s key.path=value` overrides (config.h). */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "alloc.h"
#include "input_file.h"

/* Deeper nesting than this is certainly not an experiment; it would only grow the stack. */
#define MAX_DEPTH 128

/* ---- nodes ---------------------------------------------------------------------------- */

/* A node and extra bytes after it, in one allocation. */
static bv_node *node_alloc(bv_node_kind kind, bv_pos pos, size_t extra)
{
    bv_node *n = bv_calloc(1, sizeof *n + extra);
    if (!n)
        return NULL;
    n->kind = kind;
    n->pos = pos;
    return n;
}

static bv_node *node_new(bv_node_kind kind, bv_pos pos)
{
    return node_alloc(kind, pos, 0);
}

/* The text lives right after the node: one allocation per scalar, not two. */
static bv_node *scalar_new(const char *text, size_t len, bv_pos pos)
{
    bv_node *n = node_alloc(BV_NODE_SCALAR, pos, len + 1);
    if (!n)
        return NULL;
    n->scalar = (char *)(n + 1);
    memcpy(n->scalar, text, len);
    n->scalar[len] = '\0';
    return n;
}

void bv_node_free(bv_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->count; i++) {
        if (n->keys)
            free(n->keys[i]);
        bv_node_free(n->items[i]);
    }
    free(n->keys);
    free(n->key_pos);
    free(n->items);
    free(n->owned_file);
    free(n);
}

/* Appends item (and, for a mapping, a copy of key) to n. On failure nothing changes and
 * the caller still owns item. The arrays grow to twice their size when count reaches a
 * power of two (so their capacity, not stored, is the smallest power of two >= count):
 * a list of n items costs O(n) copying, not O(n^2). */
static bool node_append(bv_node *n, const char *key, bv_pos key_pos, bv_node *item)
{
    if (n->count == 0 || (n->count & (n->count - 1)) == 0) {
        size_t cap = n->count ? n->count * 2 : 1;
        bv_node **items = bv_realloc(n->items, cap * sizeof *items);
        if (!items)
            return false;
        n->items = items;
        if (n->kind == BV_NODE_MAP) {
            char **keys = bv_realloc(n->keys, cap * sizeof *keys);
            if (!keys)
                return false;
            n->keys = keys;
            bv_pos *kp = bv_realloc(n->key_pos, cap * sizeof *kp);
            if (!kp)
                return false;
            n->key_pos = kp;
        }
    }
    if (n->kind == BV_NODE_MAP) {
        if (!(n->keys[n->count] = bv_strdup(key)))
            return false;
        n->key_pos[n->count] = key_pos;
    }
    n->items[n->count++] = item;
    return true;
}

static long map_index(const bv_node *map, const char *key)
{
    if (!map || map->kind != BV_NODE_MAP)
        return -1;
    for (size_t i = 0; i < map->count; i++)
        if (strcmp(map->keys[i], key) == 0)
            return (long)i;
    return -1;
}

const bv_node *bv_node_get(const bv_node *map, const char *key)
{
    long i = map_index(map, key);
    return i < 0 ? NULL : map->items[i];
}

/* A path step that is all digits: the item number it names; -1 otherwise. */
static long step_index(const char *step, size_t len)
{
    if (len == 0 || len > 9)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (step[i] < '0' || step[i] > '9')
            return -1;
        v = v * 10 + (step[i] - '0');
    }
    return v;
}

/* The child of n named by the step step[0..len), or NULL. */
static bv_node *child_of(const bv_node *n, const char *step, size_t len)
{
    if (!n)
        return NULL;
    if (n->kind == BV_NODE_MAP) {
        for (size_t i = 0; i < n->count; i++)
            if (strlen(n->keys[i]) == len && memcmp(n->keys[i], step, len) == 0)
                return n->items[i];
    } else if (n->kind == BV_NODE_SEQ) {
        long i = step_index(step, len);
        if (i >= 0 && (size_t)i < n->count)
            return n->items[i];
    }
    return NULL;
}

const bv_node *bv_node_at_path(const bv_node *root, const char *dotted)
{
    const bv_node *n = root;
    const char *p = dotted;
    while (n && p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        n = child_of(n, p, len);
        p = dot ? dot + 1 : NULL;
    }
    return n;
}

/* ---- loading ------------------------------------------------------------------------ */

typedef struct loader {
    yaml_parser_t parser;
    const char *file;  /* what positions point to */
    const char *text;  /* the input, to place reader errors that have only an offset */
    size_t len;
    int col_base;      /* added to columns on the first line (override values) */
    bool one_line;     /* an override value: libyaml's end-of-stream mark on a next line
                          is shown as the end of the value instead */
    bool top_is_experiment; /* the root must be a mapping of sections */
    bv_diag *diag;
    size_t errors;     /* problems reported so far; the tree is dropped if any */
    size_t nodes;      /* nodes made so far, at most max_nodes */
    size_t max_nodes;
} loader;

static yaml_mark_t offset_mark(const loader *L, size_t offset);

static bv_pos mark_pos(const loader *L, yaml_mark_t m)
{
    if (L->one_line && m.line > 0)
        m = offset_mark(L, L->len);
    bv_pos p = { L->file, (int)m.line + 1, (int)m.column + 1 };
    if (m.line == 0)
        p.col += L->col_base;
    return p;
}

static void report(loader *L, bv_pos pos, const char *msg)
{
    bv_diag_add(L->diag, &pos, "%s", msg);
    L->errors++;
}

/* Reader errors (bad UTF-8, say) carry only a byte offset: count lines up to it. */
static yaml_mark_t offset_mark(const loader *L, size_t offset)
{
    yaml_mark_t m = { offset, 0, 0 };
    for (size_t i = 0; i < offset && i < L->len; i++) {
        if (L->text[i] == '\n') {
            m.line++;
            m.column = 0;
        } else if (((unsigned char)L->text[i] & 0xC0) != 0x80) {
            m.column++; /* count characters, not UTF-8 continuation bytes */
        }
    }
    return m;
}

static bv_status next_event(loader *L, yaml_event_t *ev)
{
    if (yaml_parser_parse(&L->parser, ev))
        return BV_OK;
    const yaml_parser_t *P = &L->parser;
    if (P->error == YAML_MEMORY_ERROR) {
        bv_diag_add(L->diag, NULL, "out of memory while reading %s", L->file);
        L->errors++;
        return BV_ERR_NOMEM;
    }
    yaml_mark_t m = P->error == YAML_READER_ERROR ? offset_mark(L, P->problem_offset)
                                                  : P->problem_mark;
    bv_pos pos = mark_pos(L, m);
    const char *problem = P->problem ? P->problem : "unknown error";
    if (P->context)
        bv_diag_add(L->diag, &pos, "invalid YAML: %s (%s)", problem, P->context);
    else
        bv_diag_add(L->diag, &pos, "invalid YAML: %s", problem);
    L->errors++;
    return BV_ERR_INVALID;
}

static bool has_anchor(const yaml_event_t *ev)
{
    if (ev->type == YAML_SCALAR_EVENT)
        return ev->data.scalar.anchor != NULL;
    if (ev->type == YAML_SEQUENCE_START_EVENT)
        return ev->data.sequence_start.anchor != NULL;
    if (ev->type == YAML_MAPPING_START_EVENT)
        return ev->data.mapping_start.anchor != NULL;
    return false;
}

/* YAML's null spelled plainly is an empty value, as `key:` is. */
static bool is_null_word(const char *v)
{
    return !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static bool is_plain_null(const yaml_event_t *ev)
{
    return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           is_null_word((const char *)ev->data.scalar.value);
}

static const char *event_tag(const yaml_event_t *ev)
{
    const yaml_char_t *t = ev->type == YAML_SCALAR_EVENT           ? ev->data.scalar.tag
                           : ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.tag
                           : ev->type == YAML_MAPPING_START_EVENT  ? ev->data.mapping_start.tag
                                                                   : NULL;
    return (const char *)t;
}

/* An explicit tag is accepted only if it is one of YAML's core schema and fits the node
 * (!!map on a mapping, !!seq on a list, the others on a single value); anything else
 * (`!!python/object`, `!foo`) would be silently read as plain data. Reports it and
 * returns false. */
static bool check_tag(loader *L, const yaml_event_t *ev, bv_pos pos)
{
    static const char core[] = "tag:yaml.org,2002:";
    const char *tag = event_tag(ev);
    if (!tag)
        return true;
    bool is_core = strncmp(tag, core, sizeof core - 1) == 0;
    const char *name = is_core ? tag + sizeof core - 1 : tag;
    bool fits;
    if (ev->type == YAML_MAPPING_START_EVENT)
        fits = is_core && !strcmp(name, "map");
    else if (ev->type == YAML_SEQUENCE_START_EVENT)
        fits = is_core && !strcmp(name, "seq");
    else
        fits = is_core && (!strcmp(name, "str") || !strcmp(name, "int") ||
                           !strcmp(name, "float") || !strcmp(name, "bool") ||
                           !strcmp(name, "null"));
    if (fits)
        return true;
    bool known = is_core && (!strcmp(name, "str") || !strcmp(name, "int") ||
                             !strcmp(name, "float") || !strcmp(name, "bool") ||
                             !strcmp(name, "null") || !strcmp(name, "map") ||
                             !strcmp(name, "seq"));
    if (known)
        bv_diag_add(L->diag, &pos, "YAML tag '!!%s' does not fit %s", name,
                    ev->type == YAML_MAPPING_START_EVENT    ? "a mapping"
                    : ev->type == YAML_SEQUENCE_START_EVENT ? "a list"
                                                            : "a single value");
    else
        bv_diag_add(L->diag, &pos, "unsupported YAML tag '%s%s' (only !!str, !!int, !!float, "
                    "!!bool, !!null, !!map and !!seq)", is_core ? "!!" : "", name);
    L->errors++;
    return false;
}

static bv_status parse_node(loader *L, yaml_event_t *ev, int depth, bv_node **out);

static bv_status parse_seq(loader *L, bv_node *seq, int depth)
{
    for (;;) {
        yaml_event_t ev;
        bv_status st = next_event(L, &ev);
        if (st != BV_OK)
            return st;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return BV_OK;
        }
        bv_node *item = NULL;
        if ((st = parse_node(L, &ev, depth + 1, &item)) != BV_OK)
            return st;
        if (!node_append(seq, NULL, seq->pos, item)) {
            bv_node_free(item);
            return BV_ERR_NOMEM;
        }
    }
}

static bv_status parse_map(loader *L, bv_node *map, int depth)
{
    for (;;) {
        yaml_event_t kev;
        bv_status st = next_event(L, &kev);
        if (st != BV_OK)
            return st;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return BV_OK;
        }
        bv_pos key_pos = mark_pos(L, kev.start_mark);
        char *key = NULL;
        if (kev.type == YAML_SCALAR_EVENT && !has_anchor(&kev)) {
            key = bv_strdup((const char *)kev.data.scalar.value);
            yaml_event_delete(&kev);
            if (!key)
                return BV_ERR_NOMEM;
        } else {
            /* A list, mapping or alias as a key: report it (parse_node reports aliases
             * and anchors itself) and read on so later problems are reported too. */
            if (kev.type == YAML_SEQUENCE_START_EVENT || kev.type == YAML_MAPPING_START_EVENT)
                report(L, key_pos, "mapping keys must be single values");
            bv_node *dropped = NULL;
            if ((st = parse_node(L, &kev, depth + 1, &dropped)) != BV_OK)
                return st;
            bv_node_free(dropped);
        }

        yaml_event_t vev;
        bv_node *value = NULL;
        if ((st = next_event(L, &vev)) != BV_OK ||
            (st = parse_node(L, &vev, depth + 1, &value)) != BV_OK) {
            free(key);
            return st;
        }
        if (!key) {
            bv_node_free(value);
            continue;
        }
        if (map_index(map, key) >= 0) {
            bv_diag_add(L->diag, &key_pos, "duplicate key '%s'", key);
            L->errors++;
            free(key);
            bv_node_free(value);
            continue;
        }
        bool ok = node_append(map, key, key_pos, value);
        free(key);
        if (!ok) {
            bv_node_free(value);
            return BV_ERR_NOMEM;
        }
    }
}

/* Builds the node that starts with ev (which this takes over and deletes). */
static bv_status parse_node(loader *L, yaml_event_t *ev, int depth, bv_node **out)
{
    bv_pos pos = mark_pos(L, ev->start_mark);
    *out = NULL;
    if (depth > MAX_DEPTH) {
        yaml_event_delete(ev);
        report(L, pos, "the YAML is nested too deeply");
        return BV_ERR_INVALID;
    }
    /* the tree costs memory in proportion to its nodes: bound them, not only the bytes */
    if (++L->nodes > L->max_nodes) {
        yaml_event_delete(ev);
        bv_diag_add(L->diag, &pos, "more than %zu YAML values, the limit for a config (set "
                    "BIVOUAC_MAX_CONFIG_NODES to raise it)", L->max_nodes);
        L->errors++;
        return BV_ERR_INVALID;
    }
    check_tag(L, ev, pos);
    if (ev->type == YAML_ALIAS_EVENT || has_anchor(ev)) {
        report(L, pos, "YAML aliases are not supported");
        if (ev->type == YAML_ALIAS_EVENT) {
            yaml_event_delete(ev);
            *out = scalar_new("", 0, pos); /* stands in so reading can go on */
            return *out ? BV_OK : BV_ERR_NOMEM;
        }
    }
    bv_status st = BV_OK;
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        /* YAML: a quoted or block scalar is a string, and so is one tagged !!str; a tag
         * that names another core type makes even a quoted one that type */
        const char *tag = event_tag(ev);
        bool quoted = tag ? !strcmp(tag, "tag:yaml.org,2002:str")
                          : ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        if (is_plain_null(ev))
            *out = scalar_new("", 0, pos);
        else
            *out = scalar_new((const char *)ev->data.scalar.value, ev->data.scalar.length, pos);
        yaml_event_delete(ev);
        if (*out)
            (*out)->quoted = quoted;
        return *out ? BV_OK : BV_ERR_NOMEM;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool is_map = ev->type == YAML_MAPPING_START_EVENT;
        yaml_event_delete(ev);
        bv_node *n = node_new(is_map ? BV_NODE_MAP : BV_NODE_SEQ, pos);
        if (!n)
            return BV_ERR_NOMEM;
        st = is_map ? parse_map(L, n, depth) : parse_seq(L, n, depth);
        if (st != BV_OK) {
            bv_node_free(n);
            return st;
        }
        *out = n;
        return BV_OK;
    }
    default:
        yaml_event_delete(ev);
        report(L, pos, "invalid YAML: unexpected event");
        return BV_ERR_INVALID;
    }
}

/* Reads the whole stream: exactly one document (an empty stream is an empty value). */
static bv_status parse_stream(loader *L, bv_node **out)
{
    *out = NULL;
    yaml_event_t ev;
    bv_status st;
    bv_node *root = NULL;
    bool seen_doc = false;
    for (;;) {
        if ((st = next_event(L, &ev)) != BV_OK)
            break;
        yaml_event_type_t type = ev.type;
        if (type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (type == YAML_DOCUMENT_START_EVENT && seen_doc)
            report(L, mark_pos(L, ev.start_mark), "only one YAML document is allowed");
        if (type == YAML_DOCUMENT_START_EVENT) {
            seen_doc = true;
            yaml_event_delete(&ev);
            bv_node *doc = NULL;
            if ((st = next_event(L, &ev)) != BV_OK ||
                (st = parse_node(L, &ev, 0, &doc)) != BV_OK)
                break;
            if (root)
                bv_node_free(doc);
            else
                root = doc;
            continue;
        }
        yaml_event_delete(&ev); /* STREAM_START, DOCUMENT_END */
    }
    if (st != BV_OK) {
        bv_node_free(root);
        return st;
    }
    if (!root) {
        bv_pos p = { L->file, 1, 1 + L->col_base };
        root = scalar_new("", 0, p);
        if (!root)
            return BV_ERR_NOMEM;
    }
    if (L->top_is_experiment && root->kind != BV_NODE_MAP)
        report(L, root->pos, "the experiment must be a mapping of sections");
    *out = root;
    return BV_OK;
}

/* Parses text as YAML; positions say `file`, columns on the first line shifted by
 * col_base. `limited`: user input, held to BIVOUAC_MAX_CONFIG_NODES. */
static bv_status load_text(const char *text, size_t len, const char *file, int col_base,
                           bool experiment, bool limited, bv_node **out, bv_diag *diag)
{
    loader L;
    memset(&L, 0, sizeof L);
    *out = NULL;
    bv_error err = {0};
    uint64_t max_nodes = UINT64_MAX;
    if (limited &&
        bv_input_limit("BIVOUAC_MAX_CONFIG_NODES", BV_CONFIG_MAX_NODES, &max_nodes, &err) !=
            BV_OK) {
        bv_diag_add(diag, NULL, "%s", err.msg);
        return BV_ERR_INVALID;
    }
    if (!yaml_parser_initialize(&L.parser)) {
        bv_diag_add(diag, NULL, "out of memory while reading %s", file);
        return BV_ERR_NOMEM;
    }
    L.max_nodes = max_nodes > SIZE_MAX ? SIZE_MAX : (size_t)max_nodes;
    yaml_parser_set_input_string(&L.parser, (const unsigned char *)text, len);
    L.file = file;
    L.text = text;
    L.len = len;
    L.col_base = col_base;
    L.one_line = col_base > 0 && !memchr(text, '\n', len);
    L.top_is_experiment = experiment;
    L.diag = diag;
    bv_node *root = NULL;
    size_t before = diag->count;
    bv_status st = parse_stream(&L, &root);
    yaml_parser_delete(&L.parser);
    if (st == BV_OK && L.errors)
        st = BV_ERR_INVALID;
    if (st != BV_OK && diag->count == before) /* an allocation of ours failed */
        bv_diag_add(diag, NULL, "out of memory while reading %s", file);
    if (st != BV_OK) {
        bv_node_free(root);
        return st;
    }
    *out = root;
    return BV_OK;
}

static bv_status load_owned(const char *text, size_t len, const char *filename, bool limited,
                            bv_node **out, bv_diag *diag)
{
    char *file = bv_strdup(filename ? filename : "<string>");
    if (!file) {
        bv_diag_add(diag, NULL, "out of memory while reading %s",
                    filename ? filename : "<string>");
        return BV_ERR_NOMEM;
    }
    bv_status st = load_text(text, len, file, 0, true, limited, out, diag);
    if (st != BV_OK) {
        free(file);
        return st;
    }
    (*out)->owned_file = file;
    return BV_OK;
}

bv_status bv_config_load_string(const char *text, const char *filename, bv_node **out,
                                bv_diag *diag)
{
    return load_owned(text, strlen(text), filename, true, out, diag);
}

bv_status bv_config_load_builtin(const char *text, const char *filename, bv_node **out,
                                 bv_diag *diag)
{
    return load_owned(text, strlen(text), filename, false, out, diag);
}

bv_status bv_config_load_file(const char *path, bv_node **out, bv_diag *diag)
{
    *out = NULL;
    bv_pos where = { path, 0, 0 };
    bv_error err = {0};
    uint64_t max_bytes;
    bv_status st = bv_input_limit("BIVOUAC_MAX_CONFIG_BYTES", BV_CONFIG_MAX_BYTES, &max_bytes,
                                  &err);
    char *text = NULL;
    size_t len = 0;
    if (st == BV_OK)
        st = bv_input_read(path, max_bytes, "a config file", "BIVOUAC_MAX_CONFIG_BYTES", &text,
                           &len, &err);
    if (st == BV_ERR_IO) {
        bv_diag_add(diag, &where, "cannot read: %s", strerror(errno));
        return st;
    }
    if (st != BV_OK) {
        bv_diag_add(diag, NULL, "%s", err.msg);
        return st;
    }
    st = load_owned(text, len, path, true, out, diag);
    free(text);
    return st;
}

/* ---- overrides ---------------------------------------------------------------------- */

/* Command-line text is not checked by libyaml; the tree must stay valid UTF-8 so that
 * bv_node_to_yaml can write it. Overlong forms and surrogates are refused too. */
static bool valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p, v;
        size_t n;
        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1, v = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, v = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, v = c & 0x07;
        } else {
            return false;
        }
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return false; /* also stops at the terminating NUL */
            v = (v << 6) | (p[i] & 0x3F);
        }
        static const unsigned least[] = { 0, 0x80, 0x800, 0x10000 };
        if (v < least[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return false;
        p += n + 1;
    }
    return true;
}

static bv_pos cmdline_pos(size_t offset)
{
    bv_pos p = { BV_CONFIG_CMDLINE, 1, (int)offset + 1 };
    return p;
}

/* The value of an override: YAML flow for "[..]" and "{..}", else the text as it is
 * (read like a plain YAML scalar: ~ and null are the empty value). */
static bv_status override_value(const char *text, size_t offset, bv_node **out,
                                bv_diag *diag)
{
    size_t len = strlen(text);
    bool flow = len >= 2 && ((text[0] == '[' && text[len - 1] == ']') ||
                             (text[0] == '{' && text[len - 1] == '}'));
    if (flow)
        return load_text(text, len, BV_CONFIG_CMDLINE, (int)offset, false, true, out, diag);
    if (is_null_word(text))
        len = 0;
    *out = scalar_new(text, len, cmdline_pos(offset));
    return *out ? BV_OK : BV_ERR_NOMEM;
}

/* Levels of nesting below n (0 for a scalar); n itself is at most MAX_DEPTH deep. */
static int node_depth(const bv_node *n)
{
    int d = 0;
    for (size_t i = 0; n->kind != BV_NODE_SCALAR && i < n->count; i++) {
        int below = 1 + node_depth(n->items[i]);
        if (below > d)
            d = below;
    }
    return d;
}

static bv_status override_apply(bv_node *root, const char *assignment, bv_diag *diag)
{
    const char *eq = strchr(assignment, '=');
    bool bad = !eq || eq == assignment || eq[-1] == '.' || assignment[0] == '.';
    for (const char *p = assignment; !bad && p + 1 < eq; p++)
        bad = p[0] == '.' && p[1] == '.';
    if (bad) {
        bv_pos p = cmdline_pos(0);
        bv_diag_add(diag, &p, "override '%s' must look like key.path=value", assignment);
        return BV_ERR_INVALID;
    }
    size_t path_len = (size_t)(eq - assignment);
    if (!valid_utf8(assignment)) {
        bv_pos p = cmdline_pos(0);
        bv_diag_add(diag, &p, "override '%.*s' is not valid UTF-8", (int)path_len, assignment);
        return BV_ERR_INVALID;
    }
    if (!root || root->kind != BV_NODE_MAP) {
        bv_pos p = cmdline_pos(0);
        bv_diag_add(diag, &p, "cannot set '%.*s': the experiment is not a mapping",
                    (int)path_len, assignment);
        return BV_ERR_INVALID;
    }

    bv_node *value = NULL;
    bv_status st = override_value(eq + 1, path_len + 1, &value, diag);
    if (st != BV_OK)
        return st;
    /* The value lands one level down per step: keep the tree within what the loader
     * reads, so the resolved experiment a run saves (bv_node_to_yaml) loads back
     * (found by tests/fuzz/fuzz_config). */
    int steps = 1;
    for (const char *p = assignment; p < eq; p++)
        steps += *p == '.';
    if (steps + node_depth(value) > MAX_DEPTH) {
        bv_pos p = cmdline_pos(0);
        bv_diag_add(diag, &p, "override '%.*s' nests the experiment deeper than %d levels",
                    (int)path_len, assignment, MAX_DEPTH);
        bv_node_free(value);
        return BV_ERR_INVALID;
    }

    /* Walk down. The topmost mapping this creates (created_top, with its parent and key)
     * is attached only once the walk has succeeded, so an error leaves the tree as it
     * was; deeper new mappings and the value hang below it meanwhile. */
    bv_node *n = root;
    const char *step = assignment;
    bv_node *created_top = NULL, *created_parent = NULL;
    const char *created_key = NULL;
    size_t created_key_len = 0;
    bool value_in_created = false; /* value hangs below (or is) created_top */
    for (;;) {
        const char *dot = memchr(step, '.', (size_t)(eq - step));
        size_t len = dot ? (size_t)(dot - step) : (size_t)(eq - step);
        bv_pos step_pos = cmdline_pos((size_t)(step - assignment));
        bool last = dot == NULL;
        bv_pos at = cmdline_pos(0);

        if (n->kind == BV_NODE_SEQ) {
            long i = step_index(step, len);
            if (i < 0 || (size_t)i >= n->count) {
                if (i < 0)
                    bv_diag_add(diag, &at, "cannot set '%.*s': '%.*s' is a list; "
                                "expected an item number, got '%.*s'", (int)path_len,
                                assignment, (int)(step - assignment - 1), assignment,
                                (int)len, step);
                else
                    bv_diag_add(diag, &at, "cannot set '%.*s': '%.*s' has no item %ld "
                                "(it has %zu)", (int)path_len, assignment,
                                (int)(step - assignment - 1), assignment, i, n->count);
                st = BV_ERR_INVALID;
                break;
            }
            if (last) {
                bv_node_free(n->items[i]);
                n->items[i] = value;
                return BV_OK;
            }
            n = n->items[i];
        } else if (n->kind == BV_NODE_MAP) {
            long i = -1;
            for (size_t k = 0; k < n->count; k++)
                if (strlen(n->keys[k]) == len && memcmp(n->keys[k], step, len) == 0)
                    i = (long)k;
            if (last && i >= 0) {
                bv_node_free(n->items[i]);
                n->items[i] = value;
                break;
            }
            bv_node *child = i >= 0 ? n->items[i] : NULL;
            if (!child) {
                child = last ? value : node_new(BV_NODE_MAP, step_pos);
                if (!child) {
                    st = BV_ERR_NOMEM;
                    break;
                }
                if (!created_top) {
                    created_top = child;
                    created_parent = n;
                    created_key = step;
                    created_key_len = len;
                } else {
                    char *key = bv_strndup(step, len);
                    bool ok = key && node_append(n, key, step_pos, child);
                    free(key);
                    if (!ok) {
                        if (child != value)
                            bv_node_free(child);
                        st = BV_ERR_NOMEM;
                        break;
                    }
                }
                if (child == value)
                    value_in_created = true;
            }
            if (last)
                break;
            n = child;
        } else {
            bv_diag_add(diag, &at, "cannot set '%.*s': '%.*s' is not a mapping",
                        (int)path_len, assignment, (int)(step - assignment - 1), assignment);
            st = BV_ERR_INVALID;
            break;
        }
        step = dot + 1;
    }

    if (st == BV_OK && created_top) {
        char *key = bv_strndup(created_key, created_key_len);
        bv_pos kp = cmdline_pos((size_t)(created_key - assignment));
        if (!key || !node_append(created_parent, key, kp, created_top))
            st = BV_ERR_NOMEM;
        free(key);
    }
    if (st != BV_OK) {
        bv_node_free(created_top);
        if (!value_in_created)
            bv_node_free(value);
    }
    return st;
}

bv_status bv_config_set_string(bv_node *root, const char *key, const char *value,
                               bv_diag *diag)
{
    /* "key=x" makes the path like an override (and checks it); the placeholder scalar is
     * then swapped for value's own, exact and quoted, in its parent's slot. */
    size_t klen = strlen(key);
    char *assign = bv_malloc(klen + 3);
    if (!assign)
        return BV_ERR_NOMEM;
    snprintf(assign, klen + 3, "%s=x", key);
    bv_status st = bv_config_override(root, assign, diag);
    free(assign);
    if (st != BV_OK)
        return st;
    const char *dot = strrchr(key, '.');
    bv_node *parent = root;
    if (dot) {
        char *prefix = bv_strdup(key);
        if (!prefix)
            return BV_ERR_NOMEM;
        prefix[dot - key] = '\0';
        parent = (bv_node *)bv_node_at_path(root, prefix);
        free(prefix);
    }
    const char *last = dot ? dot + 1 : key;
    for (size_t i = 0; parent && i < parent->count; i++) {
        bool hit = parent->kind == BV_NODE_MAP ? strcmp(parent->keys[i], last) == 0
                                               : step_index(last, strlen(last)) == (long)i;
        if (!hit)
            continue;
        bv_node *n = scalar_new(value, strlen(value), parent->items[i]->pos);
        if (!n)
            return BV_ERR_NOMEM;
        n->quoted = true;
        bv_node_free(parent->items[i]);
        parent->items[i] = n;
        return BV_OK;
    }
    return BV_ERR_INTERNAL; /* the override just made the path */
}

bv_status bv_config_override(bv_node *root, const char *assignment, bv_diag *diag)
{
    size_t before = diag->count;
    bv_status st = override_apply(root, assignment, diag);
    if (st != BV_OK && diag->count == before) {
        bv_pos p = cmdline_pos(0);
        bv_diag_add(diag, &p, "out of memory applying '%s'", assignment);
    }
    return st;
}
