/* Typed option values: parsing scalar text against a declared option, and the getters
 * plugins use on a validated section (options.h). */
#include "bivouac/options.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"

size_t bv_schema_count(const bv_option *schema)
{
    size_t n = 0;
    while (schema && schema[n].name)
        n++;
    return n;
}

const bv_option *bv_schema_find(const bv_option *schema, const char *name)
{
    for (size_t i = 0; schema && schema[i].name; i++)
        if (strcmp(schema[i].name, name) == 0)
            return &schema[i];
    return NULL;
}

static bool choice_listed(const char *choices, const char *text)
{
    size_t len = strlen(text);
    const char *p = choices;
    while (p && *p) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncmp(p, text, n) == 0)
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

static void format_bound(char *buf, size_t len, double v)
{
    snprintf(buf, len, "%.10g", v);
}

static bv_status range_error(const bv_option *d, const char *lo, const char *hi,
                             const char *text, bv_error *err)
{
    return bv_error_set(err, BV_ERR_INVALID, "'%s' must be in [%s, %s], got %s", d->name, lo,
                        hi, text);
}

static bv_status check_range(const bv_option *d, double v, const char *text, bv_error *err)
{
    if (!d->has_range || (v >= d->min && v <= d->max))
        return BV_OK;
    char lo[32], hi[32];
    format_bound(lo, sizeof lo, d->min);
    format_bound(hi, sizeof hi, d->max);
    return range_error(d, lo, hi, text, err);
}

/* A whole-number bound as a long long, clamped (none for NaN: no bound). */
static long long int_bound(double b, long long none)
{
    if (isnan(b))
        return none;
    if (b <= -9223372036854775808.0)
        return LLONG_MIN;
    if (b >= 9223372036854775808.0)
        return LLONG_MAX;
    return (long long)b;
}

/* An integer against the declared bounds, compared as integers: as a double,
 * 9007199254740993 rounds to 2^53 and would pass a maximum of 2^53. The bounds are
 * rounded inwards and clamped to long long, so no cast is out of range. */
static bv_status check_int_range(const bv_option *d, long long v, const char *text,
                                 bv_error *err)
{
    if (!d->has_range)
        return BV_OK;
    long long lo = int_bound(ceil(d->min), LLONG_MIN), hi = int_bound(floor(d->max), LLONG_MAX);
    if (v >= lo && v <= hi)
        return BV_OK;
    char los[32], his[32]; /* integers print as integers, not 9.007199255e+15 */
    snprintf(los, sizeof los, "%lld", lo);
    snprintf(his, sizeof his, "%lld", hi);
    return range_error(d, los, his, text, err);
}

bv_status bv_opt_parse(const bv_option *d, const char *text, bv_opt_value *out,
                       bv_error *err)
{
    memset(&out->v, 0, sizeof out->v);
    out->decl = d;
    char *end = NULL;
    switch (d->type) {
    case BV_OPT_INT: {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (!*text || *end || errno)
            return bv_error_set(err, BV_ERR_INVALID, "expected an integer for '%s', got '%s'",
                                d->name, text);
        out->v.i = v;
        return check_int_range(d, v, text, err);
    }
    case BV_OPT_FLOAT: {
        errno = 0;
        double v = strtod(text, &end);
        if (!*text || *end || errno || !isfinite(v))
            return bv_error_set(err, BV_ERR_INVALID, "expected a number for '%s', got '%s'",
                                d->name, text);
        out->v.f = v;
        return check_range(d, v, text, err);
    }
    case BV_OPT_BOOL:
        if (!strcasecmp(text, "true") || !strcasecmp(text, "yes") || !strcasecmp(text, "on"))
            out->v.b = true;
        else if (!strcasecmp(text, "false") || !strcasecmp(text, "no") ||
                 !strcasecmp(text, "off"))
            out->v.b = false;
        else
            return bv_error_set(err, BV_ERR_INVALID,
                                "expected true or false for '%s', got '%s'", d->name, text);
        return BV_OK;
    case BV_OPT_ENUM:
        if (!choice_listed(d->choices, text))
            return bv_error_set(err, BV_ERR_INVALID, "'%s' must be one of %s, got '%s'",
                                d->name, d->choices, text);
        /* fallthrough */
    case BV_OPT_STRING:
    case BV_OPT_PATH:
    case BV_OPT_DIR:
        out->v.s = bv_strdup(text);
        return out->v.s ? BV_OK : bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    return bv_error_set(err, BV_ERR_INTERNAL, "option '%s' has an unknown type %d", d->name,
                        (int)d->type);
}

static bool owns_string(const bv_option *d)
{
    return d->type == BV_OPT_STRING || d->type == BV_OPT_ENUM || d->type == BV_OPT_PATH ||
           d->type == BV_OPT_DIR;
}

bv_status bv_opts_defaults(bv_opts *o, const char *section, const bv_option *schema,
                           bv_error *err)
{
    size_t n = bv_schema_count(schema);
    o->section = section;
    o->count = n;
    o->values = bv_calloc(n ? n : 1, sizeof *o->values);
    if (!o->values)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        o->values[i].decl = &schema[i];
        if (!schema[i].default_value)
            continue; /* required: the config must set it */
        bv_status st = bv_opt_parse(&schema[i], schema[i].default_value, &o->values[i], err);
        if (st != BV_OK) {
            bv_opts_free(o);
            return st;
        }
    }
    return BV_OK;
}

