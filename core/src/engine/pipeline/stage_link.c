/* A pipeline node's links (stage_link.h). */
#include "stage_link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bivouac/log.h"
#include "bivouac/wire.h"
#include "clock.h"
#include "grow.h"

#define STEP_BYTES 8

typedef struct stashed {
    bv_msg raw;
    bv_pipe_msg_in m;
} stashed;

struct bv_stage_link {
    const bv_transport_ops *t;
    bv_transport *tr;
    const char *const *addrs;
    int nodes, self;
    bv_endpoint *inbox;
    bv_endpoint **out; /* per node, opened on first send */
    stashed *stash;
    size_t nstash, cap;
    uint64_t dropped;
    bool timed_out; /* the last wait ended by its timeout */
    bool sliced;    /* bv_stage_link_slice_sends */
    int send_bound_ms;
    char **moved;   /* per node: its address since bv_stage_link_reroute (NULL: addrs') */
    bool in_command; /* bv_stage_link_command: the command running, its step */
    int64_t command_step;
    bool *gone; /* per node: an ABORT of the command running named it (it sends nothing
                   more for the command): a wait for it ends */
};

bv_status bv_stage_link_open(const bv_transport_ops *t, bv_transport *tr,
                             const char *const *addrs, int nodes, int self,
                             bv_stage_link **out, bv_error *err)
{
    *out = NULL;
    bv_stage_link *l = calloc(1, sizeof *l);
    bool *gone = calloc((size_t)nodes, sizeof *gone);
    if (!l || !gone || !(l->out = calloc((size_t)nodes, sizeof *l->out))) {
        free(l);
        free(gone);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    *l = (bv_stage_link){.t = t, .tr = tr, .addrs = addrs, .nodes = nodes, .self = self,
                         .out = l->out, .gone = gone};
    if (!(l->inbox = t->bind(tr, addrs[self], err))) {
        free(l->gone);
        free(l->out);
        free(l);
        return err->status ? err->status : BV_ERR_IO;
    }
    *out = l;
    return BV_OK;
}

void bv_stage_link_clear(bv_stage_link *l)
{
    for (size_t i = 0; i < l->nstash; i++)
        l->t->release(&l->stash[i].raw);
    l->nstash = 0;
}

void bv_stage_link_drop_steps(bv_stage_link *l, int64_t step, bool other)
{
    size_t kept = 0;
    for (size_t i = 0; i < l->nstash; i++) {
        const bv_pipe_msg_in *m = &l->stash[i].m;
        bool control = m->type == BV_PIPE_CMD || m->type == BV_PIPE_DONE ||
                       m->type == BV_PIPE_ERROR || m->type == BV_PIPE_STATE ||
                       m->type == BV_PIPE_HELLO || m->type == BV_PIPE_BOOK;
        if (control || (m->step == step) == other)
            l->stash[kept++] = l->stash[i];
        else
            l->t->release(&l->stash[i].raw);
    }
    l->nstash = kept;
}

void bv_stage_link_close(bv_stage_link *l)
{
    if (!l)
        return;
    bv_stage_link_clear(l);
    free(l->stash);
    for (int i = 0; i < l->nodes; i++) {
        if (l->out[i])
            l->t->close(l->out[i]);
        if (l->moved)
            free(l->moved[i]);
    }
    free(l->moved);
    free(l->out);
    free(l->gone);
    l->t->close(l->inbox);
    free(l);
}

uint64_t bv_stage_link_dropped(const bv_stage_link *l)
{
    return l->dropped;
}

bool bv_stage_link_timed_out(const bv_stage_link *l)
{
    return l->timed_out;
}

const char *bv_stage_link_bound(const bv_stage_link *l)
{
    const char *a = l->t->bound_address ? l->t->bound_address(l->inbox) : NULL;
    return a && a[0] ? a : l->addrs[l->self];
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bv_status take(bv_stage_link *l, int timeout_ms, stashed *s, bv_error *err);
static bv_status stash_push(bv_stage_link *l, const stashed *s, bv_error *err);

bv_status bv_stage_link_reroute(bv_stage_link *l, int node, const char *address,
                                bv_error *err)
{
    if (node < 0 || node >= l->nodes || node == l->self)
        return bv_error_set(err, BV_ERR_INVALID, "node %d cannot move node %d", l->self,
                            node);
    if (address) {
        char *copy = strdup(address);
        if (!copy || (!l->moved && !(l->moved = calloc((size_t)l->nodes, sizeof *l->moved)))) {
            free(copy);
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        }
        free(l->moved[node]);
        l->moved[node] = copy;
    }
    if (l->out[node]) { /* a fresh connection: nothing queued for the old inbox */
        l->t->close(l->out[node]);
        l->out[node] = NULL;
    }
    return BV_OK;
}

void bv_stage_link_slice_sends(bv_stage_link *l, int bound_ms)
{
    l->sliced = true;
    l->send_bound_ms = bound_ms;
}

static bool is_abort(const bv_pipe_msg_in *m)
{
    return m->type == BV_PIPE_CMD && m->tag == BV_PIPE_ABORT;
}

/* An abort of the command running (or of any, where none is said): one of an earlier
 * command that came late ends nothing. */
static bool aborts_this(const bv_stage_link *l, const bv_pipe_msg_in *m)
{
    return !l->in_command || m->step == l->command_step;
}

/* An abort of the command running that names nodes (int32 each) marks them gone: it ends
 * only the waits for those, and sends to them are dropped (false: it names none, and ends
 * every wait). */
static bool mark_gone(bv_stage_link *l, const bv_pipe_msg_in *m)
{
    for (size_t i = 0; i + sizeof(int32_t) <= m->bytes; i += sizeof(int32_t)) {
        int32_t n;
        memcpy(&n, (const char *)m->data + i, sizeof n);
        if (n >= 0 && n < l->nodes)
            l->gone[n] = true;
    }
    return m->bytes >= sizeof(int32_t);
}

static bool is_gone(const bv_stage_link *l, int node)
{
    return node >= 0 && node < l->nodes && l->gone[node];
}

/* Between two tries of a send: the messages that came meanwhile are stashed, and an
 * ABORT among them ends the send (BV_ERR_STOPPED); one that names nodes only marks them
 * gone (a send to one is dropped). */
static bv_status abort_came(bv_stage_link *l, int to, bv_error *err)
{
    for (;;) {
        stashed s;
        bv_error e = {0};
        bv_status st = take(l, 0, &s, &e);
        if (st == BV_ERR_CORRUPT) {
            l->dropped++;
            continue;
        }
        if (st != BV_OK) /* nothing more */
            return BV_OK;
        bool abort = is_abort(&s.m);
        if (abort && (!aborts_this(l, &s.m) || /* a late one of an earlier command */
                      mark_gone(l, &s.m))) {   /* names nodes: the caller looks */
            l->t->release(&s.raw);
            continue;
        }
        if (abort || (st = stash_push(l, &s, err)) != BV_OK) {
            l->t->release(&s.raw);
            return abort ? bv_error_set(err, BV_ERR_STOPPED, "stopped (the abort of step "
                                        "%lld) while sending to node %d",
                                        (long long)s.m.step, to)
                         : st;
        }
    }
}

/* The payload of a message: the step, then the data. */
static void fill_copy(void *dst, size_t bytes, const void *data)
{
    memcpy(dst, data, bytes);
}

static uint8_t *payload_make(int64_t step, size_t bytes,
                             void (*fill)(void *, size_t, const void *), const void *ctx)
{
    uint8_t *payload = malloc(STEP_BYTES + bytes);
    if (payload) {
        put_le64(payload, (uint64_t)step);
        if (bytes)
            fill(payload + STEP_BYTES, bytes, ctx);
    }
    return payload;
}

/* One try; the payload is consumed (the transport keeps the buffer where it can). */
static bv_status send_once(bv_stage_link *l, int to, const bv_wire_header *wh,
                           uint8_t *payload, size_t len, bv_error *err)
{
    if (l->t->send_owned) /* it frees the buffer on failure too */
        return l->t->send_owned(l->out[to], wh, sizeof *wh, payload, len, err);
    bv_status st = l->t->send(l->out[to], wh, sizeof *wh, payload, len, err);
    free(payload);
    return st;
}

bv_status bv_stage_link_send(bv_stage_link *l, int to, uint16_t type, uint32_t tag,
                             int64_t step, const void *data, size_t bytes, bv_error *err)
{
    return bv_stage_link_send_fill(l, to, type, tag, step, bytes, fill_copy, data, err);
}

bv_status bv_stage_link_send_fill(bv_stage_link *l, int to, uint16_t type, uint32_t tag,
                                  int64_t step, size_t bytes,
                                  void (*fill)(void *dst, size_t bytes, const void *ctx),
                                  const void *ctx, bv_error *err)
{
    if (to < 0 || to >= l->nodes)
        return bv_error_set(err, BV_ERR_INTERNAL, "no node %d of %d", to, l->nodes);
    if (is_gone(l, to)) /* it takes nothing more of the command: dropped */
        return BV_OK;
    const char *addr = l->moved && l->moved[to] ? l->moved[to] : l->addrs[to];
    if (!l->out[to] && !(l->out[to] = l->t->connect(l->tr, addr, err)))
        return err->status ? err->status : BV_ERR_IO;
    size_t len = STEP_BYTES + bytes;
    uint8_t *payload = payload_make(step, bytes, fill, ctx);
    if (!payload)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for a %zu-byte message", len);
    bv_wire_header wh;
    bv_wire_header_make(&wh, type, (uint32_t)l->self, tag, payload, len);
    /* sliced: each try gives up after a slice; an ABORT that came meanwhile ends the
     * send, else it is tried again until the bound */
    double until = 1e3 * bv_now_seconds() + l->send_bound_ms;
    for (;;) {
        bv_status st = send_once(l, to, &wh, payload, len, err);
        if (st != BV_ERR_IO || !l->sliced ||
            (l->send_bound_ms >= 0 && 1e3 * bv_now_seconds() >= until))
            return st;
        if ((st = abort_came(l, to, err)) != BV_OK)
            return st;
        if (is_gone(l, to)) /* an ABORT named it meanwhile: dropped (send_once freed it) */
            return BV_OK;
        if (!(payload = payload_make(step, bytes, fill, ctx)))
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for a %zu-byte message",
                                len);
    }
}

static bool matches(const bv_pipe_msg_in *m, uint16_t type, int from, uint32_t tag,
                    int64_t step)
{
    bool answer = (type == BV_PIPE_DONE || type == BV_PIPE_STATE) && m->type == BV_PIPE_ERROR;
    return (m->type == type || answer) && (from < 0 || m->sender == (uint32_t)from) &&
           (tag == BV_PIPE_ANY_TAG || m->tag == tag) &&
           (step == BV_PIPE_ANY_STEP || m->step == step);
}

void bv_stage_link_command(bv_stage_link *l, int64_t step)
{
    l->in_command = true;
    l->command_step = step;
    memset(l->gone, 0, (size_t)l->nodes * sizeof *l->gone);
}

/* One message from the transport, checked; BV_ERR_CORRUPT for one that fails a check. */
static bv_status take(bv_stage_link *l, int timeout_ms, stashed *s, bv_error *err)
{
    bv_status st = l->t->recv(l->inbox, &s->raw, timeout_ms, err);
    if (st != BV_OK)
        return st;
    bv_wire_header wh;
    st = bv_wire_check(s->raw.header, s->raw.header_len, s->raw.payload, s->raw.payload_len,
                       0, &wh, err);
    if (st == BV_OK && (s->raw.payload_len < STEP_BYTES || wh.sender >= (uint32_t)l->nodes))
        st = bv_error_set(err, BV_ERR_CORRUPT, "a pipeline message from node %u with %zu "
                          "bytes", wh.sender, s->raw.payload_len);
    if (st != BV_OK) {
        l->t->release(&s->raw);
        return BV_ERR_CORRUPT;
    }
    const uint8_t *p = s->raw.payload;
    s->m = (bv_pipe_msg_in){wh.type, wh.sender, wh.tag, (int64_t)get_le64(p),
                            p + STEP_BYTES, s->raw.payload_len - STEP_BYTES, NULL};
    return BV_OK;
}

static bv_status stash_push(bv_stage_link *l, const stashed *s, bv_error *err)
{
    if (!bv_grow((void **)&l->stash, &l->cap, l->nstash, sizeof *l->stash, 16))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for early messages");
    l->stash[l->nstash++] = *s;
    return BV_OK;
}

bv_status bv_stage_link_recv(bv_stage_link *l, uint16_t type, int from, uint32_t tag,
                             int64_t step, int timeout_ms, const char *what,
                             bv_pipe_msg_in *m, bv_error *err)
{
    l->timed_out = false;
    for (size_t i = 0; i < l->nstash; i++) { /* an abort is never stashed: see below */
        if (matches(&l->stash[i].m, type, from, tag, step)) {
            stashed *s = malloc(sizeof *s);
            if (!s)
                return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
            *s = l->stash[i];
            memmove(&l->stash[i], &l->stash[i + 1], (l->nstash - i - 1) * sizeof *l->stash);
            l->nstash--;
            *m = s->m;
            m->own = s;
            return BV_OK;
        }
    }
    if (is_gone(l, from))
        return bv_error_set(err, BV_ERR_STOPPED, "stopped while waiting for %s (node %d "
                            "sends nothing more)", what, from);
    double until = timeout_ms >= 0 ? 1e3 * bv_now_seconds() + timeout_ms : 0;
    for (;;) {
        int left = -1;
        if (timeout_ms >= 0) {
            double n = 1e3 * bv_now_seconds();
            left = n >= until ? 0 : (int)(until - n + 1);
        }
        stashed s;
        bv_status st = take(l, left, &s, err);
        if (st == BV_ERR_CORRUPT) {
            if (l->dropped++ == 0)
                bv_log(BV_LOG_WARN, "pipeline node %d dropped a message that failed its "
                       "checks (%s); further ones are counted", l->self, err->msg);
            continue;
        }
        if (st == BV_ERR_IO && strstr(err->msg, "timeout") && (l->timed_out = true))
            return bv_error_set(err, BV_ERR_IO, "no %s within %g s", what,
                                timeout_ms / 1e3);
        if (st != BV_OK)
            return st;
        if (is_abort(&s.m)) {
            bool ours = aborts_this(l, &s.m) && (!mark_gone(l, &s.m) || is_gone(l, from));
            l->t->release(&s.raw);
            if (!ours)
                continue;
            return bv_error_set(err, BV_ERR_STOPPED, "stopped while waiting for %s", what);
        }
        if (matches(&s.m, type, from, tag, step)) {
            stashed *own = malloc(sizeof *own);
            if (!own) {
                l->t->release(&s.raw);
                return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
            }
            *own = s;
            *m = s.m;
            m->own = own;
            return BV_OK;
        }
        if ((st = stash_push(l, &s, err)) != BV_OK) {
            l->t->release(&s.raw);
            return st;
        }
    }
}

void bv_stage_link_release(bv_stage_link *l, bv_pipe_msg_in *m)
{
    stashed *s = m->own;
    if (s) {
        l->t->release(&s->raw);
        free(s);
    }
    memset(m, 0, sizeof *m);
}

bv_status bv_stage_link_recv_into(bv_stage_link *l, uint16_t type, int from, uint32_t tag,
                                  int64_t step, int timeout_ms, const char *what, void *buf,
                                  size_t bytes, bv_error *err)
{
    bv_pipe_msg_in m;
    bv_status st = bv_stage_link_recv(l, type, from, tag, step, timeout_ms, what, &m, err);
    if (st != BV_OK)
        return st;
    if (m.bytes != bytes) {
        size_t got = m.bytes;
        bv_stage_link_release(l, &m);
        return bv_error_set(err, BV_ERR_CORRUPT, "%s from node %d: %zu bytes, expected %zu",
                            what, from, got, bytes);
    }
    memcpy(buf, m.data, bytes);
    bv_stage_link_release(l, &m);
    return BV_OK;
}

static size_t chunk_begin(size_t n, int ranks, int c)
{
    return n * (size_t)c / (size_t)ranks;
}

bv_status bv_stage_link_allreduce(bv_stage_link *l, const int *ring, int ranks, int rank,
                                  int64_t step, float *x, size_t n, int timeout_ms,
                                  bv_error *err)
{
    if (ranks < 2)
        return BV_OK;
    int next = ring[(rank + 1) % ranks], prev = ring[(rank + ranks - 1) % ranks];
    float *in = malloc((n / (size_t)ranks + 1) * sizeof *in); /* the largest chunk */
    if (!in)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the all-reduce");
    bv_status st = BV_OK;
    /* reduce-scatter: after step k, chunk (rank - k - 1) holds the sum of k + 2 ranks */
    for (int k = 0; st == BV_OK && k < ranks - 1; k++) {
        int cs = (rank - k + 2 * ranks) % ranks, cr = (rank - k - 1 + 2 * ranks) % ranks;
        size_t s0 = chunk_begin(n, ranks, cs), s1 = chunk_begin(n, ranks, cs + 1);
        size_t r0 = chunk_begin(n, ranks, cr), r1 = chunk_begin(n, ranks, cr + 1);
        st = bv_stage_link_send(l, next, BV_PIPE_REDUCE, (uint32_t)cs, step, x + s0,
                                (s1 - s0) * sizeof *x, err);
        if (st == BV_OK)
            st = bv_stage_link_recv_into(l, BV_PIPE_REDUCE, prev, (uint32_t)cr, step,
                                         timeout_ms, "a share of the all-reduce", in,
                                         (r1 - r0) * sizeof *x, err);
        for (size_t i = 0; st == BV_OK && i < r1 - r0; i++)
            x[r0 + i] = in[i] + x[r0 + i];
    }
    /* all-gather: the finished chunk (rank + 1) goes round */
    for (int k = 0; st == BV_OK && k < ranks - 1; k++) {
        int cs = (rank + 1 - k + 2 * ranks) % ranks, cr = (rank - k + 2 * ranks) % ranks;
        size_t s0 = chunk_begin(n, ranks, cs), s1 = chunk_begin(n, ranks, cs + 1);
        size_t r0 = chunk_begin(n, ranks, cr), r1 = chunk_begin(n, ranks, cr + 1);
        st = bv_stage_link_send(l, next, BV_PIPE_REDUCE, (uint32_t)(ranks + cs), step,
                                x + s0, (s1 - s0) * sizeof *x, err);
        if (st == BV_OK)
            st = bv_stage_link_recv_into(l, BV_PIPE_REDUCE, prev, (uint32_t)(ranks + cr), step,
                                         timeout_ms, "a share of the all-reduce", x + r0,
                                         (r1 - r0) * sizeof *x, err);
    }
    free(in);
    return st;
}

bv_status bv_stage_state_pack(const bv_state *s, uint8_t **out, size_t *bytes, bv_error *err)
{
    size_t n = 0;
    for (size_t i = 0; i < s->count; i++)
        n += 4 + strlen(s->blobs[i].name) + 8 + s->blobs[i].size;
    uint8_t *buf = malloc(n ? n : 1), *p = buf;
    if (!buf)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for a %zu-byte state", n);
    for (size_t i = 0; i < s->count; i++) {
        size_t len = strlen(s->blobs[i].name);
        for (int b = 0; b < 4; b++)
            p[b] = (uint8_t)(len >> (8 * b));
        memcpy(p + 4, s->blobs[i].name, len);
        put_le64(p + 4 + len, s->blobs[i].size);
        memcpy(p + 12 + len, s->blobs[i].data, s->blobs[i].size);
        p += 12 + len + s->blobs[i].size;
    }
    *out = buf;
    *bytes = n;
    return BV_OK;
}

bv_status bv_stage_state_unpack(const void *buf, size_t bytes, bv_state *out, bv_error *err)
{
    const uint8_t *p = buf, *end = p + bytes;
    char name[1024];
    while (p < end) {
        if (end - p < 4)
            return bv_error_set(err, BV_ERR_CORRUPT, "a state cut off in a name's length");
        size_t len = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
        if (len >= sizeof name || (size_t)(end - p) < 12 + len)
            return bv_error_set(err, BV_ERR_CORRUPT, "a state with a name of %zu bytes", len);
        memcpy(name, p + 4, len);
        name[len] = '\0';
        uint64_t size = get_le64(p + 4 + len);
        if (size > (uint64_t)(end - p) - 12 - len)
            return bv_error_set(err, BV_ERR_CORRUPT, "state blob %s: %llu bytes, %zu left",
                                name, (unsigned long long)size, (size_t)(end - p) - 12 - len);
        if (bv_state_add(out, name, p + 12 + len, (size_t)size) != BV_OK)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the state");
        p += 12 + len + size;
    }
    return BV_OK;
}
