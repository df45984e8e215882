-- Globals can be set during set-up only; library tables and params never.
helper_count = 0

function on_epoch_end(m)
  if m.mode == 1 then counter = 1 end
  if m.mode == 2 then helper_count = helper_count + 1 end
  if m.mode == 3 then setmetatable(_G, nil) end
  if m.mode == 4 then string.format = nil end
  if m.mode == 5 then params.patience = 1 end
  if m.mode == 6 then _G.x = 1 end
  if m.mode == 7 then setmetatable({}, {__gc = function() end}) end
  if m.mode == 8 then on_epoch_end = nil end
  if m.mode == 9 then
    local n = 0
    for _ in pairs(_G) do n = n + 1 end
    return {set = {
      globals = n,
      helper = helper_count,
      mt_hidden = getmetatable(_G) == "read-only" and 1 or 0,
      string_mt_hidden = getmetatable("") == "read-only" and 1 or 0,
      method = #("ab"):rep(3),
    }}
  end
end
