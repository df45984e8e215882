/* Lua training policies (policy.h): one sandboxed Lua 5.4 state per script, with an
 * instruction budget and a heap cap that the script cannot catch with pcall. The
 * embedding follows Redis's scripting engine; docs/policies.md describes the sandbox. */
#include "policy.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include <ffi.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "bivouac/log.h"
#include "export_sig.h"
#include "policy_pattern.h"
#include "series_sink.h"

/* Instructions between two runs of the count hook: small enough that a budget is
 * enforced to within this many instructions, large enough that the hook costs nothing. */
#define HOOK_STEP 1000

enum limit_hit { LIMIT_NONE, LIMIT_BUDGET, LIMIT_MEMORY };

/* One plugin export as the script sees it: plugins.<kind>.<plugin>.<name>, its parsed
 * signature and the libffi call interface prepared once at load. */
typedef struct bridge_export {
    char *qualified; /* "compute.cpu.threads", which starts every message about it */
    char *kind, *plugin, *name;
    bv_export_sig sig;
    void (*fn)(void);
    ffi_cif cif;
    ffi_type *arg_types[BV_EXPORT_MAX_ARGS];
} bridge_export;

struct bv_policy {
    lua_State *L;
    char *path;                   /* as given to bv_policy_load; starts every message */
    char short_src[LUA_IDSIZE];   /* path as Lua abbreviates it in its own messages */
    int64_t budget;               /* instructions per run */
    size_t mem_cap;               /* bytes, whole heap */
    size_t mem_used;
    bool sealed;                  /* set-up is over: globals are read-only */
    bv_pattern_meter meter;       /* charges pattern matching to the budget */
    char **handlers;              /* names of the global on_* functions, fixed at set-up */
    size_t nhandlers;
    bridge_export *exports;       /* what plugins.* reaches */
    size_t nexports;
    bool replay;                  /* effectful exports are skipped (bv_policy_set_replay) */

    /* The run in progress (set-up or one handler call). */
    const char *running;          /* "set-up" or the handler's name */
    int hook_mask;                /* 0 outside a run */
    int hook_step;
    int64_t budget_left;
    enum limit_hit hit;           /* first limit hit in this run; once set, never cleared */
    int hit_line;                 /* where the budget ran out */
    int mem_line;                 /* where an allocation was last refused */
    int return_line;              /* line of the handler's return statement */
    struct {                      /* last allocation refused, to spot Lua's retry after */
        bool valid;               /* its emergency collection */
        const void *ptr;
        size_t osize, nsize;
    } refused;
};

/* Error object raised when a limit is hit: a light userdata needs no allocation, and the
 * C side reads what happened from the policy, not from the object. */
static const char limit_sentinel = 0;

static bv_policy *policy_from(lua_State *L)
{
    void *ud = NULL;
    lua_getallocf(L, &ud);
    return ud;
}

static void policy_hook(lua_State *L, lua_Debug *ar);
static const char *number_text(double v, char buf[32]);

static void arm_hook(bv_policy *p)
{
    int64_t step = p->budget_left < HOOK_STEP ? p->budget_left : HOOK_STEP;
    p->hook_step = step > 0 ? (int)step : 1;
    lua_sethook(p->L, policy_hook, p->hook_mask, p->hook_step);
}

/* Records the first limit hit and makes the hook fire after every instruction, so that
 * script code which catches the error (pcall, __close) gets one instruction at most
 * before it is raised again: control comes back to C whatever the script does. */
static void limit_hit(bv_policy *p, enum limit_hit kind)
{
    if (p->hit == LIMIT_NONE)
        p->hit = kind;
    if (p->L && p->hook_mask)
        lua_sethook(p->L, policy_hook, p->hook_mask, 1);
}

static int raise_limit(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&limit_sentinel);
    return lua_error(L);
}

/* The line of the innermost Lua function on the stack (a C function such as
 * string.rep has none), or 0. Only reads the call stack. */
static int script_line(lua_State *L)
{
    lua_Debug ar;
    for (int level = 0; level < 8 && lua_getstack(L, level, &ar); level++)
        if (lua_getinfo(L, "l", &ar) && ar.currentline > 0)
            return ar.currentline;
    return 0;
}

/* Where the script was when the heap cap was hit. */
static void note_memory_line(bv_policy *p)
{
    if (!p->L || p->hit != LIMIT_NONE)
        return;
    int line = script_line(p->L);
    if (line > 0)
        p->mem_line = line;
}

/* The heap cap. Lua answers a refused allocation with an emergency full collection and
 * then asks again with the same arguments; only a refusal of that retry is a real
 * failure (a first refusal may just be garbage not yet collected). */
static void *policy_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    bv_policy *p = ud;
    size_t old = ptr ? osize : 0; /* for a new block osize is a type tag, not a size */
    if (nsize == 0) {
        free(ptr);
        p->mem_used -= old;
        return NULL;
    }
    if (nsize > old && nsize - old > p->mem_cap - p->mem_used) {
        note_memory_line(p); /* also for a refusal that ends the run without a retry */
        if (p->refused.valid && p->refused.ptr == ptr && p->refused.osize == osize &&
            p->refused.nsize == nsize) {
            limit_hit(p, LIMIT_MEMORY);
        } else {
            p->refused.valid = true;
            p->refused.ptr = ptr;
            p->refused.osize = osize;
            p->refused.nsize = nsize;
        }
        return NULL;
    }
    void *block = realloc(ptr, nsize);
    if (!block)
        return NULL;
    p->mem_used = p->mem_used - old + nsize;
    if (nsize > old)
        p->refused.valid = false;
    return block;
}

/* Return hook: remembers the line of the handler's own return statement (the frame
 * below it is run_handler), so that a malformed action can be reported with a line. */
static int run_handler(lua_State *L);

