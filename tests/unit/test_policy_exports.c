/* Plugin exports called from Lua policies (core/src/policy/policy.c, "Calling plugin
 * exports"): each type of the signature vocabulary in and out, the exact messages for
 * wrong arguments, effectful exports refused in set-up and skipped in a replay, an
 * export's own failure, pointers kept out, the string bound; and a fuzz test that calls
 * the exports with random argument lists for a few seconds (under ASan/UBSan in the
 * sanitizer build): every call either succeeds or is a clean Lua error naming the export. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bivouac/plugin.h"
#include "export_sig.h"
#include "policy.h"

/* ---- The exports under test (plugins.test.t.*) ---- */

static int64_t touched; /* what the effectful export did */

static int64_t ex_add(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b); /* wraps, no UB */
}

static double ex_half(double x)
{
    return x / 2;
}

static bool ex_negate(bool b)
{
    return !b;
}

static const char *ex_greet(const char *name)
{
    static _Thread_local char buf[BV_EXPORT_STRING_MAX + 16];
    snprintf(buf, sizeof buf, "hello %s", name);
    return buf;
}

static int64_t ex_length(const char *s)
{
    return (int64_t)strlen(s);
}

static void ex_touch(int64_t by)
{
    touched = (int64_t)((uint64_t)touched + (uint64_t)by); /* wraps, no UB */
}

static int64_t ex_fail(int64_t code)
{
    bv_export_error("nope %lld", (long long)code);
    return 99;
}

