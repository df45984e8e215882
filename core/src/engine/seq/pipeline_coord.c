/* The pipeline's coordinator (pipeline_seq.h): the stage threads started over the
 * experiment's transport (inproc), one command at a time to every stage, their replies
 * collected; a stage's error aborts the others' waits and is returned naming the stage. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "pipeline_seq.h"
#include "stage_link.h"

#define ADDR_LEN 64

struct bv_seq_pipe {
    bv_seq_pipe_cfg cfg;
    bv_transport *tr;
    int nodes; /* stages of every pipeline; the coordinator is node `nodes` */
    char (*addr)[ADDR_LEN];
    const char **addrs;
    bv_seq_stage_arg *args;
    pthread_t *threads;
    int started;
    bv_stage_link *link;
};

static atomic_int pipe_counter;

static void stage_name(const bv_seq_pipe *p, int node, char *buf, size_t len)
{
    if (p->cfg.pipelines > 1)
        snprintf(buf, len, "stage %d of pipeline %d", node % p->cfg.stages,
                 node / p->cfg.stages);
    else
        snprintf(buf, len, "stage %d", node);
}

/* Sends cmd to nodes [0, count) (count <= p->nodes; the nodes in order for CRC). */
static bv_status send_cmd(bv_seq_pipe *p, int node, uint32_t cmd, int64_t step,
                          const void *data, size_t bytes, bv_error *err)
{
    return bv_stage_link_send(p->link, node, BV_PIPE_CMD, cmd, step, data, bytes, err);
}

/* Waits for every node's answer to cmd: DONE (data handed to each(), may be NULL) or
 * ERROR. The first error aborts the waits of the others, whose answers are still
 * collected, so no stage is left in the middle of a step. */
static bv_status collect(bv_seq_pipe *p, uint32_t cmd, int64_t step, uint16_t done_type,
                         bv_status (*each)(bv_seq_pipe *, int node, const bv_pipe_msg_in *,
                                           void *, bv_error *),
                         void *ctx, bv_error *err)
{
    bv_status first = BV_OK;
    for (int answered = 0; answered < p->nodes; answered++) {
        bv_pipe_msg_in m = {0};
        bv_error e = {0};
        bv_status rc;
        while ((rc = bv_stage_link_recv(p->link, done_type, -1, cmd, step, 200, "an answer",
                                        &m, &e)) != BV_OK &&
               bv_stage_link_timed_out(p->link)) {
            int gone = -1;
            for (int n = 0; n < p->started && gone < 0; n++)
                gone = atomic_load(&p->args[n].gone) ? n : -1;
            if (gone >= 0) {
                char who[64];
                stage_name(p, gone, who, sizeof who);
                rc = bv_error_set(&e, BV_ERR_IO, "%s could not open its inbox", who);
                break;
            }
        }
        if (rc != BV_OK) {
            if (first == BV_OK)
                first = bv_error_set(err, rc, "%s", e.msg);
            break;
        }
        char who[64];
        stage_name(p, (int)m.sender, who, sizeof who);
        if (m.type == BV_PIPE_ERROR) {
            if (first == BV_OK) {
                first = bv_error_set(err, BV_ERR_STOPPED, "%s: %.*s", who, (int)m.bytes,
                                     (const char *)m.data);
                for (int n = 0; n < p->nodes; n++) /* the others stop waiting for it */
                    send_cmd(p, n, BV_PIPE_ABORT, step, NULL, 0, &e);
            }
        } else if (each && first == BV_OK) {
            rc = each(p, (int)m.sender, &m, ctx, &e);
            if (rc != BV_OK)
                first = bv_error_set(err, rc, "%s: %s", who, e.msg);
        }
        bv_stage_link_release(p->link, &m);
    }
    if (first != BV_OK)
        bv_stage_link_clear(p->link);
    return first;
}

static bv_status broadcast(bv_seq_pipe *p, uint32_t cmd, int64_t step, const void *data,
                           size_t bytes,
                           bv_status (*each)(bv_seq_pipe *, int, const bv_pipe_msg_in *,
                                             void *, bv_error *),
                           void *ctx, bv_error *err)
{
    for (int n = 0; n < p->nodes; n++) {
        bv_status rc = send_cmd(p, n, cmd, step, data, bytes, err);
        if (rc != BV_OK)
            return rc;
    }
    return collect(p, cmd, step, BV_PIPE_DONE, each, ctx, err);
}

