/* Roles as processes, the coordinator's side (engine_graph_internal.h; docs/cluster.md):
 * a private directory holds the run's ipc sockets and its address book; the cloud plugin
 * starts one `bivouac role` process per role; the coordinator waits on its inbox while it
 * watches the processes, so that a role that dies, a Ctrl-C or a missed deadline ends the
 * wait with a message that names the role, never a hang; and at the end every process is
 * ended and the directory removed. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "engine_graph_internal.h"
#include "experiment.h"
#include "graph_partition.h"
#include "node_group.h"

#define BOOK_MAGIC "bivouac-address-book 1"
#define WATCH_SLICE_MS 50

double bv_engine_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void bv_role_slot_name(const bv_graph_engine *e, int slot, char *buf, size_t len)
{
    if (slot < bv_slot_ps(e, 0) && e->ngs == 1)
        snprintf(buf, len, "graph server");
    else if (slot < bv_slot_ps(e, 0))
        snprintf(buf, len, "graph server %d", slot);
    else if (slot < bv_slot_tw(e, 0) && e->nps == 1)
        snprintf(buf, len, "parameter server");
    else if (slot < bv_slot_tw(e, 0))
        snprintf(buf, len, "parameter server %d", slot - bv_slot_ps(e, 0));
    else
        snprintf(buf, len, "tensor worker %d", slot - bv_slot_tw(e, 0));
}

/* ---- the address book ---- */

/* The book as text: every role's addresses, and (with_key) the run's CURVE secret, which
 * only the book file in the private directory holds, never a message. */
static char *book_text(const bv_graph_engine *e, bool with_key, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f)
        return NULL;
    fprintf(f, "%s\ncoord %s\n", BOOK_MAGIC, e->addr_coord);
    if (with_key && e->cfg.curve_secret[0])
        fprintf(f, "curve %s\n", e->cfg.curve_secret);
    if (with_key) /* the file: what the roles read before they set up */
        fprintf(f, "shape %lld %lld %d\n", (long long)e->cfg.data->num_nodes,
                (long long)e->cfg.data->num_features, (int)e->cfg.data->num_classes);
    for (int i = 0; i < e->ngs; i++)
        fprintf(f, "gs %d %s\n", i, e->addr_gs[i]);
    for (int i = 0; i < e->nps; i++)
        fprintf(f, "ps %d %s\n", i, e->addr_ps[i]);
    for (int i = 0; i < e->cfg.tensor_workers; i++)
        fprintf(f, "tw %d %s\ntww %d %s\n", i, e->addr_tw[i], i, e->addr_tw_weights[i]);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static bv_status write_book(const bv_graph_engine *e, const char *path, bv_error *err)
{
    size_t len = 0;
    char *text = book_text(e, true, &len);
    int fd = text ? open(path, O_WRONLY | O_CREAT | O_EXCL, 0600) : -1;
    bool ok = fd >= 0 && write(fd, text, len) == (ssize_t)len;
    int errnum = errno;
    if (fd >= 0 && close(fd) != 0)
        ok = false;
    free(text);
    if (!ok)
        return bv_error_set(err, BV_ERR_IO, "cannot write %s: %s", path, strerror(errnum));
    return BV_OK;
}

/* Copies an address, which must fit and be a plain URL. */
static bool set_addr(char *dst, const char *src)
{
    size_t n = strlen(src);
    if (n == 0 || n >= BV_ADDR_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)src[i] <= ' ')
            return false;
    memcpy(dst, src, n + 1);
    return true;
}

typedef struct book_seen {
    int coord, gs, ps, tw, tww;
} book_seen;

/* One line of the book ("gs 1 ipc://...", "coord ...", "curve KEY"): false if it is not
 * one of this run's. */
