-- Each m.mode returns one shape of actions, good or bad.
function on_epoch_end(m)
  local mode = m.mode
  if mode == 1 then return {stop = true, reason = "enough"} end
  if mode == 2 then return {lr = 0.005} end
  if mode == 3 then return {set = {workers = 8, batch = 512}} end
  if mode == 4 then return {stop = true, reason = "all", lr = 0.1, set = {workers = 2}} end
  if mode == 5 then return {stopp = true} end
  if mode == 6 then return {lr = "fast"} end
  if mode == 7 then return 42 end
  if mode == 8 then
    local t = {}
    for i = 1, 17 do t["k" .. i] = i end
    return {set = t}
  end
  if mode == 9 then return {stop = "yes"} end
  if mode == 10 then return {lr = -1} end
  if mode == 11 then return {set = {workers = "8"}} end
  if mode == 12 then return {true} end
  if mode == 13 then
    log("epoch", m.epoch, "loss", m.train_loss, nil, true)
    print("print goes to the log too")
    return nil
  end
  if mode == 14 then return {stop = false} end
  if mode == 15 then
    local ok, e = pcall(error, "caught")
    local xok, handled = xpcall(function() error("again") end,
                                function(msg) return "handled" end)
    return {set = {ok = ok and 1 or 0, caught = e == "caught" and 1 or 0,
                   xok = xok and 1 or 0, handled = handled == "handled" and 1 or 0}}
  end
  if mode == 16 then
    return {set = {epoch_is_integer = math.type(m.epoch) == "integer" and 1 or 0,
                   loss = m.train_loss}}
  end
  if mode == 17 then return {set = {workers = 0/0}} end
  if mode == 18 then return {set = {workers = math.huge}} end
  if mode == 19 then return {set = {batch = -math.huge}} end
  if mode == 20 then return {set = {["wor\0kers"] = 8}} end
  if mode == 21 then return {lr = 0/0} end
  if mode == 22 then return {lr = math.huge} end
  return nil
end

function on_train_begin()
  return {set = {ready = 1}}
end
