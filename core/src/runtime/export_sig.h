/* Export signatures (plugin.h, bv_export): the parser that the registry uses to check a
 * descriptor at load and the policy bridge uses to convert arguments, and the
 * thread-local message bv_export_error leaves for the bridge. */
#ifndef BIVOUAC_EXPORT_SIG_H
#define BIVOUAC_EXPORT_SIG_H

#include <stdbool.h>
#include <stddef.h>

#include "bivouac/plugin.h"

typedef struct bv_export_sig {
    bool effectful;                  /* "!" prefix */
    bool has_pointer;                /* a 'p' (ABI <= 1.4 only): never callable */
    char ret;                        /* 'v', 'i', 'd', 'b', 's' or 'p' */
    int nargs;
    char args[BV_EXPORT_MAX_ARGS];   /* 'i', 'd', 'b', 's' or 'p' */
} bv_export_sig;

/* Parses a signature as a plugin built for ABI 1.abi_minor may write it. On failure
 * writes why (e.g. "unknown type 'x' at position 3") and returns false. */
bool bv_export_sig_parse(const char *sig, unsigned abi_minor, bv_export_sig *out, char *why,
                         size_t why_len);

/* An export name: [a-z_][a-z0-9_]*, 1 to 63 bytes (a Lua identifier, so that a policy can
 * write plugins.compute.cpu.threads). */
bool bv_export_name_ok(const char *name);

/* The bridge's side of bv_export_error: clear before a call, read after it (NULL if the
 * export did not fail). The message lives in thread-local storage. */
void bv_export_error_clear(void);
const char *bv_export_error_message(void);

#endif
