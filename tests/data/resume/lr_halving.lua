-- lr_halving.lua: halves the learning rate every `every` epochs (default 7), counting the
-- calls itself, so a resumed run only gets the right lr sequence if the core restores
-- the lr from the checkpoint and rebuilds this script's state by replaying the metrics.
local every = math.tointeger(params.every or 7)
local calls = 0
local lr = nil

function on_epoch_end(m)
  calls = calls + 1
  lr = lr or m.lr
  if calls % every == 0 then
    lr = lr * 0.5
    return {lr = lr}
  end
end
