/* Drawing runs with cairo (plot.h): panels on a grid, each with nice ticks, a light grid,
 * labelled axes and a legend in its emptiest corner; the same drawing goes to a PNG image
 * surface and an SVG surface, so the paper's figure is the README's. */
#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

/* Layout, in pixels of the PNG (points of the SVG). Sized for a README, where a
 * 1200-pixel picture is shown about 880 wide: 16-pixel tick labels read as 12. */
#define DEFAULT_WIDTH 1200
#define TITLE_H 56
#define PANEL_H 380
#define MARGIN_L 92
#define MARGIN_R 22
#define MARGIN_T 40
#define MARGIN_B 62
#define FONT "DejaVu Sans"
#define FONT_TICK 16.0
#define FONT_LABEL 18.0
#define FONT_TITLE 22.0
#define FONT_LEGEND 16.0
#define MAX_PANELS 16
#define MAX_LINES 48

/* Okabe and Ito's colour-blind safe palette, without its yellow (too pale on white). */
static const double palette[][3] = {
    {0.000, 0.447, 0.698}, /* blue */
    {0.902, 0.624, 0.000}, /* orange */
    {0.000, 0.620, 0.451}, /* bluish green */
    {0.835, 0.369, 0.000}, /* vermillion */
    {0.800, 0.475, 0.655}, /* reddish purple */
    {0.337, 0.706, 0.914}, /* sky blue */
    {0.000, 0.000, 0.000}, /* black */
    {0.500, 0.500, 0.500}, /* grey */
};
#define NCOLOURS (sizeof palette / sizeof palette[0])

/* A series' colour is a function of its name, so it is the same in every picture:
 * train blue, validation orange, test green, the learning rate vermillion. */
static size_t series_colour(const char *name)
{
    if (!strncmp(name, "train_", 6))
        return 0;
    if (!strncmp(name, "val_", 4))
        return 1;
    if (!strncmp(name, "test_", 5))
        return 2;
    if (!strcmp(name, "lr"))
        return 3;
    if (!strcmp(name, "grad_norm"))
        return 4;
    if (!strncmp(name, "eval_train_", 11))
        return 5;
    unsigned h = 2166136261u; /* FNV-1a */
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h % NCOLOURS;
}

/* One line of a panel: the points of one series of one run. */
typedef struct line {
    const bv_plot_series *s;
    size_t colour;
    bool dashed;
    bool thin;
    const char *legend; /* NULL: not in the legend (a second seed of the same run) */
} line;

typedef struct panel {
    char title[160];
    char ylabel[112];
    char key[80];
    line lines[MAX_LINES];
    size_t nlines;
} panel;

typedef struct axis {
    double lo, hi, step;
    int decimals;
} axis;

/* Ticks at 1, 2 or 5 times a power of ten, about `target` of them over [lo, hi]. */
static axis nice_axis(double lo, double hi, int target, bool from_zero)
{
    if (!isfinite(lo) || !isfinite(hi)) {
        lo = 0;
        hi = 1;
    }
    if (from_zero && lo > 0 && lo < hi * 0.25)
        lo = 0;
    if (hi - lo < 1e-12 * (fabs(hi) + 1e-300)) { /* a constant: show it against zero */
        if (from_zero && hi > 0) {
            lo = 0;
            hi *= 1.25;
        } else {
            double pad = fabs(hi) > 0 ? fabs(hi) * 0.1 : 1;
            lo -= pad;
            hi += pad;
        }
    }
    double raw = (hi - lo) / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
    axis a = {floor(lo / step + 1e-9) * step, ceil(hi / step - 1e-9) * step, step, 0};
    a.decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    return a;
}

