/* Experiment configs: YAML loaded into a tree that remembers file:line:column for every
 * node, `-s key.path=value` overrides, and checking a section against a plugin's schema. */
#ifndef BIVOUAC_CONFIG_H
#define BIVOUAC_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "bivouac/error.h"
#include "bivouac/options.h"

typedef enum bv_node_kind { BV_NODE_SCALAR, BV_NODE_MAP, BV_NODE_SEQ } bv_node_kind;

/* One YAML node. Every value is text: the schema decides later what it means, except that
 * a quoted one is always a string (YAML's rule), never a number. */
typedef struct bv_node {
    bv_node_kind kind;
    bool quoted;            /* SCALAR: written quoted or as a block (| >), or tagged !!str */
    bv_pos pos;             /* first character of the value; pos.file is owned by the root
                               the node was loaded into, or is the static "<command line>" */
    char *scalar;           /* SCALAR: text ("" for an empty value, plain `~` or `null`),
                               stored in the same allocation as the node */
    size_t count;           /* MAP entries / SEQ items */
    char **keys;            /* MAP: keys[i] */
    bv_pos *key_pos;        /* MAP: position of keys[i] */
    struct bv_node **items; /* MAP values / SEQ items */
    char *owned_file;       /* root only: the file name that pos.file fields point to */
} bv_node;

/* The file name positions carry for values set by `-s` overrides. */
#define BV_CONFIG_CMDLINE "<command line>"

/* Limits on a config (docs/limits.md), each raised by its environment variable. */
#define BV_CONFIG_MAX_BYTES (16u << 20)   /* BIVOUAC_MAX_CONFIG_BYTES: file size */
#define BV_CONFIG_MAX_NODES 1000000u      /* BIVOUAC_MAX_CONFIG_NODES: values in the tree */

/* Loads one YAML document whose top level is a mapping. On failure *out is NULL, every
 * problem found is in diag (always at least one), and the status is BV_ERR_INVALID (bad
 * YAML, a tag other than YAML's core ones, a file that is not regular or over a limit),
 * BV_ERR_IO (file not readable) or BV_ERR_NOMEM. filename (may be NULL: "<string>") is
 * copied. */
bv_status bv_config_load_file(const char *path, bv_node **out, bv_diag *diag);
bv_status bv_config_load_string(const char *text, const char *filename, bv_node **out,
                                bv_diag *diag);
/* The same for text built into the library (the shipped price tables): not user input, so
 * BIVOUAC_MAX_CONFIG_NODES does not apply. */
bv_status bv_config_load_builtin(const char *text, const char *filename, bv_node **out,
                                 bv_diag *diag);
void bv_node_free(bv_node *root);

/* Lookups; NULL when missing or when a step is not the right kind. Path steps are
 * separated by '.'; a step that is a number picks an item of a list. */
const bv_node *bv_node_get(const bv_node *map, const char *key);
const bv_node *bv_node_at_path(const bv_node *root, const char *dotted);

/* Applies "a.b.c=value": replaces or creates the value (creating intermediate mappings).
 * A value written "[..]" or "{..}" is read as YAML flow. Positions of the new nodes have
 * file BV_CONFIG_CMDLINE, line 1 and the column within the assignment. root must be a
 * mapping. On error the tree is unchanged and diag says why. */
bv_status bv_config_override(bv_node *root, const char *assignment, bv_diag *diag);
/* Sets the dotted key to a string scalar of exactly value (quoted: never read as a number
 * or as null), creating the path as bv_config_override does. */
bv_status bv_config_set_string(bv_node *root, const char *key, const char *value,
                               bv_diag *diag);

/* Checks a section against a schema and fills out with one value per option (defaults
 * for what is not set). Keys listed in ignore_keys (NULL-terminated, may be NULL) are
 * skipped. section may be NULL (absent: defaults only) and an empty scalar section
 * (`model:`) counts as an empty mapping. Every problem is added to diag in file order,
 * then missing required keys in schema order; returns BV_ERR_INVALID if there was any,
 * and out is then left empty. PATH values are resolved against the directory of the file
 * that set them. The pos of each value borrows pos.file from the tree: keep the tree
 * alive while using it. */
bv_status bv_config_validate(const bv_node *section, const char *section_name,
                             const bv_option *schema, const char *const *ignore_keys,
                             bv_opts *out, bv_diag *diag);

/* The candidate closest to word (case-insensitive optimal-string-alignment distance, i.e.
 * Levenshtein plus swaps of neighbours), if within max(1, strlen(word) / 3); ties go to
 * the earlier candidate. NULL when nothing is close. */
const char *bv_suggest(const char *word, const char *const *candidates, size_t n);

/* The tree as YAML text (malloc'd; NULL on failure, e.g. a scalar that is not UTF-8)
 * that loads back into an equal tree. Used to save the resolved experiment of a run. */
char *bv_node_to_yaml(const bv_node *root);

#endif