static void note_handler_return(lua_State *L, lua_Debug *ar, bv_policy *p)
{
    lua_Debug caller;
    if (!lua_getstack(L, 1, &caller) || !lua_getinfo(L, "f", &caller))
        return;
    bool is_handler = lua_tocfunction(L, -1) == run_handler;
    lua_pop(L, 1);
    if (is_handler && lua_getinfo(L, "l", ar) && ar->currentline > 0)
        p->return_line = ar->currentline;
}

/* The instruction budget. Raising from a count hook is allowed; the error unwinds to the
 * nearest protected call, and the sandbox's pcall/xpcall re-raise it (see below). */
static void policy_hook(lua_State *L, lua_Debug *ar)
{
    bv_policy *p = policy_from(L);
    if (ar->event == LUA_HOOKRET) {
        if (p->hit == LIMIT_NONE)
            note_handler_return(L, ar, p);
        return;
    }
    if (p->hit == LIMIT_NONE) {
        p->budget_left -= p->hook_step;
        if (p->budget_left > 0) {
            arm_hook(p);
            return;
        }
        if (lua_getinfo(L, "l", ar))
            p->hit_line = ar->currentline;
        limit_hit(p, LIMIT_BUDGET);
    }
    raise_limit(L);
}

/* The meter of the sandbox's pattern functions (policy_pattern.h): their steps are
 * spent from the same budget as instructions, since the count hook cannot interrupt
 * them. The error is the budget's, at the line that called string.find (or match...). */
static void charge_pattern_steps(lua_State *L, void *ud, int64_t steps)
{
    bv_policy *p = ud;
    if (p->hit == LIMIT_NONE) {
        p->budget_left -= steps;
        if (p->budget_left > 0)
            return;
        p->hit_line = script_line(L);
        limit_hit(p, LIMIT_BUDGET);
    }
    raise_limit(L);
}

/* ---- The sandbox's replacements for base functions ---- */

static int finish_pcall(lua_State *L, int status, int extra)
{
    bv_policy *p = policy_from(L);
    if (status == LUA_ERRMEM)
        limit_hit(p, LIMIT_MEMORY);
    if (p->hit != LIMIT_NONE)
        return raise_limit(L); /* a limit is not the script's to catch */
    if (status != LUA_OK) {
        lua_pushboolean(L, 0);
        lua_pushvalue(L, -2);
        return 2;
    }
    return lua_gettop(L) - extra;
}

/* pcall(f, ...): as Lua's, but a hit limit goes through. */
static int sandbox_pcall(lua_State *L)
{
    luaL_checkany(L, 1);
    lua_pushboolean(L, 1);
    lua_insert(L, 1);
    int status = lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 0);
    return finish_pcall(L, status, 0);
}

/* The message handler xpcall installs around the script's. An error raised by the count
 * hook reaches the message handler while hooks are still off, so the script's handler
 * must not run then: it could loop forever unmetered. */
static int xpcall_handler(lua_State *L)
{
    if (policy_from(L)->hit != LIMIT_NONE)
        return 1;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

/* xpcall(f, msgh, ...): as Lua's, with msgh wrapped by xpcall_handler. */
static int sandbox_xpcall(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, xpcall_handler, 1);
    lua_replace(L, 2);
    lua_pushboolean(L, 1);
    lua_pushvalue(L, 1);
    lua_rotate(L, 3, 2);
    int status = lua_pcall(L, n - 2, LUA_MULTRET, 2);
    return finish_pcall(L, status, 2);
}

/* setmetatable(t, mt): as Lua's, but refuses __gc. Finalizers run with hooks off, so an
 * endless loop in one could not be stopped; errors in them are also silently dropped. */
static int sandbox_setmetatable(lua_State *L)
{
    int t = lua_type(L, 2);
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
    if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
        return luaL_error(L, "cannot change a protected metatable");
    if (t == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        if (lua_rawget(L, 2) != LUA_TNIL)
            return luaL_error(L, "__gc metamethods are not allowed in policies");
        lua_pop(L, 1);
    }
    lua_settop(L, 2);
    lua_setmetatable(L, 1);
    return 1;
}

/* log(...): the arguments, through tostring and separated by spaces, to the log. */
static int policy_log(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        if (i > 1)
            luaL_addchar(&b, ' ');
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    bv_log(BV_LOG_INFO, "policy: %s", lua_tostring(L, -1));
    return 0;
}

/* ---- Read-only tables ----
 * A read-only table is an empty proxy whose metatable reads from the real table
 * (__index), refuses writes (__newindex, which always fires since the proxy stays
 * empty), iterates the real table (__pairs) and hides itself (__metatable). The real
 * table is never handed to the script. */

static int proxy_next(lua_State *L)
{
    lua_settop(L, 2);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 2);
    if (lua_next(L, 3))
        return 2;
    lua_pushnil(L);
    return 1;
}

static int proxy_pairs(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushcclosure(L, proxy_next, 1);
    lua_pushnil(L);
    lua_pushnil(L);
    return 3;
}

static int readonly_newindex(lua_State *L)
{
    const char *table = lua_tostring(L, lua_upvalueindex(1));
    const char *key = luaL_tolstring(L, 2, NULL);
    return luaL_error(L, "attempt to set field '%s' of read-only table '%s'", key, table);
}

/* The globals proxy: writable during set-up (writes go to the real table), read-only
 * afterwards. */
static int globals_newindex(lua_State *L)
{
    if (!policy_from(L)->sealed) {
        lua_settop(L, 3);
        lua_pushvalue(L, lua_upvalueindex(1));
        lua_replace(L, 1);
        lua_rawset(L, 1);
        return 0;
    }
    const char *key = luaL_tolstring(L, 2, NULL);
    return luaL_error(L, "attempt to set global '%s'", key);
}

/* Replaces the table on top of the stack with a proxy for it. newindex is a C function
 * that gets the real table (globals) or the name (anything else) as upvalue. */
