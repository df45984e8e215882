/* `bivouac plot RUN_DIR` (the run's curves, as a run draws them at its end) and
 * `bivouac compare RUN_DIR...` (a table of the runs' results and their chosen series
 * overlaid in one picture). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_read.h"
#include "plot.h"

#define MAX_RUNS 32
#define MAX_SERIES 16

static int parse_x(const char *v, bv_plot_options *o)
{
    if (!strcmp(v, "time"))
        o->x = BV_PLOT_X_TIME;
    else if (!strcmp(v, "unit") || !strcmp(v, "epoch") || !strcmp(v, "step"))
        o->x = BV_PLOT_X_UNIT;
    else
        return bv_cli_fail(BV_EXIT_USAGE, "--x takes 'step' (or 'epoch') or 'time', got '%s'",
                           v);
    return 0;
}

int bv_cli_plot(int argc, char **argv)
{
    bv_plot_options o = {0};
    const char *dir = NULL, *tensorboard = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tensorboard")) {
            if (i + 1 >= argc)
                return bv_cli_fail(BV_EXIT_USAGE, "--tensorboard needs a value");
            tensorboard = argv[++i];
        } else if (!strcmp(argv[i], "--x")) {
            if (i + 1 >= argc)
                return bv_cli_fail(BV_EXIT_USAGE, "--x needs a value");
            if (parse_x(argv[++i], &o))
                return BV_EXIT_USAGE;
        } else if (argv[i][0] == '-') {
            return bv_cli_fail(BV_EXIT_USAGE, "unknown option '%s' (see bivouac --help)",
                               argv[i]);
        } else if (!dir) {
            dir = argv[i];
        } else {
            return bv_cli_fail(BV_EXIT_USAGE, "unexpected argument '%s'", argv[i]);
        }
    }
    if (!dir)
        return bv_cli_fail(BV_EXIT_USAGE, "plot needs a run directory: bivouac plot RUN_DIR");
    const char *why = "";
    const bv_plot_module *m = bv_cli_plot_module(&why);
    if (!m)
        return bv_cli_fail(BV_EXIT_FAILED, "cannot draw: the plot module cannot be loaded: %s",
                           why);
    bv_error err = {0};
    if (m->plot_dir(dir, &o, &err) != BV_OK)
        return bv_cli_fail(err.status == BV_ERR_NOMEM ? BV_EXIT_FAILED : BV_EXIT_USAGE, "%s",
                           err.msg);
    printf("%s/curves.png, %s/curves.svg\n", dir, dir);
    if (tensorboard) {
        if (m->tensorboard_dir(dir, tensorboard, &err) != BV_OK)
            return bv_cli_fail(BV_EXIT_FAILED, "%s", err.msg);
        printf("%s/events.out.tfevents.*\n", tensorboard);
    }
    return BV_EXIT_OK;
}

/* ---- the table ---- */

/* Columns, in this order, when at least one run has them. */
static const char *const columns[] = {"test_accuracy", "best_val_accuracy", "val_accuracy",
                                      "val_loss", "train_loss", "epochs", "steps",
                                      "tokens_per_second", "wall_seconds"};
#define NCOLUMNS (sizeof columns / sizeof columns[0])

typedef struct result_row {
    char label[160];
    char model[64], dataset[96];
    size_t seeds;
    double mean[NCOLUMNS], std[NCOLUMNS];
} result_row;

static bool read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *grown = realloc(buf, cap *= 2);
        if (!grown) {
            free(buf);
            buf = NULL;
        } else {
            buf = grown;
        }
    }
    fclose(f);
    *text = buf;
    *len = n;
    return buf != NULL;
}

/* One run's row: a single run's values, or over a --repeat run's seeds (its "runs") the
 * mean and the population standard deviation, as result.json's own summary has them. */
