/* A run's membership in etcd (`cluster.membership: etcd`, docs/membership.md): each
 * process of the run holds a lease, its key lives under it, and the others watch the keys.
 * A process that dies, freezes or loses its network stops renewing its lease; etcd deletes
 * its key when the lease runs out, and every watcher hears of it, on whatever host.
 *
 * The client speaks etcd's v3 JSON gateway over libcurl. It is a module of its own
 * (libbivouac_member.so, beside libbivouac), opened on first use (bv_member_module()):
 * libcurl and its thirty libraries cost a process start about 4 ms, which a run without
 * etcd does not pay. */
#ifndef BIVOUAC_MEMBER_H
#define BIVOUAC_MEMBER_H

#include <stdbool.h>
#include <stddef.h>

#include "bivouac/error.h"

#define BV_MEMBER_MODULE_VERSION 1
#define BV_MEMBER_KEY_MAX 192

typedef struct bv_member bv_member;

/* What a member hears, on one of its threads: a watched key deleted without its holder
 * saying it leaves (the holder's lease ran out: it died, froze or lost etcd), or (own)
 * this member's own lease lost (etcd says it is gone, or, strict, etcd was out of reach
 * for the whole lease). Said once per key. */
typedef void (*bv_member_gone_fn)(void *ctx, const char *key, bool own);

typedef struct bv_member_join_args {
    const char *endpoint; /* http://HOST:PORT of an etcd member */
    int lease_s;          /* the lease's time to live; renewed every third of it */
    const char *key;      /* put under the lease; its value is "PID@HOSTNAME" */
    const char *watch;    /* a key (or a prefix, below) to watch; NULL: none */
    bool watch_prefix;    /* every key that starts with `watch` */
    bool watch_must_exist; /* the join fails if `watch` (one key) is not there */
    /* true: its lease counts as lost once etcd has been out of reach for the whole lease
     * too (the coordinator: it ends the run); false: only once etcd says the lease is
     * gone (a stage: the coordinator, which watches its key, decides) */
    bool strict;
    /* NULL: what is heard is queued for bv_member_module.next_gone() */
    bv_member_gone_fn gone;
    void *ctx;
} bv_member_join_args;

typedef struct bv_member_module {
    unsigned version;   /* BV_MEMBER_MODULE_VERSION; the two fields as bv_module_header */
    size_t struct_size; /* sizeof(bv_member_module) */
    /* Grants a lease, puts the key under it, and starts the threads that renew it and
     * watch. Errors name the endpoint: an etcd that cannot be reached fails the join. */
    bv_status (*join)(const bv_member_join_args *a, bv_member **out, bv_error *err);
    /* The next key heard of (gone() NULL), without waiting: true and key (and *own) set,
     * or false. */
    bool (*next_gone)(bv_member *m, char *key, size_t len, bool *own);
    /* Says it leaves (the watchers take its key's deletion as an end, not a loss),
     * revokes the lease, stops the threads and frees m. NULL is ignored. */
    void (*leave)(bv_member *m);
} bv_member_module;

/* The module, opened on first use; NULL and *reason (static) when it cannot be.
 * BIVOUAC_MEMBER_MODULE names another file (tests). */
const bv_member_module *bv_member_module_get(const char **reason);

#endif
