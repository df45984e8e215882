/* A run directory's metrics.jsonl as series (plot.h). Record lines ({"epoch": 3,
 * "train_loss": ..., "seconds": ...}) give one series per field; series lines
 * ({"epoch": 3, "series": "queue_depth", "unit": "tasks", "value": 7, ...}) one series
 * per name, so a plugin's series needs no code here; a policy's decisions ({"step": 20,
 * "event": "preempted", ...}) none. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_read.h"
#include "plot.h"

/* Series in one unit share a panel (losses and a plugin's series in nats); one without a
 * unit has its own. */
static void panel_key(bv_plot_series *s)
{
    snprintf(s->panel, sizeof s->panel, "%s%s", s->unit[0] ? "unit:" : "name:",
             s->unit[0] ? s->unit : s->quantity);
}

/* What the core's own record fields measure: losses in nats (natural-log cross-entropy),
 * accuracies in percent, the rest without a unit. */
static void describe_field(const char *name, bv_plot_series *s, double *scale)
{
    size_t n = strlen(name);
    *scale = 1;
    if (n >= 4 && strcmp(name + n - 4, "loss") == 0) {
        snprintf(s->quantity, sizeof s->quantity, "loss");
        snprintf(s->unit, sizeof s->unit, "nats");
    } else if (n >= 8 && strcmp(name + n - 8, "accuracy") == 0) {
        snprintf(s->quantity, sizeof s->quantity, "accuracy");
        snprintf(s->unit, sizeof s->unit, "%%");
        *scale = 100;
    } else if (strcmp(name, "lr") == 0) {
        snprintf(s->quantity, sizeof s->quantity, "learning rate");
    } else if (strcmp(name, "cost_usd") == 0) { /* the run's bill so far (docs/cost.md) */
        snprintf(s->quantity, sizeof s->quantity, "cost");
        snprintf(s->unit, sizeof s->unit, "USD, cumulative");
    } else if (strcmp(name, "grad_norm") == 0) {
        snprintf(s->quantity, sizeof s->quantity, "gradient norm");
        snprintf(s->unit, sizeof s->unit, "L2, before clipping");
    } else {
        snprintf(s->quantity, sizeof s->quantity, "%s", name);
    }
    panel_key(s);
}

/* A series' words: "queue_depth" reads "queue depth". */
static void words(char *dst, size_t len, const char *name)
{
    snprintf(dst, len, "%s", name);
    for (char *p = dst; *p; p++)
        if (*p == '_')
            *p = ' ';
}

/* The series of that name, made on first sight; *scale turns its values into its unit
 * (accuracies are recorded as fractions and drawn in percent). */
