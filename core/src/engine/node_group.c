/* A run's node processes on a cloud (node_group.h). */
#include "node_group.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "clock.h"
#include "ledger.h"

/* ---- Ctrl-C: the coordinator ends the nodes itself (they ignore SIGINT) ---- */

static volatile sig_atomic_t interrupted;
static struct sigaction old_int, old_term;
static int handlers_installed; /* engines with processes alive in this process */

static void on_interrupt(int sig)
{
    interrupted = sig;
}

void bv_node_group_signals_on(void)
{
    if (handlers_installed++)
        return;
    interrupted = 0;
    struct sigaction sa = {.sa_handler = on_interrupt};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
}

void bv_node_group_signals_off(void)
{
    if (--handlers_installed)
        return;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
}

int bv_node_group_interrupted(void)
{
    return interrupted;
}

/* ---- the directory, the program ---- */

bv_status bv_node_group_make_dir(char *dir, size_t len, bv_error *err)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0] || strlen(tmp) > 48)
        tmp = "/tmp";
    snprintf(dir, len, "%s/bivouac-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        bv_error_set(err, BV_ERR_IO, "cannot make a directory for the run's sockets in %s: %s",
                     tmp, strerror(errno));
        dir[0] = '\0';
        return err->status;
    }
    return BV_OK;
}

void bv_node_group_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[4096];
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

bv_status bv_node_group_self_exe(const char *override, char *exe, size_t len, bv_error *err)
{
    if (override) {
        snprintf(exe, len, "%s", override);
        return BV_OK;
    }
    ssize_t n = readlink("/proc/self/exe", exe, len - 1);
    if (n <= 0)
        return bv_error_set(err, BV_ERR_IO, "cannot find this program to start the nodes: %s",
                            strerror(errno));
    exe[n] = '\0';
    return BV_OK;
}

bv_status bv_node_group_run_key(const bv_plugin *transport, const char *what, char *secret,
                                bv_error *err)
{
    void *fn = transport && transport->get_proc_address
                   ? transport->get_proc_address("bv_zmq_curve_keypair")
                   : NULL;
    if (!fn)
        return bv_error_set(err, BV_ERR_INVALID, "%s needs a transport with CURVE keys (zmq); "
                            "%s has none", what,
                            transport ? transport->name : "the built-in transport");
    int (*keypair)(char *public_z85, char *secret_z85);
    memcpy(&keypair, &fn, sizeof keypair);
    char public_z85[41];
    if (keypair(public_z85, secret) != 0)
        return bv_error_set(err, BV_ERR_INTERNAL, "cannot make the run's CURVE keys");
    return BV_OK;
}

bv_status bv_node_group_transport(const bv_transport_ops *ops, const bv_opts *opts,
                                  const char *secret, int send_slice_ms, bv_transport **out,
                                  bv_error *err)
{
    const bv_opt_value *bound = bv_opts_find(opts, "send_timeout_ms");
    bool sliced = send_slice_ms > 0 && bound && (bound->v.i < 0 || bound->v.i > send_slice_ms);
    bv_opts keyed = {0};
    bv_status st = BV_OK;
    if ((secret && secret[0]) || sliced) {
        st = bv_opts_copy(opts, &keyed, err);
        if (st == BV_OK && secret && secret[0])
            st = bv_opts_set(&keyed, "curve_secret_key", secret, err);
        char slice[16];
        snprintf(slice, sizeof slice, "%d", send_slice_ms);
        if (st == BV_OK && sliced)
            st = bv_opts_set(&keyed, "send_timeout_ms", slice, err);
        opts = &keyed;
    }
    if (st == BV_OK && !(*out = ops->create(opts, err)))
        st = err->status ? err->status : BV_ERR_PLUGIN;
    bv_opts_free(&keyed);
    return st;
}

/* ---- a node process that is told to end ---- */

#define MAX_CLEANUP 512
static char cleanup_files[MAX_CLEANUP][128];
static char cleanup_dir[128];
static int ncleanup;

static void on_term(int sig) /* async-signal-safe calls only */
{
    for (int i = 0; i < ncleanup; i++)
        unlink(cleanup_files[i]);
    if (cleanup_dir[0])
        rmdir(cleanup_dir);
    _exit(128 + sig);
}

void bv_node_group_term_cleanup_begin(const char *book)
{
    ncleanup = 0;
    if (!book) { /* only what _add names */
        cleanup_dir[0] = '\0';
        return;
    }
    snprintf(cleanup_dir, sizeof cleanup_dir, "%s", book);
    char *slash = strrchr(cleanup_dir, '/');
    if (slash)
        *slash = '\0';
    else
        cleanup_dir[0] = '\0';
    bv_node_group_term_cleanup_add(book);
}

