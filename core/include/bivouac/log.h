/* Logging from the core and from plugins: one sink, chosen by the CLI. */
#ifndef BIVOUAC_LOG_H
#define BIVOUAC_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bv_log_level {
    BV_LOG_DEBUG = 0,
    BV_LOG_INFO = 1,
    BV_LOG_WARN = 2,
    BV_LOG_ERROR = 3
} bv_log_level;

/* Writes "bivouac: warning: msg" (etc.) to stderr if level >= the current threshold. */
void bv_log(bv_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bv_log_set_level(bv_log_level level);
bv_log_level bv_log_get_level(void);

#ifdef __cplusplus
}
#endif
#endif