static void push_proxy(lua_State *L, lua_CFunction newindex, const char *name)
{
    int real = lua_gettop(L);
    lua_newtable(L);                 /* proxy */
    lua_createtable(L, 0, 4);        /* its metatable */
    lua_pushvalue(L, real);
    lua_setfield(L, -2, "__index");
    if (name)
        lua_pushstring(L, name);
    else
        lua_pushvalue(L, real);
    lua_pushcclosure(L, newindex, 1);
    lua_setfield(L, -2, "__newindex");
    lua_pushvalue(L, real);
    lua_pushcclosure(L, proxy_pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lua_pushliteral(L, "read-only");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_replace(L, real);
}

/* ---- Calling plugin exports (plugins.<kind>.<plugin>.<name>) ----
 * A small, checked surface in the manner of Redis's redis.call: every argument is checked
 * against the export's signature before anything is called, strings are copied in and
 * out, and no pointer ever reaches the script. The export runs on this thread with the
 * instruction budget suspended (the count hook only runs Lua code). */

static ffi_type *ffi_type_of(char t)
{
    switch (t) {
    case 'i': return &ffi_type_sint64;
    case 'd': return &ffi_type_double;
    case 'b': return &ffi_type_uint8; /* C's bool: one byte, 0 or 1 */
    case 's': return &ffi_type_pointer;
    default: return &ffi_type_void;
    }
}

static const char *export_type_name(char t)
{
    switch (t) {
    case 'i': return "an integer";
    case 'd': return "a number";
    case 'b': return "a boolean";
    default: return "a string";
    }
}

typedef union export_value {
    int64_t i;
    double d;
    bool b;
    const char *lua_string; /* checked, not yet copied */
    char *s;                /* the copy the export gets */
} export_value;

/* "nil", "a string", ...: what the script passed, for messages. */
static const char *value_kind(lua_State *L, int k)
{
    if (lua_isnil(L, k))
        return "nil";
    return lua_pushfstring(L, "a %s", luaL_typename(L, k));
}

/* Checks argument k (1-based) against type t and stores it in *v (strings: a pointer into
 * Lua's string, copied later). Raises "<export>: argument k ..." on a mismatch. */
static void check_argument(lua_State *L, const bridge_export *e, int k, char t, export_value *v)
{
    int type = lua_type(L, k);
    if (t == 'i' || t == 'd') {
        if (type != LUA_TNUMBER)
            luaL_error(L, "%s: argument %d is %s, expected %s", e->qualified, k,
                       value_kind(L, k), export_type_name(t));
        if (t == 'd') {
            v->d = lua_tonumber(L, k);
            return;
        }
        int exact = 0;
        v->i = (int64_t)lua_tointegerx(L, k, &exact);
        if (!exact) {
            char text[32];
            luaL_error(L, "%s: argument %d is %s, expected an integer (a whole number in "
                       "int64 range)", e->qualified, k, number_text(lua_tonumber(L, k), text));
        }
        return;
    }
    if (t == 'b') {
        if (type != LUA_TBOOLEAN)
            luaL_error(L, "%s: argument %d is %s, expected a boolean", e->qualified, k,
                       value_kind(L, k));
        v->b = lua_toboolean(L, k);
        return;
    }
    if (type != LUA_TSTRING)
        luaL_error(L, "%s: argument %d is %s, expected a string", e->qualified, k,
                   value_kind(L, k));
    size_t len;
    const char *str = lua_tolstring(L, k, &len);
    if (strlen(str) != len)
        luaL_error(L, "%s: argument %d has a NUL byte, expected a plain string", e->qualified, k);
    if (len > BV_EXPORT_STRING_MAX)
        luaL_error(L, "%s: argument %d is %I bytes long, at most %d", e->qualified, k,
                   (lua_Integer)len, BV_EXPORT_STRING_MAX); /* no %zu in Lua's format */
    v->lua_string = str;
}

static int call_export(lua_State *L)
{
    bv_policy *p = policy_from(L);
    bridge_export *e = lua_touserdata(L, lua_upvalueindex(1));
    if (e->sig.effectful && !p->sealed)
        return luaL_error(L, "%s is effectful: call it from an event handler, not in set-up",
                          e->qualified);
    int n = lua_gettop(L);
    if (n != e->sig.nargs)
        return luaL_error(L, "%s takes %d argument%s, got %d", e->qualified, e->sig.nargs,
                          e->sig.nargs == 1 ? "" : "s", n);
    export_value v[BV_EXPORT_MAX_ARGS];
    for (int k = 0; k < n; k++)
        check_argument(L, e, k + 1, e->sig.args[k], &v[k]);
    if (e->sig.effectful && p->replay)
        return 0; /* its effect happened when the event was first raised */

    /* Copy the strings (no Lua error may be raised while they are held). */
    void *args[BV_EXPORT_MAX_ARGS];
    bool nomem = false;
    for (int k = 0; k < n; k++) {
        if (e->sig.args[k] == 's' && !(v[k].s = strdup(v[k].lua_string))) {
            for (int j = 0; j < k; j++)
                if (e->sig.args[j] == 's')
                    free(v[j].s);
            nomem = true;
            break;
        }
        args[k] = &v[k];
    }
    if (nomem)
        return luaL_error(L, "%s: out of memory copying the arguments", e->qualified);
    union {
        ffi_arg small; /* libffi widens returns narrower than a register to ffi_arg */
        int64_t i;
        double d;
        const char *s;
    } ret = {0};
    bv_export_error_clear();
    ffi_call(&e->cif, e->fn, &ret, n ? args : NULL);
    for (int k = 0; k < n; k++)
        if (e->sig.args[k] == 's')
            free(v[k].s);
    const char *failed = bv_export_error_message();
    if (failed)
        return luaL_error(L, "%s: %s", e->qualified, failed);
    switch (e->sig.ret) {
    case 'i':
        lua_pushinteger(L, (lua_Integer)ret.i);
        return 1;
    case 'd':
        lua_pushnumber(L, ret.d);
        return 1;
    case 'b':
        lua_pushboolean(L, (uint8_t)ret.small != 0);
        return 1;
    case 's': {
        if (!ret.s) {
            lua_pushnil(L);
            return 1;
        }
        size_t len = strnlen(ret.s, BV_EXPORT_STRING_MAX + 1);
        if (len > BV_EXPORT_STRING_MAX)
            return luaL_error(L, "%s returned a string of more than %d bytes", e->qualified,
                              BV_EXPORT_STRING_MAX);
        lua_pushlstring(L, ret.s, len);
        return 1;
    }
    default:
        return 0;
    }
}

/* Replaces every table value of the table on top of the stack by a read-only proxy,
 * depth levels down, then the table itself; name is its dotted name. */
static void proxy_tree(lua_State *L, const char *name, int depth)
{
    if (depth > 0) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -1) == LUA_TTABLE) {
                const char *child = lua_pushfstring(L, "%s.%s", name, lua_tostring(L, -2));
                lua_insert(L, -2);
                proxy_tree(L, child, depth - 1);
                lua_remove(L, -2);
                lua_pushvalue(L, -2);
                lua_insert(L, -2);
                lua_rawset(L, -4); /* an existing key: allowed while traversing */
            } else {
                lua_pop(L, 1);
            }
        }
    }
    push_proxy(L, readonly_newindex, name);
}

