/* Export signatures and bv_export_error (export_sig.h). */
#include "export_sig.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool bv_export_sig_parse(const char *sig, unsigned abi_minor, bv_export_sig *out, char *why,
                         size_t why_len)
{
    memset(out, 0, sizeof *out);
    if (!sig) {
        snprintf(why, why_len, "no signature");
        return false;
    }
    const char *s = sig;
    if (*s == '!') {
        if (abi_minor < 5) {
            snprintf(why, why_len, "'!' (effectful) needs plugin ABI 1.5");
            return false;
        }
        out->effectful = true;
        s++;
    }
    const char *returns = abi_minor >= 5 ? "vidbs" : "vidsp";
    const char *takes = abi_minor >= 5 ? "idbs" : "idsp";
    if (!*s || !strchr(returns, *s)) {
        if (*s)
            snprintf(why, why_len, "unknown return type '%c' (expected one of %s)", *s, returns);
        else
            snprintf(why, why_len, "missing return type");
        return false;
    }
    out->ret = *s++;
    if (*s != ':') {
        snprintf(why, why_len, "expected ':' after the return type");
        return false;
    }
    s++;
    for (; *s; s++) {
        if (!strchr(takes, *s)) {
            snprintf(why, why_len, "unknown argument type '%c' at position %d (expected one of %s)",
                     *s, (int)(s - sig) + 1, takes);
            return false;
        }
        if (out->nargs == BV_EXPORT_MAX_ARGS) {
            snprintf(why, why_len, "more than %d arguments", BV_EXPORT_MAX_ARGS);
            return false;
        }
        out->args[out->nargs++] = *s;
    }
    out->has_pointer = out->ret == 'p' || memchr(out->args, 'p', (size_t)out->nargs);
    if (out->effectful && out->ret != 'v') {
        snprintf(why, why_len, "an effectful ('!') export returns nothing ('v')");
        return false;
    }
    return true;
}

bool bv_export_name_ok(const char *name)
{
    if (!name || !*name || strlen(name) > 63 || (*name >= '0' && *name <= '9'))
        return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return false;
    return true;
}

static _Thread_local char export_error[256];
static _Thread_local bool export_failed;

void bv_export_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(export_error, sizeof export_error, fmt, ap);
    va_end(ap);
    export_failed = true;
}

void bv_export_error_clear(void)
{
    export_failed = false;
    export_error[0] = '\0';
}

const char *bv_export_error_message(void)
{
    return export_failed ? export_error : NULL;
}
