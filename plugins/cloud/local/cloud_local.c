/* The `local` cloud: every node is a process on this machine (or, with a host, in the
 * network namespace of that name, through `ip netns exec`), a child of the coordinator in
 * its process group. Each node's stdout and stderr come back through a pipe and reach the
 * user line by line, prefixed with the node's label ("[tensor worker 2] ..."). A node
 * gets SIGTERM when the coordinator dies (PR_SET_PDEATHSIG), so a coordinator killed
 * outright leaves no orphan; terminate and destroy send SIGTERM, then SIGKILL after
 * `grace_seconds`.
 *
 * With a `trace` (the spot-instance traces of ../shared/traces/: `ms,add|remove,nodeN`),
 * the cloud replays its preemptions on the run (issue 15; docs/redundancy.md): the nodes
 * it launches stand, in launch order, for the trace's nodes alive at `trace_start`, and
 * when the trace removes one (time scaled by `speedup`) its process gets SIGKILL, with a
 * line in the log saying when and which.
 *
 * Serverless functions (issue 13; docs/lambda.md): a node launched with node_type
 * "lambda" is a function worker, started under the platform's limits: a memory cap (its
 * resident memory, looked at on every poll: a worker over it is killed, as a platform
 * kills a function out of memory; an address-space limit would stop OpenBLAS, which
 * reserves buffers it never touches), a CPU share (a cgroup v2 child with
 * cpu.max where this process's cgroup is writable; otherwise the worker holds itself to it,
 * function_limits says which) and a bandwidth its transport keeps to. The caller times the
 * invocations; `invoke` draws, from the run's seed, the faults the platform injects into
 * each (a fraction fails, hangs or is killed), and a kill lands at a random moment in the
 * next 0.2 s, when poll runs.
 *
 * Threads: one reader per node, joined when the node is reaped; the ops themselves are
 * called from one thread only (the coordinator's, or a graph server's for its functions). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bivouac/cloud.h"
#include "bivouac/log.h"
#include "bivouac/plugin.h"

#define LABEL_MAX 64
#define MAX_EVENTS 256
#define TRACE_NAME 32

typedef struct node {
    int64_t id;
    pid_t pid;
    bool alive;     /* not reaped yet */
    bool reader_on; /* `reader` was started and not joined */
    int out_fd;     /* read end of the node's stdout/stderr pipe */
    pthread_t reader;
    char label[LABEL_MAX];
    char trace_name[TRACE_NAME]; /* the trace's node it stands for ("": none) */
    bool function;      /* a serverless function's worker */
    double kill_at;     /* a function worker the platform kills then (0: none) */
    char cgroup[160];   /* its cgroup v2 directory, removed when it is reaped ("": none) */
} node;

typedef struct trace_event {
    double t; /* seconds into the trace */
    bool add;
    char name[TRACE_NAME];
} trace_event;

/* A node of the trace that is there to launch on, or that a launched node stands for. */
typedef struct trace_node {
    char name[TRACE_NAME];
    int zone;
    bool taken; /* a launched node stands for it */
    bool offered; /* added after trace_start: announced as capacity (BV_CLOUD_OFFERED) */
} trace_node;

struct bv_cloud {
    double grace_seconds;
    struct timespec t0;
    node *nodes;
    size_t count, cap;
    bv_cloud_event events[MAX_EVENTS];
    int nevents;
    char ip_path[256]; /* the `ip` program, for nodes placed in a namespace */
    /* a replayed trace: its events, the next one due, the trace's nodes that are there
     * (in the order they were added), each in a zone */
    trace_event *trace;
    size_t ntrace, next_event;
    trace_node *alive;
    size_t nalive, added; /* added: nodes the trace added since trace_start */
    int zones;
    double speedup, trace_start;
    /* serverless functions */
    bv_function_limits fn;
    double fault_fail, fault_hang, fault_kill;
    uint64_t fault_rng;
    char cgroup_base[128]; /* this process's cgroup v2 directory, if writable ("": not) */
};

