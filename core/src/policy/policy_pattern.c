/* Lua 5.4's patterns (reference manual §6.4.1) with a metered matcher, for the policy
 * sandbox (policy_pattern.h). Results and error messages are those of the string
 * library, which tests/unit/test_policy.c checks case by case; the difference is that
 * each step of the backtracking search is counted and charged to the meter, so that a
 * policy's instruction budget covers pattern matching too. */
#include "policy_pattern.h"

#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <lauxlib.h>

/* Nested matcher calls, as Lua's MAXCCALLS: bounds the C stack ("pattern too complex"). */
#define MAX_DEPTH 200

/* Captures in one pattern, as Lua's LUA_MAXCAPTURES ("too many captures"). */
#define MAX_CAPTURES 32

/* A capture's length while it is open, and for a position capture "()". */
#define CAP_UNFINISHED (-1)
#define CAP_POSITION (-2)

typedef struct matcher {
    lua_State *L;
    const bv_pattern_meter *meter;
    const char *src, *src_end; /* the subject */
    const char *pat_end;
    int64_t steps;             /* done and not charged yet */
    int depth_left;
    int level;                 /* captures opened so far */
    struct {
        const char *start;
        ptrdiff_t len;         /* or CAP_UNFINISHED, CAP_POSITION */
    } cap[MAX_CAPTURES];
} matcher;

static void matcher_init(matcher *m, lua_State *L, const bv_pattern_meter *meter,
                         const char *s, size_t ls, const char *p, size_t lp)
{
    m->L = L;
    m->meter = meter;
    m->src = s;
    m->src_end = s + ls;
    m->pat_end = p + lp;
    m->steps = 0;
}

/* Before each attempt at a new position of the subject. */
static void matcher_restart(matcher *m)
{
    m->level = 0;
    m->depth_left = MAX_DEPTH;
}

/* Hands the steps done so far to the meter, which raises once the budget is spent. */
static void charge_steps(matcher *m)
{
    int64_t steps = m->steps;
    m->steps = 0;
    if (steps > 0)
        m->meter->charge(m->L, m->meter->ud, steps);
}

static void count_steps(matcher *m, int64_t steps)
{
    m->steps += steps;
    if (m->steps >= BV_PATTERN_CHARGE_EVERY)
        charge_steps(m);
}

/* ---- Single character classes ---- */

/* Just past the class that starts at p: "x", "%x" or "[set]". */
static const char *class_end(matcher *m, const char *p)
{
    char c = *p++;
    if (c == '%') {
        if (p >= m->pat_end)
            luaL_error(m->L, "malformed pattern (ends with '%%')");
        return p + 1;
    }
    if (c == '[') {
        if (p < m->pat_end && *p == '^')
            p++;
        do { /* the first member may be ']' itself; "%]" is a member too */
            if (p >= m->pat_end)
                luaL_error(m->L, "malformed pattern (missing ']')");
            if (*p++ == '%' && p < m->pat_end)
                p++;
        } while (p >= m->pat_end || *p != ']');
        return p + 1;
    }
    return p;
}

/* c against %cl: a letter names a class (its upper case the complement), anything else
 * stands for itself. 'z' (the NUL byte) is deprecated in Lua but still there. */
static bool class_has(int c, int cl)
{
    bool in;
    switch (tolower(cl)) {
    case 'a': in = isalpha(c); break;
    case 'c': in = iscntrl(c); break;
    case 'd': in = isdigit(c); break;
    case 'g': in = isgraph(c); break;
    case 'l': in = islower(c); break;
    case 'p': in = ispunct(c); break;
    case 's': in = isspace(c); break;
    case 'u': in = isupper(c); break;
    case 'w': in = isalnum(c); break;
    case 'x': in = isxdigit(c); break;
    case 'z': in = c == 0; break;
    default: return cl == c;
    }
    return islower(cl) ? in : !in;
}