static void tick_text(double v, const axis *a, char *buf, size_t len)
{
    if (fabs(v) < a->step * 1e-6)
        v = 0;
    if (fabs(v) >= 1e6 || (v != 0 && a->decimals > 5)) {
        /* as many significant digits as make neighbouring ticks differ (with two, ticks
         * at 1,000,000 and 1,040,000 would both read 1e+06), at least 2 */
        int sig = 2;
        if (v != 0) {
            int need = (int)floor(log10(fabs(v))) - (int)floor(log10(a->step)) + 1;
            sig = need > sig ? (need < 17 ? need : 17) : sig;
        }
        snprintf(buf, len, "%.*g", sig, v);
    } else
        snprintf(buf, len, "%.*f", a->decimals, v);
}

static void set_font(cairo_t *cr, double size, bool bold)
{
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

/* Text with its anchor at (x, y): ax, ay in [0, 1] (0.5, 0.5: centred). */
static void text_at(cairo_t *cr, const char *s, double x, double y, double ax, double ay)
{
    cairo_text_extents_t e;
    cairo_font_extents_t fe;
    cairo_text_extents(cr, s, &e);
    cairo_font_extents(cr, &fe);
    double h = fe.ascent - fe.descent * 0.5;
    cairo_move_to(cr, x - e.x_advance * ax, y + h * (1 - ay));
    cairo_show_text(cr, s);
}

/* The picture's title, centred in its band, in the title font: smaller where the text is
 * wider than the picture (long run names in `bivouac compare`). */
static void title_at(cairo_t *cr, const char *s, double width)
{
    cairo_text_extents_t e;
    set_font(cr, FONT_TITLE, true);
    cairo_text_extents(cr, s, &e);
    double room = width - 2 * 12.0;
    if (e.x_advance > room)
        set_font(cr, FONT_TITLE * room / e.x_advance, true);
    text_at(cr, s, width / 2.0, TITLE_H / 2.0 + 4, 0.5, 0.5);
}

static const double *xs_of(const bv_plot_series *s, const bv_plot_options *o)
{
    return o->x == BV_PLOT_X_TIME ? s->x_time : s->x_unit;
}

static void data_range(const panel *p, const bv_plot_options *o, double *x0, double *x1,
                       double *y0, double *y1)
{
    *x0 = *y0 = INFINITY;
    *x1 = *y1 = -INFINITY;
    for (size_t l = 0; l < p->nlines; l++) {
        const bv_plot_series *s = p->lines[l].s;
        const double *xs = xs_of(s, o);
        for (size_t i = 0; i < s->n; i++) {
            if (!isfinite(xs[i]) || !isfinite(s->y[i]))
                continue;
            *x0 = fmin(*x0, xs[i]);
            *x1 = fmax(*x1, xs[i]);
            *y0 = fmin(*y0, s->y[i]);
            *y1 = fmax(*y1, s->y[i]);
        }
    }
}

static void draw_panel(cairo_t *cr, const panel *p, const bv_plot_options *o,
                       const char *xlabel, double px, double py, double pw, double ph,
                       double xmin, double xmax)
{
    double gx = px + MARGIN_L, gy = py + MARGIN_T;
    double gw = pw - MARGIN_L - MARGIN_R, gh = ph - MARGIN_T - MARGIN_B;
    double x0, x1, y0, y1; /* the x range is the picture's, shared by every panel */
    data_range(p, o, &x0, &x1, &y0, &y1);
    axis xa = nice_axis(xmin, xmax, 6, true);
    bool percent = strstr(p->ylabel, "%") != NULL;
    axis ya = nice_axis(y0, y1, 5, percent || strcmp(p->key, "name:learning rate") == 0);
    if (percent && ya.hi > 100 && y1 <= 100)
        ya.hi = 100;
#define MAPX(v) (gx + ((v) - xa.lo) / (xa.hi - xa.lo) * gw)
#define MAPY(v) (gy + gh - ((v) - ya.lo) / (ya.hi - ya.lo) * gh)
    /* Values too small for the margin's labels (a short run's cost, in millionths of a
     * dollar) are labelled in units of 10^e, which the axis title says. */
    axis yt = ya;
    double yscale = 1;
    char ylabel[sizeof p->ylabel + 16];
    snprintf(ylabel, sizeof ylabel, "%s", p->ylabel);
    double big = fmax(fabs(ya.lo), fabs(ya.hi));
    if (ya.decimals > 3 && big > 0) {
        int e = (int)floor(log10(big));
        yscale = pow(10, -e);
        yt.step = ya.step * yscale;
        yt.decimals = yt.step >= 1 ? 0 : (int)ceil(-log10(yt.step) - 1e-9);
        snprintf(ylabel, sizeof ylabel, "%s, x 1e%d", p->ylabel, e);
    }
    /* grid and ticks */
    cairo_set_line_width(cr, 1);
    set_font(cr, FONT_TICK, false);
    char buf[64];
    for (int i = 0;; i++) {
        double v = ya.lo + i * ya.step;
        if (v > ya.hi + ya.step * 1e-6)
            break;
        double y = round(MAPY(v)) + 0.5;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, gx, y);
        cairo_line_to(cr, gx + gw, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
        tick_text(v * yscale, &yt, buf, sizeof buf);
        text_at(cr, buf, gx - 8, y, 1, 0.5);
    }
    for (int i = 0;; i++) {
        double v = xa.lo + i * xa.step;
        if (v > xa.hi + xa.step * 1e-6)
            break;
        double x = round(MAPX(v)) + 0.5;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, x, gy);
        cairo_line_to(cr, x, gy + gh);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
        tick_text(v, &xa, buf, sizeof buf);
        text_at(cr, buf, x, gy + gh + 6, 0.5, 0);
    }
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_rectangle(cr, gx + 0.5, gy + 0.5, gw - 1, gh - 1);
    cairo_stroke(cr);
    /* labels */
    set_font(cr, FONT_LABEL, false);
    cairo_set_source_rgb(cr, 0, 0, 0);
    text_at(cr, xlabel, gx + gw / 2, py + ph - 6, 0.5, 1);
    cairo_save(cr);
    cairo_translate(cr, px + 4, gy + gh / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, ylabel, 0, 0, 0.5, 0);
    cairo_restore(cr);
    set_font(cr, FONT_LABEL, true);
    text_at(cr, p->title, gx + gw / 2, py + 8, 0.5, 0);
    /* the curves, clipped to the frame */
    cairo_save(cr);
    cairo_rectangle(cr, gx, gy, gw, gh);
    cairo_clip(cr);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    /* counts of points in the four corners, for the legend */
    size_t corner[4] = {0};
    for (size_t l = 0; l < p->nlines; l++) {
        const line *ln = &p->lines[l];
        const double *xs = xs_of(ln->s, o);
        const double *c = palette[ln->colour % NCOLOURS];
        cairo_set_source_rgba(cr, c[0], c[1], c[2], ln->thin ? 0.75 : 1);
        cairo_set_line_width(cr, ln->thin ? 1.5 : 2.2);
        double dash[] = {7, 5};
        cairo_set_dash(cr, dash, ln->dashed ? 2 : 0, 0);
        bool pen = false;
        for (size_t i = 0; i < ln->s->n; i++) {
            if (!isfinite(xs[i]) || !isfinite(ln->s->y[i])) {
                pen = false;
                continue;
            }
            double x = MAPX(xs[i]), y = MAPY(ln->s->y[i]);
            int cx = x > gx + gw * 0.55, cy = y > gy + gh * 0.5;
            if (x < gx + gw * 0.45 || cx)
                corner[cy * 2 + cx] += (y < gy + gh * 0.45 || cy) ? 1 : 0;
            if (pen)
                cairo_line_to(cr, x, y);
            else
                cairo_move_to(cr, x, y);
            pen = true;
        }
        if (ln->s->n == 1) { /* one point: a dot */
            cairo_arc(cr, MAPX(xs[0]), MAPY(ln->s->y[0]), 3, 0, 2 * M_PI);
            cairo_fill(cr);
        }
        cairo_stroke(cr);
    }
    cairo_set_dash(cr, NULL, 0, 0);
    cairo_restore(cr);
    /* the legend, in the corner with fewest points: top right first */
    static const int order[4] = {1, 0, 3, 2};
    int best = order[0];
    for (int i = 1; i < 4; i++)
        if (corner[order[i]] < corner[best])
            best = order[i];
    set_font(cr, FONT_LEGEND, false);
    double lw = 0, row = FONT_LEGEND * 1.45;
    size_t nleg = 0;
    for (size_t l = 0; l < p->nlines; l++) {
        if (!p->lines[l].legend)
            continue;
        cairo_text_extents_t e;
        cairo_text_extents(cr, p->lines[l].legend, &e);
        lw = fmax(lw, e.x_advance);
        nleg++;
    }
    if (nleg == 0 || o->no_legend)
        return;
    double bw = lw + 52, bh = (double)nleg * row + 10;
    double bx = best & 1 ? gx + gw - bw - 8 : gx + 8;
    double by = best & 2 ? gy + gh - bh - 8 : gy + 8;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_rectangle(cr, bx, by, bw, bh);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    size_t k = 0;
    for (size_t l = 0; l < p->nlines; l++) {
        const line *ln = &p->lines[l];
        if (!ln->legend)
            continue;
        double y = by + 5 + row * ((double)k + 0.5);
        const double *c = palette[ln->colour % NCOLOURS];
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        cairo_set_line_width(cr, 2.5);
        double dash[] = {7, 5};
        cairo_set_dash(cr, dash, ln->dashed ? 2 : 0, 0);
        cairo_move_to(cr, bx + 8, y);
        cairo_line_to(cr, bx + 38, y);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, ln->legend, bx + 44, y, 0, 0.5);
        k++;
    }
