/* A pipeline node's links (docs/pipeline.md#the-runtime): its inbox, an outbox to each
 * peer it sends to, and receives matched by (type, sender, tag, step), so messages that
 * come early (a gradient while a stage waits for an activation) wait in the node's stash
 * until the schedule asks for them. Every message is a wire frame (wire.h) whose payload
 * is the step (8 bytes, little-endian) and then the data; a receiver checks the frame and
 * the data's exact size. Nodes are numbered: stage s of pipeline d is d * P + s, and the
 * coordinator is D * P. Model-agnostic: the sequence engine's stages (engine/seq) use it
 * for activations, gradients, the tied-weight sums, the gradient norm and the all-reduce.
 */
#ifndef BIVOUAC_ENGINE_PIPELINE_STAGE_LINK_H
#define BIVOUAC_ENGINE_PIPELINE_STAGE_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/resilience.h"
#include "bivouac/transport.h"

/* Message types (the wire header's type). */
enum bv_pipe_msg {
    BV_PIPE_CMD = 0x50,  /* coordinator -> node: tag = bv_pipe_cmd, data = arguments */
    BV_PIPE_DONE,        /* node -> coordinator: tag = the command, data = its results */
    BV_PIPE_ERROR,       /* node -> coordinator: data = the message text */
    BV_PIPE_ACT,         /* stage -> next stage: tag = microbatch, data = activations */
    BV_PIPE_GRAD,        /* stage -> stage before: tag = microbatch, data = d(activations) */
    BV_PIPE_TIED,        /* a tied tensor's gradient to its owner's stage, and the sum back */
    BV_PIPE_NORM,        /* squared gradient norms to stage 0, the global norm back */
    BV_PIPE_REDUCE,      /* all-reduce between a stage's replicas: tag = phase * D + chunk */
    BV_PIPE_STATE,       /* coordinator <-> node: packed state blobs */
    BV_PIPE_HELLO,       /* node -> coordinator (links over tcp): the address it bound */
    BV_PIPE_BOOK,        /* coordinator -> node: every node's address, one a line */
    BV_PIPE_REPLICA,     /* stage -> the stage that keeps its replica: its step's gradients */
};

/* Commands (BV_PIPE_CMD's tag). ABORT reaches a node that waits on a peer: the wait ends
 * with BV_ERR_STOPPED instead of waiting for a peer that has failed. */
enum bv_pipe_cmd {
    BV_PIPE_INIT = 1,
    BV_PIPE_TRAIN,
    BV_PIPE_EVAL,
    BV_PIPE_GET_STATE,
    BV_PIPE_SET_STATE,
    BV_PIPE_CRC,
    BV_PIPE_STOP,
    BV_PIPE_ABORT,
    BV_PIPE_REPLICA_CRC, /* answer: the replica's stage (int32, -1 none), the checksums of
                            the stage's own parameters and of its replica's (uint32 each) */
    BV_PIPE_COMMIT,      /* a prepared step applied (two-phase steps: docs/redundancy.md) */
    BV_PIPE_ADOPT,       /* to a shadow: run the lost next stage (int32 node, uint32 length
                            and every node's address a line, then the packed state of its
                            pipeline's other stages); the adopted node answers */
    BV_PIPE_RELEASE,     /* to a shadow: the stage it adopted was told to STOP; join it */
    BV_PIPE_REROUTE,     /* node (int32) listens at a new address (the rest of the data) */
    BV_PIPE_PING,        /* answered at once by a node that is not hanging */
    BV_PIPE_PHASE,       /* where the failed attempt `step` left the node: the answer is
                            an int32 of BV_PIPE_AT_* flags */
};

/* Lazy recovery (docs/redundancy.md#lazy-brc). PHASE's answer: the attempt's schedule
 * reached UPDATE on the node, and the node still has its own gradient sums of it
 * (AT_UPDATE); the node's replica ran its forward on every microbatch of it (HAS_FRC), or
 * its backward too, whose gradients it still has (HAS_BRC, efeb); the node kept the input
 * gradients it sent (HAS_KEPT). */
enum { BV_PIPE_AT_UPDATE = 1, BV_PIPE_HAS_FRC = 2, BV_PIPE_HAS_KEPT = 4, BV_PIPE_HAS_BRC = 8 };

/* A TRAIN command's data is the learning rate (a double), then for a node that goes on
 * from the update of the failed attempt `prev` this: the shadow of the lost node brc_for
 * runs its backward on the replica and sends it the gradients (a REPLICA message of tag
 * BV_PIPE_REPLICA_BRC: the flat gradients, then the loss sum and count as doubles); the
 * node after it sends the shadow resend_to its kept input gradients again (GRAD); the
 * adopted node takes them from brc_from; -1 where not. */
typedef struct bv_pipe_resume {
    int64_t prev;
    int32_t brc_for, resend_to, brc_from;
    int32_t zero; /* 0: the struct has no padding, every byte sent is set */
} bv_pipe_resume;
#define BV_PIPE_REPLICA_BRC 1

typedef struct bv_stage_link bv_stage_link;

/* A received message; data stays valid until bv_stage_link_release. */
typedef struct bv_pipe_msg_in {
    uint16_t type;
    uint32_t sender, tag;
    int64_t step;
    const void *data;
    size_t bytes;
    void *own; /* internal */
} bv_pipe_msg_in;

