/* Plots (issue 20): a run's curves render as a PNG of the size the layout promises, not
 * blank; the curves' pixels move when the data does; reported series get their own panel;
 * compare overlays runs; the JSON reader reads what bivouac writes and refuses the rest. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cairo.h>
#include <cmocka.h>

#include <dirent.h>

#include "bivouac/wire.h"
#include "json_read.h"
#include "plot.h"
#include "tensorboard.pb-c.h"
#include "test_files.h"

/* A graph run's metrics.jsonl: n epochs whose losses fall from `start`, accuracies rise. */
static char *write_run(const char *root, const char *name, int n, double start,
                       bool with_series)
{
    char *dir = malloc(4200);
    snprintf(dir, 4200, "%s/%s", root, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    char path[4300];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int e = 1; e <= n; e++) {
        double loss = start * exp(-0.05 * e), acc = 1 - 0.8 * exp(-0.08 * e);
        fprintf(f, "{\"epoch\": %d, \"train_loss\": %.6f, \"train_accuracy\": %.6f, "
                   "\"val_loss\": %.6f, \"val_accuracy\": %.6f, \"test_loss\": %.6f, "
                   "\"test_accuracy\": %.6f, \"lr\": 0.01, \"seconds\": %.3f}\n",
                e, loss * 0.8, acc, loss, acc * 0.95, loss * 1.01, acc * 0.94, e * 0.01);
        if (with_series)
            fprintf(f, "{\"epoch\": %d, \"series\": \"queue_depth\", \"unit\": \"tasks\", "
                       "\"value\": %d, \"seconds\": %.3f}\n", e, e % 7, e * 0.01);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/result.json", dir);
    f = fopen(path, "w");
    fprintf(f, "{\"model\": \"gcn\", \"dataset\": \"cora\", \"experiment\": \"%s\", "
               "\"seed\": 42, \"test_accuracy\": 0.81, \"wall_seconds\": 1.5}\n", name);
    fclose(f);
    return dir;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The PNG's signature and its IHDR size. */
static void expect_png(const char *path, int width, int height)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char head[24];
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    assert_memory_equal(head, "\x89PNG\r\n\x1a\n", 8);
    assert_memory_equal(head + 12, "IHDR", 4);
    assert_int_equal(be32(head + 16), (uint32_t)width);
    assert_int_equal(be32(head + 20), (uint32_t)height);
}

/* The bounding box of the pixels close to colour (r, g, b) in [0, 255], and their count. */
typedef struct box {
    int x0, y0, x1, y1;
    long count;
} box;

static box colour_box(const char *png, int r, int g, int b)
{
    cairo_surface_t *s = cairo_image_surface_create_from_png(png);
    assert_int_equal(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
    int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    int stride = cairo_image_surface_get_stride(s);
    const unsigned char *d = cairo_image_surface_get_data(s);
    box bx = {w, h, -1, -1, 0};
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint32_t px;
            memcpy(&px, d + (size_t)y * (size_t)stride + (size_t)x * 4, 4);
            int pr = (int)(px >> 16 & 255), pg = (int)(px >> 8 & 255), pb = (int)(px & 255);
            if (abs(pr - r) + abs(pg - g) + abs(pb - b) > 30)
                continue;
            bx.count++;
            bx.x0 = x < bx.x0 ? x : bx.x0;
            bx.y0 = y < bx.y0 ? y : bx.y0;
            bx.x1 = x > bx.x1 ? x : bx.x1;
            bx.y1 = y > bx.y1 ? y : bx.y1;
        }
    cairo_surface_destroy(s);
    return bx;
}

/* Distinct pixel values: a blank (one-colour) picture has 1. */
static long distinct_colours(const char *png)
{
    cairo_surface_t *s = cairo_image_surface_create_from_png(png);
    assert_int_equal(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
    int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    int stride = cairo_image_surface_get_stride(s);
    const unsigned char *d = cairo_image_surface_get_data(s);
    static unsigned char seen[1 << 21]; /* 24-bit colours, one bit each */
    memset(seen, 0, sizeof seen);
    long n = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint32_t px;
            memcpy(&px, d + (size_t)y * (size_t)stride + (size_t)x * 4, 4);
            px &= 0xffffff;
            if (!(seen[px >> 3] & (1 << (px & 7)))) {
                seen[px >> 3] |= (unsigned char)(1 << (px & 7));
                n++;
            }
        }
    cairo_surface_destroy(s);
    return n;
}

/* Okabe-Ito blue (train) and bluish green... the train series' colour, 0072B2. */
#define TRAIN_BLUE 0x00, 0x72, 0xb2

static void test_run_renders_png_of_expected_size(void **state)
{
    (void)state;
    char *root = make_temp_dir();
    char *dir = write_run(root, "exp-a", 100, 2.0, false);
    bv_plot_options o = {0};
    bv_error err = {0};
    assert_int_equal(bv_plot_dir(dir, &o, &err), BV_OK);
    char png[4300], svg[4300];
    snprintf(png, sizeof png, "%s/curves.png", dir);
    snprintf(svg, sizeof svg, "%s/curves.svg", dir);
    int w, h;
    bv_plot_size(3, &o, &w, &h); /* loss, accuracy, learning rate */
    assert_int_equal(w, 1200);
    assert_int_equal(h, 56 + 2 * 380);
    expect_png(png, w, h);
    assert_true(distinct_colours(png) > 50); /* text, grid, four colours of curves */
    box train = colour_box(png, TRAIN_BLUE);
    assert_true(train.count > 500);
    FILE *f = fopen(svg, "r");
    assert_non_null(f);
    char head[64] = "";
    assert_non_null(fgets(head, sizeof head, f));
    fclose(f);
    assert_non_null(strstr(head, "<?xml"));
    remove_tree(root);
    free(root);
    free(dir);
}

/* Overlaid on one x-axis, a run of 50 epochs ends half way across a run of 100: its
 * pixels stop where its data does. */
static void test_curves_move_with_the_data(void **state)
{
    (void)state;
    char *root = make_temp_dir();
    char *full = write_run(root, "full", 100, 2.0, false);
    char *half = write_run(root, "half", 50, 1.0, false); /* apart from full's curve */
    bv_plot_run runs[2];
    bv_error err = {0};
    assert_int_equal(bv_plot_run_load(full, &runs[0], &err), BV_OK);
    assert_int_equal(bv_plot_run_load(half, &runs[1], &err), BV_OK);
    const char *names[] = {"train_loss"};
    bv_plot_options o = {.series = names, .nseries = 1, .no_legend = true};
    char png[4300];
    snprintf(png, sizeof png, "%s/cmp.png", root);
    assert_int_equal(bv_plot_draw_compare(runs, 2, &o, png, NULL, &err), BV_OK);
    expect_png(png, 800, 56 + 380); /* one panel */
    box bf = colour_box(png, TRAIN_BLUE), bh = colour_box(png, 0xe6, 0x9f, 0x00);
    assert_true(bf.count > 300 && bh.count > 150);
    assert_true(abs(bf.x0 - bh.x0) <= 3);              /* both start at epoch 1 */
    int mid = bf.x0 + (bf.x1 - bf.x0) * 49 / 99;        /* epoch 50 on the shared axis */
    assert_true(abs(bh.x1 - mid) <= 4);
    /* --x time: the same picture against seconds (0.01 s an epoch) ends the same way */
    o.x = BV_PLOT_X_TIME;
    assert_int_equal(bv_plot_draw_compare(runs, 2, &o, png, NULL, &err), BV_OK);
    box tf = colour_box(png, TRAIN_BLUE), th = colour_box(png, 0xe6, 0x9f, 0x00);
    assert_true(abs(th.x1 - (tf.x0 + (tf.x1 - tf.x0) * 49 / 99)) <= 4);
    bv_plot_run_free(&runs[0]);
    bv_plot_run_free(&runs[1]);
    remove_tree(root);
    free(root);
    free(full);
    free(half);
}

/* Moving the data moves the pixels: the lowest point of the train loss in a run whose
 * loss ends higher relative to its start sits higher in the picture. */
static void test_pixel_extent_follows_values(void **state)
{
    (void)state;
    char *root = make_temp_dir();
    char *dirs[2];
    for (int k = 0; k < 2; k++) {
        char name[16];
        snprintf(name, sizeof name, "r%d", k);
        dirs[k] = malloc(4200);
        snprintf(dirs[k], 4200, "%s/%s", root, name);
        assert_int_equal(mkdir(dirs[k], 0755), 0);
        char path[4300];
        snprintf(path, sizeof path, "%s/metrics.jsonl", dirs[k]);
        FILE *f = fopen(path, "w");
        /* train_loss from 1.0 to 0.6 (k = 0) or to 0.1 (k = 1); a reported series in nats
         * at 0 shares the loss panel, so both pictures' y-axis is 0..1 */
        for (int e = 1; e <= 20; e++) {
            double end = k == 0 ? 0.6 : 0.1;
            double v = 1.0 + (end - 1.0) * (e - 1) / 19.0;
            fprintf(f, "{\"epoch\": %d, \"train_loss\": %.4f, \"seconds\": %d}\n", e, v, e);
        }
        fprintf(f, "{\"epoch\": 1, \"series\": \"floor\", \"unit\": \"nats\", \"value\": 0, "
                   "\"seconds\": 1}\n");
        fclose(f);
    }
    bv_plot_options o = {.no_legend = true};
    bv_error err = {0};
    box bx[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(bv_plot_dir(dirs[k], &o, &err), BV_OK);
        char png[4300];
        snprintf(png, sizeof png, "%s/curves.png", dirs[k]);
        bx[k] = colour_box(png, TRAIN_BLUE);
        assert_true(bx[k].count > 100);
    }
    /* the same top (1.0), and the bottom half an axis (0.5 of about 280 pixels) lower */
    assert_true(abs(bx[0].y0 - bx[1].y0) <= 2);
    int drop = bx[1].y1 - bx[0].y1, axis = (bx[1].y1 - bx[1].y0) * 10 / 9;
    assert_true(abs(drop - axis / 2) <= 4);
    remove_tree(root);
    free(root);
    free(dirs[0]);
    free(dirs[1]);
}

static void test_reported_series_get_a_panel(void **state)
{
    (void)state;
    char *root = make_temp_dir();
    char *dir = write_run(root, "with-series", 30, 2.0, true);
    bv_plot_run run;
    bv_error err = {0};
    assert_int_equal(bv_plot_run_load(dir, &run, &err), BV_OK);
    assert_string_equal(run.index, "epoch");
    assert_string_equal(run.title, "with-series: gcn on cora, seed 42");
    const bv_plot_series *q = bv_plot_run_find(&run, "queue_depth");
    assert_non_null(q);
    assert_string_equal(q->unit, "tasks");
    assert_int_equal(q->n, 30);
    assert_true(q->y[6] == 0 && q->y[5] == 6);
    const bv_plot_series *acc = bv_plot_run_find(&run, "val_accuracy");
    assert_string_equal(acc->unit, "%"); /* fractions drawn in percent */
    assert_true(acc->y[29] > 1 && acc->y[29] <= 100);
    bv_plot_options o = {0};
    char png[4300];
    snprintf(png, sizeof png, "%s/curves.png", dir);
    assert_int_equal(bv_plot_draw_run(&run, &o, png, NULL, &err), BV_OK);
    expect_png(png, 1200, 56 + 2 * 380); /* four panels: loss, accuracy, lr, tasks */
    bv_plot_run_free(&run);
    remove_tree(root);
    free(root);
    free(dir);
}

static void test_compare_two_runs(void **state)
{
    (void)state;
    char *root = make_temp_dir();
    char *a = write_run(root, "a", 60, 2.0, false);
    char *b = write_run(root, "b", 40, 1.0, false);
    bv_plot_run runs[2];
    bv_error err = {0};
    assert_int_equal(bv_plot_run_load(a, &runs[0], &err), BV_OK);
    assert_int_equal(bv_plot_run_load(b, &runs[1], &err), BV_OK);
    char png[4300];
    snprintf(png, sizeof png, "%s/cmp.png", root);
    bv_plot_options o = {0};
    assert_int_equal(bv_plot_draw_compare(runs, 2, &o, png, NULL, &err), BV_OK);
    expect_png(png, 1200, 56 + 380); /* val loss, val accuracy */
    /* run a in blue, run b in orange: both drawn */
    assert_true(colour_box(png, TRAIN_BLUE).count > 300);
    assert_true(colour_box(png, 0xe6, 0x9f, 0x00).count > 300);
    const char *names[] = {"no_such_series"};
    o.series = names;
    o.nseries = 1;
    assert_int_equal(bv_plot_draw_compare(runs, 2, &o, png, NULL, &err), BV_ERR_INVALID);
    bv_plot_run_free(&runs[0]);
    bv_plot_run_free(&runs[1]);
    remove_tree(root);
    free(root);
    free(a);
    free(b);
}

static void test_missing_and_damaged_metrics(void **state)
{
    (void)state;
    char *root = make_temp_dir();
    bv_plot_run run;
    bv_error err = {0};
    assert_int_equal(bv_plot_run_load(root, &run, &err), BV_ERR_IO);
    char path[4300];
    snprintf(path, sizeof path, "%s/metrics.jsonl", root);
    FILE *f = fopen(path, "w");
    fputs("{\"epoch\": 1, \"train_loss\": 1}\n{\"epoch\": 2, \"train_loss\": \n"
          "{\"epoch\": 3, \"train_loss\": 1}\n", f);
    fclose(f);
    assert_int_equal(bv_plot_run_load(root, &run, &err), BV_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "metrics.jsonl:2: not a JSON object"));
    /* a last line cut short (a killed run) is skipped */
    f = fopen(path, "w");
    fputs("{\"epoch\": 1, \"train_loss\": 1}\n{\"epoch\": 2, \"train_lo", f);
    fclose(f);
    assert_int_equal(bv_plot_run_load(root, &run, &err), BV_OK);
    assert_int_equal(bv_plot_run_find(&run, "train_loss")->n, 1);
    bv_plot_run_free(&run);
    remove_tree(root);
    free(root);
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t masked(const void *d, size_t n)
{
    uint32_t c = bv_crc32c(0, d, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* --tensorboard: TFRecord frames whose checksums hold, a file_version first, then one
 * scalar per point of every series, at its epoch. */
static void test_tensorboard_events(void **state)
{
    (void)state;
    assert_int_equal(bv_crc32c(0, "123456789", 9), 0xe3069283u); /* the standard check */
    char *root = make_temp_dir();
    char *dir = write_run(root, "tb", 10, 2.0, true);
    char out[4300];
    snprintf(out, sizeof out, "%s/events", root);
    bv_error err = {0};
    assert_int_equal(bv_plot_tensorboard_dir(dir, out, &err), BV_OK);
    DIR *d = opendir(out);
    assert_non_null(d);
    struct dirent *e;
    char path[4600] = "";
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "events.out.tfevents.", 20))
            snprintf(path, sizeof path, "%s/%s", out, e->d_name);
    closedir(d);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char head[12], buf[512], tail[4];
    int records = 0, loss_points = 0, queue_points = 0;
    while (fread(head, 1, 12, f) == 12) {
        uint64_t len = le32(head) | (uint64_t)le32(head + 4) << 32;
        assert_true(len < sizeof buf);
        assert_int_equal(le32(head + 8), masked(head, 8));
        assert_int_equal(fread(buf, 1, len, f), len);
        assert_int_equal(fread(tail, 1, 4, f), 4);
        assert_int_equal(le32(tail), masked(buf, len));
        Bvtb__Event *ev = bvtb__event__unpack(NULL, len, buf);
        assert_non_null(ev);
        if (records == 0) {
            assert_string_equal(ev->file_version, "brain.Event:2");
        } else {
            assert_non_null(ev->summary);
            assert_int_equal(ev->summary->n_value, 1);
            const Bvtb__SummaryValue *v = ev->summary->value[0];
            assert_true(ev->step >= 1 && ev->step <= 10);
            if (!strcmp(v->tag, "train_loss")) {
                loss_points++;
                assert_true(fabs(v->simple_value - 1.6 * exp(-0.05 * (double)ev->step)) < 1e-5);
            }
            queue_points += !strcmp(v->tag, "queue_depth");
        }
        bvtb__event__free_unpacked(ev, NULL);
        records++;
    }
    fclose(f);
    assert_int_equal(loss_points, 10);
    assert_int_equal(queue_points, 10);
    assert_int_equal(records, 1 + 10 * 8); /* 7 record fields and the reported series */
    remove_tree(root);
    free(root);
    free(dir);
}

static void test_json_reader(void **state)
{
    (void)state;
    const char *ok = " {\"a\": 1.5e2, \"b\": [true, false, null, \"x\\u00e9\\n\"], "
                     "\"c\": {\"d\": -0.25}} ";
    bv_json v;
    assert_true(bv_json_parse(ok, strlen(ok), &v));
    assert_true(bv_json_num(&v, "a") == 150);
    const bv_json *b = bv_json_get(&v, "b");
    assert_int_equal(b->count, 4);
    assert_string_equal(b->items[3].string, "x\xc3\xa9\n");
    assert_true(bv_json_num(bv_json_get(&v, "c"), "d") == -0.25);
    assert_true(isnan(bv_json_num(&v, "missing")));
    bv_json_free(&v);
    static const char *const bad[] = {"", "{", "{\"a\" 1}", "[1,]", "{\"a\": 1} x", "nul",
                                      "\"\\x\"", "[1 2]", "{1: 2}", "--1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(bv_json_parse(bad[i], strlen(bad[i]), &v));
    char deep[200];
    memset(deep, '[', sizeof deep);
    assert_false(bv_json_parse(deep, sizeof deep, &v)); /* depth capped */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_renders_png_of_expected_size),
        cmocka_unit_test(test_curves_move_with_the_data),
        cmocka_unit_test(test_pixel_extent_follows_values),
        cmocka_unit_test(test_reported_series_get_a_panel),
        cmocka_unit_test(test_compare_two_runs),
        cmocka_unit_test(test_missing_and_damaged_metrics),
        cmocka_unit_test(test_tensorboard_events),
        cmocka_unit_test(test_json_reader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