#undef MAPX
#undef MAPY
}

void bv_plot_size(int npanels, const bv_plot_options *o, int *width, int *height)
{
    int w = o && o->width > 0 ? o->width : DEFAULT_WIDTH;
    int cols = npanels <= 1 ? 1 : 2, rows = (npanels + cols - 1) / cols;
    if (rows < 1)
        rows = 1;
    *width = cols == 1 ? w * 2 / 3 : w;
    *height = TITLE_H + rows * PANEL_H;
}

/* The x axis of runs[0 .. n): their unit, or their time: a simulated run's is the
 * simulation's clock. */
static const char *x_label(const bv_plot_run *runs, size_t n, const bv_plot_options *o)
{
    if (o->x != BV_PLOT_X_TIME)
        return runs[0].index[0] ? runs[0].index : "unit";
    size_t simulated = 0;
    for (size_t r = 0; r < n; r++)
        simulated += runs[r].simulated;
    return simulated == 0   ? "wall time (s)"
           : simulated == n ? "simulated time (s)"
                            : "wall or simulated time (s)";
}

/* Renders the panels onto one surface: title, then the grid of panels. */
static void render(cairo_t *cr, const panel *panels, size_t np, const bv_plot_options *o,
                   const char *title, const char *xlabel, int width, double xmin,
                   double xmax)
{
    int cols = np <= 1 ? 1 : 2;
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    title_at(cr, title, width);
    double pw = (double)width / cols;
    for (size_t i = 0; i < np; i++)
        draw_panel(cr, &panels[i], o, xlabel, (double)(i % (size_t)cols) * pw,
                   TITLE_H + (double)(i / (size_t)cols) * PANEL_H, pw, PANEL_H, xmin, xmax);
}