/* c against the set [...] from p (at '[') to close (at its ']'). */
static bool set_has(int c, const char *p, const char *close)
{
    bool member = true;
    if (p[1] == '^') {
        member = false;
        p++;
    }
    while (++p < close) {
        if (*p == '%') {
            p++;
            if (class_has(c, (unsigned char)*p))
                return member;
        } else if (p[1] == '-' && p + 2 < close) {
            p += 2;
            if ((unsigned char)p[-2] <= c && c <= (unsigned char)*p)
                return member;
        } else if ((unsigned char)*p == c) {
            return member;
        }
    }
    return !member;
}

/* Whether the subject character at s matches the class from p to ep. */
static bool single_match(matcher *m, const char *s, const char *p, const char *ep)
{
    if (s >= m->src_end)
        return false;
    count_steps(m, 1);
    int c = (unsigned char)*s;
    switch (*p) {
    case '.': return true;
    case '%': return class_has(c, (unsigned char)p[1]);
    case '[': return set_has(c, p, ep - 1);
    default: return (unsigned char)*p == c;
    }
}

/* ---- The matcher: backtracking, one call per alternative tried ---- */

static const char *match_here(matcher *m, const char *s, const char *p);

/* x*: the longest run first, then shorter ones. */
static const char *match_greedy(matcher *m, const char *s, const char *p, const char *ep)
{
    ptrdiff_t n = 0;
    while (single_match(m, s + n, p, ep))
        n++;
    for (; n >= 0; n--) {
        const char *end = match_here(m, s + n, ep + 1);
        if (end)
            return end;
    }
    return NULL;
}

/* x-: the shortest run first, then longer ones. */
static const char *match_lazy(matcher *m, const char *s, const char *p, const char *ep)
{
    for (;;) {
        const char *end = match_here(m, s, ep + 1);
        if (end)
            return end;
        if (!single_match(m, s, p, ep))
            return NULL;
        s++;
    }
}

static const char *open_capture(matcher *m, const char *s, const char *p, ptrdiff_t what)
{
    if (m->level >= MAX_CAPTURES)
        luaL_error(m->L, "too many captures");
    m->cap[m->level].start = s;
    m->cap[m->level].len = what;
    m->level++;
    const char *end = match_here(m, s, p);
    if (!end)
        m->level--;
    return end;
}

static const char *close_capture(matcher *m, const char *s, const char *p)
{
    int l = m->level - 1;
    while (l >= 0 && m->cap[l].len != CAP_UNFINISHED)
        l--;
    if (l < 0)
        luaL_error(m->L, "invalid pattern capture");
    m->cap[l].len = s - m->cap[l].start;
    const char *end = match_here(m, s, p);
    if (!end)
        m->cap[l].len = CAP_UNFINISHED;
    return end;
}

/* %bxy at p (pointing at x): a balanced run from x to the matching y. */
static const char *match_balanced(matcher *m, const char *s, const char *p)
{
    if (p + 1 >= m->pat_end)
        luaL_error(m->L, "malformed pattern (missing arguments to '%%b')");
    if (s >= m->src_end || *s != p[0])
        return NULL;
    int depth = 1;
    while (++s < m->src_end) {
        count_steps(m, 1);
        if (*s == p[1]) {
            if (--depth == 0)
                return s + 1;
        } else if (*s == p[0]) {
            depth++;
        }
    }
    return NULL;
}

/* %1 to %9: the text of a closed capture again. */
static const char *match_backreference(matcher *m, const char *s, int digit)
{
    int l = digit - '1';
    if (l < 0 || l >= m->level || m->cap[l].len == CAP_UNFINISHED)
        luaL_error(m->L, "invalid capture index %%%d", l + 1);
    ptrdiff_t len = m->cap[l].len;
    count_steps(m, 1 + len / 64);
    if (len >= 0 && m->src_end - s >= len && memcmp(m->cap[l].start, s, (size_t)len) == 0)
        return s + len;
    return NULL; /* a position capture matches no text */
}

/* The end of a match of the pattern from p at s, or NULL. Tail positions loop instead
 * of recursing, so only alternatives (and captures) nest. */
