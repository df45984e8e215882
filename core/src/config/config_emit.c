/* Writing a config tree back as YAML (the resolved experiment a run saves for --resume);
 * libyaml's emitter does the quoting (config.h). */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef struct text_buf {
    char *data;
    size_t len, cap;
    bool failed;
} text_buf;

static int write_text(void *ctx, unsigned char *bytes, size_t size)
{
    text_buf *b = ctx;
    if (b->len + size + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + size + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = true;
            return 0;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, size);
    b->len += size;
    b->data[b->len] = '\0';
    return 1;
}

/* Text the loader would read as something else if written plainly: the loader turns a
 * plain ~ or null into "", so those must be quoted. libyaml quotes the rest as needed. */
static bool needs_quotes(const char *s)
{
    return !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

/* quoted: the value was a string in the file (`hidden: "16"`); it stays one. */
static bool emit_scalar(yaml_emitter_t *e, const char *text, bool is_value, bool quoted)
{
    yaml_event_t ev;
    yaml_scalar_style_t style = is_value && (quoted || needs_quotes(text))
                                    ? YAML_SINGLE_QUOTED_SCALAR_STYLE
                                    : YAML_ANY_SCALAR_STYLE;
    return yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text,
                                        (int)strlen(text), 1, 1, style) &&
           yaml_emitter_emit(e, &ev);
}

static bool emit_node(yaml_emitter_t *e, const bv_node *n)
{
    yaml_event_t ev;
    switch (n->kind) {
    case BV_NODE_SCALAR:
        return emit_scalar(e, n->scalar ? n->scalar : "", true, n->quoted);
    case BV_NODE_SEQ:
        if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                  n->count ? YAML_BLOCK_SEQUENCE_STYLE
                                                           : YAML_FLOW_SEQUENCE_STYLE) ||
            !yaml_emitter_emit(e, &ev))
            return false;
        for (size_t i = 0; i < n->count; i++)
            if (!emit_node(e, n->items[i]))
                return false;
        return yaml_sequence_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev);
    case BV_NODE_MAP:
        if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                 n->count ? YAML_BLOCK_MAPPING_STYLE
                                                          : YAML_FLOW_MAPPING_STYLE) ||
            !yaml_emitter_emit(e, &ev))
            return false;
        for (size_t i = 0; i < n->count; i++)
            if (!emit_scalar(e, n->keys[i], false, false) || !emit_node(e, n->items[i]))
                return false;
        return yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev);
    }
    return false;
}

char *bv_node_to_yaml(const bv_node *root)
{
    if (!root)
        return NULL;
    yaml_emitter_t e;
    if (!yaml_emitter_initialize(&e))
        return NULL;
    text_buf buf = { NULL, 0, 0, false };
    yaml_emitter_set_output(&e, write_text, &buf);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, -1); /* never fold long values */
    yaml_event_t ev;
    bool ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) &&
              yaml_emitter_emit(&e, &ev) &&
              yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) &&
              yaml_emitter_emit(&e, &ev) && emit_node(&e, root) &&
              yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(&e, &ev) &&
              yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&e, &ev) &&
              yaml_emitter_flush(&e);
    yaml_emitter_delete(&e);
    if (!ok || buf.failed) {
        free(buf.data);
        return NULL;
    }
    return buf.data;
}