static bv_plot_series *series_get(bv_plot_run *run, const char *name, const char *unit,
                                  double *scale, bool reported)
{
    bv_plot_series probe = {0};
    *scale = 1;
    if (!reported)
        describe_field(name, &probe, scale);
    for (size_t i = 0; i < run->nseries; i++)
        if (strcmp(run->series[i].name, name) == 0)
            return &run->series[i];
    bv_plot_series *grown = realloc(run->series, (run->nseries + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    run->series = grown;
    bv_plot_series *s = &run->series[run->nseries++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    if (reported) {
        snprintf(s->unit, sizeof s->unit, "%s", unit ? unit : "");
        words(s->quantity, sizeof s->quantity, name);
        panel_key(s);
    } else {
        *s = probe;
        snprintf(s->name, sizeof s->name, "%s", name);
    }
    return s;
}

static bool series_push(bv_plot_series *s, double xu, double xt, double y)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        double *a = realloc(s->x_unit, cap * sizeof *a);
        if (!a)
            return false;
        s->x_unit = a;
        double *b = realloc(s->x_time, cap * sizeof *b);
        if (!b)
            return false;
        s->x_time = b;
        double *c = realloc(s->y, cap * sizeof *c);
        if (!c)
            return false;
        s->y = c;
        s->cap = cap;
    }
    s->x_unit[s->n] = xu;
    s->x_time[s->n] = xt;
    s->y[s->n] = y;
    s->n++;
    return true;
}

/* One metrics.jsonl line into the run's series. */
static bv_status take_line(bv_plot_run *run, const bv_json *line, bv_error *err)
{
    if (line->type != BV_JSON_OBJECT || line->count == 0 ||
        line->items[0].type != BV_JSON_NUMBER)
        return bv_error_set(err, BV_ERR_CORRUPT, "not a metrics record");
    if (!run->index[0])
        snprintf(run->index, sizeof run->index, "%s", line->keys[0]);
    if (bv_json_str(line, "event")) /* a policy's decision (train.c): not a series */
        return BV_OK;
    double xu = line->items[0].number, xt = bv_json_num(line, "seconds");
    const char *name = bv_json_str(line, "series");
    if (name) {
        double scale, y = bv_json_num(line, "value");
        bv_plot_series *s = series_get(run, name, bv_json_str(line, "unit"), &scale, true);
        if (!s || (isfinite(y) && !series_push(s, xu, xt, y)))
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return BV_OK;
    }
    for (size_t i = 1; i < line->count; i++) {
        if (line->items[i].type != BV_JSON_NUMBER || strcmp(line->keys[i], "seconds") == 0)
            continue;
        double scale;
        bv_plot_series *s = series_get(run, line->keys[i], NULL, &scale, false);
        if (!s || !series_push(s, xu, xt, line->items[i].number * scale))
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    return BV_OK;
}

static bv_status load_metrics(const char *path, bv_plot_run *run, bv_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return bv_error_set(err, BV_ERR_IO, "%s: cannot read it", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long number = 0;
    bv_status st = BV_OK;
    while (st == BV_OK && (len = getline(&line, &cap, f)) >= 0) {
        number++;
        if (len <= 1)
            continue;
        bv_json v;
        if (!bv_json_parse(line, (size_t)len, &v)) {
            /* the last line of a run killed while writing may be cut short */
            int c = fgetc(f);
            if (c == EOF && line[len - 1] != '\n')
                break;
            st = bv_error_set(err, BV_ERR_CORRUPT, "%s:%ld: not a JSON object", path, number);
            break;
        }
        st = take_line(run, &v, err);
        if (st == BV_ERR_CORRUPT)
            bv_error_set(err, BV_ERR_CORRUPT, "%s:%ld: not a metrics record", path, number);
        bv_json_free(&v);
    }
    free(line);
    fclose(f);
    return st;
}

/* The title's words from DIR/result.json: model, dataset, experiment, seed. */
static void read_result(bv_plot_run *run)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/result.json", run->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char *text = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            char *grown = realloc(text, cap = cap ? cap * 2 : 8192);
            if (!grown)
                break;
            text = grown;
        }
        size_t got = fread(text + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    bv_json v;
    if (text && bv_json_parse(text, n, &v)) {
        const char *x = bv_json_str(&v, "experiment"), *m = bv_json_str(&v, "model"),
                   *d = bv_json_str(&v, "dataset");
        double seed = bv_json_num(&v, "seed"), repeat = bv_json_num(&v, "repeat");
        const bv_json *sim = bv_json_get(&v, "simulated");
        run->simulated = sim && sim->type == BV_JSON_BOOL && sim->number != 0;
        if (x)
            snprintf(run->experiment, sizeof run->experiment, "%s", x);
        if (m && d && x && !isnan(repeat))
            snprintf(run->title, sizeof run->title, "%s: %s on %s, %.0f seeds from %.0f", x,
                     m, d, repeat, seed);
        else if (m && d && x)
            snprintf(run->title, sizeof run->title, "%s: %s on %s, seed %.0f", x, m, d, seed);
        bv_json_free(&v);
    }
    free(text);
}

static int compare_seed_dirs(const void *a, const void *b)
{
    const bv_plot_run *x = a, *y = b;
    long p = strtol(x->label + 5, NULL, 10), q = strtol(y->label + 5, NULL, 10);
    return (p > q) - (p < q);
}

bv_status bv_plot_run_load(const char *dir, bv_plot_run *run, bv_error *err)
{
    memset(run, 0, sizeof *run);
    snprintf(run->dir, sizeof run->dir, "%s", dir);
    size_t n = strlen(run->dir);
    while (n > 1 && run->dir[n - 1] == '/')
        run->dir[--n] = '\0';
    const char *base = strrchr(run->dir, '/');
    snprintf(run->label, sizeof run->label, "%s", base ? base + 1 : run->dir);
    read_result(run);
    if (!run->experiment[0])
        snprintf(run->experiment, sizeof run->experiment, "%s", run->label);
    if (!run->title[0])
        snprintf(run->title, sizeof run->title, "%s", run->experiment);
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run->dir);
    FILE *probe = fopen(path, "r");
    if (probe) {
        fclose(probe);
        bv_status st = load_metrics(path, run, err);
        if (st != BV_OK)
            bv_plot_run_free(run);
        return st;
    }
    /* a --repeat run: its seeds */
    DIR *d = opendir(run->dir);
    if (!d)
        return bv_error_set(err, BV_ERR_IO, "%s: not a directory", dir);
    struct dirent *e;
    bv_status st = BV_OK;
    while (st == BV_OK && (e = readdir(d))) {
        if (strncmp(e->d_name, "seed-", 5) != 0 || !e->d_name[5] ||
            strspn(e->d_name + 5, "0123456789") != strlen(e->d_name + 5))
            continue;
        bv_plot_run *parts = realloc(run->parts, (run->nparts + 1) * sizeof *parts);
        if (!parts) {
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
            break;
        }
        run->parts = parts;
        snprintf(path, sizeof path, "%s/%s", run->dir, e->d_name);
        st = bv_plot_run_load(path, &run->parts[run->nparts], err);
        if (st == BV_OK)
            run->nparts++;
    }
    closedir(d);
    if (st == BV_OK && run->nparts == 0)
        st = bv_error_set(err, BV_ERR_IO, "%s has no metrics.jsonl (and no seed-N/ with one)",
                          dir);
    if (st != BV_OK) {
        bv_plot_run_free(run);
        return st;
    }
    qsort(run->parts, run->nparts, sizeof *run->parts, compare_seed_dirs);
    snprintf(run->index, sizeof run->index, "%s", run->parts[0].index);
    return BV_OK;
}

void bv_plot_run_free(bv_plot_run *run)
{
    for (size_t i = 0; i < run->nseries; i++) {
        free(run->series[i].x_unit);
        free(run->series[i].x_time);
        free(run->series[i].y);
    }
    free(run->series);
    for (size_t i = 0; i < run->nparts; i++)
        bv_plot_run_free(&run->parts[i]);
    free(run->parts);
    run->series = NULL;
    run->parts = NULL;
    run->nseries = run->nparts = 0;
}

const bv_plot_series *bv_plot_run_find(const bv_plot_run *run, const char *name)
{
    for (size_t i = 0; i < run->nseries; i++)
        if (strcmp(run->series[i].name, name) == 0)
            return &run->series[i];
    return NULL;
}
