/* Writing JSON by hand, safely: string escaping and numbers that parse back. */
#ifndef BIVOUAC_JSON_OUT_H
#define BIVOUAC_JSON_OUT_H

#include <stdio.h>

/* Writes s as a JSON string literal, quotes included; bytes that are not UTF-8 become
 * \ufffd, so the output is always valid JSON. */
void bv_json_string(FILE *f, const char *s);
/* Writes a finite double with 10 significant digits, or null. */
void bv_json_number(FILE *f, double v);
/* Writes `, "key": <number>` (a field after the first of an object). */
void bv_json_field(FILE *f, const char *key, double v);

#endif
