-- Endless loops, plain and behind pcall/xpcall; m.mode picks one, 0 is a normal call.
function on_epoch_end(m)
  if m.mode == 1 then
    while true do end
  elseif m.mode == 2 then
    pcall(function() while true do end end)
    return {stop = true, reason = "swallowed"}
  elseif m.mode == 3 then
    xpcall(function() while true do end end,
           function() while true do end end)
    return {stop = true, reason = "swallowed"}
  elseif m.mode == 4 then
    while true do pcall(error, "again") end
  elseif m.mode == 5 then
    local sum = 0
    for i = 1, 100000 do sum = sum + i end
    return {set = {sum = sum}}
  end
  return {lr = 0.01}
end