static const char *ex_big(bool null)
{
    static char big[BV_EXPORT_STRING_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    return null ? NULL : big;
}

static const char *ex_mix(int64_t i, const char *s, double d, bool b)
{
    static _Thread_local char buf[64];
    snprintf(buf, sizeof buf, "%lld %.8s %g %d", (long long)i, s, d, (int)b);
    return buf;
}

static int64_t ex_peek(int64_t at, void *where)
{
    return at + (where != NULL);
}

#define FN(f) ((void (*)(void))(void *)(f))

static const bv_policy_export exports[] = {
    {"test", "t", "add", "i:ii", FN(ex_add), 5},
    {"test", "t", "half", "d:d", FN(ex_half), 5},
    {"test", "t", "negate", "b:b", FN(ex_negate), 5},
    {"test", "t", "greet", "s:s", FN(ex_greet), 5},
    {"test", "t", "length", "i:s", FN(ex_length), 5},
    {"test", "t", "touch", "!v:i", FN(ex_touch), 5},
    {"test", "t", "fail", "i:i", FN(ex_fail), 5},
    {"test", "t", "big", "s:b", FN(ex_big), 5},
    {"test", "t", "mix", "s:isdb", FN(ex_mix), 5},
    {"test", "old", "peek", "i:ip", FN(ex_peek), 4}, /* ABI 1.4 'p': left out */
};
#define NEXPORTS (sizeof exports / sizeof exports[0])

/* ---- Helpers ---- */

static char script_path[64];

/* Writes text to a fresh temporary script and loads it with the exports. */
static bv_status load_text(const char *text, bv_policy **p, bv_error *err)
{
    snprintf(script_path, sizeof script_path, "/tmp/bv-exports-XXXXXX");
    int fd = mkstemp(script_path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    bv_status st = bv_policy_load_with(script_path, NULL, 0, exports, NEXPORTS, NULL, p, err);
    unlink(script_path);
    return st;
}

static bv_policy *load_ok(const char *text)
{
    bv_policy *p = NULL;
    bv_error err = {0};
    if (load_text(text, &p, &err) != BV_OK)
        fail_msg("load failed: %s", err.msg);
    return p;
}

static double set_value(const bv_policy_actions *a, const char *name)
{
    for (size_t i = 0; i < a->nsets; i++)
        if (strcmp(a->sets[i].name, name) == 0)
            return a->sets[i].value;
    fail_msg("no set.%s", name);
    return 0;
}

/* on_epoch_end({epoch = mode}) must fail with exactly "<script>:<suffix>". */
static void assert_call_fails(bv_policy *p, int mode, const char *suffix)
{
    bv_metric m = {"epoch", mode};
    bv_policy_actions a;
    bv_error err = {0};
    assert_int_equal(bv_policy_call(p, "epoch_end", &m, 1, &a, &err), BV_ERR_INVALID);
    char want[1024];
    snprintf(want, sizeof want, "%s%s", script_path, suffix);
    assert_string_equal(err.msg, want);
}

/* ---- Tests ---- */

static void test_each_type_goes_in_and_comes_back(void **state)
{
    (void)state;
    bv_policy *p = load_ok(
        "local t = plugins.test.t\n"
        "function on_epoch_end(m)\n"
        "  return {set = {add = t.add(40, 2), add_float = t.add(2.0, 3),\n"
        "                 half = t.half(5), negate = t.negate(false) and 1 or 0,\n"
        "                 greet = #t.greet('bob') == 9 and t.greet('bob') == 'hello bob' and 1 or 0,\n"
        "                 length = t.length('abcd'), integer = math.type(t.add(1, 1)) == 'integer' and 1 or 0,\n"
        "                 mix = t.mix(7, 'words', 0.5, true) == '7 words 0.5 1' and 1 or 0,\n"
        "                 null = t.big(true) == nil and 1 or 0,\n"
        "                 old = plugins.test.old == nil and 1 or 0}}\n"
        "end\n");
    bv_metric m = {"epoch", 1};
    bv_policy_actions a;
    bv_error err = {0};
    assert_int_equal(bv_policy_call(p, "epoch_end", &m, 1, &a, &err), BV_OK);
    assert_true(set_value(&a, "add") == 42);
    assert_true(set_value(&a, "add_float") == 5);
    assert_true(set_value(&a, "half") == 2.5);
    assert_true(set_value(&a, "negate") == 1);
    assert_true(set_value(&a, "greet") == 1);
    assert_true(set_value(&a, "length") == 4);
    assert_true(set_value(&a, "integer") == 1);
    assert_true(set_value(&a, "mix") == 1);
    assert_true(set_value(&a, "null") == 1);
    assert_true(set_value(&a, "old") == 1); /* the pointer export's plugin is not there */
    bv_policy_free(p);
}

static void test_wrong_arguments_are_lua_errors(void **state)
{
    (void)state;
    bv_policy *p = load_ok(
        "local t = plugins.test.t\n"
        "local calls = {\n"
        "  function() return t.add(1) end,\n"                         /* 1 */
        "  function() return t.add(1, 2, 3) end,\n"                   /* 2 */
        "  function() return t.add('1', 2) end,\n"                    /* 3 */
        "  function() return t.add(1, 2.5) end,\n"                    /* 4 */
        "  function() return t.add(1, 2^63) end,\n"                   /* 5 */
        "  function() return t.half(true) end,\n"                     /* 6 */
        "  function() return t.negate(1) end,\n"                      /* 7 */
        "  function() return t.greet(nil) end,\n"                     /* 8 */
        "  function() return t.greet('a\\0b') end,\n"                 /* 9 */
        "  function() return t.greet(('x'):rep(4097)) end,\n"         /* 10 */
        "  function() return t.big(false) end,\n"                     /* 11 */
        "  function() return t.fail(7) end,\n"                        /* 12 */
        "  function() return t.half(0/0 < 1 and {} or {}) end,\n"    /* 13 */
        "}\n"
        "function on_epoch_end(m) calls[m.epoch]() end\n");
    assert_call_fails(p, 1, ":3: test.t.add takes 2 arguments, got 1");
    assert_call_fails(p, 2, ":4: test.t.add takes 2 arguments, got 3");
    assert_call_fails(p, 3, ":5: test.t.add: argument 1 is a string, expected an integer");
    assert_call_fails(p, 4, ":6: test.t.add: argument 2 is 2.5, expected an integer (a whole "
                            "number in int64 range)");
    assert_call_fails(p, 5, ":7: test.t.add: argument 2 is 9.2233720368548e+18, expected an "
                            "integer (a whole number in int64 range)");
    assert_call_fails(p, 6, ":8: test.t.half: argument 1 is a boolean, expected a number");
    assert_call_fails(p, 7, ":9: test.t.negate: argument 1 is a number, expected a boolean");
    assert_call_fails(p, 8, ":10: test.t.greet: argument 1 is nil, expected a string");
    assert_call_fails(p, 9, ":11: test.t.greet: argument 1 has a NUL byte, expected a plain "
                            "string");
    assert_call_fails(p, 10, ":12: test.t.greet: argument 1 is 4097 bytes long, at most 4096");
    assert_call_fails(p, 11, ":13: test.t.big returned a string of more than 4096 bytes");
    assert_call_fails(p, 12, ":14: test.t.fail: nope 7");
    assert_call_fails(p, 13, ":15: test.t.half: argument 1 is a table, expected a number");
    bv_policy_free(p);
}

static void test_effectful_refused_in_setup(void **state)
{
    (void)state;
    bv_policy *p = NULL;
    bv_error err = {0};
    touched = 0;
    assert_int_equal(load_text("local x = 1\nplugins.test.t.touch(1)\n", &p, &err),
                     BV_ERR_INVALID);
    assert_null(p);
    char want[256];
    snprintf(want, sizeof want,
             "%s:2: test.t.touch is effectful: call it from an event handler, not in set-up",
             script_path);
    assert_string_equal(err.msg, want);
    assert_int_equal(touched, 0);
    /* a pure one is fine in set-up */
    p = load_ok("local n = plugins.test.t.add(1, 2)\nassert(n == 3)\n");
    bv_policy_free(p);
}

static void test_effectful_skipped_in_replay(void **state)
{
    (void)state;
    touched = 0;
    bv_policy *p = load_ok("function on_epoch_end(m) plugins.test.t.touch(m.epoch) end\n");
    bv_metric m = {"epoch", 5};
    bv_policy_actions a;
    bv_error err = {0};
    bv_policy_set_replay(p, true);
    assert_int_equal(bv_policy_call(p, "epoch_end", &m, 1, &a, &err), BV_OK);
    assert_int_equal(touched, 0);
    bv_policy_set_replay(p, false);
    assert_int_equal(bv_policy_call(p, "epoch_end", &m, 1, &a, &err), BV_OK);
    assert_int_equal(touched, 5);
    /* arguments are still checked in a replay, so the replay fails where the run did */
    bv_policy_free(p);
    p = load_ok("function on_epoch_end(m) plugins.test.t.touch('x') end\n");
    bv_policy_set_replay(p, true);
    assert_call_fails(p, 1, ":1: test.t.touch: argument 1 is a string, expected an integer");
    bv_policy_free(p);
}

static void test_plugins_table_is_read_only(void **state)
{
    (void)state;
    bv_policy *p = NULL;
    bv_error err = {0};
    assert_int_equal(load_text("plugins.test.t.add = print\n", &p, &err), BV_ERR_INVALID);
    char want[256];
    snprintf(want, sizeof want,
             "%s:1: attempt to set field 'add' of read-only table 'plugins.test.t'", script_path);
    assert_string_equal(err.msg, want);
    assert_int_equal(load_text("setmetatable(plugins.test, nil)\n", &p, &err), BV_ERR_INVALID);
    snprintf(want, sizeof want, "%s:1: cannot change a protected metatable", script_path);
    assert_string_equal(err.msg, want);
    /* listing works */
    p = load_ok("local n = 0\nfor k in pairs(plugins.test.t) do n = n + 1 end\n"
                "assert(n == 9, n)\n");
    bv_policy_free(p);
}

/* The grammar the registry checks descriptors with (runtime/export_sig.c). */
static void assert_sig_bad(const char *sig, unsigned minor, const char *why)
{
    bv_export_sig out;
    char got[160] = "";
    assert_false(bv_export_sig_parse(sig, minor, &out, got, sizeof got));
    assert_string_equal(got, why);
}

static void test_signature_grammar(void **state)
{
    (void)state;
    bv_export_sig s;
    char why[160];
    assert_true(bv_export_sig_parse("s:isdb", 5, &s, why, sizeof why));
    assert_int_equal(s.ret, 's');
    assert_int_equal(s.nargs, 4);
    assert_false(s.effectful);
    assert_true(bv_export_sig_parse("!v:", 5, &s, why, sizeof why));
    assert_true(s.effectful);
    assert_int_equal(s.nargs, 0);
    assert_true(bv_export_sig_parse("i:ip", 4, &s, why, sizeof why)); /* 1.4 had 'p' */
    assert_true(s.has_pointer);
    assert_sig_bad(NULL, 5, "no signature");
    assert_sig_bad("", 5, "missing return type");
    assert_sig_bad("x:", 5, "unknown return type 'x' (expected one of vidbs)");
    assert_sig_bad("i", 5, "expected ':' after the return type");
    assert_sig_bad("i:ip", 5, "unknown argument type 'p' at position 4 (expected one of idbs)");
    assert_sig_bad("p:", 5, "unknown return type 'p' (expected one of vidbs)");
    assert_sig_bad("!i:i", 5, "an effectful ('!') export returns nothing ('v')");
    assert_sig_bad("!v:", 4, "'!' (effectful) needs plugin ABI 1.5");
    assert_sig_bad("b:", 4, "unknown return type 'b' (expected one of vidsp)");
    assert_sig_bad("v:iiiiiiiii", 5, "more than 8 arguments");
    assert_true(bv_export_name_ok("set_threads"));
    assert_true(bv_export_name_ok("_x9"));
    assert_false(bv_export_name_ok(NULL));
    assert_false(bv_export_name_ok(""));
    assert_false(bv_export_name_ok("Threads"));
    assert_false(bv_export_name_ok("9x"));
    assert_false(bv_export_name_ok("a-b"));
    char name[65];
    memset(name, 'a', 64);
    name[64] = '\0';
    assert_false(bv_export_name_ok(name));
    name[63] = '\0';
    assert_true(bv_export_name_ok(name));
}

/* The fuzz test: a policy that calls a random export with a random argument list drawn
 * from awkward values, driven by the seed in the metrics. Every call must succeed or fail
 * with a message that starts with the script's path and names an export. */
static const char fuzz_script[] =
    "local t = plugins.test.t\n"
    "local names = {'add', 'half', 'negate', 'greet', 'length', 'touch', 'fail', 'big', 'mix'}\n"
    "local arity = {2, 1, 1, 1, 1, 1, 1, 1, 4}\n"
    "local values = {0, 1, -1, 2^53, math.maxinteger, math.mininteger, 1.5, -0.0, 1/0, -1/0,\n"
    "  0/0, 1e300, '', 'abc', 'a\\0b', ('y'):rep(5000), ('z'):rep(4096), true, false, {},\n"
    "  print, math.pi, 'nil'}\n"
    "local state\n"
    "local function rand(n)\n"
    "  state = (state * 6364136223846793005 + 1442695040888963407)\n"
    "  return ((state >> 33) % n) + 1\n"
    "end\n"
    "function on_epoch_end(m)\n"
    "  state = m.epoch\n"
    "  local which = rand(#names)\n"
    "  local f = t[names[which]]\n"
    "  local args, n = {}, rand(11) - 1\n"
    "  if rand(2) == 1 then n = arity[which] end -- the right count half of the time\n"
    "  for i = 1, n do\n"
    "    local v = values[rand(#values)]\n"
    "    if v == 'nil' then v = nil end\n"
    "    args[i] = v\n"
    "  end\n"
    "  f(table.unpack(args, 1, n))\n"
    "end\n";

static void test_fuzz_random_arguments(void **state)
{
    (void)state;
    bv_policy *p = load_ok(fuzz_script);
    const char *env = getenv("BIVOUAC_FUZZ_SECONDS");
    double seconds = env ? atof(env) : 3.0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long calls = 0, errors = 0;
    size_t plen = strlen(script_path);
    for (int64_t seed = 1;; seed++) {
        bv_metric m = {"epoch", (double)seed};
        bv_policy_actions a;
        bv_error err = {0};
        bv_status st = bv_policy_call(p, "epoch_end", &m, 1, &a, &err);
        calls++;
        if (st != BV_OK) {
            errors++;
            assert_int_equal(st, BV_ERR_INVALID);
            if (strncmp(err.msg, script_path, plen) != 0 || !strstr(err.msg, "test.t."))
                fail_msg("seed %lld: unexpected message: %s", (long long)seed, err.msg);
        }
        if (seed % 256 == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 >
                seconds)
                break;
        }
    }
    print_message("fuzz: %ld calls, %ld clean errors\n", calls, errors);
    assert_true(errors > 0 && errors < calls);
    bv_policy_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature_grammar),
        cmocka_unit_test(test_each_type_goes_in_and_comes_back),
        cmocka_unit_test(test_wrong_arguments_are_lua_errors),
        cmocka_unit_test(test_effectful_refused_in_setup),
        cmocka_unit_test(test_effectful_skipped_in_replay),
        cmocka_unit_test(test_plugins_table_is_read_only),
        cmocka_unit_test(test_fuzz_random_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
