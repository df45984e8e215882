/* A run's series as a TensorBoard event file (plot.h): TFRecord framing (length, masked
 * CRC-32C of the length, the Event, masked CRC-32C of the Event) around protobuf-c
 * encoded Events, one scalar each, tagged with the series' name. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bivouac/wire.h"
#include "plot.h"
#include "tensorboard.pb-c.h"

/* TFRecord's checksum: CRC-32C, rotated and offset so that a CRC of data that holds CRCs
 * is not itself trivially a CRC (tensorflow/core/lib/hash/crc32c.h, Mask). */
static uint32_t masked_crc(const void *data, size_t len)
{
    uint32_t crc = bv_crc32c(0, data, len);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static int write_record(FILE *f, const Bvtb__Event *ev)
{
    size_t n = bvtb__event__get_packed_size(ev);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return -1;
    bvtb__event__pack(ev, buf);
    uint8_t head[12];
    uint64_t len = n;
    for (int i = 0; i < 8; i++) /* little-endian, as TFRecord has it */
        head[i] = (uint8_t)(len >> (8 * i));
    uint32_t lc = masked_crc(head, 8), dc = masked_crc(buf, n);
    for (int i = 0; i < 4; i++)
        head[8 + i] = (uint8_t)(lc >> (8 * i));
    uint8_t tail[4];
    for (int i = 0; i < 4; i++)
        tail[i] = (uint8_t)(dc >> (8 * i));
    int rc = fwrite(head, 1, 12, f) == 12 && fwrite(buf, 1, n, f) == n &&
                     fwrite(tail, 1, 4, f) == 4
                 ? 0
                 : -1;
    free(buf);
    return rc;
}

bv_status bv_plot_tensorboard(const bv_plot_run *run, const char *dir, bv_error *err)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return bv_error_set(err, BV_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    if (run->nparts) { /* a --repeat run: one subdirectory a seed, as TensorBoard groups runs */
        for (size_t i = 0; i < run->nparts; i++) {
            char sub[4400];
            snprintf(sub, sizeof sub, "%s/%s", dir, run->parts[i].label);
            bv_status st = bv_plot_tensorboard(&run->parts[i], sub, err);
            if (st != BV_OK)
                return st;
        }
        return BV_OK;
    }
    char host[64] = "bivouac";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    double t0 = (double)time(NULL);
    char path[4400];
    snprintf(path, sizeof path, "%s/events.out.tfevents.%.0f.%s", dir, t0, host);
    FILE *f = fopen(path, "wb");
    if (!f)
        return bv_error_set(err, BV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    Bvtb__Event ev = BVTB__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = t0;
    ev.file_version = "brain.Event:2";
    int rc = write_record(f, &ev);
    /* the run's own clock: the wall time is when the point was measured, from the end of
     * the run backwards */
    double end = 0;
    for (size_t s = 0; s < run->nseries; s++)
        for (size_t i = 0; i < run->series[s].n; i++)
            if (isfinite(run->series[s].x_time[i]))
                end = fmax(end, run->series[s].x_time[i]);
    for (size_t s = 0; s < run->nseries && rc == 0; s++) {
        const bv_plot_series *se = &run->series[s];
        for (size_t i = 0; i < se->n && rc == 0; i++) {
            Bvtb__SummaryValue v = BVTB__SUMMARY_VALUE__INIT;
            v.tag = (char *)se->name;
            v.has_simple_value = 1;
            v.simple_value = (float)se->y[i];
            Bvtb__SummaryValue *vs[1] = {&v};
            Bvtb__Summary sum = BVTB__SUMMARY__INIT;
            sum.n_value = 1;
            sum.value = vs;
            Bvtb__Event e = BVTB__EVENT__INIT;
            e.has_wall_time = 1;
            e.wall_time = t0 - end + (isfinite(se->x_time[i]) ? se->x_time[i] : 0);
            e.has_step = 1;
            e.step = (int64_t)se->x_unit[i];
            e.summary = &sum;
            rc = write_record(f, &e);
        }
    }
    if (fclose(f) != 0)
        rc = -1;
    if (rc != 0)
        return bv_error_set(err, BV_ERR_IO, "cannot write %s", path);
    return BV_OK;
}

bv_status bv_plot_tensorboard_dir(const char *run_dir, const char *dir, bv_error *err)
{
    bv_plot_run run;
    bv_status st = bv_plot_run_load(run_dir, &run, err);
    if (st != BV_OK)
        return st;
    st = bv_plot_tensorboard(&run, dir, err);
    bv_plot_run_free(&run);
    return st;
}
