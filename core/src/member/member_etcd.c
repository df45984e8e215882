/* The etcd client of a run's membership (member.h): etcd's v3 JSON gateway (POST
 * /v3/lease/grant, /v3/kv/put, /v3/kv/range, /v3/lease/keepalive, /v3/lease/revoke, and
 * the streamed /v3/watch) over libcurl. Keys and values go base64-encoded, as the gateway
 * wants; its 64-bit numbers come as strings. */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "grow.h"
#include "json_read.h"
#include "member.h"
#include "stopper.h"

#define CALL_TIMEOUT_MS 2000 /* one request's bound (the watch's stream has none) */
#define RETRY_MS 200         /* between two tries at the watch's stream */
#define LEFT "left"          /* the value a member puts just before it revokes its lease */

typedef struct reply {
    char *data;
    size_t len, cap;
} reply;

struct bv_member {
    char endpoint[256];
    char key[BV_MEMBER_KEY_MAX];
    char watch[BV_MEMBER_KEY_MAX];
    bool watch_prefix;
    int ttl;          /* as granted */
    bool strict;      /* bv_member_join_args.strict */
    char lease[32];   /* the lease's ID, as the gateway writes it */
    int64_t next_rev; /* the watch resumes from here after its stream broke */
    bv_member_gone_fn gone;
    void *ctx;

    pthread_mutex_t mu; /* guards heard */
    bv_stopper stopper; /* leave() stops the threads' waits */
    pthread_t keeper, watcher;
    bool keeper_on, watcher_on;
    CURLM *multi; /* the watch's, woken by leave() */

    /* heard, for next_gone() */
    struct heard {
        char key[BV_MEMBER_KEY_MAX];
        bool own;
    } *heard;
    size_t nheard, cap;
    /* keys whose holders said they leave: their deletion is an end */
    char (*left)[BV_MEMBER_KEY_MAX];
    size_t nleft, left_cap;
    /* the watch's stream, from after its last newline */
    reply stream;
};

/* ---- base64 (RFC 4648), as the gateway carries keys and values ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_encode(const char *in, char *out, size_t cap)
{
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n && o + 5 <= cap; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)(unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (uint32_t)(unsigned char)in[i + 2];
        out[o++] = b64[v >> 18 & 63];
        out[o++] = b64[v >> 12 & 63];
        out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? b64[v & 63] : '=';
    }
    out[o] = '\0';
}

/* False where `in` is not base64 of at most cap-1 bytes. */
static bool b64_decode(const char *in, char *out, size_t cap)
{
    size_t o = 0;
    uint32_t v = 0;
    int bits = 0;
    for (const char *c = in; *c && *c != '='; c++) {
        const char *at = strchr(b64, *c);
        if (!at)
            return false;
        v = v << 6 | (uint32_t)(at - b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o + 1 >= cap)
                return false;
            out[o++] = (char)(v >> bits & 0xff);
        }
    }
    out[o] = '\0';
    return true;
}

/* The end of the range of keys that start with prefix (etcd's range_end). */
static void prefix_end(const char *prefix, char *out, size_t cap)
{
    snprintf(out, cap, "%s", prefix);
    size_t n = strlen(out);
    if (n > 0)
        out[n - 1]++;
}

/* ---- one request ---- */

/* Appends bytes to r, kept NUL-terminated; false when memory runs out. */
static bool append(reply *r, const char *data, size_t bytes)
{
    if (r->len + bytes + 1 > r->cap) {
        size_t cap = (r->len + bytes + 1) * 2;
        char *grown = realloc(r->data, cap);
        if (!grown)
            return false;
        r->data = grown;
        r->cap = cap;
    }
    memcpy(r->data + r->len, data, bytes);
    r->len += bytes;
    r->data[r->len] = '\0';
    return true;
}

static size_t take_reply(char *data, size_t size, size_t n, void *arg)
{
    return append(arg, data, size * n) ? size * n : 0; /* 0: curl fails the transfer */
}

/* POSTs body to endpoint+path and parses the answer into *out (freed by the caller). */
static bv_status post(const char *endpoint, const char *path, const char *body, bv_json *out,
                      bv_error *err)
{
    CURL *c = curl_easy_init();
    if (!c)
        return bv_error_set(err, BV_ERR_NOMEM, "etcd: cannot make a request");
    char url[512];
    snprintf(url, sizeof url, "%s%s", endpoint, path);
    reply r = {0};
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take_reply);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)CALL_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* threads */
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    CURLcode cc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    bv_status st = BV_OK;
    if (cc != CURLE_OK)
        st = bv_error_set(err, BV_ERR_IO, "cannot reach etcd at %s: %s", endpoint,
                          curl_err[0] ? curl_err : curl_easy_strerror(cc));
    else if (!r.data || !bv_json_parse(r.data, r.len, out))
        st = bv_error_set(err, BV_ERR_CORRUPT, "etcd at %s answered %s with no JSON "
                          "(HTTP %ld): is it etcd's v3 gateway?", endpoint, path, code);
    else if (code != 200) {
        const char *say = bv_json_str(out, "message");
        st = bv_error_set(err, BV_ERR_IO, "etcd at %s refused %s: %s (HTTP %ld)", endpoint,
                          path, say ? say : "no reason given", code);
        bv_json_free(out);
    }
    free(r.data);
    return st;
}

