/* The log sink shared by the core and plugins (log.h). */
#include "bivouac/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A line is one write: the local cloud's readers copy the nodes' output to the same
 * stderr a whole line at a time, without this lock, and a line written in pieces could
 * take one of theirs in its middle. */
void bv_log(bv_log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"debug", "info", "warning", "error"};
    if (level < log_threshold)
        return;
    char small[1024], *line = small;
    int head = snprintf(small, sizeof small, "bivouac: %s: ", names[level]);
    va_list ap;
    va_start(ap, fmt);
    int body = vsnprintf(small + head, sizeof small - (size_t)head, fmt, ap);
    va_end(ap);
    size_t len = body < 0 ? (size_t)head : (size_t)head + (size_t)body;
    if (len + 1 >= sizeof small && (line = malloc(len + 2)) != NULL) {
        memcpy(line, small, (size_t)head);
        va_start(ap, fmt);
        vsnprintf(line + head, len + 1 - (size_t)head, fmt, ap);
        va_end(ap);
    } else if (len + 1 >= sizeof small) { /* no memory: the line cut short */
        line = small;
        len = sizeof small - 2;
    }
    line[len] = '\n';
    pthread_mutex_lock(&log_lock);
    fwrite(line, 1, len + 1, stderr);
    pthread_mutex_unlock(&log_lock);
    if (line != small)
        free(line);
}