/* Draws a picture of w x h pixels into png and svg (either may be NULL) with render. */
typedef void (*render_fn)(cairo_t *cr, const void *ctx, int w, int h);
static bv_status write_pictures(render_fn render_it, const void *ctx, int w, int h,
                                const char *png, const char *svg, bv_error *err)
{
    if (png) {
        cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
        cairo_t *cr = cairo_create(s);
        render_it(cr, ctx, w, h);
        cairo_status_t cs = cairo_status(cr);
        cairo_destroy(cr);
        if (cs == CAIRO_STATUS_SUCCESS)
            cs = cairo_surface_write_to_png(s, png);
        cairo_surface_destroy(s);
        if (cs != CAIRO_STATUS_SUCCESS)
            return bv_error_set(err, BV_ERR_IO, "%s: %s", png, cairo_status_to_string(cs));
    }
    if (svg) {
        cairo_surface_t *s = cairo_svg_surface_create(svg, w, h);
        cairo_t *cr = cairo_create(s);
        render_it(cr, ctx, w, h);
        cairo_status_t cs = cairo_status(cr);
        cairo_destroy(cr);
        cairo_surface_finish(s);
        if (cs == CAIRO_STATUS_SUCCESS)
            cs = cairo_surface_status(s);
        cairo_surface_destroy(s);
        if (cs != CAIRO_STATUS_SUCCESS)
            return bv_error_set(err, BV_ERR_IO, "%s: %s", svg, cairo_status_to_string(cs));
    }
    return BV_OK;
}