static bool book_line(bv_graph_engine *e, const char *line, book_seen *seen)
{
    char key[8], addr[BV_ADDR_LEN * 2];
    int i = -1;
    if (strncmp(line, "curve ", 6) == 0 || strncmp(line, "shape ", 6) == 0)
        return true; /* bv_engine_book_key and bv_graph_book_shape read them (a Z85 key
                        may begin with a digit) */
    if (sscanf(line, "%7s %d %190s", key, &i, addr) == 3) {
        if (strcmp(key, "tw") == 0 || strcmp(key, "tww") == 0) {
            bool weights = key[2] == 'w';
            bool ok = i >= 0 && i < e->cfg.tensor_workers &&
                      set_addr(weights ? e->addr_tw_weights[i] : e->addr_tw[i], addr);
            *(weights ? &seen->tww : &seen->tw) += ok;
            return ok;
        }
        if (strcmp(key, "ps") == 0 && i >= 0 && i < e->nps && set_addr(e->addr_ps[i], addr))
            return ++seen->ps;
        if (strcmp(key, "gs") == 0 && i >= 0 && i < e->ngs && set_addr(e->addr_gs[i], addr))
            return ++seen->gs;
        return false;
    }
    if (sscanf(line, "%7s %190s", key, addr) == 2)
        return strcmp(key, "coord") == 0 && set_addr(e->addr_coord, addr) && ++seen->coord;
    return false;
}

static bool is_wildcard(const char *addr)
{
    size_t n = strlen(addr);
    return n > 2 && strcmp(addr + n - 2, ":*") == 0;
}

bv_status bv_engine_parse_book(bv_graph_engine *e, const char *text, size_t len,
                               bv_error *err)
{
    book_seen seen = {0};
    size_t at = 0;
    int lineno = 1;
    char line[512];
    bool ok = true;
    for (; ok && at < len; lineno++) {
        size_t n = 0;
        while (at + n < len && text[at + n] != '\n')
            n++;
        if (n >= sizeof line) {
            ok = false;
            break;
        }
        memcpy(line, text + at, n);
        line[n] = '\0';
        at += n + 1;
        ok = lineno == 1 ? strcmp(line, BOOK_MAGIC) == 0 : book_line(e, line, &seen);
    }
    if (!ok || lineno == 1)
        return bv_error_set(err, BV_ERR_CORRUPT, "the address book: line %d is not an address "
                            "of this run", lineno > 1 ? lineno - 1 : 1);
    if (!seen.coord || seen.gs != e->ngs || seen.ps != e->nps ||
        seen.tw != e->cfg.tensor_workers || seen.tww != e->cfg.tensor_workers)
        return bv_error_set(err, BV_ERR_CORRUPT, "the address book lacks addresses for this "
                            "run's %d graph servers, %d parameter servers and %d tensor "
                            "workers", e->ngs, e->nps, e->cfg.tensor_workers);
    e->rendezvous = false;
    for (int i = 0; i < e->ngs; i++)
        e->rendezvous |= is_wildcard(e->addr_gs[i]);
    for (int i = 0; i < e->nps; i++)
        e->rendezvous |= is_wildcard(e->addr_ps[i]);
    for (int i = 0; i < e->cfg.tensor_workers; i++)
        e->rendezvous |= is_wildcard(e->addr_tw[i]) || is_wildcard(e->addr_tw_weights[i]);
    return BV_OK;
}