/* t[key] on top of the stack, created as a table when missing. */
static void push_subtable(lua_State *L, const char *key)
{
    if (lua_getfield(L, -1, key) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, key);
    }
}

/* The global `plugins`: plugins.<kind>.<plugin>.<name> for every export, all read-only. */
static void push_plugins(lua_State *L, bv_policy *p)
{
    lua_newtable(L);
    for (size_t i = 0; i < p->nexports; i++) {
        bridge_export *e = &p->exports[i];
        push_subtable(L, e->kind);
        push_subtable(L, e->plugin);
        lua_pushlightuserdata(L, e);
        lua_pushcclosure(L, call_export, 1);
        lua_setfield(L, -2, e->name);
        lua_pop(L, 2);
    }
    proxy_tree(L, "plugins", 2);
}

static void free_exports(bv_policy *p)
{
    for (size_t i = 0; i < p->nexports; i++) {
        free(p->exports[i].qualified);
        free(p->exports[i].kind);
        free(p->exports[i].plugin);
        free(p->exports[i].name);
    }
    free(p->exports);
    p->exports = NULL;
    p->nexports = 0;
}

/* Parses each export's signature and prepares its libffi call interface. */
static bv_status prepare_exports(bv_policy *p, const bv_policy_export *exports, size_t n,
                                 bv_error *err)
{
    if (!n)
        return BV_OK;
    if (!(p->exports = calloc(n, sizeof *p->exports)))
        return bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory", p->path);
    for (size_t i = 0; i < n; i++) {
        const bv_policy_export *x = &exports[i];
        bridge_export *e = &p->exports[p->nexports];
        char why[160];
        if (!x->kind || !x->plugin || !bv_export_name_ok(x->name) || !x->fn ||
            !bv_export_sig_parse(x->signature, x->abi_minor, &e->sig, why, sizeof why))
            return bv_error_set(err, BV_ERR_INVALID, "%s: plugin export %zu is malformed",
                                p->path, i);
        if (e->sig.has_pointer)
            continue; /* pointers never reach a script */
        e->fn = x->fn;
        size_t len = strlen(x->kind) + strlen(x->plugin) + strlen(x->name) + 3;
        e->qualified = malloc(len);
        e->kind = strdup(x->kind);
        e->plugin = strdup(x->plugin);
        e->name = strdup(x->name);
        p->nexports++;
        if (!e->qualified || !e->kind || !e->plugin || !e->name)
            return bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory", p->path);
        snprintf(e->qualified, len, "%s.%s.%s", x->kind, x->plugin, x->name);
        for (int k = 0; k < e->sig.nargs; k++)
            e->arg_types[k] = ffi_type_of(e->sig.args[k]);
        if (ffi_prep_cif(&e->cif, FFI_DEFAULT_ABI, (unsigned)e->sig.nargs,
                         ffi_type_of(e->sig.ret), e->arg_types) != FFI_OK)
            return bv_error_set(err, BV_ERR_INTERNAL, "%s: libffi cannot call %s", p->path,
                                e->qualified);
    }
    return BV_OK;
}

/* ---- Set-up ---- */

struct setup_args {
    bv_policy *p;
    const char *text;
    size_t len;
    const bv_policy_param *params;
    size_t nparams;
};

static void open_library(lua_State *L, const char *name, lua_CFunction open)
{
    luaL_requiref(L, name, open, 1);
    lua_pop(L, 1);
}

static void remove_field(lua_State *L, const char *table, const char *field)
{
    lua_getglobal(L, table);
    lua_pushnil(L);
    lua_setfield(L, -2, field);
    lua_pop(L, 1);
}

/* params: numerals become numbers, true/false booleans, the rest strings. */
static void push_params(lua_State *L, const bv_policy_param *params, size_t n)
{
    lua_createtable(L, 0, (int)n);
    for (size_t i = 0; i < n; i++) {
        const char *v = params[i].value;
        if (!v)
            continue;
        if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0)
            lua_pushboolean(L, v[0] == 't');
        else if (lua_stringtonumber(L, v) == 0)
            lua_pushstring(L, v);
        lua_setfield(L, -2, params[i].name);
    }
    push_proxy(L, readonly_newindex, "params");
}

/* Opens the allowed libraries and takes out what a policy must not have: files and
 * processes (io, os, package, require, dofile, loadfile), code loading (load,
 * string.dump: no bytecode ever gets in), introspection (debug), non-determinism
 * (math.random, collectgarbage: the core replays a policy on resume), raw writes that
 * would go around the read-only proxies (rawset), and unmetered C loops (table.move);
 * and replaces the pattern functions of string by metered ones (policy_pattern.c).
 * Leaves the globals proxy on top of the stack. */
