/* `bivouac plugins [--json]`: every plugin on the path with its options, and every file
 * that failed to load with the reason. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "json_out.h"
#include "registry.h"

/* Whether the plugin's probe says it can run on this machine (no probe: it can). */
static bool runs_here(const bv_plugin *p, char *why, size_t len)
{
    why[0] = '\0';
    if (!p->probe || p->probe(why, len))
        return true;
    if (!why[0])
        snprintf(why, len, "probe failed");
    return false;
}

static const char *type_name(bv_opt_type t)
{
    switch (t) {
    case BV_OPT_INT: return "int";
    case BV_OPT_FLOAT: return "float";
    case BV_OPT_BOOL: return "bool";
    case BV_OPT_STRING: return "string";
    case BV_OPT_ENUM: return "enum";
    case BV_OPT_PATH: return "path";
    case BV_OPT_DIR: return "dir";
    }
    return "?";
}

static void print_text(const bv_registry *r)
{
    printf("plugin path:");
    for (size_t i = 0; i < r->ndirs; i++)
        printf(" %s", r->dirs[i]);
    printf("\n\n");
    for (size_t i = 0; i < r->count; i++) {
        const bv_plugin_record *rec = &r->records[i];
        if (rec->outcome != BV_LOAD_OK)
            continue;
        const bv_plugin *p = rec->desc;
        printf("%s %s %s  %s\n", bv_plugin_kind_name(rec->kind), p->name, p->version,
               p->description ? p->description : "");
        printf("    file: %s\n", rec->path);
        char why[256];
        if (!runs_here(p, why, sizeof why))
            printf("    cannot run here: %s\n", why);
        /* the registry's copy, in this build's layout whatever the plugin's option_size */
        for (const bv_option *o = bv_registry_options(r, p); o && o->name; o++) {
            char range[96] = "";
            if (o->has_range)
                snprintf(range, sizeof range, " [%g, %g]", o->min, o->max);
            else if (o->type == BV_OPT_ENUM)
                snprintf(range, sizeof range, " (%s)", o->choices);
            printf("    %-18s %-6s %-10s%s  %s\n", o->name, type_name(o->type),
                   o->default_value ? o->default_value : "(required)", range,
                   o->doc ? o->doc : "");
        }
        /* exports, as a policy calls them (docs/policies.md, "Calling plugins") */
        for (const bv_export *e = p->exports; e && e->name; e++)
            printf("    export plugins.%s.%s.%s  %s  %s\n", bv_plugin_kind_name(rec->kind),
                   p->name, e->name, e->signature, e->doc ? e->doc : "");
    }
    int failed = 0;
    for (size_t i = 0; i < r->count; i++) {
        const bv_plugin_record *rec = &r->records[i];
        if (rec->outcome == BV_LOAD_OK)
            continue;
        if (!failed++)
            printf("\nnot loaded:\n");
        printf("  %s\n", rec->why);
    }
}

static void print_json(const bv_registry *r)
{
    printf("{\"path\": [");
    for (size_t i = 0; i < r->ndirs; i++) {
        if (i)
            printf(", ");
        bv_json_string(stdout, r->dirs[i]);
    }
    printf("], \"plugins\": [");
    int n = 0;
    for (size_t i = 0; i < r->count; i++) {
        const bv_plugin_record *rec = &r->records[i];
        printf(n++ ? ",\n  {" : "\n  {");
        printf("\"kind\": \"%s\", \"name\": ", bv_plugin_kind_name(rec->kind));
        bv_json_string(stdout, rec->name);
        printf(", \"file\": ");
        bv_json_string(stdout, rec->path);
        if (rec->outcome != BV_LOAD_OK) {
            printf(", \"loaded\": false, \"error\": ");
            bv_json_string(stdout, rec->why);
            printf("}");
            continue;
        }
        const bv_plugin *p = rec->desc;
        printf(", \"loaded\": true, \"version\": ");
        bv_json_string(stdout, p->version);
        char why[256];
        bool here = runs_here(p, why, sizeof why);
        printf(", \"runs_here\": %s", here ? "true" : "false");
        if (!here) {
            printf(", \"why\": ");
            bv_json_string(stdout, why);
        }
        printf(", \"abi\": \"%u.%u\", \"description\": ", p->abi_major, p->abi_minor);
        bv_json_string(stdout, p->description ? p->description : "");
        if (rec->kind == BV_KIND_MODEL)
            printf(", \"engine\": \"%s\"", bv_plugin_model_engine(p));
        printf(", \"options\": [");
        const bv_option *options = bv_registry_options(r, p);
        for (const bv_option *o = options; o && o->name; o++) {
            printf(o == options ? "{" : ", {");
            printf("\"name\": ");
            bv_json_string(stdout, o->name);
            printf(", \"type\": \"%s\", \"default\": ", type_name(o->type));
            if (o->default_value)
                bv_json_string(stdout, o->default_value);
            else
                printf("null");
            if (o->has_range) {
                printf(", \"min\": ");
                bv_json_number(stdout, o->min);
                printf(", \"max\": ");
                bv_json_number(stdout, o->max);
            }
            if (o->type == BV_OPT_ENUM) {
                printf(", \"choices\": ");
                bv_json_string(stdout, o->choices);
            }
            printf(", \"doc\": ");
            bv_json_string(stdout, o->doc ? o->doc : "");
            printf("}");
        }
        printf("], \"exports\": [");
        for (const bv_export *e = p->exports; e && e->name; e++) {
            printf(e == p->exports ? "{" : ", {");
            printf("\"name\": ");
            bv_json_string(stdout, e->name);
            printf(", \"signature\": ");
            bv_json_string(stdout, e->signature);
            printf(", \"effectful\": %s, \"doc\": ", e->signature[0] == '!' ? "true" : "false");
            bv_json_string(stdout, e->doc ? e->doc : "");
            printf("}");
        }
        printf("]}");
    }
    printf("\n]}\n");
}

int bv_cli_plugins(int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else
            return bv_cli_fail(BV_EXIT_USAGE, "unknown option '%s' for plugins", argv[i]);
    }
    bv_registry *r = bv_registry_new();
    bv_registry_scan(r);
    if (json)
        print_json(r);
    else
        print_text(r);
    bv_registry_free(r);
    return BV_EXIT_OK;
}
