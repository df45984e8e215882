/* The engines this bivouac has, found by the name a model plugin's descriptor gives, and
 * the small helpers every engine's result uses. */
#include <stdio.h>
#include <string.h>

#include "engine.h"

static const bv_engine_ops *const engines[] = {&bv_graph_engine_ops, &bv_sequence_engine_ops};
#define N_ENGINES (sizeof engines / sizeof engines[0])

const bv_engine_ops *bv_engine_find(const char *name)
{
    for (size_t i = 0; i < N_ENGINES; i++)
        if (strcmp(engines[i]->name, name) == 0)
            return engines[i];
    return NULL;
}

const char *bv_engine_names(void)
{
    static char names[128]; /* built once from the table, the same every time */
    if (!names[0])
        for (size_t i = 0, used = 0; i < N_ENGINES && used < sizeof names; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                                     engines[i]->name);
    return names;
}

void bv_result_add(bv_run_result *r, const char *name, double value, bool integer,
                   unsigned flags)
{
    if (r->nfields < BV_RESULT_FIELDS)
        r->fields[r->nfields++] = (bv_result_field){name, integer, flags, value};
}

const bv_result_field *bv_result_headline(const bv_run_result *r)
{
    for (size_t i = 0; i < r->nfields; i++)
        if (r->fields[i].flags & BV_RESULT_HEADLINE)
            return &r->fields[i];
    return NULL;
}