void bv_node_group_term_cleanup_add(const char *addr_or_path)
{
    if (ncleanup == MAX_CLEANUP || strncmp(addr_or_path, "inproc://", 9) == 0 ||
        strncmp(addr_or_path, "tcp://", 6) == 0)
        return;
    bool ipc = strncmp(addr_or_path, "ipc://", 6) == 0;
    snprintf(cleanup_files[ncleanup++], sizeof cleanup_files[0], "%s",
             addr_or_path + (ipc ? 6 : 0));
}

void bv_node_group_term_cleanup_arm(void)
{
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- the nodes' ends ---- */

static int member_of(const int64_t *nodes, int count, int64_t node)
{
    for (int i = 0; i < count; i++)
        if (nodes[i] == node)
            return i;
    return -1;
}

/* A node is gone: the run pays for it no longer (ledger.h). */
static void node_ended(int64_t node)
{
    if (bv_ledger_current())
        bv_ledger_stop_node(bv_ledger_current(), node, bv_now_seconds());
}

int bv_node_group_poll(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes, int count,
                       int *member, int64_t *id, int32_t *status, bv_error *err)
{
    for (;;) { /* one event at a time: none is read and dropped */
        bv_cloud_event ev = {.size = sizeof ev, .zone = -1};
        int n = ops->poll(cloud, &ev, 1, err);
        if (n <= 0)
            return n < 0 ? -1 : 0;
        if (ev.kind == BV_CLOUD_OFFERED || ev.kind == BV_CLOUD_WITHDRAWN) {
            *member = -1;
            *id = -1;
            *status = -1;
            return ev.kind == BV_CLOUD_OFFERED ? 2 : 3;
        }
        int m = ev.kind == BV_CLOUD_EXITED || ev.kind == BV_CLOUD_PREEMPTED
                    ? member_of(nodes, count, ev.node)
                    : -1;
        if (m < 0)
            continue;
        nodes[m] = -1; /* gone: nothing to stop */
        node_ended(ev.node);
        *member = m;
        *id = ev.node;
        *status = ev.size >= sizeof ev ? ev.wait_status : -1;
        return 1;
    }
}

void bv_node_group_exit_text(int32_t status, char *buf, size_t len)
{
    if (status >= 0 && WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else if (status >= 0 && WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, len, "ended");
}

void bv_node_group_await_exits(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes,
                               int count, double seconds,
                               void (*name)(void *ctx, int member, char *buf, size_t len),
                               void *ctx)
{
    int running = 0;
    for (int i = 0; i < count; i++)
        running += nodes[i] >= 0;
    double deadline = bv_now_seconds() + seconds;
    while (running > 0 && bv_now_seconds() < deadline) {
        int m;
        int64_t id;
        int32_t status;
        bv_error ignored;
        int got = bv_node_group_poll(ops, cloud, nodes, count, &m, &id, &status, &ignored);
        if (got == 1) {
            running--;
            if (status != 0) {
                char who[64], how[96];
                name(ctx, m, who, sizeof who);
                bv_node_group_exit_text(status, how, sizeof how);
                bv_log(BV_LOG_WARN, "the %s %s on shutdown", who, how);
            }
        } else {
            nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
        }
    }
}

void bv_node_group_kill(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes, int member)
{
    bv_error ignored;
    if (nodes[member] < 0)
        return;
    (ops->kill ? ops->kill : ops->terminate)(cloud, nodes[member], &ignored);
    node_ended(nodes[member]);
    nodes[member] = -1;
}

void bv_node_group_end_nodes(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes,
                             int count)
{
    for (int i = 0; i < count; i++) {
        bv_error ignored;
        if (nodes[i] >= 0) {
            ops->terminate(cloud, nodes[i], &ignored);
            node_ended(nodes[i]);
        }
        nodes[i] = -1;
    }
}

void bv_node_group_end(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes, int count)
{
    bv_node_group_end_nodes(ops, cloud, nodes, count);
    ops->destroy(cloud);
}

int64_t bv_node_group_launch(const bv_cloud_ops *ops, bv_cloud *cloud,
                             const bv_node_request *req, char *address, size_t address_len,
                             bv_error *err)
{
    int64_t node = ops->launch(cloud, req, address, address_len, err);
    if (node >= 0 && bv_ledger_current())
        bv_ledger_start(bv_ledger_current(), req->node_type, node, bv_now_seconds());
    return node;
}