static void build_sandbox(lua_State *L, const bv_policy_param *params, size_t nparams)
{
    open_library(L, LUA_GNAME, luaopen_base);
    open_library(L, LUA_STRLIBNAME, luaopen_string);
    open_library(L, LUA_TABLIBNAME, luaopen_table);
    open_library(L, LUA_MATHLIBNAME, luaopen_math);
    open_library(L, LUA_UTF8LIBNAME, luaopen_utf8);

    static const char *const removed[] = {"dofile", "loadfile", "load", "require",
                                          "collectgarbage", "rawset", "warn", NULL};
    for (const char *const *name = removed; *name; name++) {
        lua_pushnil(L);
        lua_setglobal(L, *name);
    }
    remove_field(L, LUA_STRLIBNAME, "dump");
    remove_field(L, LUA_MATHLIBNAME, "random");
    remove_field(L, LUA_MATHLIBNAME, "randomseed");
    remove_field(L, LUA_TABLIBNAME, "move");
    lua_getglobal(L, LUA_STRLIBNAME); /* find, match, gmatch, gsub: metered */
    bv_pattern_install(L, -1, &policy_from(L)->meter);
    lua_pop(L, 1);

    lua_register(L, "pcall", sandbox_pcall);
    lua_register(L, "xpcall", sandbox_xpcall);
    lua_register(L, "setmetatable", sandbox_setmetatable);
    lua_register(L, "log", policy_log);
    lua_register(L, "print", policy_log);

    push_params(L, params, nparams);
    lua_setglobal(L, "params");
    push_plugins(L, policy_from(L));
    lua_setglobal(L, "plugins");

    static const char *const libraries[] = {LUA_STRLIBNAME, LUA_TABLIBNAME,
                                            LUA_MATHLIBNAME, LUA_UTF8LIBNAME, NULL};
    for (const char *const *name = libraries; *name; name++) {
        lua_getglobal(L, *name);
        push_proxy(L, readonly_newindex, *name);
        if (strcmp(*name, LUA_STRLIBNAME) == 0) {
            /* ("x"):rep(3) goes through the string metatable: point it at the proxy */
            lua_pushliteral(L, "");
            lua_getmetatable(L, -1);
            lua_pushvalue(L, -3);
            lua_setfield(L, -2, "__index");
            lua_pushliteral(L, "read-only");
            lua_setfield(L, -2, "__metatable");
            lua_pop(L, 2);
        }
        lua_setglobal(L, *name);
    }

    lua_pushglobaltable(L);
    push_proxy(L, globals_newindex, NULL);
    lua_pushglobaltable(L);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, LUA_GNAME); /* _G is the proxy too */
    lua_pop(L, 1);
}

static void add_handler(lua_State *L, bv_policy *p, const char *name)
{
    char **grown = realloc(p->handlers, (p->nhandlers + 1) * sizeof *grown);
    if (!grown)
        luaL_error(L, "out of memory");
    p->handlers = grown;
    if (!(p->handlers[p->nhandlers] = strdup(name)))
        luaL_error(L, "out of memory");
    p->nhandlers++;
}

/* Runs in protected mode: builds the sandbox, loads the text, runs its top level and
 * records the handlers it defined. */
static int run_setup(lua_State *L)
{
    struct setup_args *a = lua_touserdata(L, 1);
    bv_policy *p = a->p;
    lua_settop(L, 0);

    build_sandbox(L, a->params, a->nparams); /* 1: globals proxy */
    const char *chunkname = lua_pushfstring(L, "@%s", p->path); /* 2 */

    /* Learn how Lua abbreviates the path in messages (long paths get "..."). */
    lua_Debug ar;
    if (luaL_loadbufferx(L, "", 0, chunkname, "t") != LUA_OK)
        return lua_error(L);
    lua_getinfo(L, ">S", &ar);
    memcpy(p->short_src, ar.short_src, sizeof p->short_src);

    if (luaL_loadbufferx(L, a->text, a->len, chunkname, "t") != LUA_OK)
        return lua_error(L); /* syntax error (or binary chunk), with path and line */
    lua_pushvalue(L, 1);
    if (!lua_setupvalue(L, -2, 1)) /* _ENV: every function of the script shares it */
        lua_pop(L, 1);
    lua_call(L, 0, 0);
    p->sealed = true;

    lua_pushglobaltable(L);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) == LUA_TSTRING) {
            const char *name = lua_tostring(L, -2);
            if (strncmp(name, "on_", 3) == 0) {
                if (lua_type(L, -1) != LUA_TFUNCTION)
                    return luaL_error(L, "%s is a %s, expected a function", name,
                                      luaL_typename(L, -1));
                add_handler(L, p, name);
            }
        }
        lua_pop(L, 1);
    }
    return 0;
}

/* ---- Handler calls ---- */

struct call_args {
    bv_policy *p;
    const char *handler;
    const bv_metric *metrics;
    size_t n;
    bv_policy_actions *out;
};

static int raise_action_error(lua_State *L, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "<script>:<line>: on_x returned ..." with the line of the return statement when the
 * return hook saw it. */
static int raise_action_error(lua_State *L, const char *fmt, ...)
{
    bv_policy *p = policy_from(L);
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (p->return_line > 0)
        lua_pushfstring(L, "%s:%d: %s returned %s", p->path, p->return_line, p->running,
                        what);
    else
        lua_pushfstring(L, "%s: %s returned %s", p->path, p->running, what);
    return lua_error(L);
}

/* A number as Lua prints it, with NaN as "nan" whatever its sign bit (0/0 is -nan on
 * x86, and printf would say so). */
static const char *number_text(double v, char buf[32])
{
    if (isnan(v))
        return "nan";
    if (isinf(v))
        return v > 0 ? "inf" : "-inf";
    snprintf(buf, 32, "%.14g", v);
    return buf;
}

static int compare_set_names(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b); /* name is the first member */
}