typedef struct curves_ctx {
    const panel *panels;
    size_t np;
    const bv_plot_options *o;
    const char *title, *xlabel;
    double xmin, xmax;
} curves_ctx;

static void render_curves(cairo_t *cr, const void *ctx, int w, int h)
{
    const curves_ctx *c = ctx;
    (void)h;
    render(cr, c->panels, c->np, c->o, c->title, c->xlabel, w, c->xmin, c->xmax);
}

static bv_status write_surfaces(const panel *panels, size_t np, const bv_plot_options *o,
                                const char *title, const char *xlabel, const char *png,
                                const char *svg, bv_error *err)
{
    int w, h;
    bv_plot_size((int)np, o, &w, &h);
    double xmin = INFINITY, xmax = -INFINITY; /* one x range for every panel: shared axis */
    for (size_t i = 0; i < np; i++) {
        double x0, x1, y0, y1;
        data_range(&panels[i], o, &x0, &x1, &y0, &y1);
        xmin = fmin(xmin, x0);
        xmax = fmax(xmax, x1);
    }
    curves_ctx c = {panels, np, o, title, xlabel, xmin, xmax};
    return write_pictures(render_curves, &c, w, h, png, svg, err);
}

/* cairo and fontconfig keep font caches for the life of the process; a picture is drawn
 * once or twice a run, so they are let go after each one (a leak checker sees nothing;
 * loading them again costs a few milliseconds). */
static void release_fonts(void)
{
    cairo_debug_reset_static_data();
    FcFini();
}

static bv_status write_files(const panel *panels, size_t np, const bv_plot_options *o,
                             const char *title, const char *xlabel, const char *png,
                             const char *svg, bv_error *err)
{
    bv_status st = write_surfaces(panels, np, o, title, xlabel, png, svg, err);
    release_fonts();
    return st;
}

/* The panel whose key is key, made if there is room. */
static panel *panel_for(panel *panels, size_t *np, const char *key)
{
    for (size_t i = 0; i < *np; i++)
        if (strcmp(panels[i].key, key) == 0)
            return &panels[i];
    if (*np == MAX_PANELS)
        return NULL;
    panel *p = &panels[(*np)++];
    memset(p, 0, sizeof *p);
    snprintf(p->key, sizeof p->key, "%s", key);
    return p;
}

static void legend_words(char *dst, size_t len, const char *name)
{
    snprintf(dst, len, "%s", name);
    for (char *c = dst; *c; c++)
        if (*c == '_')
            *c = ' ';
}

/* A panel is titled by its quantities ("loss", "loss, floor") and its y-axis says
 * "loss (nats)" while one quantity is drawn, the unit alone when several are. */
