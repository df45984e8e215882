/* Lua policies (core/src/policy/policy.c): the sandbox, the limits, the exact error
 * messages, the action protocol and scripts/lua/early_stop.lua. Fixtures: tests/data/lua/. */
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

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "policy.h"
#include "policy_pattern.h"

/* ---- Helpers ---- */

/* The repository root: $BIVOUAC_SOURCE_DIR (ctest sets it), else from this file's path. */
static const char *source_dir(void)
{
    static char dir[4096];
    const char *env = getenv("BIVOUAC_SOURCE_DIR");
    if (env && env[0])
        return env;
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *cut = strstr(dir, "/tests/unit/test_policy.c");
    if (cut)
        *cut = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    return dir;
}

static const char *fixture(const char *name)
{
    static char paths[8][4096];
    static int next;
    char *path = paths[next++ % 8];
    if (snprintf(path, sizeof paths[0], "%s/tests/data/lua/%s", source_dir(), name) >=
        (int)sizeof paths[0])
        fail_msg("fixture path too long");
    return path;
}

static const char *early_stop_path(void)
{
    static char path[4096];
    if (snprintf(path, sizeof path, "%s/scripts/lua/early_stop.lua", source_dir()) >=
        (int)sizeof path)
        fail_msg("script path too long");
    return path;
}

/* A writable directory for scripts made by the tests. */
static const char *scratch_dir(void)
{
    const char *dir = getenv("BIVOUAC_BUILD_DIR");
    return dir && dir[0] ? dir : "/tmp";
}

/* Writes len bytes to a new file <scratch>/<stem>XXXXXX.lua; returns its path (static). */
static const char *write_script(const char *stem, const char *text, size_t len)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%sXXXXXX.lua", scratch_dir(), stem);
    int fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

static bv_policy *load_ok(const char *path, const bv_policy_param *params, size_t nparams,
                          const bv_policy_limits *lim)
{
    bv_error err = {0};
    bv_policy *p = NULL;
    bv_status status = bv_policy_load(path, params, nparams, lim, &p, &err);
    if (status != BV_OK)
        print_message("unexpected load error: %s\n", err.msg);
    assert_int_equal(status, BV_OK);
    assert_non_null(p);
    return p;
}

/* Loading path must fail with exactly "<path><suffix>". */
static void assert_load_fails(const char *path, const bv_policy_limits *lim, const char *suffix)
{
    bv_error err = {0};
    bv_policy *p = (bv_policy *)&err; /* must be reset to NULL */
    assert_int_equal(bv_policy_load(path, NULL, 0, lim, &p, &err), BV_ERR_INVALID);
    assert_null(p);
    char expected[2048];
    snprintf(expected, sizeof expected, "%s%s", path, suffix);
    assert_string_equal(err.msg, expected);
}

/* on_epoch_end({mode = mode, epoch = 3, train_loss = 0.25}) */
static bv_status call_mode(bv_policy *p, int mode, bv_policy_actions *out, bv_error *err)
{
    bv_metric m[] = {{"mode", mode}, {"epoch", 3}, {"train_loss", 0.25}};
    return bv_policy_call(p, "epoch_end", m, 3, out, err);
}

/* The call with this mode must fail with exactly "<path><suffix>" and no actions. */
static void assert_call_fails(bv_policy *p, int mode, const char *suffix)
{
    bv_error err = {0};
    bv_policy_actions out;
    memset(&out, 0xAB, sizeof out);
    assert_int_equal(call_mode(p, mode, &out, &err), BV_ERR_INVALID);
    char expected[2048];
    snprintf(expected, sizeof expected, "%s%s", bv_policy_path(p), suffix);
    assert_string_equal(err.msg, expected);
    assert_false(out.stop);
    assert_false(out.set_lr);
    assert_int_equal(out.nsets, 0);
}

static void call_ok(bv_policy *p, int mode, bv_policy_actions *out)
{
    bv_error err = {0};
    bv_status status = call_mode(p, mode, out, &err);
    if (status != BV_OK)
        print_message("unexpected call error: %s\n", err.msg);
    assert_int_equal(status, BV_OK);
}