/* {set = {workers = 8, ...}}: string keys, number values. */
static void parse_sets(lua_State *L, bv_policy_actions *out)
{
    if (lua_type(L, -1) != LUA_TTABLE)
        raise_action_error(L, "action 'set' as a %s, expected a table", luaL_typename(L, -1));
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            raise_action_error(L, "a 'set' entry with a %s key, expected a name",
                               luaL_typename(L, -2));
        size_t len;
        const char *name = lua_tolstring(L, -2, &len);
        if (strlen(name) != len) { /* the core sees C strings: "a\0b" would become "a" */
            luaL_Buffer b;
            luaL_buffinit(L, &b);
            for (size_t i = 0; i < len && i < 64; i++) {
                if (name[i])
                    luaL_addchar(&b, name[i]);
                else
                    luaL_addstring(&b, "\\0");
            }
            luaL_pushresult(&b);
            raise_action_error(L, "a 'set' name with a NUL byte ('%s'), expected a plain name",
                               lua_tostring(L, -1));
        }
        if (lua_type(L, -1) != LUA_TNUMBER)
            raise_action_error(L, "set.%s as a %s, expected a number", name,
                               luaL_typename(L, -1));
        if (name[0] == '\0' || len >= sizeof out->sets[0].name)
            raise_action_error(L, "a 'set' name of %zu bytes, expected 1 to %zu", len,
                               sizeof out->sets[0].name - 1);
        double value = lua_tonumber(L, -1);
        char text[32];
        if (!isfinite(value)) /* a knob set to NaN compares false with every bound */
            raise_action_error(L, "set.%s = %s, expected a finite number", name,
                               number_text(value, text));
        if (out->nsets == BV_POLICY_MAX_SETS)
            raise_action_error(L, "more than %d 'set' entries", BV_POLICY_MAX_SETS);
        strcpy(out->sets[out->nsets].name, name);
        out->sets[out->nsets].value = value;
        out->nsets++;
        lua_pop(L, 1);
    }
    qsort(out->sets, out->nsets, sizeof out->sets[0], compare_set_names);
}

static int compare_report_names(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b); /* each entry starts with its name */
}

/* {report = {name = value, name = {value, "unit"}}}: series for metrics.jsonl and the
 * plots (bivouac/series.h); the loop reports them, the policy only names them. */
static void parse_reports(lua_State *L, bv_policy_actions *out)
{
    if (lua_type(L, -1) != LUA_TTABLE)
        raise_action_error(L, "action 'report' as a %s, expected a table",
                           luaL_typename(L, -1));
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            raise_action_error(L, "a 'report' entry with a %s key, expected a name",
                               luaL_typename(L, -2));
        size_t len;
        const char *name = lua_tolstring(L, -2, &len);
        if (strlen(name) != len || !bv_series_name_ok(name))
            raise_action_error(L, "report name '%s': expected 1 to %d letters, digits, '_' "
                               "or '.'", name, BV_SERIES_NAME_MAX - 1);
        double value = 0;
        const char *unit = "";
        if (lua_type(L, -1) == LUA_TNUMBER) {
            value = lua_tonumber(L, -1);
        } else if (lua_type(L, -1) == LUA_TTABLE) {
            if (lua_rawgeti(L, -1, 1) != LUA_TNUMBER)
                raise_action_error(L, "report.%s[1] as a %s, expected a number", name,
                                   luaL_typename(L, -1));
            value = lua_tonumber(L, -1);
            lua_pop(L, 1);
            int ut = lua_rawgeti(L, -1, 2);
            if (ut != LUA_TNIL && ut != LUA_TSTRING)
                raise_action_error(L, "report.%s[2] as a %s, expected a unit string", name,
                                   luaL_typename(L, -1));
            if (ut == LUA_TSTRING)
                unit = lua_tostring(L, -1);
            if (strlen(unit) >= BV_SERIES_UNIT_MAX)
                raise_action_error(L, "report.%s's unit of %zu bytes, expected at most %d",
                                   name, strlen(unit), BV_SERIES_UNIT_MAX - 1);
            lua_pop(L, 1);
        } else {
            raise_action_error(L, "report.%s as a %s, expected a number or {number, unit}",
                               name, luaL_typename(L, -1));
        }
        if (out->nreports == BV_POLICY_MAX_SETS)
            raise_action_error(L, "more than %d 'report' entries", BV_POLICY_MAX_SETS);
        snprintf(out->reports[out->nreports].name, sizeof out->reports[0].name, "%s", name);
        snprintf(out->reports[out->nreports].unit, sizeof out->reports[0].unit, "%s", unit);
        out->reports[out->nreports].value = value;
        out->nreports++;
        lua_pop(L, 1);
    }
    qsort(out->reports, out->nreports, sizeof out->reports[0], compare_report_names);
}

/* The handler's result, on top of the stack: nil, or a table of actions. Raw access
 * only, so no script code runs here. */
static void parse_actions(lua_State *L, bv_policy_actions *out)
{
    int type = lua_type(L, -1);
    if (type == LUA_TNIL)
        return;
    if (type != LUA_TTABLE)
        raise_action_error(L, "a %s, expected nil or a table of actions",
                           lua_typename(L, type));
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            raise_action_error(L, "an action with a %s key", luaL_typename(L, -2));
        const char *key = lua_tostring(L, -2);
        int vt = lua_type(L, -1);
        if (strcmp(key, "stop") == 0) {
            if (vt != LUA_TBOOLEAN)
                raise_action_error(L, "action 'stop' as a %s, expected a boolean",
                                   lua_typename(L, vt));
            out->stop = lua_toboolean(L, -1);
        } else if (strcmp(key, "reason") == 0) {
            if (vt != LUA_TSTRING)
                raise_action_error(L, "action 'reason' as a %s, expected a string",
                                   lua_typename(L, vt));
            snprintf(out->reason, sizeof out->reason, "%s", lua_tostring(L, -1));
        } else if (strcmp(key, "lr") == 0) {
            if (vt != LUA_TNUMBER)
                raise_action_error(L, "action 'lr' as a %s, expected a number",
                                   lua_typename(L, vt));
            double lr = lua_tonumber(L, -1);
            char text[32];
            if (!isfinite(lr) || lr < 0)
                raise_action_error(L, "lr = %s, expected a finite number >= 0",
                                   number_text(lr, text));
            out->set_lr = true;
            out->lr = lr;
        } else if (strcmp(key, "reconfigure") == 0) {
            if (vt != LUA_TSTRING)
                raise_action_error(L, "action 'reconfigure' as a %s, expected a string",
                                   lua_typename(L, vt));
            size_t len;
            const char *what = lua_tolstring(L, -1, &len);
            if (len == 0 || len >= sizeof out->reconfigure ||
                strspn(what, "abcdefghijklmnopqrstuvwxyz_") != len)
                raise_action_error(L, "reconfigure = '%.40s', expected a decision such as "
                                   "'failover' (lower-case letters, < 32)", what);
            memcpy(out->reconfigure, what, len + 1);
        } else if (strcmp(key, "set") == 0) {
            parse_sets(L, out);
        } else if (strcmp(key, "report") == 0) {
            parse_reports(L, out);
        } else {
            raise_action_error(L, "an unknown action '%s'", key);
        }
        lua_pop(L, 1);
    }
}

