/* Pictures of runs: a run directory's curves (DIR/curves.png and curves.svg) and several
 * runs overlaid (bivouac compare), drawn with cairo after training (docs/plots.md). */
#ifndef BIVOUAC_PLOT_H
#define BIVOUAC_PLOT_H

#include <stdbool.h>
#include <stddef.h>

#include "bivouac/error.h"

typedef enum { BV_PLOT_X_UNIT = 0, BV_PLOT_X_TIME = 1 } bv_plot_x;

typedef struct bv_plot_options {
    bv_plot_x x;                 /* the run's units (epoch or step) or its wall time */
    const char *const *series;   /* compare: the series to draw (NULL: the validation ones) */
    size_t nseries;
    int width;                   /* 0: the default (1200 px) */
    bool no_legend;              /* leave the legends out (the tests measure the curves) */
} bv_plot_options;

/* One series of a run, as metrics.jsonl has it. */
typedef struct bv_plot_series {
    char name[64];
    char unit[32];
    char quantity[64]; /* what the panel is titled: "loss", "learning rate", "queue depth" */
    char panel[80];    /* series with the same key share a panel (their unit, or the name) */
    double *x_unit, *x_time, *y;
    size_t n, cap;
} bv_plot_series;

/* A run directory's metrics and result. A --repeat directory's seeds are its parts. */
typedef struct bv_plot_run {
    char dir[4096];
    char label[160];      /* the directory's last name */
    char experiment[160]; /* from result.json, or the label */
    char title[320];      /* "quickstart: gcn on synthetic-communities, seed 42" */
    char index[16];       /* "epoch" or "step" */
    bool simulated;       /* written by bivouac simulate: its time is the simulation's */
    bv_plot_series *series;
    size_t nseries;
    struct bv_plot_run *parts; /* seed-N/ of a --repeat run */
    size_t nparts;
} bv_plot_run;

/* Reads DIR/metrics.jsonl (or, for a --repeat run, every DIR/seed-N/metrics.jsonl).
 * BV_ERR_IO when there is none, BV_ERR_CORRUPT for a line that is not JSON. */
bv_status bv_plot_run_load(const char *dir, bv_plot_run *run, bv_error *err);
void bv_plot_run_free(bv_plot_run *run);
const bv_plot_series *bv_plot_run_find(const bv_plot_run *run, const char *name);

/* Draws a run's curves into png_path and svg_path (either may be NULL): one panel per
 * quantity (loss, accuracy, learning rate, every reported unit), a shared x-axis. */
bv_status bv_plot_draw_run(const bv_plot_run *run, const bv_plot_options *o,
                           const char *png_path, const char *svg_path, bv_error *err);
/* Draws the chosen series of n runs overlaid, one colour per run. */
bv_status bv_plot_draw_compare(const bv_plot_run *runs, size_t n, const bv_plot_options *o,
                               const char *png_path, const char *svg_path, bv_error *err);

/* DIR/curves.png and DIR/curves.svg from DIR's metrics (bivouac plot, the end of a run). */
bv_status bv_plot_dir(const char *dir, const bv_plot_options *o, bv_error *err);

/* The run's series as a TensorBoard event file DIR/events.out.tfevents.<time>.<host>
 * (a --repeat run: DIR/seed-N/ each), every point a scalar tagged with its series' name,
 * at its epoch or step (tensorboard.c). */
bv_status bv_plot_tensorboard(const bv_plot_run *run, const char *dir, bv_error *err);
bv_status bv_plot_tensorboard_dir(const char *run_dir, const char *dir, bv_error *err);

/* A pipeline's step (bivouac schedule --out): a row of boxes per stage, one box per
 * instruction that takes time, coloured by kind, numbered by microbatch. */
typedef enum {
    BV_PLOT_BOX_FORWARD,
    BV_PLOT_BOX_BACKWARD,
    BV_PLOT_BOX_UPDATE,
    BV_PLOT_BOX_OTHER
} bv_plot_box_kind;
typedef struct bv_plot_box {
    double start, end;
    int kind;       /* bv_plot_box_kind */
    int microbatch; /* -1: none */
} bv_plot_box;
typedef struct bv_plot_lane {
    const bv_plot_box *boxes;
    size_t count;
} bv_plot_lane;
bv_status bv_plot_draw_timeline(const char *title, const bv_plot_lane *lanes, size_t nlanes,
                                const char *png_path, const char *svg_path, bv_error *err);

/* The size bv_plot_draw_run gives a picture of npanels panels, in pixels. */
void bv_plot_size(int npanels, const bv_plot_options *o, int *width, int *height);

/* What libbivouac_plot.so offers the CLI, which opens it with dlopen (cli/plot_loader.c)
 * so that a machine without cairo still trains: one symbol, checked by its version. */
#define BV_PLOT_MODULE_VERSION 1
typedef struct bv_plot_module {
    unsigned version;    /* BV_PLOT_MODULE_VERSION */
    size_t struct_size;  /* sizeof(bv_plot_module) */
    bv_status (*plot_dir)(const char *dir, const bv_plot_options *o, bv_error *err);
    bv_status (*run_load)(const char *dir, bv_plot_run *run, bv_error *err);
    void (*run_free)(bv_plot_run *run);
    bv_status (*draw_compare)(const bv_plot_run *runs, size_t n, const bv_plot_options *o,
                              const char *png_path, const char *svg_path, bv_error *err);
    bv_status (*tensorboard_dir)(const char *run_dir, const char *dir, bv_error *err);
    /* appended (struct_size tells whether a module has it) */
    bv_status (*draw_timeline)(const char *title, const bv_plot_lane *lanes, size_t nlanes,
                               const char *png_path, const char *svg_path, bv_error *err);
} bv_plot_module;
extern const bv_plot_module bv_plot_module_v1;

#endif