/* The whole file (at most 1 MiB), NUL-terminated. */
static char *read_small_file(const char *path, size_t *len, bv_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        bv_error_set(err, BV_ERR_IO, "cannot read the address book %s: %s", path,
                     strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 20;
    char *text = malloc(cap + 1);
    *len = text ? fread(text, 1, cap, f) : 0;
    fclose(f);
    if (!text) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    text[*len] = '\0';
    return text;
}

bv_status bv_engine_read_book(bv_graph_engine *e, const char *path, bv_error *err)
{
    size_t len;
    char *text = read_small_file(path, &len, err);
    if (!text)
        return err->status;
    bv_status st = bv_engine_parse_book(e, text, len, err);
    free(text);
    if (st != BV_OK) { /* name the file */
        bv_error why = *err;
        bv_error_set(err, st, "%s (%s)", why.msg, path);
    }
    return st;
}

bv_status bv_engine_book_key(const char *path, char *key, bv_error *err)
{
    key[0] = '\0';
    size_t len;
    char *text = read_small_file(path, &len, err);
    if (!text)
        return err->status;
    const char *line = strstr(text, "\ncurve ");
    if (line && sscanf(line + 7, "%40s", key) != 1)
        key[0] = '\0';
    free(text);
    return BV_OK;
}

bv_status bv_graph_book_shape(const char *book, bv_graph_shape *shape, bv_error *err)
{
    size_t len;
    char *text = read_small_file(book, &len, err);
    if (!text)
        return err->status;
    const char *line = strstr(text, "\nshape ");
    long long n = 0, f = 0;
    int c = 0;
    bool ok = line && sscanf(line + 7, "%lld %lld %d", &n, &f, &c) == 3 && n > 0 && f > 0 &&
              c > 0;
    free(text);
    if (!ok)
        return bv_error_set(err, BV_ERR_CORRUPT, "%s has no shape of the graph", book);
    *shape = (bv_graph_shape){n, f, c};
    return BV_OK;
}

/* ---- a role process that is told to end ---- */

void bv_engine_role_cleanup_on_term(const bv_graph_engine *e, const char *book)
{
    bv_node_group_term_cleanup_begin(book);
    bv_node_group_term_cleanup_add(e->addr_coord);
    for (int i = 0; i < e->ngs; i++)
        bv_node_group_term_cleanup_add(e->addr_gs[i]);
    for (int i = 0; i < e->nps; i++)
        bv_node_group_term_cleanup_add(e->addr_ps[i]);
    for (int i = 0; i < e->cfg.tensor_workers; i++) {
        bv_node_group_term_cleanup_add(e->addr_tw[i]);
        bv_node_group_term_cleanup_add(e->addr_tw_weights[i]);
    }
    char dir[BV_ADDR_LEN], part[BV_ADDR_LEN];
    snprintf(dir, sizeof dir, "%s", book);
    char *slash = strrchr(dir, '/');
    *(slash ? slash : dir) = '\0';
    for (int i = 0; e->ngs > 1 && i < e->ngs; i++) { /* parts not read yet (write_parts) */
        bv_graph_part_path(dir, strlen(dir), i, part, sizeof part);
        bv_node_group_term_cleanup_add(part);
    }
    bv_node_group_term_cleanup_arm();
}

/* ---- starting the processes ---- */

static bv_status make_dir(bv_graph_engine *e, bv_error *err)
{
    return bv_node_group_make_dir(e->dir, sizeof e->dir, err);
}

static void ipc_addresses(bv_graph_engine *e)
{
    snprintf(e->addr_coord, BV_ADDR_LEN, "ipc://%s/coord", e->dir);
    for (int i = 0; i < e->ngs; i++)
        snprintf(e->addr_gs[i], BV_ADDR_LEN, "ipc://%s/gs%d", e->dir, i);
    for (int i = 0; i < e->nps; i++)
        snprintf(e->addr_ps[i], BV_ADDR_LEN, "ipc://%s/ps%d", e->dir, i);
    for (int i = 0; i < e->cfg.tensor_workers; i++) {
        snprintf(e->addr_tw[i], BV_ADDR_LEN, "ipc://%s/tw%d", e->dir, i);
        snprintf(e->addr_tw_weights[i], BV_ADDR_LEN, "ipc://%s/tw%d-weights", e->dir, i);
    }
}

/* Links over tcp: every role binds a port of its host's address that the system picks
 * ("tcp://ADDRESS:*"); HELLO tells the coordinator which (rendezvous). */
static bv_status tcp_addresses(bv_graph_engine *e, bv_error *err)
{
    const bv_graph_engine_cfg *c = &e->cfg;
    snprintf(e->addr_coord, BV_ADDR_LEN, "tcp://%s:*", c->address);
    for (int s = 0; s < bv_role_slots(e); s++) {
        int ps0 = bv_slot_ps(e, 0), tw0 = bv_slot_tw(e, 0);
        int kind = s < ps0 ? 0 : s < tw0 ? 1 : 2, index = s - (kind == 0 ? 0 : kind == 1 ? ps0 : tw0);
        char addr[64];
        int placed = bv_cluster_place(c->hosts[kind], index, e->slot_host[s],
                                      sizeof e->slot_host[s], addr, sizeof addr, err);
        if (placed < 0)
            return err->status;
        if (placed == 0)
            e->slot_host[s][0] = '\0';
        char *dst = kind == 0 ? e->addr_gs[index] : kind == 1 ? e->addr_ps[index] : e->addr_tw[index];
        snprintf(dst, BV_ADDR_LEN, "tcp://%s:*", placed ? addr : c->address);
        if (kind == 2)
            snprintf(e->addr_tw_weights[index], BV_ADDR_LEN, "tcp://%s:*",
                     placed ? addr : c->address);
    }
    return BV_OK;
}

/* The coordinator's side of the rendezvous: a HELLO from every role with the addresses it
 * bound, then the whole book to each. */
static bv_status tcp_rendezvous(bv_graph_engine *e, double deadline, bv_error *err)
{
    const bv_transport_ops *t = e->cfg.transport_ops;
    book_seen seen = {0};
    for (int hello = 0; hello < bv_role_slots(e); hello++) {
        bv_role_msg m;
        bv_status st = bv_engine_coord_wait(e, BV_MSG_HELLO, deadline, &m, err);
        if (st != BV_OK)
            return st;
        char text[2 * BV_ADDR_LEN + 64];
        size_t n = m.hdr.na < sizeof text - 1 ? (size_t)m.hdr.na : sizeof text - 1;
        memcpy(text, m.a, n);
        text[n] = '\0';
        bv_role_release(t, &m);
        bool ok = n > 0;
        for (char *line = strtok(text, "\n"); ok && line; line = strtok(NULL, "\n"))
            ok = strncmp(line, "coord", 5) != 0 && strncmp(line, "curve", 5) != 0 &&
                 book_line(e, line, &seen) && !is_wildcard(strrchr(line, ' ') + 1);
        if (!ok)
            return bv_error_set(err, BV_ERR_CORRUPT, "a role's HELLO is not an address of "
                                "this run");
    }
    if (seen.gs != e->ngs || seen.ps != e->nps || seen.tw != e->cfg.tensor_workers ||
        seen.tww != e->cfg.tensor_workers)
        return bv_error_set(err, BV_ERR_CORRUPT, "the roles' HELLOs do not cover every role");
    bv_status st;
    if ((st = bv_engine_connect_graph_servers(e, e->to_gs, err)) != BV_OK ||
        (st = bv_engine_connect_servers(e, e->to_ps, err)) != BV_OK ||
        (st = bv_engine_connect_workers(e, e->addr_tw, e->to_tw, err)) != BV_OK)
        return st;
    size_t len = 0;
    char *book = book_text(e, false, &len);
    if (!book)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    bv_endpoint **to[] = {e->to_gs, e->to_ps, e->to_tw};
    int count[] = {e->ngs, e->nps, e->cfg.tensor_workers};
    for (int k = 0; k < 3 && st == BV_OK; k++)
        for (int i = 0; i < count[k] && st == BV_OK; i++)
            st = bv_engine_coord_send(e, to[k][i], BV_MSG_BOOK, NULL, book, len, NULL, 0,
                                      NULL, 0, err);
    free(book);
    return st;
}

static bv_status launch_role(bv_graph_engine *e, int slot, const char *exe, const char *book,
                             bv_error *err)
{
    int ps0 = bv_slot_ps(e, 0), tw0 = bv_slot_tw(e, 0);
    const char *kind = slot < ps0 ? "graph" : slot < tw0 ? "param" : "tensor";
    char index[16], seed[32], label[48];
    snprintf(index, sizeof index, "%d", slot < ps0 ? slot : slot < tw0 ? slot - ps0 : slot - tw0);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)e->cfg.seed);
    bv_role_slot_name(e, slot, label, sizeof label);
    char member[BV_MEMBER_KEY_MAX] = ""; /* each role is launched once: launch 1 */
    if (e->member.member)
        bv_membership_node_key(&e->member, slot, 1, member, sizeof member);
    const char *argv[] = {exe,     "role",  "--experiment", e->cfg.experiment_file,
                          "--role", kind,   "--index",      index,
                          "--seed", seed,   "--book",       book,
                          member[0] ? "--member" : NULL, member, NULL};
    bv_node_request req = {.size = sizeof req, .role = kind, .argv = argv, .label = label,
                           .host = e->slot_host[slot][0] ? e->slot_host[slot] : NULL};
    char address[BV_ADDR_LEN];
    e->node[slot] = bv_node_group_launch(e->cfg.cloud_ops, e->cloud, &req, address,
                                         sizeof address, err);
    if (e->node[slot] < 0)
        return err->status ? err->status : BV_ERR_PLUGIN;
    return BV_OK;
}