/* Metrics that hold whole numbers (epoch, step) become Lua integers, so that they print
 * as 42, not 42.0; the others stay floats. */
static void push_metric(lua_State *L, double v)
{
    if (isfinite(v) && v == floor(v) && fabs(v) < 9007199254740992.0)
        lua_pushinteger(L, (lua_Integer)v);
    else
        lua_pushnumber(L, v);
}

/* Runs in protected mode: m = {metrics}; actions = on_<event>(m). */
static int run_handler(lua_State *L)
{
    struct call_args *a = lua_touserdata(L, 1);
    lua_settop(L, 0);
    lua_getglobal(L, a->handler);
    lua_createtable(L, 0, (int)a->n);
    for (size_t i = 0; i < a->n; i++) {
        push_metric(L, a->metrics[i].value);
        lua_setfield(L, -2, a->metrics[i].name);
    }
    lua_call(L, 1, 1);
    parse_actions(L, a->out);
    return 0;
}

/* ---- Runs and their failures ---- */

/* Turns a failed run into err. The error object is on top of the stack. */
static bv_status report_failure(bv_policy *p, int status, bv_error *err)
{
    lua_State *L = p->L;
    if (p->hit == LIMIT_BUDGET) {
        if (p->hit_line > 0)
            return bv_error_set(err, BV_ERR_INVALID,
                                "%s:%d: instruction budget of %" PRId64 " exceeded in %s",
                                p->path, p->hit_line, p->budget, p->running);
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s: instruction budget of %" PRId64 " exceeded in %s", p->path,
                            p->budget, p->running);
    }
    if (p->hit == LIMIT_MEMORY || status == LUA_ERRMEM) {
        if (p->mem_line > 0)
            return bv_error_set(err, BV_ERR_INVALID,
                                "%s:%d: memory cap of %zu bytes exceeded in %s", p->path,
                                p->mem_line, p->mem_cap, p->running);
        return bv_error_set(err, BV_ERR_INVALID, "%s: memory cap of %zu bytes exceeded in %s",
                            p->path, p->mem_cap, p->running);
    }
    if (lua_type(L, -1) != LUA_TSTRING)
        return bv_error_set(err, BV_ERR_INVALID, "%s: error in %s (error object is a %s value)",
                            p->path, p->running, luaL_typename(L, -1));
    /* Lua's messages start with short_src; ours (and a long path's) with the path. */
    const char *msg = lua_tostring(L, -1);
    size_t nshort = strlen(p->short_src), npath = strlen(p->path);
    if (strncmp(msg, p->path, npath) == 0 && msg[npath] == ':')
        return bv_error_set(err, BV_ERR_INVALID, "%s", msg);
    if (nshort > 0 && strncmp(msg, p->short_src, nshort) == 0 && msg[nshort] == ':')
        return bv_error_set(err, BV_ERR_INVALID, "%s%s", p->path, msg + nshort);
    return bv_error_set(err, BV_ERR_INVALID, "%s: %s", p->path, msg);
}

/* Runs fn(ud) in protected mode under the instruction budget. */
static bv_status run_protected(bv_policy *p, const char *running, lua_CFunction fn, void *ud,
                               int hook_mask, bv_error *err)
{
    lua_State *L = p->L;
    p->running = running;
    p->hit = LIMIT_NONE;
    p->hit_line = 0;
    p->mem_line = 0;
    p->return_line = 0;
    p->refused.valid = false;
    p->budget_left = p->budget;
    p->hook_mask = hook_mask;
    arm_hook(p);

    lua_settop(L, 0);
    lua_pushcfunction(L, fn);
    lua_pushlightuserdata(L, ud);
    int status = lua_pcall(L, 1, 0, 0);
    lua_sethook(L, NULL, 0, 0);
    p->hook_mask = 0;

    bv_status result = BV_OK;
    if (status != LUA_OK) {
        bool memory = p->hit == LIMIT_MEMORY || status == LUA_ERRMEM;
        result = report_failure(p, status, err);
        lua_settop(L, 0);
        if (memory) /* give the garbage of the failed run back before the next one */
            lua_gc(L, LUA_GCCOLLECT);
    }
    lua_settop(L, 0);
    return result;
}

static int policy_panic(lua_State *L)
{
    /* Every call into Lua goes through lua_pcall, so this is a bug in this file. */
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?";
    bv_log(BV_LOG_ERROR, "policy: unprotected Lua error: %s", msg);
    abort();
}

static bv_status read_script(const char *path, char **text, size_t *len, bv_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    bool failed = buf && ferror(f);
    fclose(f);
    if (!buf)
        return bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory reading the script", path);
    if (failed) {
        free(buf);
        return bv_error_set(err, BV_ERR_IO, "%s: read error", path);
    }
    *text = buf;
    *len = n;
    return BV_OK;
}

/* ---- Public API ---- */

bv_status bv_policy_load(const char *path, const bv_policy_param *params, size_t nparams,
                         const bv_policy_limits *lim, bv_policy **out, bv_error *err)
{
    return bv_policy_load_with(path, params, nparams, NULL, 0, lim, out, err);
}