static const char *match_here(matcher *m, const char *s, const char *p)
{
    if (m->depth_left-- == 0)
        luaL_error(m->L, "pattern too complex");
    for (;;) {
        count_steps(m, 1);
        if (p >= m->pat_end)
            break;
        if (*p == '(') {
            if (p + 1 < m->pat_end && p[1] == ')')
                s = open_capture(m, s, p + 2, CAP_POSITION);
            else
                s = open_capture(m, s, p + 1, CAP_UNFINISHED);
            break;
        }
        if (*p == ')') {
            s = close_capture(m, s, p + 1);
            break;
        }
        if (*p == '$' && p + 1 == m->pat_end) {
            s = s == m->src_end ? s : NULL;
            break;
        }
        if (*p == '%' && p + 1 < m->pat_end && p[1] == 'b') {
            s = match_balanced(m, s, p + 2);
            if (!s)
                break;
            p += 4;
            continue;
        }
        if (*p == '%' && p + 1 < m->pat_end && p[1] == 'f') {
            p += 2; /* %f[set]: a frontier, where the set starts to match */
            if (p >= m->pat_end || *p != '[')
                luaL_error(m->L, "missing '[' after '%%f' in pattern");
            const char *ep = class_end(m, p);
            int before = s == m->src ? 0 : (unsigned char)s[-1];
            int here = s < m->src_end ? (unsigned char)*s : 0;
            if (set_has(before, p, ep - 1) || !set_has(here, p, ep - 1)) {
                s = NULL;
                break;
            }
            p = ep;
            continue;
        }
        if (*p == '%' && p + 1 < m->pat_end && isdigit((unsigned char)p[1])) {
            s = match_backreference(m, s, (unsigned char)p[1]);
            if (!s)
                break;
            p += 2;
            continue;
        }
        const char *ep = class_end(m, p);
        char suffix = ep < m->pat_end ? *ep : '\0';
        if (!single_match(m, s, p, ep)) {
            if (suffix == '*' || suffix == '?' || suffix == '-') { /* may match nothing */
                p = ep + 1;
                continue;
            }
            s = NULL;
            break;
        }
        if (suffix == '?') {
            const char *end = match_here(m, s + 1, ep + 1);
            if (end) {
                s = end;
                break;
            }
            p = ep + 1;
            continue;
        }
        if (suffix == '+') {
            s = match_greedy(m, s + 1, p, ep);
            break;
        }
        if (suffix == '*') {
            s = match_greedy(m, s, p, ep);
            break;
        }
        if (suffix == '-') {
            s = match_lazy(m, s, p, ep);
            break;
        }
        s++;
        p = ep;
    }
    m->depth_left++;
    return s;
}

/* ---- Captures to Lua values ---- */

/* Capture i (the whole match s..e when there are none and i is 0). */
static void push_capture(matcher *m, int i, const char *s, const char *e)
{
    if (i >= m->level) {
        if (i != 0)
            luaL_error(m->L, "invalid capture index %%%d", i + 1);
        lua_pushlstring(m->L, s, (size_t)(e - s));
        return;
    }
    ptrdiff_t len = m->cap[i].len;
    if (len == CAP_UNFINISHED)
        luaL_error(m->L, "unfinished capture");
    if (len == CAP_POSITION)
        lua_pushinteger(m->L, (lua_Integer)(m->cap[i].start - m->src) + 1);
    else
        lua_pushlstring(m->L, m->cap[i].start, (size_t)len);
}

/* Every capture; the whole match when there are none and s is not NULL (find gives its
 * positions instead). Returns how many were pushed. */
static int push_captures(matcher *m, const char *s, const char *e)
{
    int n = m->level == 0 && s ? 1 : m->level;
    luaL_checkstack(m->L, n, "too many captures");
    for (int i = 0; i < n; i++)
        push_capture(m, i, s, e);
    return n;
}

/* ---- The library functions ---- */

/* A 1-based start position as string.find takes it (negative: from the end), 0-based. */
static size_t start_offset(lua_Integer pos, size_t len)
{
    if (pos > 0)
        return (size_t)pos - 1;
    if (pos == 0 || pos < -(lua_Integer)len)
        return 0;
    return len - (size_t)(-pos);
}