bv_status bv_engine_launch(bv_graph_engine *e, bv_error *err)
{
    const bv_graph_engine_cfg *c = &e->cfg;
    if (!c->experiment_file)
        return bv_error_set(err, BV_ERR_INVALID, "roles as processes need the run's "
                            "experiment file");
    e->node = malloc((size_t)bv_role_slots(e) * sizeof *e->node);
    e->beat_at = calloc((size_t)bv_role_slots(e), sizeof *e->beat_at);
    if (!e->node || !e->beat_at)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (int s = 0; s < bv_role_slots(e); s++)
        e->node[s] = -1;
    bv_status st = make_dir(e, err);
    if (st != BV_OK)
        return st;
    if (c->tcp) {
        if ((st = tcp_addresses(e, err)) != BV_OK)
            return st;
    } else {
        ipc_addresses(e);
    }
    if (!(e->coord_in = c->transport_ops->bind(e->transport, e->addr_coord, err)))
        return err->status;
    if (c->tcp && !set_addr(e->addr_coord, c->transport_ops->bound_address
                                               ? c->transport_ops->bound_address(e->coord_in)
                                               : ""))
        return bv_error_set(err, BV_ERR_PLUGIN, "the transport cannot tell the address it "
                            "bound, which links over tcp need");
    char book[sizeof e->dir + 8], exe[4096];
    snprintf(book, sizeof book, "%s/book", e->dir);
    if ((st = write_book(e, book, err)) != BV_OK)
        return st;
    /* several graph servers: the parts are cut once, here, and each server's process
     * reads its own (and removes it) instead of loading and cutting the whole graph */
    double t0 = bv_engine_now();
    if (e->ngs > 1) { /* METIS over a large graph takes a while: say so before and after */
        bv_log(BV_LOG_INFO, "cutting the graph into %d parts (%s)", e->ngs,
               e->cfg.partition == BV_PARTITION_RANGE ? "vertex ranges" : "METIS");
        if ((st = bv_engine_write_parts(e, err)) != BV_OK)
            return st;
        bv_log(BV_LOG_INFO, "cut the graph into %d parts in %.1f s", e->ngs,
               bv_engine_now() - t0);
    }
    if ((st = bv_node_group_self_exe(c->role_exe, exe, sizeof exe, err)) != BV_OK)
        return st;
    e->cloud = c->cloud_ops->create(c->cloud_opts, &c->run_info, err);
    if (!e->cloud)
        return err->status ? err->status : BV_ERR_PLUGIN;
    bv_node_group_signals_on();
    e->procs = true;
    if (c->etcd &&
        (st = bv_membership_coordinator(&e->member, c->etcd, c->lease_s, e->dir, err)) != BV_OK)
        return st;
    e->launched_at = bv_engine_now();
    for (int s = 0; s < bv_role_slots(e) && st == BV_OK; s++)
        st = launch_role(e, s, exe, book, err);
    if (st != BV_OK)
        return st;
    double deadline = bv_engine_now() + c->start_timeout;
    if (c->tcp) {
        st = tcp_rendezvous(e, deadline, err);
    } else if ((st = bv_engine_connect_graph_servers(e, e->to_gs, err)) == BV_OK &&
               (st = bv_engine_connect_servers(e, e->to_ps, err)) == BV_OK &&
               !c->functions) { /* function workers: the graph servers talk to them */
        st = bv_engine_connect_workers(e, e->addr_tw, e->to_tw, err);
    }
    for (int sl = 0; sl < bv_role_slots(e) && st == BV_OK; sl++) { /* who runs where */
        int ps0 = bv_slot_ps(e, 0), tw0 = bv_slot_tw(e, 0);
        char name[48];
        bv_role_slot_name(e, sl, name, sizeof name);
        bv_log(BV_LOG_INFO, "%s: node %lld on %s, inbox %s", name, (long long)e->node[sl],
               e->slot_host[sl][0] ? e->slot_host[sl] : "localhost",
               sl < ps0 ? e->addr_gs[sl] : sl < tw0 ? e->addr_ps[sl - ps0]
                                                 : e->addr_tw[sl - tw0]);
    }
    if (st != BV_OK)
        return st;
    uint64_t fingerprint = 0;
    for (int ready = 0, parts = 0; ready < bv_role_slots(e); ready++) {
        bv_role_msg m;
        if ((st = bv_engine_coord_wait(e, BV_MSG_READY, deadline, &m, err)) != BV_OK)
            return st;
        bv_task_hdr h = m.hdr;
        bool part = e->ngs > 1 && m.wire.sender == BV_ROLE_GS;
        bv_role_release(c->transport_ops, &m);
        if (!part)
            continue;
        /* every graph server must have derived the same partition (graph_partition.h) */
        if (parts++ > 0 && (uint64_t)h.version != fingerprint)
            return bv_error_set(err, BV_ERR_INTERNAL, "graph server %d derived another "
                                "partition of the graph than the others (fingerprint "
                                "%016llx, not %016llx)",
                                h.interval, (unsigned long long)h.version,
                                (unsigned long long)fingerprint);
        fingerprint = (uint64_t)h.version;
        e->ghosts_total += h.row_begin;
        e->edge_cut = h.rows;
    }
    bv_log(BV_LOG_INFO, "%d roles ready in %.1f s", bv_role_slots(e), bv_engine_now() - t0);
    return BV_OK;
}

