/* Building, sending and validating role messages (role_msg.h). */
#include "role_msg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bivouac/log.h"
#include "task_hdr.h"

/* Frames bv_role_recv refused (bv_role_frames_dropped). */
static _Atomic uint64_t frames_dropped;

uint64_t bv_role_frames_dropped(void)
{
    return frames_dropped;
}

static double role_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* A function worker held to a share of a core (bv_role_throttle): the share (0: none), and
 * the process's CPU time and the wall time (ms) when it last waited. */
static double throttle_share, throttle_cpu, throttle_wall;

static double process_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void sleep_ms(double ms)
{
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (ms > 0 && nanosleep(&ts, &ts) != 0) {
        /* interrupted: sleep the rest */
    }
}

/* A function worker's bandwidth (bv_role_limit_bandwidth): bytes per millisecond each way
 * (0: no limit), and when each way's link is next free. Set once, before the role's
 * thread runs, in a process of one role. */
static double link_rate;
static double link_free_at[2];
static double link_rest_at; /* a streamed task's second half is in by then (ms) */

void bv_role_limit_bandwidth(double bytes_per_second)
{
    link_rate = bytes_per_second > 0 ? 1e-3 * bytes_per_second : 0;
}

/* A message of `bytes` went out (way 0) or came in (way 1): it holds the link for
 * bytes / rate after the messages before it, and the role waits until it is through. */
static void link_take(int way, size_t bytes)
{
    if (link_rate <= 0)
        return;
    double now = role_now_ms();
    double start = link_free_at[way] > now ? link_free_at[way] : now;
    link_free_at[way] = start + (double)bytes / link_rate;
    sleep_ms(link_free_at[way] - now);
}

void bv_role_link_rest(void)
{
    if (link_rate > 0)
        sleep_ms(link_rest_at - role_now_ms());
}

void bv_role_throttle(double share)
{
    throttle_share = share > 0 ? share : 0;
    throttle_cpu = process_cpu_ms();
    throttle_wall = role_now_ms();
}

/* Before a message goes out: the CPU work since the last wait takes cpu / share of wall
 * time, as on a core of that share. */
static void throttle_wait(void)
{
    if (throttle_share <= 0)
        return;
    double cpu = process_cpu_ms(), now = role_now_ms();
    sleep_ms((cpu - throttle_cpu) / throttle_share - (now - throttle_wall));
    throttle_cpu = cpu;
    throttle_wall = role_now_ms();
}

bv_status bv_role_send(const bv_transport_ops *t, bv_endpoint *ep, uint16_t type,
                       uint32_t sender, const bv_task_hdr *hdr, const void *a, size_t na,
                       const void *b, size_t nb, const void *c, size_t nc, bv_error *err)
{
    size_t len = BV_TASK_HDR_WIRE_SIZE + na + nb + nc;
    throttle_wait();
    link_take(0, len);
    uint8_t *payload = malloc(len);
    if (!payload)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for a %zu-byte message", len);
    bv_task_hdr h = hdr ? *hdr : (bv_task_hdr){0};
    h.na = na;
    h.nb = nb;
    h.nc = nc;
    bv_task_hdr_encode(&h, payload); /* field by field, little-endian (task_hdr.h) */
    size_t off = BV_TASK_HDR_WIRE_SIZE;
    if (na)
        memcpy(payload + off, a, na);
    off += na;
    if (nb)
        memcpy(payload + off, b, nb);
    off += nb;
    if (nc)
        memcpy(payload + off, c, nc);
    bv_wire_header wh;
    bv_wire_header_make(&wh, type, sender, (uint32_t)h.stage, payload, len);
    if (t->send_owned) /* the transport keeps the buffer: no second copy */
        return t->send_owned(ep, &wh, sizeof wh, payload, len, err);
    bv_status st = t->send(ep, &wh, sizeof wh, payload, len, err);
    free(payload);
    return st;
}

