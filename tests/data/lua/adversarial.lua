-- Ways a script might try to outlive a limit; m.mode picks one, 0 is a normal call.
function on_epoch_end(m)
  if m.mode == 1 then
    -- a to-be-closed variable whose __close loops while the budget error unwinds
    local guard <close> = setmetatable({}, {__close = function() while true do end end})
    while true do end
  elseif m.mode == 2 then
    -- a __close that replaces the memory error with an ordinary one
    local guard <close> = setmetatable({}, {__close = function() error("replaced") end})
    local s = "x"
    while true do s = s .. s end
  elseif m.mode == 3 then
    -- unbounded recursion
    local function deeper(n) return deeper(n + 1) + 1 end
    return deeper(1)
  elseif m.mode == 4 then
    -- a message handler that fails itself is an ordinary error
    local ok = xpcall(error, function(e) error(e) end, "x")
    return {set = {ok = ok and 1 or 0}}
  elseif m.mode == 5 then
    -- an error object whose __tostring would loop forever if the core called it
    error(setmetatable({}, {__tostring = function() while true do end end}))
  end
  return {lr = 0.03}
end
