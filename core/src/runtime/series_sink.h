/* The core's side of bivouac/series.h: what was reported since the last drain. */
#ifndef BIVOUAC_SERIES_SINK_H
#define BIVOUAC_SERIES_SINK_H

#include <stddef.h>

#include "bivouac/series.h"

/* Distinct series kept per unit: a plugin reporting more in one unit loses the rest (with
 * one warning) rather than growing the loop's memory without bound. */
#define BV_SERIES_SINK_CAP 64

typedef struct bv_series_point {
    char name[BV_SERIES_NAME_MAX];
    char unit[BV_SERIES_UNIT_MAX];
    double value;
} bv_series_point;

/* Moves up to cap points reported since the last drain into out, in the order their
 * names were first reported; returns how many. Points past cap stay for the next drain. */
size_t bv_series_drain(bv_series_point *out, size_t cap);
/* Copies up to cap of those points into out without removing them; returns how many. */
size_t bv_series_peek(bv_series_point *out, size_t cap);
/* Forgets everything reported (the start of a run). */
void bv_series_reset(void);
/* Is name a valid series name (non-empty; letters, digits, '_', '.')? */
int bv_series_name_ok(const char *name);

#endif