static const bv_option local_options[] = {
    BV_OPT_FLOAT_RANGE("grace_seconds", "2", 0, 600,
                       "how long a terminated node has between SIGTERM and SIGKILL"),
    BV_OPT_FILE("trace", "",
                "a spot-instance trace to replay (ms,add|remove,nodeN): the launched nodes "
                "stand for its nodes, and each one it removes is killed (SIGKILL)"),
    BV_OPT_FLOAT_RANGE("speedup", "1", 1e-3, 1e9, "trace seconds that pass in one second"),
    BV_OPT_FLOAT_RANGE("trace_start", "0", 0, 1e9, "where in the trace the run starts (s)"),
    BV_OPT_INT_RANGE("zones", "1", 1, 64,
                     "availability zones the trace's nodes are in: those there at "
                     "trace_start in contiguous blocks of the order they were added (nodes "
                     "added and removed together are mostly of one zone), later ones in "
                     "turn; a launch that asks for zone k gets a node of zone k mod zones "
                     "while one is free (the pipeline engine asks zone s for stage s)"),
    BV_OPT_FLOAT_RANGE("lambda_memory_mb", "192", 0, 1e6,
                       "memory cap of a function worker, MB (0: none; Dorylus: 192)"),
    BV_OPT_FLOAT_RANGE("lambda_cpu", "0.25", 0, 64,
                       "a function worker's share of one core (0: none; Dorylus's Lambdas: "
                       "0.11 of a c5 core, here scaled to what 2 cores host)"),
    BV_OPT_FLOAT_RANGE("lambda_time_limit", "30", 0.01, 900,
                       "seconds an invocation may run before the platform kills it and the "
                       "task is invoked again"),
    BV_OPT_FLOAT_RANGE("lambda_keep_warm", "10", 0, 3600,
                       "seconds an idle function worker stays alive for the next invocation "
                       "(0: every invocation starts cold)"),
    BV_OPT_FLOAT_RANGE("lambda_bandwidth_mbps", "0", 0, 1e6,
                       "a function worker's network bandwidth each way, megabits/s (0: no "
                       "limit)"),
    BV_OPT_FLOAT_RANGE("lambda_fail", "0", 0, 1,
                       "fraction of invocations that fail (the worker ends without a result)"),
    BV_OPT_FLOAT_RANGE("lambda_hang", "0", 0, 1,
                       "fraction of invocations that hang until the time limit"),
    BV_OPT_FLOAT_RANGE("lambda_kill", "0", 0, 1,
                       "fraction of invocations whose worker the platform kills while it runs"),
    BV_OPT_INT_RANGE("lambda_fault_seed", "0", 0, 4294967295.0,
                     "seed of the fault draws, mixed with the run's (the same seeds: the "
                     "same faults, invocation by invocation)"),
    BV_OPT_END,
};

/* The trace removes node `name`: it is no longer there to launch on. */
/* The trace's node `name` is no longer there to launch on; true where it had been
 * announced as capacity and no launched node stood for it (offered, and taken back). */
static bool forget(bv_cloud *c, const char *name)
{
    for (size_t i = 0; i < c->nalive; i++)
        if (strcmp(c->alive[i].name, name) == 0) {
            bool offered = c->alive[i].offered && !c->alive[i].taken;
            memmove(c->alive + i, c->alive + i + 1, (c->nalive - i - 1) * sizeof *c->alive);
            c->nalive--;
            return offered;
        }
    return false;
}

/* The trace's node a launched node stands for: the first free one of the zone asked for
 * (folded onto the zones), else the first free one; NULL: none is free. */
static trace_node *take_node(bv_cloud *c, const char *zone)
{
    int want = zone && zone[0] ? atoi(zone) % c->zones : -1;
    for (int pass = want >= 0 ? 0 : 1; pass < 2; pass++)
        for (size_t i = 0; i < c->nalive; i++)
            if (!c->alive[i].taken && (pass == 1 || c->alive[i].zone == want)) {
                c->alive[i].taken = true;
                return &c->alive[i];
            }
    return NULL;
}

/* Node n is stopped by the run (terminate, kill): the trace's node it stood for, if the
 * trace still has it, is there to launch on again (a pipeline restarted from a
 * checkpoint launches its stages anew). */
static void release(bv_cloud *c, node *n)
{
    for (size_t i = 0; n->trace_name[0] && i < c->nalive; i++)
        if (strcmp(c->alive[i].name, n->trace_name) == 0)
            c->alive[i].taken = false;
    n->trace_name[0] = '\0';
}

