/* JSON output helpers (json_out.h). */
#include "json_out.h"

#include <math.h>

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0 if the bytes there are not one. */
static int utf8_sequence(const unsigned char *p)
{
    unsigned char c = p[0];
    if (c >= 0xC2 && c <= 0xDF)
        return (p[1] & 0xC0) == 0x80 ? 2 : 0;
    unsigned char lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    int len;
    if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (int i = 2; i < len; i++) /* stops at the terminating NUL, which is not 10xxxxxx */
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

void bv_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) {
                fprintf(f, "\\u%04x", *p);
            } else if (*p < 0x80) {
                fputc(*p, f);
            } else {
                /* JSON text is UTF-8 (RFC 8259 §8.1): a byte that does not start a
                 * well-formed sequence (a file name from a Latin-1 system, say) becomes
                 * U+FFFD, as a decoder would show it. */
                int len = utf8_sequence(p);
                if (len) {
                    fwrite(p, 1, (size_t)len, f);
                    p += len - 1;
                } else {
                    fputs("\\ufffd", f);
                }
            }
        }
    }
    fputc('"', f);
}

void bv_json_number(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.10g", v);
    else
        fputs("null", f);
}

void bv_json_field(FILE *f, const char *key, double v)
{
    fputs(", ", f);
    bv_json_string(f, key);
    fputs(": ", f);
    bv_json_number(f, v);
}
