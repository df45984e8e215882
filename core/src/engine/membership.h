/* A run's membership in etcd as the engines use it (cluster.membership: etcd,
 * docs/membership.md): the coordinator holds PREFIX/coordinator and watches its node
 * processes' keys, PREFIX/node/N/TOKEN (node N's launch TOKEN: a process launched again
 * for N has a key of its own); each node process holds its key and watches the
 * coordinator's. PREFIX is bivouac/HOST-PID-DIR (the coordinator's host, process and
 * private directory). The client is the membership module (member.h). */
#ifndef BIVOUAC_MEMBERSHIP_H
#define BIVOUAC_MEMBERSHIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "member.h"

typedef struct bv_membership {
    const bv_member_module *mm;
    bv_member *member; /* NULL: not joined */
    char prefix[128];
    char etcd[256];
    int lease_s;
} bv_membership;

/* The coordinator joins (its lease strict: an etcd out of reach for the whole lease is
 * its loss) and watches the node keys; logs where the keys are. Errors begin
 * "cluster.membership: etcd: ". */
bv_status bv_membership_coordinator(bv_membership *m, const char *etcd, int lease_s,
                                    const char *dir, bv_error *err);

/* The key of node n's launch `token`, for its --member. */
void bv_membership_node_key(const bv_membership *m, int n, int64_t token, char *key,
                            size_t len);

/* The coordinator: the next node key whose lease ran out (true: *n and *token set), or its
 * own lease lost (true, *own); false when nothing more was heard. */
bool bv_membership_next_lost(bv_membership *m, int *n, int64_t *token, bool *own);

/* The coordinator's error for its own lease lost: the run stops. */
bv_status bv_membership_own_lost(const bv_membership *m, bv_error *err);

/* How a node whose lease ran out is said to have ended, after "it ": "let its etcd lease
 * run out (silent for L s), and was killed". */
void bv_membership_how(const bv_membership *m, char *buf, size_t len);

/* A node process (`what` names it in its log lines, "stage node 3") joins with its --member
 * key and watches the coordinator's, which must be there. Its own lease gone (etcd says
 * so: the coordinator has taken it for lost) ends it at once (exit 1, its peers' sockets
 * left alone); the coordinator's gone ends it through SIGTERM (the clean-up that removes
 * the run's sockets). */
bv_status bv_membership_node(bv_membership *m, const char *etcd, int lease_s,
                             const char *key, const char *what, bv_error *err);

/* Leaves (the key's deletion is an end, not a loss); nothing where it did not join. */
void bv_membership_leave(bv_membership *m);

#endif