/* Reads a trace: "ms,add|remove,name" lines, times not decreasing (a removal of a node
 * the trace did not add matches no process and is ignored). Then the nodes alive at
 * trace_start (those at it included), in the order they were added. */
static bv_status read_trace(bv_cloud *c, const char *path, bv_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return bv_error_set(err, BV_ERR_INVALID, "local cloud: trace %s: %s", path,
                            strerror(errno));
    char line[256];
    size_t cap = 0;
    bv_status st = BV_OK;
    for (int no = 1; st == BV_OK && fgets(line, sizeof line, f); no++) {
        long long ms;
        char kind[8], name[TRACE_NAME], extra;
        if (sscanf(line, "%lld,%7[a-z],%31[A-Za-z0-9_.-] %c", &ms, kind, name, &extra) != 3 ||
            ms < 0 || (strcmp(kind, "add") != 0 && strcmp(kind, "remove") != 0) ||
            (c->ntrace && 1e-3 * (double)ms < c->trace[c->ntrace - 1].t)) {
            st = bv_error_set(err, BV_ERR_INVALID, "%s:%d: not 'ms,add|remove,node' after "
                              "the line before", path, no);
            break;
        }
        if (c->ntrace == cap) {
            cap = cap ? 2 * cap : 256;
            trace_event *grown = realloc(c->trace, cap * sizeof *grown);
            if (!grown) {
                st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
                break;
            }
            c->trace = grown;
        }
        trace_event *e = &c->trace[c->ntrace++];
        *e = (trace_event){1e-3 * (double)ms, kind[0] == 'a', ""};
        snprintf(e->name, sizeof e->name, "%s", name);
    }
    fclose(f);
    if (st == BV_OK && !(c->alive = calloc(c->ntrace + 1, sizeof *c->alive)))
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (; st == BV_OK && c->next_event < c->ntrace &&
           c->trace[c->next_event].t <= c->trace_start;
         c->next_event++) {
        const trace_event *e = &c->trace[c->next_event];
        if (e->add)
            snprintf(c->alive[c->nalive++].name, TRACE_NAME, "%s", e->name);
        else
            forget(c, e->name);
    }
    for (size_t i = 0; i < c->nalive; i++) /* contiguous blocks */
        c->alive[i].zone = (int)(i * (size_t)c->zones / c->nalive);
    return st;
}

static double since_start(const bv_cloud *c)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - c->t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - c->t0.tv_nsec);
}

static void push_event(bv_cloud *c, uint32_t kind, int64_t id, int32_t status)
{
    if (c->nevents == MAX_EVENTS) /* the oldest is dropped; poll is called far more often */
        memmove(c->events, c->events + 1, (MAX_EVENTS - 1) * sizeof *c->events);
    else
        c->nevents++;
    c->events[c->nevents - 1] = (bv_cloud_event){
        .size = sizeof(bv_cloud_event), .kind = kind, .node = id, .time = since_start(c),
        .wait_status = status, .zone = -1};
}

/* Copies the node's output to stderr a line at a time, each line one write(2) so lines of
 * different nodes do not interleave. */
static void *reader_main(void *arg)
{
    node *n = arg;
    char buf[4096], line[4096 + LABEL_MAX + 8];
    size_t have = 0;
    for (;;) {
        ssize_t got = read(n->out_fd, buf + have, sizeof buf - have);
        if (got < 0 && errno == EINTR)
            continue;
        bool eof = got <= 0;
        if (!eof)
            have += (size_t)got;
        size_t start = 0;
        for (size_t i = 0; i < have; i++) {
            bool full = i + 1 == have && have == sizeof buf;
            if (buf[i] != '\n' && !full && !(eof && i + 1 == have))
                continue;
            size_t len = i + 1 - start - (buf[i] == '\n');
            int k = snprintf(line, sizeof line, "[%s] %.*s\n", n->label, (int)len, buf + start);
            if (k > 0 && write(STDERR_FILENO, line, (size_t)k) < 0) {
                /* nothing to do: stderr is gone */
            }
            start = i + 1;
        }
        memmove(buf, buf + start, have - start);
        have -= start;
        if (eof)
            break;
    }
    close(n->out_fd);
    free(n); /* the reader's own copy (local_launch) */
    return NULL;
}

/* ---- serverless functions ---- */

