/* Roles as processes, the coordinator's side (engine_graph_internal.h; docs/cluster.md):
 * a private directory holds the run's ipc sockets and its address book; the cloud plugin
 * starts one `bivouac role` process per role; the coordinator waits on its inbox while it
 * watches the processes, so that a role that dies, a Ctrl-C or a missed deadline ends the
 * wait with a message that names the role, never a hang; and at the end every process is
 * ended and the directory removed. */
#include <dirent.h>
#include <errno.h>
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

/* ---- Ctrl-C: the coordinator ends the roles itself (they ignore SIGINT) ---- */

static volatile sig_atomic_t interrupted;
static struct sigaction old_int, old_term;
static int handlers_installed; /* engines with processes alive in this process */

static void on_interrupt(int sig)
{
    interrupted = sig;
}

static void handlers_on(void)
{
    if (handlers_installed++)
        return;
    interrupted = 0;
    struct sigaction sa = {.sa_handler = on_interrupt};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
}

static void handlers_off(void)
{
    if (--handlers_installed)
        return;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
}

/* ---- the address book ---- */

static bv_status write_book(const bv_graph_engine *e, const char *path, bv_error *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return bv_error_set(err, BV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    fprintf(f, "%s\ncoord %s\n", BOOK_MAGIC, e->addr_coord);
    for (int i = 0; i < e->ngs; i++)
        fprintf(f, "gs %d %s\n", i, e->addr_gs[i]);
    for (int i = 0; i < e->nps; i++)
        fprintf(f, "ps %d %s\n", i, e->addr_ps[i]);
    for (int i = 0; i < e->cfg.tensor_workers; i++)
        fprintf(f, "tw %d %s\ntww %d %s\n", i, e->addr_tw[i], i, e->addr_tw_weights[i]);
    if (fclose(f) != 0)
        return bv_error_set(err, BV_ERR_IO, "cannot write %s: %s", path, strerror(errno));
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

bv_status bv_engine_read_book(bv_graph_engine *e, const char *path, bv_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return bv_error_set(err, BV_ERR_IO, "cannot read the address book %s: %s", path,
                            strerror(errno));
    char line[512], key[8], addr[BV_ADDR_LEN * 2];
    int lineno = 0, tw_seen = 0, tww_seen = 0, ps_seen = 0, gs_seen = 0;
    bool ok = fgets(line, sizeof line, f) && strncmp(line, BOOK_MAGIC, strlen(BOOK_MAGIC)) == 0;
    for (lineno = 2; ok && fgets(line, sizeof line, f); lineno++) {
        int i = -1;
        if (sscanf(line, "%7s %d %190s", key, &i, addr) == 3 &&
            (strcmp(key, "tw") == 0 || strcmp(key, "tww") == 0)) {
            bool weights = key[2] == 'w';
            ok = i >= 0 && i < e->cfg.tensor_workers &&
                 set_addr(weights ? e->addr_tw_weights[i] : e->addr_tw[i], addr);
            *(weights ? &tww_seen : &tw_seen) += ok;
        } else if (sscanf(line, "%7s %d %190s", key, &i, addr) == 3 && strcmp(key, "ps") == 0) {
            ok = i >= 0 && i < e->nps && set_addr(e->addr_ps[i], addr);
            ps_seen += ok;
        } else if (sscanf(line, "%7s %d %190s", key, &i, addr) == 3 && strcmp(key, "gs") == 0) {
            ok = i >= 0 && i < e->ngs && set_addr(e->addr_gs[i], addr);
            gs_seen += ok;
        } else if (sscanf(line, "%7s %190s", key, addr) == 2) {
            ok = strcmp(key, "coord") == 0 && set_addr(e->addr_coord, addr);
        } else {
            ok = false;
        }
    }
    fclose(f);
    if (!ok)
        return bv_error_set(err, BV_ERR_CORRUPT, "address book %s: line %d is not an address "
                            "of this run", path, lineno > 1 ? lineno - 1 : 1);
    if (!e->addr_coord[0] || gs_seen != e->ngs || ps_seen != e->nps ||
        tw_seen != e->cfg.tensor_workers || tww_seen != e->cfg.tensor_workers)
        return bv_error_set(err, BV_ERR_CORRUPT, "address book %s lacks addresses for this "
                            "run's %d graph servers, %d parameter servers and %d tensor "
                            "workers", path, e->ngs, e->nps, e->cfg.tensor_workers);
    return BV_OK;
}

/* ---- a role process that is told to end ---- */

/* What a role process removes when SIGTERM (the cloud's terminate) or the death of the
 * coordinator (the local cloud's PR_SET_PDEATHSIG) ends it: every socket file of the
 * run, the book and the directory, so that a coordinator killed outright leaves nothing
 * behind either. Only async-signal-safe calls in the handler. */
#define MAX_CLEANUP (2 + BV_MAX_GRAPH_SERVERS + BV_MAX_PARAM_SERVERS + 2 * BV_MAX_TENSOR_WORKERS)
static char cleanup_files[MAX_CLEANUP][BV_ADDR_LEN];
static char cleanup_dir[BV_ADDR_LEN];
static int ncleanup;

static void on_term(int sig)
{
    for (int i = 0; i < ncleanup; i++)
        unlink(cleanup_files[i]);
    rmdir(cleanup_dir);
    _exit(128 + sig);
}

static void add_cleanup(const char *addr)
{
    if (strncmp(addr, "ipc://", 6) == 0 && ncleanup < MAX_CLEANUP)
        snprintf(cleanup_files[ncleanup++], BV_ADDR_LEN, "%s", addr + 6);
}

void bv_engine_role_cleanup_on_term(const bv_graph_engine *e, const char *book)
{
    ncleanup = 0;
    add_cleanup(e->addr_coord);
    for (int i = 0; i < e->ngs; i++)
        add_cleanup(e->addr_gs[i]);
    for (int i = 0; i < e->nps; i++)
        add_cleanup(e->addr_ps[i]);
    for (int i = 0; i < e->cfg.tensor_workers; i++) {
        add_cleanup(e->addr_tw[i]);
        add_cleanup(e->addr_tw_weights[i]);
    }
    snprintf(cleanup_files[ncleanup++], BV_ADDR_LEN, "%s", book);
    snprintf(cleanup_dir, sizeof cleanup_dir, "%s", book);
    char *slash = strrchr(cleanup_dir, '/');
    if (slash)
        *slash = '\0';
    else
        cleanup_dir[0] = '\0';
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- starting the processes ---- */

/* A directory for the run's sockets: under $TMPDIR when its path leaves room for the
 * socket names (a unix socket path has at most 107 bytes), else under /tmp. */
static bv_status make_dir(bv_graph_engine *e, bv_error *err)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0] || strlen(tmp) > 48)
        tmp = "/tmp";
    snprintf(e->dir, sizeof e->dir, "%s/bivouac-XXXXXX", tmp);
    if (!mkdtemp(e->dir)) {
        bv_error_set(err, BV_ERR_IO, "cannot make a directory for the run's sockets in %s: %s",
                     tmp, strerror(errno));
        e->dir[0] = '\0';
        return err->status;
    }
    return BV_OK;
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

static bv_status launch_role(bv_graph_engine *e, int slot, const char *exe, const char *book,
                             bv_error *err)
{
    int ps0 = bv_slot_ps(e, 0), tw0 = bv_slot_tw(e, 0);
    const char *kind = slot < ps0 ? "graph" : slot < tw0 ? "param" : "tensor";
    char index[16], seed[32], label[48];
    snprintf(index, sizeof index, "%d", slot < ps0 ? slot : slot < tw0 ? slot - ps0 : slot - tw0);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)e->cfg.seed);
    bv_role_slot_name(e, slot, label, sizeof label);
    const char *argv[] = {exe,     "role",  "--experiment", e->cfg.experiment_file,
                          "--role", kind,   "--index",      index,
                          "--seed", seed,   "--book",       book,
                          NULL};
    bv_node_request req = {.size = sizeof req, .role = kind, .argv = argv, .label = label};
    char address[BV_ADDR_LEN];
    e->node[slot] = e->cfg.cloud_ops->launch(e->cloud, &req, address, sizeof address, err);
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
    if (!e->node)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (int s = 0; s < bv_role_slots(e); s++)
        e->node[s] = -1;
    bv_status st = make_dir(e, err);
    if (st != BV_OK)
        return st;
    ipc_addresses(e);
    char book[sizeof e->dir + 8], exe[4096];
    snprintf(book, sizeof book, "%s/book", e->dir);
    if ((st = write_book(e, book, err)) != BV_OK)
        return st;
    if (c->role_exe) {
        snprintf(exe, sizeof exe, "%s", c->role_exe);
    } else {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0)
            return bv_error_set(err, BV_ERR_IO, "cannot find this program to start the roles: "
                                "%s", strerror(errno));
        exe[n] = '\0';
    }
    if (!(e->coord_in = c->transport_ops->bind(e->transport, e->addr_coord, err)))
        return err->status;
    e->cloud = c->cloud_ops->create(c->cloud_opts, &c->run_info, err);
    if (!e->cloud)
        return err->status ? err->status : BV_ERR_PLUGIN;
    handlers_on();
    e->procs = true;
    for (int s = 0; s < bv_role_slots(e) && st == BV_OK; s++)
        st = launch_role(e, s, exe, book, err);
    if (st != BV_OK)
        return st;
    if ((st = bv_engine_connect_graph_servers(e, e->to_gs, err)) != BV_OK ||
        (st = bv_engine_connect_servers(e, e->to_ps, err)) != BV_OK ||
        (st = bv_engine_connect_workers(e, e->addr_tw, e->to_tw, err)) != BV_OK)
        return st;
    double deadline = bv_engine_now() + c->start_timeout;
    for (int ready = 0; ready < bv_role_slots(e); ready++) {
        bv_role_msg m;
        if ((st = bv_engine_coord_wait(e, BV_MSG_READY, deadline, &m, err)) != BV_OK)
            return st;
        bv_role_release(c->transport_ops, &m);
    }
    return BV_OK;
}