/* A 64-bit number of the gateway's (a string), under obj's key; -1 where absent. */
static int64_t num_of(const bv_json *obj, const char *key)
{
    const char *s = obj ? bv_json_str(obj, key) : NULL;
    if (!s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return errno || *end ? -1 : (int64_t)v;
}

static bv_status put(const bv_member *m, const char *value, int64_t *rev, bv_error *err)
{
    char k[BV_MEMBER_KEY_MAX * 2], v[128], body[BV_MEMBER_KEY_MAX * 2 + 256];
    b64_encode(m->key, k, sizeof k);
    b64_encode(value, v, sizeof v);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%s\"}", k, v,
             m->lease);
    bv_json j;
    bv_status st = post(m->endpoint, "/v3/kv/put", body, &j, err);
    if (st != BV_OK)
        return st;
    if (rev)
        *rev = num_of(bv_json_get(&j, "header"), "revision");
    bv_json_free(&j);
    return BV_OK;
}

/* ---- what is heard ---- */

static void hear(bv_member *m, const char *key, bool own)
{
    if (m->gone) {
        m->gone(m->ctx, key, own);
        return;
    }
    pthread_mutex_lock(&m->mu);
    if (bv_grow((void **)&m->heard, &m->cap, m->nheard, sizeof *m->heard, 8)) {
        struct heard *h = &m->heard[m->nheard++];
        snprintf(h->key, sizeof h->key, "%s", key);
        h->own = own;
    } /* else out of memory: not heard, and the loss is seen later another way, if at all */
    pthread_mutex_unlock(&m->mu);
}

static bool member_next_gone(bv_member *m, char *key, size_t len, bool *own)
{
    pthread_mutex_lock(&m->mu);
    bool got = m->nheard > 0;
    if (got) {
        snprintf(key, len, "%s", m->heard[0].key);
        *own = m->heard[0].own;
        memmove(m->heard, m->heard + 1, --m->nheard * sizeof *m->heard);
    }
    pthread_mutex_unlock(&m->mu);
    return got;
}

/* ---- the lease, renewed every third of its time to live ---- */

static void *keeper_main(void *arg)
{
    bv_member *m = arg;
    char body[96];
    snprintf(body, sizeof body, "{\"ID\":\"%s\"}", m->lease);
    double renewed = bv_now_seconds();
    int every_ms = m->ttl * 1000 / 3;
    while (!bv_stopper_wait_ms(&m->stopper, every_ms)) {
        bv_json j;
        bv_error e = {0};
        if (post(m->endpoint, "/v3/lease/keepalive", body, &j, &e) == BV_OK) {
            bool alive = num_of(bv_json_get(&j, "result"), "TTL") > 0;
            bv_json_free(&j);
            if (alive) {
                renewed = bv_now_seconds();
                continue;
            }
            hear(m, m->key, true); /* etcd let it run out: the others took us for lost */
            break;
        }
        if (m->strict && bv_now_seconds() - renewed > m->ttl) {
            hear(m, m->key, true);
            break;
        }
    }
    return NULL;
}

/* ---- the watch: one streamed request, its answers a JSON object a line ---- */

static bool said_left(bv_member *m, const char *key, bool forget)
{
    for (size_t i = 0; i < m->nleft; i++)
        if (strcmp(m->left[i], key) == 0) {
            if (forget)
                memmove(m->left + i, m->left + i + 1, (--m->nleft - i) * sizeof *m->left);
            return true;
        }
    return false;
}

static void note_left(bv_member *m, const char *key)
{
    if (said_left(m, key, false))
        return;
    if (!bv_grow((void **)&m->left, &m->left_cap, m->nleft, sizeof *m->left, 8))
        return; /* out of memory: its deletion will read as a loss */
    snprintf(m->left[m->nleft++], BV_MEMBER_KEY_MAX, "%s", key);
}

