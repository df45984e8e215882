/* Messages between the graph engine's roles (graph server, parameter server, tensor
 * workers, coordinator). Every message is a wire frame (wire.h) whose payload starts with
 * a fixed bv_task_hdr followed by up to three byte arrays a, b, c; receivers validate the
 * frame and the array sizes before use. Roles only ever talk through the transport. */
#ifndef BIVOUAC_ROLE_MSG_H
#define BIVOUAC_ROLE_MSG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/transport.h"
#include "bivouac/wire.h"

enum bv_msg_type {
    BV_MSG_EPOCH = 1,       /* coord -> GS: run one epoch (training or evaluation); with
                               several parameter servers a = each one's seconds per
                               interval in the last epoch (float64 each) */
    BV_MSG_EPOCH_DONE,      /* GS -> coord: stats; reply_to = the graph server's part,
                               row_begin = bytes of boundary rows it sent (BV_MSG_GHOSTS);
                               a gated training pass: a = its figures (BV_PIPE_*), b = per
                               stage the most intervals at it at once (float64 each) */
    BV_MSG_FWD_TASK,        /* GS -> TW: a = input rows */
    BV_MSG_FWD_RESULT,      /* TW -> GS: a = output rows */
    BV_MSG_LOSS_TASK,       /* GS -> TW: a = logits, b = labels (int32), c = split (uint8) */
    BV_MSG_LOSS_RESULT,     /* TW -> GS: stats; a = dlogits (training) */
    BV_MSG_BWD_TASK,        /* GS -> TW: a = input rows, b = output rows, c = d(output) */
    BV_MSG_BWD_RESULT,      /* TW -> GS: a = d(input) rows (may be empty); from a function
                               worker c = its weight gradients, which the graph server
                               sends on to the parameter server (lambda_pool.h) */
    BV_MSG_GRADS,           /* TW -> PS: a = weight gradients, all params concatenated */
    BV_MSG_PULL,            /* TW -> PS: want weights */
    BV_MSG_WEIGHTS,         /* PS -> TW: a = all params concatenated */
    BV_MSG_STEP,            /* coord -> PS: apply the epoch's gradients (WeightUpdate) */
    BV_MSG_STEPPED,         /* PS -> coord */
    BV_MSG_GET_STATE,       /* coord -> PS */
    BV_MSG_STATE,           /* PS -> coord: a = params, b = adam m, c = adam v */
    BV_MSG_SET_STATE,       /* coord -> PS: same layout as STATE */
    BV_MSG_ERROR,           /* any -> whoever waits: a = message text */
    BV_MSG_SHUTDOWN,        /* coord -> all */
    BV_MSG_READY,           /* role -> coord: inbox bound, ready for work */
    BV_MSG_EDGE_FWD_TASK,   /* GS -> TW: a = src windows (all vertices), b = dst windows,
                               c = the interval's edges (rowptr int64 rows+1, colidx int32) */
    BV_MSG_EDGE_FWD_RESULT, /* TW -> GS: a = values per edge */
    BV_MSG_EDGE_BWD_TASK,   /* GS -> TW: a = src windows, b = dst windows,
                               c = forward values then their gradient, per edge */
    BV_MSG_EDGE_BWD_RESULT, /* TW -> GS: a = d(src windows), b = d(dst windows); c as for
                               BV_MSG_BWD_RESULT */
    BV_MSG_GHOSTS,          /* GS -> GS: a = boundary rows of stage `stage`'s vertex array
                               (flags BV_TASK_GRADS: of its gradient) for the receiver;
                               interval = the sender's part */
    BV_MSG_HELLO,           /* role -> coord (links over tcp): a = the address-book lines
                               of the inboxes it bound ("gs 0 tcp://10.0.0.1:40123") */
    BV_MSG_BOOK,            /* coord -> role: a = the whole address book, once every role
                               has said HELLO; the role then connects and sets up */
    BV_MSG_SEGMENT,         /* GS -> TW, once, before any task (roles as processes on one
                               host, shared_segment.h): version = the graph server's pid,
                               row_begin = its descriptor of the segment, rows = the
                               segment's bytes, reply_to = its part; a = bv_array_ref per
                               stage array (offset from the segment's start) */
    BV_MSG_KNOB,            /* coord -> GS, between epochs: a policy set a knob of the task
                               gate; a = the knob's name, stats[0] = its value */
    BV_MSG_FUSED_TASK,      /* GS -> TW: the last (tensor) stage's forward, the loss and, in
                               training, the stage's backward in one task (task fusion,
                               compute: {plugin: lambda, fuse: true}); a = input rows,
                               b = labels (int32), c = split (uint8) */
    BV_MSG_FUSED_RESULT,    /* TW -> GS: stats; a = d(input) rows (training, unless added in
                               place); c = a function worker's weight gradients (training),
                               as for BV_MSG_BWD_RESULT */
    BV_MSG_HEARTBEAT        /* role process -> coord, every BV_HEARTBEAT_MS from a thread of
                               its own: reply_to = its slot (bv_role_slots' order) */
};

