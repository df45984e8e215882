/* Error values and positioned diagnostics (error.h). */
#include "bivouac/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"

bv_status bv_error_set(bv_error *err, bv_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

void bv_error_clear(bv_error *err)
{
    if (err) {
        err->status = BV_OK;
        err->msg[0] = '\0';
    }
}

void bv_diag_init(bv_diag *d)
{
    memset(d, 0, sizeof *d);
}

void bv_diag_free(bv_diag *d)
{
    for (size_t i = 0; i < d->count; i++) {
        free(d->entries[i].file);
        free(d->entries[i].msg);
    }
    free(d->entries);
    memset(d, 0, sizeof *d);
}

void bv_diag_vadd(bv_diag *d, const bv_pos *pos, const char *fmt, va_list ap)
{
    if (!bv_grow((void **)&d->entries, &d->cap, d->count, sizeof *d->entries, 8))
        return; /* out of memory: the diagnostic is dropped, the count stays honest */
    char buf[BV_ERROR_MSG_MAX];
    vsnprintf(buf, sizeof buf, fmt, ap);
    bv_diag_entry *e = &d->entries[d->count++];
    e->file = (pos && pos->file) ? strdup(pos->file) : NULL;
    e->line = pos ? pos->line : 0;
    e->col = pos ? pos->col : 0;
    e->msg = strdup(buf);
}

void bv_diag_add(bv_diag *d, const bv_pos *pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bv_diag_vadd(d, pos, fmt, ap);
    va_end(ap);
}

void bv_diag_format(const bv_diag *d, size_t i, char *buf, size_t len)
{
    const bv_diag_entry *e = &d->entries[i];
    if (e->file && e->line > 0)
        snprintf(buf, len, "%s:%d:%d: error: %s", e->file, e->line, e->col, e->msg);
    else if (e->file)
        snprintf(buf, len, "%s: error: %s", e->file, e->msg);
    else
        snprintf(buf, len, "error: %s", e->msg);
}
