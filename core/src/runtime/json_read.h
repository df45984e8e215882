/* Reading the JSON bivouac writes (metrics.jsonl lines, result.json) into a small tree:
 * enough JSON for files we wrote ourselves, checked so a damaged file is an error. */
#ifndef BIVOUAC_JSON_READ_H
#define BIVOUAC_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { BV_JSON_NULL, BV_JSON_BOOL, BV_JSON_NUMBER, BV_JSON_STRING, BV_JSON_ARRAY,
               BV_JSON_OBJECT } bv_json_type;

typedef struct bv_json bv_json;
struct bv_json {
    bv_json_type type;
    double number;  /* NUMBER; BOOL as 0/1 */
    char *string;   /* STRING */
    char **keys;    /* OBJECT: keys[i] names items[i] */
    bv_json *items; /* ARRAY, OBJECT */
    size_t count;
};

/* Parses text[0..len) as one JSON value (white space around it allowed) into *out.
 * Returns false (and *out is freed) on malformed input or out of memory. */
bool bv_json_parse(const char *text, size_t len, bv_json *out);
void bv_json_free(bv_json *v);
/* The member named key of an object, or NULL. */
const bv_json *bv_json_get(const bv_json *obj, const char *key);
/* The number under key, or nan when absent or not a number (null reads as nan too). */
double bv_json_num(const bv_json *obj, const char *key);
/* The string under key, or NULL. */
const char *bv_json_str(const bv_json *obj, const char *key);

#endif