/* splitmix64: the fault draws, one per invocation. */
static double next_uniform(bv_cloud *c)
{
    uint64_t z = (c->fault_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* This process's cgroup v2 directory, if it may make children there with a cpu.max of
 * their own (a delegated subtree); else "" and the workers throttle themselves. */
static void find_cgroup(bv_cloud *c)
{
    c->cgroup_base[0] = '\0';
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[256], path[200] = "";
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            if (strlen(line + 3) < sizeof path)
                memcpy(path, line + 3, strlen(line + 3) + 1);
        }
    if (f)
        fclose(f);
    char dir[128], probe[200];
    if (!path[0] || access("/sys/fs/cgroup/cgroup.controllers", R_OK) != 0 ||
        snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", strcmp(path, "/") ? path : "") >=
            (int)sizeof dir)
        return;
    snprintf(probe, sizeof probe, "%s/cgroup.subtree_control", dir);
    f = fopen(probe, "r");
    bool has_cpu = f && fgets(line, sizeof line, f) && strstr(line, "cpu");
    if (f)
        fclose(f);
    if (has_cpu && access(dir, W_OK) == 0)
        snprintf(c->cgroup_base, sizeof c->cgroup_base, "%s", dir);
}

/* Puts function worker n (just forked) in a cgroup of its own with cpu.max at the share;
 * false when the platform cannot (the worker then throttles itself). */
static bool cap_cpu(bv_cloud *c, node *n)
{
    if (!c->cgroup_base[0] || c->fn.cpu <= 0)
        return false;
    char file[200], text[64];
    snprintf(n->cgroup, sizeof n->cgroup, "%s/bivouac-%d-%lld", c->cgroup_base, (int)getpid(),
             (long long)n->id);
    if (mkdir(n->cgroup, 0755) != 0) {
        n->cgroup[0] = '\0';
        return false;
    }
    const char *what[2] = {"cpu.max", "cgroup.procs"};
    snprintf(text, sizeof text, "%lld 100000\n", (long long)(c->fn.cpu * 100000));
    for (int k = 0; k < 2; k++) {
        if (k == 1)
            snprintf(text, sizeof text, "%d\n", (int)n->pid);
        snprintf(file, sizeof file, "%s/%s", n->cgroup, what[k]);
        FILE *f = fopen(file, "w");
        bool ok = f && fputs(text, f) >= 0;
        if (f && fclose(f) != 0)
            ok = false;
        if (!ok)
            return false;
    }
    return true;
}

/* A process's resident memory in MB (0 when it cannot be read). */
static double resident_mb(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long long size = 0, resident = 0;
    bool ok = f && fscanf(f, "%llu %llu", &size, &resident) == 2;
    if (f)
        fclose(f);
    return ok ? (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0) : 0;
}

static bv_status local_function_limits(bv_cloud *c, bv_function_limits *out, bv_error *err)
{
    (void)err;
    size_t size = out->size < sizeof *out ? out->size : sizeof *out;
    bv_function_limits fn = c->fn;
    fn.size = size;
    fn.cpu_enforced = c->cgroup_base[0] != '\0' && c->fn.cpu > 0;
    memcpy(out, &fn, size);
    return BV_OK;
}

static node *find(bv_cloud *c, int64_t id);

static int local_invoke(bv_cloud *c, int64_t id)
{
    double u = next_uniform(c), when = next_uniform(c);
    int fault = u < c->fault_fail                                   ? BV_INVOKE_FAIL
                : u < c->fault_fail + c->fault_hang                 ? BV_INVOKE_HANG
                : u < c->fault_fail + c->fault_hang + c->fault_kill ? BV_INVOKE_KILL
                                                                    : BV_INVOKE_OK;
    node *n = find(c, id);
    if (fault == BV_INVOKE_KILL && n && n->alive)
        n->kill_at = since_start(c) + 0.2 * when + 1e-6;
    return fault;
}

static bv_cloud *local_create(const bv_opts *opts, const bv_run_info *info, bv_error *err)
{
    bv_cloud *c = calloc(1, sizeof *c);
    if (!c) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->grace_seconds = bv_opts_float(opts, "grace_seconds");
    c->speedup = bv_opts_float(opts, "speedup");
    c->trace_start = bv_opts_float(opts, "trace_start");
    c->zones = (int)bv_opts_int(opts, "zones");
    c->fn = (bv_function_limits){
        .size = sizeof c->fn,
        .memory_mb = bv_opts_float(opts, "lambda_memory_mb"),
        .cpu = bv_opts_float(opts, "lambda_cpu"),
        .time_limit = bv_opts_float(opts, "lambda_time_limit"),
        .keep_warm = bv_opts_float(opts, "lambda_keep_warm"),
        .bandwidth_mbps = bv_opts_float(opts, "lambda_bandwidth_mbps"),
    };
    c->fault_fail = bv_opts_float(opts, "lambda_fail");
    c->fault_hang = bv_opts_float(opts, "lambda_hang");
    c->fault_kill = bv_opts_float(opts, "lambda_kill");
    c->fault_rng = (info ? info->seed : 0) * 0x9E3779B97F4A7C15ull ^
                   (uint64_t)bv_opts_int(opts, "lambda_fault_seed");
    find_cgroup(c);
    clock_gettime(CLOCK_MONOTONIC, &c->t0);
    const char *trace = bv_opts_str(opts, "trace");
    if (trace[0] && read_trace(c, trace, err) != BV_OK) {
        free(c->trace);
        free(c->alive);
        free(c);
        return NULL;
    }
    return c;
}

static node *find(bv_cloud *c, int64_t id)
{
    for (size_t i = 0; i < c->count; i++)
        if (c->nodes[i].id == id)
            return &c->nodes[i];
    return NULL;
}

static void join_reader(node *n)
{
    if (n->reader_on)
        pthread_join(n->reader, NULL);
    n->reader_on = false;
}

/* The `ip` program, found once on PATH (resolved before fork: only async-signal-safe
 * calls are allowed between fork and exec in a process with threads). */
static bool find_ip(bv_cloud *c)
{
    if (c->ip_path[0])
        return true;
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s:/usr/sbin:/sbin", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(c->ip_path, sizeof c->ip_path, "%s/ip", d);
        if (access(c->ip_path, X_OK) == 0)
            return true;
    }
    c->ip_path[0] = '\0';
    return false;
}