static double set_value(const bv_policy_actions *a, const char *name)
{
    for (size_t i = 0; i < a->nsets; i++)
        if (strcmp(a->sets[i].name, name) == 0)
            return a->sets[i].value;
    fail_msg("no set entry '%s'", name);
    return 0;
}

/* ---- Loading ---- */

static void test_syntax_error_has_path_and_line(void **state)
{
    assert_load_fails(fixture("syntax_error.lua"), NULL, ":3: unexpected symbol near '='");
}

static void test_missing_file_is_io_error(void **state)
{
    bv_error err = {0};
    bv_policy *p = NULL;
    const char *path = fixture("no_such_policy.lua");
    assert_int_equal(bv_policy_load(path, NULL, 0, NULL, &p, &err), BV_ERR_IO);
    assert_null(p);
    char expected[4200];
    snprintf(expected, sizeof expected, "%s: No such file or directory", path);
    assert_string_equal(err.msg, expected);
}

static void test_bytecode_is_rejected(void **state)
{
    /* A Lua 5.4 binary chunk starts with ESC "Lua" 0x54; the text-only mode refuses it
     * on the first byte, before anything else is read. */
    static const char header[] = "\x1bLua\x54\x00\x19\x93\r\n\x1a\n\x04\x08\x08";
    const char *path = write_script("policy_bytecode_", header, sizeof header - 1);
    assert_load_fails(path, NULL, ": attempt to load a binary chunk (mode is 't')");
    unlink(path);
}

static void test_setup_runtime_error(void **state)
{
    assert_load_fails(fixture("setup_error.lua"), NULL, ":2: bad configuration");
}

static void test_setup_endless_loop_hits_budget(void **state)
{
    bv_policy_limits lim = {.instructions = 50000};
    assert_load_fails(fixture("setup_loop.lua"), &lim,
                      ":3: instruction budget of 50000 exceeded in set-up");
}

static void test_memory_cap_too_small_for_libraries(void **state)
{
    bv_policy_limits lim = {.memory_bytes = 4096};
    assert_load_fails(fixture("actions.lua"), &lim,
                      ": memory cap of 4096 bytes exceeded in set-up");
}

static void test_handler_must_be_a_function(void **state)
{
    assert_load_fails(fixture("not_a_handler.lua"), NULL,
                      ": on_epoch_end is a number, expected a function");
}

static void test_long_path_keeps_whole_path_in_messages(void **state)
{
    /* Lua abbreviates sources longer than 60 bytes to "...tail"; messages must still
     * start with the path as given. */
    static const char text[] = "function on_epoch_end(m)\n  error('boom')\nend\n";
    const char *tmp = write_script(
        "policy_with_a_file_name_long_enough_for_lua_to_abbreviate_it_", text,
        sizeof text - 1);
    char path[4096];
    snprintf(path, sizeof path, "%s", tmp);
    assert_true(strlen(path) > 60);
    bv_policy *p = load_ok(path, NULL, 0, NULL);
    assert_call_fails(p, 0, ":2: boom");
    bv_policy_free(p);
    unlink(path);
}

static void test_shebang_line_is_skipped(void **state)
{
    static const char text[] = "#!/usr/bin/env lua\nfunction on_epoch_end(m)\n"
                               "  error('line three')\nend\n";
    char path[4096];
    snprintf(path, sizeof path, "%s", write_script("policy_shebang_", text, sizeof text - 1));
    bv_policy *p = load_ok(path, NULL, 0, NULL);
    assert_call_fails(p, 0, ":3: line three");
    bv_policy_free(p);
    unlink(path);
}

/* ---- Run-time errors and limits ---- */

static void test_runtime_errors_have_path_and_line(void **state)
{
    bv_policy *p = load_ok(fixture("runtime_error.lua"), NULL, 0, NULL);
    assert_call_fails(p, 1, ":4: boom");
    assert_call_fails(p, 0, ":6: attempt to perform arithmetic on a nil value (field 'missing')");
    bv_policy_free(p);
}

