-- A pattern with heavy backtracking in set-up: hours in Lua's own matcher.
local s = string.rep("a", 30000)
local at = s:find(string.rep("a*", 30) .. "b")
