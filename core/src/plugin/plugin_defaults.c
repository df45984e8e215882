/* Defaults for NULL optional slots (plugin_defaults.h). */
#include "plugin_defaults.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/cloud.h"
#include "bivouac/resilience.h"
#include "bivouac/transport.h"

/* A slot is filled only when the table covers it (dst_size is this build's sizeof, but
 * a caller may pass an older, smaller table). */
#define COVERS(type, slot, size) (offsetof(type, slot) + sizeof(((type *)0)->slot) <= (size))

/* ---- resilience: every hook a no-op; restore stays NULL ("keeps no state") ---- */

static bv_status res_epoch_end(bv_resilience *r, const bv_state *state, bv_error *err)
{
    (void)r, (void)state, (void)err;
    return BV_OK;
}

static bv_status res_before_task(bv_resilience *r, const bv_task_info *task,
                                 bv_task_decision *out, bv_error *err)
{
    (void)r, (void)task, (void)out, (void)err; /* out already holds "run now, latest" */
    return BV_OK;
}

static bv_status res_peer(bv_resilience *r, const bv_peer_event *peer, bv_error *err)
{
    (void)r, (void)peer, (void)err;
    return BV_OK;
}

static bv_status res_schedule(bv_resilience *r, bv_schedule *s, bv_error *err)
{
    (void)r, (void)s, (void)err;
    return BV_OK;
}

static void resilience_defaults(bv_resilience_ops *o, size_t size)
{
    if (COVERS(bv_resilience_ops, epoch_end, size) && !o->epoch_end)
        o->epoch_end = res_epoch_end;
    if (COVERS(bv_resilience_ops, before_task, size) && !o->before_task)
        o->before_task = res_before_task;
    if (COVERS(bv_resilience_ops, peer_failed, size) && !o->peer_failed)
        o->peer_failed = res_peer;
    if (COVERS(bv_resilience_ops, peer_joined, size) && !o->peer_joined)
        o->peer_joined = res_peer;
    if (COVERS(bv_resilience_ops, schedule, size) && !o->schedule)
        o->schedule = res_schedule;
}

/* ---- transport ---- */

static const char *tr_bound_address(bv_endpoint *ep)
{
    (void)ep;
    return NULL; /* "unknown": callers use the address they bound or connected to */
}

/* send_owned has no transport argument, so the default cannot look the plugin's send up
 * from its arguments: each default is a trampoline bound to one plugin's send. A process
 * loads one or two transports; the slots run out only if it loads more than
 * N_SEND_DEFAULTS, and then send_owned stays NULL (callers check it, as before 1.3). */
typedef bv_status (*send_fn)(bv_endpoint *, const void *, size_t, const void *, size_t,
                             bv_error *);
#define N_SEND_DEFAULTS 4
static send_fn bound_send[N_SEND_DEFAULTS];
static pthread_mutex_t bound_lock = PTHREAD_MUTEX_INITIALIZER;

#define SEND_OWNED_DEFAULT(i)                                                             \
    static bv_status send_owned_##i(bv_endpoint *ep, const void *h, size_t hl, void *p,  \
                                    size_t pl, bv_error *err)                             \
    {                                                                                     \
        bv_status st = bound_send[i](ep, h, hl, p, pl, err); /* copies the payload */    \
        free(p);                                                                          \
        return st;                                                                        \
    }
SEND_OWNED_DEFAULT(0)
SEND_OWNED_DEFAULT(1)
SEND_OWNED_DEFAULT(2)
SEND_OWNED_DEFAULT(3)
typedef bv_status (*send_owned_fn)(bv_endpoint *, const void *, size_t, void *, size_t,
                                   bv_error *);
static const send_owned_fn send_owned_defaults[N_SEND_DEFAULTS] = {
    send_owned_0, send_owned_1, send_owned_2, send_owned_3};

static send_owned_fn send_owned_for(send_fn send)
{
    send_owned_fn fn = NULL;
    pthread_mutex_lock(&bound_lock);
    for (int i = 0; i < N_SEND_DEFAULTS && !fn; i++) {
        if (!bound_send[i])
            bound_send[i] = send;
        if (bound_send[i] == send)
            fn = send_owned_defaults[i];
    }
    pthread_mutex_unlock(&bound_lock);
    return fn;
}

static void tr_counters(bv_endpoint *ep, bv_transport_counters *out)
{
    (void)ep;
    size_t size = out->size < sizeof *out ? out->size : sizeof *out;
    memset(out, 0, size); /* a transport that counts nothing */
    out->size = size;
}

static void transport_defaults(bv_transport_ops *o, size_t size)
{
    if (COVERS(bv_transport_ops, counters, size) && !o->counters)
        o->counters = tr_counters;
    if (COVERS(bv_transport_ops, bound_address, size) && !o->bound_address)
        o->bound_address = tr_bound_address;
    if (COVERS(bv_transport_ops, send_owned, size) && !o->send_owned && o->send)
        o->send_owned = send_owned_for(o->send);
}

/* ---- cloud ---- */

static bv_status cloud_price(bv_cloud *c, const char *node_type, bool spot, double *out,
                             bv_error *err)
{
    (void)c, (void)node_type, (void)spot, (void)err;
    *out = 0; /* a cloud that does not bill (local processes) */
    return BV_OK;
}

static void cloud_defaults(bv_cloud_ops *o, size_t size)
{
    if (COVERS(bv_cloud_ops, price_per_hour, size) && !o->price_per_hour)
        o->price_per_hour = cloud_price;
}

void bv_ops_fill_defaults(void *ops, size_t ops_size, const bv_plugin *p)
{
    switch ((bv_plugin_kind)p->kind) {
    case BV_KIND_RESILIENCE: resilience_defaults(ops, ops_size); break;
    case BV_KIND_TRANSPORT: transport_defaults(ops, ops_size); break;
    case BV_KIND_CLOUD: cloud_defaults(ops, ops_size); break;
    case BV_KIND_MODEL:   /* no generic default for a model's or a kernel's slot */
    case BV_KIND_COMPUTE: break;
    }
}
