-- Allocation bombs, plain and behind pcall; m.mode picks one, 0 is a normal call.
function on_epoch_end(m)
  if m.mode == 1 then
    local s = "x"
    while true do s = s .. s end
  elseif m.mode == 2 then
    local t = {}
    for i = 1, math.maxinteger do t[i] = i end
  elseif m.mode == 3 then
    pcall(function() local s = "x" while true do s = s .. s end end)
    return {stop = true, reason = "swallowed"}
  elseif m.mode == 4 then
    local t = {}
    pcall(function() for i = 1, math.maxinteger do t[i] = {} end end)
    return {stop = true, reason = "swallowed"}
  elseif m.mode == 5 then
    return {set = {n = #string.rep("x", 1 << 30)}}
  end
  return {lr = 0.02}
end