static int read_row(const char *dir, const char *label, result_row *row)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/result.json", dir);
    char *text;
    size_t len;
    if (!read_file(path, &text, &len))
        return bv_cli_fail(BV_EXIT_USAGE, "%s: cannot read it (is %s a finished run?)", path,
                           dir);
    bv_json v;
    bool ok = bv_json_parse(text, len, &v);
    free(text);
    if (!ok || v.type != BV_JSON_OBJECT)
        return bv_cli_fail(BV_EXIT_USAGE, "%s: not a result.json", path);
    memset(row, 0, sizeof *row);
    snprintf(row->label, sizeof row->label, "%s", label);
    snprintf(row->model, sizeof row->model, "%s",
             bv_json_str(&v, "model") ? bv_json_str(&v, "model") : "?");
    snprintf(row->dataset, sizeof row->dataset, "%s",
             bv_json_str(&v, "dataset") ? bv_json_str(&v, "dataset") : "?");
    const bv_json *runs = bv_json_get(&v, "runs");
    bool repeat = runs && runs->type == BV_JSON_ARRAY && runs->count > 0;
    row->seeds = repeat ? runs->count : 1;
    for (size_t c = 0; c < NCOLUMNS; c++) {
        double sum = 0, sq = 0;
        for (size_t i = 0; i < row->seeds; i++)
            sum += bv_json_num(repeat ? &runs->items[i] : &v, columns[c]);
        row->mean[c] = sum / (double)row->seeds;
        for (size_t i = 0; i < row->seeds; i++) {
            double d = bv_json_num(repeat ? &runs->items[i] : &v, columns[c]) - row->mean[c];
            sq += d * d;
        }
        row->std[c] = sqrt(sq / (double)row->seeds);
    }
    bv_json_free(&v);
    return 0;
}

static void cell(char *buf, size_t len, const char *column, double mean, double std,
                 size_t seeds)
{
    bool percent = strstr(column, "accuracy") != NULL;
    bool whole = !strcmp(column, "epochs") || !strcmp(column, "steps");
    double scale = percent ? 100 : 1;
    int decimals = percent ? 2 : whole ? 1 : strstr(column, "loss") ? 4 : 2;
    if (isnan(mean))
        snprintf(buf, len, "-");
    else if (seeds > 1)
        snprintf(buf, len, "%.*f ± %.*f", decimals, mean * scale, decimals, std * scale);
    else
        snprintf(buf, len, "%.*f", whole ? 0 : decimals, mean * scale);
}

