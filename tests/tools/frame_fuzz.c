/* frame_fuzz: sends random and mutated messages to every inbox of a running cluster run,
 * for tests/integration/cluster_fuzz.sh. Every message it sends fails some check a role
 * makes before it trusts a message (the transport's frame count, bv_wire_check's length,
 * magic, version, checksums, the task header's array sizes), so a role must drop and
 * count each one and go on as if nothing had come.
 *
 *   frame_fuzz BOOK SECONDS SEED [SEND_TIMEOUT_MS]
 *
 * BOOK is the run's address book (docs/cluster.md), or any file with one address per
 * line. Prints "ADDRESS SENT" per inbox. SEND_TIMEOUT_MS (default: wait) bounds each
 * send, for an inbox that refuses the connection (CURVE: tests/integration/
 * cluster_hosts.sh), where a send would otherwise wait forever; SENT counts the messages
 * tried. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

#include "bivouac/wire.h"

#define MAX_INBOXES 160

static uint64_t rng_state;
static uint64_t next_random(void)
{
    uint64_t x = rng_state += 0x9e3779b97f4a7c15ull; /* splitmix64 */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void random_bytes(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)next_random();
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One bad message on sock; the kinds below each break a different check. */
static void send_bad(void *sock)
{
    uint8_t payload[512];
    size_t plen = 160 + next_random() % 300; /* longer than a task header */
    random_bytes(payload, plen);
    bv_wire_header h;
    bv_wire_header_make(&h, (uint16_t)(1 + next_random() % 24), 2, 0, payload, plen);
    uint8_t hb[sizeof h];
    memcpy(hb, &h, sizeof h);
    switch (next_random() % 9) {
    case 0: /* one frame */
        zmq_send(sock, hb, sizeof hb, 0);
        return;
    case 1: /* three frames */
        zmq_send(sock, hb, sizeof hb, ZMQ_SNDMORE);
        zmq_send(sock, payload, plen, ZMQ_SNDMORE);
        zmq_send(sock, payload, 8, 0);
        return;
    case 2: /* random header bytes of a random length */
        random_bytes(hb, sizeof hb);
        zmq_send(sock, hb, next_random() % (sizeof hb + 1), ZMQ_SNDMORE);
        break;
    case 3: /* one bit of the header flipped */
        hb[next_random() % sizeof hb] ^= (uint8_t)(1u << (next_random() % 8));
        zmq_send(sock, hb, sizeof hb, ZMQ_SNDMORE);
        break;
    case 4: /* one bit of the payload flipped */
        payload[next_random() % plen] ^= (uint8_t)(1u << (next_random() % 8));
        zmq_send(sock, hb, sizeof hb, ZMQ_SNDMORE);
        break;
    case 5: /* truncated payload */
        zmq_send(sock, hb, sizeof hb, ZMQ_SNDMORE);
        zmq_send(sock, payload, plen / 2, 0);
        return;
    case 6: { /* a valid frame of another version */
        h.version = BV_WIRE_VERSION + 1;
        h.header_crc = bv_crc32c(0, &h, offsetof(bv_wire_header, header_crc));
        memcpy(hb, &h, sizeof h);
        zmq_send(sock, hb, sizeof hb, ZMQ_SNDMORE);
        break;
    }
    case 7: { /* checksums right, but a payload shorter than a task header */
        plen = next_random() % 64;
        bv_wire_header_make(&h, (uint16_t)(1 + next_random() % 24), 2, 0, payload, plen);
        zmq_send(sock, &h, sizeof h, ZMQ_SNDMORE);
        break;
    }
    default: { /* checksums right, array sizes that do not add up (oversized) */
        uint64_t huge = UINT64_MAX - next_random() % 1000;
        size_t at = 8 * 6 + 4 * 6 + 8; /* past the fixed fields: somewhere in na..nc */
        memcpy(payload + at, &huge, sizeof huge);
        memset(payload + at + 8, 0, 16);
        bv_wire_header_make(&h, (uint16_t)(1 + next_random() % 24), 2, 0, payload, plen);
        zmq_send(sock, &h, sizeof h, ZMQ_SNDMORE);
        break;
    }
    }
    zmq_send(sock, payload, plen, 0);
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: frame_fuzz BOOK SECONDS SEED [SEND_TIMEOUT_MS]\n");
        return 2;
    }
    int send_timeout = argc == 5 ? atoi(argv[4]) : -1;
    double seconds = atof(argv[2]);
    rng_state = strtoull(argv[3], NULL, 10);
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    char line[512], addr[MAX_INBOXES][256];
    int n = 0;
    while (n < MAX_INBOXES && fgets(line, sizeof line, f)) {
        char *url = strstr(line, "ipc://");
        if (!url)
            url = strstr(line, "tcp://");
        if (!url)
            continue;
        url[strcspn(url, " \n")] = '\0';
        snprintf(addr[n++], sizeof addr[0], "%s", url);
    }
    fclose(f);
    void *ctx = zmq_ctx_new();
    void *socks[MAX_INBOXES];
    long sent[MAX_INBOXES] = {0};
    for (int i = 0; i < n; i++) {
        socks[i] = zmq_socket(ctx, ZMQ_PUSH);
        int linger = 2000;
        zmq_setsockopt(socks[i], ZMQ_LINGER, &linger, sizeof linger);
        zmq_setsockopt(socks[i], ZMQ_SNDTIMEO, &send_timeout, sizeof send_timeout);
        if (zmq_connect(socks[i], addr[i]) != 0) {
            fprintf(stderr, "cannot connect to %s: %s\n", addr[i], zmq_strerror(zmq_errno()));
            return 1;
        }
    }
    for (double end = now() + seconds; now() < end;) {
        for (int i = 0; i < n; i++) {
            send_bad(socks[i]);
            sent[i]++;
        }
        struct timespec pause = {0, 2 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    for (int i = 0; i < n; i++) {
        zmq_close(socks[i]);
        printf("%s %ld\n", addr[i], sent[i]);
    }
    zmq_ctx_term(ctx);
    return 0;
}
