/* The log sink shared by the core and plugins (log.h). */
#include "bivouac/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static bv_log_level log_threshold = BV_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void bv_log_set_level(bv_log_level level)
{
    log_threshold = level;
}

bv_log_level bv_log_get_level(void)
{
    return log_threshold;
}

void bv_log(bv_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"debug", "info", "warning", "error"};
    if (level < log_threshold)
        return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "bivouac: %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&log_lock);
    va_end(ap);
}