bv_status bv_role_recv(const bv_transport_ops *t, bv_endpoint *ep, bv_role_msg *m,
                       int timeout_ms, bv_error *err)
{
    memset(m, 0, sizeof *m);
    bv_status st = t->recv(ep, &m->raw, timeout_ms, err);
    if (st == BV_ERR_CORRUPT) /* the transport dropped it (e.g. not two frames) */
        frames_dropped++;
    if (st != BV_OK)
        return st;
    st = bv_wire_check(m->raw.header, m->raw.header_len, m->raw.payload, m->raw.payload_len, 0,
                       &m->wire, err);
    if (st == BV_OK)
        st = bv_task_hdr_decode(m->raw.payload, m->raw.payload_len, &m->hdr, err);
    if (st != BV_OK) {
        frames_dropped++;
        t->release(&m->raw);
        memset(m, 0, sizeof *m);
        return st;
    }
    const uint8_t *p = (const uint8_t *)m->raw.payload + BV_TASK_HDR_WIRE_SIZE;
    m->a = p;
    m->b = p + m->hdr.na;
    m->c = p + m->hdr.na + m->hdr.nb;
    if ((m->hdr.flags & BV_TASK_STREAM) && link_rate > 0) {
        /* streamed (lambda: stream): the role goes on once all but the second half of
         * array a is in; that half keeps the link until link_rest_at (bv_role_link_rest) */
        size_t rest = (size_t)m->hdr.na / 2;
        link_take(1, m->raw.payload_len - rest);
        link_free_at[1] += (double)rest / link_rate;
        link_rest_at = link_free_at[1];
    } else {
        link_take(1, m->raw.payload_len);
    }
    return BV_OK;
}

void bv_role_release(const bv_transport_ops *t, bv_role_msg *m)
{
    if (m->raw.impl || m->raw.payload)
        t->release(&m->raw);
    memset(m, 0, sizeof *m);
}

bv_status bv_role_recv_valid(const bv_transport_ops *t, bv_endpoint *ep, bv_role_msg *m,
                             int timeout_ms, _Atomic uint64_t *dropped, bv_error *err)
{
    double until = timeout_ms >= 0 ? role_now_ms() + timeout_ms : 0;
    for (;;) {
        int left = timeout_ms;
        if (timeout_ms >= 0) {
            double now = role_now_ms();
            left = now >= until ? 0 : (int)(until - now);
        }
        bv_status st = bv_role_recv(t, ep, m, left, err);
        if (st != BV_ERR_CORRUPT)
            return st;
        /* failed its checks: never trusted, counted, and the wait goes on */
        if (atomic_fetch_add(dropped, 1) == 0)
            bv_log(BV_LOG_WARN, "dropped a message that failed its checks (%s); further ones "
                   "are counted", err->msg);
    }
}

bv_status bv_role_wait(const bv_transport_ops *t, bv_endpoint *inbox, const char *who,
                       uint16_t type, _Atomic uint64_t *dropped, bv_role_msg *m, bv_error *err)
{
    for (;;) {
        bv_status st = bv_role_recv_valid(t, inbox, m, BV_TIMEOUT_FOREVER, dropped, err);
        if (st != BV_OK)
            return st;
        if (m->wire.type == type)
            return BV_OK;
        if (m->wire.type == BV_MSG_ERROR) {
            bv_error_set(err, BV_ERR_INTERNAL, "%.*s", (int)m->hdr.na, (const char *)m->a);
            bv_role_release(t, m);
            return BV_ERR_INTERNAL;
        }
        bv_log(BV_LOG_WARN, "%s: ignoring message type %u while waiting for %u", who,
               m->wire.type, type);
        bv_role_release(t, m);
    }
}

void bv_role_send_error(const bv_transport_ops *t, bv_endpoint *ep, uint32_t sender,
                        const bv_error *failure)
{
    bv_error ignored;
    bv_role_send(t, ep, BV_MSG_ERROR, sender, NULL, failure->msg, strlen(failure->msg) + 1,
                 NULL, 0, NULL, 0, &ignored);
}
