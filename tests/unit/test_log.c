/* bv_log (bivouac/log.h): a line is "bivouac: LEVEL: message\n" in one write(2), whatever
 * its length, so that no other writer's line (the local cloud's readers copy the nodes'
 * output to the same stderr) can land in its middle. stderr is a SOCK_SEQPACKET socket
 * here, on which every write arrives as a message of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "bivouac/log.h"

static int reader = -1, saved = -1;

static int redirect(void **state)
{
    (void)state;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0)
        return -1;
    int size = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    fflush(stderr);
    saved = dup(STDERR_FILENO);
    if (saved < 0 || dup2(sv[1], STDERR_FILENO) < 0)
        return -1;
    close(sv[1]);
    reader = sv[0];
    return 0;
}

static int restore(void **state)
{
    (void)state;
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(reader);
    return 0;
}

/* The next write to stderr, whole (NUL-terminated; the caller frees it). */
static char *next_write(size_t *len)
{
    char *buf = malloc(1 << 16);
    assert_non_null(buf);
    ssize_t n = recv(reader, buf, (1 << 16) - 1, MSG_DONTWAIT);
    assert_true(n > 0);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

/* Nothing more was written. */
static void nothing_more(void)
{
    char c;
    assert_true(recv(reader, &c, 1, MSG_DONTWAIT) < 0);
}

/* A message of `len` characters, 'a' to 'z' over and over, logged at level: one write of
 * exactly the prefix, the message and the newline. */
static void one_write(bv_log_level level, const char *prefix, size_t len)
{
    char *msg = malloc(len + 1);
    assert_non_null(msg);
    for (size_t i = 0; i < len; i++)
        msg[i] = (char)('a' + i % 26);
    msg[len] = '\0';
    bv_log(level, "%s", msg);
    size_t got;
    char *w = next_write(&got);
    size_t head = strlen(prefix);
    assert_int_equal(got, head + len + 1);
    assert_memory_equal(w, prefix, head);
    assert_memory_equal(w + head, msg, len);
    assert_int_equal(w[got - 1], '\n');
    free(w);
    free(msg);
    nothing_more();
}

static void test_a_line_is_one_write(void **state)
{
    (void)state;
    bv_log(BV_LOG_INFO, "restart %d: the run goes on from %s", 1, "the checkpoint of step 30");
    size_t len;
    char *w = next_write(&len);
    assert_string_equal(w, "bivouac: info: restart 1: the run goes on from the checkpoint of "
                           "step 30\n");
    free(w);
    nothing_more();
}

static void test_long_lines_whole(void **state)
{
    (void)state;
    /* around the formatting buffer's size (1024 with the prefix), and far beyond it */
    static const size_t lens[] = {0, 1, 1000, 1006, 1007, 1008, 1009, 1023, 1024, 1025, 5000,
                                  40000};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        one_write(BV_LOG_WARN, "bivouac: warning: ", lens[i]);
    one_write(BV_LOG_ERROR, "bivouac: error: ", 3000);
}

static void test_below_the_level_nothing(void **state)
{
    (void)state;
    bv_log(BV_LOG_DEBUG, "not shown at %s", "info");
    nothing_more();
    bv_log_set_level(BV_LOG_DEBUG);
    one_write(BV_LOG_DEBUG, "bivouac: debug: ", 10);
    bv_log_set_level(BV_LOG_INFO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_line_is_one_write),
        cmocka_unit_test(test_long_lines_whole),
        cmocka_unit_test(test_below_the_level_nothing),
    };
    return cmocka_run_group_tests(tests, redirect, restore);
}