/* ---- watching them ---- */

/* A role's ERROR, if one comes within a moment: a role that fails says why before it
 * exits, and its words are better than its exit status. */
static bool late_error(bv_graph_engine *e, bv_error *err)
{
    const bv_transport_ops *t = e->cfg.transport_ops;
    double until = bv_engine_now() + 0.5;
    for (double now = bv_engine_now(); now < until; now = bv_engine_now()) {
        bv_role_msg m;
        bv_error ignored;
        if (bv_role_recv(t, e->coord_in, &m, (int)((until - now) * 1000) + 1, &ignored) !=
            BV_OK)
            return false;
        bool is_error = m.wire.type == BV_MSG_ERROR;
        if (is_error)
            bv_error_set(err, BV_ERR_IO, "%.*s", (int)m.hdr.na, (const char *)m.a);
        bv_role_release(t, &m);
        if (is_error)
            return true;
    }
    return false;
}

/* The resilience strategies hear first that the role in `slot` (cloud id `id`) is gone. */
static void tell_strategies(bv_graph_engine *e, int slot, int64_t id)
{
    int ps0 = bv_slot_ps(e, 0), tw0 = bv_slot_tw(e, 0);
    bv_peer_event ev = {sizeof ev, slot < ps0 ? "graph" : slot < tw0 ? "param" : "tensor", id,
                        NULL, bv_engine_now() - e->launched_at};
    if (e->cfg.peer_failed)
        e->cfg.peer_failed(e->cfg.loop, &ev);
}

