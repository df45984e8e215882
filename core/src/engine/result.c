/* result.json (train.h): what a run, or the seeds of --repeat, produced. */
#include <math.h>
#include <stdio.h>

#include "json_out.h"
#include "train.h"

/* "seed": S, the engine's fields, "wall_seconds", "load_seconds", "peak_rss_mb", the cost
 * (its total, the value 1/(T C), the breakdown), "params_crc32c", "stop_reason" */
static void write_run_fields(FILE *f, const bv_run_result *r, uint64_t seed)
{
    fprintf(f, "\"seed\": %llu", (unsigned long long)seed);
    for (size_t i = 0; i < r->nfields; i++) {
        const bv_result_field *fl = &r->fields[i];
        if (fl->integer) {
            fputs(", ", f);
            bv_json_string(f, fl->name);
            fprintf(f, ": %lld", (long long)fl->value);
        } else {
            bv_json_field(f, fl->name, fl->value);
        }
    }
    bv_json_field(f, "wall_seconds", r->wall_seconds);
    bv_json_field(f, "load_seconds", r->load_seconds);
    bv_json_field(f, "peak_rss_mb", r->peak_rss_mb);
    bv_json_field(f, "cost_usd", r->cost_usd);
    if (r->cost_usd > 0 && r->wall_seconds > 0) /* Dorylus's value: 1 / (T C) */
        bv_json_field(f, "value", 1.0 / (r->wall_seconds * r->cost_usd));
    fputs(r->cost_json, f);
    fprintf(f, ", \"params_crc32c\": \"%08x\", \"stop_reason\": ", (unsigned)r->params_crc32c);
    bv_json_string(f, r->stop_reason);
}

void bv_result_mean_std(const bv_run_result *runs, size_t n, size_t k, double *mean,
                        double *std)
{
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++)
        sum += runs[i].fields[k].value;
    *mean = sum / (double)n;
    for (size_t i = 0; i < n; i++)
        sq += (runs[i].fields[k].value - *mean) * (runs[i].fields[k].value - *mean);
    *std = sqrt(sq / (double)n);
}

double bv_result_wall_total(const bv_run_result *runs, size_t n)
{
    double wall = 0;
    for (size_t i = 0; i < n; i++)
        wall += runs[i].wall_seconds;
    return wall;
}

/* The summary over seeds: the mean of every BV_RESULT_MEAN field (the fields are the same
 * for every seed of one engine), the headline's standard deviation after it, the summed
 * wall time and cost, the load time (once for all seeds) and the highest peak memory. */
static void write_summary_fields(FILE *f, const bv_run_result *runs, size_t n)
{
    for (size_t k = 0; k < runs[0].nfields; k++) {
        const bv_result_field *fl = &runs[0].fields[k];
        if (!(fl->flags & BV_RESULT_MEAN))
            continue;
        double mean, std;
        bv_result_mean_std(runs, n, k, &mean, &std);
        bv_json_field(f, fl->name, mean);
        if (fl->flags & BV_RESULT_HEADLINE) {
            char name[80];
            snprintf(name, sizeof name, "%s_std", fl->name);
            bv_json_field(f, name, std);
        }
    }
    bv_json_field(f, "wall_seconds", bv_result_wall_total(runs, n));
    double cost = 0, peak = 0;
    for (size_t i = 0; i < n; i++) {
        cost += runs[i].cost_usd;
        peak = runs[i].peak_rss_mb > peak ? runs[i].peak_rss_mb : peak;
    }
    bv_json_field(f, "load_seconds", runs[0].load_seconds);
    bv_json_field(f, "peak_rss_mb", peak);
    bv_json_field(f, "cost_usd", cost);
}

/* ', "resilience": [{"plugin": "staleness", "mode": "async", "s": 1}]': each strategy
 * with its options as the run began (a comparison of settings reads them here). */
static void write_resilience(FILE *f, const bv_experiment *x)
{
    if (!x->nresilience)
        return;
    fputs(", \"resilience\": [", f);
    for (size_t i = 0; i < x->nresilience; i++) {
        const bv_opts *o = &x->resilience[i].opts;
        fputs(i ? ", {\"plugin\": " : "{\"plugin\": ", f);
        bv_json_string(f, x->resilience[i].plugin->name);
        for (size_t k = 0; k < o->count; k++) {
            const bv_opt_value *v = &o->values[k];
            if (v->decl->type == BV_OPT_INT || v->decl->type == BV_OPT_FLOAT) {
                bv_json_field(f, v->decl->name,
                              v->decl->type == BV_OPT_INT ? (double)v->v.i : v->v.f);
                continue;
            }
            fputs(", ", f);
            bv_json_string(f, v->decl->name);
            if (v->decl->type == BV_OPT_BOOL) {
                fputs(v->v.b ? ": true" : ": false", f);
            } else if (v->v.s) {
                fputs(": ", f);
                bv_json_string(f, v->v.s);
            } else {
                fputs(": null", f);
            }
        }
        fputc('}', f);
    }
    fputc(']', f);
}

int bv_result_write(const char *dir, const bv_experiment *x, const bv_run_result *runs,
                    const uint64_t *seeds, size_t n)
{
    char path[4200], tmp[4300];
    if (snprintf(path, sizeof path, "%s/result.json", dir) >= (int)sizeof path)
        return -1; /* a directory name this long cannot be written to anyway */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fputs("{\"model\": ", f);
    bv_json_string(f, x->model.plugin->name);
    fputs(", \"dataset\": ", f);
    bv_json_string(f, x->dataset_label);
    fputs(", \"experiment\": ", f);
    bv_json_string(f, x->name);
    write_resilience(f, x);
    fputs(", ", f);
    if (n == 1) {
        write_run_fields(f, &runs[0], seeds[0]);
    } else {
        fprintf(f, "\"seed\": %llu, \"repeat\": %zu", (unsigned long long)seeds[0], n);
        write_summary_fields(f, runs, n);
        fputs(", \"runs\": [", f);
        for (size_t i = 0; i < n; i++) {
            fputs(i ? ", {" : "{", f);
            write_run_fields(f, &runs[i], seeds[i]);
            fputc('}', f);
        }
        fputc(']', f);
    }
    fputs("}\n", f);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}