static int64_t local_launch(bv_cloud *c, const bv_node_request *req, char *address,
                            size_t address_len, bv_error *err)
{
    if (address_len)
        address[0] = '\0'; /* the node reports where it listens itself */
    if (!req->argv || !req->argv[0]) {
        bv_error_set(err, BV_ERR_INVALID, "local cloud: no command to run");
        return -1;
    }
    const char *label = req->size > offsetof(bv_node_request, label) && req->label
                            ? req->label
                            : req->role;
    const char *host = req->size > offsetof(bv_node_request, host) ? req->host : NULL;
    const char *zone = req->size > offsetof(bv_node_request, zone) ? req->zone : NULL;
    bool function = req->node_type && strcmp(req->node_type, "lambda") == 0;
    bool in_ns = host && host[0] && strcmp(host, "localhost") != 0;
    if (in_ns && !find_ip(c)) {
        bv_error_set(err, BV_ERR_INVALID, "local cloud: host '%s' is a network namespace, "
                     "but there is no `ip` program", host);
        return -1;
    }
    size_t argc = 0;
    while (req->argv[argc])
        argc++;
    const char **argv = calloc(argc + 5, sizeof *argv);
    if (c->count == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        node *grown = realloc(c->nodes, cap * sizeof *grown);
        if (grown) {
            c->nodes = grown;
            c->cap = cap;
        }
    }
    if (!argv || c->count == c->cap) {
        free(argv);
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return -1;
    }
    size_t k = 0;
    if (in_ns) {
        argv[k++] = c->ip_path;
        argv[k++] = "netns";
        argv[k++] = "exec";
        argv[k++] = host;
    }
    for (size_t i = 0; i < argc; i++)
        argv[k++] = req->argv[i];
    /* fds: the node's output; execd: closed by the child's exec, so that launch returns
     * once the node runs its own program (until then the child is a copy of this process,
     * whose resident memory the functions' cap must not take for the worker's) */
    int fds[2], execd[2];
    bool piped = pipe2(fds, O_CLOEXEC) == 0;
    if (!piped || pipe2(execd, O_CLOEXEC) != 0) {
        bv_error_set(err, BV_ERR_IO, "local cloud: pipe: %s", strerror(errno));
        if (piped) {
            close(fds[0]);
            close(fds[1]);
        }
        free(argv);
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* the child: async-signal-safe calls only until exec */
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* a node cleans up after itself, then ends */
        if (getppid() != parent)
            _exit(127); /* the coordinator is gone already */
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        if (execd[1] != 3)
            dup3(execd[1], 3, O_CLOEXEC);
        close_range(4, ~0u, 0);
        execv(argv[0], (char *const *)argv);
        static const char msg[] = "cannot start the node's command\n";
        if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
            /* nothing more to say */
        }
        _exit(127);
    }
    free(argv);
    close(fds[1]);
    close(execd[1]);
    char byte;
    while (pid > 0 && read(execd[0], &byte, 1) < 0 && errno == EINTR) {
        /* EOF: the child ran exec (or ended) */
    }
    close(execd[0]);
    if (pid < 0) {
        close(fds[0]);
        bv_error_set(err, BV_ERR_IO, "local cloud: fork: %s", strerror(errno));
        return -1;
    }
    node *n = &c->nodes[c->count];
    *n = (node){.id = (int64_t)c->count, .pid = pid, .alive = true, .out_fd = fds[0]};
    snprintf(n->label, sizeof n->label, "%s", label ? label : "node");
    n->function = function;
    if (function)
        cap_cpu(c, n); /* a cgroup with cpu.max, where the platform can make one */
    else if (c->trace) { /* it stands for a node of the trace that is there */
        const trace_node *t = take_node(c, zone);
        if (t)
            snprintf(n->trace_name, sizeof n->trace_name, "%s", t->name);
        if (t && c->zones > 1)
            bv_log(BV_LOG_INFO, "local cloud: %s (node %lld) stands for %s, zone %d", n->label,
                   (long long)n->id, t->name, t->zone);
    }
    c->count++;
    /* the table may move when it grows: the reader gets its own copy of fd and label */
    node *copy = malloc(sizeof *copy);
    if (copy) {
        *copy = *n;
        n->reader_on = pthread_create(&n->reader, NULL, reader_main, copy) == 0;
    }
    if (!n->reader_on) {
        free(copy);
        close(fds[0]); /* the node's output is lost, the node is not */
    }
    push_event(c, BV_CLOUD_JOINED, n->id, -1);
    return n->id;
}

