/* The series sink (bivouac/series.h): a small table under a mutex, filled by whoever
 * reports and emptied by the training loop after each unit. */
#include <ctype.h>
#include <pthread.h>
#include <string.h>

#include "bivouac/log.h"
#include "series_sink.h"

#define SINK_CAP BV_SERIES_SINK_CAP

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static bv_series_point sink[SINK_CAP];
static size_t sink_count;
static int sink_warned_full;

int bv_series_name_ok(const char *name)
{
    if (!name || !*name || strlen(name) >= BV_SERIES_NAME_MAX)
        return 0;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.')
            return 0;
    return 1;
}

void bv_series_report(const char *name, const char *unit, double value)
{
    if (!bv_series_name_ok(name)) {
        bv_log(BV_LOG_WARN, "series name '%.60s' refused: use letters, digits, '_' and '.' "
               "(at most %d)", name ? name : "(null)", BV_SERIES_NAME_MAX - 1);
        return;
    }
    pthread_mutex_lock(&sink_lock);
    size_t i = 0;
    while (i < sink_count && strcmp(sink[i].name, name) != 0)
        i++;
    if (i == SINK_CAP) {
        int warn = !sink_warned_full;
        sink_warned_full = 1;
        pthread_mutex_unlock(&sink_lock);
        if (warn)
            bv_log(BV_LOG_WARN, "more than %d series reported in one unit; '%s' and later "
                   "ones are dropped", SINK_CAP, name);
        return;
    }
    if (i == sink_count) {
        sink_count++;
        memcpy(sink[i].name, name, strlen(name) + 1);
    }
    size_t n = unit ? strnlen(unit, BV_SERIES_UNIT_MAX - 1) : 0;
    memcpy(sink[i].unit, unit ? unit : "", n);
    sink[i].unit[n] = '\0';
    sink[i].value = value;
    pthread_mutex_unlock(&sink_lock);
}

size_t bv_series_drain(bv_series_point *out, size_t cap)
{
    pthread_mutex_lock(&sink_lock);
    size_t n = sink_count < cap ? sink_count : cap;
    memcpy(out, sink, n * sizeof *out);
    memmove(sink, sink + n, (sink_count - n) * sizeof *sink);
    sink_count -= n;
    pthread_mutex_unlock(&sink_lock);
    return n;
}

size_t bv_series_peek(bv_series_point *out, size_t cap)
{
    pthread_mutex_lock(&sink_lock);
    size_t n = sink_count < cap ? sink_count : cap;
    memcpy(out, sink, n * sizeof *out);
    pthread_mutex_unlock(&sink_lock);
    return n;
}

void bv_series_reset(void)
{
    pthread_mutex_lock(&sink_lock);
    sink_count = 0;
    sink_warned_full = 0;
    pthread_mutex_unlock(&sink_lock);
}