void bv_seq_pipe_stop(bv_seq_pipe *p)
{
    if (!p)
        return;
    bv_error e = {0};
    for (int n = 0; p->link && n < p->started; n++)
        send_cmd(p, n, BV_PIPE_STOP, 0, NULL, 0, &e);
    for (int n = 0; n < p->started; n++)
        pthread_join(p->threads[n], NULL);
    bv_stage_link_close(p->link);
    if (p->tr)
        p->cfg.x->transport_ops.destroy(p->tr);
    free(p->addr);
    free(p->addrs);
    free(p->args);
    free(p->threads);
    free(p);
}

bv_status bv_seq_pipe_start(const bv_seq_pipe_cfg *cfg, bv_seq_pipe **out, bv_error *err)
{
    *out = NULL;
    bv_seq_pipe *p = calloc(1, sizeof *p);
    if (!p)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    p->cfg = *cfg;
    p->nodes = cfg->stages * cfg->pipelines;
    p->addr = calloc((size_t)p->nodes + 1, sizeof *p->addr);
    p->addrs = calloc((size_t)p->nodes + 1, sizeof *p->addrs);
    p->args = calloc((size_t)p->nodes, sizeof *p->args);
    p->threads = calloc((size_t)p->nodes, sizeof *p->threads);
    if (!p->addr || !p->addrs || !p->args || !p->threads) {
        bv_seq_pipe_stop(p);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    int id = atomic_fetch_add(&pipe_counter, 1);
    for (int n = 0; n <= p->nodes; n++) {
        snprintf(p->addr[n], ADDR_LEN, "inproc://bv-pipe%d-%d", id, n);
        p->addrs[n] = p->addr[n];
    }
    const bv_transport_ops *t = &cfg->x->transport_ops;
    bv_status rc = BV_OK;
    if (!(p->tr = t->create(&cfg->x->transport.opts, err)))
        rc = err->status ? err->status : BV_ERR_PLUGIN;
    if (rc == BV_OK)
        rc = bv_stage_link_open(t, p->tr, p->addrs, p->nodes + 1, p->nodes, &p->link, err);
    for (int n = 0; rc == BV_OK && n < p->nodes; n++) {
        bv_seq_stage_arg *a = &p->args[n];
        a->cfg = &p->cfg;
        a->addrs = p->addrs;
        a->transport = p->tr;
        a->stage = n % cfg->stages;
        a->pipeline = n / cfg->stages;
        atomic_init(&a->gone, false);
        if (pthread_create(&p->threads[n], NULL, bv_seq_stage_main, &p->args[n]) != 0)
            rc = bv_error_set(err, BV_ERR_IO, "cannot start a thread for stage %d",
                              n % cfg->stages);
        else
            p->started++;
    }
    if (rc == BV_OK)
        rc = broadcast(p, BV_PIPE_INIT, 0, NULL, 0, NULL, NULL, err);
    if (rc != BV_OK) {
        bv_seq_pipe_stop(p);
        return rc;
    }
    *out = p;
    return BV_OK;
}

/* ---- train, evaluate ---- */

static bv_status take_step(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                           bv_error *err)
{
    double r[6], *acc = ctx;
    if (m->bytes != sizeof r)
        return bv_error_set(err, BV_ERR_CORRUPT, "a step's results of %zu bytes", m->bytes);
    memcpy(r, m->data, sizeof r);
    (void)p;
    (void)node;
    for (int i = 0; i < 6; i++)
        acc[i] = i == 2 ? r[i] : i == 5 ? (r[i] > acc[i] ? r[i] : acc[i]) : acc[i] + r[i];
    return BV_OK;
}

bv_status bv_seq_pipe_train(bv_seq_pipe *p, int64_t it, double lr, bv_seq_pipe_step *out,
                            bv_error *err)
{
    double acc[6] = {0};
    bv_status rc = broadcast(p, BV_PIPE_TRAIN, it, &lr, sizeof lr, take_step, acc, err);
    if (rc != BV_OK)
        return rc;
    *out = (bv_seq_pipe_step){acc[1] > 0 ? acc[0] / acc[1] : 0, acc[2], acc[3], acc[4],
                              acc[5]};
    return BV_OK;
}

typedef struct eval_acc {
    double *sums; /* per batch: loss sum, count (over the pipelines) */
    int64_t iters;
} eval_acc;

static bv_status take_eval(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                           bv_error *err)
{
    eval_acc *a = ctx;
    bool last = node % p->cfg.stages == p->cfg.stages - 1;
    size_t want = last ? (size_t)(2 * a->iters) * sizeof(double) : 0;
    if (m->bytes != want)
        return bv_error_set(err, BV_ERR_CORRUPT, "evaluation results of %zu bytes, expected "
                            "%zu", m->bytes, want);
    for (int64_t i = 0; i < 2 * a->iters && last; i++) {
        double v;
        memcpy(&v, (const char *)m->data + i * (int64_t)sizeof v, sizeof v);
        a->sums[i] += v;
    }
    return BV_OK;
}

bv_status bv_seq_pipe_eval(bv_seq_pipe *p, int64_t done, int split, int64_t iters,
                           double *loss, bv_error *err)
{
    eval_acc a = {calloc((size_t)(2 * iters), sizeof(double)), iters};
    if (!a.sums)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    int64_t args[2] = {split, iters};
    bv_status rc = broadcast(p, BV_PIPE_EVAL, done, args, sizeof args, take_eval, &a, err);
    double sum = 0;
    for (int64_t i = 0; i < iters; i++)
        sum += a.sums[2 * i + 1] > 0 ? a.sums[2 * i] / a.sums[2 * i + 1] : 0;
    *loss = sum / (double)iters;
    free(a.sums);
    return rc;
}

/* ---- state, checksum ---- */

static bv_status take_state(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                            bv_error *err)
{
    (void)p;
    (void)node;
    return bv_stage_state_unpack(m->data, m->bytes, ctx, err);
}

bv_status bv_seq_pipe_get_state(bv_seq_pipe *p, bv_state *s, bv_error *err)
{
    /* the first pipeline's stages: the replicas hold the same bits */
    for (int n = 0; n < p->cfg.stages; n++) {
        bv_status rc = send_cmd(p, n, BV_PIPE_GET_STATE, 0, NULL, 0, err);
        if (rc != BV_OK)
            return rc;
        int nodes = p->nodes;
        p->nodes = 1; /* one answer */
        rc = collect(p, BV_PIPE_GET_STATE, 0, BV_PIPE_STATE, take_state, s, err);
        p->nodes = nodes;
        if (rc != BV_OK)
            return rc;
    }
    return BV_OK;
}

bv_status bv_seq_pipe_set_state(bv_seq_pipe *p, const bv_state *s, bv_error *err)
{
    uint8_t *buf;
    size_t bytes;
    bv_status rc = bv_stage_state_pack(s, &buf, &bytes, err);
    if (rc != BV_OK)
        return rc;
    rc = broadcast(p, BV_PIPE_SET_STATE, 0, buf, bytes, NULL, NULL, err);
    free(buf);
    return rc;
}

static bv_status take_crc(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                          bv_error *err)
{
    (void)p;
    (void)node;
    if (m->bytes != sizeof(uint32_t))
        return bv_error_set(err, BV_ERR_CORRUPT, "a checksum of %zu bytes", m->bytes);
    memcpy(ctx, m->data, sizeof(uint32_t));
    return BV_OK;
}

bv_status bv_seq_pipe_crc32c(bv_seq_pipe *p, uint32_t *crc, bv_error *err)
{
    *crc = 0;
    for (int n = 0; n < p->cfg.stages; n++) { /* in layer order: stage by stage */
        bv_status rc = send_cmd(p, n, BV_PIPE_CRC, 0, crc, sizeof *crc, err);
        if (rc != BV_OK)
            return rc;
        int nodes = p->nodes;
        p->nodes = 1;
        rc = collect(p, BV_PIPE_CRC, 0, BV_PIPE_DONE, take_crc, crc, err);
        p->nodes = nodes;
        if (rc != BV_OK)
            return rc;
    }
    return BV_OK;
}