/* A role process's heartbeat period (role_loop.c); the coordinator kills one silent for
 * engine.peer_timeout (docs/cluster.md#a-role-that-hangs). */
#define BV_HEARTBEAT_MS 500

/* Roles that share one address space (the engine's threads) pass the large arrays of
 * vertex tasks by reference instead of copying them into messages: the array's bytes in
 * the message are then this struct, naming a window of one of the arrays the graph server
 * shares (bv_engine_shared_window checks it against the array's size before any use;
 * docs/architecture.md#shared-arrays). */
typedef struct bv_array_ref {
    int64_t array;   /* BV_SHARED_* or bv_shared_act / bv_shared_dact of a stage */
    uint64_t offset; /* bytes from the array's start */
    uint64_t bytes;
} bv_array_ref;

/* Fixed part of every payload; multiple of 8 bytes so the arrays stay aligned. On the
 * wire it is not this struct's memory image but a fixed 200-byte little-endian layout
 * written field by field (task_hdr.h, docs/wire-protocol.md). */
typedef struct bv_task_hdr {
    int64_t epoch;
    int64_t row_begin;
    int64_t rows;
    int64_t version; /* weights version (PS steps) */
    int64_t step;    /* optimizer step (STATE) / expected gradient messages (STEP) */
    int64_t edge_begin; /* EDGE tasks: global index of the interval's first edge */
    int32_t stage;
    int32_t interval;
    int32_t training;
    int32_t reply_to; /* role id that wants the answer */
    int32_t flags;    /* BV_TASK_* */
    int32_t ps;       /* tasks: the parameter server of the interval's weights this epoch
                         (bv_engine_pick_servers) */
    float grad_scale;
    float lr;
    uint64_t na, nb, nc; /* byte sizes of arrays a, b, c */
    bv_array_ref reply; /* BV_TASK_REPLY_IN_PLACE: where the result goes */
    /* loss stats per split (train, val, test): loss_sum, count, correct */
    double stats[9];
} bv_task_hdr;

/* Task flags. The first stage's input (the features) never changes, so a tensor worker
 * keeps the rows of each interval it was sent once (BV_TASK_KEEP_INPUT) and later tasks
 * on that interval carry no input (BV_TASK_CACHED_INPUT). */
enum { BV_TASK_KEEP_INPUT = 1, BV_TASK_CACHED_INPUT = 2 };
/* The same for an interval's edges (EDGE tasks): sent once, then kept by the worker. */
enum { BV_TASK_KEEP_GRAPH = 4, BV_TASK_CACHED_GRAPH = 8 };
/* Arrays a, b, c hold a bv_array_ref each instead of their bytes; and the result is
 * written into hdr.reply in place (a forward or loss result is stored there, a backward
 * result added) instead of being sent back. Only between roles of one process. */
enum { BV_TASK_REF_A = 16, BV_TASK_REF_B = 32, BV_TASK_REF_C = 64, BV_TASK_REPLY_IN_PLACE = 128 };
/* GRADS passed on by the parameter server a tensor worker sent them to, to the others. */
enum { BV_TASK_FORWARDED = 256 };
/* GHOSTS that carry gradients (the backward exchange), not activations. */
enum { BV_TASK_GRADS = 512 };
/* Faults a serverless platform injects into an invocation (lambda_pool.c, the cloud's
 * invoke): the function worker fails (ends without a result) or hangs until it is killed. */