static void test_endless_loop_hits_default_budget(void **state)
{
    bv_policy *p = load_ok(fixture("endless_loop.lua"), NULL, 0, NULL);
    assert_call_fails(p, 1, ":4: instruction budget of 10000000 exceeded in on_epoch_end");
    bv_policy_free(p);
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Lua's matcher runs in C, where the count hook cannot stop it: a pattern with heavy
 * backtracking ran for hours. The sandbox's matcher charges its steps to the budget, so
 * each pattern function ends with the budget error at the calling line, in well under
 * the seconds the budget allows (a limit pcall cannot catch). */
static void test_backtracking_patterns_hit_budget(void **state)
{
    (void)state;
    bv_policy *p = load_ok(fixture("backtracking.lua"), NULL, 0, NULL);
    static const struct {
        int mode;
        const char *suffix;
    } cases[] = {
        {1, ":7: instruction budget of 10000000 exceeded in on_epoch_end"},  /* find */
        {2, ":8: instruction budget of 10000000 exceeded in on_epoch_end"},  /* match */
        {3, ":9: instruction budget of 10000000 exceeded in on_epoch_end"},  /* gmatch */
        {4, ":10: instruction budget of 10000000 exceeded in on_epoch_end"}, /* gsub */
        {5, ":12: instruction budget of 10000000 exceeded in on_epoch_end"}, /* in pcall */
        {6, ":17: instruction budget of 10000000 exceeded in on_epoch_end"}, /* plain find */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double t0 = seconds_now();
        assert_call_fails(p, cases[i].mode, cases[i].suffix);
        double took = seconds_now() - t0;
        if (took > 10)
            fail_msg("mode %d took %.1f s", cases[i].mode, took);
    }
    bv_policy_actions out;
    call_ok(p, 7, &out); /* the policy goes on, and ordinary patterns work */
    assert_int_equal(out.nsets, 2);
    assert_true(set_value(&out, "lr") == 0.01);
    assert_true(set_value(&out, "words") == 3);
    bv_policy_free(p);

    static const char setup[] = "local s = string.rep('a', 30000)\n"
                                "local at = s:find(string.rep('a*', 30) .. 'b')\n";
    const char *path = write_script("policy_backtracking_", setup, sizeof setup - 1);
    assert_load_fails(path, NULL, ":2: instruction budget of 10000000 exceeded in set-up");
    unlink(path);
}

static void count_steps(lua_State *L, void *ud, int64_t steps)
{
    (void)L;
    *(int64_t *)ud += steps;
}

/* The sandbox's find, match, gmatch and gsub give what Lua's string library gives,
 * results and error messages alike, over tests/data/lua/patterns_compare.lua's cases. */
static void test_patterns_agree_with_lua(void **state)
{
    (void)state;
    int64_t steps = 0;
    bv_pattern_meter meter = {count_steps, &steps};
    lua_State *L = luaL_newstate();
    assert_non_null(L);
    luaL_openlibs(L);
    static const char *const names[] = {"find", "match", "gmatch", "gsub"};
    lua_createtable(L, 0, 4);
    lua_getglobal(L, "string");
    for (int i = 0; i < 4; i++) {
        lua_getfield(L, -1, names[i]);
        lua_setfield(L, -3, names[i]);
    }
    lua_pop(L, 1);
    lua_setglobal(L, "REF");
    lua_createtable(L, 0, 4);
    bv_pattern_install(L, -1, &meter);
    lua_setglobal(L, "MINE");
    if (luaL_dofile(L, fixture("patterns_compare.lua")) != LUA_OK)
        fail_msg("%s", lua_tostring(L, -1));
    lua_Integer cases = lua_tointeger(L, -2);
    const char *diffs = lua_tostring(L, -1);
    if (diffs && diffs[0])
        fail_msg("the sandbox's patterns differ from Lua's:\n%.6000s", diffs);
    assert_true(cases > 100000);
    assert_true(steps > 0);
    lua_close(L);
}

static void test_endless_loop_inside_pcall_is_not_swallowed(void **state)
{
    bv_policy_limits lim = {.instructions = 200000};
    bv_policy *p = load_ok(fixture("endless_loop.lua"), NULL, 0, &lim);
    assert_call_fails(p, 2, ":6: instruction budget of 200000 exceeded in on_epoch_end");
    /* xpcall whose message handler loops too: the handler must not run unmetered */
    assert_call_fails(p, 3, ":9: instruction budget of 200000 exceeded in on_epoch_end");
    /* a loop that keeps calling pcall */
    assert_call_fails(p, 4, ":13: instruction budget of 200000 exceeded in on_epoch_end");
    bv_policy_free(p);
}

static void test_budget_is_per_call_and_policy_recovers(void **state)
{
    bv_policy_limits lim = {.instructions = 500000};
    bv_policy *p = load_ok(fixture("endless_loop.lua"), NULL, 0, &lim);
    bv_policy_actions out;
    for (int round = 0; round < 3; round++) {
        assert_call_fails(p, 1, ":4: instruction budget of 500000 exceeded in on_epoch_end");
        call_ok(p, 0, &out);
        assert_true(out.set_lr);
        assert_true(out.lr == 0.01);
        /* 100,000 iterations fit in each call's budget again */
        call_ok(p, 5, &out);
        assert_int_equal(out.nsets, 1);
        assert_true(set_value(&out, "sum") == 5000050000.0);
    }
    bv_policy_free(p);
}

static void test_string_doubling_hits_memory_cap(void **state)
{
    bv_policy *p = load_ok(fixture("memory_bomb.lua"), NULL, 0, NULL);
    assert_call_fails(p, 1, ":5: memory cap of 67108864 bytes exceeded in on_epoch_end");
    bv_policy_free(p);
}

static void test_memory_bombs_inside_pcall_are_not_swallowed(void **state)
{
    bv_policy_limits lim = {.instructions = 100000000, .memory_bytes = 8 << 20};
    bv_policy *p = load_ok(fixture("memory_bomb.lua"), NULL, 0, &lim);
    /* reported at the line that was allocating (memory_bomb.lua) */
    static const int line[6] = {0, 5, 8, 10, 14, 17};
    bv_policy_actions out;
    for (int mode = 1; mode <= 5; mode++) {
        char cap[128];
        snprintf(cap, sizeof cap, ":%d: memory cap of 8388608 bytes exceeded in on_epoch_end",
                 line[mode]);
        assert_call_fails(p, mode, cap);
        /* the garbage of the failed call is collected and the next call works */
        call_ok(p, 0, &out);
        assert_true(out.set_lr);
        assert_true(out.lr == 0.02);
    }
    bv_policy_free(p);
}

static void test_limits_survive_close_and_handlers(void **state)
{
    bv_policy_limits lim = {.instructions = 300000, .memory_bytes = 8 << 20};
    bv_policy *p = load_ok(fixture("adversarial.lua"), NULL, 0, &lim);
    bv_policy_actions out;
    assert_call_fails(p, 1, ":6: instruction budget of 300000 exceeded in on_epoch_end");
    assert_call_fails(p, 2, ":11: memory cap of 8388608 bytes exceeded in on_epoch_end");

    bv_error err = {0};
    assert_int_equal(call_mode(p, 3, &out, &err), BV_ERR_INVALID);
    assert_true(strstr(err.msg, ":14: stack overflow") ||
                strstr(err.msg, ": memory cap of 8388608 bytes exceeded in on_epoch_end"));

    call_ok(p, 4, &out);
    assert_true(set_value(&out, "ok") == 0);
    assert_call_fails(p, 5, ": error in on_epoch_end (error object is a table value)");

    call_ok(p, 0, &out);
    assert_true(out.set_lr);
    assert_true(out.lr == 0.03);
    bv_policy_free(p);
}

/* ---- Sandbox ---- */

static void test_sandbox_libraries(void **state)
{
    /* set-up itself checks what is absent and what is present */
    bv_policy *p = load_ok(fixture("sandbox.lua"), NULL, 0, NULL);
    assert_call_fails(p, 1, ":27: attempt to index a nil value (global 'os')");
    assert_call_fails(p, 2, ":28: attempt to call a nil value (global 'require')");
    assert_call_fails(p, 3, ":29: attempt to call a nil value (global 'load')");
    assert_call_fails(p, 4, ":30: attempt to call a nil value (field 'dump')");
    assert_call_fails(p, 5, ":31: attempt to index a nil value (global 'debug')");
    assert_call_fails(p, 6, ":32: attempt to call a nil value (method 'dump')");
    assert_call_fails(p, 7, ":33: attempt to index a nil value (global 'io')");
    bv_policy_free(p);
}

static void test_globals_are_read_only_after_setup(void **state)
{
    bv_policy *p = load_ok(fixture("readonly.lua"), NULL, 0, NULL);
    assert_call_fails(p, 1, ":5: attempt to set global 'counter'");
    assert_call_fails(p, 2, ":6: attempt to set global 'helper_count'");
    assert_call_fails(p, 6, ":10: attempt to set global 'x'");
    assert_call_fails(p, 8, ":12: attempt to set global 'on_epoch_end'");
    /* the handler is still there */
    assert_true(bv_policy_has_handler(p, "epoch_end"));
    bv_policy_actions out;
    call_ok(p, 9, &out);
    assert_true(set_value(&out, "helper") == 0);
    /* pairs(_G) iterates the real globals: 17 base functions (assert error getmetatable
     * ipairs next pairs pcall print rawequal rawget rawlen select setmetatable tonumber
     * tostring type xpcall), _G, _VERSION, string, table, math, utf8, log, params,
     * plugins, helper_count and on_epoch_end */
    assert_true(set_value(&out, "globals") == 28);
    assert_true(set_value(&out, "mt_hidden") == 1);
    assert_true(set_value(&out, "string_mt_hidden") == 1);
    assert_true(set_value(&out, "method") == 6);
    bv_policy_free(p);
}

static void test_protected_metatables(void **state)
{
    bv_policy *p = load_ok(fixture("readonly.lua"), NULL, 0, NULL);
    assert_call_fails(p, 3, ":7: cannot change a protected metatable");
    assert_call_fails(p, 4, ":8: attempt to set field 'format' of read-only table 'string'");
    assert_call_fails(p, 5, ":9: attempt to set field 'patience' of read-only table 'params'");
    assert_call_fails(p, 7, ":11: __gc metamethods are not allowed in policies");
    bv_policy_free(p);
}

/* ---- Params and actions ---- */

static void test_params_are_typed_and_visible(void **state)
{
    bv_policy_param params[] = {{"patience", "7"}, {"rate", "0.5"}, {"flag", "true"},
                                {"off", "false"}, {"name", "cora"}, {"unset", NULL}};
    bv_policy *p = load_ok(fixture("params.lua"), params, 6, NULL);
    bv_policy_actions out;
    call_ok(p, 0, &out);
    assert_int_equal(out.nsets, 9);
    assert_true(set_value(&out, "patience") == 7);
    assert_true(set_value(&out, "patience_is_integer") == 1);
    assert_true(set_value(&out, "rate") == 0.5);
    assert_true(set_value(&out, "flag") == 1);
    assert_true(set_value(&out, "off") == 1);
    assert_true(set_value(&out, "name_is_string") == 1);
    assert_true(set_value(&out, "name_length") == 4);
    assert_true(set_value(&out, "count") == 5);
    assert_true(set_value(&out, "at_setup") == 7);
    bv_policy_free(p);
}

static void test_actions_are_parsed(void **state)
{
    bv_policy *p = load_ok(fixture("actions.lua"), NULL, 0, NULL);
    bv_policy_actions out;

    call_ok(p, 0, &out); /* nil: nothing */
    assert_false(out.stop);
    assert_false(out.set_lr);
    assert_int_equal(out.nsets, 0);

    call_ok(p, 1, &out);
    assert_true(out.stop);
    assert_string_equal(out.reason, "enough");
    assert_false(out.set_lr);

    call_ok(p, 2, &out);
    assert_false(out.stop);
    assert_true(out.set_lr);
    assert_true(out.lr == 0.005);

    call_ok(p, 3, &out); /* sorted by name */
    assert_int_equal(out.nsets, 2);
    assert_string_equal(out.sets[0].name, "batch");
    assert_true(out.sets[0].value == 512);
    assert_string_equal(out.sets[1].name, "workers");
    assert_true(out.sets[1].value == 8);

    call_ok(p, 4, &out);
    assert_true(out.stop);
    assert_string_equal(out.reason, "all");
    assert_true(out.set_lr);
    assert_true(out.lr == 0.1);
    assert_int_equal(out.nsets, 1);
    assert_string_equal(out.sets[0].name, "workers");
    assert_true(out.sets[0].value == 2);

    call_ok(p, 14, &out);
    assert_false(out.stop);

    call_ok(p, 13, &out); /* log and print */
    assert_false(out.stop);

    call_ok(p, 15, &out); /* ordinary pcall/xpcall still work */
    assert_true(set_value(&out, "ok") == 0);
    assert_true(set_value(&out, "caught") == 1);
    assert_true(set_value(&out, "xok") == 0);
    assert_true(set_value(&out, "handled") == 1);

    call_ok(p, 16, &out); /* whole-number metrics are integers, the rest floats */
    assert_true(set_value(&out, "epoch_is_integer") == 1);
    assert_true(set_value(&out, "loss") == 0.25);
    bv_policy_free(p);
}

static void test_bad_actions_are_errors(void **state)
{
    bv_policy *p = load_ok(fixture("actions.lua"), NULL, 0, NULL);
    assert_call_fails(p, 5, ":8: on_epoch_end returned an unknown action 'stopp'");
    assert_call_fails(p, 6, ":9: on_epoch_end returned action 'lr' as a string, expected a number");
    assert_call_fails(p, 7, ":10: on_epoch_end returned a number, expected nil or a table of actions");
    assert_call_fails(p, 8, ":14: on_epoch_end returned more than 16 'set' entries");
    assert_call_fails(p, 9, ":16: on_epoch_end returned action 'stop' as a string, expected a boolean");
    assert_call_fails(p, 10, ":17: on_epoch_end returned lr = -1, expected a finite number >= 0");
    assert_call_fails(p, 11, ":18: on_epoch_end returned set.workers as a string, expected a number");
    assert_call_fails(p, 12, ":19: on_epoch_end returned an action with a number key");
    /* NaN and infinities compare false with every bound the core checks; a NUL byte
     * would cut the knob's name short in C. */
    assert_call_fails(p, 17, ":37: on_epoch_end returned set.workers = nan, expected a finite number");
    assert_call_fails(p, 18, ":38: on_epoch_end returned set.workers = inf, expected a finite number");
    assert_call_fails(p, 19, ":39: on_epoch_end returned set.batch = -inf, expected a finite number");
    assert_call_fails(p, 20, ":40: on_epoch_end returned a 'set' name with a NUL byte ('wor\\0kers'), expected a plain name");
    assert_call_fails(p, 21, ":41: on_epoch_end returned lr = nan, expected a finite number >= 0");
    assert_call_fails(p, 22, ":42: on_epoch_end returned lr = inf, expected a finite number >= 0");
    bv_policy_free(p);
}

/* {report = {...}}: series for metrics.jsonl, sorted by name, with or without a unit. */
static void test_report_action(void **state)
{
    bv_policy *p = load_ok(fixture("report.lua"), NULL, 0, NULL);
    bv_policy_actions out;
    call_ok(p, 1, &out);
    assert_int_equal(out.nreports, 3);
    assert_string_equal(out.reports[0].name, "alpha");
    assert_string_equal(out.reports[0].unit, "s");
    assert_true(out.reports[0].value == 0.5);
    assert_string_equal(out.reports[1].name, "mid");
    assert_string_equal(out.reports[1].unit, "");
    assert_true(out.reports[1].value == 3);
    assert_string_equal(out.reports[2].name, "zeta");
    assert_true(out.reports[2].value == 2);
    assert_call_fails(p, 2, ":5: on_epoch_end returned action 'report' as a number, expected a table");
    assert_call_fails(p, 3, ":6: on_epoch_end returned report name 'bad name': expected 1 to 47 letters, digits, '_' or '.'");
    assert_call_fails(p, 4, ":7: on_epoch_end returned report.x as a string, expected a number or {number, unit}");
    assert_call_fails(p, 5, ":8: on_epoch_end returned report.x[2] as a number, expected a unit string");
    assert_call_fails(p, 6, ":9: on_epoch_end returned report.x's unit of 30 bytes, expected at most 23");
    assert_call_fails(p, 7, ":10: on_epoch_end returned report.x[1] as a string, expected a number");
    bv_policy_free(p);
}

static void test_handlers_and_missing_handler(void **state)
{
    bv_policy *p = load_ok(fixture("actions.lua"), NULL, 0, NULL);
    assert_true(bv_policy_has_handler(p, "epoch_end"));
    assert_true(bv_policy_has_handler(p, "train_begin"));
    assert_false(bv_policy_has_handler(p, "batch_end"));
    assert_false(bv_policy_has_handler(p, "on_epoch_end"));

    bv_error err = {0};
    bv_policy_actions out;
    memset(&out, 0xAB, sizeof out);
    assert_int_equal(bv_policy_call(p, "batch_end", NULL, 0, &out, &err), BV_OK);
    assert_false(out.stop);
    assert_false(out.set_lr);
    assert_int_equal(out.nsets, 0);

    assert_int_equal(bv_policy_call(p, "train_begin", NULL, 0, &out, &err), BV_OK);
    assert_int_equal(out.nsets, 1);
    assert_string_equal(out.sets[0].name, "ready");
    bv_policy_free(p);
}

/* ---- early_stop.lua ---- */

/* Feeds epochs 1..max_epochs; returns the epoch at which it said stop (0: never). */
static int run_early_stop(bv_policy *p, int max_epochs, double (*loss)(int),
                          double (*accuracy)(int), bv_policy_actions *out)
{
    for (int epoch = 1; epoch <= max_epochs; epoch++) {
        bv_metric m[] = {{"epoch", epoch},
                         {"train_loss", 1.0 / epoch},
                         {"val_loss", loss(epoch)},
                         {"val_accuracy", accuracy(epoch)},
                         {"lr", 0.01}};
        bv_error err = {0};
        bv_status status = bv_policy_call(p, "epoch_end", m, 5, out, &err);
        if (status != BV_OK)
            print_message("early_stop.lua: %s\n", err.msg);
        assert_int_equal(status, BV_OK);
        if (out->stop)
            return epoch;
    }
    return 0;
}

/* Validation loss falls to 0.7123 at epoch 42, ties it at 45, then rises. */
static double loss_best_at_42(int epoch)
{
    if (epoch <= 42)
        return 0.7123 + 0.01 * (42 - epoch);
    if (epoch == 45)
        return 0.7123;
    return 0.7123 + 0.001 * (epoch - 42);
}

/* Loss best (0.5) at epoch 30; accuracy keeps rising to 0.8130 at epoch 40. */
static double loss_best_at_30(int epoch)
{
    return epoch <= 30 ? 0.5 + 0.01 * (30 - epoch) : 0.5 + 0.002 * (epoch - 30);
}

static double accuracy_best_at_40(int epoch)
{
    return epoch <= 40 ? 0.8130 - 0.005 * (40 - epoch) : 0.8130 - 0.001 * (epoch - 40);
}

static void test_early_stop_defaults_to_gcn(void **state)
{
    bv_policy *p = load_ok(early_stop_path(), NULL, 0, NULL);
    bv_policy_actions out;
    assert_int_equal(run_early_stop(p, 200, loss_best_at_42, accuracy_best_at_40, &out), 52);
    assert_string_equal(out.reason, "early stopping: val_loss has not improved for 10 epochs "
                                    "(best 0.7123 at epoch 42)");
    bv_policy_free(p);
}

static void test_early_stop_patience_param(void **state)
{
    bv_policy_param params[] = {{"patience", "5"}, {"monitor", "val_loss"}};
    bv_policy *p = load_ok(early_stop_path(), params, 2, NULL);
    bv_policy_actions out;
    assert_int_equal(run_early_stop(p, 200, loss_best_at_42, accuracy_best_at_40, &out), 47);
    assert_string_equal(out.reason, "early stopping: val_loss has not improved for 5 epochs "
                                    "(best 0.7123 at epoch 42)");
    bv_policy_free(p);
}

static void test_early_stop_gat_mode_waits_for_both(void **state)
{
    /* On val_loss alone it stops 10 epochs after epoch 30 ... */
    bv_policy *p = load_ok(early_stop_path(), NULL, 0, NULL);
    bv_policy_actions out;
    assert_int_equal(run_early_stop(p, 200, loss_best_at_30, accuracy_best_at_40, &out), 40);
    bv_policy_free(p);

    /* ... GAT-style it waits until neither improved for 20 epochs after epoch 40. */
    bv_policy_param params[] = {{"patience", "20"}, {"monitor", "val_loss+val_accuracy"}};
    p = load_ok(early_stop_path(), params, 2, NULL);
    assert_int_equal(run_early_stop(p, 200, loss_best_at_30, accuracy_best_at_40, &out), 60);
    assert_string_equal(out.reason,
                        "early stopping: neither val_loss nor val_accuracy has improved for 20 "
                        "epochs (best val_loss 0.5000 at epoch 30, best val_accuracy 0.8130 at "
                        "epoch 40)");
    bv_policy_free(p);
}

static void test_early_stop_rejects_bad_params(void **state)
{
    bv_policy_param bad_patience[] = {{"patience", "0"}};
    bv_policy_param bad_monitor[] = {{"monitor", "val_acc"}};
    bv_error err = {0};
    bv_policy *p = NULL;
    assert_int_equal(bv_policy_load(early_stop_path(), bad_patience, 1, NULL, &p, &err),
                     BV_ERR_INVALID);
    assert_non_null(strstr(err.msg, "params.patience must be a positive integer, got 0"));
    assert_int_equal(bv_policy_load(early_stop_path(), bad_monitor, 1, NULL, &p, &err),
                     BV_ERR_INVALID);
    assert_non_null(strstr(err.msg, "params.monitor must be"));
    assert_null(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syntax_error_has_path_and_line),
        cmocka_unit_test(test_missing_file_is_io_error),
        cmocka_unit_test(test_bytecode_is_rejected),
        cmocka_unit_test(test_setup_runtime_error),
        cmocka_unit_test(test_setup_endless_loop_hits_budget),
        cmocka_unit_test(test_memory_cap_too_small_for_libraries),
        cmocka_unit_test(test_handler_must_be_a_function),
        cmocka_unit_test(test_long_path_keeps_whole_path_in_messages),
        cmocka_unit_test(test_shebang_line_is_skipped),
        cmocka_unit_test(test_runtime_errors_have_path_and_line),
        cmocka_unit_test(test_endless_loop_hits_default_budget),
        cmocka_unit_test(test_endless_loop_inside_pcall_is_not_swallowed),
        cmocka_unit_test(test_budget_is_per_call_and_policy_recovers),
        cmocka_unit_test(test_string_doubling_hits_memory_cap),
        cmocka_unit_test(test_memory_bombs_inside_pcall_are_not_swallowed),
        cmocka_unit_test(test_limits_survive_close_and_handlers),
        cmocka_unit_test(test_sandbox_libraries),
        cmocka_unit_test(test_globals_are_read_only_after_setup),
        cmocka_unit_test(test_protected_metatables),
        cmocka_unit_test(test_params_are_typed_and_visible),
        cmocka_unit_test(test_actions_are_parsed),
        cmocka_unit_test(test_bad_actions_are_errors),
        cmocka_unit_test(test_report_action),
        cmocka_unit_test(test_handlers_and_missing_handler),
        cmocka_unit_test(test_backtracking_patterns_hit_budget),
        cmocka_unit_test(test_patterns_agree_with_lua),
        cmocka_unit_test(test_early_stop_defaults_to_gcn),
        cmocka_unit_test(test_early_stop_patience_param),
        cmocka_unit_test(test_early_stop_gat_mode_waits_for_both),
        cmocka_unit_test(test_early_stop_rejects_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