void bv_opts_free(bv_opts *o)
{
    if (!o || !o->values)
        return;
    for (size_t i = 0; i < o->count; i++)
        if (o->values[i].decl && owns_string(o->values[i].decl))
            free(o->values[i].v.s);
    free(o->values);
    o->values = NULL;
    o->count = 0;
}

bv_status bv_opts_copy(const bv_opts *src, bv_opts *dst, bv_error *err)
{
    *dst = (bv_opts){.section = src->section, .count = src->count};
    dst->values = bv_calloc(src->count ? src->count : 1, sizeof *dst->values);
    if (!dst->values)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < src->count; i++) {
        dst->values[i] = src->values[i];
        if (src->values[i].decl && owns_string(src->values[i].decl) && src->values[i].v.s &&
            !(dst->values[i].v.s = strdup(src->values[i].v.s))) {
            dst->values[i].decl = NULL; /* not owned: nothing for free to release */
            bv_opts_free(dst);
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        }
    }
    return BV_OK;
}

bv_status bv_opts_set(bv_opts *o, const char *name, const char *text, bv_error *err)
{
    bv_opt_value *v = (bv_opt_value *)bv_opts_find(o, name);
    if (!v)
        return bv_error_set(err, BV_ERR_INVALID, "section '%s' has no option '%s'",
                            o->section ? o->section : "?", name);
    bv_opt_value parsed = {0};
    bv_status st = bv_opt_parse(v->decl, text, &parsed, err);
    if (st != BV_OK)
        return st;
    if (owns_string(v->decl))
        free(v->v.s);
    v->v = parsed.v;
    v->from_user = false;
    return BV_OK;
}

const bv_opt_value *bv_opts_find(const bv_opts *o, const char *name)
{
    for (size_t i = 0; o && i < o->count; i++)
        if (strcmp(o->values[i].decl->name, name) == 0)
            return &o->values[i];
    return NULL;
}

static const bv_opt_value *get_typed(const bv_opts *o, const char *name, bv_opt_type a,
                                     bv_opt_type b, bv_opt_type c)
{
    const bv_opt_value *v = bv_opts_find(o, name);
    if (!v || (v->decl->type != a && v->decl->type != b && v->decl->type != c)) {
        fprintf(stderr, "bivouac: internal error: option '%s' of section '%s' %s\n", name,
                o && o->section ? o->section : "?",
                v ? "read with the wrong type" : "is not declared");
        abort();
    }
    return v;
}

int64_t bv_opts_int(const bv_opts *o, const char *name)
{
    return get_typed(o, name, BV_OPT_INT, BV_OPT_INT, BV_OPT_INT)->v.i;
}

double bv_opts_float(const bv_opts *o, const char *name)
{
    return get_typed(o, name, BV_OPT_FLOAT, BV_OPT_FLOAT, BV_OPT_FLOAT)->v.f;
}

bool bv_opts_bool(const bv_opts *o, const char *name)
{
    return get_typed(o, name, BV_OPT_BOOL, BV_OPT_BOOL, BV_OPT_BOOL)->v.b;
}

const char *bv_opts_str(const bv_opts *o, const char *name)
{
    const bv_opt_value *v = bv_opts_find(o, name);
    if (v && v->decl->type == BV_OPT_DIR)
        return v->v.s;
    return get_typed(o, name, BV_OPT_STRING, BV_OPT_ENUM, BV_OPT_PATH)->v.s;
}