/* Kills the role process in `slot`, which hangs or let its lease run out (the cloud's kill:
 * no clean-up that would remove the run's sockets), tells the strategies, and fails the
 * wait with "LEAD the ROLE (node ID on HOST)" and the text after it. */
static bv_status kill_role(bv_graph_engine *e, int slot, const char *lead, const char *after,
                           bv_error *err)
{
    char name[48];
    bv_role_slot_name(e, slot, name, sizeof name);
    int64_t id = e->node[slot];
    bv_node_group_kill(e->cfg.cloud_ops, e->cloud, e->node, slot);
    tell_strategies(e, slot, id);
    return bv_error_set(err, BV_ERR_IO, "%sthe %s (node %lld on %s)%s", lead, name,
                        (long long)id,
                        e->slot_host[slot][0] ? e->slot_host[slot] : "localhost", after);
}

/* What etcd said (cluster.membership: etcd): a role process whose lease ran out (it died,
 * froze, or lost its network for the whole lease) is killed, so that it cannot come back,
 * and the wait fails naming it; the coordinator's own lease lost stops the run. */
static bv_status heard(bv_graph_engine *e, bv_error *err)
{
    int slot;
    int64_t token;
    bool own;
    while (bv_membership_next_lost(&e->member, &slot, &token, &own)) {
        if (own)
            return bv_membership_own_lost(&e->member, err);
        if (slot < 0 || slot >= bv_role_slots(e) || token != 1 || e->node[slot] < 0)
            continue;
        char how[128], after[140];
        bv_membership_how(&e->member, how, sizeof how);
        snprintf(after, sizeof after, ": it %s", how);
        return kill_role(e, slot, "lost ", after, err);
    }
    return BV_OK;
}

