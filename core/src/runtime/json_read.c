/* A recursive-descent JSON reader (json_read.h). Depth is capped, so a hostile file
 * cannot exhaust the stack. */
#include "json_read.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32

typedef struct reader {
    const char *p, *end;
} reader;

static void skip_ws(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static bool literal(reader *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return false;
    r->p += n;
    return true;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A string literal into a fresh buffer; \uXXXX becomes UTF-8 (surrogates as U+FFFD). */
static char *parse_string(reader *r)
{
    if (r->p >= r->end || *r->p != '"')
        return NULL;
    r->p++;
    char *out = malloc((size_t)(r->end - r->p) * 2 + 1), *o = out;
    if (!out)
        return NULL;
    while (r->p < r->end && *r->p != '"') {
        char c = *r->p++;
        if ((unsigned char)c < 0x20)
            goto bad;
        if (c != '\\') {
            *o++ = c;
            continue;
        }
        if (r->p >= r->end)
            goto bad;
        c = *r->p++;
        switch (c) {
        case '"': case '\\': case '/': *o++ = c; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp = 0;
            for (int i = 0; i < 4; i++) {
                int h = r->p < r->end ? hex_value(*r->p++) : -1;
                if (h < 0)
                    goto bad;
                cp = cp * 16 + (unsigned)h;
            }
            if (cp >= 0xd800 && cp <= 0xdfff)
                cp = 0xfffd;
            if (cp < 0x80) {
                *o++ = (char)cp;
            } else if (cp < 0x800) {
                *o++ = (char)(0xc0 | cp >> 6);
                *o++ = (char)(0x80 | (cp & 0x3f));
            } else {
                *o++ = (char)(0xe0 | cp >> 12);
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
                *o++ = (char)(0x80 | (cp & 0x3f));
            }
            break;
        }
        default:
            goto bad;
        }
    }
    if (r->p >= r->end)
        goto bad;
    r->p++;
    *o = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

static bool parse_value(reader *r, bv_json *v, int depth);

/* Appends one member (taking key, an object's, or NULL) and parses its value. */
static bool push_item(bv_json *v, char *key, reader *r, int depth)
{
    bv_json *items = realloc(v->items, (v->count + 1) * sizeof *items);
    if (!items) {
        free(key);
        return false;
    }
    v->items = items;
    if (v->type == BV_JSON_OBJECT) {
        char **keys = realloc(v->keys, (v->count + 1) * sizeof *keys);
        if (!keys) {
            free(key);
            return false;
        }
        v->keys = keys;
        v->keys[v->count] = key;
    }
    memset(&v->items[v->count], 0, sizeof v->items[0]);
    v->count++; /* counted before parsing, so a failure frees what was parsed */
    return parse_value(r, &v->items[v->count - 1], depth + 1);
}

static bool parse_value(reader *r, bv_json *v, int depth)
{
    memset(v, 0, sizeof *v);
    skip_ws(r);
    if (r->p >= r->end || depth > MAX_DEPTH)
        return false;
    char c = *r->p;
    if (c == '{' || c == '[') {
        v->type = c == '{' ? BV_JSON_OBJECT : BV_JSON_ARRAY;
        char close = c == '{' ? '}' : ']';
        r->p++;
        skip_ws(r);
        if (r->p < r->end && *r->p == close) {
            r->p++;
            return true;
        }
        for (;;) {
            char *key = NULL;
            if (v->type == BV_JSON_OBJECT) {
                skip_ws(r);
                if (!(key = parse_string(r)))
                    return false;
                skip_ws(r);
                if (r->p >= r->end || *r->p != ':') {
                    free(key);
                    return false;
                }
                r->p++;
            }
            if (!push_item(v, key, r, depth))
                return false;
            skip_ws(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                continue;
            }
            if (r->p < r->end && *r->p == close) {
                r->p++;
                return true;
            }
            return false;
        }
    }
    if (c == '"') {
        v->type = BV_JSON_STRING;
        return (v->string = parse_string(r)) != NULL;
    }
    if (literal(r, "null")) {
        v->type = BV_JSON_NULL;
        return true;
    }
    if (literal(r, "true") || literal(r, "false")) {
        v->type = BV_JSON_BOOL;
        v->number = r->p[-1] == 'e' && r->p[-2] == 'u';
        return true;
    }
    char buf[64];
    size_t n = 0;
    while (r->p < r->end && n < sizeof buf - 1 && strchr("+-0123456789.eE", *r->p))
        buf[n++] = *r->p++;
    buf[n] = '\0';
    char *end;
    v->type = BV_JSON_NUMBER;
    v->number = strtod(buf, &end);
    return n > 0 && *end == '\0';
}

bool bv_json_parse(const char *text, size_t len, bv_json *out)
{
    reader r = {text, text + len};
    bool ok = parse_value(&r, out, 0);
    skip_ws(&r);
    if (!ok || r.p != r.end) {
        bv_json_free(out);
        return false;
    }
    return true;
}

void bv_json_free(bv_json *v)
{
    for (size_t i = 0; i < v->count; i++) {
        if (v->keys)
            free(v->keys[i]);
        bv_json_free(&v->items[i]);
    }
    free(v->keys);
    free(v->items);
    free(v->string);
    memset(v, 0, sizeof *v);
}

const bv_json *bv_json_get(const bv_json *obj, const char *key)
{
    if (!obj || obj->type != BV_JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}

double bv_json_num(const bv_json *obj, const char *key)
{
    const bv_json *v = bv_json_get(obj, key);
    return v && v->type == BV_JSON_NUMBER ? v->number : NAN;
}

const char *bv_json_str(const bv_json *obj, const char *key)
{
    const bv_json *v = bv_json_get(obj, key);
    return v && v->type == BV_JSON_STRING ? v->string : NULL;
}