/* Reaps n if it has ended; waits up to `seconds` for that (0: just looks). */
static bool reap(node *n, double seconds, int *status)
{
    struct timespec step = {0, 10 * 1000 * 1000};
    for (double waited = 0;; waited += 0.01) {
        pid_t r = waitpid(n->pid, status, WNOHANG);
        if (r == n->pid || (r < 0 && errno == ECHILD)) {
            n->alive = false;
            join_reader(n);
            if (n->cgroup[0] && rmdir(n->cgroup) == 0)
                n->cgroup[0] = '\0';
            return true;
        }
        if (waited >= seconds)
            return false;
        nanosleep(&step, NULL);
    }
}

/* SIGTERM, then SIGKILL after the grace period; reaps the node. */
static void stop_node(bv_cloud *c, node *n)
{
    int status;
    if (!n->alive)
        return;
    kill(n->pid, SIGTERM);
    if (!reap(n, c->grace_seconds, &status)) {
        kill(n->pid, SIGKILL);
        reap(n, 1e9, &status);
    }
}

static bv_status local_terminate(bv_cloud *c, int64_t id, bv_error *err)
{
    node *n = find(c, id);
    if (!n)
        return bv_error_set(err, BV_ERR_INVALID, "local cloud: no node %lld", (long long)id);
    stop_node(c, n);
    release(c, n);
    return BV_OK;
}

/* SIGKILL (a stopped process dies of it too), and the node reaped. */
static bv_status local_kill(bv_cloud *c, int64_t id, bv_error *err)
{
    node *n = find(c, id);
    if (!n)
        return bv_error_set(err, BV_ERR_INVALID, "local cloud: no node %lld", (long long)id);
    int status;
    if (n->alive) {
        kill(n->pid, SIGKILL);
        reap(n, 1e9, &status);
    }
    release(c, n);
    return BV_OK;
}

/* The trace's events that are due: a removed node that stands for a launched one is
 * killed outright, as a spot instance is taken away. */