bv_status bv_policy_load_with(const char *path, const bv_policy_param *params, size_t nparams,
                              const bv_policy_export *exports, size_t nexports,
                              const bv_policy_limits *lim, bv_policy **out, bv_error *err)
{
    if (out)
        *out = NULL;
    if (!path || !out || (nparams && !params) || (nexports && !exports))
        return bv_error_set(err, BV_ERR_INVALID, "bv_policy_load: path and out are required");
    if (lim && lim->instructions < 0)
        return bv_error_set(err, BV_ERR_INVALID, "%s: instruction budget must be positive",
                            path);
    for (size_t i = 0; i < nparams; i++)
        if (!params[i].name || !params[i].name[0])
            return bv_error_set(err, BV_ERR_INVALID, "%s: policy parameter %zu has no name",
                                path, i);

    char *text = NULL;
    size_t len = 0;
    bv_status status = read_script(path, &text, &len, err);
    if (status != BV_OK)
        return status;

    bv_policy *p = calloc(1, sizeof *p);
    if (p)
        p->path = strdup(path);
    if (!p || !p->path) {
        free(text);
        bv_policy_free(p);
        return bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory", path);
    }
    p->budget = lim && lim->instructions ? lim->instructions : BV_POLICY_DEFAULT_INSTRUCTIONS;
    p->mem_cap = lim && lim->memory_bytes ? lim->memory_bytes : BV_POLICY_DEFAULT_MEMORY;
    p->meter = (bv_pattern_meter){charge_pattern_steps, p};
    status = prepare_exports(p, exports, nexports, err);
    if (status != BV_OK) {
        free(text);
        bv_policy_free(p);
        return status;
    }

    p->L = lua_newstate(policy_alloc, p);
    if (!p->L) {
        free(text);
        bool capped = p->refused.valid;
        status = capped ? bv_error_set(err, BV_ERR_INVALID,
                                       "%s: memory cap of %zu bytes exceeded in set-up", path,
                                       p->mem_cap)
                        : bv_error_set(err, BV_ERR_NOMEM, "%s: out of memory", path);
        bv_policy_free(p);
        return status;
    }
    lua_atpanic(p->L, policy_panic);

    /* Like luaL_loadfile: skip a UTF-8 byte-order mark and a "#!" line (keeping its
     * newline, so that line numbers stay right). */
    const char *start = text;
    if (len >= 3 && memcmp(start, "\xEF\xBB\xBF", 3) == 0)
        start += 3;
    if (start < text + len && start[0] == '#')
        while (start < text + len && start[0] != '\n')
            start++;

    struct setup_args a = {p, start, len - (size_t)(start - text), params, nparams};
    status = run_protected(p, "set-up", run_setup, &a, LUA_MASKCOUNT, err);
    free(text);
    if (status != BV_OK) {
        bv_policy_free(p);
        return status;
    }
    *out = p;
    return BV_OK;
}

static const char *find_handler(const bv_policy *p, const char *event)
{
    if (!p || !event)
        return NULL;
    for (size_t i = 0; i < p->nhandlers; i++)
        if (strcmp(p->handlers[i] + 3, event) == 0)
            return p->handlers[i];
    return NULL;
}

bool bv_policy_has_handler(const bv_policy *p, const char *event)
{
    return find_handler(p, event) != NULL;
}

bv_status bv_policy_call(bv_policy *p, const char *event, const bv_metric *metrics, size_t n,
                         bv_policy_actions *out, bv_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!p || !event || !out || (n && !metrics))
        return bv_error_set(err, BV_ERR_INVALID, "bv_policy_call: bad arguments");
    for (size_t i = 0; i < n; i++)
        if (!metrics[i].name || !metrics[i].name[0])
            return bv_error_set(err, BV_ERR_INVALID, "%s: metric %zu has no name", p->path, i);
    const char *handler = find_handler(p, event);
    if (!handler)
        return BV_OK;
    struct call_args a = {p, handler, metrics, n, out};
    bv_status status =
        run_protected(p, handler, run_handler, &a, LUA_MASKCOUNT | LUA_MASKRET, err);
    if (status != BV_OK)
        memset(out, 0, sizeof *out);
    return status;
}

bv_status bv_policy_decide(bv_policy *p, const char *event, const bv_metric *metrics, size_t n,
                           const char *const *choices, bv_policy_actions *out,
                           const char **pick, bv_error *err)
{
    *pick = choices[0];
    bv_status st = bv_policy_call(p, event, metrics, n, out, err);
    bool known = false;
    for (size_t i = 0; st == BV_OK && out->reconfigure[0] && choices[i]; i++)
        if (strcmp(choices[i], out->reconfigure) == 0) {
            *pick = choices[i];
            known = true;
        }
    if (st == BV_OK && out->reconfigure[0] && !known) {
        char list[160] = "";
        for (size_t i = 0, k = 0; choices[i] && k < sizeof list; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", choices[i]);
        st = bv_error_set(err, BV_ERR_INVALID, "%s: on_%s chose reconfigure = '%s'; here it "
                          "is one of %s", p->path, event, out->reconfigure, list);
    }
    if (st == BV_OK && (out->stop || out->set_lr || out->nsets))
        st = bv_error_set(err, BV_ERR_INVALID, "%s: on_%s returns reconfigure, reason and "
                          "report only", p->path, event);
    if (st != BV_OK) {
        memset(out, 0, sizeof *out);
        *pick = choices[0];
    }
    return st;
}

void bv_policy_set_replay(bv_policy *p, bool replay)
{
    if (p)
        p->replay = replay;
}

const char *bv_policy_path(const bv_policy *p)
{
    return p ? p->path : NULL;
}

void bv_policy_free(bv_policy *p)
{
    if (!p)
        return;
    if (p->L)
        lua_close(p->L);
    for (size_t i = 0; i < p->nhandlers; i++)
        free(p->handlers[i]);
    free(p->handlers);
    free_exports(p);
    free(p->path);
    free(p);
}