/* A role process that ended, one whose etcd lease ran out, Ctrl-C, or the deadline: the
 * wait fails. */
static bv_status watch(bv_graph_engine *e, double deadline, uint16_t type, bv_error *err)
{
    int slot;
    int64_t id;
    int32_t status;
    int got = bv_node_group_poll(e->cfg.cloud_ops, e->cloud, e->node, bv_role_slots(e), &slot,
                                 &id, &status, err);
    if (got < 0)
        return err->status ? err->status : BV_ERR_PLUGIN;
    if (got == 1) {
        char name[48], how[96];
        bv_role_slot_name(e, slot, name, sizeof name);
        bv_node_group_exit_text(status, how, sizeof how);
        tell_strategies(e, slot, id);
        if (status >= 0 && WIFEXITED(status) && late_error(e, err))
            return err->status;
        return bv_error_set(err, BV_ERR_IO, "lost the %s (node %lld on %s): it %s", name,
                            (long long)id,
                            e->slot_host[slot][0] ? e->slot_host[slot] : "localhost", how);
    }
    if (bv_node_group_interrupted())
        return bv_error_set(err, BV_ERR_IO, "interrupted (%s): stopping the roles",
                            strsignal(bv_node_group_interrupted()));
    if (e->member.member && heard(e, err) != BV_OK)
        return err->status;
    if (deadline > 0 && bv_engine_now() > deadline)
        return bv_error_set(err, BV_ERR_IO, "the roles did not all report %s within %.1f s "
                            "(engine.start_timeout)",
                            type == BV_MSG_READY ? "ready" : "back", e->cfg.start_timeout);
    return BV_OK;
}

/* A role process whose heartbeats stopped for engine.peer_timeout (at least 4 heartbeat
 * periods) hangs (stopped, frozen: alive, so the cloud reports nothing): it is killed and
 * the wait fails naming it. */
static bv_status silent(bv_graph_engine *e, double now, bv_error *err)
{
    double bound = e->cfg.peer_timeout > 4e-3 * BV_HEARTBEAT_MS ? e->cfg.peer_timeout
                                                                  : 4e-3 * BV_HEARTBEAT_MS;
    for (int s = 0; s < bv_role_slots(e); s++) {
        if (e->node[s] < 0 || e->beat_at[s] == 0 || now - e->beat_at[s] <= bound)
            continue;
        char after[128];
        snprintf(after, sizeof after, " hangs: no heartbeat for %g s (engine.peer_timeout), "
                 "and was killed", bound);
        return kill_role(e, s, "", after, err);
    }
    return BV_OK;
}

bv_status bv_engine_coord_wait(bv_graph_engine *e, uint16_t type, double deadline,
                               bv_role_msg *m, bv_error *err)
{
    const bv_transport_ops *t = e->cfg.transport_ops;
    for (;;) {
        /* the processes are looked at every WATCH_SLICE_MS, busy or not: a role that is
         * never sent anything (an idle tensor worker) is missed as soon as one that is */
        double now = bv_engine_now(), gap = e->waited_until > 0 ? now - e->waited_until : 0;
        if (gap > 4e-3 * WATCH_SLICE_MS) /* busy elsewhere or held off the CPU since it last
                                           read its inbox: silence is not counted */
            for (int s = 0; s < bv_role_slots(e); s++)
                if (e->beat_at[s] > 0)
                    e->beat_at[s] += gap;
        e->waited_until = now;
        if (now >= e->next_watch) {
            e->next_watch = now + WATCH_SLICE_MS * 1e-3;
            bv_status st = watch(e, deadline, type, err);
            if (st == BV_OK)
                st = silent(e, now, err);
            if (st != BV_OK) {
                e->failed = true;
                return st;
            }
        }
        if (bv_role_recv_valid(t, e->coord_in, m, WATCH_SLICE_MS, &e->frames_dropped, err) !=
            BV_OK)
            continue; /* a timeout (or a transport failure, which the watch will explain) */
        e->waited_until = bv_engine_now();
        if (m->wire.type == BV_MSG_HEARTBEAT) {
            int s = m->hdr.reply_to;
            if (s >= 0 && s < bv_role_slots(e))
                e->beat_at[s] = e->waited_until;
            bv_role_release(t, m);
            continue;
        }
        if (m->wire.type == type)
            return BV_OK;
        if (m->wire.type == BV_MSG_ERROR) {
            bv_error_set(err, BV_ERR_INTERNAL, "%.*s", (int)m->hdr.na, (const char *)m->a);
            bv_role_release(t, m);
            e->failed = true;
            return BV_ERR_INTERNAL;
        }
        bv_log(BV_LOG_WARN, "coordinator: ignoring message type %u while waiting for %u",
               m->wire.type, type);
        bv_role_release(t, m);
    }
}