enum { BV_TASK_FAULT_FAIL = 1024, BV_TASK_FAULT_HANG = 2048 };
/* The platform does not cap the function worker's CPU share (no cgroup v2 it may use): the
 * worker holds itself to it (the cloud's function_limits, as the graph server read them). */
enum { BV_TASK_THROTTLE = 8192 };
/* A forward task a function worker computes in two halves, the first while the second
 * half of its input still arrives (worker-internal streaming, Dorylus §6; compute:
 * {plugin: lambda, stream: true}). */
enum { BV_TASK_STREAM = 16384 };
/* A backward task without its forward's output rows: the worker computes them again from
 * the input (tensor rematerialisation, Dorylus §6; compute: {plugin: lambda, remat: true}). */
enum { BV_TASK_REMAT = 4096 };

/* The task's stage reads features the dataset keeps sparse (with BV_TASK_KEEP_INPUT):
 * array a holds the interval's rows packed (sparse_rows.h), not rows x in_dim floats; or,
 * to a tensor worker in the graph server's own process, nothing: the worker views the
 * rows of the dataset they share. */
enum { BV_TASK_SPARSE_INPUT = 32768 };

/* Role ids (the wire header's sender). Tensor workers are BV_ROLE_TW + i. */
enum { BV_ROLE_COORD = 1, BV_ROLE_GS = 2, BV_ROLE_PS = 3, BV_ROLE_TW = 16 };

typedef struct bv_role_msg {
    bv_msg raw;
    bv_wire_header wire;
    bv_task_hdr hdr;
    const uint8_t *a, *b, *c;
} bv_role_msg;

bv_status bv_role_send(const bv_transport_ops *t, bv_endpoint *ep, uint16_t type,
                       uint32_t sender, const bv_task_hdr *hdr, const void *a, size_t na,
                       const void *b, size_t nb, const void *c, size_t nc, bv_error *err);
/* Receives and validates one message (wire checks, header, array sizes). A frame that
 * fails (malformed, truncated, oversized for its header, another wire version, or
 * dropped by the transport as not two frames) returns BV_ERR_CORRUPT, is released
 * unread and is counted in bv_role_frames_dropped(). */
bv_status bv_role_recv(const bv_transport_ops *t, bv_endpoint *ep, bv_role_msg *m,
                       int timeout_ms, bv_error *err);
void bv_role_release(const bv_transport_ops *t, bv_role_msg *m);
/* bv_role_recv, but a message that fails its checks (BV_ERR_CORRUPT: a malformed,
 * truncated or oversized frame, or one not of this protocol) is dropped and counted in
 * *dropped, and the receive goes on until a valid message, a timeout or a transport
 * failure. */
bv_status bv_role_recv_valid(const bv_transport_ops *t, bv_endpoint *ep, bv_role_msg *m,
                             int timeout_ms, _Atomic uint64_t *dropped, bv_error *err);
/* A function worker's network bandwidth, each way (bytes per second; 0: no limit): every
 * message this process sends or receives then takes its bytes' time on the link, after
 * those before it (lambda_pool.h). Call before any role of the process runs. */
void bv_role_limit_bandwidth(double bytes_per_second);
/* Under that limit, a message marked BV_TASK_STREAM is taken as in once all but the second
 * half of its array a is: this waits until that half is in too. */
void bv_role_link_rest(void);
/* A function worker held to `share` of a core (0: not): from now on, every message this
 * process sends first waits until the CPU work since the last one has taken cpu / share
 * of wall time. */
void bv_role_throttle(double share);
/* Frames bv_role_recv has refused in this process so far (every role of the process
 * together: one role per process when roles run as processes). */
uint64_t bv_role_frames_dropped(void);
/* Receives on `inbox` until a message of `type` arrives (the caller releases it). An ERROR
 * fails with its text; invalid messages are dropped and counted (bv_role_recv_valid); any
 * other message is logged as `who`'s and dropped. The graph server waits for its
 * results this way, the coordinator of threads for its replies. */
bv_status bv_role_wait(const bv_transport_ops *t, bv_endpoint *inbox, const char *who,
                       uint16_t type, _Atomic uint64_t *dropped, bv_role_msg *m,
                       bv_error *err);
/* Sends BV_MSG_ERROR carrying err->msg. */
void bv_role_send_error(const bv_transport_ops *t, bv_endpoint *ep, uint32_t sender,
                        const bv_error *failure);

#endif