static bool has_specials(const char *p, size_t lp)
{
    for (size_t i = 0; i < lp; i++)
        if (p[i] && strchr("^$*+?.([%-", p[i]))
            return true;
    return false;
}

/* The first occurrence of p in s, for plain finds: memchr to each candidate. */
static const char *plain_find(matcher *m, const char *s, size_t ls, const char *p, size_t lp)
{
    if (lp == 0)
        return s;
    if (lp > ls)
        return NULL;
    const char *last = s + (ls - lp);
    while (s <= last) {
        const char *at = memchr(s, p[0], (size_t)(last - s) + 1);
        if (!at)
            return NULL;
        count_steps(m, 1 + (int64_t)(lp / 64));
        if (memcmp(at + 1, p + 1, lp - 1) == 0)
            return at;
        s = at + 1;
    }
    return NULL;
}

static const bv_pattern_meter *meter_of(lua_State *L)
{
    return lua_touserdata(L, lua_upvalueindex(1));
}

static int find_or_match(lua_State *L, bool find)
{
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    size_t init = start_offset(luaL_optinteger(L, 3, 1), ls);
    if (init > ls) {
        luaL_pushfail(L);
        return 1;
    }
    matcher m;
    matcher_init(&m, L, meter_of(L), s, ls, p, lp);
    if (find && (lua_toboolean(L, 4) || !has_specials(p, lp))) {
        const char *at = plain_find(&m, s + init, ls - init, p, lp);
        charge_steps(&m);
        if (at) {
            lua_pushinteger(L, (lua_Integer)(at - s) + 1);
            lua_pushinteger(L, (lua_Integer)(at - s) + (lua_Integer)lp);
            return 2;
        }
        luaL_pushfail(L);
        return 1;
    }
    bool anchor = lp > 0 && *p == '^';
    if (anchor)
        p++;
    for (const char *from = s + init;; from++) { /* up to the empty match at the end */
        matcher_restart(&m);
        const char *end = match_here(&m, from, p);
        if (end) {
            charge_steps(&m);
            if (!find)
                return push_captures(&m, from, end);
            lua_pushinteger(L, (lua_Integer)(from - s) + 1);
            lua_pushinteger(L, (lua_Integer)(end - s));
            return push_captures(&m, NULL, NULL) + 2;
        }
        if (anchor || from == m.src_end)
            break;
    }
    charge_steps(&m);
    luaL_pushfail(L);
    return 1;
}

static int pattern_find(lua_State *L)
{
    return find_or_match(L, true);
}

static int pattern_match(lua_State *L)
{
    return find_or_match(L, false);
}

/* gmatch's iterator state: where to look next, and the end of the last match (an empty
 * match right there is skipped, so that the iteration moves on). */
typedef struct gmatch_state {
    size_t next;
    ptrdiff_t last_end; /* -1: none yet */
} gmatch_state;

/* Upvalues: the meter, the subject, the pattern, the state. */
static int gmatch_next(lua_State *L)
{
    size_t ls, lp;
    const char *s = lua_tolstring(L, lua_upvalueindex(2), &ls);
    const char *p = lua_tolstring(L, lua_upvalueindex(3), &lp);
    gmatch_state *g = lua_touserdata(L, lua_upvalueindex(4));
    matcher m;
    matcher_init(&m, L, meter_of(L), s, ls, p, lp);
    for (size_t from = g->next; from <= ls; from++) {
        matcher_restart(&m);
        const char *end = match_here(&m, s + from, p);
        if (end && end - s != g->last_end) {
            g->next = (size_t)(end - s);
            g->last_end = end - s;
            charge_steps(&m);
            return push_captures(&m, s + from, end);
        }
    }
    g->next = ls + 1;
    charge_steps(&m);
    return 0;
}

static int pattern_gmatch(lua_State *L)
{
    size_t ls;
    luaL_checklstring(L, 1, &ls);
    luaL_checkstring(L, 2);
    size_t init = start_offset(luaL_optinteger(L, 3, 1), ls);
    lua_settop(L, 2);
    gmatch_state *g = lua_newuserdatauv(L, sizeof *g, 0);
    g->next = init > ls ? ls + 1 : init;
    g->last_end = -1;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1); /* meter, subject, pattern, state */
    lua_pushcclosure(L, gmatch_next, 4);
    return 1;
}

