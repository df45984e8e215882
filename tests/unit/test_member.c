/* The membership module (core/src/member/member.h) against an etcd server this test
 * starts on loopback (skipped where there is none): a watched key deleted without its
 * holder leaving is heard (queued, once); one whose holder leaves is not; a member whose
 * lease etcd drops hears it of itself (callback); a key that must exist and does not,
 * and an etcd out of reach, fail the join with what and where. Its threads are the point
 * of running it under ThreadSanitizer (label tsan). */
#include <curl/curl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "member.h"

static pid_t etcd_pid = -1;
static char endpoint[64], data_dir[64];
static const bv_member_module *mm;

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

static bool have_etcd(void)
{
    return access("/usr/bin/etcd", X_OK) == 0 || system("command -v etcd >/dev/null") == 0;
}

/* etcd on a free loopback port (the one that answers a lease grant within 10 s) */
static int start_etcd(void **state)
{
    (void)state;
    if (!have_etcd())
        return 0;
    const char *why = "";
    mm = bv_member_module_get(&why);
    if (!mm) {
        fprintf(stderr, "the membership module: %s\n", why);
        return -1;
    }
    snprintf(data_dir, sizeof data_dir, "/tmp/bivouac-member-test.XXXXXX");
    if (!mkdtemp(data_dir))
        return -1;
    srand((unsigned)getpid());
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = 20000 + rand() % 30000;
        char client[64], peer[64], cluster[96], dir[96];
        snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", port);
        snprintf(client, sizeof client, "%s", endpoint);
        snprintf(peer, sizeof peer, "http://127.0.0.1:%d", port + 1);
        snprintf(cluster, sizeof cluster, "t=%s", peer);
        snprintf(dir, sizeof dir, "%s/d%d", data_dir, attempt);
        etcd_pid = fork();
        if (etcd_pid == 0) {
            freopen("/dev/null", "w", stdout);
            freopen("/dev/null", "w", stderr);
            execlp("etcd", "etcd", "--name", "t", "--data-dir", dir, "--listen-client-urls",
                   client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                   "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
                   (char *)NULL);
            _exit(127);
        }
        for (int i = 0; i < 100; i++) {
            bv_member *probe = NULL;
            bv_error err = {0};
            bv_member_join_args a = {.endpoint = endpoint, .lease_s = 2, .key = "probe"};
            if (mm->join(&a, &probe, &err) == BV_OK) {
                mm->leave(probe);
                return 0;
            }
            if (waitpid(etcd_pid, NULL, WNOHANG) == etcd_pid)
                break; /* its port was taken: another */
            sleep_ms(100);
        }
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
        etcd_pid = -1;
    }
    return -1;
}

static int stop_etcd(void **state)
{
    (void)state;
    if (etcd_pid > 0) {
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
    }
    if (data_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", data_dir);
        return system(cmd) == 0 ? 0 : -1;
    }
    return 0;
}

/* The next key m hears within ms, or "" */
static void next_within(bv_member *m, int ms, char *key, size_t len, bool *own)
{
    key[0] = '\0';
    for (int waited = 0; waited <= ms; waited += 20) {
        if (mm->next_gone(m, key, len, own))
            return;
        sleep_ms(20);
    }
}

/* Revokes the lease that `key` lives under, as if it had run out */
static size_t take(char *data, size_t size, size_t n, void *arg)
{
    char *buf = arg;
    size_t have = strlen(buf), bytes = size * n;
    size_t room = have + bytes < 4095 ? bytes : 4095 - have;
    memcpy(buf + have, data, room);
    buf[have + room] = '\0';
    return bytes;
}

static void post(const char *path, const char *body, char *reply)
{
    char url[128];
    snprintf(url, sizeof url, "%s%s", endpoint, path);
    reply[0] = '\0';
    CURL *c = curl_easy_init();
    assert_non_null(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, reply);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    curl_easy_cleanup(c);
}

