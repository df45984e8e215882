/* A run's membership in etcd as the engines use it (membership.h). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "membership.h"

static bv_status open_module(bv_membership *m, const char *etcd, int lease_s, bv_error *err)
{
    const char *why = "";
    if (!(m->mm = bv_member_module_get(&why)))
        return bv_error_set(err, BV_ERR_PLUGIN, "cluster.membership: etcd: cannot open the "
                            "membership module: %s", why);
    snprintf(m->etcd, sizeof m->etcd, "%s", etcd);
    m->lease_s = lease_s;
    return BV_OK;
}

bv_status bv_membership_coordinator(bv_membership *m, const char *etcd, int lease_s,
                                    const char *dir, bv_error *err)
{
    bv_status st = open_module(m, etcd, lease_s, err);
    if (st != BV_OK)
        return st;
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    const char *base = strrchr(dir, '/');
    snprintf(m->prefix, sizeof m->prefix, "bivouac/%s-%d-%s", host, (int)getpid(),
             base ? base + 1 : dir);
    char key[BV_MEMBER_KEY_MAX], nodes[BV_MEMBER_KEY_MAX];
    snprintf(key, sizeof key, "%s/coordinator", m->prefix);
    snprintf(nodes, sizeof nodes, "%s/node/", m->prefix);
    bv_member_join_args a = {.endpoint = etcd, .lease_s = lease_s, .key = key,
                             .watch = nodes, .watch_prefix = true, .strict = true};
    if ((st = m->mm->join(&a, &m->member, err)) != BV_OK) {
        bv_error why = *err;
        return bv_error_set(err, st, "cluster.membership: etcd: %s", why.msg);
    }
    bv_log(BV_LOG_INFO, "membership: etcd at %s, the run's keys under %s/, leases of %d s",
           etcd, m->prefix, lease_s);
    return BV_OK;
}

void bv_membership_node_key(const bv_membership *m, int n, int64_t token, char *key,
                            size_t len)
{
    snprintf(key, len, "%s/node/%d/%lld", m->prefix, n, (long long)token);
}

bool bv_membership_next_lost(bv_membership *m, int *n, int64_t *token, bool *own)
{
    char key[BV_MEMBER_KEY_MAX];
    size_t len = strlen(m->prefix);
    while (m->mm->next_gone(m->member, key, sizeof key, own)) {
        if (*own)
            return true;
        int end = 0;
        long long t;
        if (strncmp(key, m->prefix, len) == 0 &&
            sscanf(key + len, "/node/%d/%lld%n", n, &t, &end) == 2 &&
            key[len + (size_t)end] == '\0') {
            *token = t;
            return true;
        }
    }
    return false;
}

bv_status bv_membership_own_lost(const bv_membership *m, bv_error *err)
{
    return bv_error_set(err, BV_ERR_IO, "the coordinator lost its etcd lease (etcd at %s out "
                        "of reach for %d s, cluster.lease): stopping the run", m->etcd,
                        m->lease_s);
}

void bv_membership_how(const bv_membership *m, char *buf, size_t len)
{
    snprintf(buf, len, "let its etcd lease run out (silent for %d s), and was killed",
             m->lease_s);
}

/* ---- a node process ---- */

/* What it hears comes on the membership module's thread; one node a process. */
static struct {
    char what[64];
    int lease_s;
} self;

static void node_heard(void *ctx, const char *key, bool own)
{
    (void)ctx;
    (void)key;
    if (own) {
        bv_log(BV_LOG_ERROR, "%s: etcd says its lease ran out (this process was stopped, "
               "or cut off from etcd, for %d s): the coordinator has taken it for lost; "
               "stopping", self.what, self.lease_s);
        _exit(1); /* bivouac's "failed" */
    }
    bv_log(BV_LOG_ERROR, "%s: the coordinator's etcd lease ran out (it died, stopped, or "
           "lost etcd, for %d s): stopping", self.what, self.lease_s);
    raise(SIGTERM);
}

bv_status bv_membership_node(bv_membership *m, const char *etcd, int lease_s,
                             const char *key, const char *what, bv_error *err)
{
    const char *tail = strstr(key, "/node/");
    if (!tail)
        return bv_error_set(err, BV_ERR_INVALID, "--member %s: not a node's key", key);
    bv_status st = open_module(m, etcd, lease_s, err);
    if (st != BV_OK)
        return st;
    snprintf(m->prefix, sizeof m->prefix, "%.*s", (int)(tail - key), key);
    char coordinator[BV_MEMBER_KEY_MAX];
    snprintf(coordinator, sizeof coordinator, "%s/coordinator", m->prefix);
    snprintf(self.what, sizeof self.what, "%s", what);
    self.lease_s = lease_s;
    bv_member_join_args a = {.endpoint = etcd, .lease_s = lease_s, .key = key,
                             .watch = coordinator, .watch_must_exist = true,
                             .gone = node_heard};
    return m->mm->join(&a, &m->member, err);
}

void bv_membership_leave(bv_membership *m)
{
    if (m->member)
        m->mm->leave(m->member);
    m->member = NULL;
}