/* Display width of a UTF-8 string (every code point one column: "±" is two bytes). */
static int columns_of(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static void print_padded(const char *s, int width, bool left)
{
    int pad = width - columns_of(s);
    if (!left)
        for (int i = 0; i < pad; i++)
            putchar(' ');
    fputs(s, stdout);
    if (left)
        for (int i = 0; i < pad; i++)
            putchar(' ');
}

static void print_table(const result_row *rows, size_t n)
{
    bool used[NCOLUMNS] = {0};
    for (size_t c = 0; c < NCOLUMNS; c++)
        for (size_t r = 0; r < n; r++)
            used[c] |= !isnan(rows[r].mean[c]);
    char cells[MAX_RUNS][NCOLUMNS][64];
    int width[NCOLUMNS + 3] = {3, 5, 7};
    static const char *const head[] = {"run", "model", "dataset"};
    for (size_t r = 0; r < n; r++) {
        int w0 = columns_of(rows[r].label) + (rows[r].seeds > 1 ? 12 : 0);
        width[0] = w0 > width[0] ? w0 : width[0];
        int w1 = columns_of(rows[r].model), w2 = columns_of(rows[r].dataset);
        width[1] = w1 > width[1] ? w1 : width[1];
        width[2] = w2 > width[2] ? w2 : width[2];
    }
    for (size_t c = 0; c < NCOLUMNS; c++) {
        width[c + 3] = columns_of(columns[c]);
        for (size_t r = 0; r < n; r++) {
            cell(cells[r][c], sizeof cells[r][c], columns[c], rows[r].mean[c], rows[r].std[c],
                 rows[r].seeds);
            int w = columns_of(cells[r][c]);
            width[c + 3] = w > width[c + 3] ? w : width[c + 3];
        }
    }
    for (int k = 0; k < 3; k++) {
        print_padded(head[k], width[k], true);
        if (k < 2)
            fputs("  ", stdout);
    }
    for (size_t c = 0; c < NCOLUMNS; c++)
        if (used[c]) {
            fputs("  ", stdout);
            print_padded(columns[c], width[c + 3], false);
        }
    putchar('\n');
    for (size_t r = 0; r < n; r++) {
        char label[200];
        if (rows[r].seeds > 1)
            snprintf(label, sizeof label, "%s (%zu seeds)", rows[r].label, rows[r].seeds);
        else
            snprintf(label, sizeof label, "%s", rows[r].label);
        print_padded(label, width[0], true);
        fputs("  ", stdout);
        print_padded(rows[r].model, width[1], true);
        fputs("  ", stdout);
        print_padded(rows[r].dataset, width[2], true);
        for (size_t c = 0; c < NCOLUMNS; c++)
            if (used[c]) {
                fputs("  ", stdout);
                print_padded(cells[r][c], width[c + 3], false);
            }
        putchar('\n');
    }
    puts("accuracies in %; losses in nats; mean ± standard deviation over a run's seeds");
}

int bv_cli_compare(int argc, char **argv)
{
    bv_plot_options o = {0};
    const char *dirs[MAX_RUNS];
    const char *series[MAX_SERIES];
    char *series_buf = NULL;
    size_t n = 0;
    const char *out = "compare.png";
    int code = BV_EXIT_OK;
    for (int i = 1; i < argc && !code; i++) {
        const char *arg = argv[i];
        bool takes = !strcmp(arg, "--x") || !strcmp(arg, "--series") || !strcmp(arg, "--out");
        if (takes && i + 1 >= argc) {
            code = bv_cli_fail(BV_EXIT_USAGE, "%s needs a value", arg);
        } else if (!strcmp(arg, "--x")) {
            code = parse_x(argv[++i], &o);
        } else if (!strcmp(arg, "--out")) {
            out = argv[++i];
        } else if (!strcmp(arg, "--series")) {
            free(series_buf);
            series_buf = strdup(argv[++i]);
            o.nseries = 0;
            for (char *save = NULL, *t = strtok_r(series_buf, ",", &save); t && !code;
                 t = strtok_r(NULL, ",", &save)) {
                if (o.nseries == MAX_SERIES)
                    code = bv_cli_fail(BV_EXIT_USAGE, "--series names at most %d series",
                                       MAX_SERIES);
                else
                    series[o.nseries++] = t;
            }
            o.series = series;
        } else if (arg[0] == '-') {
            code = bv_cli_fail(BV_EXIT_USAGE, "unknown option '%s' (see bivouac --help)", arg);
        } else if (n == MAX_RUNS) {
            code = bv_cli_fail(BV_EXIT_USAGE, "compare takes at most %d runs", MAX_RUNS);
        } else {
            dirs[n++] = arg;
        }
    }
    size_t len = strlen(out);
    if (!code && (len < 5 || strcmp(out + len - 4, ".png") != 0))
        code = bv_cli_fail(BV_EXIT_USAGE, "--out names a .png file (the .svg goes beside it), "
                           "got '%s'", out);
    if (!code && n == 0)
        code = bv_cli_fail(BV_EXIT_USAGE, "compare needs run directories: bivouac compare "
                           "RUN_DIR...");
    const char *why = "";
    const bv_plot_module *m = code ? NULL : bv_cli_plot_module(&why);
    if (!code && !m)
        code = bv_cli_fail(BV_EXIT_FAILED, "cannot draw: the plot module cannot be loaded: %s",
                           why);
    bv_plot_run *runs = code ? NULL : calloc(n, sizeof *runs);
    result_row *rows = code ? NULL : calloc(n, sizeof *rows);
    if (!code && (!runs || !rows))
        code = bv_cli_fail(BV_EXIT_FAILED, "out of memory");
    size_t loaded = 0;
    for (size_t i = 0; i < n && !code; i++) {
        bv_error err = {0};
        if (m->run_load(dirs[i], &runs[i], &err) != BV_OK)
            code = bv_cli_fail(err.status == BV_ERR_NOMEM ? BV_EXIT_FAILED : BV_EXIT_USAGE,
                               "%s", err.msg);
        else
            loaded++;
        if (!code)
            code = read_row(dirs[i], runs[i].label, &rows[i]);
    }
    if (!code) {
        print_table(rows, n);
        char svg[4200];
        snprintf(svg, sizeof svg, "%.*s.svg", (int)(len - 4), out);
        bv_error err = {0};
        if (m->draw_compare(runs, n, &o, out, svg, &err) != BV_OK)
            code = bv_cli_fail(err.status == BV_ERR_INVALID ? BV_EXIT_USAGE : BV_EXIT_FAILED,
                               "%s", err.msg);
        else
            printf("-> %s, %s\n", out, svg);
    }
    for (size_t i = 0; i < loaded; i++)
        m->run_free(&runs[i]);
    free(runs);
    free(rows);
    free(series_buf);
    return code;
}