bv_status bv_engine_coord_send(bv_graph_engine *e, bv_endpoint *to, uint16_t type,
                               const bv_task_hdr *h, const void *a, size_t na, const void *b,
                               size_t nb, const void *c, size_t nc, bv_error *err)
{
    const bv_transport_ops *t = e->cfg.transport_ops;
    if (!e->procs)
        return bv_role_send(t, to, type, BV_ROLE_COORD, h, a, na, b, nb, c, nc, err);
    /* each try gives up after BV_SEND_SLICE_MS (engine_transport): a peer that went away
     * fails the send within a slice of its death, not after the whole bound */
    double until = bv_engine_now() + e->send_bound_ms * 1e-3;
    bv_status st;
    for (;;) {
        if ((st = watch(e, 0, type, err)) != BV_OK) {
            e->failed = true;
            return st;
        }
        st = bv_role_send(t, to, type, BV_ROLE_COORD, h, a, na, b, nb, c, nc, err);
        if (st != BV_ERR_IO || (e->send_bound_ms >= 0 && bv_engine_now() >= until))
            break;
    }
    if (st == BV_OK)
        return BV_OK;
    /* explained by a process that ended, if one did within a moment */
    bv_error why;
    for (double end = bv_engine_now() + 1.0; bv_engine_now() < end;) {
        if (watch(e, 0, type, &why) != BV_OK) {
            *err = why;
            break;
        }
        struct timespec slice = {0, WATCH_SLICE_MS * 1000000L};
        nanosleep(&slice, NULL);
    }
    e->failed = true;
    return err->status;
}

/* ---- the end ---- */

static void slot_name(void *e, int slot, char *buf, size_t len)
{
    bv_role_slot_name(e, slot, buf, len);
}

/* Sends SHUTDOWN to every role still running and waits up to peer_timeout for them to
 * exit; those that do not are left to the cloud's terminate. */
static void shutdown_roles(bv_graph_engine *e)
{
    const bv_transport_ops *t = e->cfg.transport_ops;
    bv_endpoint *to[BV_MAX_GRAPH_SERVERS + BV_MAX_PARAM_SERVERS + BV_MAX_TENSOR_WORKERS];
    for (int i = 0; i < e->ngs; i++)
        to[i] = e->to_gs[i];
    for (int i = 0; i < e->nps; i++)
        to[bv_slot_ps(e, i)] = e->to_ps[i];
    for (int i = 0; i < e->cfg.tensor_workers; i++)
        to[bv_slot_tw(e, i)] = e->to_tw[i];
    for (int s = 0; s < bv_role_slots(e); s++) {
        bv_error ignored;
        if (e->node[s] >= 0 && to[s])
            bv_role_send(t, to[s], BV_MSG_SHUTDOWN, BV_ROLE_COORD, NULL, NULL, 0, NULL, 0, NULL,
                         0, &ignored);
    }
    bv_node_group_await_exits(e->cfg.cloud_ops, e->cloud, e->node, bv_role_slots(e),
                              e->cfg.peer_timeout, slot_name, e);
}

void bv_engine_land(bv_graph_engine *e)
{
    if (e->cloud) {
        if (!e->failed && !bv_node_group_interrupted())
            shutdown_roles(e);
        /* destroying the cloud joins its readers: all output is out */
        bv_node_group_end(e->cfg.cloud_ops, e->cloud, e->node, bv_role_slots(e));
        e->cloud = NULL;
    }
    bv_membership_leave(&e->member); /* after the roles: they stop when its key goes */
    if (e->dir[0])
        bv_node_group_remove_dir(e->dir);
    free(e->node);
    e->node = NULL;
    free(e->beat_at);
    e->beat_at = NULL;
    if (e->procs)
        bv_node_group_signals_off();
    e->procs = false;
}