/* Binds node self's inbox at addrs[self]; outboxes to addrs[i] are opened on first send.
 * addrs has nodes entries and must outlive the link. */
bv_status bv_stage_link_open(const bv_transport_ops *t, bv_transport *tr,
                             const char *const *addrs, int nodes, int self,
                             bv_stage_link **out, bv_error *err);
void bv_stage_link_close(bv_stage_link *l);

bv_status bv_stage_link_send(bv_stage_link *l, int to, uint16_t type, uint32_t tag,
                             int64_t step, const void *data, size_t bytes, bv_error *err);
/* The same with a payload of `bytes` that fill(dst, bytes, ctx) writes straight into the
 * message (again where a send is tried again), for a payload gathered from pieces: no
 * copy of it is made first. */
bv_status bv_stage_link_send_fill(bv_stage_link *l, int to, uint16_t type, uint32_t tag,
                                  int64_t step, size_t bytes,
                                  void (*fill)(void *dst, size_t bytes, const void *ctx),
                                  const void *ctx, bv_error *err);
/* The transport gives up a send after a slice of bound_ms (node_group.h's
 * BV_SEND_SLICE_MS): a send is tried again until bound_ms (< 0: forever), and an ABORT
 * that comes meanwhile ends it with BV_ERR_STOPPED, so a node whose peer is gone is free
 * for the coordinator's next command at once. */
void bv_stage_link_slice_sends(bv_stage_link *l, int bound_ms);
/* The node runs the coordinator's command of step `step`: from now on only an ABORT of
 * that step ends a wait or a send (the coordinator aborts a command with its own step);
 * one of an earlier command that comes late is dropped. */
void bv_stage_link_command(bv_stage_link *l, int64_t step);
/* Node `node` listens at `address` now (NULL: still at the one addrs gives): the outbox to
 * it is closed and opened again on the next send, so that nothing goes to a connection of
 * the inbox it had before. */
bv_status bv_stage_link_reroute(bv_stage_link *l, int node, const char *address,
                                bv_error *err);

#define BV_PIPE_ANY_TAG UINT32_MAX
#define BV_PIPE_ANY_STEP INT64_MIN

/* Waits up to timeout_ms (< 0: forever) for the message (type, from, tag, step); from < 0,
 * BV_PIPE_ANY_TAG and BV_PIPE_ANY_STEP match any sender, tag and step. Messages that fail
 * their checks are dropped and counted; others that do not match wait in the stash. An
 * ABORT command (of the command running: bv_stage_link_command) ends the wait with
 * BV_ERR_STOPPED. `what` names the message in a timeout's error (BV_ERR_IO, and
 * bv_stage_link_timed_out then says so). A wait for a DONE or a STATE also takes an ERROR
 * with the same tag and step: the answer to a command is one or the other. */
bv_status bv_stage_link_recv(bv_stage_link *l, uint16_t type, int from, uint32_t tag,
                             int64_t step, int timeout_ms, const char *what,
                             bv_pipe_msg_in *m, bv_error *err);
/* The same, copying exactly `bytes` bytes of data into buf (another size is an error). */
bv_status bv_stage_link_recv_into(bv_stage_link *l, uint16_t type, int from, uint32_t tag,
                                  int64_t step, int timeout_ms, const char *what, void *buf,
                                  size_t bytes, bv_error *err);
void bv_stage_link_release(bv_stage_link *l, bv_pipe_msg_in *m);
/* Drops every stashed message (after an aborted step, whose messages are stale). */
void bv_stage_link_clear(bv_stage_link *l);
/* Drops the stashed messages between stages of step `step` (other: of every step but
 * `step`); commands and answers stay. A failed step's messages (other = false), and at the
 * start of a step those of an aborted attempt that came after the abort (other = true),
 * while messages of the next attempt that came before the abort stay. */
void bv_stage_link_drop_steps(bv_stage_link *l, int64_t step, bool other);
uint64_t bv_stage_link_dropped(const bv_stage_link *l);
bool bv_stage_link_timed_out(const bv_stage_link *l);
/* The address the inbox listens on (a wildcard port resolved, when the transport can
 * tell), else the one it was bound at. */
const char *bv_stage_link_bound(const bv_stage_link *l);

/* Sums x (n floats) over the `ranks` nodes ring[0..ranks) (this node is ring[rank]) with
 * a ring all-reduce: reduce-scatter then all-gather, D - 1 steps each, chunk c's sum made
 * in a fixed order on one node and copied to the others, so every node ends with the same
 * bits, run after run. */
bv_status bv_stage_link_allreduce(bv_stage_link *l, const int *ring, int ranks, int rank,
                                  int64_t step, float *x, size_t n, int timeout_ms,
                                  bv_error *err);

/* A state's blobs as one buffer (name length u32, name, size u64, bytes; little-endian
 * lengths), for BV_PIPE_STATE; _unpack checks every length against the buffer. */
bv_status bv_stage_state_pack(const bv_state *s, uint8_t **out, size_t *bytes, bv_error *err);
bv_status bv_stage_state_unpack(const void *buf, size_t bytes, bv_state *out, bv_error *err);

#endif