static void drop_lease_of(const char *key_b64)
{
    char body[256], reply[4096];
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", key_b64);
    post("/v3/kv/range", body, reply);
    const char *at = strstr(reply, "\"lease\":\"");
    assert_non_null(at);
    long long lease = strtoll(at + 9, NULL, 10);
    assert_true(lease > 0);
    snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", lease);
    post("/v3/lease/revoke", body, reply);
}

static pthread_mutex_t heard_mu = PTHREAD_MUTEX_INITIALIZER;
static char heard_key[BV_MEMBER_KEY_MAX];
static bool heard_own;
static int heard_count;

static void on_gone(void *ctx, const char *key, bool own)
{
    assert_ptr_equal(ctx, &heard_count);
    pthread_mutex_lock(&heard_mu);
    snprintf(heard_key, sizeof heard_key, "%s", key);
    heard_own = own;
    heard_count++;
    pthread_mutex_unlock(&heard_mu);
}

static void test_watch_and_leases(void **state)
{
    (void)state;
    if (etcd_pid <= 0)
        skip();
    bv_error err = {0};
    bv_member *a, *b, *c;
    bv_member_join_args ja = {.endpoint = endpoint, .lease_s = 2, .key = "run/coordinator",
                              .watch = "run/stage/", .watch_prefix = true, .strict = true};
    assert_int_equal(mm->join(&ja, &a, &err), BV_OK);
    bv_member_join_args jb = {.endpoint = endpoint, .lease_s = 2, .key = "run/stage/0/1",
                              .watch = "run/coordinator", .watch_must_exist = true};
    assert_int_equal(mm->join(&jb, &b, &err), BV_OK);
    bv_member_join_args jc = {.endpoint = endpoint, .lease_s = 2, .key = "run/stage/1/2",
                              .gone = on_gone, .ctx = &heard_count};
    assert_int_equal(mm->join(&jc, &c, &err), BV_OK);

    /* b leaves: its key goes, and that is an end, not a loss */
    mm->leave(b);
    char key[BV_MEMBER_KEY_MAX];
    bool own = true;
    next_within(a, 800, key, sizeof key, &own);
    assert_string_equal(key, "");

    /* c's lease dropped behind its back: a hears the key once, c hears it of itself */
    drop_lease_of("cnVuL3N0YWdlLzEvMg=="); /* run/stage/1/2 */
    next_within(a, 3000, key, sizeof key, &own);
    assert_string_equal(key, "run/stage/1/2");
    assert_false(own);
    for (int waited = 0; waited < 3000; waited += 20) {
        pthread_mutex_lock(&heard_mu);
        int n = heard_count;
        pthread_mutex_unlock(&heard_mu);
        if (n > 0)
            break;
        sleep_ms(20);
    }
    pthread_mutex_lock(&heard_mu);
    assert_int_equal(heard_count, 1);
    assert_string_equal(heard_key, "run/stage/1/2");
    assert_true(heard_own);
    pthread_mutex_unlock(&heard_mu);
    next_within(a, 300, key, sizeof key, &own);
    assert_string_equal(key, ""); /* once */
    mm->leave(c);
    mm->leave(a);
}

static void test_join_refused(void **state)
{
    (void)state;
    if (etcd_pid <= 0)
        skip();
    bv_error err = {0};
    bv_member *m = NULL;
    bv_member_join_args j = {.endpoint = endpoint, .lease_s = 2, .key = "run2/stage/0/1",
                             .watch = "run2/coordinator", .watch_must_exist = true};
    assert_int_equal(mm->join(&j, &m, &err), BV_ERR_IO);
    assert_null(m);
    char want[256];
    snprintf(want, sizeof want, "run2/coordinator is not in etcd at %s: its holder is gone",
             endpoint);
    assert_string_equal(err.msg, want);

    j = (bv_member_join_args){.endpoint = "http://127.0.0.1:1", .lease_s = 2, .key = "k"};
    assert_int_equal(mm->join(&j, &m, &err), BV_ERR_IO);
    assert_non_null(strstr(err.msg, "cannot reach etcd at http://127.0.0.1:1: "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watch_and_leases),
        cmocka_unit_test(test_join_refused),
    };
    return cmocka_run_group_tests(tests, start_etcd, stop_etcd);
}
