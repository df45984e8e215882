/* string.find, match, gmatch and gsub for the policy sandbox: Lua 5.4's pattern language
 * with every step of the matcher charged to a meter. Lua's own matcher runs in C, where
 * the count hook cannot stop it, so a pattern with heavy backtracking
 * (("a"):rep(30000):find(("a*"):rep(30) .. "b")) ran for hours inside a policy. */
#ifndef BIVOUAC_POLICY_PATTERN_H
#define BIVOUAC_POLICY_PATTERN_H

#include <stdint.h>

#include <lua.h>

/* Pattern steps are reported in batches of this many (and once more when a call ends). */
#define BV_PATTERN_CHARGE_EVERY 1024

typedef struct bv_pattern_meter {
    /* Called with the steps done since the last call. Raises a Lua error (and does not
     * return) once the caller's budget is spent. A step is one comparison of a subject
     * character with a pattern item, or one attempt of the matcher at a position. */
    void (*charge)(lua_State *L, void *ud, int64_t steps);
    void *ud;
} bv_pattern_meter;

/* Sets find, match, gmatch and gsub of the table at idx (the string library) to the
 * metered versions. The meter must outlive L. */
void bv_pattern_install(lua_State *L, int idx, const bv_pattern_meter *meter);

#endif