/* A replacement string: %0 to %9 are captures, %% is '%'. */
static void add_replacement_text(matcher *m, luaL_Buffer *b, const char *s, const char *e)
{
    size_t len;
    const char *r = lua_tolstring(m->L, 3, &len);
    const char *end = r + len;
    count_steps(m, 1 + (int64_t)(len / 64));
    for (const char *pct; (pct = memchr(r, '%', (size_t)(end - r))) != NULL; r = pct + 2) {
        luaL_addlstring(b, r, (size_t)(pct - r));
        char c = pct + 1 < end ? pct[1] : '\0';
        if (c == '%') {
            luaL_addchar(b, '%');
        } else if (c == '0') {
            luaL_addlstring(b, s, (size_t)(e - s));
        } else if (isdigit((unsigned char)c)) {
            push_capture(m, c - '1', s, e);
            luaL_addvalue(b); /* converts a position capture (a number) to text */
        } else {
            luaL_error(m->L, "invalid use of '%%' in replacement string");
        }
    }
    luaL_addlstring(b, r, (size_t)(end - r));
}

/* Adds the replacement of the match s..e; false when it kept the text (a function or
 * table that gave nil or false). */
static bool add_replacement(matcher *m, luaL_Buffer *b, const char *s, const char *e, int type)
{
    lua_State *L = m->L;
    if (type == LUA_TFUNCTION) {
        lua_pushvalue(L, 3);
        int n = push_captures(m, s, e);
        lua_call(L, n, 1);
    } else if (type == LUA_TTABLE) {
        push_capture(m, 0, s, e);
        lua_gettable(L, 3);
    } else {
        add_replacement_text(m, b, s, e);
        return true;
    }
    if (!lua_toboolean(L, -1)) {
        lua_pop(L, 1);
        luaL_addlstring(b, s, (size_t)(e - s));
        return false;
    }
    if (!lua_isstring(L, -1))
        luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
    luaL_addvalue(b);
    return true;
}

static int pattern_gsub(lua_State *L)
{
    size_t ls, lp;
    const char *src = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    int type = lua_type(L, 3);
    lua_Integer max_n = luaL_optinteger(L, 4, (lua_Integer)ls + 1);
    luaL_argexpected(L, type == LUA_TNUMBER || type == LUA_TSTRING ||
                            type == LUA_TFUNCTION || type == LUA_TTABLE,
                     3, "string/function/table");
    bool anchor = lp > 0 && *p == '^';
    if (anchor) {
        p++;
        lp--;
    }
    matcher m;
    matcher_init(&m, L, meter_of(L), src, ls, p, lp);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    const char *last_end = NULL;
    lua_Integer n = 0;
    bool changed = false;
    while (n < max_n) {
        matcher_restart(&m);
        const char *end = match_here(&m, src, p);
        if (end && end != last_end) {
            n++;
            changed = add_replacement(&m, &b, src, end, type) || changed;
            src = last_end = end;
        } else if (src < m.src_end) {
            luaL_addchar(&b, *src++);
        } else {
            break;
        }
        if (anchor)
            break;
    }
    charge_steps(&m);
    if (!changed) {
        lua_pushvalue(L, 1);
    } else {
        luaL_addlstring(&b, src, (size_t)(m.src_end - src));
        luaL_pushresult(&b);
    }
    lua_pushinteger(L, n);
    return 2;
}

void bv_pattern_install(lua_State *L, int idx, const bv_pattern_meter *meter)
{
    static const luaL_Reg functions[] = {
        {"find", pattern_find},
        {"match", pattern_match},
        {"gmatch", pattern_gmatch},
        {"gsub", pattern_gsub},
        {NULL, NULL},
    };
    idx = lua_absindex(L, idx);
    for (const luaL_Reg *f = functions; f->name; f++) {
        lua_pushlightuserdata(L, (void *)meter);
        lua_pushcclosure(L, f->func, 1);
        lua_setfield(L, idx, f->name);
    }
}