static void panel_labels(panel *p, const bv_plot_series *s)
{
    if (!p->title[0]) {
        snprintf(p->title, sizeof p->title, "%s", s->quantity);
        if (s->unit[0])
            snprintf(p->ylabel, sizeof p->ylabel, "%s (%s)", s->quantity, s->unit);
        else
            snprintf(p->ylabel, sizeof p->ylabel, "%s", s->quantity);
        return;
    }
    bool known = false;
    size_t n = strlen(p->title);
    for (const char *t = p->title; (t = strstr(t, s->quantity)); t++) {
        size_t q = strlen(s->quantity);
        known |= (t == p->title || t[-1] == ' ') && (t[q] == '\0' || t[q] == ',');
    }
    if (!known) {
        snprintf(p->title + n, sizeof p->title - n, ", %s", s->quantity);
        snprintf(p->ylabel, sizeof p->ylabel, "%s", s->unit);
    }
}

bv_status bv_plot_draw_run(const bv_plot_run *run, const bv_plot_options *o,
                           const char *png_path, const char *svg_path, bv_error *err)
{
    if (run->nparts) /* a --repeat run: its seeds overlaid */
        return bv_plot_draw_compare(run, 1, o, png_path, svg_path, err);
    panel *panels = calloc(MAX_PANELS, sizeof *panels);
    char(*legends)[64] = calloc(MAX_PANELS * MAX_LINES, sizeof *legends);
    if (!panels || !legends) {
        free(panels);
        free(legends);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    const size_t max_legends = MAX_PANELS * MAX_LINES;
    size_t np = 0, nleg = 0;
    for (size_t i = 0; i < run->nseries; i++) {
        const bv_plot_series *s = &run->series[i];
        panel *p = panel_for(panels, &np, s->panel);
        if (!p || p->nlines == MAX_LINES || nleg == max_legends)
            continue;
        panel_labels(p, s);
        legend_words(legends[nleg], sizeof legends[0], s->name);
        p->lines[p->nlines++] = (line){s, series_colour(s->name),
                                       strncmp(s->name, "test_", 5) == 0, false,
                                       legends[nleg++]};
    }
    bv_status st = write_files(panels, np, o, run->title, x_label(run, 1, o), png_path,
                               svg_path, err);
    free(panels);
    free(legends);
    return st;
}

/* The series compare draws by default: the validation ones, else every one. */
static bool default_series(const char *name)
{
    return strncmp(name, "val_", 4) == 0;
}

static void add_compare_lines(panel *panels, size_t *np, const bv_plot_run *r,
                              const bv_plot_options *o, size_t colour, const char *legend,
                              bool thin, bool *legend_used, bool any_val)
{
    for (size_t i = 0; i < r->nseries; i++) {
        const bv_plot_series *s = &r->series[i];
        bool chosen = false;
        if (o->nseries) {
            for (size_t k = 0; k < o->nseries; k++)
                chosen |= strcmp(o->series[k], s->name) == 0;
        } else {
            chosen = any_val ? default_series(s->name) : strcmp(s->name, "lr") != 0;
        }
        if (!chosen)
            continue;
        panel *p = panel_for(panels, np, s->name); /* one panel per series */
        if (!p || p->nlines == MAX_LINES)
            continue;
        if (!p->title[0]) {
            legend_words(p->title, sizeof p->title, s->name);
            if (s->unit[0])
                snprintf(p->ylabel, sizeof p->ylabel, "%s (%s)", s->quantity, s->unit);
            else
                snprintf(p->ylabel, sizeof p->ylabel, "%s", s->quantity);
        }
        bool first = true;
        for (size_t l = 0; l < p->nlines; l++)
            first &= p->lines[l].colour != colour;
        p->lines[p->nlines++] = (line){s, colour, false, thin, first ? legend : NULL};
        *legend_used = true;
    }
}

bv_status bv_plot_draw_compare(const bv_plot_run *runs, size_t n, const bv_plot_options *o,
                               const char *png_path, const char *svg_path, bv_error *err)
{
    panel *panels = calloc(MAX_PANELS, sizeof *panels);
    char(*legends)[200] = calloc(MAX_LINES, sizeof *legends);
    if (!panels || !legends) {
        free(panels);
        free(legends);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    size_t np = 0;
    bool any_val = false;
    for (size_t r = 0; r < n; r++) {
        const bv_plot_run *run = &runs[r];
        for (size_t p = 0; p <= run->nparts; p++) {
            const bv_plot_run *part = p < run->nparts ? &run->parts[p] : run;
            for (size_t i = 0; i < part->nseries; i++)
                any_val |= default_series(part->series[i].name);
        }
    }
    for (size_t r = 0; r < n && r < MAX_LINES; r++) {
        const bv_plot_run *run = &runs[r];
        /* one run alone: its seeds get colours of their own */
        bool seeds_apart = n == 1 && run->nparts > 0;
        if (run->nparts && !seeds_apart)
            snprintf(legends[r], sizeof legends[r], "%s (%zu seeds)", run->label, run->nparts);
        else
            snprintf(legends[r], sizeof legends[r], "%s", run->label);
        bool used = false;
        if (!run->nparts) {
            add_compare_lines(panels, &np, run, o, r, legends[r], false, &used, any_val);
            continue;
        }
        for (size_t p = 0; p < run->nparts && p < MAX_LINES; p++) {
            const char *legend = legends[r];
            size_t colour = r;
            if (seeds_apart) {
                legend = run->parts[p].label;
                colour = p;
            }
            add_compare_lines(panels, &np, &run->parts[p], o, colour, legend, !seeds_apart,
                              &used, any_val);
        }
    }
    bv_status st = BV_OK;
    if (np == 0)
        st = bv_error_set(err, BV_ERR_INVALID, "none of the runs has the series asked for");
    char title[400];
    if (n == 1)
        snprintf(title, sizeof title, "%s", runs[0].title);
    else /* "a vs b vs c", or a count when the names do not fit */
        for (size_t r = 0, len = 0; r < n; r++) {
            size_t need = strlen(runs[r].label) + (r ? 4 : 0);
            if (len + need >= 100) {
                snprintf(title, sizeof title, "%zu runs compared", n);
                break;
            }
            len += (size_t)snprintf(title + len, sizeof title - len, "%s%s", r ? " vs " : "",
                                    runs[r].label);
        }
    if (st == BV_OK)
        st = write_files(panels, np, o, title, x_label(runs, n, o), png_path, svg_path,
                         err);
    free(panels);
    free(legends);
    return st;
}

bv_status bv_plot_dir(const char *dir, const bv_plot_options *o, bv_error *err)
{
    bv_plot_run run;
    bv_status st = bv_plot_run_load(dir, &run, err);
    if (st != BV_OK)
        return st;
    char png[4200], svg[4200];
    snprintf(png, sizeof png, "%s/curves.png", run.dir);
    snprintf(svg, sizeof svg, "%s/curves.svg", run.dir);
    st = bv_plot_draw_run(&run, o, png, svg, err);
    bv_plot_run_free(&run);
    return st;
}

/* ---- a pipeline's step (bivouac schedule --out) ---- */

#define LANE_H 40
#define TIMELINE_TOP (TITLE_H + 36) /* the legend's row between the title and stage 0 */

typedef struct timeline_ctx {
    const char *title;
    const bv_plot_lane *lanes;
    size_t nlanes;
    double end;
} timeline_ctx;

static void render_timeline(cairo_t *cr, const void *ctx, int w, int h)
{
    const timeline_ctx *t = ctx;
    (void)h;
    static const char *const kinds[] = {"forward", "backward", "update"};
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_set_source_rgb(cr, 0, 0, 0);
    title_at(cr, t->title, w);
    set_font(cr, FONT_LEGEND, false);
    for (int k = 0; k < 3; k++) { /* legend: a swatch and its kind */
        double x = MARGIN_L + 160.0 * k, y = TITLE_H + 10;
        cairo_set_source_rgb(cr, palette[k][0], palette[k][1], palette[k][2]);
        cairo_rectangle(cr, x, y, 22, 16);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, kinds[k], x + 30, y + 8, 0, 0.5);
    }
    axis a = nice_axis(0, t->end > 0 ? t->end : 1, 10, true);
    double x0 = MARGIN_L, x1 = w - MARGIN_R, span = a.hi > 0 ? a.hi : 1;
    double bottom = TIMELINE_TOP + (double)t->nlanes * LANE_H;
    set_font(cr, FONT_TICK, false);
    for (double v = 0; v <= a.hi + a.step * 1e-6; v += a.step) { /* grid and ticks */
        double x = x0 + (x1 - x0) * v / span;
        char tick[32];
        tick_text(v, &a, tick, sizeof tick);
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, x, TIMELINE_TOP);
        cairo_line_to(cr, x, bottom);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, tick, x, bottom + 14, 0.5, 0.5);
    }
    set_font(cr, FONT_LABEL, false);
    text_at(cr, "time (the costs' unit)", (x0 + x1) / 2, bottom + 44, 0.5, 0.5);
    for (size_t l = 0; l < t->nlanes; l++) {
        double y = TIMELINE_TOP + (double)l * LANE_H;
        char name[32];
        snprintf(name, sizeof name, "stage %zu", l);
        set_font(cr, FONT_TICK, false);
        cairo_set_source_rgb(cr, 0, 0, 0);
        text_at(cr, name, x0 - 10, y + LANE_H / 2.0, 1, 0.5);
        for (size_t i = 0; i < t->lanes[l].count; i++) {
            const bv_plot_box *b = &t->lanes[l].boxes[i];
            double bx = x0 + (x1 - x0) * b->start / span;
            double bw = (x1 - x0) * (b->end - b->start) / span;
            if (bw <= 0)
                continue; /* takes no time: nothing to draw */
            const double *c = b->kind >= 0 && b->kind < 3 ? palette[b->kind] : palette[7];
            cairo_set_source_rgb(cr, c[0], c[1], c[2]);
            cairo_rectangle(cr, bx, y + 4, bw, LANE_H - 8);
            cairo_fill_preserve(cr);
            cairo_set_source_rgb(cr, 1, 1, 1);
            cairo_set_line_width(cr, 1.5);
            cairo_stroke(cr);
            if (b->microbatch >= 0 && bw >= 16) {
                char mb[16];
                snprintf(mb, sizeof mb, "%d", b->microbatch);
                text_at(cr, mb, bx + bw / 2, y + LANE_H / 2.0, 0.5, 0.5);
            }
        }
    }
}

bv_status bv_plot_draw_timeline(const char *title, const bv_plot_lane *lanes, size_t nlanes,
                                const char *png_path, const char *svg_path, bv_error *err)
{
    timeline_ctx t = {title, lanes, nlanes, 0};
    for (size_t l = 0; l < nlanes; l++)
        for (size_t i = 0; i < lanes[l].count; i++)
            t.end = fmax(t.end, lanes[l].boxes[i].end);
    int h = TIMELINE_TOP + (int)nlanes * LANE_H + MARGIN_B + 10;
    bv_status st = write_pictures(render_timeline, &t, DEFAULT_WIDTH, h, png_path, svg_path,
                                  err);
    release_fonts();
    return st;
}

const bv_plot_module bv_plot_module_v1 = {
    .version = BV_PLOT_MODULE_VERSION,
    .struct_size = sizeof(bv_plot_module),
    .plot_dir = bv_plot_dir,
    .run_load = bv_plot_run_load,
    .run_free = bv_plot_run_free,
    .draw_compare = bv_plot_draw_compare,
    .tensorboard_dir = bv_plot_tensorboard_dir,
    .draw_timeline = bv_plot_draw_timeline,
};