/* ---- watching them ---- */

static int slot_of(const bv_graph_engine *e, int64_t node)
{
    for (int s = 0; s < bv_role_slots(e); s++)
        if (e->node[s] == node)
            return s;
    return -1;
}

static void describe_exit(int32_t status, char *buf, size_t len)
{
    if (status >= 0 && WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else if (status >= 0 && WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, len, "ended");
}

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

/* A role process that ended, Ctrl-C, or the deadline: the wait fails. */
static bv_status watch(bv_graph_engine *e, double deadline, uint16_t type, bv_error *err)
{
    bv_cloud_event ev[16];
    for (int i = 0; i < 16; i++)
        ev[i].size = sizeof ev[i];
    int n = e->cfg.cloud_ops->poll(e->cloud, ev, 16, err);
    if (n < 0)
        return err->status ? err->status : BV_ERR_PLUGIN;
    for (int i = 0; i < n; i++) {
        int slot = ev[i].kind == BV_CLOUD_EXITED || ev[i].kind == BV_CLOUD_PREEMPTED
                       ? slot_of(e, ev[i].node)
                       : -1;
        if (slot < 0)
            continue;
        e->node[slot] = -1; /* gone: nothing to stop */
        char name[48], how[96];
        bv_role_slot_name(e, slot, name, sizeof name);
        int32_t status = ev[i].size >= sizeof ev[i] ? ev[i].wait_status : -1;
        describe_exit(status, how, sizeof how);
        if (status >= 0 && WIFEXITED(status) && late_error(e, err))
            return err->status;
        return bv_error_set(err, BV_ERR_IO, "lost the %s (node %lld on localhost): it %s",
                            name, (long long)ev[i].node, how);
    }
    if (interrupted)
        return bv_error_set(err, BV_ERR_IO, "interrupted (%s): stopping the roles",
                            strsignal(interrupted));
    if (deadline > 0 && bv_engine_now() > deadline)
        return bv_error_set(err, BV_ERR_IO, "the roles did not all report %s within %.1f s "
                            "(engine.start_timeout)",
                            type == BV_MSG_READY ? "ready" : "back", e->cfg.start_timeout);
    return BV_OK;
}

bv_status bv_engine_coord_wait(bv_graph_engine *e, uint16_t type, double deadline,
                               bv_role_msg *m, bv_error *err)
{
    const bv_transport_ops *t = e->cfg.transport_ops;
    for (;;) {
        /* the processes are looked at every WATCH_SLICE_MS, busy or not: a role that is
         * never sent anything (an idle tensor worker) is missed as soon as one that is */
        double now = bv_engine_now();
        if (now >= e->next_watch) {
            e->next_watch = now + WATCH_SLICE_MS * 1e-3;
            bv_status st = watch(e, deadline, type, err);
            if (st != BV_OK) {
                e->failed = true;
                return st;
            }
        }
        if (bv_role_recv_valid(t, e->coord_in, m, WATCH_SLICE_MS, &e->frames_dropped, err) !=
            BV_OK)
            continue; /* a timeout (or a transport failure, which the watch will explain) */
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

/* ---- the end ---- */

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[sizeof ((bv_graph_engine *)0)->dir + 300];
    for (struct dirent *ent; (ent = readdir(d));) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        unlink(path);
    }
    closedir(d);
    if (rmdir(dir) != 0)
        bv_log(BV_LOG_WARN, "cannot remove %s: %s", dir, strerror(errno));
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
    int running = 0;
    for (int s = 0; s < bv_role_slots(e); s++) {
        bv_error ignored;
        if (e->node[s] >= 0 && to[s] &&
            bv_role_send(t, to[s], BV_MSG_SHUTDOWN, BV_ROLE_COORD, NULL, NULL, 0, NULL, 0,
                         NULL, 0, &ignored) == BV_OK)
            running++;
    }
    double deadline = bv_engine_now() + e->cfg.peer_timeout;
    while (running > 0 && bv_engine_now() < deadline) {
        bv_cloud_event ev[16];
        for (int i = 0; i < 16; i++)
            ev[i].size = sizeof ev[i];
        bv_error ignored;
        int n = e->cfg.cloud_ops->poll(e->cloud, ev, 16, &ignored);
        for (int i = 0; i < n; i++) {
            int slot = ev[i].kind == BV_CLOUD_EXITED ? slot_of(e, ev[i].node) : -1;
            if (slot < 0)
                continue;
            e->node[slot] = -1;
            running--;
            int32_t status = ev[i].size >= sizeof ev[i] ? ev[i].wait_status : -1;
            if (status != 0) {
                char name[48], how[96];
                bv_role_slot_name(e, slot, name, sizeof name);
                describe_exit(status, how, sizeof how);
                bv_log(BV_LOG_WARN, "the %s %s on shutdown", name, how);
            }
        }
        if (n <= 0)
            nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
}

void bv_engine_land(bv_graph_engine *e)
{
    if (e->cloud) {
        if (!e->failed && !interrupted)
            shutdown_roles(e);
        for (int s = 0; s < bv_role_slots(e); s++) {
            bv_error ignored;
            if (e->node[s] >= 0)
                e->cfg.cloud_ops->terminate(e->cloud, e->node[s], &ignored);
        }
        e->cfg.cloud_ops->destroy(e->cloud); /* joins its readers: all output is out */
        e->cloud = NULL;
    }
    if (e->dir[0])
        remove_dir(e->dir);
    free(e->node);
    e->node = NULL;
    if (e->procs)
        handlers_off();
    e->procs = false;
}