static void take_event(bv_member *m, const bv_json *ev)
{
    const bv_json *kv = bv_json_get(ev, "kv");
    const char *k64 = kv ? bv_json_str(kv, "key") : NULL;
    char key[BV_MEMBER_KEY_MAX], value[64];
    if (!k64 || !b64_decode(k64, key, sizeof key))
        return;
    int64_t rev = num_of(kv, "mod_revision");
    if (rev >= m->next_rev)
        m->next_rev = rev + 1;
    const char *type = bv_json_str(ev, "type"); /* PUT, the default, is left out */
    if (type && strcmp(type, "DELETE") == 0) {
        if (!said_left(m, key, true))
            hear(m, key, false);
        return;
    }
    const char *v64 = bv_json_str(kv, "value");
    if (v64 && b64_decode(v64, value, sizeof value) && strcmp(value, LEFT) == 0)
        note_left(m, key);
}

static void take_line(bv_member *m, const char *line, size_t len)
{
    bv_json j;
    if (!bv_json_parse(line, len, &j))
        return;
    const bv_json *events = bv_json_get(bv_json_get(&j, "result"), "events");
    for (size_t i = 0; events && events->type == BV_JSON_ARRAY && i < events->count; i++)
        take_event(m, &events->items[i]);
    bv_json_free(&j);
}

static size_t take_stream(char *data, size_t size, size_t n, void *arg)
{
    bv_member *m = arg;
    reply *r = &m->stream;
    size_t bytes = size * n;
    if (!append(r, data, bytes))
        return 0;
    size_t start = 0;
    for (size_t i = 0; i < r->len; i++)
        if (r->data[i] == '\n') {
            take_line(m, r->data + start, i - start);
            start = i + 1;
        }
    memmove(r->data, r->data + start, r->len - start + 1);
    r->len -= start;
    return bytes;
}

/* One stream, from m->next_rev, until it breaks or leave() (true). */
static bool watch_once(bv_member *m)
{
    char k[BV_MEMBER_KEY_MAX * 2], end[BV_MEMBER_KEY_MAX], e64[BV_MEMBER_KEY_MAX * 2];
    char body[BV_MEMBER_KEY_MAX * 4 + 128], url[512];
    b64_encode(m->watch, k, sizeof k);
    prefix_end(m->watch, end, sizeof end);
    b64_encode(end, e64, sizeof e64);
    int at = snprintf(body, sizeof body, "{\"create_request\":{\"key\":\"%s\"", k);
    if (m->watch_prefix)
        at += snprintf(body + at, sizeof body - (size_t)at, ",\"range_end\":\"%s\"", e64);
    snprintf(body + at, sizeof body - (size_t)at, ",\"start_revision\":\"%lld\"}}",
             (long long)m->next_rev);
    snprintf(url, sizeof url, "%s/v3/watch", m->endpoint);
    CURL *c = curl_easy_init();
    if (!c)
        return bv_stopper_wait_ms(&m->stopper, RETRY_MS);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take_stream);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, m);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)CALL_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    m->stream.len = 0;
    curl_multi_add_handle(m->multi, c);
    int running = 1;
    bool stop = false;
    while (running && !stop) {
        if (curl_multi_perform(m->multi, &running) != CURLM_OK)
            break;
        if (running)
            curl_multi_poll(m->multi, NULL, 0, 1000, NULL);
        stop = bv_stopper_stopped(&m->stopper);
    }
    curl_multi_remove_handle(m->multi, c);
    curl_easy_cleanup(c);
    return stop || bv_stopper_wait_ms(&m->stopper, RETRY_MS);
}

static void *watcher_main(void *arg)
{
    bv_member *m = arg;
    while (!watch_once(m)) {
        /* the stream broke (etcd restarted, or was out of reach): again from where it was */
    }
    return NULL;
}

/* ---- join, leave ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_ready;

static void curl_start(void)
{
    curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void member_leave(bv_member *m)
{
    if (!m)
        return;
    bv_stopper_stop(&m->stopper);
    if (m->multi)
        curl_multi_wakeup(m->multi);
    if (m->keeper_on)
        pthread_join(m->keeper, NULL);
    if (m->watcher_on)
        pthread_join(m->watcher, NULL);
    if (m->lease[0]) { /* the watchers take the deletion that follows as an end */
        bv_error e = {0};
        char body[96];
        snprintf(body, sizeof body, "{\"ID\":\"%s\"}", m->lease);
        bv_json j;
        if (put(m, LEFT, NULL, &e) == BV_OK &&
            post(m->endpoint, "/v3/lease/revoke", body, &j, &e) == BV_OK)
            bv_json_free(&j);
        /* else the lease runs out by itself */
    }
    if (m->multi)
        curl_multi_cleanup(m->multi);
    bv_stopper_destroy(&m->stopper);
    pthread_mutex_destroy(&m->mu);
    free(m->heard);
    free(m->left);
    free(m->stream.data);
    free(m);
}