static void replay(bv_cloud *c)
{
    double run = since_start(c), now = c->trace_start + run * c->speedup;
    for (; c->next_event < c->ntrace && c->trace[c->next_event].t <= now; c->next_event++) {
        const trace_event *e = &c->trace[c->next_event];
        node *n = NULL;
        for (size_t i = 0; !e->add && i < c->count && !n; i++)
            if (c->nodes[i].alive && strcmp(c->nodes[i].trace_name, e->name) == 0)
                n = &c->nodes[i];
        if (n) {
            kill(n->pid, SIGKILL);
            bv_log(BV_LOG_INFO, "local cloud: the trace removes %s at %.0f s (%.1f s into "
                   "the run): %s (node %lld) killed", e->name, e->t, run, n->label,
                   (long long)n->id);
        } else if (e->add) { /* capacity for the next launch: it stands for the node */
            trace_node *t = &c->alive[c->nalive++];
            *t = (trace_node){.zone = (int)(c->added++ % (size_t)c->zones), .offered = true};
            snprintf(t->name, TRACE_NAME, "%s", e->name);
            bv_log(BV_LOG_INFO, "local cloud: the trace adds %s at %.0f s (%.1f s into the "
                   "run): a node to launch", e->name, e->t, run);
            push_event(c, BV_CLOUD_OFFERED, -1, -1);
        }
        if (!e->add && forget(c, e->name)) { /* offered, never launched on: taken back */
            bv_log(BV_LOG_INFO, "local cloud: the trace removes %s at %.0f s (%.1f s into "
                   "the run): the node offered before is gone", e->name, e->t, run);
            push_event(c, BV_CLOUD_WITHDRAWN, -1, -1);
        }
    }
}

static int local_poll(bv_cloud *c, bv_cloud_event *events, int max, bv_error *err)
{
    (void)err;
    if (c->trace)
        replay(c);
    double now = since_start(c);
    for (size_t i = 0; i < c->count; i++) { /* the platform's injected kills */
        node *n = &c->nodes[i];
        if (n->alive && n->kill_at > 0 && now >= n->kill_at) {
            kill(n->pid, SIGKILL);
            n->kill_at = 0;
        }
        double mb = n->alive && n->function && c->fn.memory_mb > 0 ? resident_mb(n->pid) : 0;
        if (mb > c->fn.memory_mb) {
            kill(n->pid, SIGKILL);
            bv_log(BV_LOG_WARN, "local cloud: %s used %.0f MB of its %.0f MB: killed", n->label,
                   mb, c->fn.memory_mb);
        }
    }
    for (size_t i = 0; i < c->count; i++) {
        int status = -1;
        if (c->nodes[i].alive && reap(&c->nodes[i], 0, &status))
            push_event(c, BV_CLOUD_EXITED, c->nodes[i].id, status);
    }
    int n = c->nevents < max ? c->nevents : max;
    for (int i = 0; i < n; i++) {
        size_t size = events[i].size < sizeof events[i] ? events[i].size : sizeof events[i];
        memcpy(&events[i], &c->events[i], size);
        events[i].size = size;
    }
    memmove(c->events, c->events + n, (size_t)(c->nevents - n) * sizeof *c->events);
    c->nevents -= n;
    return n;
}

static void local_destroy(bv_cloud *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->count; i++) /* SIGTERM to all first, then wait for each */
        if (c->nodes[i].alive)
            kill(c->nodes[i].pid, SIGTERM);
    for (size_t i = 0; i < c->count; i++)
        stop_node(c, &c->nodes[i]);
    free(c->nodes);
    free(c->trace);
    free(c->alive);
    free(c);
}

static const bv_cloud_ops local_ops = {
    .create = local_create,
    .destroy = local_destroy,
    .launch = local_launch,
    .terminate = local_terminate,
    .poll = local_poll,
    .function_limits = local_function_limits,
    .invoke = local_invoke,
    .kill = local_kill,
};

static const bv_plugin local_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_CLOUD, "local", "0.1.0",
                     "roles as processes on this machine, or in its network namespaces"),
    .options = local_options,
    .ops = &local_ops,
    .ops_size = sizeof local_ops,
};

BV_PLUGIN_ENTRY(cloud, local, local_plugin)
