-- Patterns whose backtracking takes exponential time, through each pattern function;
-- m.mode picks one. Lua's own matcher would run for hours on any of them.
local s = string.rep("a", 30000)
local p = string.rep("a*", 30) .. "b"
function on_epoch_end(m)
  local mode = m.mode
  if mode == 1 then return {set = {at = string.find(s, p) or 0}} end
  if mode == 2 then return {set = {n = #(s:match(p) or "")}} end
  if mode == 3 then for _ in s:gmatch(p) do end end
  if mode == 4 then return {set = {n = select(2, s:gsub(p, "x"))}} end
  if mode == 5 then
    local ok = pcall(string.find, s, p) -- the budget is not the script's to catch
    return {set = {ok = ok and 1 or 0}}
  end
  if mode == 6 then -- plain find, quadratic: a needle of 500000 "a"s, then "b"
    local big = string.rep("a", 1000000)
    return {set = {at = big:find(string.rep("a", 500000) .. "b", 1, true) or 0}}
  end
  if mode == 7 then -- an ordinary pattern still works within the budget
    local k, v = ("lr = 0.01"):match("^(%w+)%s*=%s*([%d.]+)$")
    return {set = {[k] = tonumber(v), words = select(2, ("a b  c"):gsub("%S+", ""))}}
  end
end