/* Whether key is there, and the store's revision when it was looked at. */
static bv_status exists(const bv_member *m, const char *key, bool *yes, int64_t *rev,
                        bv_error *err)
{
    char k[BV_MEMBER_KEY_MAX * 2], body[BV_MEMBER_KEY_MAX * 2 + 32];
    b64_encode(key, k, sizeof k);
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", k);
    bv_json j;
    bv_status st = post(m->endpoint, "/v3/kv/range", body, &j, err);
    if (st == BV_OK) {
        *yes = num_of(&j, "count") > 0;
        *rev = num_of(bv_json_get(&j, "header"), "revision");
        bv_json_free(&j);
    }
    return st;
}

static bv_status member_join(const bv_member_join_args *a, bv_member **out, bv_error *err)
{
    *out = NULL;
    pthread_once(&curl_once, curl_start);
    if (curl_ready != CURLE_OK)
        return bv_error_set(err, BV_ERR_IO, "etcd: libcurl: %s",
                            curl_easy_strerror(curl_ready));
    if (strlen(a->key) >= BV_MEMBER_KEY_MAX || (a->watch && strlen(a->watch) >= BV_MEMBER_KEY_MAX))
        return bv_error_set(err, BV_ERR_INVALID, "etcd: a key longer than %d bytes",
                            BV_MEMBER_KEY_MAX - 1);
    bv_member *m = calloc(1, sizeof *m);
    if (!m)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&m->mu, NULL);
    bv_stopper_init(&m->stopper);
    snprintf(m->endpoint, sizeof m->endpoint, "%s", a->endpoint);
    size_t n = strlen(m->endpoint);
    while (n > 0 && m->endpoint[n - 1] == '/')
        m->endpoint[--n] = '\0';
    snprintf(m->key, sizeof m->key, "%s", a->key);
    m->gone = a->gone;
    m->ctx = a->ctx;
    m->strict = a->strict;
    char body[96];
    snprintf(body, sizeof body, "{\"TTL\":\"%d\"}", a->lease_s);
    bv_json j;
    bv_status st = post(m->endpoint, "/v3/lease/grant", body, &j, err);
    int64_t seen = 0; /* the revision at which the watched key was seen */
    if (st == BV_OK) {
        int64_t id = num_of(&j, "ID"), ttl = num_of(&j, "TTL");
        bv_json_free(&j);
        if (id <= 0 || ttl <= 0)
            st = bv_error_set(err, BV_ERR_CORRUPT, "etcd at %s granted no lease",
                              m->endpoint);
        snprintf(m->lease, sizeof m->lease, "%lld", (long long)id);
        m->ttl = ttl > INT_MAX ? INT_MAX : (int)ttl;
    }
    if (st == BV_OK && a->watch) {
        snprintf(m->watch, sizeof m->watch, "%s", a->watch);
        m->watch_prefix = a->watch_prefix;
        bool there = true;
        if (a->watch_must_exist && (st = exists(m, a->watch, &there, &seen, err)) == BV_OK &&
            !there)
            st = bv_error_set(err, BV_ERR_IO, "%s is not in etcd at %s: its holder is gone",
                              a->watch, m->endpoint);
    }
    char value[128], host[64] = "";
    gethostname(host, sizeof host - 1);
    snprintf(value, sizeof value, "%d@%s", (int)getpid(), host);
    int64_t rev = 0;
    if (st == BV_OK && (st = put(m, value, &rev, err)) == BV_OK && rev <= 0)
        st = bv_error_set(err, BV_ERR_CORRUPT, "etcd at %s gave no revision", m->endpoint);
    /* what changes after the key is there, or after the watched one was seen there */
    m->next_rev = (seen > 0 && seen < rev ? seen : rev) + 1;
    if (st == BV_OK && a->watch && !(m->multi = curl_multi_init()))
        st = bv_error_set(err, BV_ERR_NOMEM, "etcd: cannot make a watch");
    if (st == BV_OK && a->watch &&
        !(m->watcher_on = pthread_create(&m->watcher, NULL, watcher_main, m) == 0))
        st = bv_error_set(err, BV_ERR_IO, "etcd: cannot start the watch's thread");
    if (st == BV_OK &&
        !(m->keeper_on = pthread_create(&m->keeper, NULL, keeper_main, m) == 0))
        st = bv_error_set(err, BV_ERR_IO, "etcd: cannot start the lease's thread");
    if (st != BV_OK) {
        member_leave(m);
        return st;
    }
    *out = m;
    return BV_OK;
}

__attribute__((visibility("default"))) const bv_member_module bv_member_module_v1 = {
    .version = BV_MEMBER_MODULE_VERSION,
    .struct_size = sizeof(bv_member_module),
    .join = member_join,
    .next_gone = member_next_gone,
    .leave = member_leave,
};
